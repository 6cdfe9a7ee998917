//! [`ChunkedVec`]: a vector whose copies share its items chunk by chunk.

use std::sync::Arc;

const CHUNK_BITS: u32 = 7;
/// Items per chunk: a copy costs `len / CHUNK` reference counts, a change `CHUNK` clones.
pub const CHUNK: usize = 1 << CHUNK_BITS;
const MASK: usize = CHUNK - 1;

/// A vector of `T` in shared chunks of 128 items. Cloning it copies the chunks' pointers
/// (and the items after the last whole chunk), not the items; changing an item copies its
/// chunk only when another vector shares it. What lets a table of 50,000 route entries be
/// copied and changed in a few microseconds, and what lets state derived from it be
/// carried over chunk by chunk ([`ChunkedVec::derive`]).
///
/// Item `i` is item `i % 128` of chunk `i / 128`; the items after the last whole chunk
/// are a `Vec` of this vector's own, so that pushing is cheap.
pub struct ChunkedVec<T> {
    /// Whole chunks, as slices: an item is one pointer away from this list, as a lookup
    /// on the request path wants.
    chunks: Vec<Arc<[T]>>,
    /// Fewer than 128 items after them.
    tail: Vec<T>,
}

/// [`ChunkedVec::iter`]'s iterator.
pub type Iter<'a, T> = std::iter::Chain<
    std::iter::FlatMap<
        std::slice::Iter<'a, Arc<[T]>>,
        std::slice::Iter<'a, T>,
        fn(&'a Arc<[T]>) -> std::slice::Iter<'a, T>,
    >,
    std::slice::Iter<'a, T>,
>;

impl<T: Clone> Clone for ChunkedVec<T> {
    fn clone(&self) -> Self {
        ChunkedVec {
            chunks: self.chunks.clone(),
            tail: self.tail.clone(),
        }
    }
}

impl<T> Default for ChunkedVec<T> {
    fn default() -> Self {
        ChunkedVec {
            chunks: Vec::new(),
            tail: Vec::new(),
        }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for ChunkedVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> ChunkedVec<T> {
    /// An empty vector.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        (self.chunks.len() << CHUNK_BITS) + self.tail.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.tail.is_empty()
    }

    /// Item `index`, if there is one.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        match self.chunks.get(index >> CHUNK_BITS) {
            Some(chunk) => chunk.get(index & MASK),
            None => self.tail.get(index - (self.chunks.len() << CHUNK_BITS)),
        }
    }

    /// Every item, in order.
    pub fn iter(&self) -> Iter<'_, T> {
        let chunk_items: fn(&Arc<[T]>) -> std::slice::Iter<'_, T> = |chunk| chunk.iter();
        self.chunks
            .iter()
            .flat_map(chunk_items)
            .chain(self.tail.iter())
    }

    /// Whether `self` and `other` share whole chunk `chunk`.
    fn shares_chunk(&self, other: &Self, chunk: usize) -> bool {
        matches!((self.chunks.get(chunk), other.chunks.get(chunk)), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
    }

    /// A vector of the same length as `self`, item `i` made from item `i` of `self`, chunk
    /// by chunk: where `self` shares a whole chunk with `previous_source`, the chunk of
    /// `previous` at that position is taken as it is (`previous` must have been derived
    /// from `previous_source`, e.g. by this function); `make` makes the others (and the
    /// items after the last whole chunk), given the index of the first item and the items.
    pub fn derive<'s, U>(
        &'s self,
        previous_source: &Self,
        previous: &ChunkedVec<U>,
        mut make: impl FnMut(usize, &'s [T]) -> Vec<U>,
    ) -> ChunkedVec<U> {
        let chunks = self
            .chunks
            .iter()
            .enumerate()
            .map(|(at, chunk)| match previous.chunks.get(at) {
                Some(kept) if self.shares_chunk(previous_source, at) => Arc::clone(kept),
                _ => {
                    let made = make(at << CHUNK_BITS, chunk);
                    assert_eq!(made.len(), chunk.len(), "one derived item per item");
                    Arc::from(made)
                }
            })
            .collect();
        let tail = make(self.chunks.len() << CHUNK_BITS, &self.tail);
        assert_eq!(tail.len(), self.tail.len(), "one derived item per item");
        ChunkedVec { chunks, tail }
    }

    /// Whether items `index..index + CHUNK` of `self` and of `other` are one shared chunk
    /// (the same items, without comparing them); `false` unless `index` starts a chunk.
    pub fn shares_chunk_at(&self, other: &Self, index: usize) -> bool {
        index & MASK == 0 && self.shares_chunk(other, index >> CHUNK_BITS)
    }

    /// The indices of the items `self` does not share with `other` (a superset of the
    /// items that differ): those of the whole chunks not shared, and those after the last.
    pub fn unshared<'a>(&'a self, other: &'a Self) -> impl Iterator<Item = usize> + 'a {
        let whole = self.chunks.len() << CHUNK_BITS;
        (0..self.chunks.len())
            .filter(move |&at| !self.shares_chunk(other, at))
            .flat_map(|at| (at << CHUNK_BITS)..((at + 1) << CHUNK_BITS))
            .chain(whole..whole + self.tail.len())
    }
}

