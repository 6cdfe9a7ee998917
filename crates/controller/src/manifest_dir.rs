//! A directory of YAML manifests as a source of objects: what `sluice serve --manifests DIR`
//! reads instead of an API server.
//!
//! One scanner polls the directory (every 250 ms by default) and re-parses only files whose
//! modification time or size changed. A file that fails to parse, or is larger than the
//! limit (`--max-manifest-bytes`, checked before it is read), is reported once, with its
//! name and the reason, and the objects it held before stay in place: the last good
//! configuration keeps serving. Each kind is then offered as a [`ListWatch`], so the same
//! informers, stores and rebuild loop serve both standalone mode and a cluster.
//!
//! Reading and parsing block the thread they run on; `sluice serve` runs all of this on the
//! control plane's runtime ([`crate::control`]), never on a proxy worker.

use futures::StreamExt;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sluice_informer::list_watch::EventStream;
use sluice_informer::{Event, ListWatch, ListWatchError};
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::watch;

/// Identifies an object: `apiVersion`, `kind`, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `apiVersion`, e.g. `networking.k8s.io/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Ingress`.
    pub kind: String,
    /// Namespace (`default` when the manifest gives none).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Checks that a document of one kind deserializes into its Rust type.
type Validator = fn(&Value) -> Result<(), String>;

fn validate<K: DeserializeOwned>(v: &Value) -> Result<(), String> {
    serde_json::from_value::<K>(v.clone())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The parsed content of the directory at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Every object, with the document as JSON.
    pub objects: BTreeMap<ObjectKey, Arc<Value>>,
    /// Files that currently fail to parse, with the reason.
    pub errors: BTreeMap<PathBuf, String>,
    /// Documents left out because sluice does not read their kind, by file.
    pub skipped: BTreeMap<PathBuf, Vec<String>>,
}

#[derive(Debug)]
struct FileState {
    stamp: (SystemTime, u64),
    /// The last objects this file parsed to successfully.
    objects: Vec<(ObjectKey, Arc<Value>)>,
    /// Documents of other kinds, named (see [`Parsed::skipped`]).
    skipped: Vec<String>,
    error: Option<String>,
}

/// Which kinds the directory may contain, and how to check them.
#[derive(Clone, Default)]
pub struct Kinds {
    validators: HashMap<(String, String), Validator>,
    /// (apiVersion, kind) read as another apiVersion of the same kind: see [`Kinds::also`].
    aliases: HashMap<(String, String), String>,
}

impl Kinds {
    /// Accepts documents of `K`'s apiVersion and kind, checked by deserializing into `K`.
    #[must_use]
    pub fn with<K: Resource<DynamicType = ()> + DeserializeOwned>(mut self) -> Self {
        self.validators.insert(
            (K::api_version(&()).into_owned(), K::kind(&()).into_owned()),
            validate::<K>,
        );
        self
    }

    /// Also accepts `K`'s kind at `api_version`, another version the API serves with the
    /// same schema for what sluice reads (Gateway API kinds are served at `v1` and
    /// `v1beta1` alike, and manifests use either). Such a document is read as `K`'s own
    /// apiVersion, so it reaches `K`'s informer. `K` must be registered with [`Kinds::with`].
    #[must_use]
    pub fn also<K: Resource<DynamicType = ()>>(mut self, api_version: &str) -> Self {
        self.aliases.insert(
            (api_version.to_owned(), K::kind(&()).into_owned()),
            K::api_version(&()).into_owned(),
        );
        self
    }
}

/// What one manifest file holds.
#[derive(Debug, Default)]
pub struct Parsed {
    /// The objects of the kinds sluice reads, in file order.
    pub objects: Vec<(ObjectKey, Value)>,
    /// Documents of other kinds (a Deployment beside the Ingress), each named: left out,
    /// while the rest of the file is read.
    pub skipped: Vec<String>,
}

