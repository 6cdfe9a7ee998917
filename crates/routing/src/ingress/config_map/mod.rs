//! ingress-nginx's ConfigMap (`--configmap NAMESPACE/NAME`): the keys sluice applies live
//! and what it says about the others (`keys.rs`).
//!
//! Keys that are also Ingress annotations (`proxy-read-timeout`, `ssl-redirect`,
//! `whitelist-source-range`, ...) become the default of that annotation: an Ingress without
//! it gets the ConfigMap's value, one with it keeps its own (ingress-nginx's precedence).
//! Their values are read by the annotation's own parser, so the syntax is the same.
//! `block-cidrs`, `block-user-agents` and `block-referers` refuse their clients (403) on
//! every Ingress route. The keys that set the whole proxy (`hsts`, `use-forwarded-headers`,
//! `keep-alive`, `use-gzip`, ...: `globals.rs`) override the flags of the same meaning. A value that does not
//! parse gets a diagnostic (an Event on the ConfigMap) and the key's previous value stays in
//! force; a key sluice does not apply gets one saying what to use instead.

mod global_auth;
mod globals;
mod keys;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

pub use keys::{Support, support};

use super::annotations::{NGINX_PREFIX, SLUICE_PREFIX, check_annotations};
use crate::cidr::parse_cidr;
use crate::diagnostic::{Diagnostic, Reason};
use crate::refs::ObjectRef;

pub use crate::nginx_config::NginxConfig;

