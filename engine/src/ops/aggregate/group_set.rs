//! A state partition's groups in one batch: their state keys, eviction
//! times and accumulators side by side in a few vectors (no allocation per
//! group), found by key through a hash index over them. The tasks' groups
//! are merged into a partition's set, the partition's store is applied to
//! it in place, and its output is read from it.

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::Acc;
use crate::error::Result;

/// Groups by state key, in the order they were added.
pub(super) struct GroupSet {
    /// Accumulators per group.
    width: usize,
    /// Every group's state key, one after the other.
    keys: Vec<u8>,
    /// Where each group's key ends in `keys`.
    ends: Vec<usize>,
    /// Each group's eviction time (µs; `i64::MAX`: never).
    evicts: Vec<i64>,
    /// Every group's accumulators, `width` per group.
    accs: Vec<Acc>,
    /// The groups added by [`GroupSet::merge`], by a hash of their key.
    index: HashTable<u32>,
    /// Made by [`GroupSet::indexed`].
    indexed: bool,
    hasher: foldhash::fast::RandomState,
}

impl GroupSet {
    /// An empty set to be filled by [`GroupSet::merge`], with room for
    /// `groups` groups in its index too.
    pub(super) fn indexed(width: usize, groups: usize) -> GroupSet {
        GroupSet {
            index: HashTable::with_capacity(groups),
            indexed: true,
            ..GroupSet::new(width, groups)
        }
    }

    /// An empty set of groups of `width` accumulators, with room for `groups`.
    pub(super) fn new(width: usize, groups: usize) -> GroupSet {
        GroupSet {
            width,
            keys: Vec::new(),
            ends: Vec::with_capacity(groups),
            evicts: Vec::with_capacity(groups),
            accs: Vec::with_capacity(groups * width),
            index: HashTable::new(),
            indexed: false,
            hasher: Default::default(),
        }
    }

    /// True for a set made by [`GroupSet::indexed`], which
    /// [`GroupSet::merge`] fills; else [`GroupSet::push`] does.
    pub(super) fn is_indexed(&self) -> bool {
        self.indexed
    }

    /// How many groups.
    pub(super) fn len(&self) -> usize {
        self.evicts.len()
    }

    /// True without groups.
    pub(super) fn is_empty(&self) -> bool {
        self.evicts.is_empty()
    }

    /// Group `i`'s state key.
    pub(super) fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.keys[start..self.ends[i]]
    }

    /// Group `i`'s eviction time.
    #[cfg(test)]
    pub(super) fn evict_at(&self, i: usize) -> i64 {
        self.evicts[i]
    }

    /// Group `i`'s accumulators.
    pub(super) fn accs(&self, i: usize) -> &[Acc] {
        &self.accs[i * self.width..(i + 1) * self.width]
    }

    /// Group `i`'s key, with its eviction time and accumulators to change.
    pub(super) fn group_mut(&mut self, i: usize) -> (&[u8], &mut i64, &mut [Acc]) {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        (
            &self.keys[start..self.ends[i]],
            &mut self.evicts[i],
            &mut self.accs[i * self.width..(i + 1) * self.width],
        )
    }

    /// Appends a group without looking for its key: for keys known to be
    /// distinct (one task's groups, a store's entries). [`GroupSet::merge`]
    /// does not find the groups added so.
    pub(super) fn push(&mut self, key: &[u8], evict_at: i64, accs: &[Acc]) {
        debug_assert_eq!(accs.len(), self.width);
        self.keys.extend_from_slice(key);
        self.ends.push(self.keys.len());
        self.evicts.push(evict_at);
        self.accs.extend_from_slice(accs);
    }

    /// Folds a group into the group of the same key with `fold` (into, from),
    /// or adds a copy of it when the key is new.
    pub(super) fn merge(
        &mut self,
        key: &[u8],
        evict_at: i64,
        accs: &[Acc],
        fold: impl FnOnce(&mut [Acc], &[Acc]) -> Result<()>,
    ) -> Result<()> {
        debug_assert!(self.indexed, "merge into a set made by GroupSet::new");
        debug_assert_eq!(self.index.len(), self.len(), "push and merge mixed");
        let hash = self.hasher.hash_one(key);
        let GroupSet {
            width,
            keys,
            ends,
            index,
            hasher,
            ..
        } = self;
        let key_of = |i: u32| {
            let i = i as usize;
            let start = if i == 0 { 0 } else { ends[i - 1] };
            &keys[start..ends[i]]
        };
        if let Some(&i) = index.find(hash, |&i| key_of(i) == key) {
            let i = i as usize;
            return fold(&mut self.accs[i * *width..(i + 1) * *width], accs);
        }
        let i = ends.len() as u32;
        index.insert_unique(hash, i, |&j| hasher.hash_one(key_of(j)));
        self.push(key, evict_at, accs);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::aggregate::accumulators::Kind;
    use weir_plan::AggFn;

    fn count(n: i64) -> Acc {
        let mut a = Acc::bounded(AggFn::Count, Kind::Int, 0);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&n.to_le_bytes());
        let mut pos = 0;
        a.decode(&bytes, &mut pos).unwrap();
        a
    }

    fn value(a: &Acc) -> i64 {
        let mut out = Vec::new();
        a.encode(&mut out);
        i64::from_le_bytes(out[..8].try_into().unwrap())
    }

    #[test]
    fn merge_finds_a_key_added_before_and_keeps_first_seen_order() {
        let mut set = GroupSet::indexed(1, 0);
        let add = |a: &mut [Acc], b: &[Acc]| a[0].merge(&b[0]);
        set.merge(b"b", 5, &[count(1)], add).unwrap();
        set.merge(b"", 7, &[count(2)], add).unwrap();
        set.merge(b"ab", 9, &[count(3)], add).unwrap();
        set.merge(b"b", 6, &[count(10)], add).unwrap();
        set.merge(b"", 8, &[count(20)], add).unwrap();
        assert_eq!(set.len(), 3);
        let got: Vec<(&[u8], i64, i64)> = (0..set.len())
            .map(|i| (set.key(i), set.evict_at(i), value(&set.accs(i)[0])))
            .collect();
        // The first group of a key sets its eviction time; later ones fold in.
        assert_eq!(
            got,
            vec![(&b"b"[..], 5, 11), (&b""[..], 7, 22), (&b"ab"[..], 9, 3)]
        );
    }

    #[test]
    fn many_keys_survive_the_index_growing() {
        let mut set = GroupSet::indexed(1, 0);
        for round in 0..2 {
            for k in 0..10_000u32 {
                set.merge(&k.to_be_bytes(), 0, &[count(k as i64)], |a, b| {
                    a[0].merge(&b[0])
                })
                .unwrap();
            }
            assert_eq!(set.len(), 10_000, "round {round}");
        }
        for k in 0..10_000usize {
            assert_eq!(set.key(k), (k as u32).to_be_bytes());
            assert_eq!(value(&set.accs(k)[0]), 2 * k as i64);
        }
    }

    #[test]
    fn a_failed_fold_is_the_merge_error() {
        let mut set = GroupSet::indexed(1, 0);
        set.merge(b"k", 0, &[count(1)], |_, _| Ok(())).unwrap();
        let e = set
            .merge(b"k", 0, &[count(1)], |_, _| {
                Err(crate::error::WeirError::Config("overflow".into()))
            })
            .unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
    }
}
