//! [`SortedChunks`]: a sorted list whose copies share its items chunk by chunk.

use std::sync::Arc;

/// Most items a chunk holds: one more splits it in two.
const MOST: usize = 256;

/// A list of `T`, sorted by a key of each item, in shared chunks of 1 to 256 items.
/// Cloning it copies the chunks' pointers, not the items; putting an item in or taking one
/// out copies one chunk, and only when another list shares it. For a sorted list of tens
/// of thousands of items copied whole after each change of a few: the route compiler's
/// route statuses, where copying a flat list of 10,000 `Arc`s (a reference count touched
/// in each item) was a fifth of an incremental compile, and its list of our Ingresses.
///
/// The key is given to each call that needs it (`key_of`); every call on one list must
/// give the same.
pub struct SortedChunks<T> {
    /// In key order, each chunk and the chunks in turn; none empty.
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

/// [`SortedChunks::iter`]'s iterator.
pub type SortedIter<'a, T> = std::iter::FlatMap<
    std::slice::Iter<'a, Arc<Vec<T>>>,
    std::slice::Iter<'a, T>,
    fn(&'a Arc<Vec<T>>) -> std::slice::Iter<'a, T>,
>;

impl<T> Clone for SortedChunks<T> {
    fn clone(&self) -> Self {
        SortedChunks {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl<T> Default for SortedChunks<T> {
    fn default() -> Self {
        SortedChunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for SortedChunks<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Equal when the items are, in the same order (however chunked).
impl<T: PartialEq> PartialEq for SortedChunks<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Eq> Eq for SortedChunks<T> {}

impl<T> SortedChunks<T> {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The list of `items`, which must be sorted by the key later calls give.
    pub fn from_sorted(items: Vec<T>) -> Self {
        let len = items.len();
        let mut chunks = Vec::with_capacity(len.div_ceil(MOST / 2));
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            // Half full: room to grow before a split.
            chunks.push(Arc::new(items.by_ref().take(MOST / 2).collect()));
        }
        SortedChunks { chunks, len }
    }

    /// How many items.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The items in order.
    pub fn iter(&self) -> SortedIter<'_, T> {
        self.chunks.iter().flat_map(|chunk| chunk.iter())
    }

    /// The first item.
    pub fn first(&self) -> Option<&T> {
        self.chunks.first().and_then(|chunk| chunk.first())
    }

    /// The first item whose key is `key`.
    pub fn get<K: Ord + ?Sized>(&self, key: &K, key_of: impl Fn(&T) -> &K) -> Option<&T> {
        let (c, i) = self.position(key, &key_of)?;
        self.chunks[c].get(i).filter(|item| key_of(item) == key)
    }

    /// Where an item of `key` is or would go: the first chunk whose last key is not below
    /// it (or the last chunk), and the first place in it not below `key`; `None` when the
    /// list is empty.
    fn position<K: Ord + ?Sized>(
        &self,
        key: &K,
        key_of: &impl Fn(&T) -> &K,
    ) -> Option<(usize, usize)> {
        let c = self
            .chunks
            .partition_point(|chunk| chunk.last().is_some_and(|last| key_of(last) < key))
            .min(self.chunks.len().checked_sub(1)?);
        let i = self.chunks[c].partition_point(|item| key_of(item) < key);
        Some((c, i))
    }
}

impl<T: Clone> SortedChunks<T> {
    /// Puts `item` in its sorted place: in place of the first item with its key when there
    /// is one.
    pub fn put<K: Ord + ?Sized>(&mut self, item: T, key_of: impl Fn(&T) -> &K) {
        let Some((c, i)) = self.position(key_of(&item), &key_of) else {
            self.chunks.push(Arc::new(vec![item]));
            self.len = 1;
            return;
        };
        let chunk = Arc::make_mut(&mut self.chunks[c]);
        if chunk
            .get(i)
            .is_some_and(|there| key_of(there) == key_of(&item))
        {
            chunk[i] = item;
            return;
        }
        chunk.insert(i, item);
        self.len += 1;
        if chunk.len() > MOST {
            let upper = chunk.split_off(chunk.len() / 2);
            self.chunks.insert(c + 1, Arc::new(upper));
        }
    }

    /// Takes out every item whose key is `key`; how many there were.
    pub fn remove<K: Ord + ?Sized>(&mut self, key: &K, key_of: impl Fn(&T) -> &K) -> usize {
        let mut removed = 0;
        // A run of equal keys may span chunks: one chunk's share at a time.
        while let Some((c, i)) = self.position(key, &key_of) {
            let end = i + self.chunks[c][i..].partition_point(|item| key_of(item) == key);
            if end == i {
                break;
            }
            let chunk = Arc::make_mut(&mut self.chunks[c]);
            chunk.drain(i..end);
            if chunk.is_empty() {
                self.chunks.remove(c);
            }
            removed += end - i;
            self.len -= end - i;
        }
        removed
    }
}

impl<'a, T> IntoIterator for &'a SortedChunks<T> {
    type Item = &'a T;
    type IntoIter = SortedIter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// (key, tag): sorted by key; the tag tells apart items with the same key.
    type Item = (u16, u32);

    fn key(item: &Item) -> &u16 {
        &item.0
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u16, u32),
        Remove(u16),
        /// Keeps a copy, which later changes must leave as it was.
        Copy,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Keys from a small range: chunks that fill, split and empty. (`put` replaces, so
        // runs of one key are `removing_a_key_takes_its_whole_run`'s.)
        prop_oneof![
            6 => (0u16..600, any::<u32>()).prop_map(|(k, t)| Op::Put(k, t)),
            3 => (0u16..600).prop_map(Op::Remove),
            1 => Just(Op::Copy),
        ]
    }

    /// The model: a sorted `Vec` with the same operations.
    fn put(model: &mut Vec<Item>, item: Item) {
        let at = model.partition_point(|x| x.0 < item.0);
        if model.get(at).is_some_and(|x| x.0 == item.0) {
            model[at] = item;
        } else {
            model.insert(at, item);
        }
    }

    fn check(list: &SortedChunks<Item>, model: &[Item]) {
        assert_eq!(list.len(), model.len());
        assert_eq!(list.iter().copied().collect::<Vec<_>>(), model);
        assert_eq!(list.iter().rev().count(), model.len());
        assert_eq!(list.first(), model.first());
        assert!(list.chunks.iter().all(|c| !c.is_empty() && c.len() <= MOST));
        for k in [0, 1, 299, 599, 600] {
            let first = model.iter().find(|x| x.0 == k);
            assert_eq!(list.get(&k, key), first, "key {k}");
        }
    }

    proptest! {
        #[test]
        fn behaves_as_a_sorted_vec_and_copies_stay_as_they_were(
            start in prop::collection::vec((0u16..600, any::<u32>()), 0..700),
            ops in prop::collection::vec(op(), 0..400),
        ) {
            let mut model: Vec<Item> = Vec::new();
            for item in start {
                put(&mut model, item);
            }
            let mut list = SortedChunks::from_sorted(model.clone());
            check(&list, &model);
            let mut copies: Vec<(SortedChunks<Item>, Vec<Item>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Put(k, t) => {
                        list.put((k, t), key);
                        put(&mut model, (k, t));
                    }
                    Op::Remove(k) => {
                        let before = model.len();
                        model.retain(|x| x.0 != k);
                        prop_assert_eq!(list.remove(&k, key), before - model.len());
                    }
                    Op::Copy => copies.push((list.clone(), model.clone())),
                }
                check(&list, &model);
            }
            for (copy, then) in &copies {
                check(copy, then);
            }
        }
    }

    #[test]
    fn a_copy_shares_every_chunk_but_the_one_changed() {
        let items: Vec<Item> = (0..10_000).map(|k| (k, 0)).collect();
        let mut list = SortedChunks::from_sorted(items);
        let copy = list.clone();
        list.put((5_000, 1), key);
        list.remove(&7_000, key);
        let shared = (list.chunks.iter().zip(&copy.chunks))
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, copy.chunks.len() - 2);
        assert_eq!(copy.get(&5_000, key), Some(&(5_000, 0)));
        assert_eq!(list.get(&5_000, key), Some(&(5_000, 1)));
        assert_eq!(list.get(&7_000, key), None);
    }

    /// Items with one key across chunks all go.
    #[test]
    fn removing_a_key_takes_its_whole_run() {
        let items: Vec<Item> = (0..1_000).map(|t| (7, t)).collect();
        let mut list = SortedChunks::from_sorted(items);
        assert!(list.chunks.len() > 2);
        assert_eq!(list.remove(&7, key), 1_000);
        assert!(list.is_empty() && list.chunks.is_empty());
    }
}
