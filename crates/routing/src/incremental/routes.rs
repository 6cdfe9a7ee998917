//! The HTTPRoutes and GRPCRoutes of the last compile by name and by the host names they
//! may be served on: what finds the changed routes and the ones a partial compile must
//! read with them.
//!
//! A route is served on a listener under the intersection of its host names with the
//! listener's (`gateway/hostname.rs`): one of its own host names, or, when it has none or a
//! wildcard that covers the listener's, the listener's. So the routes that may be served
//! under a host name are those naming it, and, when a listener has that host name, the
//! routes without host names or with a wildcard ("broad" routes).

use std::collections::HashSet;
use std::sync::Arc;

use super::listing::unmatched;
use super::unchanged::ReadAlike;
use crate::gateway::{GrpcRoute, HttpRoute, hostname};
use crate::host::HostPattern;
use crate::key::FastMap;
use crate::{Inputs, ObjectRef};

/// A route of either kind.
#[derive(Clone)]
pub(crate) enum AnyRoute {
    Http(Arc<HttpRoute>),
    Grpc(Arc<GrpcRoute>),
}

impl AnyRoute {
    /// The route as an object reference (kind `HTTPRoute` or `GRPCRoute`).
    pub(crate) fn object(&self) -> ObjectRef {
        let (kind, (namespace, name)) = match self {
            AnyRoute::Http(r) => ("HTTPRoute", r.name()),
            AnyRoute::Grpc(r) => ("GRPCRoute", r.name()),
        };
        ObjectRef {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    fn address(&self) -> usize {
        match self {
            AnyRoute::Http(r) => Arc::as_ptr(r) as usize,
            AnyRoute::Grpc(r) => Arc::as_ptr(r) as usize,
        }
    }

    fn hostnames(&self) -> &[String] {
        match self {
            AnyRoute::Http(r) => &r.spec.hostnames,
            AnyRoute::Grpc(r) => &r.spec.hostnames,
        }
    }

    /// Whether `other` (a route of the same name) reads the same to the compiler.
    fn reads_alike(&self, other: &AnyRoute) -> bool {
        match (self, other) {
            (AnyRoute::Http(a), AnyRoute::Http(b)) => a.reads_alike(b),
            (AnyRoute::Grpc(a), AnyRoute::Grpc(b)) => a.reads_alike(b),
            _ => false,
        }
    }

    /// Every string of the spec: over every name a Service the route sends to may have.
    pub(crate) fn words(&self) -> Vec<String> {
        fn walk(value: &serde_json::Value, out: &mut Vec<String>) {
            match value {
                serde_json::Value::String(s) => out.push(s.clone()),
                serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
                serde_json::Value::Object(map) => map.values().for_each(|v| walk(v, out)),
                _ => {}
            }
        }
        let spec = match self {
            AnyRoute::Http(r) => serde_json::to_value(&r.spec),
            AnyRoute::Grpc(r) => serde_json::to_value(&r.spec),
        };
        let mut out = Vec::new();
        if let Ok(spec) = spec {
            walk(&spec, &mut out);
        }
        out
    }
}

/// Where a route may be served: its own valid host names, and whether it is broad (no
/// host names, or a wildcard: it may be served under a listener's host name).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Footprint {
    hosts: Vec<HostPattern>,
    broad: bool,
}

fn footprint(route: &AnyRoute) -> Footprint {
    let names = route.hostnames();
    let mut out = Footprint {
        broad: names.is_empty(),
        hosts: Vec::new(),
    };
    for name in names {
        // An invalid host name keeps the route from being served at all.
        if let Ok(host @ (HostPattern::Exact(_) | HostPattern::Wildcard(_))) =
            hostname::parse(Some(name))
        {
            out.broad |= matches!(host, HostPattern::Wildcard(_));
            out.hosts.push(host);
        }
    }
    // Kept as long as the route: no room for more.
    out.hosts.shrink_to_fit();
    out
}

/// One route as last compiled.
struct Known {
    route: AnyRoute,
    footprint: Footprint,
}

/// What changed between the indexed routes and new lists.
#[derive(Default)]
pub(crate) struct RouteChanges {
    /// Added or updated: the new objects.
    pub changed: Vec<AnyRoute>,
    /// Gone: the last objects.
    pub removed: Vec<AnyRoute>,
}

impl RouteChanges {
    /// How many routes changed.
    pub(crate) fn len(&self) -> usize {
        self.changed.len() + self.removed.len()
    }
}

/// The routes of one host name: a list while there are a few (most host names have one
/// route, and a set of one is some 250 bytes more per route at 10,000), a set beyond.
#[derive(Debug)]
enum Names {
    Few(Vec<ObjectRef>),
    Many(HashSet<ObjectRef>),
}

impl Default for Names {
    fn default() -> Self {
        Names::Few(Vec::new())
    }
}

impl Names {
    /// How many a list holds before it becomes a set.
    const FEW: usize = 8;

