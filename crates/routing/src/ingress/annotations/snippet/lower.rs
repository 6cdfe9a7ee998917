//! Directives to what sluice applies: the values of [`crate::Policy`] where a directive is
//! a constant (a field set or removed), [`SnippetRules`] where it depends on the request,
//! and a refusal naming the directive and its line for everything else.

use http::{HeaderName, HeaderValue};

use super::parse::{Arg, Directive};
use crate::snippet_rules::{
    AddHeader, Condition, HeaderPattern, Part, RewriteFlag, SnippetRules, Step, Template, Var,
};

/// Where a snippet goes in ingress-nginx's nginx.conf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    /// `configuration-snippet`: the location of each path.
    Location,
    /// `server-snippet`: the server of each host.
    Server,
}

/// A directive sluice does not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused {
    /// Its line in the snippet.
    pub line: usize,
    /// Its name.
    pub name: String,
    /// Why.
    pub why: String,
    /// Its text, for the fail-closed check.
    pub text: String,
}

/// What a snippet comes to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Lowered {
    /// Request fields set to constants (`proxy_set_header`, `more_set_input_headers`).
    pub request_set: Vec<(HeaderName, HeaderValue)>,
    /// Request fields removed (an empty value, `more_clear_input_headers`).
    pub request_remove: Vec<HeaderName>,
    /// `proxy_set_header Host <constant>`.
    pub upstream_vhost: Option<HeaderValue>,
    /// Response fields set to constants (`more_set_headers`).
    pub response_set: Vec<(HeaderName, HeaderValue)>,
    /// Response fields cleared by name (`more_clear_headers`, `more_set_headers 'X:'`).
    pub response_remove: Vec<HeaderName>,
    /// `add_header ... always` with a constant.
    pub response_add: Vec<(HeaderName, HeaderValue)>,
    /// What depends on the request.
    pub rules: SnippetRules,
    /// `line N: name` of each directive applied.
    pub interpreted: Vec<String>,
    /// The others.
    pub refused: Vec<Refused>,
}

/// Fields a snippet may not set: hop-by-hop and framing, which sluice owns.
const FRAMING: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];

/// Lowers the directives of one snippet.
pub(crate) fn lower(directives: &[Directive], level: Level) -> Lowered {
    let mut out = Lowered::default();
    for directive in directives {
        match lower_one(directive, level, &mut out) {
            Ok(()) => out
                .interpreted
                .push(format!("line {}: {}", directive.line, directive.name)),
            Err(why) => out.refused.push(Refused {
                line: directive.line,
                name: directive.name.clone(),
                why,
                text: directive.text.clone(),
            }),
        }
    }
    out
}

fn lower_one(d: &Directive, level: Level, out: &mut Lowered) -> Result<(), String> {
    if d.block.is_some() && d.name != "if" {
        return Err("blocks other than if are not interpreted".to_owned());
    }
    match d.name.as_str() {
        "more_set_headers" => {
            for (name, value) in set_headers(d, &["-s", "-t"])? {
                match value {
                    None => out.response_remove.push(name),
                    Some(value) => match value.constant() {
                        Some(text) => out.response_set.push((name, header_value(&text)?)),
                        None => out.rules.response_set.push((name, value)),
                    },
                }
            }
            Ok(())
        }
        "more_clear_headers" => {
            for pattern in clear_headers(d)? {
                match pattern {
                    HeaderPattern::Exact(name) => out.response_remove.push(name),
                    prefix => out.rules.response_clear.push(prefix),
                }
            }
            Ok(())
        }
        "add_header" => {
            let add = add_header(d)?;
            match (add.always, add.value.constant()) {
                (true, Some(text)) if !text.is_empty() => {
                    out.response_add.push((add.name, header_value(&text)?));
                }
                _ => out.rules.response_add.push(add),
            }
            Ok(())
        }
        "proxy_set_header" if level == Level::Server => Err(
            "ignored by nginx at the server level: ingress-nginx's locations set their own \
             proxy_set_header"
                .to_owned(),
        ),
        "proxy_set_header" => {
            let [name, value] = exact_args(d)?;
            request_field(&name.text, &value.text, out)
        }
        "more_set_input_headers" if level == Level::Server => {
            Err("not interpreted at the server level; use it in configuration-snippet".to_owned())
        }
        "more_set_input_headers" => {
            for (name, value) in set_headers(d, &["-r", "-t"])? {
                match value {
                    None => out.request_remove.push(name),
                    Some(value) => request_template(name, value, out)?,
                }
            }
            Ok(())
        }
        "more_clear_input_headers" => {
            for pattern in clear_headers(d)? {
                match pattern {
                    HeaderPattern::Exact(name) => out.request_remove.push(name),
                    HeaderPattern::Prefix(_) => {
                        return Err("wildcards are not interpreted for request fields".to_owned());
                    }
                }
            }
            Ok(())
        }
        "return" | "rewrite" | "if" => {
            let step = step(d, level, true)?;
            out.rules.steps.push(step);
            Ok(())
        }
        _ => Err("not one of the directives sluice interprets".to_owned()),
    }
}

