//! The Ingresses of the last compile by name and by the hosts they bear on: what finds
//! the changed Ingresses and the ones a partial compile must read with them.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::networking::v1::Ingress;

use super::footprint::footprint;
use super::unchanged::ReadAlike;
use crate::ObjectList;
use crate::host::HostPattern;
use crate::key::FastMap;

/// `(namespace, name)`.
pub(crate) type IngressName = (String, String);

/// The name of `ingress`.
pub(crate) fn name_of(ingress: &Ingress) -> IngressName {
    let meta = &ingress.metadata;
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// One Ingress as last compiled.
struct Known {
    ingress: Arc<Ingress>,
    hosts: Vec<HostPattern>,
}

/// The address of the object an `Arc` holds: its identity.
fn address(ingress: &Arc<Ingress>) -> usize {
    Arc::as_ptr(ingress) as usize
}

/// What changed between the indexed Ingresses and a new list.
#[derive(Debug, Default)]
pub(crate) struct IngressChanges {
    /// Added or updated: the new objects.
    pub changed: Vec<Arc<Ingress>>,
    /// Gone: the last objects.
    pub removed: Vec<Arc<Ingress>>,
}

impl IngressChanges {
    /// How many Ingresses changed.
    pub(crate) fn len(&self) -> usize {
        self.changed.len() + self.removed.len()
    }
}

/// The most items between two lists' common start and end that
/// [`IngressIndex::diff_from`] compares alone (more: every item is).
pub(crate) const FEW: usize = 64;

/// Every Ingress of the last compile, with its hosts, and the Ingresses of each host.
#[derive(Default)]
pub(crate) struct IngressIndex {
    by_name: FastMap<IngressName, Known>,
    by_host: FastMap<HostPattern, HashSet<IngressName>>,
    /// The addresses of the indexed objects.
    by_address: HashSet<usize, foldhash::fast::RandomState>,
}

impl IngressIndex {
    /// The index of `ingresses`.
    pub(crate) fn new<'a>(ingresses: impl IntoIterator<Item = &'a Arc<Ingress>>) -> Self {
        let mut index = IngressIndex::default();
        for ingress in ingresses {
            index.insert(Arc::clone(ingress));
        }
        index
    }

    /// How many Ingresses it holds.
    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    /// The Ingresses of `ingresses` that are not the indexed objects (an unchanged object
    /// is the same `Arc`, or one whose status alone differs: that one replaces the indexed
    /// object), and the indexed ones `ingresses` lacks. Order does not matter.
    pub(crate) fn diff<'a, I>(&mut self, ingresses: I) -> IngressChanges
    where
        I: IntoIterator<Item = &'a Arc<Ingress>> + Clone,
    {
        self.diff_of(ingresses, None)
    }

    /// [`IngressIndex::diff`] of `ingresses` for an index of `last`: only the items the two
    /// lists do not share ([`super::listing::unmatched`]) are compared when they are a few
    /// (at 10,000 Ingresses, hashing every address per change was a tenth of the control
    /// thread).
    pub(crate) fn diff_from(
        &mut self,
        last: &ObjectList<Ingress>,
        ingresses: &ObjectList<Ingress>,
    ) -> IngressChanges {
        match super::listing::unmatched(last, ingresses, FEW) {
            Some(unmatched) if self.by_address.len() == last.len() => {
                self.diff_of(unmatched.came.iter(), Some(&unmatched.gone))
            }
            _ => self.diff(ingresses),
        }
    }

    /// The diff of `ingresses` (all, or with `gone` those the index has that `ingresses`
    /// may lack: the rest of the index is known to be unchanged).
    fn diff_of<'a, I>(&mut self, ingresses: I, gone: Option<&[Arc<Ingress>]>) -> IngressChanges
    where
        I: IntoIterator<Item = &'a Arc<Ingress>> + Clone,
    {
        let mut changes = IngressChanges::default();
        // Indexed names found in `ingresses`.
        let mut found = 0;
        // The indexed Ingresses `ingresses` holds a new version of.
        let mut replaced: HashSet<IngressName, foldhash::fast::RandomState> = HashSet::default();
        for ingress in ingresses.clone() {
            if self.by_address.contains(&address(ingress)) {
                found += 1;
                continue;
            }
            let name = name_of(ingress);
            match self.by_name.get_mut(&name) {
                // A status write: the compiler reads no status.
                Some(known) if known.ingress.reads_alike(ingress) => {
                    found += 1;
                    self.by_address.remove(&address(&known.ingress));
                    self.by_address.insert(address(ingress));
                    known.ingress = Arc::clone(ingress);
                }
                Some(_) => {
                    found += 1;
                    replaced.insert(name);
                    changes.changed.push(Arc::clone(ingress));
                }
                None => changes.changed.push(Arc::clone(ingress)),
            }
        }
        if let Some(gone) = gone {
            // Gone: the indexed object of a name `last` had there, unless a new version of
            // it is among the new items (a status write above put it in the index).
            let present: HashSet<usize, foldhash::fast::RandomState> =
                ingresses.into_iter().map(address).collect();
            // The index may hold an older object of a name than `last` does (a status
            // write a compile of other kinds took in): it goes by name.
            changes.removed = gone
                .iter()
                .filter_map(|i| {
                    let name = name_of(i);
                    let known = self.by_name.get(&name)?;
                    (!present.contains(&address(&known.ingress)) && !replaced.contains(&name))
                        .then(|| Arc::clone(&known.ingress))
                })
                .collect();
        } else if found < self.by_name.len() {
            // Gone: neither the indexed object (by address: no names hashed at 10,000
            // Ingresses) nor a new version of it is in `ingresses`.
            let present: HashSet<usize, foldhash::fast::RandomState> =
                ingresses.into_iter().map(address).collect();
            changes.removed = self
                .by_name
                .iter()
                .filter(|(name, known)| {
                    !present.contains(&address(&known.ingress)) && !replaced.contains(name)
                })
                .map(|(_, known)| Arc::clone(&known.ingress))
                .collect();
        }
        changes
    }

    /// The hosts the indexed `name` bears on (none when not indexed).
    pub(crate) fn hosts(&self, name: &IngressName) -> &[HostPattern] {
        self.by_name.get(name).map_or(&[], |k| k.hosts.as_slice())
    }

    /// Every indexed Ingress.
    pub(crate) fn ingresses(&self) -> impl Iterator<Item = &Arc<Ingress>> {
        self.by_name.values().map(|k| &k.ingress)
    }

    /// The indexed object of `name`.
    pub(crate) fn get(&self, name: &IngressName) -> Option<&Arc<Ingress>> {
        self.by_name.get(name).map(|k| &k.ingress)
    }

    /// Adds or replaces an Ingress.
    pub(crate) fn insert(&mut self, ingress: Arc<Ingress>) {
        let name = name_of(&ingress);
        self.remove(&name);
        let hosts = footprint(&ingress);
        for host in &hosts {
            self.by_host
                .entry(host.clone())
                .or_default()
                .insert(name.clone());
        }
        self.by_address.insert(address(&ingress));
        self.by_name.insert(name, Known { ingress, hosts });
    }

    /// Removes an Ingress.
    pub(crate) fn remove(&mut self, name: &IngressName) {
        let Some(known) = self.by_name.remove(name) else {
            return;
        };
        self.by_address.remove(&address(&known.ingress));
        for host in &known.hosts {
            if let Some(names) = self.by_host.get_mut(host) {
                names.remove(name);
                if names.is_empty() {
                    self.by_host.remove(host);
                }
            }
        }
    }

    /// Starting from `hosts`, every Ingress that bears on one of them and every host those
    /// bear on, until nothing is added: the Ingresses whose compile decides those hosts,
    /// and the hosts they decide. Gives up (`None`) past `limit` Ingresses.
    pub(crate) fn closure(
        &self,
        hosts: impl IntoIterator<Item = HostPattern>,
        limit: usize,
    ) -> Option<(HashSet<HostPattern>, Vec<IngressName>)> {
        let mut seen_hosts: HashSet<HostPattern> = HashSet::new();
        let mut queue: Vec<HostPattern> = Vec::new();
        for host in hosts {
            if seen_hosts.insert(host.clone()) {
                queue.push(host);
            }
        }
        let mut names: HashSet<&IngressName> = HashSet::new();
        while let Some(host) = queue.pop() {
            for name in self.by_host.get(&host).into_iter().flatten() {
                if !names.insert(name) {
                    continue;
                }
                if names.len() > limit {
                    return None;
                }
                for next in self.hosts(name) {
                    if seen_hosts.insert(next.clone()) {
                        queue.push(next.clone());
                    }
                }
            }
        }
        let mut names: Vec<IngressName> = names.into_iter().cloned().collect();
        names.sort();
        Some((seen_hosts, names))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ingress(name: &str, hosts: &[&str]) -> Arc<Ingress> {
        let rules: Vec<_> = hosts.iter().map(|h| json!({"host": h})).collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "ns", "name": name},
                "spec": {"rules": rules}
            }))
            .expect("an Ingress"),
        )
    }

    fn exact(name: &str) -> HostPattern {
        HostPattern::Exact(name.to_owned())
    }

    fn named(name: &str) -> IngressName {
        ("ns".to_owned(), name.to_owned())
    }

    #[test]
    fn the_diff_finds_added_updated_and_removed_ingresses_by_identity() {
        let a = ingress("a", &["a.test"]);
        let b = ingress("b", &["b.test"]);
        let c = ingress("c", &["c.test"]);
        let mut index = IngressIndex::new(&[a.clone(), b.clone(), c.clone()]);
        assert_eq!(index.diff(&[c.clone(), a.clone(), b.clone()]).len(), 0);
        // The same spec again (a status write) is no change.
        assert_eq!(
            index
                .diff(&[a.clone(), ingress("b", &["b.test"]), c.clone()])
                .len(),
            0
        );
        let b2 = ingress("b", &["b2.test"]);
        let d = ingress("d", &["d.test"]);
        let changes = index.diff(&[a.clone(), b2.clone(), d.clone()]);
        let names = |list: &[Arc<Ingress>]| list.iter().map(|i| name_of(i).1).collect::<Vec<_>>();
        let mut changed = names(&changes.changed);
        changed.sort();
        assert_eq!(changed, ["b", "d"]);
        assert_eq!(names(&changes.removed), ["c"]);
        // The diff does not take changes in: the same list differs the same way again.
        assert_eq!(index.diff(&[a, b2, d]).len(), 3);
    }

    /// An edit of a list: what a store's list looks like after one or more changes.
    #[derive(Debug, Clone)]
    enum Edit {
        /// A new Ingress at this place (a store's new key lands anywhere).
        Add(usize),
        /// The Ingress at this place goes.
        Remove(usize),
        /// The Ingress at this place gets another host (in place).
        Update(usize),
        /// The Ingress at this place is written with the same spec (a status write).
        Rewrite(usize),
        /// The list is rotated (a store that rehashed).
        Rotate(usize),
    }

    use proptest::prelude::any;

    fn edit() -> impl proptest::strategy::Strategy<Value = Edit> {
        use proptest::prelude::*;
        prop_oneof![
            any::<usize>().prop_map(Edit::Add),
            any::<usize>().prop_map(Edit::Remove),
            any::<usize>().prop_map(Edit::Update),
            any::<usize>().prop_map(Edit::Rewrite),
            any::<usize>().prop_map(Edit::Rotate),
        ]
    }

    proptest::proptest! {
        /// `diff_from` (the items the lists do not share only) finds what `diff` (every
        /// item) finds, after any edits, and leaves the index as `diff` does.
        #[test]
        fn the_diff_of_the_unmatched_equals_the_diff_of_everything(
            start in 0usize..120,
            stale in proptest::collection::vec(any::<usize>(), 0..3),
            edits in proptest::collection::vec(edit(), 0..4),
        ) {
            let indexed: Vec<Arc<Ingress>> = (0..start)
                .map(|i| ingress(&format!("i{i}"), &[&format!("h{i}.test")]))
                .collect();
            // Status writes a compile of other kinds took in: `last` has them, the index
            // the older objects.
            let mut last = indexed.clone();
            for i in &stale {
                if !last.is_empty() {
                    let at = i % last.len();
                    last[at] = Arc::new((*last[at]).clone());
                }
            }
            let mut list = last.clone();
            for (n, e) in edits.into_iter().enumerate() {
                let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
                match e {
                    Edit::Add(i) => {
                        let at = at(i, list.len() + 1);
                        list.insert(at, ingress(&format!("new{n}"), &["new.test"]));
                    }
                    Edit::Remove(i) if !list.is_empty() => {
                        let at = at(i, list.len());
                        list.remove(at);
                    }
                    Edit::Update(i) if !list.is_empty() => {
                        let at = at(i, list.len());
                        let name = name_of(&list[at]).1;
                        list[at] = ingress(&name, &[&format!("moved{n}.test")]);
                    }
                    Edit::Rewrite(i) if !list.is_empty() => {
                        let at = at(i, list.len());
                        list[at] = Arc::new((*list[at]).clone());
                    }
                    Edit::Rotate(i) if !list.is_empty() => {
                        let by = at(i, list.len());
                        list.rotate_left(by);
                    }
                    _ => {}
                }
            }
            let (mut whole, mut unmatched) =
                (IngressIndex::new(&indexed), IngressIndex::new(&indexed));
            let names = |changes: &IngressChanges| {
                let sorted = |l: &[Arc<Ingress>]| {
                    let mut v: Vec<(IngressName, usize)> =
                        l.iter().map(|i| (name_of(i), address(i))).collect();
                    v.sort();
                    v
                };
                (sorted(&changes.changed), sorted(&changes.removed))
            };
            let want = whole.diff(&list);
            let got = unmatched.diff_from(&last.clone().into(), &list.clone().into());
            proptest::prop_assert_eq!(names(&got), names(&want));
            if !stale.is_empty() {
                // The whole diff also takes in the status writes among the shared items.
                return Ok(());
            }
            let mut a: Vec<usize> = whole.by_address.iter().copied().collect();
            let mut b: Vec<usize> = unmatched.by_address.iter().copied().collect();
            a.sort();
            b.sort();
            proptest::prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn the_closure_follows_shared_hosts_and_stops_at_unrelated_ones() {
        let index = IngressIndex::new(&[
            ingress("a", &["one.test", "two.test"]),
            ingress("b", &["two.test", "three.test"]),
            ingress("c", &["three.test"]),
            ingress("d", &["four.test"]),
        ]);
        let (hosts, names) = index
            .closure([exact("one.test")], 10)
            .expect("within limit");
        assert_eq!(names, [named("a"), named("b"), named("c")]);
        assert!(hosts.contains(&exact("three.test")));
        assert!(!hosts.contains(&exact("four.test")));
        assert_eq!(index.closure([exact("one.test")], 2), None);
        let (_, none) = index
            .closure([exact("nobody.test")], 10)
            .expect("within limit");
        assert!(none.is_empty());
    }

    #[test]
    fn removing_and_replacing_an_ingress_updates_its_hosts() {
        let mut index = IngressIndex::new(&[ingress("a", &["one.test"])]);
        index.insert(ingress("a", &["two.test"]));
        let (_, names) = index
            .closure([exact("one.test")], 10)
            .expect("within limit");
        assert!(names.is_empty());
        let (_, names) = index
            .closure([exact("two.test")], 10)
            .expect("within limit");
        assert_eq!(names, [named("a")]);
        index.remove(&named("a"));
        assert_eq!(index.len(), 0);
        let (_, names) = index
            .closure([exact("two.test")], 10)
            .expect("within limit");
        assert!(names.is_empty());
    }
}