impl<T: Clone> ChunkedVec<T> {
    /// Item `index` to change (its chunk copied first if another vector shares it).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        let whole = self.chunks.len() << CHUNK_BITS;
        match self.chunks.get_mut(index >> CHUNK_BITS) {
            Some(chunk) => Arc::make_mut(chunk).get_mut(index & MASK),
            None => self.tail.get_mut(index - whole),
        }
    }

    /// Adds `item` at the end.
    pub fn push(&mut self, item: T) {
        self.tail.push(item);
        if self.tail.len() == CHUNK {
            let chunk = std::mem::replace(&mut self.tail, Vec::with_capacity(CHUNK));
            self.chunks.push(Arc::from(chunk));
        }
    }

    /// Takes the last item out. When it was in a whole chunk, the rest of that chunk
    /// becomes the items after the last whole chunk (cloned out of it when shared).
    pub fn pop(&mut self) -> Option<T> {
        if self.tail.is_empty() {
            let chunk = self.chunks.pop()?;
            self.tail = chunk.to_vec();
        }
        self.tail.pop()
    }

    /// Takes item `index` out and puts the last item in its place (`Vec::swap_remove`):
    /// every other item keeps its index, and a copy shares every chunk but those two.
    ///
    /// # Panics
    /// If `index` is out of range, as `Vec::swap_remove`.
    pub fn swap_remove(&mut self, index: usize) -> T {
        let len = self.len();
        if index >= len {
            out_of_range(index, len);
        }
        let Some(last) = self.pop() else {
            out_of_range(index, len)
        };
        match self.get_mut(index) {
            Some(slot) => std::mem::replace(slot, last),
            // `index` was the last item's.
            None => last,
        }
    }

    /// Every item, to change (each shared chunk copied first).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.chunks
            .iter_mut()
            .flat_map(|chunk| Arc::make_mut(chunk).iter_mut())
            .chain(self.tail.iter_mut())
    }
}

impl<T> std::ops::Index<usize> for ChunkedVec<T> {
    type Output = T;

    /// # Panics
    /// If `index` is out of range, as a slice's.
    #[inline]
    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(item) => item,
            None => out_of_range(index, self.len()),
        }
    }
}

#[cold]
#[inline(never)]
fn out_of_range(index: usize, len: usize) -> ! {
    panic!("index {index} out of range for length {len}")
}

impl<T: Clone> std::ops::IndexMut<usize> for ChunkedVec<T> {
    /// # Panics
    /// If `index` is out of range, as a slice's.
    fn index_mut(&mut self, index: usize) -> &mut T {
        let len = self.len();
        match self.get_mut(index) {
            Some(item) => item,
            None => out_of_range(index, len),
        }
    }
}