/// A rewrite-phase directive (or, inside `if`, a response field one) as a [`Step`].
fn step(d: &Directive, level: Level, top: bool) -> Result<Step, String> {
    match (d.name.as_str(), &d.block) {
        ("if", None) => return Err("if without a block".to_owned()),
        ("if", Some(_)) => {}
        (_, Some(_)) => return Err("blocks other than if are not interpreted".to_owned()),
        (_, None) => {}
    }
    match d.name.as_str() {
        "return" => return_step(d),
        "rewrite" => {
            let (pattern, replacement, flag) = match d.args.as_slice() {
                [p, r] => (p, r, RewriteFlag::Continue),
                [p, r, f] => (
                    p,
                    r,
                    match f.text.as_str() {
                        "last" | "break" => RewriteFlag::Break,
                        "redirect" => RewriteFlag::Redirect,
                        "permanent" => RewriteFlag::Permanent,
                        other => return Err(format!("unknown flag {other:?}")),
                    },
                ),
                _ => return Err("takes a regex, a replacement and an optional flag".to_owned()),
            };
            let regex = regex(&pattern.text, false)?;
            let replacement = template(&replacement.text)?;
            let redirects = matches!(flag, RewriteFlag::Redirect | RewriteFlag::Permanent)
                || replacement.is_absolute_url();
            if level == Level::Server && !redirects {
                return Err(
                    "a server-level rewrite that does not redirect changes which path matches; \
                     not interpreted"
                        .to_owned(),
                );
            }
            Ok(Step::Rewrite {
                regex,
                replacement,
                flag,
            })
        }
        "if" if top => {
            let condition = condition(&d.args)?;
            let mut then = Vec::new();
            for inner in d.block.as_deref().unwrap_or_default() {
                let step = step(inner, level, false)
                    .map_err(|why| format!("line {} ({}) inside: {why}", inner.line, inner.name))?;
                then.push(step);
            }
            Ok(Step::If { condition, then })
        }
        "more_set_headers" if !top => {
            let mut fields = set_headers(d, &["-s", "-t"])?;
            if fields.len() != 1 {
                return Err("inside if, one field per more_set_headers".to_owned());
            }
            let (name, value) = fields.remove(0);
            Ok(match value {
                Some(value) => Step::SetResponse(name, value),
                None => Step::ClearResponse(HeaderPattern::Exact(name)),
            })
        }
        "more_clear_headers" if !top => {
            let mut patterns = clear_headers(d)?;
            if patterns.len() != 1 {
                return Err("inside if, one field per more_clear_headers".to_owned());
            }
            Ok(Step::ClearResponse(patterns.remove(0)))
        }
        "add_header" if !top => Ok(Step::AddResponse(add_header(d)?)),
        _ => Err("not interpreted here".to_owned()),
    }
}

/// nginx `return code [text]`, `return code URL` (301, 302, 303, 307, 308), `return URL`
/// (302).
fn return_step(d: &Directive) -> Result<Step, String> {
    let (first, text) = match d.args.as_slice() {
        [first] => (first, None),
        [first, text] => (first, Some(template(&text.text)?)),
        _ => return Err("takes a status and an optional text or URL".to_owned()),
    };
    let Ok(status) = first.text.parse::<u16>() else {
        let url = template(&first.text)?;
        if text.is_some() || !url.is_absolute_url() {
            return Err(format!(
                "{:?} is not a status nor an absolute URL",
                first.text
            ));
        }
        return Ok(Step::Return {
            status: 302,
            text: Some(url),
        });
    };
    if status == 444 {
        return Err("444 (close without an answer) is not interpreted".to_owned());
    }
    if !(200..=599).contains(&status) {
        return Err(format!("status {status} is not interpreted (200 to 599)"));
    }
    Ok(Step::Return { status, text })
}