/// Parses one manifest file (YAML, possibly several `---` documents; or JSON) into objects.
/// A `kind: List` (what `kubectl get -o yaml` writes) counts as its items.
///
/// Documents of kinds sluice does not read are [`Parsed::skipped`], named. Everything else
/// that is wrong is an error naming each bad document (the first first): a document without
/// `apiVersion`, `kind` or `metadata.name`, one of sluice's kinds at an apiVersion it does
/// not read, or a kind spelled like one of sluice's but for its case (a typo must not drop
/// an object silently), or one that does not match its schema.
pub fn parse_manifests(text: &str, kinds: &Kinds) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    let mut errors = Vec::new();
    for (i, doc) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let n = i + 1;
        let value = match <yaml_serde::Value as serde::Deserialize>::deserialize(doc) {
            Ok(value) => value,
            Err(e) => {
                // The parser cannot find the next document after a syntax error.
                errors.push(format!("document {n}: invalid YAML: {e}"));
                break;
            }
        };
        if value.is_null() {
            continue; // an empty document, e.g. a trailing `---`
        }
        let json: Value = match serde_json::to_value(&value) {
            Ok(json) => json,
            Err(e) => {
                errors.push(format!("document {n}: not representable as JSON: {e}"));
                continue;
            }
        };
        let is_list = json.get("kind").and_then(Value::as_str) == Some("List")
            && json.get("items").is_some_and(Value::is_array);
        if is_list {
            let items = json["items"].as_array().cloned().unwrap_or_default();
            for (j, item) in items.into_iter().enumerate() {
                let at = format!("document {n} item {}", j + 1);
                read_document(item, &at, kinds, &mut parsed, &mut errors);
            }
        } else {
            read_document(
                json,
                &format!("document {n}"),
                kinds,
                &mut parsed,
                &mut errors,
            );
        }
    }
    if errors.is_empty() {
        Ok(parsed)
    } else {
        Err(errors.join("; "))
    }
}

/// Reads one document (`at` names it) into `parsed`, or says what is wrong with it.
fn read_document(
    mut json: Value,
    at: &str,
    kinds: &Kinds,
    parsed: &mut Parsed,
    errors: &mut Vec<String>,
) {
    let field = |v: &Value, f: &str| v.get(f).and_then(Value::as_str).map(str::to_string);
    let Some(mut api_version) = field(&json, "apiVersion") else {
        errors.push(format!("{at}: missing apiVersion"));
        return;
    };
    let Some(kind) = field(&json, "kind") else {
        errors.push(format!("{at}: missing kind"));
        return;
    };
    if let Some(read_as) = kinds.aliases.get(&(api_version.clone(), kind.clone())) {
        api_version = read_as.clone();
        json["apiVersion"] = Value::String(read_as.clone());
    }
    let meta = json.get("metadata").cloned().unwrap_or(Value::Null);
    let Some(name) = field(&meta, "name").filter(|n| !n.is_empty()) else {
        errors.push(format!("{at} ({kind}): missing metadata.name"));
        return;
    };
    let namespace = field(&meta, "namespace").unwrap_or_else(|| "default".to_string());
    let Some(check) = kinds.validators.get(&(api_version.clone(), kind.clone())) else {
        let ours = kinds
            .validators
            .keys()
            .any(|(_, k)| k.eq_ignore_ascii_case(&kind));
        if ours {
            errors.push(format!(
                "{at} ({kind} {name}): unsupported apiVersion/kind {api_version}/{kind}"
            ));
        } else {
            parsed.skipped.push(format!(
                "{at} ({api_version} {kind} {namespace}/{name}): not a kind sluice reads; skipped"
            ));
        }
        return;
    };
    if let Some(m) = json.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("namespace".into(), Value::String(namespace.clone()));
    }
    if let Err(e) = check(&json) {
        errors.push(format!("{at} ({kind} {namespace}/{name}): {e}"));
        return;
    }
    parsed.objects.push((
        ObjectKey {
            api_version,
            kind,
            namespace,
            name,
        },
        json,
    ));
}

