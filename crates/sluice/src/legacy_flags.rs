//! Flag spellings of the release before, still read for one release with a one-line warning
//! each (#33: one spelling per concept across commands, one boolean style).
//!
//! The renamed flags are clap aliases of the new names (hidden from `--help`); clap cannot
//! tell which spelling was used, so the command line is read here first, against the
//! command tree itself (no list of old names to keep in step): a long flag found by an
//! alias, a boolean written `--flag VALUE` (now `--flag=VALUE`, Go's and ingress-nginx's
//! style, so that a value is never taken for the next argument) or with `on`/`off`,
//! `yes`/`no`, `1`/`0` (now `true`/`false`). Each is rewritten to its one spelling and
//! named in a warning; everything else is passed through as it was.

use clap::{Arg, Command};
use std::ffi::OsString;

/// The command line in the current spellings, and what was deprecated in it.
#[derive(Debug, PartialEq, Eq)]
pub struct Normalized {
    /// The arguments, program name first, as clap is to read them.
    pub args: Vec<OsString>,
    /// One line per deprecated spelling, naming the one to use.
    pub warnings: Vec<String>,
}

/// Rewrites `args` (program name first) into the current spellings of `command`'s flags.
/// `command` must be built (`Command::build`), so that global flags are on every
/// subcommand.
pub fn normalize(command: &Command, args: Vec<OsString>) -> Normalized {
    let mut out = Vec::with_capacity(args.len());
    let mut warnings = Vec::new();
    let mut current = command;
    let mut tokens = args.into_iter().peekable();
    if let Some(program) = tokens.next() {
        out.push(program);
    }
    while let Some(token) = tokens.next() {
        let Some(text) = token.to_str().map(str::to_owned) else {
            out.push(token);
            continue;
        };
        if text == "--" {
            out.push(token);
            out.extend(tokens);
            break;
        }
        if let Some(flag) = text.strip_prefix("--") {
            let (name, inline) = match flag.split_once('=') {
                Some((name, value)) => (name, Some(value.to_owned())),
                None => (flag, None),
            };
            let Some(arg) = find_long(current, name) else {
                out.push(token);
                continue;
            };
            let canonical = arg.get_long().unwrap_or(name);
            if canonical != name {
                warnings.push(format!(
                    "--{name} is deprecated and will be removed in the next release; use \
                     --{canonical}"
                ));
            }
            if is_bool(arg) {
                let spaced = match (&inline, tokens.peek().and_then(|t| t.to_str())) {
                    (None, Some(next)) if sluice_proxy::parse_bool(next).is_ok() => {
                        Some(next.to_owned())
                    }
                    _ => None,
                };
                if spaced.is_some() {
                    tokens.next();
                }
                let value = match (inline, spaced) {
                    (Some(value), _) => Some((value, false)),
                    (None, Some(value)) => Some((value, true)),
                    (None, None) => None,
                };
                out.push(match value {
                    None => format!("--{canonical}").into(),
                    Some((value, spaced)) => {
                        let written = if spaced {
                            format!("--{canonical} {value}")
                        } else {
                            format!("--{canonical}={value}")
                        };
                        // A value that does not parse is left for clap to refuse.
                        let value = match sluice_proxy::parse_bool(&value) {
                            Ok(b) if spaced || sluice_proxy::is_legacy_bool(&value) => {
                                warnings.push(format!(
                                    "{written} is deprecated and will be removed in the next \
                                     release; write --{canonical}={b}"
                                ));
                                b.to_string()
                            }
                            _ => value,
                        };
                        format!("--{canonical}={value}").into()
                    }
                });
                continue;
            }
            let takes_next = inline.is_none() && takes_value(arg);
            out.push(match inline {
                Some(value) => format!("--{canonical}={value}").into(),
                None => format!("--{canonical}").into(),
            });
            if takes_next && let Some(value) = tokens.next() {
                out.push(value);
            }
            continue;
        }
        if let Some(shorts) = text.strip_prefix('-')
            && !shorts.is_empty()
        {
            // `-X VALUE`: the next token is the value (`-XVALUE` carries its own).
            let mut chars = shorts.chars();
            let takes_next = match (chars.next(), chars.next()) {
                (Some(short), None) => current
                    .get_arguments()
                    .find(|a| a.get_short() == Some(short))
                    .is_some_and(takes_value),
                _ => false,
            };
            out.push(token);
            if takes_next && let Some(value) = tokens.next() {
                out.push(value);
            }
            continue;
        }
        if let Some(sub) = current.find_subcommand(&text) {
            current = sub;
        }
        out.push(token);
    }
    Normalized {
        args: out,
        warnings,
    }
}

/// The flag of `command` spelt `--name`, by its name or an alias.
fn find_long<'a>(command: &'a Command, name: &str) -> Option<&'a Arg> {
    command.get_arguments().find(|a| {
        a.get_long() == Some(name)
            || a.get_all_aliases()
                .is_some_and(|aliases| aliases.contains(&name))
    })
}

/// A boolean in the one style, `--flag` or `--flag=VALUE` (every such flag of the
/// workspace is declared with `require_equals` and the value name `BOOL`).
fn is_bool(arg: &Arg) -> bool {
    arg.is_require_equals_set()
        && arg
            .get_value_names()
            .is_some_and(|names| names.len() == 1 && names[0] == "BOOL")
}