/// `if` conditions: `($var)`, `($var = v)`, `!=`, `~`, `~*`, `!~`, `!~*`.
fn condition(args: &[Arg]) -> Result<Condition, String> {
    let mut words: Vec<String> = args.iter().map(|a| a.text.clone()).collect();
    let open = words
        .first_mut()
        .and_then(|first| first.strip_prefix('(').map(str::to_owned));
    let Some(open) = open else {
        return Err("the condition must be in parentheses".to_owned());
    };
    words[0] = open;
    let last = words.len() - 1;
    let Some(close) = words[last].strip_suffix(')').map(str::to_owned) else {
        return Err("the condition must be in parentheses".to_owned());
    };
    words[last] = close;
    words.retain(|w| !w.is_empty());
    let var = |text: &str| -> Result<Var, String> {
        match template(text)?.0.as_slice() {
            [Part::Var(var)] => Ok(var.clone()),
            _ => Err(format!(
                "{text:?}: only a variable may be tested (file tests such as -f are not interpreted)"
            )),
        }
    };
    match words.as_slice() {
        [v] => Ok(Condition::Set(var(v)?)),
        [v, op, operand] => {
            let var = var(v)?;
            match op.as_str() {
                "=" | "!=" => Ok(Condition::Equals {
                    var,
                    value: template(operand)?,
                    negate: op == "!=",
                }),
                "~" | "~*" | "!~" | "!~*" => Ok(Condition::Matches {
                    var,
                    regex: regex(operand, op.ends_with('*'))?,
                    negate: op.starts_with('!'),
                }),
                other => Err(format!("operator {other:?} is not interpreted")),
            }
        }
        _ => Err("not a condition sluice interprets ($var, = != ~ ~* !~ !~*)".to_owned()),
    }
}

/// A regex as nginx's PCRE reads it, where Rust's `regex` has the same meaning.
fn regex(pattern: &str, case_insensitive: bool) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            let first = e.to_string();
            let first = first.lines().last().unwrap_or_default().to_owned();
            format!("regex {pattern:?} is not supported ({first})")
        })
}

/// `"Name: value"` arguments of `more_set_headers`/`more_set_input_headers`; `None` for
/// an empty value (the field is cleared, as headers-more does).
fn set_headers(
    d: &Directive,
    options: &[&str],
) -> Result<Vec<(HeaderName, Option<Template>)>, String> {
    let mut out = Vec::new();
    for arg in &d.args {
        if !arg.quoted && arg.text.starts_with('-') {
            let option = &arg.text[..2.min(arg.text.len())];
            if options.contains(&option) {
                return Err(format!("option {option} is not interpreted"));
            }
            return Err(format!("unknown option {:?}", arg.text));
        }
        let Some((name, value)) = arg.text.split_once(':') else {
            return Err(format!("{:?} is not \"Name: value\"", arg.text));
        };
        let name = field_name(name.trim())?;
        let value = value.trim_start_matches([' ', '\t']);
        out.push((
            name,
            (!value.is_empty()).then(|| template(value)).transpose()?,
        ));
    }
    if out.is_empty() {
        return Err("names no field".to_owned());
    }
    Ok(out)
}

/// Arguments of `more_clear_headers`/`more_clear_input_headers`: names, a final `*` for a
/// prefix.
fn clear_headers(d: &Directive) -> Result<Vec<HeaderPattern>, String> {
    let mut out = Vec::new();
    for arg in &d.args {
        if !arg.quoted && arg.text.starts_with('-') {
            return Err(format!("option {:?} is not interpreted", arg.text));
        }
        for name in arg.text.split_whitespace() {
            match name.strip_suffix('*') {
                Some(prefix) => {
                    if prefix.contains('*') || (!prefix.is_empty() && field_name(prefix).is_err()) {
                        return Err(format!("{name:?} is not a field name pattern"));
                    }
                    if FRAMING
                        .iter()
                        .any(|f| f.starts_with(&prefix.to_ascii_lowercase()))
                    {
                        return Err(format!("{name:?} would clear framing fields"));
                    }
                    out.push(HeaderPattern::Prefix(prefix.to_ascii_lowercase()));
                }
                None => out.push(HeaderPattern::Exact(field_name(name)?)),
            }
        }
    }
    if out.is_empty() {
        return Err("names no field".to_owned());
    }
    Ok(out)
}

