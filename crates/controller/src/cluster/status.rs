//! Ingress status: `status.loadBalancer.ingress` of our Ingresses carries the address clients
//! reach us at, from `--publish-service` or `--publish-status-address`. Written by the
//! leader only, and only when it differs from what the cache holds.

use super::status_scope::{Scope, changed_in_chunks};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::{Ingress, IngressLoadBalancerIngress};
use kube::api::{Api, Patch, PatchParams};
use sluice_informer::Store;
use sluice_persistent::SortedChunks;
use sluice_routing::ObjectRef;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Where the published address comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Publish {
    /// Write no status.
    Nothing,
    /// Fixed addresses (IPs or host names).
    Addresses(Vec<String>),
    /// The address of a Service (`namespace/name`): its load-balancer ingress, else its
    /// external IPs, else its cluster IP.
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
    },
}

impl Publish {
    /// From the flags; `--publish-status-address` wins when both are given.
    pub fn from_flags(service: Option<&str>, addresses: Option<&str>) -> anyhow::Result<Publish> {
        if let Some(a) = addresses {
            let list: Vec<String> = a
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if list.is_empty() {
                anyhow::bail!("--publish-status-address: no address in {a:?}");
            }
            return Ok(Publish::Addresses(list));
        }
        match service {
            None => Ok(Publish::Nothing),
            Some(s) => match s.split_once('/') {
                Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                    Ok(Publish::Service {
                        namespace: ns.into(),
                        name: name.into(),
                    })
                }
                _ => anyhow::bail!("--publish-service: want NAMESPACE/NAME, got {s:?}"),
            },
        }
    }
}

/// Turns addresses into status entries: IPs as `ip`, anything else as `hostname`.
pub fn entries(addresses: &[String]) -> Vec<IngressLoadBalancerIngress> {
    let mut out: Vec<IngressLoadBalancerIngress> = addresses
        .iter()
        .map(|a| {
            if a.parse::<std::net::IpAddr>().is_ok() {
                IngressLoadBalancerIngress {
                    ip: Some(a.clone()),
                    ..Default::default()
                }
            } else {
                IngressLoadBalancerIngress {
                    hostname: Some(a.clone()),
                    ..Default::default()
                }
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.ip, &a.hostname).cmp(&(&b.ip, &b.hostname)));
    out.dedup();
    out
}

/// The addresses a Service publishes: load-balancer ingress, else external IPs, else cluster IP.
pub fn service_addresses(svc: &Service) -> Vec<String> {
    let lb: Vec<String> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone().or_else(|| i.hostname.clone()))
        .collect();
    if !lb.is_empty() {
        return lb;
    }
    let spec = svc.spec.as_ref();
    let external = spec
        .and_then(|s| s.external_ips.clone())
        .unwrap_or_default();
    if !external.is_empty() {
        return external;
    }
    spec.and_then(|s| s.cluster_ip.clone())
        .filter(|ip| !ip.is_empty() && ip != "None")
        .into_iter()
        .collect()
}

fn current(ing: &Ingress) -> Vec<IngressLoadBalancerIngress> {
    let mut v = ing
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default();
    v.sort_by(|a, b| (&a.ip, &a.hostname).cmp(&(&b.ip, &b.hostname)));
    v
}

/// What to write: for each Ingress, `Some(entries)` to set or `Some(vec![])` to clear.
/// Ours get the published entries; an Ingress that is not ours but still carries exactly
/// our entries left our class, and is cleared. Pure, for testing.
pub fn plan(
    ingresses: &[Arc<Ingress>],
    ours: &BTreeSet<(String, String)>,
    published: &[IngressLoadBalancerIngress],
) -> Vec<(String, String, Vec<IngressLoadBalancerIngress>)> {
    let mut out = Vec::new();
    for ing in ingresses {
        let ns = ing.metadata.namespace.clone().unwrap_or_default();
        let name = ing.metadata.name.clone().unwrap_or_default();
        let have = current(ing);
        if ours.contains(&(ns.clone(), name.clone())) {
            if have != published {
                out.push((ns, name, published.to_vec()));
            }
        } else if !have.is_empty() && !published.is_empty() && have == published {
            out.push((ns, name, Vec::new()));
        }
    }
    out
}

