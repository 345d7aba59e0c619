//! The in-memory state store: a hash map, with each committed version's
//! changes written as `<version>.delta` and a full `<version>.snapshot`
//! every `SNAPSHOT_INTERVAL` versions (`files`), on the storage layer (a local
//! directory or an object store prefix: see `files`). Files carry a
//! checksum; a damaged file is an error naming it, never silently empty
//! state.

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::ops::Range;
use std::path::Path;

use crate::error::Result;
use crate::storage::Storage;

/// A full snapshot is written every this many versions (the state file
/// format's, shared by both stores).
pub use super::files::SNAPSHOT_INTERVAL;
use super::files::{encode, Encoder, VersionFiles};
use super::{StateIter, StateStore, Updater};

/// What [`StateStore::memory_used_bytes`] counts per entry besides its key
/// and value: the entry's header, the allocator's and the table's share.
const ENTRY_OVERHEAD: usize = 40;

/// In-memory state for one operator partition.
///
/// Each entry is one allocation (its key and value side by side) in a hash
/// table of pointers: ~105 bytes per entry of a 21-byte key and a 27-byte
/// value, against ~235 with a key and a value allocated apart in a map of
/// both. A changed value of the same length is written in place.
pub struct MemoryStateStore {
    files: VersionFiles,
    table: hashbrown::HashTable<Entry>,
    hasher: foldhash::fast::RandomState,
    /// The batch's changes, for commit and abort.
    undo: UndoLog,
    bytes: usize,
    /// The size of the last delta file written: the next one's first guess.
    delta_hint: usize,
    /// The buffer an [`Updater`] writes a value into (reused).
    scratch: Vec<u8>,
}

/// Bytes before an entry's key: a flags byte, the key's length (u32 LE).
const HEADER: usize = 5;

/// One key and its value in one allocation, after a header: whether this
/// batch changed the key since the last commit (then the undo log has the
/// key, with its previous value when it had one) and the key's length.
struct Entry(Box<[u8]>);

impl Entry {
    fn new(key: &[u8], value: &[u8], changed: bool) -> Entry {
        let mut e = Vec::with_capacity(HEADER + key.len() + value.len());
        e.push(changed as u8);
        // The state file format's own limit on a key.
        let len = u32::try_from(key.len()).expect("a state key is shorter than 4 GiB");
        e.extend_from_slice(&len.to_le_bytes());
        e.extend_from_slice(key);
        e.extend_from_slice(value);
        Entry(e.into_boxed_slice())
    }

    fn key_len(&self) -> usize {
        let mut n = [0u8; 4];
        n.copy_from_slice(&self.0[1..HEADER]);
        u32::from_le_bytes(n) as usize
    }

    fn key(&self) -> &[u8] {
        &self.0[HEADER..HEADER + self.key_len()]
    }

    fn value(&self) -> &[u8] {
        &self.0[HEADER + self.key_len()..]
    }

    /// Whether this batch changed the key.
    fn changed(&self) -> bool {
        self.0[0] & 1 == 1
    }

    fn set_changed(&mut self, changed: bool) {
        self.0[0] = changed as u8;
    }

    /// Replaces the value: in place when it has the same length.
    fn set_value(&mut self, value: &[u8]) {
        let at = HEADER + self.key_len();
        if self.0.len() - at == value.len() {
            self.0[at..].copy_from_slice(value);
        } else {
            let e = Entry::new(self.key(), value, self.changed());
            *self = e;
        }
    }
}

/// Sets `key` to `value` in `table` as committed (unchanged by this batch),
/// with no undo log: restoring a version, aborting a batch.
fn set(
    table: &mut hashbrown::HashTable<Entry>,
    hasher: &foldhash::fast::RandomState,
    key: &[u8],
    value: &[u8],
) {
    let h = hasher.hash_one(key);
    match table.find_mut(h, |e| e.key() == key) {
        Some(e) => {
            e.set_value(value);
            e.set_changed(false);
        }
        None => {
            table.insert_unique(h, Entry::new(key, value, false), |e| {
                hasher.hash_one(e.key())
            });
        }
    }
}

/// The batch's changes in order: each key and its value before its first
/// change (none: the key was new), as ranges of one byte buffer (a key
/// removed and put again is logged once more per such cycle; abort replays
/// the log backwards, so the first entry wins). Its room is kept from batch
/// to batch.
#[derive(Default)]
struct UndoLog {
    entries: Vec<(Range<usize>, Option<Range<usize>>)>,
    bytes: Vec<u8>,
}

impl UndoLog {
    /// Logs `key` and its value before this batch's first change (`None`: new).
    fn record(&mut self, key: &[u8], old: Option<&[u8]>) {
        let mut keep = |b: &[u8]| {
            let at = self.bytes.len();
            self.bytes.extend_from_slice(b);
            at..self.bytes.len()
        };
        let k = keep(key);
        let v = old.map(keep);
        self.entries.push((k, v));
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes.clear();
    }
}

/// Sets held entry `e`'s value; on its first change in a batch, logs its
/// key and previous value in `undo` first; `bytes`: the memory count.
fn change(e: &mut Entry, value: &[u8], undo: &mut UndoLog, bytes: &mut usize) {
    *bytes = (*bytes + value.len()).saturating_sub(e.value().len());
    if !e.changed() {
        undo.record(e.key(), Some(e.value()));
        e.set_changed(true);
    }
    e.set_value(value);
}