/// The default largest manifest file read: 16 MiB, far above any hand-written manifest
/// and small enough that parsing it takes a moment, not minutes and gigabytes.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads `path` as UTF-8 text if it holds at most `max` bytes. `len` (from the metadata
/// already at hand) refuses a large file before a byte is read; the bounded read covers a
/// file that grows in between.
fn read_limited(path: &Path, len: u64, max: u64) -> Result<String, String> {
    let too_big = |len: String| {
        format!(
            "{}: file is {len} bytes, over --max-manifest-bytes ({max})",
            path.display()
        )
    };
    if len > max {
        return Err(too_big(len.to_string()));
    }
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {e}"))?;
    if bytes.len() as u64 > max {
        return Err(too_big(format!("more than {max}")));
    }
    String::from_utf8(bytes).map_err(|e| format!("cannot read: not UTF-8: {e}"))
}

/// How deep [`Scanner`] goes into subdirectories (`kubectl apply -R` goes all the way; a
/// bound keeps a pathological tree from stalling the scan).
const MAX_DEPTH: usize = 8;

/// The manifest files (`.yaml`, `.yml`, `.json`, not hidden) in `dir` and, like
/// `kubectl apply -R`, its subdirectories (not hidden, not symbolic links: no loops).
fn manifest_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir {
            if depth < MAX_DEPTH {
                // A subdirectory that cannot be read is skipped; the top one must be.
                let _ = manifest_files(&path, depth + 1, out);
            }
            continue;
        }
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if matches!(ext, "yaml" | "yml" | "json") {
            out.push(path);
        }
    }
    Ok(())
}

/// Scans a directory and keeps per-file state between scans. No async, no threads: the
/// [`ManifestDir`] drives it.
pub struct Scanner {
    dir: PathBuf,
    kinds: Kinds,
    max_file_bytes: u64,
    files: BTreeMap<PathBuf, FileState>,
}

impl Scanner {
    /// A scanner of `dir` accepting `kinds`, refusing files over [`DEFAULT_MAX_FILE_BYTES`].
    pub fn new(dir: impl Into<PathBuf>, kinds: Kinds) -> Self {
        Scanner {
            dir: dir.into(),
            kinds,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            files: BTreeMap::new(),
        }
    }

    /// Refuses files larger than `max` bytes (without reading them).
    #[must_use]
    pub fn with_max_file_bytes(mut self, max: u64) -> Self {
        self.max_file_bytes = max;
        self
    }

    /// Re-reads changed files. Returns true when the snapshot may differ from the last one.
    pub fn scan(&mut self) -> std::io::Result<bool> {
        let mut seen = Vec::new();
        let mut changed = false;
        let mut entries = Vec::new();
        manifest_files(&self.dir, 0, &mut entries)?;
        entries.sort();
        for path in entries {
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let stamp = (
                meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                meta.len(),
            );
            seen.push(path.clone());
            if self.files.get(&path).is_some_and(|f| f.stamp == stamp) {
                continue;
            }
            changed = true;
            let parsed = read_limited(&path, meta.len(), self.max_file_bytes)
                .and_then(|text| parse_manifests(&text, &self.kinds));
            let previous = self.files.remove(&path);
            let state = match parsed {
                Ok(Parsed { objects, skipped }) => {
                    tracing::info!(file = %path.display(), objects = objects.len(), "manifests loaded");
                    for document in &skipped {
                        tracing::warn!(file = %path.display(), "{document}");
                    }
                    FileState {
                        stamp,
                        objects: objects.into_iter().map(|(k, v)| (k, Arc::new(v))).collect(),
                        skipped,
                        error: None,
                    }
                }
                Err(reason) => {
                    tracing::error!(
                        file = %path.display(),
                        %reason,
                        "manifest file rejected; its last good objects keep serving"
                    );
                    let (objects, skipped) =
                        previous.map(|p| (p.objects, p.skipped)).unwrap_or_default();
                    FileState {
                        stamp,
                        objects,
                        skipped,
                        error: Some(reason),
                    }
                }
            };
            self.files.insert(path, state);
        }
        let before = self.files.len();
        self.files.retain(|p, _| seen.contains(p));
        if self.files.len() != before {
            changed = true;
        }
        Ok(changed)
    }