/// Writes Ingress status from the cache and the rebuild's list of our Ingresses.
#[derive(Clone)]
pub struct StatusWriter {
    client: kube::Client,
    ingresses: Store<Ingress>,
    services: Store<Service>,
    publish: Publish,
    /// What the last finished round published (`None` before one): a round that publishes
    /// other addresses visits every Ingress.
    last_published: Arc<Mutex<Option<Vec<IngressLoadBalancerIngress>>>>,
}

impl StatusWriter {
    /// A writer reading Ingresses and Services from these stores.
    pub fn new(
        client: kube::Client,
        ingresses: Store<Ingress>,
        services: Store<Service>,
        publish: Publish,
    ) -> Self {
        StatusWriter {
            client,
            ingresses,
            services,
            publish,
            last_published: Arc::default(),
        }
    }

    async fn published(&self) -> anyhow::Result<Vec<IngressLoadBalancerIngress>> {
        Ok(match &self.publish {
            Publish::Nothing => Vec::new(),
            Publish::Addresses(a) => entries(a),
            Publish::Service { namespace, name } => {
                let key = format!("{namespace}/{name}");
                let svc = match self.services.get_by_key(&key) {
                    Some(s) => s,
                    // Outside the watched namespace: ask the API server.
                    None => match Api::<Service>::namespaced(self.client.clone(), namespace)
                        .get_opt(name)
                        .await?
                    {
                        Some(s) => std::sync::Arc::new(s),
                        None => {
                            tracing::warn!(service = %key, "--publish-service not found; status left alone");
                            return Ok(Vec::new());
                        }
                    },
                };
                entries(&service_addresses(&svc))
            }
        })
    }

