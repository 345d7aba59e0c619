//! The in-memory state store: a hash map, with each committed version's
//! changes written as `<version>.delta` and a full `<version>.snapshot`
//! every `SNAPSHOT_INTERVAL` versions (`files`), on the storage layer (a local
//! directory or an object store prefix: see `files`). Files carry a
//! checksum; a damaged file is an error naming it, never silently empty
//! state.

use crate::hash::FastMap;
use std::borrow::Cow;
use std::path::Path;

use crate::error::Result;
use crate::storage::Storage;

/// A full snapshot is written every this many versions (the state file
/// format's, shared by both stores).
pub use super::files::SNAPSHOT_INTERVAL;
use super::files::{encode, Encoder, VersionFiles};
use super::{StateIter, StateStore, Updater};

/// In-memory state for one operator partition.
pub struct MemoryStateStore {
    files: VersionFiles,
    map: FastMap<Vec<u8>, Slot>,
    /// The batch's changes in order: each key's value before its first
    /// change (a key removed and put again is logged once more per such
    /// cycle; abort replays the log backwards, so the first entry wins).
    undo: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    bytes: usize,
    /// The size of the last delta file written: the next one's first guess.
    delta_hint: usize,
}

/// A value, and whether this batch changed it (then its previous value is
/// in the undo log). One hash lookup per put or remove finds both.
struct Slot {
    /// The value.
    value: Vec<u8>,
    /// True when this batch changed the key (its old value is in the undo log).
    changed: bool,
}

impl Slot {
    /// A value as committed (unchanged by this batch).
    fn committed(value: Vec<u8>) -> Slot {
        Slot {
            value,
            changed: false,
        }
    }
}

impl MemoryStateStore {
    /// Opens the store in the local directory `dir` at `version` (the
    /// latest snapshot at or below it, then the deltas after); `sync`:
    /// files are fsync'd.
    pub fn open(dir: &Path, version: u64, retain: u64, sync: bool) -> Result<MemoryStateStore> {
        MemoryStateStore::open_on(Storage::local(dir, sync), version, retain)
    }

    /// Opens the store in `storage` (a local directory or an object store
    /// prefix) at `version`, keeping `retain` versions restorable.
    pub fn open_on(storage: Storage, version: u64, retain: u64) -> Result<MemoryStateStore> {
        let mut map: FastMap<Vec<u8>, Slot> = FastMap::default();
        let files = VersionFiles::new(storage, version, retain);
        files.restore(version, |k, v| {
            match v {
                Some(v) => map.insert(k, Slot::committed(v)),
                None => map.remove(&k),
            };
            Ok(())
        })?;
        let mut store = MemoryStateStore {
            files,
            map,
            undo: Vec::new(),
            bytes: 0,
            delta_hint: 0,
        };
        store.bytes = store.count_bytes();
        Ok(store)
    }

    /// The memory the entries take (keys, values and a fixed overhead each).
    fn count_bytes(&self) -> usize {
        self.map
            .iter()
            .map(|(k, s)| k.len() + s.value.len() + 48)
            .sum()
    }
}

/// Sets a held key's value; on its first change in a batch, logs the
/// previous value in `undo` with a copy of the key (`key`, made only then).
fn change(
    slot: &mut Slot,
    key: impl FnOnce() -> Vec<u8>,
    value: Vec<u8>,
    bytes: &mut usize,
    undo: &mut Vec<(Vec<u8>, Option<Vec<u8>>)>,
) {
    *bytes = (*bytes + value.len()).saturating_sub(slot.value.len());
    let old = std::mem::replace(&mut slot.value, value);
    if !std::mem::replace(&mut slot.changed, true) {
        undo.push((key(), Some(old)));
    }
}

