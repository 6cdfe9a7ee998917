//! The ConfigMap's global external auth on one Ingress (ingress-nginx's
//! `shouldApplyGlobalAuth`): it guards the routes of every Ingress that has no `auth-url` of
//! its own and does not say `enable-global-auth: "false"`. A `global-auth-url` that cannot
//! be applied closes those routes (503, a `FailedClosed` Event on the Ingress), never opens
//! them. `no-auth-locations` is applied per rule path by the compiler.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::diagnostic::{Diagnostic, Reason};
use crate::ingress::annotations::{self, Parsed};
use crate::nginx_config::GlobalAuth;
use crate::refs::ObjectRef;

/// Gives `parsed` (the annotations of `ingress`) the global auth where it applies; the
/// diagnostic to record when that closes the Ingress's routes. `config_map`: the
/// ConfigMap the global auth comes from, for the message.
pub(crate) fn apply(
    global: &GlobalAuth,
    parsed: &mut Parsed,
    ingress: &ObjectRef,
    config_map: Option<&ObjectMeta>,
) -> Option<Diagnostic> {
    if !parsed.enable_global_auth || parsed.policy.auth.is_some() {
        return None;
    }
    match global {
        GlobalAuth::Off => None,
        GlobalAuth::On(auth) => {
            parsed.policy.auth = Some(crate::ExternalAuth::clone(auth));
            None
        }
        GlobalAuth::Refused(why) => {
            parsed.policy.fail_closed = true;
            let name = config_map.map_or_else(String::new, |meta| {
                format!(
                    "ConfigMap {}/{} ",
                    meta.namespace.as_deref().unwrap_or(""),
                    meta.name.as_deref().unwrap_or("")
                )
            });
            let detail = format!(
                "the global external auth of {name}cannot be applied ({why}), and this \
                 Ingress has no auth-url of its own and does not set enable-global-auth: \
                 \"false\"; {}",
                annotations::fail_closed::CLOSED
            );
            let field = format!(
                "metadata.annotations[{}enable-global-auth]",
                annotations::NGINX_PREFIX
            );
            Some(Diagnostic::new(
                ingress,
                field,
                Reason::FailedClosed,
                detail,
            ))
        }
    }
}

impl crate::nginx_config::NginxConfig {
    /// Whether this ConfigMap's global external auth guards an Ingress with `annotations`
    /// (the ConfigMap's defaults applied or not: they hold no `auth-url`), decided as the
    /// compiler decides it: a `global-auth-url` is set (or refused, which closes) and the
    /// Ingress has no `auth-url` of its own and does not say `enable-global-auth: "false"`.
    /// For `sluice migrate`, which must not emit such a route open without saying so.
    pub fn global_auth_guards(
        &self,
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        if self.global_auth.effective() == GlobalAuth::Off {
            return false;
        }
        let parsed = annotations::parse(annotations);
        parsed.enable_global_auth && parsed.policy.auth.is_none()
    }
}