    /// The addresses published in status (`--publish-status-address`, or those of
    /// `--publish-service`), as IPs and host names; empty when none.
    pub async fn published_addresses(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .published()
            .await?
            .into_iter()
            .filter_map(|e| e.ip.or(e.hostname))
            .collect())
    }

    /// Brings the status of the Ingresses `scope` names in line (every Ingress, or those
    /// that joined or left `ours` since the last finished round and those whose status
    /// someone changed; every one when the published addresses changed since); returns how
    /// many were written.
    pub async fn sync(
        &self,
        ours: &SortedChunks<ObjectRef>,
        scope: Scope<'_>,
    ) -> anyhow::Result<usize> {
        if self.publish == Publish::Nothing {
            return Ok(0);
        }
        let published = self.published().await?;
        let last = self.last_published().clone();
        let result = self.sync_published(ours, scope, &published, &last).await;
        *self.last_published() = result.is_ok().then_some(published);
        result
    }

    fn last_published(&self) -> std::sync::MutexGuard<'_, Option<Vec<IngressLoadBalancerIngress>>> {
        self.last_published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// [`StatusWriter::sync`] with the addresses to publish and those the last finished
    /// round published.
    async fn sync_published(
        &self,
        ours: &SortedChunks<ObjectRef>,
        scope: Scope<'_>,
        published: &[IngressLoadBalancerIngress],
        last: &Option<Vec<IngressLoadBalancerIngress>>,
    ) -> anyhow::Result<usize> {
        if published.is_empty() {
            return Ok(0);
        }
        let changes = match scope {
            Scope::Changes { since, touched } if last.as_deref() == Some(published) => {
                changed_in_chunks(&since.ours, ours, |o| o, |x, y| x == y).map(|mut changed| {
                    changed.extend(touched.iter().filter(|o| o.kind == "Ingress").cloned());
                    changed
                })
            }
            _ => None,
        };
        let todo = match changes {
            // Those objects only: are they ours, and what do they carry.
            Some(changed) => {
                let ingresses: Vec<Arc<Ingress>> = changed
                    .iter()
                    .filter_map(|o| {
                        self.ingresses
                            .get_by_key(&format!("{}/{}", o.namespace, o.name))
                    })
                    .collect();
                let ours: BTreeSet<(String, String)> = changed
                    .into_iter()
                    .filter(|o| ours.get(o, |x| x).is_some())
                    .map(|o| (o.namespace, o.name))
                    .collect();
                plan(&ingresses, &ours, published)
            }
            None => {
                let ours: BTreeSet<(String, String)> = ours
                    .iter()
                    .map(|o| (o.namespace.clone(), o.name.clone()))
                    .collect();
                plan(&self.ingresses.list(), &ours, published)
            }
        };
        let mut written = 0;
        for (ns, name, entries) in todo {
            let value = if entries.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::to_value(&entries)?
            };
            let patch = serde_json::json!({"status": {"loadBalancer": {"ingress": value}}});
            let api: Api<Ingress> = Api::namespaced(self.client.clone(), &ns);
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => written += 1,
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(anyhow::anyhow!("update status of Ingress {ns}/{name}: {e}")),
            }
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ing(ns: &str, name: &str, ips: &[&str]) -> Arc<Ingress> {
        let lb: Vec<serde_json::Value> =
            ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect();
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": ns, "name": name},
                "status": {"loadBalancer": {"ingress": lb}},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn flags_parse_with_clear_errors() {
        assert_eq!(Publish::from_flags(None, None).unwrap(), Publish::Nothing);
        assert_eq!(
            Publish::from_flags(Some("x/y"), Some("1.2.3.4, lb.example.com")).unwrap(),
            Publish::Addresses(vec!["1.2.3.4".into(), "lb.example.com".into()])
        );
        assert_eq!(
            Publish::from_flags(Some("sluice-system/sluice"), None).unwrap(),
            Publish::Service {
                namespace: "sluice-system".into(),
                name: "sluice".into()
            }
        );
        for bad in ["sluice", "/x", "x/", "a/b/c"] {
            let e = Publish::from_flags(Some(bad), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains("--publish-service"), "{e}");
        }
        assert!(Publish::from_flags(None, Some(" , ")).is_err());
    }

    #[test]
    fn plan_sets_ours_clears_leavers_and_leaves_others() {
        let published = entries(&["10.0.0.1".into()]);
        let all = [
            ing("a", "ours-unset", &[]),
            ing("a", "ours-set", &["10.0.0.1"]),
            ing("a", "ours-stale", &["10.9.9.9"]),
            ing("a", "left-our-class", &["10.0.0.1"]),
            ing("a", "other-controller", &["192.0.2.7"]),
            ing("a", "other-empty", &[]),
        ];
        let ours: BTreeSet<_> = ["ours-unset", "ours-set", "ours-stale"]
            .iter()
            .map(|n| ("a".to_string(), n.to_string()))
            .collect();
        let plan = plan(&all, &ours, &published);
        let names: Vec<(&str, usize)> =
            plan.iter().map(|(_, n, e)| (n.as_str(), e.len())).collect();
        assert_eq!(
            names,
            [("ours-unset", 1), ("ours-stale", 1), ("left-our-class", 0)]
        );
    }

    #[test]
    fn service_addresses_prefer_load_balancer_then_external_then_cluster_ip() {
        let svc = |v: serde_json::Value| -> Service { serde_json::from_value(v).unwrap() };
        let full = svc(serde_json::json!({
            "spec": {"clusterIP": "10.96.0.5", "externalIPs": ["198.51.100.1"]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}]}},
        }));
        assert_eq!(service_addresses(&full), ["lb.example.com"]);
        let ext = svc(
            serde_json::json!({"spec": {"clusterIP": "10.96.0.5", "externalIPs": ["198.51.100.1"]}}),
        );
        assert_eq!(service_addresses(&ext), ["198.51.100.1"]);
        let cip = svc(serde_json::json!({"spec": {"clusterIP": "10.96.0.5"}}));
        assert_eq!(service_addresses(&cip), ["10.96.0.5"]);
        let headless = svc(serde_json::json!({"spec": {"clusterIP": "None"}}));
        assert!(service_addresses(&headless).is_empty());
    }
}
