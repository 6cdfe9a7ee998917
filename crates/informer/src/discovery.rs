//! API discovery cached on disk (client-go `discovery/cached/disk.CachedDiscoveryClient`).
//!
//! Discovery answers "which groups, versions, resources and kinds does this server serve?".
//! Asking costs one request per group version, so results are cached as JSON files, with the
//! layout client-go uses:
//!
//! ```text
//! <cache dir>/servergroups.json                         APIGroupList (core group "" first)
//! <cache dir>/<group or "">/<version>/serverresources.json   APIResourceList
//! ```
//!
//! (the core group's resources live in `<cache dir>/v1/serverresources.json`). A file younger
//! than the TTL (by modification time) is used instead of asking the server, so a second run
//! within the TTL makes no discovery request at all. Use one cache directory per server, e.g.
//! [`cache_dir_for`]`(root, cluster_url)`.

use std::{
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResourceList, GroupVersionForDiscovery,
};
use kube::{Client, api::ApiResource};
use serde::{Serialize, de::DeserializeOwned};

/// Errors of [`CachedDiscovery`].
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The API server request failed.
    #[error("discovery request failed: {0}")]
    Api(#[from] kube::Error),
    /// Reading or writing the cache failed.
    #[error("discovery cache i/o on {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// One resource (or subresource) served by the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredResource {
    /// API group (`""` for the core group).
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `pods`, or `pods/status` for a subresource.
    pub resource: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Supported verbs (`get`, `list`, `watch`, ...).
    pub verbs: Vec<String>,
}

impl DiscoveredResource {
    /// Whether this is a subresource (`pods/status`).
    pub fn is_subresource(&self) -> bool {
        self.resource.contains('/')
    }

    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Whether the resource supports `verb`.
    pub fn supports(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// The kube [`ApiResource`] to build dynamic `Api`s and informers with.
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.resource.clone(),
        }
    }
}

/// The result of a discovery run.
#[derive(Debug, Clone, Default)]
pub struct DiscoveryResult {
    /// Every group (core `""` first) with its versions, preferred version first.
    pub groups: Vec<(String, Vec<String>)>,
    /// Every resource of every group version, subresources included.
    pub resources: Vec<DiscoveredResource>,
    /// Number of requests sent to the API server (0 when everything came from the cache).
    pub requests: usize,
    /// Group versions whose discovery failed (e.g. an unavailable aggregated API).
    pub failed: Vec<(String, String)>,
}

impl DiscoveryResult {
    /// Whether everything came from the disk cache.
    pub fn from_cache(&self) -> bool {
        self.requests == 0
    }

    /// Looks a resource up by group, version and plural name.
    pub fn resolve_gvr(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<&DiscoveredResource> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.resource == resource)
    }

    /// Looks a (non-sub)resource up by group, version and kind.
    pub fn resolve_gvk(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Option<&DiscoveredResource> {
        self.resources.iter().find(|r| {
            r.group == group && r.version == version && r.kind == kind && !r.is_subresource()
        })
    }
}

/// A cache directory for the server at `cluster_url` under `root` (`https://10.0.0.1:6443`
/// becomes `root/10.0.0.1_6443`, as client-go names it).
pub fn cache_dir_for(root: &Path, cluster_url: &str) -> PathBuf {
    let host = cluster_url
        .split("://")
        .nth(1)
        .unwrap_or(cluster_url)
        .trim_end_matches('/')
        .replace([':', '/'], "_");
    root.join(host)
}

/// Discovery through a disk cache with a TTL.
#[derive(Clone)]
pub struct CachedDiscovery {
    client: Client,
    dir: PathBuf,
    ttl: Duration,
}