/// nginx `add_header name value [always]`.
fn add_header(d: &Directive) -> Result<AddHeader, String> {
    let (name, value, always) = match d.args.as_slice() {
        [n, v] => (n, v, false),
        [n, v, a] if a.text == "always" => (n, v, true),
        _ => return Err("takes a name, a value and an optional always".to_owned()),
    };
    Ok(AddHeader {
        name: field_name(&name.text)?,
        value: template(&value.text)?,
        always,
    })
}

fn exact_args<const N: usize>(d: &Directive) -> Result<[Arg; N], String> {
    <[Arg; N]>::try_from(d.args.clone()).map_err(|_| format!("takes {N} arguments"))
}

/// `proxy_set_header name value`: an empty value removes the field (nginx). The Host,
/// Connection and Upgrade forms ingress-nginx already sends are accepted as they are.
fn request_field(name: &str, value: &str, out: &mut Lowered) -> Result<(), String> {
    let lower = name.to_ascii_lowercase();
    let value_lower = value.to_ascii_lowercase();
    match lower.as_str() {
        "host" => {
            return match value {
                // What sluice sends anyway (the client's Host).
                "$host" | "$http_host" | "$best_http_host" => Ok(()),
                _ if !value.contains('$') && !value.is_empty() => {
                    out.upstream_vhost = Some(header_value(value)?);
                    Ok(())
                }
                _ => Err("Host may only be a constant, $host or $http_host".to_owned()),
            };
        }
        // sluice passes WebSocket upgrades through itself.
        "upgrade" if value_lower == "$http_upgrade" => return Ok(()),
        "connection"
            if ["upgrade", "$connection_upgrade", "$http_connection"]
                .contains(&value_lower.as_str()) =>
        {
            return Ok(());
        }
        _ => {}
    }
    let name = field_name(name)?;
    if value.is_empty() {
        out.request_remove.push(name);
        return Ok(());
    }
    request_template(name, template(value)?, out)
}

fn request_template(name: HeaderName, value: Template, out: &mut Lowered) -> Result<(), String> {
    if name == http::header::HOST {
        return Err("Host is set with proxy_set_header Host".to_owned());
    }
    match value.constant() {
        Some(text) => out.request_set.push((name, header_value(&text)?)),
        None => out.rules.request_set.push((name, value)),
    }
    Ok(())
}

fn field_name(name: &str) -> Result<HeaderName, String> {
    let parsed = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| format!("{name:?} is not a field name"))?;
    if FRAMING.contains(&parsed.as_str()) {
        return Err(format!(
            "{name:?} is a hop-by-hop or framing field sluice manages"
        ));
    }
    Ok(parsed)
}

fn header_value(text: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(text).map_err(|_| format!("{text:?} is not a valid field value"))
}

/// A value's text with nginx variables: `$name` or `${name}`; a `$` not followed by a name
/// is literal.
pub(crate) fn template(text: &str) -> Result<Template, String> {
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        literal.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, consumed) = if let Some(braced) = after.strip_prefix('{') {
            let close = braced
                .find('}')
                .ok_or_else(|| format!("unclosed \"${{\" in {text:?}"))?;
            (&braced[..close], close + 2)
        } else {
            let len = after
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            (&after[..len], len)
        };
        if name.is_empty() {
            literal.push('$');
            rest = after;
            continue;
        }
        if !literal.is_empty() {
            parts.push(Part::Text(std::mem::take(&mut literal)));
        }
        parts.push(Part::Var(variable(name)?));
        rest = &after[consumed..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(Part::Text(literal));
    }
    Ok(Template(parts))
}

/// The variables sluice expands.
fn variable(name: &str) -> Result<Var, String> {
    Ok(match name {
        "host" => Var::Host,
        "request_uri" => Var::RequestUri,
        "uri" | "document_uri" => Var::Uri,
        "scheme" => Var::Scheme,
        "remote_addr" => Var::RemoteAddr,
        "args" | "query_string" => Var::Args,
        "request_method" => Var::RequestMethod,
        _ if name.len() == 1 && name.as_bytes()[0].is_ascii_digit() => {
            Var::Capture(name.as_bytes()[0] - b'0')
        }
        _ => {
            if let Some(field) = name.strip_prefix("http_")
                && let Ok(field) = HeaderName::from_bytes(field.replace('_', "-").as_bytes())
            {
                return Ok(Var::Header(field));
            }
            return Err(format!(
                "variable ${name} is not one sluice expands ($host, $request_uri, $uri, \
                 $scheme, $remote_addr, $args, $request_method, $http_<name>, $1..$9)"
            ));
        }
    })
}

#[cfg(test)]
mod tests;
