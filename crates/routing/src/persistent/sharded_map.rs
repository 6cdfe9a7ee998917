//! [`ShardedMap`]: a hash map whose copies share its entries shard by shard.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use crate::key::Key;

/// Entries a shard is made for; a map splits again when its shards hold twice that on
/// average.
const PER_SHARD: usize = 64;
/// The most shards a map has (4,096 shards of 64: 262,144 names before shards grow).
const MAX_SHARDS: usize = 1 << 12;
/// Where in a name's hash its shard is read: bits the shard's table does not use (it
/// takes its buckets from the low bits and its tags from the top seven).
const SHARD_SHIFT: u32 = 40;

/// A map from names ([`Key`]) to `V` in shared shards. Cloning it copies the shards'
/// pointers, not the entries; changing an entry copies its shard (some 64 entries) only
/// when another map shares it. A lookup hashes the name once: the hash picks the shard
/// and, within it, the bucket; one pointer more than a plain map, for copies that cost
/// nothing at 10,000 hosts.
///
/// Why not a persistent hash trie (`imbl`): a lookup there follows a pointer per level,
/// and every request looks up its host name.
pub(crate) struct ShardedMap<V> {
    /// Seeded per map (random state): names chosen to collide cannot be prepared.
    hasher: foldhash::fast::RandomState,
    /// A power of two of them; none while the map is empty and never filled.
    shards: Vec<Arc<HashTable<(Key, V)>>>,
    len: usize,
}

impl<V: Clone> Clone for ShardedMap<V> {
    fn clone(&self) -> Self {
        ShardedMap {
            hasher: self.hasher.clone(),
            shards: self.shards.clone(),
            len: self.len,
        }
    }
}

impl<V> Default for ShardedMap<V> {
    fn default() -> Self {
        ShardedMap {
            hasher: foldhash::fast::RandomState::default(),
            shards: Vec::new(),
            len: 0,
        }
    }
}

impl<V: std::fmt::Debug> std::fmt::Debug for ShardedMap<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<V> ShardedMap<V> {
    /// Whether it holds none.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn hash(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    /// The shard of a name's hash (`shards` not empty; their count a power of two).
    fn shard_of(&self, hash: u64) -> usize {
        ((hash >> SHARD_SHIFT) as usize) & (self.shards.len() - 1)
    }

    /// The value of `name`.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        if self.shards.is_empty() {
            return None;
        }
        let hash = self.hash(name);
        self.shards[self.shard_of(hash)]
            .find(hash, |(key, _)| key.as_str() == name)
            .map(|(_, value)| value)
    }

    /// Whether `name` has a value.
    pub(crate) fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Every entry, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Key, &V)> {
        self.shards
            .iter()
            .flat_map(|shard| shard.iter().map(|(key, value)| (key, value)))
    }

    /// Every name, in no order.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &Key> {
        self.iter().map(|(k, _)| k)
    }

    /// Every value, in no order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

impl<V: Clone> ShardedMap<V> {
    /// Makes room for `additional` more entries in one go: a map filled from empty gets
    /// its shards at once instead of splitting as it grows.
    pub(crate) fn reserve(&mut self, additional: usize) {
        let wanted = shards_for(self.len + additional);
        if wanted > self.shards.len() {
            self.reshard(wanted);
        }
    }

    /// Sets the value of `name`; the previous one, if any.
    pub(crate) fn insert(&mut self, name: Key, value: V) -> Option<V> {
        if self.shards.is_empty() || self.len >= self.shards.len() * PER_SHARD * 2 {
            self.reshard(shards_for(self.len + 1));
        }
        let hash = self.hash(name.as_str());
        let at = self.shard_of(hash);
        let hasher = &self.hasher;
        let shard = Arc::make_mut(&mut self.shards[at]);
        match shard.find_mut(hash, |(key, _)| key.as_str() == name.as_str()) {
            Some((_, slot)) => Some(std::mem::replace(slot, value)),
            None => {
                shard.insert_unique(hash, (name, value), |(key, _)| {
                    hasher.hash_one(key.as_str())
                });
                self.len += 1;
                None
            }
        }
    }

