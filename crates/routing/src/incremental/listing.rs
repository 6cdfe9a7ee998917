//! Where two listings of a store differ.
//!
//! An informer's store lists its objects in a stable order: an update keeps its object's
//! place, an addition goes at the end, a removal moves the last object into its place;
//! what stayed is in shared chunks ([`ObjectList::shares_chunk_at`]). Between two compiles
//! some objects change at places far apart (the route a user edited, another whose status
//! was just written): lining the two lists up item by item, shared chunks skipped, finds
//! those few without reading the 10,000 others. Lists made otherwise (a manifest
//! directory's, a test's) line up the same way, item by item.

use crate::ObjectList;
use std::sync::Arc;

/// The items of two listings not paired with the same `Arc` when the lists are lined up.
pub(crate) struct Unmatched<T> {
    /// Of the older list.
    pub gone: Vec<Arc<T>>,
    /// Of the newer list.
    pub came: Vec<Arc<T>>,
}

/// The positions below both lengths where `a` and `b` hold different objects; shared
/// chunks are skipped without being read.
pub(crate) fn differing<'a, T>(
    a: &'a ObjectList<T>,
    b: &'a ObjectList<T>,
) -> impl Iterator<Item = usize> + 'a {
    let len = a.len().min(b.len());
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < len {
            if a.shares_chunk_at(b, i) {
                i += sluice_persistent::CHUNK;
                continue;
            }
            let at = i;
            i += 1;
            if !Arc::ptr_eq(&a[at], &b[at]) {
                return Some(at);
            }
        }
        None
    })
}

/// How far ahead [`unmatched`] looks for a mismatched item in the other list: a run of up
/// to this many additions (or removals) next to each other is found as itself.
const AHEAD: usize = 8;

