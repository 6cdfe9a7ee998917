//! Typed reads from an informer's store (client-go generated `Lister`s).
//!
//! Label selectors are kube's [`Selector`]; [`parse_selector`] reads the usual string form
//! (`a=b, c!=d, e in (x,y), f notin (z), g, !h`).

use std::{collections::BTreeMap, sync::Arc};

use kube::{
    Resource,
    core::{Expression, Selector, SelectorExt},
};

use crate::store::{NAMESPACE_INDEX, Store, make_key};

/// A selector string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The offending selector.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn valid_value(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// Parses a label selector string into a kube [`Selector`]. The empty string selects all.
pub fn parse_selector(s: &str) -> Result<Selector, SelectorError> {
    let err = |reason: &str| SelectorError {
        selector: s.to_string(),
        reason: reason.to_string(),
    };
    let mut exprs = Vec::new();
    if s.trim().is_empty() {
        return Ok(Selector::default());
    }
    for term in split_top_level(s) {
        let term = term.trim();
        if term.is_empty() {
            return Err(err("empty requirement"));
        }
        let expr = if let Some(key) = term.strip_prefix('!') {
            let key = key.trim();
            if !valid_key(key) {
                return Err(err("bad key after '!'"));
            }
            Expression::DoesNotExist(key.to_string())
        } else if let Some(open) = term.find('(') {
            let close = term.rfind(')').ok_or_else(|| err("missing ')'"))?;
            if close < open || !term[close + 1..].trim().is_empty() {
                return Err(err("bad set expression"));
            }
            let head: Vec<&str> = term[..open].split_whitespace().collect();
            let [key, op] = head.as_slice() else {
                return Err(err("expected `key in (..)` or `key notin (..)`"));
            };
            if !valid_key(key) {
                return Err(err("bad key"));
            }
            let values = term[open + 1..close]
                .split(',')
                .map(str::trim)
                .map(|v| {
                    if valid_value(v) {
                        Ok(v.to_string())
                    } else {
                        Err(err("bad value"))
                    }
                })
                .collect::<Result<_, _>>()?;
            match *op {
                "in" => Expression::In(key.to_string(), values),
                "notin" => Expression::NotIn(key.to_string(), values),
                _ => return Err(err("unknown set operator")),
            }
        } else if let Some((k, v)) = term.split_once("!=") {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) || !valid_value(v) {
                return Err(err("bad `key!=value`"));
            }
            Expression::NotEqual(k.to_string(), v.to_string())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) || !valid_value(v) {
                return Err(err("bad `key=value`"));
            }
            Expression::Equal(k.to_string(), v.to_string())
        } else if valid_key(term) {
            Expression::Exists(term.to_string())
        } else {
            return Err(err("unsupported requirement"));
        };
        exprs.push(expr);
    }
    Ok(exprs.into_iter().collect())
}

/// Whether `obj`'s labels match `selector`.
pub fn matches_labels<K: Resource>(obj: &K, selector: &Selector) -> bool {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    selector.matches(obj.meta().labels.as_ref().unwrap_or(&EMPTY))
}

/// Typed read access to a store (client-go `PodLister` and friends). Cheap to clone.
pub struct Lister<K> {
    store: Store<K>,
}

impl<K> Clone for Lister<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
        }
    }
}

impl<K> std::fmt::Debug for Lister<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lister")
            .field("store", &self.store)
            .finish()
    }
}

impl<K: Resource> Lister<K> {
    /// A lister over `store` (from [`crate::SharedIndexInformer::store`] or
    /// [`crate::StoreWriter::as_reader`]).
    pub fn new(store: Store<K>) -> Self {
        Self { store }
    }

    /// The object `name` in namespace `ns` (pass `""` for a cluster-scoped object).
    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<K>> {
        self.store.get_by_key(&make_key(Some(ns), name))
    }