impl<T: Clone> FromIterator<T> for ChunkedVec<T> {
    fn from_iter<I: IntoIterator<Item = T>>(items: I) -> Self {
        let mut out = ChunkedVec::new();
        for item in items {
            out.push(item);
        }
        out
    }
}

impl<T: Clone> IntoIterator for ChunkedVec<T> {
    type Item = T;
    type IntoIter = std::vec::IntoIter<T>;

    /// Every item, in order (each cloned out of the shared chunks: for the small tables
    /// of partial compiles).
    fn into_iter(self) -> Self::IntoIter {
        let mut items = Vec::with_capacity(self.len());
        for chunk in &self.chunks {
            items.extend_from_slice(chunk);
        }
        items.extend(self.tail);
        items.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a ChunkedVec<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What a test does to both a `ChunkedVec` and a `Vec`.
    #[derive(Debug, Clone)]
    enum Op {
        Push(u32),
        Set(usize, u32),
        Pop,
        SwapRemove(usize),
        /// Keep a copy (shares every chunk), and change the vector afterwards.
        Copy,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u32>().prop_map(Op::Push),
            2 => (any::<usize>(), any::<u32>()).prop_map(|(i, v)| Op::Set(i, v)),
            1 => Just(Op::Pop),
            1 => any::<usize>().prop_map(Op::SwapRemove),
            1 => Just(Op::Copy),
        ]
    }

    proptest! {
        /// A `ChunkedVec` reads like a `Vec` after any pushes, changes, pops and
        /// `swap_remove`s, and a copy taken
        /// along the way keeps reading like the `Vec` did then.
        #[test]
        fn reads_like_a_vec_and_copies_do_not_change(
            start in 0usize..600,
            ops in prop::collection::vec(op(), 0..200),
        ) {
            let mut model: Vec<u32> = (0..start as u32).collect();
            let mut vec: ChunkedVec<u32> = model.iter().copied().collect();
            let mut copies: Vec<(ChunkedVec<u32>, Vec<u32>)> = Vec::new();
            for op in ops {
                match op {
                    Op::Push(v) => {
                        model.push(v);
                        vec.push(v);
                    }
                    Op::Set(i, v) => {
                        let i = if model.is_empty() { i } else { i % (model.len() + 1) };
                        let expected = model.get_mut(i);
                        let got = vec.get_mut(i);
                        prop_assert_eq!(expected.is_some(), got.is_some());
                        if let (Some(e), Some(g)) = (expected, got) {
                            *e = v;
                            *g = v;
                        }
                    }
                    Op::Pop => prop_assert_eq!(vec.pop(), model.pop()),
                    Op::SwapRemove(i) if !model.is_empty() => {
                        let i = i % model.len();
                        prop_assert_eq!(vec.swap_remove(i), model.swap_remove(i));
                    }
                    Op::SwapRemove(_) => {}
                    Op::Copy => copies.push((vec.clone(), model.clone())),
                }
                prop_assert_eq!(vec.len(), model.len());
            }
            prop_assert_eq!(vec.iter().copied().collect::<Vec<_>>(), model.clone());
            prop_assert_eq!(vec.iter().rev().copied().collect::<Vec<_>>(),
                            model.iter().rev().copied().collect::<Vec<_>>());
            for i in 0..model.len() + 2 {
                prop_assert_eq!(vec.get(i), model.get(i));
            }
            for (copy, then) in &copies {
                prop_assert_eq!(copy.iter().copied().collect::<Vec<_>>(), then.clone());
            }
            // Whatever differs from a copy lies in the chunks it no longer shares.
            for (copy, then) in &copies {
                let unshared: std::collections::BTreeSet<usize> = vec.unshared(copy).collect();
                for i in 0..model.len() {
                    if then.get(i) != model.get(i) {
                        prop_assert!(unshared.contains(&i), "item {} differs but is shared", i);
                    }
                }
            }
        }

        /// `derive` equals mapping every item, whatever it takes over from a previous
        /// derivation.
        #[test]
        fn derive_equals_mapping_every_item(
            start in 0usize..600,
            sets in prop::collection::vec((any::<usize>(), any::<u32>()), 0..8),
            pushes in 0usize..300,
        ) {
            let before: ChunkedVec<u32> = (0..start as u32).collect();
            let derived_before = before.derive(&ChunkedVec::new(), &ChunkedVec::new(), |_, c| {
                c.iter().map(|v| u64::from(*v) * 2).collect()
            });
            let mut after = before.clone();
            for (i, v) in sets {
                if let Some(slot) = after.get_mut(i % (start + 1)) {
                    *slot = v;
                }
            }
            for v in 0..pushes as u32 {
                after.push(v);
            }
            let mut made = 0;
            let derived = after.derive(&before, &derived_before, |first, c| {
                made += c.len();
                c.iter().enumerate().map(|(k, v)| {
                    assert_eq!(after.get(first + k), Some(v));
                    u64::from(*v) * 2
                }).collect()
            });
            let expected: Vec<u64> = after.iter().map(|v| u64::from(*v) * 2).collect();
            prop_assert_eq!(derived.iter().copied().collect::<Vec<_>>(), expected);
            prop_assert_eq!(derived.len(), after.len());
            prop_assert!(made <= after.len());
        }
    }