    fn insert(&mut self, name: ObjectRef) {
        match self {
            Names::Few(names) if names.contains(&name) => {}
            Names::Few(names) if names.len() < Self::FEW => {
                // One more at a time: a first push would take room for four.
                names.reserve_exact(1);
                names.push(name)
            }
            Names::Few(names) => {
                let mut set: HashSet<ObjectRef> = names.drain(..).collect();
                set.insert(name);
                *self = Names::Many(set);
            }
            Names::Many(set) => {
                set.insert(name);
            }
        }
    }

    fn remove(&mut self, name: &ObjectRef) {
        match self {
            Names::Few(names) => names.retain(|n| n != name),
            Names::Many(set) => {
                set.remove(name);
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Names::Few(names) => names.is_empty(),
            Names::Many(set) => set.is_empty(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = &ObjectRef> + '_> {
        match self {
            Names::Few(names) => Box::new(names.iter()),
            Names::Many(set) => Box::new(set.iter()),
        }
    }
}

/// Every HTTPRoute and GRPCRoute of the last compile, with where they may be served, and
/// the routes of each host name.
#[derive(Default)]
pub(crate) struct RouteIndex {
    by_name: FastMap<ObjectRef, Known>,
    by_host: FastMap<HostPattern, Names>,
    broad: HashSet<ObjectRef>,
    by_address: HashSet<usize, foldhash::fast::RandomState>,
    /// The host names of every listener of every Gateway and ListenerSet (`Any`: one
    /// without): where broad routes may be served.
    listener_hosts: HashSet<HostPattern>,
}

impl RouteIndex {
    /// The index of `inputs`' HTTPRoutes and GRPCRoutes.
    pub(crate) fn new(inputs: &Inputs) -> Self {
        let mut index = RouteIndex::default();
        for route in all(inputs) {
            index.insert(route);
        }
        let listeners = inputs
            .gateways
            .iter()
            .flat_map(|g| &g.spec.listeners)
            .chain(inputs.listener_sets.iter().flat_map(|s| &s.spec.listeners));
        for listener in listeners {
            if let Ok(host) = hostname::parse(listener.hostname.as_deref()) {
                index.listener_hosts.insert(host);
            }
        }
        index
    }

    /// How many routes it holds.
    pub(crate) fn len(&self) -> usize {
        self.by_name.len()
    }

    /// The routes of `inputs` that are not the indexed objects (an unchanged object is the
    /// same `Arc`, or one whose status alone differs: that one replaces the indexed
    /// object), and the indexed ones `inputs` lacks.
    pub(crate) fn diff(&mut self, inputs: &Inputs) -> RouteChanges {
        self.diff_of(all(inputs), None)
    }

    /// [`RouteIndex::diff`] of `inputs` for an index of `last`'s routes: only the routes
    /// the lists do not share ([`super::listing::unmatched`]) are compared when they are a
    /// few (at 10,000 routes, hashing every address per change was a tenth of the control
    /// thread).
    pub(crate) fn diff_from(&mut self, last: &Inputs, inputs: &Inputs) -> RouteChanges {
        let indexed = last.http_routes.len() + last.grpc_routes.len();
        let few = super::index::FEW;
        let Some(http) = unmatched(&last.http_routes, &inputs.http_routes, few) else {
            return self.diff(inputs);
        };
        let left = few - http.gone.len() - http.came.len();
        let Some(grpc) = unmatched(&last.grpc_routes, &inputs.grpc_routes, left) else {
            return self.diff(inputs);
        };
        if self.by_address.len() != indexed {
            return self.diff(inputs);
        }
        let came: Vec<AnyRoute> = (http.came.into_iter().map(AnyRoute::Http))
            .chain(grpc.came.into_iter().map(AnyRoute::Grpc))
            .collect();
        let gone: Vec<AnyRoute> = (http.gone.into_iter().map(AnyRoute::Http))
            .chain(grpc.gone.into_iter().map(AnyRoute::Grpc))
            .collect();
        self.diff_of(came.into_iter(), Some(gone))
    }

    /// The diff of `routes` (all, or with `gone` those the index has that `routes` may
    /// lack: the rest of the index is known to be unchanged).
    fn diff_of(
        &mut self,
        routes: impl Iterator<Item = AnyRoute> + Clone,
        gone: Option<Vec<AnyRoute>>,
    ) -> RouteChanges {
        let mut changes = RouteChanges::default();
        let mut found = 0;
        // The indexed routes `inputs` holds a new version of.
        let mut replaced: HashSet<ObjectRef, foldhash::fast::RandomState> = HashSet::default();
        for route in routes.clone() {
            if self.by_address.contains(&route.address()) {
                found += 1;
                continue;
            }
            let object = route.object();
            match self.by_name.get_mut(&object) {
                // A status write: the compiler reads no status.
                Some(known) if known.route.reads_alike(&route) => {
                    found += 1;
                    self.by_address.remove(&known.route.address());
                    self.by_address.insert(route.address());
                    known.route = route;
                }
                Some(_) => {
                    found += 1;
                    replaced.insert(object);
                    changes.changed.push(route);
                }
                None => changes.changed.push(route),
            }
        }
        if let Some(gone) = gone {
            // Gone: the indexed route of a name `last` had there, unless a new version of
            // it is among the new items (a status write above put it in the index).
            let present: HashSet<usize, foldhash::fast::RandomState> =
                routes.map(|r| r.address()).collect();
            // The index may hold an older object of a name than `last` does (a status
            // write a compile of other kinds took in): it goes by name.
            changes.removed = gone
                .iter()
                .filter_map(|r| {
                    let name = r.object();
                    let known = self.by_name.get(&name)?;
                    (!present.contains(&known.route.address()) && !replaced.contains(&name))
                        .then(|| known.route.clone())
                })
                .collect();
        } else if found < self.by_name.len() {
            // Gone: neither the indexed object (by address: no names hashed at 10,000
            // routes) nor a new version of it is in `inputs`.
            let present: HashSet<usize, foldhash::fast::RandomState> =
                routes.map(|r| r.address()).collect();
            changes.removed = self
                .by_name
                .iter()
                .filter(|(name, known)| {
                    !present.contains(&known.route.address()) && !replaced.contains(name)
                })
                .map(|(_, known)| known.route.clone())
                .collect();
        }
        changes
    }

    /// The indexed route of `name`.
    pub(crate) fn get(&self, name: &ObjectRef) -> Option<&AnyRoute> {
        self.by_name.get(name).map(|k| &k.route)
    }

    /// Adds or replaces a route.
    pub(crate) fn insert(&mut self, route: AnyRoute) {
        let name = route.object();
        self.remove(&name);
        let footprint = footprint(&route);
        for host in &footprint.hosts {
            self.by_host
                .entry(host.clone())
                .or_default()
                .insert(name.clone());
        }
        if footprint.broad {
            self.broad.insert(name.clone());
        }
        self.by_address.insert(route.address());
        self.by_name.insert(name, Known { route, footprint });
    }

    /// Removes a route.
    pub(crate) fn remove(&mut self, name: &ObjectRef) {
        let Some(known) = self.by_name.remove(name) else {
            return;
        };
        self.by_address.remove(&known.route.address());
        self.broad.remove(name);
        for host in &known.footprint.hosts {
            if let Some(names) = self.by_host.get_mut(host) {
                names.remove(name);
                if names.is_empty() {
                    self.by_host.remove(host);
                }
            }
        }
    }

    /// The host names `route` may be served under.
    pub(crate) fn hosts_of(&self, route: &AnyRoute) -> Vec<HostPattern> {
        self.hosts_of_footprint(&footprint(route))
    }

    fn hosts_of_footprint(&self, footprint: &Footprint) -> Vec<HostPattern> {
        let mut out = footprint.hosts.clone();
        if footprint.broad {
            out.extend(self.listener_hosts.iter().cloned());
        }
        out
    }

    /// Starting from `hosts`, every indexed route that may be served under one of them and
    /// every host name those may be served under, until nothing is added: the routes whose
    /// compile decides the rules of those host names, and the host names. Gives up
    /// (`None`) past `limit` routes.
    pub(crate) fn closure(
        &self,
        hosts: impl IntoIterator<Item = HostPattern>,
        limit: usize,
    ) -> Option<(HashSet<HostPattern>, Vec<ObjectRef>)> {
        let mut seen_hosts: HashSet<HostPattern> = HashSet::new();
        let mut queue: Vec<HostPattern> = Vec::new();
        for host in hosts {
            if seen_hosts.insert(host.clone()) {
                queue.push(host);
            }
        }
        let mut names: HashSet<&ObjectRef> = HashSet::new();
        while let Some(host) = queue.pop() {
            let broad = self
                .listener_hosts
                .contains(&host)
                .then_some(&self.broad)
                .into_iter()
                .flatten();
            let own = self.by_host.get(&host).into_iter().flat_map(Names::iter);
            for name in own.chain(broad) {
                if !names.insert(name) {
                    continue;
                }
                if names.len() > limit {
                    return None;
                }
                let Some(known) = self.by_name.get(name) else {
                    continue;
                };
                for next in self.hosts_of_footprint(&known.footprint) {
                    if seen_hosts.insert(next.clone()) {
                        queue.push(next);
                    }
                }
            }
        }
        let mut names: Vec<ObjectRef> = names.into_iter().cloned().collect();
        names.sort();
        Some((seen_hosts, names))
    }
}

/// Every HTTPRoute and GRPCRoute of `inputs`.
fn all(inputs: &Inputs) -> impl Iterator<Item = AnyRoute> + Clone + '_ {
    let http = inputs.http_routes.iter().cloned().map(AnyRoute::Http);
    let grpc = inputs.grpc_routes.iter().cloned().map(AnyRoute::Grpc);
    http.chain(grpc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A host name's routes read the same as a set while they grow past the list's
    /// size into a set, and shrink again.
    #[test]
    fn names_of_a_host_read_like_a_set_at_any_count() {
        let name = |i: usize| ObjectRef {
            kind: "HTTPRoute",
            namespace: "ns".into(),
            name: format!("r{i}"),
        };
        let mut names = Names::default();
        let mut model: std::collections::BTreeSet<ObjectRef> = Default::default();
        let read = |names: &Names| {
            names
                .iter()
                .cloned()
                .collect::<std::collections::BTreeSet<_>>()
        };
        for i in (0..20).chain(0..5) {
            names.insert(name(i));
            model.insert(name(i));
            assert_eq!(read(&names), model);
        }
        assert!(matches!(names, Names::Many(_)));
        for i in (0..20).step_by(3).chain([99]) {
            names.remove(&name(i));
            model.remove(&name(i));
            assert_eq!(read(&names), model);
        }
        let mut few = Names::default();
        for i in [1, 2, 1] {
            few.insert(name(i));
        }
        assert!(matches!(&few, Names::Few(list) if list.len() == 2));
        few.remove(&name(1));
        few.remove(&name(2));
        assert!(few.is_empty());
    }

    fn route(name: &str, hosts: &[&str]) -> Arc<HttpRoute> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"namespace": "ns", "name": name},
                "spec": {"parentRefs": [{"name": "edge"}], "hostnames": hosts}
            }))
            .expect("an HTTPRoute"),
        )
    }

    fn inputs(listener_hosts: &[Option<&str>], routes: Vec<Arc<HttpRoute>>) -> Inputs {
        let listeners: Vec<_> = listener_hosts
            .iter()
            .enumerate()
            .map(|(i, h)| json!({"name": format!("l{i}"), "port": 80, "protocol": "HTTP", "hostname": h}))
            .collect();
        let gateway = serde_json::from_value(json!({
            "metadata": {"namespace": "ns", "name": "edge"},
            "spec": {"gatewayClassName": "sluice", "listeners": listeners}
        }))
        .expect("a Gateway");
        Inputs {
            gateways: vec![Arc::new(gateway)].into(),
            http_routes: routes.into(),
            ..Inputs::default()
        }
    }

    fn exact(name: &str) -> HostPattern {
        HostPattern::Exact(name.to_owned())
    }

    fn names(list: &[ObjectRef]) -> Vec<&str> {
        list.iter().map(|o| o.name.as_str()).collect()
    }

    #[test]
    fn routes_with_their_own_host_names_are_read_alone() {
        let index = RouteIndex::new(&inputs(
            &[None],
            vec![route("a", &["a.test"]), route("b", &["b.test"])],
        ));
        let (hosts, read) = index.closure([exact("a.test")], 10).expect("within limit");
        assert_eq!(names(&read), ["a"]);
        assert_eq!(hosts, HashSet::from([exact("a.test")]));
    }

    #[test]
    fn a_route_without_host_names_is_read_with_every_route_of_the_listeners_host_names() {
        // Gateway API: a route without hostnames takes the listener's; one with a wildcard
        // covering the listener's hostname is served under the listener's.
        let index = RouteIndex::new(&inputs(
            &[Some("a.test"), Some("*.wild.test")],
            vec![
                route("plain", &[]),
                route("wild", &["*.test"]),
                route("a", &["a.test"]),
                route("x", &["x.wild.test"]),
                route("other", &["other.org"]),
            ],
        ));
        let (_, read) = index.closure([exact("a.test")], 10).expect("within limit");
        assert_eq!(names(&read), ["a", "plain", "wild"]);
        let (_, read) = index
            .closure([HostPattern::Wildcard("wild.test".to_owned())], 10)
            .expect("within limit");
        assert_eq!(names(&read), ["a", "plain", "wild"]);
        // A name no listener has: only the routes naming it.
        let (_, read) = index
            .closure([exact("x.wild.test")], 10)
            .expect("within limit");
        assert_eq!(names(&read), ["x"]);
        assert_eq!(index.closure([exact("a.test")], 2), None);
    }

    #[test]
    fn the_diff_finds_changed_and_removed_routes_and_ignores_status_writes() {
        let (a, b) = (route("a", &["a.test"]), route("b", &["b.test"]));
        let mut index = RouteIndex::new(&inputs(&[None], vec![a.clone(), b.clone()]));
        let mut touched = (*a).clone();
        touched.metadata.resource_version = Some("2".to_owned());
        touched.status = Some(json!({"parents": []}).into());
        let changes = index.diff(&inputs(&[None], vec![Arc::new(touched), b.clone()]));
        assert_eq!(changes.len(), 0);
        let changes = index.diff(&inputs(&[None], vec![route("a", &["c.test"])]));
        assert_eq!(names(&[changes.changed[0].object()]), ["a"]);
        assert_eq!(names(&[changes.removed[0].object()]), ["b"]);
        assert_eq!(changes.len(), 2);
        assert_eq!(
            index.hosts_of(&changes.changed[0]),
            [exact("c.test")],
            "the new object's host names"
        );
    }

    #[test]
    fn one_diff_tells_a_status_write_an_update_an_addition_and_a_removal_apart() {
        let (a, b, c) = (
            route("a", &["a.test"]),
            route("b", &["b.test"]),
            route("c", &["c.test"]),
        );
        let mut index = RouteIndex::new(&inputs(&[None], vec![a.clone(), b, c]));
        let mut status_write = (*a).clone();
        status_write.status = Some(json!({"parents": []}).into());
        let changes = index.diff(&inputs(
            &[None],
            vec![
                route("d", &["d.test"]),
                Arc::new(status_write),
                route("b", &["b2.test"]),
            ],
        ));
        let mut changed: Vec<ObjectRef> = changes.changed.iter().map(|r| r.object()).collect();
        changed.sort();
        assert_eq!(names(&changed), ["b", "d"]);
        assert_eq!(names(&[changes.removed[0].object()]), ["c"]);
        assert_eq!(changes.len(), 3);
    }
}
