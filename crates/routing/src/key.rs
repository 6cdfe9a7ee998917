//! Compact string keys for the lookup structures.
//!
//! Why: a lookup walks one host entry and a few trie nodes; with `Box<str>` keys every key
//! comparison is a pointer chase to a separate heap allocation, i.e. a likely cache miss per
//! step. Keys up to [`INLINE`] bytes (almost every host name and path segment) are stored inline
//! instead, so comparing them touches only memory the lookup has already loaded.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The hash maps of the request path: foldhash instead of std's SipHash, several times
/// faster on short keys such as host names and path elements, and still seeded per map
/// (random state), so that names chosen to collide cannot be prepared in advance.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Longest key stored inline.
const INLINE: usize = 30;

/// An immutable string, inline when short.
#[derive(Clone)]
pub(crate) enum Key {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Key {
    pub(crate) fn new(s: &str) -> Key {
        if s.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            Key::Inline {
                len: s.len() as u8,
                bytes,
            }
        } else {
            Key::Heap(s.into())
        }
    }

    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Built from a whole &str in `new`, so always valid UTF-8; never panic regardless.
            Key::Inline { len, bytes } => {
                std::str::from_utf8(bytes.get(..usize::from(*len)).unwrap_or_default())
                    .unwrap_or_default()
            }
            Key::Heap(s) => s,
        }
    }
}

impl From<&str> for Key {
    fn from(s: &str) -> Key {
        Key::new(s)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl Hash for Key {
    /// Hashes exactly like the `str` it holds, as `Borrow<str>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn inline_and_heap_keys() {
        for s in [
            "",
            "a",
            "api",
            &"x".repeat(30),
            &"y".repeat(31),
            "ünïcode.example",
        ] {
            let k = Key::new(s);
            assert_eq!(k.as_str(), s);
            assert_eq!(matches!(k, Key::Inline { .. }), s.len() <= 30, "{s}");
        }
        let mut m: HashMap<Key, u32> = HashMap::new();
        m.insert(Key::new("short"), 1);
        m.insert(Key::new(&"long".repeat(20)), 2);
        assert_eq!(m.get("short"), Some(&1));
        assert_eq!(m.get("long".repeat(20).as_str()), Some(&2));
        assert_eq!(m.get("shor"), None);
    }
}