impl StateStore for MemoryStateStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.map.get(key).map(|s| Cow::Borrowed(s.value.as_slice()))
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        // One lookup finds the key or where it goes.
        match self.map.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => {
                // The key copied only for the undo log, which takes it at
                // the key's first change in the batch (`change` asks then).
                let key = (!e.get().changed).then(|| e.key().clone());
                let key = || key.unwrap_or_default();
                change(e.get_mut(), key, value, &mut self.bytes, &mut self.undo);
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                self.bytes += e.key().len() + value.len() + 48;
                self.undo.push((e.key().clone(), None));
                e.insert(Slot {
                    value,
                    changed: true,
                });
            }
        }
    }

    fn update(&mut self, key: &[u8], f: Updater<'_>) -> Result<()> {
        // One lookup reads the value and changes it in place: no copy of
        // the key unless the undo log needs one.
        match self.map.get_mut(key) {
            Some(slot) => {
                let value = f(Some(&slot.value))?;
                change(
                    slot,
                    || key.to_vec(),
                    value,
                    &mut self.bytes,
                    &mut self.undo,
                );
            }
            None => {
                let value = f(None)?;
                self.put(key.to_vec(), value);
            }
        }
        Ok(())
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = self.map.remove(key) {
            self.bytes = self.bytes.saturating_sub(key.len() + old.value.len() + 48);
            if !old.changed {
                self.undo.push((key.to_vec(), Some(old.value)));
            }
        }
    }

    fn iter(&self) -> StateIter<'_> {
        Box::new(self.map.iter().map(|(k, s)| {
            (
                Cow::Borrowed(k.as_slice()),
                Cow::Borrowed(s.value.as_slice()),
            )
        }))
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn commit(&mut self, version: u64) -> Result<()> {
        // Each changed key with its value now (none when removed); a key
        // logged twice (removed and put again) is written twice, the same.
        // One lookup per key also marks it unchanged: should the write
        // fail, abort still restores every key in the undo log, whatever
        // its mark.
        let mut delta = Encoder::new(self.delta_hint);
        for (k, _) in &self.undo {
            let slot = self.map.get_mut(k.as_slice());
            delta.entry(
                k,
                slot.map(|s| {
                    s.changed = false;
                    &*s.value
                }),
            );
        }
        let delta = delta.finish();
        self.delta_hint = delta.len();
        self.files.write_delta(version, &delta)?;
        if version % SNAPSHOT_INTERVAL == 0 {
            let snap = encode(
                self.map
                    .iter()
                    .map(|(k, s)| (k.as_slice(), Some(s.value.as_slice()))),
                self.bytes,
            );
            self.files.write_snapshot(version, &snap)?;
        }
        // The batch is durable: its undo log goes (not before, so a failed
        // write can still be aborted).
        self.undo.clear();
        self.files.purge(version);
        Ok(())
    }

    fn abort(&mut self) {
        while let Some((k, old)) = self.undo.pop() {
            match old {
                Some(v) => self.map.insert(k, Slot::committed(v)),
                None => self.map.remove(&k),
            };
        }
        self.bytes = self.count_bytes();
    }

    fn memory_used_bytes(&self) -> usize {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A store in `dir` at version 1 holding a=1 and b=2.
    fn a1_b2_at_version_1(dir: &std::path::Path) -> MemoryStateStore {
        let mut s = MemoryStateStore::open(dir, 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.put(b"b".to_vec(), b"2".to_vec());
        s.commit(1).unwrap();
        s
    }

    #[test]
    fn versions_restore_and_abort_undoes() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = a1_b2_at_version_1(dir.path());
        s.remove(b"a");
        s.put(b"c".to_vec(), b"3".to_vec());
        s.commit(2).unwrap();
        s.put(b"d".to_vec(), b"4".to_vec());
        s.abort();
        assert_eq!(s.len(), 2);
        let v1 = MemoryStateStore::open(dir.path(), 1, 100, false).unwrap();
        assert_eq!(v1.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(v1.len(), 2);
        let v2 = MemoryStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(v2.get(b"a"), None);
        assert_eq!(v2.get(b"c").as_deref(), Some(&b"3"[..]));
    }

    /// Sets `key` to `value` through `update`.
    fn set(s: &mut MemoryStateStore, key: &[u8], value: &[u8]) {
        s.update(key, &mut |_| Ok(value.to_vec())).unwrap();
    }

    #[test]
    fn a_failed_commit_aborts_to_the_committed_state_and_update_commits_like_put() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = a1_b2_at_version_1(dir.path());
        let committed = s.memory_used_bytes();
        // Another run wrote version 2 first: this run's create-once write
        // of it is refused, after the commit marked its keys unchanged.
        fs::write(dir.path().join("2.delta"), b"someone else's").unwrap();
        set(&mut s, b"a", b"10");
        set(&mut s, b"c", b"3");
        s.remove(b"b");
        assert!(s.commit(2).is_err());
        // A put after the failure, then the abort: the committed state.
        set(&mut s, b"a", b"11");
        s.abort();
        assert_eq!(s.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(s.get(b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(s.get(b"c"), None);
        assert_eq!(s.len(), 2);
        assert_eq!(s.memory_used_bytes(), committed);
        // update then commits like put: a changed twice, d new.
        fs::remove_file(dir.path().join("2.delta")).unwrap();
        set(&mut s, b"a", b"20");
        set(&mut s, b"a", b"21");
        set(&mut s, b"d", b"4");
        s.commit(2).unwrap();
        let v2 = MemoryStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(v2.get(b"a").as_deref(), Some(&b"21"[..]));
        assert_eq!(v2.get(b"d").as_deref(), Some(&b"4"[..]));
        assert_eq!(v2.len(), 3);
        assert_eq!(v2.memory_used_bytes(), s.memory_used_bytes());
    }

    #[test]
    fn overwrites_restore_the_first_value_on_abort_and_persist_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = MemoryStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.commit(1).unwrap();
        let committed = s.memory_used_bytes();
        s.put(b"a".to_vec(), b"22".to_vec());
        s.put(b"a".to_vec(), b"333".to_vec());
        s.put(b"n".to_vec(), b"x".to_vec());
        s.put(b"n".to_vec(), b"y".to_vec());
        s.abort();
        assert_eq!(s.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(s.get(b"n"), None);
        assert_eq!(s.memory_used_bytes(), committed);
        s.put(b"a".to_vec(), b"22".to_vec());
        s.put(b"a".to_vec(), b"333".to_vec());
        s.commit(2).unwrap();
        let v2 = MemoryStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(v2.get(b"a").as_deref(), Some(&b"333"[..]));
        assert_eq!(v2.memory_used_bytes(), s.memory_used_bytes());
    }

    #[test]
    fn a_key_removed_and_put_again_in_one_batch_restores_and_aborts_right() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = a1_b2_at_version_1(dir.path());
        // Removed then put again; new then removed; changed twice.
        let batch = |s: &mut MemoryStateStore| {
            s.remove(b"a");
            s.put(b"a".to_vec(), b"11".to_vec());
            s.put(b"n".to_vec(), b"x".to_vec());
            s.remove(b"n");
            s.put(b"b".to_vec(), b"22".to_vec());
            s.remove(b"b");
        };
        batch(&mut s);
        s.abort();
        assert_eq!(s.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(s.get(b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(s.get(b"n"), None);
        batch(&mut s);
        s.commit(2).unwrap();
        let v2 = MemoryStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(v2.get(b"a").as_deref(), Some(&b"11"[..]));
        assert_eq!(v2.get(b"b"), None);
        assert_eq!(v2.get(b"n"), None);
        assert_eq!(v2.len(), 1);
        assert_eq!(v2.memory_used_bytes(), s.memory_used_bytes());
        // A later batch's abort keeps version 2's values.
        s.put(b"a".to_vec(), b"111".to_vec());
        s.abort();
        assert_eq!(s.get(b"a").as_deref(), Some(&b"11"[..]));
    }

    #[test]
    fn snapshots_and_retention() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = MemoryStateStore::open(dir.path(), 0, 5, false).unwrap();
        for v in 1..=25u64 {
            s.put(v.to_le_bytes().to_vec(), vec![1]);
            s.commit(v).unwrap();
        }
        let back = MemoryStateStore::open(dir.path(), 25, 5, false).unwrap();
        assert_eq!(back.len(), 25);
        assert!(!dir.path().join("1.delta").exists());
        assert!(dir.path().join("20.snapshot").exists());
        // Everything below the snapshot that keeps 5 versions is gone ...
        for gone in ["10.snapshot", "19.delta"] {
            assert!(!dir.path().join(gone).exists(), "{gone} was kept");
        }
        // ... and every version still retained restores.
        for v in 20..=25u64 {
            let back = MemoryStateStore::open(dir.path(), v, 5, false).unwrap();
            assert_eq!(back.len() as u64, v);
        }
        // Between two snapshot steps nothing is listed or removed: after
        // 29 versions the files of 20..=29 are all there.
        for v in 26..=29u64 {
            s.put(v.to_le_bytes().to_vec(), vec![1]);
            s.commit(v).unwrap();
        }
        assert!(dir.path().join("21.delta").exists());
        let back = MemoryStateStore::open(dir.path(), 24, 5, false).unwrap();
        assert_eq!(back.len(), 24);
    }

    #[test]
    fn damaged_state_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = MemoryStateStore::open(dir.path(), 0, 5, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.commit(1).unwrap();
        let p = dir.path().join("1.delta");
        let mut data = fs::read(&p).unwrap();
        let n = data.len();
        data[n - 10] ^= 0xff;
        fs::write(&p, data).unwrap();
        let err = MemoryStateStore::open(dir.path(), 1, 5, false)
            .err()
            .unwrap();
        assert!(err.to_string().contains("checksum"), "{err}");
        fs::remove_file(&p).unwrap();
        let err = MemoryStateStore::open(dir.path(), 1, 5, false)
            .err()
            .unwrap();
        assert!(err.to_string().contains("missing"), "{err}");
    }
}