    /// The objects of every file (files in name order; a later definition of the same object
    /// is an error of the later file and does not replace the first).
    pub fn snapshot(&self) -> Snapshot {
        let mut snap = Snapshot::default();
        for (path, file) in &self.files {
            if let Some(e) = &file.error {
                snap.errors.insert(path.clone(), e.clone());
            }
            if !file.skipped.is_empty() {
                snap.skipped.insert(path.clone(), file.skipped.clone());
            }
            for (key, value) in &file.objects {
                if snap.objects.contains_key(key) {
                    let msg =
                        format!("{key} is also defined in an earlier file; this one is ignored");
                    tracing::warn!(file = %path.display(), "{msg}");
                    snap.errors.entry(path.clone()).or_insert(msg);
                    continue;
                }
                snap.objects.insert(key.clone(), value.clone());
            }
        }
        snap
    }
}

/// A polled directory of manifests, offering each kind as a [`ListWatch`].
#[derive(Clone)]
pub struct ManifestDir {
    rx: watch::Receiver<Arc<Snapshot>>,
}

impl ManifestDir {
    /// Scans `dir` once (so the first list is complete) and keeps polling it every `poll`
    /// on the current tokio runtime until every [`ManifestDir`] clone and stream is dropped.
    pub fn open(dir: impl Into<PathBuf>, kinds: Kinds, poll: Duration) -> std::io::Result<Self> {
        Self::start(Scanner::new(dir, kinds), poll)
    }

    /// As [`ManifestDir::open`], with a scanner configured by the caller. Scans block the
    /// current runtime's thread while they read and parse: call this on the control plane's
    /// runtime, not the proxy's.
    pub fn start(mut scanner: Scanner, poll: Duration) -> std::io::Result<Self> {
        let dir = scanner.dir.clone();
        scanner.scan()?;
        let (tx, rx) = watch::channel(Arc::new(scanner.snapshot()));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                if tx.is_closed() {
                    break;
                }
                match scanner.scan() {
                    Ok(true) => {
                        let _ = tx.send(Arc::new(scanner.snapshot()));
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(dir = %dir.display(), error = %e, "cannot read manifest directory")
                    }
                }
            }
        });
        Ok(ManifestDir { rx })
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.rx.borrow().clone()
    }

    /// Objects of type `K` as a list-then-watch source.
    pub fn source<K>(&self) -> DirListWatch<K> {
        DirListWatch {
            rx: self.rx.clone(),
            _k: std::marker::PhantomData,
        }
    }
}

/// One kind of a [`ManifestDir`] as a [`ListWatch`].
pub struct DirListWatch<K> {
    rx: watch::Receiver<Arc<Snapshot>>,
    _k: std::marker::PhantomData<fn() -> K>,
}