impl std::fmt::Debug for CachedDiscovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedDiscovery")
            .field("dir", &self.dir)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl CachedDiscovery {
    /// Discovery via `client`, cached under `dir` (one directory per server) for `ttl`.
    pub fn new(client: Client, dir: impl Into<PathBuf>, ttl: Duration) -> Self {
        Self {
            client,
            dir: dir.into(),
            ttl,
        }
    }

    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Deletes the cache, so the next run asks the server.
    pub fn invalidate(&self) -> Result<(), DiscoveryError> {
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(DiscoveryError::Io {
                path: self.dir.clone(),
                source,
            }),
        }
    }

    fn fresh<T: DeserializeOwned>(&self, path: &Path) -> Option<T> {
        let meta = std::fs::metadata(path).ok()?;
        let age = SystemTime::now()
            .duration_since(meta.modified().ok()?)
            .unwrap_or_default();
        if age >= self.ttl {
            return None;
        }
        let bytes = std::fs::read(path).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(v) => Some(v),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "ignoring corrupt discovery cache file");
                None
            }
        }
    }

    fn store<T: Serialize>(&self, path: &Path, value: &T) -> Result<(), DiscoveryError> {
        let io = |source| DiscoveryError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let bytes = serde_json::to_vec(value).map_err(|e| io(std::io::Error::other(e)))?;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    fn resources_path(&self, group: &str, version: &str) -> PathBuf {
        if group.is_empty() {
            self.dir.join(version).join("serverresources.json")
        } else {
            self.dir
                .join(group)
                .join(version)
                .join("serverresources.json")
        }
    }

    /// The server's groups (core `""` first), from the cache when fresh.
    pub async fn server_groups(&self) -> Result<(APIGroupList, usize), DiscoveryError> {
        let path = self.dir.join("servergroups.json");
        if let Some(list) = self.fresh::<APIGroupList>(&path) {
            return Ok((list, 0));
        }
        let core = self.client.list_core_api_versions().await?;
        let mut list = self.client.list_api_groups().await?;
        let versions: Vec<GroupVersionForDiscovery> = core
            .versions
            .iter()
            .map(|v| GroupVersionForDiscovery {
                group_version: v.clone(),
                version: v.clone(),
            })
            .collect();
        if let Some(preferred) = versions.first().cloned() {
            list.groups.insert(
                0,
                APIGroup {
                    name: String::new(),
                    preferred_version: Some(preferred),
                    server_address_by_client_cidrs: None,
                    versions,
                },
            );
        }
        self.store(&path, &list)?;
        Ok((list, 2))
    }

    /// The resources of one group version, from the cache when fresh.
    pub async fn server_resources(
        &self,
        group: &str,
        version: &str,
    ) -> Result<(APIResourceList, usize), DiscoveryError> {
        let path = self.resources_path(group, version);
        if let Some(list) = self.fresh::<APIResourceList>(&path) {
            return Ok((list, 0));
        }
        let list = if group.is_empty() {
            self.client.list_core_api_resources(version).await?
        } else {
            self.client
                .list_api_group_resources(&format!("{group}/{version}"))
                .await?
        };
        self.store(&path, &list)?;
        Ok((list, 1))
    }

    /// Discovers every group, version, resource and kind.
    pub async fn run(&self) -> Result<DiscoveryResult, DiscoveryError> {
        let (groups, mut requests) = self.server_groups().await?;
        let mut out = DiscoveryResult::default();
        for g in &groups.groups {
            let mut versions: Vec<String> = Vec::new();
            if let Some(p) = &g.preferred_version {
                versions.push(p.version.clone());
            }
            for v in &g.versions {
                if !versions.contains(&v.version) {
                    versions.push(v.version.clone());
                }
            }
            for version in &versions {
                match self.server_resources(&g.name, version).await {
                    Ok((list, n)) => {
                        requests += n;
                        for r in list.resources {
                            out.resources.push(DiscoveredResource {
                                group: r
                                    .group
                                    .filter(|s| !s.is_empty())
                                    .unwrap_or_else(|| g.name.clone()),
                                version: r
                                    .version
                                    .filter(|s| !s.is_empty())
                                    .unwrap_or_else(|| version.clone()),
                                resource: r.name,
                                kind: r.kind,
                                namespaced: r.namespaced,
                                verbs: r.verbs,
                            });
                        }
                    }
                    Err(DiscoveryError::Api(err)) => {
                        requests += 1;
                        tracing::warn!(group = %g.name, %version, error = %err, "group version discovery failed");
                        out.failed.push((g.name.clone(), version.clone()));
                    }
                    Err(err) => return Err(err),
                }
            }
            out.groups.push((g.name.clone(), versions));
        }
        out.requests = requests;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_names() {
        let root = Path::new("/c");
        assert_eq!(
            cache_dir_for(root, "https://127.0.0.1:6443"),
            PathBuf::from("/c/127.0.0.1_6443")
        );
        assert_eq!(
            cache_dir_for(root, "https://k8s.example/"),
            PathBuf::from("/c/k8s.example")
        );
    }

    #[test]
    fn resource_helpers() {
        let r = DiscoveredResource {
            group: "apps".into(),
            version: "v1".into(),
            resource: "deployments".into(),
            kind: "Deployment".into(),
            namespaced: true,
            verbs: vec!["list".into(), "watch".into()],
        };
        assert_eq!(r.api_version(), "apps/v1");
        assert!(r.supports("watch") && !r.supports("create"));
        assert!(!r.is_subresource());
        let ar = r.api_resource();
        assert_eq!(
            (ar.api_version.as_str(), ar.plural.as_str()),
            ("apps/v1", "deployments")
        );
        let res = DiscoveryResult {
            resources: vec![r.clone()],
            ..Default::default()
        };
        assert_eq!(res.resolve_gvr("apps", "v1", "deployments"), Some(&r));
        assert_eq!(res.resolve_gvk("apps", "v1", "Deployment"), Some(&r));
        assert!(res.resolve_gvk("", "v1", "Deployment").is_none());
    }
}