/// `annotations` with the ConfigMap defaults of `config` for the keys they do not set (under
/// either prefix); `None` when nothing is added.
pub(crate) fn with_defaults(
    config: &NginxConfig,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<BTreeMap<String, String>> {
    if config.annotation_defaults.is_empty() {
        return None;
    }
    let mut out = annotations.cloned().unwrap_or_default();
    for (key, value) in &config.annotation_defaults {
        let set = [NGINX_PREFIX, SLUICE_PREFIX]
            .iter()
            .any(|prefix| out.contains_key(&format!("{prefix}{key}")));
        if !set {
            out.insert(format!("{NGINX_PREFIX}{key}"), value.clone());
        }
    }
    Some(out)
}

impl NginxConfig {
    /// `annotations` with this ConfigMap's annotation defaults (`whitelist-source-range`,
    /// `proxy-body-size`, ...) for the keys they do not set, as every Ingress is compiled.
    pub fn with_annotation_defaults(
        &self,
        annotations: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        with_defaults(self, Some(annotations)).unwrap_or_else(|| annotations.clone())
    }
}

/// Reads `config_map`; a key whose value does not parse keeps its value in `previous`.
/// The diagnostics name the ConfigMap and the key (`data[<key>]`).
pub fn read(
    config_map: &ConfigMap,
    previous: Option<&NginxConfig>,
) -> (NginxConfig, Vec<Diagnostic>) {
    let object = ObjectRef {
        kind: "ConfigMap",
        namespace: config_map.metadata.namespace.clone().unwrap_or_default(),
        name: config_map.metadata.name.clone().unwrap_or_default(),
    };
    let mut out = NginxConfig::default();
    let mut diagnostics = Vec::new();
    let empty = BTreeMap::new();
    let data = config_map.data.as_ref().unwrap_or(&empty);
    for (key, value) in data {
        let field = format!("data[{key}]");
        let mut problem = |reason: Reason, message: String| {
            diagnostics.push(Diagnostic::new(&object, field.clone(), reason, message));
        };
        let keep_previous = |out: &mut NginxConfig| {
            if let Some(old) = previous.and_then(|p| p.applied.get(key.as_str())) {
                // The value in force before stays (it parsed then).
                let _ = apply(out, key, old);
            }
        };
        match support(key) {
            Some(Support::AnnotationDefault | Support::Server | Support::Global(_)) => {
                match apply(&mut out, key, value) {
                    Ok(()) => {}
                    Err(why) => {
                        let kept = previous
                            .and_then(|p| p.applied.get(key.as_str()))
                            .map_or_else(
                                || "ingress-nginx's default applies".to_owned(),
                                |old| format!("the previous value {old:?} stays in force"),
                            );
                        problem(Reason::InvalidAnnotation, format!("{why}; {kept}"));
                        keep_previous(&mut out);
                    }
                }
            }
            Some(Support::Flag(flag)) => problem(
                Reason::UnsupportedAnnotation,
                format!(
                    "not applied from the ConfigMap: a setting of the whole process, set \
                     {flag} on sluice instead"
                ),
            ),
            Some(Support::No(why)) => {
                problem(Reason::UnsupportedAnnotation, format!("not applied: {why}"))
            }
            None => problem(
                Reason::UnsupportedAnnotation,
                "not a key of ingress-nginx's ConfigMap; ignored".to_owned(),
            ),
        }
    }
    (out, diagnostics)
}

/// Applies one key sluice reads.
fn apply(out: &mut NginxConfig, key: &str, value: &str) -> Result<(), String> {
    if let Some(applied) = global_auth::apply(out, key, value) {
        applied?;
    } else if globals::GLOBAL_KEYS.contains(&key) || globals::BLOCK_KEYS.contains(&key) {
        globals::apply(out, key, value)?;
    } else if key == "block-cidrs" {
        let cidrs = value
            .split(',')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| parse_cidr(v).map_err(|e| format!("{v:?} is not an address or CIDR: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        out.block_cidrs = cidrs;
    } else if key == "allow-snippet-annotations" {
        // Go's strconv.ParseBool, as ingress-nginx reads it.
        out.allow_snippet_annotations = match value.trim() {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            other => return Err(format!("{other:?} is not true or false")),
        };
    } else if key == "annotations-risk-level" {
        // ingress-nginx's StringRiskToRisk: case-insensitive, anything unknown is Low.
        out.critical_risk_accepted = value.trim().eq_ignore_ascii_case("critical");
    } else {
        // Read by the annotation's own parser.
        let single = BTreeMap::from([(format!("{NGINX_PREFIX}{key}"), value.to_owned())]);
        let report = check_annotations(&single);
        if let Some((_, _, why)) = report.problems.first() {
            return Err(why.clone());
        }
        out.annotation_defaults
            .insert(key.to_owned(), value.to_owned());
    }
    out.applied.insert(key.to_owned(), value.to_owned());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_map(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                namespace: Some("ingress-nginx".into()),
                name: Some("ingress-nginx-controller".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// ingress-nginx "ConfigMaps": annotation keys become defaults read by the annotation's
    /// parser; a bad value keeps the previous one; the others are named with what to use.
    #[test]
    fn keys_are_applied_reported_or_kept() {
        let (first, problems) = read(
            &config_map(&[
                ("proxy-read-timeout", "120"),
                ("whitelist-source-range", "10.0.0.0/8"),
                ("block-cidrs", "192.0.2.0/24, 198.51.100.7"),
                ("use-gzip", "true"),
                ("server-tokens", "true"),
                ("ssl-dh-param", "default/dh"),
                ("no-such-key", "1"),
            ]),
            None,
        );
        assert_eq!(first.annotation_defaults["proxy-read-timeout"], "120");
        assert_eq!(first.block_cidrs.len(), 2);
        let said: Vec<(&str, &str)> = problems
            .iter()
            .map(|d| (d.field.as_str(), d.reason.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                ("data[no-such-key]", "UnsupportedAnnotation"),
                ("data[ssl-dh-param]", "UnsupportedAnnotation"),
            ]
        );
        assert_eq!(first.globals.compression.gzip, Some(true));
        assert_eq!(first.globals.server_tokens, Some(true));

        // A bad value: reported, and the previous one stays.
        let (second, problems) = read(
            &config_map(&[
                ("proxy-read-timeout", "soon"),
                ("block-cidrs", "nope"),
                ("use-gzip", "maybe"),
            ]),
            Some(&first),
        );
        assert_eq!(second.annotation_defaults["proxy-read-timeout"], "120");
        assert_eq!(second.block_cidrs, first.block_cidrs);
        assert_eq!(second.globals.compression.gzip, Some(true), "kept");
        assert_eq!(problems.len(), 3);
        assert!(
            problems
                .iter()
                .all(|d| d.message.contains("stays in force")),
            "{problems:?}"
        );
        // Without a previous value: reported, and nothing applies.
        let (third, _) = read(&config_map(&[("proxy-read-timeout", "soon")]), None);
        assert!(third.annotation_defaults.is_empty());
    }

    #[test]
    fn defaults_fill_in_what_an_ingress_does_not_set() {
        let (config, _) = read(
            &config_map(&[("proxy-read-timeout", "120"), ("ssl-redirect", "false")]),
            None,
        );
        let own = BTreeMap::from([(format!("{SLUICE_PREFIX}proxy-read-timeout"), "5".to_owned())]);
        let merged = with_defaults(&config, Some(&own)).expect("defaults");
        assert_eq!(
            merged.get(&format!("{NGINX_PREFIX}proxy-read-timeout")),
            None
        );
        assert_eq!(merged[&format!("{NGINX_PREFIX}ssl-redirect")], "false");
        assert!(with_defaults(&NginxConfig::default(), Some(&own)).is_none());
    }

    /// Every key of ingress-nginx's ConfigMap table (v1.15) is known.
    #[test]
    fn every_ingress_nginx_key_is_known() {
        for key in [
            "add-headers",
            "use-gzip",
            "hsts",
            "proxy-body-size",
            "jaeger-endpoint",
            "worker-processes",
            "block-cidrs",
            "ssl-protocols",
        ] {
            assert!(support(key).is_some(), "{key}");
        }
        assert!(support("not-a-key").is_none());
    }
}