fn objects_of<K: Resource<DynamicType = ()>>(snap: &Snapshot) -> BTreeMap<ObjectKey, Arc<Value>> {
    let (av, kind) = (K::api_version(&()), K::kind(&()));
    snap.objects
        .iter()
        .filter(|(k, _)| k.api_version == av && k.kind == kind)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn typed<K: DeserializeOwned>(key: &ObjectKey, v: &Value) -> Result<K, ListWatchError> {
    serde_json::from_value(v.clone())
        .map_err(|e| ListWatchError::Other(format!("{key}: {e}").into()))
}

impl<K> ListWatch<K> for DirListWatch<K>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Send + Sync + 'static,
{
    fn stream(&self) -> EventStream<K> {
        let mut rx = self.rx.clone();
        let (tx, out) = futures::channel::mpsc::unbounded();
        tokio::spawn(async move {
            let first = rx.borrow_and_update().clone();
            let mut current = objects_of::<K>(&first);
            let mut events = vec![Ok(Event::Init)];
            events.extend(
                current
                    .iter()
                    .map(|(k, v)| typed(k, v).map(Event::InitApply)),
            );
            events.push(Ok(Event::InitDone));
            for e in events {
                if tx.unbounded_send(e).is_err() {
                    return;
                }
            }
            while rx.changed().await.is_ok() {
                let snap = rx.borrow_and_update().clone();
                let next = objects_of::<K>(&snap);
                let mut events = Vec::new();
                for (k, v) in &next {
                    if current.get(k).is_none_or(|old| old != v) {
                        events.push(typed(k, v).map(Event::Apply));
                    }
                }
                for (k, v) in &current {
                    if !next.contains_key(k) {
                        events.push(typed(k, v).map(Event::Delete));
                    }
                }
                current = next;
                for e in events {
                    if tx.unbounded_send(e).is_err() {
                        return;
                    }
                }
            }
        });
        out.boxed()
    }

    fn describe(&self) -> String {
        format!("manifests of kind {}", K::kind(&()))
    }
}

/// Decodes the manifest object `value` (found under `key`) as a `K` into `out`, or notes
/// in `errors` why it is not one.
pub(crate) fn decode_into<K: DeserializeOwned>(
    key: impl std::fmt::Display,
    value: &Value,
    out: &mut Vec<K>,
    errors: &mut Vec<String>,
) {
    match serde_json::from_value(value.clone()) {
        Ok(object) => out.push(object),
        Err(e) => errors.push(format!("{key}: {e}")),
    }
}

/// The ConfigMap `namespace/name` of `snapshot`, decoded (`--configmap` in a manifest
/// directory); `None` when there is none or it does not decode (noted in `errors`).
pub(crate) fn config_map_in(
    snapshot: &Snapshot,
    namespace: &str,
    name: &str,
    errors: &mut Vec<String>,
) -> Option<k8s_openapi::api::core::v1::ConfigMap> {
    let mut found = Vec::new();
    for (key, value) in &snapshot.objects {
        if key.kind == "ConfigMap" && key.namespace == namespace && key.name == name {
            decode_into(key, value, &mut found, errors);
        }
    }
    found.pop()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::networking::v1::Ingress;

    fn kinds() -> Kinds {
        Kinds::default().with::<Ingress>().with::<Service>()
    }

    const GOOD: &str = "apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}
---
";

    #[test]
    fn another_served_version_is_read_as_the_registered_one() {
        let with_alias = kinds().also::<Ingress>("networking.k8s.io/v1beta1");
        let doc = "apiVersion: networking.k8s.io/v1beta1
kind: Ingress
metadata: {name: old}
spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}
";
        let objs = parse_manifests(doc, &with_alias).unwrap().objects;
        assert_eq!(objs[0].0.api_version, "networking.k8s.io/v1");
        assert_eq!(objs[0].1["apiVersion"], "networking.k8s.io/v1");
        // Not registered: refused as before.
        let err = parse_manifests(doc, &kinds()).unwrap_err();
        assert!(err.contains("unsupported apiVersion/kind"), "{err}");
    }

    #[test]
    fn parses_documents_and_defaults_the_namespace() {
        let objs = parse_manifests(GOOD, &kinds()).unwrap().objects;
        let keys: Vec<String> = objs.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["Service default/web", "Ingress shop/web"]);
        assert_eq!(objs[0].1["metadata"]["namespace"], "default");
    }

    #[test]
    fn errors_name_the_document_and_the_reason() {
        let cases = [
            (
                "kind: Service\nmetadata: {name: a}\n",
                "document 1: missing apiVersion",
            ),
            (
                "apiVersion: v1\nkind: Service\nmetadata: {}\n",
                "document 1 (Service): missing metadata.name",
            ),
            (
                "apiVersion: extensions/v1beta1\nkind: Ingress\nmetadata: {name: d}\n",
                "unsupported apiVersion/kind extensions/v1beta1/Ingress",
            ),
            (
                "apiVersion: v1\nkind: service\nmetadata: {name: d}\n",
                "unsupported apiVersion/kind v1/service",
            ),
            (
                "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {ports: 3}\n",
                "document 1 (Service default/a): invalid type",
            ),
            ("a: [\n", "document 1: invalid YAML"),
        ];
        for (text, want) in cases {
            let err = parse_manifests(text, &kinds()).unwrap_err();
            assert!(err.contains(want), "{text:?}: got {err:?}, want {want:?}");
        }
        // The second document is the bad one.
        let err = parse_manifests(&format!("{GOOD}kind: X\n"), &kinds()).unwrap_err();
        assert!(err.starts_with("document 3:"), "{err}");
    }

    /// #33: what `kubectl get ingress -A -o yaml` writes (a `List`), other kinds beside
    /// ours (skipped, named, the rest read), and every bad document named, not only the
    /// first.
    #[test]
    fn lists_are_read_other_kinds_skipped_and_every_bad_document_named() {
        let list = "apiVersion: v1
kind: List
items:
- apiVersion: networking.k8s.io/v1
  kind: Ingress
  metadata: {name: a, namespace: shop}
  spec: {defaultBackend: {service: {name: web, port: {number: 80}}}}
- apiVersion: v1
  kind: Service
  metadata: {name: web}
";
        let parsed = parse_manifests(list, &kinds()).unwrap();
        let keys: Vec<String> = parsed.objects.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["Ingress shop/a", "Service default/web"]);

        let mixed =
            format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\n---\n{GOOD}");
        let parsed = parse_manifests(&mixed, &kinds()).unwrap();
        assert_eq!(
            parsed.objects.len(),
            2,
            "the Ingress and Service beside it are read"
        );
        assert_eq!(
            parsed.skipped,
            ["document 1 (apps/v1 Deployment default/web): not a kind sluice reads; skipped"]
        );

        let two_bad =
            format!("{GOOD}kind: X\n---\napiVersion: v1\nkind: Service\nmetadata: {{}}\n");
        let err = parse_manifests(&two_bad, &kinds()).unwrap_err();
        assert!(err.starts_with("document 3: missing apiVersion"), "{err}");
        assert!(
            err.contains("; document 4 (Service): missing metadata.name"),
            "{err}"
        );
        let bad_item = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Service}\n";
        let err = parse_manifests(bad_item, &kinds()).unwrap_err();
        assert_eq!(err, "document 1 item 1 (Service): missing metadata.name");
    }

    /// Like `kubectl apply -R`: subdirectories are read; hidden ones and hidden files not.
    #[test]
    fn subdirectories_are_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("apps/shop")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::write(dir.path().join("apps/shop/ingress.yaml"), GOOD).unwrap();
        std::fs::write(dir.path().join(".git/x.yaml"), "not: [valid").unwrap();
        let mut scanner = Scanner::new(dir.path(), kinds());
        scanner.scan().unwrap();
        let snap = scanner.snapshot();
        assert_eq!(snap.objects.len(), 2);
        assert!(snap.errors.is_empty(), "{:?}", snap.errors);
    }

    #[test]
    fn a_bad_file_keeps_its_last_good_objects_and_removed_files_drop_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("app.yaml");
        std::fs::write(&file, GOOD).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let mut scanner = Scanner::new(dir.path(), kinds());
        assert!(scanner.scan().unwrap());
        assert_eq!(scanner.snapshot().objects.len(), 2);
        assert!(!scanner.scan().unwrap(), "nothing changed");

        std::fs::write(&file, "apiVersion: v1\nkind: Service\n  bad indent: [").unwrap();
        assert!(scanner.scan().unwrap());
        let snap = scanner.snapshot();
        assert_eq!(snap.objects.len(), 2, "last good objects keep serving");
        assert!(
            snap.errors[&file].contains("invalid YAML"),
            "{:?}",
            snap.errors
        );

        let other = dir.path().join("zz-dup.yaml");
        std::fs::write(&other, GOOD).unwrap();
        std::fs::write(&file, "").unwrap();
        scanner.scan().unwrap();
        let snap = scanner.snapshot();
        assert_eq!(
            snap.objects.len(),
            2,
            "the same objects now come from the other file"
        );
        assert!(snap.errors.is_empty(), "{:?}", snap.errors);

        std::fs::remove_file(&other).unwrap();
        assert!(scanner.scan().unwrap());
        assert!(scanner.snapshot().objects.is_empty());
    }

    #[test]
    fn a_file_over_the_size_limit_is_refused_by_name_and_keeps_its_last_good_objects() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app.yaml");
        let other = dir.path().join("other.yaml");
        let service =
            |name: &str| format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\n");
        std::fs::write(&app, GOOD).unwrap();
        std::fs::write(&other, service("a")).unwrap();
        let limit = GOOD.len() as u64 + 16;
        let mut scanner = Scanner::new(dir.path(), kinds()).with_max_file_bytes(limit);
        assert!(scanner.scan().unwrap());
        assert_eq!(scanner.snapshot().objects.len(), 3);

        // app.yaml grows past the limit (a comment: it would parse) while other.yaml changes.
        let big = format!("{GOOD}#{}\n", "x".repeat(64));
        std::fs::write(&app, &big).unwrap();
        std::fs::write(&other, service("b")).unwrap();
        assert!(scanner.scan().unwrap());
        let snap = scanner.snapshot();
        let err = &snap.errors[&app];
        let want = format!(
            "{}: file is {} bytes, over --max-manifest-bytes ({limit})",
            app.display(),
            big.len()
        );
        assert_eq!(err, &want);
        let keys: Vec<String> = snap.objects.keys().map(ToString::to_string).collect();
        assert_eq!(
            keys,
            [
                "Ingress shop/web",
                "Service default/b",
                "Service default/web"
            ],
            "app.yaml's last good objects stay, other.yaml's change loads"
        );
        assert_eq!(snap.errors.len(), 1, "{:?}", snap.errors);
        assert!(!scanner.scan().unwrap(), "refused once, not on every poll");

        // A file that is too big from the start contributes nothing.
        let huge = dir.path().join("huge.yaml");
        std::fs::write(&huge, format!("# {}\n", "x".repeat(limit as usize))).unwrap();
        assert!(scanner.scan().unwrap());
        let snap = scanner.snapshot();
        assert!(snap.errors[&huge].starts_with(&format!("{}: file is ", huge.display())));
        assert_eq!(snap.objects.len(), 3);

        // Back under the limit: served again.
        std::fs::write(&app, service("c")).unwrap();
        std::fs::remove_file(&huge).unwrap();
        assert!(scanner.scan().unwrap());
        let snap = scanner.snapshot();
        assert!(snap.errors.is_empty(), "{:?}", snap.errors);
        let keys: Vec<String> = snap.objects.keys().map(ToString::to_string).collect();
        assert_eq!(keys, ["Service default/b", "Service default/c"]);
    }

    #[test]
    fn a_file_that_grew_after_its_size_was_read_is_still_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("app.yaml");
        std::fs::write(&file, GOOD).unwrap();
        // As if the metadata had said 10 bytes: the read itself stops past the limit.
        let err = read_limited(&file, 10, 20).unwrap_err();
        assert!(
            err.starts_with(&format!("{}: file is more than 20 bytes", file.display())),
            "{err}"
        );
        assert_eq!(read_limited(&file, 10, GOOD.len() as u64).unwrap(), GOOD);
    }

    #[tokio::test]
    async fn list_watch_emits_init_then_changes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("app.yaml");
        std::fs::write(&file, GOOD).unwrap();
        let md = ManifestDir::open(dir.path(), kinds(), Duration::from_millis(20)).unwrap();
        let mut s = md.source::<Service>().stream();
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(5), s.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
        };
        assert!(matches!(next().await, Event::Init));
        assert!(
            matches!(next().await, Event::InitApply(svc) if svc.metadata.name.as_deref() == Some("web"))
        );
        assert!(matches!(next().await, Event::InitDone));
        // Different size, so the change is seen even within one mtime tick.
        std::fs::write(&file, GOOD.replace("port: 80}", "port: 8080}")).unwrap();
        match next().await {
            Event::Apply(svc) => assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 8080),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(&file).unwrap();
        assert!(matches!(next().await, Event::Delete(_)));
    }
}
