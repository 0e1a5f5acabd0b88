//! [`LruMap`]: a map bounded by a capacity, evicting the least recently used entry. The
//! per-stream caches of the [`Runtime`](crate::Runtime) and of the agent controller live in
//! one, so their memory follows the capacity, not the number of streams ever touched.
//!
//! Everything kept in one is a cache of what the store holds: an evicted entry costs the next
//! use a re-read and a re-verification, never a different answer.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A map of at most `capacity` entries; inserting into a full map evicts the entry that was
/// used longest ago. Capacity 0 keeps nothing.
pub(crate) struct LruMap<K, V> {
    capacity: usize,
    /// Bumped on every use; an entry's stamp is the tick of its last use.
    tick: u64,
    entries: HashMap<K, (u64, V)>,
    /// Stamp -> key, oldest first.
    order: BTreeMap<u64, K>,
}

impl<K: Clone + Eq + Hash, V> LruMap<K, V> {
    /// An empty map holding at most `capacity` entries.
    pub(crate) fn new(capacity: usize) -> Self {
        LruMap {
            capacity,
            tick: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// How many entries it holds.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Changes the capacity, evicting the oldest entries beyond it.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.trim();
    }

    fn stamp(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn trim(&mut self) {
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        // A map that once held many entries keeps their allocation: give it back when most of
        // it is unused.
        if self.entries.capacity() > 64 && self.entries.len() * 4 < self.entries.capacity() {
            self.entries.shrink_to(self.entries.len() * 2);
        }
    }

    /// Inserts (or replaces) `key` as the most recently used entry, evicting the least
    /// recently used one when the map is over its capacity.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        let stamp = self.stamp();
        if let Some((old, _)) = self.entries.insert(key.clone(), (stamp, value)) {
            self.order.remove(&old);
        }
        self.order.insert(stamp, key);
        self.trim();
    }

    /// The entry of `key`, now the most recently used.
    pub(crate) fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let stamp = self.stamp();
        let (used, value) = self.entries.get_mut(key)?;
        if let Some(k) = self.order.remove(used) {
            self.order.insert(stamp, k);
        }
        *used = stamp;
        Some(value)
    }

    /// Removes and returns the entry of `key`.
    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (used, value) = self.entries.remove(key)?;
        self.order.remove(&used);
        self.trim();
        Some(value)
    }

    /// Keeps only the entries `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let order = &mut self.order;
        self.entries.retain(|k, (used, _)| {
            let kept = keep(k);
            if !kept {
                order.remove(used);
            }
            kept
        });
        self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::LruMap;

    fn keys(m: &LruMap<String, u32>) -> Vec<String> {
        m.order.values().cloned().collect()
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let mut m = LruMap::new(2);
        m.insert("a".to_owned(), 1);
        m.insert("b".to_owned(), 2);
        assert_eq!(m.get("a"), Some(&1)); // "b" is now the oldest
        m.insert("c".to_owned(), 3);
        assert_eq!(keys(&m), ["a", "c"]);
        assert_eq!(m.get("b"), None);
        m.insert("a".to_owned(), 10); // a replacement is a use
        m.insert("d".to_owned(), 4);
        assert_eq!(keys(&m), ["a", "d"]);
        assert_eq!(m.get("a"), Some(&10));
    }

    #[test]
    fn remove_retain_and_capacity_keep_both_indexes_in_step() {
        let mut m = LruMap::new(100);
        for i in 0..100u32 {
            m.insert(i.to_string(), i);
        }
        assert_eq!(m.remove("7"), Some(7));
        m.retain(|k| k.parse::<u32>().unwrap() % 2 == 0);
        assert_eq!(m.len(), 50);
        assert_eq!(m.order.len(), 50);
        m.set_capacity(10);
        assert_eq!(m.len(), 10);
        assert_eq!(
            keys(&m),
            ["80", "82", "84", "86", "88", "90", "92", "94", "96", "98"]
        );
        m.set_capacity(0);
        m.insert("x".to_owned(), 1);
        assert_eq!((m.len(), m.order.len()), (0, 0));
    }

    #[test]
    fn many_keys_stay_within_the_capacity() {
        let mut m = LruMap::new(16);
        for i in 0..10_000u32 {
            m.insert(i.to_string(), i);
            assert!(m.len() <= 16);
        }
        assert_eq!(m.order.len(), 16);
        assert!(
            m.entries.capacity() < 1024,
            "the allocation follows the bound"
        );
    }
}