    /// Objects in namespace `ns` (or all namespaces) whose labels match `selector`.
    pub fn list(&self, ns: Option<&str>, selector: &Selector) -> Vec<Arc<K>> {
        let candidates = match ns {
            Some(ns) => match self.store.by_index(NAMESPACE_INDEX, ns) {
                Ok(objs) => objs,
                // No namespace index: scan.
                Err(_) => self
                    .store
                    .list()
                    .into_iter()
                    .filter(|o| o.meta().namespace.as_deref() == Some(ns))
                    .collect(),
            },
            None => self.store.list(),
        };
        if selector.selects_all() {
            return candidates;
        }
        candidates
            .into_iter()
            .filter(|o| matches_labels(o.as_ref(), selector))
            .collect()
    }

    /// Like [`Lister::list`] with a selector string (see [`parse_selector`]).
    pub fn list_str(&self, ns: Option<&str>, selector: &str) -> Result<Vec<Arc<K>>, SelectorError> {
        Ok(self.list(ns, &parse_selector(selector)?))
    }

    /// Every object.
    pub fn list_all(&self) -> Vec<Arc<K>> {
        self.store.list()
    }

    /// The store behind this lister, read-only (for index queries).
    pub fn store(&self) -> &Store<K> {
        &self.store
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreWriter;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(ns: &str, name: &str, labels: &[(&str, &str)]) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn parses_selectors() {
        let s = parse_selector("a=b, c!=d,e in (x, y),f notin (z),g,!h,i==j").unwrap();
        assert_eq!(s.to_string(), "a=b,c!=d,e in (x,y),f notin (z),g,!h,i=j");
        assert!(parse_selector("").unwrap().selects_all());
        for bad in [
            "a=",
            "=b",
            "a b",
            "a in x",
            "a in (x",
            "a foo (x)",
            ",",
            "a=b,",
            "!",
            "a>1",
        ] {
            let ok = parse_selector(bad);
            // `a=` is a valid "empty value" selector in Kubernetes.
            if bad == "a=" {
                assert!(ok.is_ok(), "{bad}");
            } else {
                assert!(ok.is_err(), "{bad} parsed as {ok:?}");
            }
        }
    }

    #[test]
    fn get_and_list() {
        let store = StoreWriter::<ConfigMap>::new();
        store
            .add(cm("a", "one", &[("app", "web"), ("tier", "x")]))
            .unwrap();
        store.add(cm("a", "two", &[("app", "db")])).unwrap();
        store.add(cm("b", "one", &[("app", "web")])).unwrap();
        let l = Lister::new(store.as_reader());
        assert!(l.get("a", "one").is_some());
        assert!(l.get("c", "one").is_none());
        let names = |v: Vec<Arc<ConfigMap>>| {
            let mut v: Vec<String> = v
                .iter()
                .map(|o| {
                    format!(
                        "{}/{}",
                        o.metadata.namespace.clone().unwrap(),
                        o.metadata.name.clone().unwrap()
                    )
                })
                .collect();
            v.sort();
            v
        };
        assert_eq!(names(l.list(None, &Selector::default())).len(), 3);
        assert_eq!(
            names(l.list(Some("a"), &Selector::default())),
            vec!["a/one", "a/two"]
        );
        assert_eq!(
            names(l.list_str(None, "app=web").unwrap()),
            vec!["a/one", "b/one"]
        );
        assert_eq!(
            names(l.list_str(Some("a"), "app in (web,db),!tier").unwrap()),
            vec!["a/two"]
        );
        assert_eq!(names(l.list_str(None, "app!=web").unwrap()), vec!["a/two"]);
        assert_eq!(names(l.list_str(None, "tier").unwrap()), vec!["a/one"]);
        assert_eq!(
            names(l.list_str(None, "app notin (web)").unwrap()),
            vec!["a/two"]
        );
        // without a namespace index the lister scans
        let bare = StoreWriter::<ConfigMap>::without_indexes();
        bare.add(cm("a", "one", &[])).unwrap();
        bare.add(cm("b", "one", &[])).unwrap();
        assert_eq!(
            names(Lister::new(bare.as_reader()).list(Some("b"), &Selector::default())),
            vec!["b/one"]
        );
    }
}
