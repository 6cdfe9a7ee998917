//! [`Listing`]: a store's objects as one list in shared chunks, kept in step with the store.
//!
//! A consumer that lists a kind after each change (the route compiler, at every table
//! rebuild) would otherwise copy every object's reference count per change: at 10,000
//! objects spread over the heap, a cache miss each. Kept here, a write changes one item of
//! the list (and copies its chunk when a listing handed out still shares it), and a listing
//! is a copy of the chunks' pointers.
//!
//! Every object keeps its position from write to write: an update replaces it in place, an
//! addition goes at the end, a deletion moves the last object into the hole. Two listings
//! taken around a few writes share every chunk but a few, and line up item by item.

use sluice_persistent::ChunkedVec;
use std::collections::HashMap;
use std::sync::Arc;

/// The listing and where each key's object is in it.
pub(crate) struct Listing<K> {
    items: ChunkedVec<Arc<K>>,
    /// Each key's position in `items`.
    slots: HashMap<Arc<str>, usize>,
    /// The key at each position (a deletion moves the last object and must update its slot).
    keys: Vec<Arc<str>>,
}

impl<K> Listing<K> {
    /// A listing of `items`, in their map's order.
    pub(crate) fn of(items: &HashMap<String, Arc<K>>) -> Self {
        let mut listing = Listing {
            items: ChunkedVec::new(),
            slots: HashMap::with_capacity(items.len()),
            keys: Vec::with_capacity(items.len()),
        };
        for (key, obj) in items {
            listing.put(key, obj);
        }
        listing
    }

    /// The listing to hand out: shares every whole chunk with this one.
    pub(crate) fn shared(&self) -> ChunkedVec<Arc<K>> {
        self.items.clone()
    }

    /// `obj` is now stored under `key`: in place of the object it replaces, else at the end.
    pub(crate) fn put(&mut self, key: &str, obj: &Arc<K>) {
        match self.slots.get(key) {
            Some(&slot) => {
                if let Some(item) = self.items.get(slot)
                    && Arc::ptr_eq(item, obj)
                {
                    return;
                }
                if let Some(item) = self.items.get_mut(slot) {
                    *item = Arc::clone(obj);
                }
            }
            None => {
                let key: Arc<str> = Arc::from(key);
                self.slots.insert(Arc::clone(&key), self.items.len());
                self.keys.push(key);
                self.items.push(Arc::clone(obj));
            }
        }
    }

    /// Nothing is stored under `key` any more: the last object takes its position.
    pub(crate) fn remove(&mut self, key: &str) {
        let Some(slot) = self.slots.remove(key) else {
            return;
        };
        self.items.swap_remove(slot);
        self.keys.swap_remove(slot);
        if let Some(moved) = self.keys.get(slot) {
            self.slots.insert(Arc::clone(moved), slot);
        }
    }

    /// The store's content is now `items`: the keys gone are removed, the others put, so
    /// that objects whose keys stay keep their positions.
    pub(crate) fn replace(&mut self, items: &HashMap<String, Arc<K>>) {
        let gone: Vec<Arc<str>> = (self.keys.iter())
            .filter(|key| !items.contains_key(&***key))
            .cloned()
            .collect();
        for key in gone {
            self.remove(&key);
        }
        for (key, obj) in items {
            self.put(key, obj);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn listed(listing: &Listing<u32>) -> Vec<u32> {
        listing.shared().iter().map(|o| **o).collect()
    }

    fn sorted(mut v: Vec<u32>) -> Vec<u32> {
        v.sort_unstable();
        v
    }

    /// What a test does to a store's map and its listing.
    #[derive(Debug, Clone)]
    enum Write {
        Put(u8, u32),
        Remove(u8),
        Replace(Vec<(u8, u32)>),
    }

    fn write() -> impl Strategy<Value = Write> {
        prop_oneof![
            4 => (0u8..200, any::<u32>()).prop_map(|(k, v)| Write::Put(k, v)),
            3 => (0u8..200).prop_map(Write::Remove),
            1 => prop::collection::vec((0u8..200, any::<u32>()), 0..150).prop_map(Write::Replace),
        ]
    }

    proptest! {
        /// After any writes the listing holds exactly the map's objects, each key's
        /// position is right, and objects neither written nor moved by a deletion kept
        /// their positions.
        #[test]
        fn a_listing_follows_its_map(
            start in prop::collection::vec((0u8..200, any::<u32>()), 0..300),
            writes in prop::collection::vec(write(), 0..60),
        ) {
            let mut map: HashMap<String, Arc<u32>> =
                start.into_iter().map(|(k, v)| (k.to_string(), Arc::new(v))).collect();
            let mut listing = Listing::of(&map);
            for w in writes {
                let before = listing.shared();
                let mut touched: Vec<usize> = Vec::new();
                match w {
                    Write::Put(k, v) => {
                        let obj = Arc::new(v);
                        map.insert(k.to_string(), Arc::clone(&obj));
                        listing.put(&k.to_string(), &obj);
                        touched.extend(listing.slots.get(k.to_string().as_str()).copied());
                    }
                    Write::Remove(k) => {
                        let slot = listing.slots.get(k.to_string().as_str()).copied();
                        map.remove(&k.to_string());
                        listing.remove(&k.to_string());
                        touched.extend(slot);
                    }
                    Write::Replace(items) => {
                        map = items.into_iter().map(|(k, v)| (k.to_string(), Arc::new(v))).collect();
                        listing.replace(&map);
                        touched.extend(0..before.len().max(listing.items.len()));
                    }
                }
                let now = listing.shared();
                for i in 0..now.len().min(before.len()) {
                    if !touched.contains(&i) {
                        prop_assert!(Arc::ptr_eq(&now[i], &before[i]), "item {} moved", i);
                    }
                }
            }
            prop_assert_eq!(
                sorted(listed(&listing)),
                sorted(map.values().map(|o| **o).collect())
            );
            prop_assert_eq!(listing.keys.len(), map.len());
            prop_assert_eq!(listing.slots.len(), map.len());
            for (key, obj) in &map {
                let slot = listing.slots[key.as_str()];
                prop_assert_eq!(&*listing.keys[slot], key.as_str());
                prop_assert!(Arc::ptr_eq(&listing.items[slot], obj));
            }
        }
    }

    #[test]
    fn a_write_leaves_a_listing_handed_out_as_it_was_and_shares_the_rest() {
        let map: HashMap<String, Arc<u32>> =
            (0..1000).map(|k| (k.to_string(), Arc::new(k))).collect();
        let mut listing = Listing::of(&map);
        let before = listing.shared();
        let changed = Arc::new(5000);
        listing.put("7", &changed);
        listing.remove("8");
        let now = listing.shared();
        assert_eq!(before.len(), 1000);
        assert_eq!(now.len(), 999);
        assert!(
            before.iter().all(|o| **o < 1000),
            "the old listing is unchanged"
        );
        assert!(Arc::ptr_eq(&now[listing.slots["7"]], &changed));
        assert!(!listing.slots.contains_key("8"));
        // Two chunks written (at most), the rest shared.
        let unshared = (0..7)
            .filter(|c| !now.shares_chunk_at(&before, c * sluice_persistent::CHUNK))
            .count();
        assert!(unshared <= 2, "{unshared} chunks copied");
    }
}