/// Removes `key` from `table` with no undo log, returning its entry.
fn take(
    table: &mut hashbrown::HashTable<Entry>,
    hasher: &foldhash::fast::RandomState,
    key: &[u8],
) -> Option<Entry> {
    table
        .find_entry(hasher.hash_one(key), |e| e.key() == key)
        .ok()
        .map(|o| o.remove().0)
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
        let files = VersionFiles::new(storage, version, retain);
        let hasher = foldhash::fast::RandomState::default();
        let mut table = hashbrown::HashTable::new();
        files.restore(version, |k, v| {
            match v {
                Some(v) => set(&mut table, &hasher, &k, &v),
                None => {
                    take(&mut table, &hasher, &k);
                }
            };
            Ok(())
        })?;
        let mut store = MemoryStateStore {
            files,
            table,
            hasher,
            undo: UndoLog::default(),
            bytes: 0,
            delta_hint: 0,
            scratch: Vec::new(),
        };
        store.bytes = store.count_bytes();
        Ok(store)
    }

    /// The memory the entries take (keys, values and a fixed overhead each).
    fn count_bytes(&self) -> usize {
        self.table
            .iter()
            .map(|e| e.0.len() - HEADER + ENTRY_OVERHEAD)
            .sum()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Sets `key` (hash `h`) to `value`: changed in place when held, else added.
    fn write(&mut self, h: u64, key: &[u8], value: &[u8]) {
        match self.table.find_mut(h, |e| e.key() == key) {
            Some(e) => change(e, value, &mut self.undo, &mut self.bytes),
            None => self.add(h, key, value),
        }
    }

    /// Adds `key` (hash `h`), not held, with `value`.
    fn add(&mut self, h: u64, key: &[u8], value: &[u8]) {
        self.bytes += key.len() + value.len() + ENTRY_OVERHEAD;
        self.undo.record(key, None);
        let hasher = &self.hasher;
        self.table
            .insert_unique(h, Entry::new(key, value, true), |e| {
                hasher.hash_one(e.key())
            });
    }
}

impl StateStore for MemoryStateStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.table
            .find(self.hash(key), |e| e.key() == key)
            .map(|e| Cow::Borrowed(e.value()))
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.write(self.hash(&key), &key, &value);
    }

    fn update(&mut self, key: &[u8], f: Updater<'_>) -> Result<()> {
        // One lookup reads the value and changes it in place (or finds
        // where a new key goes); the new value is written into the store's
        // buffer, then copied into the entry.
        let h = self.hash(key);
        let mut value = std::mem::take(&mut self.scratch);
        value.clear();
        let done = match self.table.find_mut(h, |e| e.key() == key) {
            Some(e) => f(Some(e.value()), &mut value)
                .map(|()| change(e, &value, &mut self.undo, &mut self.bytes)),
            None => f(None, &mut value).map(|()| self.add(h, key, &value)),
        };
        self.scratch = value;
        done
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(old) = take(&mut self.table, &self.hasher, key) {
            self.bytes = self
                .bytes
                .saturating_sub(old.0.len() - HEADER + ENTRY_OVERHEAD);
            if !old.changed() {
                self.undo.record(key, Some(old.value()));
            }
        }
    }

    fn iter(&self) -> StateIter<'_> {
        Box::new(
            self.table
                .iter()
                .map(|e| (Cow::Borrowed(e.key()), Cow::Borrowed(e.value()))),
        )
    }

    fn len(&self) -> usize {
        self.table.len()
    }

    fn commit(&mut self, version: u64) -> Result<()> {
        // Each changed key with its value now (none when removed); a key
        // logged twice (removed and put again) is written twice, the same.
        // One lookup per key also marks it unchanged: should the write
        // fail, abort still restores every key in the undo log, whatever
        // its mark.
        let mut delta = Encoder::new(self.delta_hint);
        for (k, _) in &self.undo.entries {
            let key = &self.undo.bytes[k.clone()];
            let e = self
                .table
                .find_mut(self.hasher.hash_one(key), |e| e.key() == key);
            delta.entry(
                key,
                e.map(|e| {
                    e.set_changed(false);
                    &*e
                })
                .map(Entry::value),
            );
        }
        let delta = delta.finish();
        self.delta_hint = delta.len();
        self.files.write_delta(version, &delta)?;
        if version % SNAPSHOT_INTERVAL == 0 {
            let snap = encode(
                self.table.iter().map(|e| (e.key(), Some(e.value()))),
                self.bytes,
            );
            self.files.write_snapshot(version, &snap)?;
        }
        // The batch is durable: its undo log goes (not before, so a failed
        // write can still be aborted), its room kept for the next batch's.
        self.undo.clear();
        self.files.purge(version);
        Ok(())
    }

    fn abort(&mut self) {
        let bytes = &self.undo.bytes;
        for (k, old) in self.undo.entries.drain(..).rev() {
            let key = &bytes[k];
            match old {
                Some(v) => set(&mut self.table, &self.hasher, key, &bytes[v]),
                None => {
                    take(&mut self.table, &self.hasher, key);
                }
            }
        }
        self.undo.bytes.clear();
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
        s.update(key, &mut |_, out| {
            out.extend_from_slice(value);
            Ok(())
        })
        .unwrap();
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
        // Changes after the failure (a rewritten at the same length in
        // place, c, new in the failed batch, removed), then the abort: the
        // committed state.
        set(&mut s, b"a", b"11");
        set(&mut s, b"a", b"12");
        s.remove(b"c");
        assert_eq!(s.len(), 1);
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