    #[test]
    fn a_change_copies_one_chunk_and_a_copy_shares_the_rest() {
        let a: ChunkedVec<u32> = (0..1000).collect();
        let mut b = a.clone();
        *b.get_mut(300).expect("in range") = 7;
        let unshared: Vec<usize> = b.unshared(&a).collect();
        // Item 300 is in chunk 2 (items 256..384); items 896..1000 follow the last whole
        // chunk, each vector's own.
        assert_eq!(unshared, (256..384).chain(896..1000).collect::<Vec<_>>());
        assert_eq!(a[300], 300);
        assert_eq!(b[300], 7);
        let mut derived_items = 0;
        let derived_a = a.derive(&ChunkedVec::new(), &ChunkedVec::new(), |_, c| c.to_vec());
        let derived_b = b.derive(&a, &derived_a, |_, c| {
            derived_items += c.len();
            c.to_vec()
        });
        assert_eq!(derived_items, 128 + 104);
        assert_eq!(derived_b[300], 7);
        assert!(b.get_mut(1000).is_none());
        assert!(b.get(1000).is_none());
    }

    #[test]
    fn a_swap_remove_leaves_every_chunk_but_two_shared() {
        let a: ChunkedVec<u32> = (0..1000).collect();
        let mut b = a.clone();
        // The last item (999, after the 7 whole chunks) moves to 300, in chunk 2.
        assert_eq!(b.swap_remove(300), 300);
        assert_eq!(b[300], 999);
        assert_eq!(b.len(), 999);
        let shared: Vec<usize> = (0..7)
            .filter(|c| b.shares_chunk_at(&a, c * CHUNK))
            .collect();
        assert_eq!(shared, [0, 1, 3, 4, 5, 6]);
        assert!(!b.shares_chunk_at(&a, 1), "not the start of a chunk");
        // Emptying the items after the last whole chunk takes that chunk apart.
        let mut c: ChunkedVec<u32> = (0..256).collect();
        assert_eq!(c.swap_remove(0), 0);
        assert_eq!((c[0], c.len()), (255, 255));
        assert_eq!(c.iter().copied().collect::<Vec<_>>().len(), 255);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn swap_remove_past_the_end_panics_like_a_vec() {
        let mut v: ChunkedVec<u8> = (0..3).collect();
        v.swap_remove(3);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn indexing_past_the_end_panics_like_a_slice() {
        let v: ChunkedVec<u8> = (0..3).collect();
        let _ = v[3];
    }
}