    /// The value of `name`, set to `value` first if it has none.
    pub(crate) fn get_or_insert(&mut self, name: Key, value: V) -> &V {
        if !self.contains_key(name.as_str()) {
            self.insert(name.clone(), value);
        }
        match self.get(name.as_str()) {
            Some(value) => value,
            None => unreachable!("inserted above"),
        }
    }

    /// Takes the value of `name` out.
    pub(crate) fn remove(&mut self, name: &str) -> Option<V> {
        if self.shards.is_empty() {
            return None;
        }
        let hash = self.hash(name);
        let at = self.shard_of(hash);
        // No copy of a shard that lacks the name.
        self.shards[at].find(hash, |(key, _)| key.as_str() == name)?;
        let shard = Arc::make_mut(&mut self.shards[at]);
        let entry = shard
            .find_entry(hash, |(key, _)| key.as_str() == name)
            .ok()?;
        let ((_, value), _) = entry.remove();
        self.len -= 1;
        Some(value)
    }

    /// Every value, to change (each shared shard copied first).
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.shards
            .iter_mut()
            .flat_map(|shard| Arc::make_mut(shard).iter_mut().map(|(_, value)| value))
    }

    /// Spreads the entries over `count` shards (a power of two).
    fn reshard(&mut self, count: usize) {
        // Each shard grows to what it holds: as full as one table of every entry would be.
        let mut shards: Vec<HashTable<(Key, V)>> = (0..count).map(|_| HashTable::new()).collect();
        let hasher = self.hasher.clone();
        let rehash = |(key, _): &(Key, V)| hasher.hash_one(key.as_str());
        for shard in std::mem::take(&mut self.shards) {
            for entry in Arc::unwrap_or_clone(shard) {
                let hash = rehash(&entry);
                let at = ((hash >> SHARD_SHIFT) as usize) & (count - 1);
                shards[at].insert_unique(hash, entry, rehash);
            }
        }
        self.shards = shards.into_iter().map(Arc::new).collect();
    }
}

impl<V: Clone> IntoIterator for ShardedMap<V> {
    type Item = (Key, V);
    type IntoIter = std::iter::FlatMap<
        std::vec::IntoIter<Arc<HashTable<(Key, V)>>>,
        hashbrown::hash_table::IntoIter<(Key, V)>,
        fn(Arc<HashTable<(Key, V)>>) -> hashbrown::hash_table::IntoIter<(Key, V)>,
    >;

    /// Every entry, in no order (shards no other map shares are not copied).
    fn into_iter(self) -> Self::IntoIter {
        self.shards
            .into_iter()
            .flat_map(|shard| Arc::unwrap_or_clone(shard).into_iter())
    }
}

/// The shard count for `len` entries: a power of two, about [`PER_SHARD`] entries each.
fn shards_for(len: usize) -> usize {
    len.div_ceil(PER_SHARD)
        .next_power_of_two()
        .clamp(1, MAX_SHARDS)
}