/// Whether `--flag VALUE` takes the next token as its value.
fn takes_value(arg: &Arg) -> bool {
    arg.get_action().takes_values()
        && !arg.is_require_equals_set()
        && arg.get_num_args().is_none_or(|n| n.min_values() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn command() -> Command {
        let mut command = crate::Cli::command();
        command.build();
        command
    }

    fn run(args: &[&str]) -> (Vec<String>, Vec<String>) {
        let command = command();
        let argv = std::iter::once("sluice")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let n = normalize(&command, argv);
        let args = n
            .args
            .iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        (args, n.warnings)
    }

    #[test]
    fn current_spellings_pass_untouched_without_a_warning() {
        let args = [
            "--log",
            "debug",
            "serve",
            "--manifests",
            "d",
            "--hsts=false",
            "--access-log",
            "--admin-addr",
            "127.0.0.1:1",
            "--controller-class=x/y",
        ];
        assert_eq!(run(&args), (args.map(String::from).to_vec(), vec![]));
        let args = ["explain", "-H", "--admin: x", "http://a/", "-X", "POST"];
        assert_eq!(run(&args), (args.map(String::from).to_vec(), vec![]));
    }

    #[test]
    fn aliases_become_the_new_name_with_a_warning() {
        let (args, warnings) = run(&["explain", "--admin", "h:1", "http://a/"]);
        assert_eq!(args, ["explain", "--admin-addr", "h:1", "http://a/"]);
        assert_eq!(
            warnings,
            ["--admin is deprecated and will be removed in the next release; use --admin-addr"]
        );
        let (args, warnings) = run(&["ingress-manager", "--workers=3", "--namespace", "a"]);
        assert_eq!(
            args,
            [
                "ingress-manager",
                "--concurrent-reconciles=3",
                "--watch-namespace",
                "a"
            ]
        );
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        // `--workers` of serve is the proxy's threads, no alias.
        let (args, warnings) = run(&["serve", "--workers", "3"]);
        assert_eq!(args, ["serve", "--workers", "3"]);
        assert!(warnings.is_empty());
    }

    #[test]
    fn booleans_take_one_style() {
        let (args, warnings) = run(&["serve", "--hsts", "off", "--gzip=on", "--pin-workers"]);
        assert_eq!(
            args,
            ["serve", "--hsts=false", "--gzip=true", "--pin-workers"]
        );
        assert_eq!(
            warnings,
            [
                "--hsts off is deprecated and will be removed in the next release; write \
                 --hsts=false",
                "--gzip=on is deprecated and will be removed in the next release; write \
                 --gzip=true",
            ]
        );
        let (args, _) = run(&["ingress-manager", "--leader-elect", "false"]);
        assert_eq!(args, ["ingress-manager", "--leader-elect=false"]);
        // A positional argument after a boolean is not its value.
        let (args, warnings) = run(&["explain", "--ingress-nginx-compat", "http://a/"]);
        assert_eq!(args, ["explain", "--ingress-nginx-compat", "http://a/"]);
        assert!(warnings.is_empty());
        // A value that is no boolean is left for clap to refuse.
        let (args, _) = run(&["serve", "--hsts=maybe"]);
        assert_eq!(args, ["serve", "--hsts=maybe"]);
    }

    #[test]
    fn values_that_look_like_flags_are_values() {
        let (args, warnings) = run(&["serve", "--proxy-id", "--admin", "--manifests", "d"]);
        assert_eq!(args, ["serve", "--proxy-id", "--admin", "--manifests", "d"]);
        assert!(warnings.is_empty());
        let (args, _) = run(&["serve", "--", "--admin"]);
        assert_eq!(args, ["serve", "--", "--admin"]);
    }

    /// Every flag of every command, with the command's name.
    fn all_flags(command: &Command, path: &str, out: &mut Vec<(String, Arg)>) {
        for arg in command.get_arguments() {
            out.push((path.to_owned(), arg.clone()));
        }
        for sub in command.get_subcommands() {
            all_flags(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }

    /// #33: one boolean style, `--flag` / `--flag=false`, on every command; a flag that is
    /// only ever present (clap's `SetTrue`) could not be turned off again.
    #[test]
    fn every_boolean_of_every_command_has_the_one_style() {
        let mut flags = Vec::new();
        all_flags(&command(), "sluice", &mut flags);
        assert!(flags.len() > 100, "{}", flags.len());
        for (path, arg) in &flags {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            // clap's derive gives every `bool` SetTrue; with a value allowed after `=`
            // (`is_bool`) it reads that value, without it the flag could not be turned off.
            assert!(
                is_bool(arg)
                    || !matches!(
                        arg.get_action(),
                        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
                    ),
                "{path} --{id}: a presence-only boolean"
            );
            let named_bool = arg.get_value_names().is_some_and(|n| n == ["BOOL"]);
            assert_eq!(
                named_bool,
                is_bool(arg),
                "{path} --{id}: BOOL without require_equals, or the reverse"
            );
        }
    }

    /// #33: a flag spelt alike on two commands takes the same kind of value there.
    #[test]
    fn a_flag_on_several_commands_takes_one_kind_of_value() {
        let mut flags = Vec::new();
        all_flags(&command(), "sluice", &mut flags);
        let mut seen = std::collections::BTreeMap::new();
        for (path, arg) in &flags {
            let Some(long) = arg.get_long() else {
                continue;
            };
            let names: Vec<String> = arg
                .get_value_names()
                .unwrap_or_default()
                .iter()
                .map(|n| n.to_string())
                .collect();
            // `explain --admin-addr` connects (a host name will do); the others listen there.
            if long == "admin-addr" && path.ends_with("explain") {
                continue;
            }
            if let Some((first, earlier)) =
                seen.insert(long.to_owned(), (path.clone(), names.clone()))
            {
                assert_eq!(earlier, names, "--{long} on {first} and {path}");
            }
        }
    }
}
