//! What one round of the status writers visits: every object, or only what changed since
//! the last round that wrote everything it had to.
//!
//! A rebuild that compiled one route in part keeps every other route's status (the same
//! `Arc`), and every status write of ours comes back as a status-only update naming its
//! object. A round after a finished one therefore visits the objects whose status in the
//! report is new, those that left or joined the report, and those whose status someone
//! changed, not all 10,000 routes.

use crate::rebuild::RebuildReport;
use sluice_persistent::SortedChunks;
use sluice_routing::ObjectRef;
use std::collections::BTreeSet;

/// What a round of the status writers visits.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// Every object: the first round as leader, and the round after one that failed.
    Everything,
    /// What changed since `since`, the report of the last round that wrote all it had to,
    /// and the objects in `touched`, whose status someone changed since.
    Changes {
        /// The report the last finished round wrote.
        since: &'a RebuildReport,
        /// Objects whose status changed under us (status-only updates).
        touched: &'a BTreeSet<ObjectRef>,
    },
}

/// [`changed_objects`] of two [`SortedChunks`]: an item of a chunk both lists share is
/// the same item, found `same` by its address before `same` is asked.
pub fn changed_in_chunks<T>(
    before: &SortedChunks<T>,
    after: &SortedChunks<T>,
    key: impl Fn(&T) -> &ObjectRef,
    same: impl Fn(&T, &T) -> bool,
) -> Option<Vec<ObjectRef>> {
    let before: Vec<&T> = before.iter().collect();
    let after: Vec<&T> = after.iter().collect();
    changed_objects(
        &before,
        &after,
        |x| key(x),
        |x, y| std::ptr::eq(*x, *y) || same(x, y),
    )
}