impl<V: Clone> FromIterator<(Key, V)> for ShardedMap<V> {
    fn from_iter<I: IntoIterator<Item = (Key, V)>>(entries: I) -> Self {
        let entries = entries.into_iter();
        let mut map = ShardedMap::default();
        map.reserve(entries.size_hint().0);
        for (name, value) in entries {
            map.insert(name, value);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        Reserve(u16),
        /// Keep a copy (shares every shard), and change the map afterwards.
        Copy,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<u16>(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => any::<u16>().prop_map(Op::Remove),
            1 => any::<u16>().prop_map(Op::Reserve),
            1 => Just(Op::Copy),
        ]
    }

    /// The map's entries, sorted.
    fn entries(map: &ShardedMap<u32>) -> BTreeMap<String, u32> {
        map.iter()
            .map(|(k, v)| (k.as_str().to_owned(), *v))
            .collect()
    }

    proptest! {
        /// A `ShardedMap` reads like a `BTreeMap` after any inserts, removes and
        /// reservations (splitting into more shards on the way), and a copy keeps reading
        /// like the map did then.
        #[test]
        fn reads_like_a_map_and_copies_do_not_change(
            start in 0usize..2000,
            ops in prop::collection::vec(op(), 0..300),
        ) {
            // Names from a small space, so that inserts replace and removes hit.
            let name = |k: u16| format!("host{}.example.com", k % 3000);
            let mut model: BTreeMap<String, u32> = BTreeMap::new();
            let mut map: ShardedMap<u32> = (0..start as u16)
                .map(|k| (Key::new(&name(k)), u32::from(k)))
                .collect();
            model.extend((0..start as u16).map(|k| (name(k), u32::from(k))));
            let mut copies = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        prop_assert_eq!(map.insert(Key::new(&name(k)), v), model.insert(name(k), v));
                    }
                    Op::Remove(k) => {
                        prop_assert_eq!(map.remove(&name(k)), model.remove(&name(k)));
                    }
                    Op::Reserve(n) => map.reserve(usize::from(n)),
                    Op::Copy => copies.push((map.clone(), model.clone())),
                }
                prop_assert_eq!(map.len, model.len());
                prop_assert_eq!(map.is_empty(), model.is_empty());
            }
            prop_assert_eq!(entries(&map), model.clone());
            for k in 0..3000u16 {
                prop_assert_eq!(map.get(&name(k)), model.get(&name(k)));
                prop_assert_eq!(map.contains_key(&name(k)), model.contains_key(&name(k)));
            }
            for (copy, then) in &copies {
                prop_assert_eq!(&entries(copy), then);
            }
            for value in map.values_mut() {
                *value = value.wrapping_add(1);
            }
            let bumped: BTreeMap<String, u32> =
                model.iter().map(|(k, v)| (k.clone(), v.wrapping_add(1))).collect();
            prop_assert_eq!(entries(&map), bumped);
            for (copy, then) in &copies {
                prop_assert_eq!(&entries(copy), then);
            }
        }
    }

    #[test]
    fn shards_grow_with_the_map_and_a_change_copies_one() {
        let mut map: ShardedMap<u32> = ShardedMap::default();
        assert!(map.get("a").is_none());
        assert!(map.remove("a").is_none());
        for k in 0..10_000u32 {
            map.insert(Key::new(&format!("h{k}")), k);
        }
        assert_eq!(map.len, 10_000);
        // Split as it grew: no shard holds more than a few hundred entries.
        assert!(map.shards.len() >= 64, "{} shards", map.shards.len());
        assert!(map.shards.iter().all(|s| s.len() < 600));
        let copy = map.clone();
        map.insert(Key::new("h5"), 0);
        let unshared = map
            .shards
            .iter()
            .zip(&copy.shards)
            .filter(|(a, b)| !Arc::ptr_eq(a, b))
            .count();
        assert_eq!(unshared, 1);
        assert_eq!(copy.get("h5"), Some(&5));
        assert_eq!(map.get("h5"), Some(&0));
        // Removing a name no shard has copies nothing.
        let before = map.clone();
        assert!(map.remove("absent").is_none());
        assert!(
            map.shards
                .iter()
                .zip(&before.shards)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        );
    }

    #[test]
    fn shard_counts_are_powers_of_two_within_bounds() {
        for len in [0, 1, 63, 64, 65, 1000, 10_000, 1 << 20, usize::MAX / 2] {
            let n = shards_for(len);
            assert!(
                n.is_power_of_two() && (1..=MAX_SHARDS).contains(&n),
                "{len}: {n}"
            );
        }
        assert_eq!(shards_for(10_000), 256);
    }
}