/// The items of `old` and of `new` that are not paired with the same `Arc` when the two
/// lists are lined up, or `None` when more than `limit` are: then the lists are to be
/// compared whole.
///
/// Every object of `new` that `old` lacks is in `came`, every object of `old` that `new`
/// lacks is in `gone`, and an object in `gone` that `new` still holds is in `came` too
/// (paired items are the same object in both). Pointer comparisons only: no object is read.
pub(crate) fn unmatched<T>(
    old: &ObjectList<T>,
    new: &ObjectList<T>,
    limit: usize,
) -> Option<Unmatched<T>> {
    // Where `item` is among the next items of `list` from `from` (0: at `from`).
    let find = |item: &Arc<T>, list: &ObjectList<T>, from: usize| {
        (from..list.len().min(from + AHEAD + 1)).position(|k| Arc::ptr_eq(item, &list[k]))
    };
    let (mut gone, mut came) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < old.len() && j < new.len() {
        if i == j && old.shares_chunk_at(new, i) {
            i += sluice_persistent::CHUNK;
            j = i;
            continue;
        }
        if Arc::ptr_eq(&old[i], &new[j]) {
            i += 1;
            j += 1;
            continue;
        }
        // `new[j..j + added]` were added before `old[i]`, or `old[i..i + removed]` were
        // removed before `new[j]`; else both were replaced (or moved: paired later, or
        // listed on both sides).
        let added = find(&old[i], new, j);
        let removed = find(&new[j], old, i);
        match (added, removed) {
            (Some(added), Some(removed)) if removed < added => {
                gone.extend((i..i + removed).map(|k| Arc::clone(&old[k])));
                i += removed;
            }
            (Some(added), _) => {
                came.extend((j..j + added).map(|k| Arc::clone(&new[k])));
                j += added;
            }
            (None, Some(removed)) => {
                gone.extend((i..i + removed).map(|k| Arc::clone(&old[k])));
                i += removed;
            }
            (None, None) => {
                gone.push(Arc::clone(&old[i]));
                came.push(Arc::clone(&new[j]));
                i += 1;
                j += 1;
            }
        }
        if gone.len() + came.len() > limit {
            return None;
        }
    }
    gone.extend((i..old.len()).map(|k| Arc::clone(&old[k])));
    came.extend((j..new.len()).map(|k| Arc::clone(&new[k])));
    (gone.len() + came.len() <= limit).then_some(Unmatched { gone, came })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unmatched_of(old: &[Arc<u32>], new: &[Arc<u32>], limit: usize) -> Option<Unmatched<u32>> {
        unmatched(&old.to_vec().into(), &new.to_vec().into(), limit)
    }
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn ids(list: &[Arc<u32>]) -> HashSet<*const u32> {
        list.iter().map(Arc::as_ptr).collect()
    }

    #[derive(Debug, Clone)]
    enum Edit {
        Add(usize),
        Remove(usize),
        Replace(usize),
        Rotate(usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            any::<usize>().prop_map(Edit::Add),
            any::<usize>().prop_map(Edit::Remove),
            any::<usize>().prop_map(Edit::Replace),
            any::<usize>().prop_map(Edit::Rotate),
        ]
    }

    fn apply(list: &mut Vec<Arc<u32>>, edits: &[Edit]) {
        for (n, e) in edits.iter().enumerate() {
            let at = |i: usize, len: usize| if len == 0 { 0 } else { i % len };
            match *e {
                Edit::Add(i) => {
                    let at = at(i, list.len() + 1);
                    list.insert(at, Arc::new(1000 + n as u32));
                }
                Edit::Remove(i) if !list.is_empty() => {
                    let at = at(i, list.len());
                    list.remove(at);
                }
                Edit::Replace(i) if !list.is_empty() => {
                    let at = at(i, list.len());
                    list[at] = Arc::new(*list[at]);
                }
                Edit::Rotate(i) if !list.is_empty() => {
                    let by = at(i, list.len());
                    list.rotate_left(by);
                }
                _ => {}
            }
        }
    }

    proptest! {
        /// Whatever the edits: what `new` lacks is gone, what `old` lacks came, and a gone
        /// object still in `new` came too; or the answer is "compare everything".
        #[test]
        fn unmatched_items_cover_every_difference(
            len in 0usize..200,
            edits in proptest::collection::vec(edit(), 0..6),
            limit in 0usize..300,
        ) {
            let old: Vec<Arc<u32>> = (0..len as u32).map(Arc::new).collect();
            let mut new = old.clone();
            apply(&mut new, &edits);
            let Some(Unmatched { gone, came }) = unmatched_of(&old, &new, limit) else {
                return Ok(());
            };
            prop_assert!(gone.len() + came.len() <= limit);
            let (old_ids, new_ids) = (ids(&old), ids(&new));
            let (gone_ids, came_ids) = (ids(&gone), ids(&came));
            prop_assert!(gone_ids.is_subset(&old_ids));
            prop_assert!(came_ids.is_subset(&new_ids));
            prop_assert!(old_ids.difference(&new_ids).all(|x| gone_ids.contains(x)));
            prop_assert!(new_ids.difference(&old_ids).all(|x| came_ids.contains(x)));
            prop_assert!(gone_ids.intersection(&new_ids).all(|x| came_ids.contains(x)));
        }

        /// Adds, removes and in-place replacements (no reordering) a few places apart are
        /// found as themselves, not as everything between them.
        #[test]
        fn scattered_edits_stay_small(
            len in 50usize..2000,
            edits in proptest::collection::vec(
                prop_oneof![
                    any::<usize>().prop_map(Edit::Add),
                    any::<usize>().prop_map(Edit::Remove),
                    any::<usize>().prop_map(Edit::Replace),
                ],
                1..4,
            ),
        ) {
            let old: Vec<Arc<u32>> = (0..len as u32).map(Arc::new).collect();
            let mut new = old.clone();
            apply(&mut new, &edits);
            let Unmatched { gone, came } = unmatched_of(&old, &new, 64).expect("a few edits are few items");
            // An addition or removal is one item, a replacement two (one gone, one came).
            prop_assert!(gone.len() + came.len() <= 2 * edits.len(), "{} {}", gone.len(), came.len());
        }
    }

    proptest! {
        /// Listings as an informer's store keeps them (an update in place, an addition at
        /// the end, a deletion filled by the last item; every untouched chunk shared):
        /// the unmatched items still cover every difference, and each write costs a few
        /// (three, or up to `AHEAD` more on each side when the last item moves within
        /// `AHEAD` of where it was and looks like a run of removals).
        #[test]
        fn a_stores_listings_line_up_around_shared_chunks(
            len in 0usize..2000,
            writes in proptest::collection::vec((0u8..3, any::<usize>()), 0..6),
        ) {
            let old: ObjectList<u32> = (0..len as u32).map(Arc::new).collect();
            let mut new = old.clone();
            for (n, (write, at)) in writes.iter().enumerate() {
                let item = Arc::new(10_000 + n as u32);
                match write {
                    0 if !new.is_empty() => {
                        let at = at % new.len();
                        new[at] = item;
                    }
                    1 if !new.is_empty() => {
                        let at = at % new.len();
                        let last = new.pop().expect("not empty");
                        if at < new.len() {
                            new[at] = last;
                        }
                    }
                    _ => new.push(item),
                }
            }
            let Unmatched { gone, came } = unmatched(&old, &new, usize::MAX).expect("no limit");
            let (old_ids, new_ids) = (ids(&old.to_vec()), ids(&new.to_vec()));
            let (gone_ids, came_ids) = (ids(&gone), ids(&came));
            prop_assert!(old_ids.difference(&new_ids).all(|x| gone_ids.contains(x)));
            prop_assert!(new_ids.difference(&old_ids).all(|x| came_ids.contains(x)));
            prop_assert!(gone_ids.intersection(&new_ids).all(|x| came_ids.contains(x)));
            prop_assert!(gone.len() + came.len() <= (3 + 2 * AHEAD) * writes.len());
        }
    }

    #[test]
    fn a_replacement_and_an_addition_far_apart_are_two_and_one_items() {
        let old: Vec<Arc<u32>> = (0..10_000).map(Arc::new).collect();
        let mut new = old.clone();
        new[1_000] = Arc::new(1_000);
        new.insert(8_000, Arc::new(99_999));
        let Unmatched { gone, came } = unmatched_of(&old, &new, 64).expect("few");
        assert_eq!(ids(&gone), ids(&old[1_000..1_001]));
        assert_eq!(came.len(), 2);
        assert!(Arc::ptr_eq(&came[0], &new[1_000]) && Arc::ptr_eq(&came[1], &new[8_000]));
    }

    #[test]
    fn runs_of_additions_and_removals_are_themselves() {
        let old: Vec<Arc<u32>> = (0..100).map(Arc::new).collect();
        let mut new = old.clone();
        let added: Vec<Arc<u32>> = (0..5).map(|n| Arc::new(500 + n)).collect();
        new.splice(10..10, added.iter().cloned());
        new.drain(60..66);
        let Unmatched { gone, came } = unmatched_of(&old, &new, 64).expect("few");
        assert_eq!(ids(&came), ids(&added));
        assert_eq!(ids(&gone), ids(&old[55..61]));
    }

    #[test]
    fn a_reordered_list_is_too_many() {
        let old: Vec<Arc<u32>> = (0..1_000).map(Arc::new).collect();
        let mut new = old.clone();
        new.reverse();
        assert!(unmatched_of(&old, &new, 64).is_none());
        assert!(
            unmatched_of(&old, &old, 0).is_some_and(|u| u.gone.is_empty() && u.came.is_empty())
        );
    }
}