/// The objects in only one of `before` and `after` (each sorted by `key`, one item per
/// object), or in both with items that are not `same`, in order; `None` when a list is not
/// sorted that way (the caller then visits everything). `same` items have the same key.
///
/// A compile that changed a few objects leaves the other items where they were, the
/// same: the common start and end of the lists are passed over comparing items only
/// (for `Arc`s, their addresses), and the rest is merged by key, again passing over the
/// items that line up the same (at 10,000 routes the merge of whole lists, a string
/// comparison per step, was a third of the control thread).
pub fn changed_objects<T>(
    before: &[T],
    after: &[T],
    key: impl Fn(&T) -> &ObjectRef,
    same: impl Fn(&T, &T) -> bool,
) -> Option<Vec<ObjectRef>> {
    if std::ptr::eq(before, after) {
        return Some(Vec::new());
    }
    let start = before
        .iter()
        .zip(after)
        .take_while(|(x, y)| same(x, y))
        .count();
    let (before, after) = (&before[start..], &after[start..]);
    let end = before
        .iter()
        .rev()
        .zip(after.iter().rev())
        .take_while(|(x, y)| same(x, y))
        .count();
    let (before, after) = (&before[..before.len() - end], &after[..after.len() - end]);
    let sorted = |list: &[T]| list.is_sorted_by(|a, b| key(a) < key(b));
    if !sorted(before) || !sorted(after) {
        return None;
    }
    let mut out = Vec::new();
    let (mut b, mut a) = (before.iter().peekable(), after.iter().peekable());
    loop {
        match (b.peek(), a.peek()) {
            (None, None) => return Some(out),
            (Some(x), None) => {
                out.push(key(x).clone());
                b.next();
            }
            (None, Some(y)) => {
                out.push(key(y).clone());
                a.next();
            }
            // The same item lined up: no key compared. Changes far apart leave long
            // stretches of these between them, shifted by the additions and removals.
            (Some(x), Some(y)) if same(x, y) => {
                b.next();
                a.next();
            }
            (Some(x), Some(y)) => match key(x).cmp(key(y)) {
                std::cmp::Ordering::Less => {
                    out.push(key(x).clone());
                    b.next();
                }
                std::cmp::Ordering::Greater => {
                    out.push(key(y).clone());
                    a.next();
                }
                std::cmp::Ordering::Equal => {
                    if !same(x, y) {
                        out.push(key(y).clone());
                    }
                    b.next();
                    a.next();
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn object(n: u8) -> ObjectRef {
        ObjectRef {
            kind: if n.is_multiple_of(2) {
                "HTTPRoute"
            } else {
                "GRPCRoute"
            },
            namespace: format!("ns-{}", n % 3),
            name: format!("r-{n}"),
        }
    }

    /// `(object, version)` lists, sorted and one per object, from maps.
    fn list(map: &BTreeMap<ObjectRef, u8>) -> Vec<(ObjectRef, u8)> {
        map.iter().map(|(o, v)| (o.clone(), *v)).collect()
    }

    proptest! {
        #[test]
        fn changed_objects_are_those_added_removed_or_different(
            before in prop::collection::btree_map(any::<u8>(), 0u8..3, 0..40),
            after in prop::collection::btree_map(any::<u8>(), 0u8..3, 0..40),
        ) {
            let before: BTreeMap<ObjectRef, u8> =
                before.into_iter().map(|(n, v)| (object(n), v)).collect();
            let after: BTreeMap<ObjectRef, u8> =
                after.into_iter().map(|(n, v)| (object(n), v)).collect();
            let got = changed_objects(&list(&before), &list(&after), |x| &x.0, |x, y| x == y)
                .expect("sorted lists");
            let want: Vec<ObjectRef> = before
                .keys()
                .chain(after.keys())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .filter(|o| before.get(*o) != after.get(*o))
                .cloned()
                .collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn an_unsorted_or_repeating_list_asks_for_everything() {
        let (a, b) = ((object(1), 0), (object(2), 0));
        let sorted = vec![a.clone(), b.clone()];
        fn key(x: &(ObjectRef, u8)) -> &ObjectRef {
            &x.0
        }
        let same = |x: &(ObjectRef, u8), y: &(ObjectRef, u8)| x == y;
        assert_eq!(changed_objects(&sorted, &sorted, key, same), Some(vec![]));
        let mut unsorted = sorted.clone();
        unsorted.sort_by(|x, y| y.0.cmp(&x.0));
        assert_eq!(changed_objects(&sorted, &unsorted, key, same), None);
        assert_eq!(
            changed_objects(&[b.clone(), a.clone(), a], &sorted, key, same),
            None
        );
    }

    /// One item changed, added or removed among 1,000: that object alone, whatever the
    /// shift of the items after it; the same list (one slice) has no changes.
    #[test]
    fn one_change_among_many_is_found_past_the_common_start_and_end() {
        let items: Vec<(ObjectRef, u8)> = (0..1000)
            .map(|n| {
                let name = format!("r-{n:04}");
                let o = ObjectRef {
                    kind: "HTTPRoute",
                    namespace: "ns".into(),
                    name,
                };
                (o, 0)
            })
            .collect();
        fn key(x: &(ObjectRef, u8)) -> &ObjectRef {
            &x.0
        }
        let same = |x: &(ObjectRef, u8), y: &(ObjectRef, u8)| x == y;
        assert_eq!(changed_objects(&items, &items, key, same), Some(vec![]));
        let mut changed = items.clone();
        changed[500].1 = 1;
        let at = |n: usize| Some(vec![items[n].0.clone()]);
        assert_eq!(changed_objects(&items, &changed, key, same), at(500));
        let mut removed = items.clone();
        removed.remove(10);
        assert_eq!(changed_objects(&items, &removed, key, same), at(10));
        assert_eq!(changed_objects(&removed, &items, key, same), at(10));
        let mut both = removed.clone();
        both[900].1 = 2;
        assert_eq!(
            changed_objects(&items, &both, key, same),
            Some(vec![items[10].0.clone(), items[901].0.clone()])
        );
    }
}
