//! The RocksDB state store (Spark's `RocksDBStateStoreProvider`): keyed state
//! lives in a RocksDB instance on disk instead of the heap, so it can grow
//! past memory. Durability is the same as the in-memory store's: each
//! committed version's changes go to `<version>.delta` (and a full
//! `<version>.snapshot` every few versions) under the checkpoint, in the same
//! format, so a checkpoint can be reopened by either provider. The RocksDB
//! instance is a cache of the latest version: a marker file names the
//! version it holds, and it is rebuilt from the deltas whenever the marker
//! is missing (a batch was in flight) or names another version.
//!
//! With a local checkpoint the instance (`rocksdb/` and its marker
//! `rocksdb.version`) sits beside the deltas. With a checkpoint on object
//! storage the deltas and snapshots are objects there (one PUT per version,
//! like Spark's RocksDB changelog checkpointing) and the instance is a local
//! working copy in [`local_dir_for`]'s directory; its marker also names the
//! checksum of the delta it holds, checked against the checkpoint when the
//! store opens, so a copy the checkpoint has moved past (another machine
//! ran the query meanwhile) is never trusted. A new machine, or a deleted
//! working copy, restores from the checkpoint alone.
//!
//! A failed RocksDB read is never taken for an absent key: the store
//! remembers the first failure of the batch, [`StateStore::check`] reports it
//! (operators call it before their output leaves the batch) and
//! [`StateStore::commit`] refuses to commit a version computed from it.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use rocksdb::{IteratorMode, Options, WriteBatch, DB};

use super::files::VersionFiles;
use super::files::{encode, SNAPSHOT_INTERVAL};
use super::{StateIter, StateStore, StateStoreProvider};
use crate::error::{Result, WeirError};
use crate::storage::durable::write_atomic;
use crate::storage::Storage;

/// RocksDB's memtable size (its default is 64 MB). Aggregations rewrite the
/// keys they touch every batch; in a large memtable the old versions pile up
/// and every read and eviction scan walks past them (page_views on RocksDB:
/// 3.9 M rows/s at 4 MB, 5.6 M at 1 MB, 5.9 M at 256 KB, which flushes
/// large state into many small files).
const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Opens [`RocksDbStateStore`]s.
#[derive(Debug, Default, Clone, Copy)]
pub struct RocksDbStateProvider;

impl StateStoreProvider for RocksDbStateProvider {
    fn name(&self) -> &'static str {
        "rocksdb"
    }
    fn open(
        &self,
        dir: &Storage,
        version: u64,
        retain: u64,
        sync: bool,
    ) -> Result<Box<dyn StateStore>> {
        Ok(Box::new(RocksDbStateStore::open_on(
            dir, version, retain, sync,
        )?))
    }
}

/// The local working directory of the RocksDB instance for a state
/// directory on object storage: `weir-rocksdb/<hash of its location>` below
/// the first directory in `SPARK_LOCAL_DIRS` (Spark's scratch space,
/// `spark.local.dir`), or below the system temp dir. The same location
/// (bucket, prefix and endpoint) gets the same directory, so a restart on
/// the same machine reuses its working copy.
pub fn local_dir_for(storage: &Storage) -> PathBuf {
    let base = std::env::var("SPARK_LOCAL_DIRS")
        .ok()
        .and_then(|dirs| {
            dirs.split(',')
                .map(str::trim)
                .find(|d| !d.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(std::env::temp_dir);
    let h = super::fnv64(storage.describe().as_bytes());
    base.join("weir-rocksdb").join(format!("{h:016x}"))
}

/// The checksum a delta file ends with (see `files::encode`), in hex: what
/// a working copy's marker names on object storage.
fn delta_sum(delta: &[u8]) -> String {
    delta[delta.len().saturating_sub(8)..]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One operator partition's state in RocksDB.
///
/// A batch's writes stay in `pending` (read through it) until `commit`
/// writes them to RocksDB as one `WriteBatch`: an abort drops them, and the
/// instance only ever holds committed versions.
pub struct RocksDbStateStore {
    /// The deltas and snapshots (the checkpoint's state directory).
    files: VersionFiles,
    /// The local directory of the instance (`rocksdb/`) and its marker.
    dir: PathBuf,
    /// The checkpoint is on object storage: `dir` is a working copy whose
    /// marker names the delta it holds.
    remote: bool,
    db: DB,
    /// This batch's writes: the new value, or `None` for a removal.
    pending: HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Keys read this batch (not written yet) and whether they exist.
    read: RefCell<HashMap<Vec<u8>, bool>>,
    /// The first RocksDB read error of this batch (reads cannot return
    /// one: it fails the batch at `check` and `commit`).
    failed: RefCell<Option<String>>,
    /// Keys committed in RocksDB (not counting `pending`).
    committed_len: usize,
    /// `committed_len` with this batch's writes applied.
    len: usize,
    sync: bool,
}

/// True when RocksDB's error `text` says it could not take the instance's
/// `LOCK` file in `db_dir` because it is held: by another process ("IO
/// error: While lock file: <dir>/LOCK: Resource temporarily unavailable")
/// or by this one ("IO error: lock hold by current process, ...: <dir>/LOCK:
/// ..."). Any other failure to open (a damaged instance: "Corruption: block
/// checksum mismatch", ...) is not: that instance is rebuilt instead.
fn lock_held(db_dir: &Path, text: &str) -> bool {
    let lock_file = format!(": {}: ", db_dir.join("LOCK").display());
    text.starts_with("IO error: ")
        && text.contains(&lock_file)
        && (text.contains("While lock file: ") || text.contains("lock hold by current process"))
}

/// The error for an instance that another store has open (another run of
/// the query on this machine, most likely), when `e` says so.
fn in_use(db_dir: &Path, e: &rocksdb::Error) -> Option<WeirError> {
    let text = e.to_string();
    lock_held(db_dir, &text).then(|| {
        WeirError::checkpoint(
            db_dir,
            format!("RocksDB: {text}: this state partition's instance is open in another store, most likely another run of the query on this machine; stop it before starting this one"),
        )
    })
}

fn db_err(dir: &Path, e: rocksdb::Error) -> WeirError {
    WeirError::checkpoint(dir, format!("RocksDB: {e}"))
}

impl RocksDbStateStore {
    /// Opens the store in the local directory `dir` at committed
    /// `version`. The cached instance is used when its marker names
    /// `version`; one that cannot be opened or read (a damaged disk) is
    /// discarded and rebuilt from the checkpoint.
    pub fn open(dir: &Path, version: u64, retain: u64, sync: bool) -> Result<RocksDbStateStore> {
        RocksDbStateStore::open_on(&Storage::local(dir, sync), version, retain, sync)
    }

    /// Opens the store whose deltas and snapshots are in `storage` (a local
    /// directory, which also holds the instance, or an object store prefix,
    /// whose instance is a working copy in [`local_dir_for`]) at committed
    /// `version`.
    pub fn open_on(
        storage: &Storage,
        version: u64,
        retain: u64,
        sync: bool,
    ) -> Result<RocksDbStateStore> {
        let (dir, remote) = match storage.local_root() {
            Some(d) => (d.to_path_buf(), false),
            None => (local_dir_for(storage), true),
        };
        let files = VersionFiles::new(storage.clone(), version, retain);
        fs::create_dir_all(&dir).map_err(|e| WeirError::io(&dir, e))?;
        let db_dir = dir.join("rocksdb");
        // The marker names the version the instance holds (and on object
        // storage the checksum of its delta); without the instance (e.g. a
        // checkpoint copied without it) it names nothing.
        let marker = fs::read_to_string(Self::marker(&dir)).unwrap_or_default();
        let mut words = marker.split_whitespace();
        let cached = words
            .next()
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|_| db_dir.exists());
        let sum = words.next().map(str::to_string);
        let current = cached == Some(version)
            && (!remote || version == 0 || {
                // The working copy holds this version only if it holds the
                // delta the checkpoint has for it.
                let delta = files.delta_bytes(version)?;
                delta.is_some() && delta.as_deref().map(delta_sum) == sum
            });
        if current {
            match Self::open_instance(files.clone(), &dir, remote, version, sync, true) {
                Ok(s) => return Ok(s),
                Err(e) => tracing::warn!(
                    dir = %db_dir.display(),
                    "the cached RocksDB instance cannot be read ({e}); rebuilding it from the checkpoint"
                ),
            }
        }
        Self::open_instance(files, &dir, remote, version, sync, false)
    }

    /// Opens the instance (`cached`: as it is, at `version`; otherwise a new
    /// one rebuilt from the checkpoint) and counts its keys.
    fn open_instance(
        files: VersionFiles,
        dir: &Path,
        remote: bool,
        version: u64,
        sync: bool,
        cached: bool,
    ) -> Result<RocksDbStateStore> {
        let db_dir = dir.join("rocksdb");
        if !cached && db_dir.exists() {
            // An instance another store has open is never replaced.
            if let Err(e) = DB::open(&Options::default(), &db_dir) {
                if let Some(err) = in_use(&db_dir, &e) {
                    return Err(err);
                }
            }
        }
        if !cached {
            // The marker names the instance about to be replaced: it goes
            // first (durably), or a later open could trust the new instance
            // as the old version.
            Self::remove_marker(dir, sync)?;
            if db_dir.exists() {
                fs::remove_dir_all(&db_dir).map_err(|e| WeirError::io(&db_dir, e))?;
            }
        }
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(WRITE_BUFFER_BYTES);
        let db = DB::open(&opts, &db_dir)
            .map_err(|e| in_use(&db_dir, &e).unwrap_or_else(|| db_err(&db_dir, e)))?;
        let mut s = RocksDbStateStore {
            files,
            dir: dir.to_path_buf(),
            remote,
            db,
            pending: HashMap::new(),
            read: RefCell::new(HashMap::new()),
            failed: RefCell::new(None),
            committed_len: 0,
            len: 0,
            sync,
        };
        if !cached {
            let sum = if version > 0 {
                s.rebuild(version)?;
                match s.files.delta_bytes(version)? {
                    Some(d) if remote => Some(delta_sum(&d)),
                    _ => None,
                }
            } else {
                None
            };
            // The rebuilt instance holds `version` (synced before its marker).
            if sync {
                s.db.flush_wal(true).map_err(|e| db_err(&db_dir, e))?;
            }
            s.write_marker(version, sum.as_deref())?;
        }
        let mut n = 0;
        for kv in s.db.iterator(IteratorMode::Start) {
            kv.map_err(|e| s.read_err(e))?;
            n += 1;
        }
        s.committed_len = n;
        s.len = n;
        Ok(s)
    }

    fn marker(dir: &Path) -> PathBuf {
        dir.join("rocksdb.version")
    }

    /// Removes the marker in `dir` (if there is one), durably when `sync`
    /// (the directory is fsynced), before the instance changes: until a
    /// new marker is written, no open trusts the instance.
    fn remove_marker(dir: &Path, sync: bool) -> Result<()> {
        let marker = Self::marker(dir);
        match fs::remove_file(&marker) {
            Ok(()) if sync => crate::storage::durable::sync_dir(dir),
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(WeirError::io(&marker, e)),
        }
    }

    /// Records that the instance holds `version` (on object storage, with
    /// the checksum of its delta).
    fn write_marker(&self, version: u64, sum: Option<&str>) -> Result<()> {
        let text = match sum {
            Some(sum) if self.remote => format!("{version} {sum}"),
            _ => version.to_string(),
        };
        write_atomic(&Self::marker(&self.dir), text.as_bytes(), self.sync)
    }

    /// A read error, as the store reports it.
    fn read_err(&self, e: impl std::fmt::Display) -> WeirError {
        WeirError::checkpoint(
            self.dir.join("rocksdb"),
            format!("RocksDB read failed ({e}); the batch is not committed and runs again on restart. Check the disk: a restart rebuilds a damaged instance from the checkpoint's state files"),
        )
    }

    /// Remembers the batch's first read error.
    fn record(&self, e: rocksdb::Error) {
        let mut f = self.failed.borrow_mut();
        if f.is_none() {
            tracing::error!(dir = %self.dir.display(), "RocksDB state read failed: {e}");
            *f = Some(e.to_string());
        }
    }

    /// RocksDB's value for `key`, a read error recorded (and read as absent
    /// only until the batch checks or commits, which then fail).
    fn db_get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self.db.get(key) {
            Ok(v) => v,
            Err(e) => {
                self.record(e);
                None
            }
        }
    }

    /// Loads version `version` from the snapshot and deltas under the
    /// checkpoint, in write batches of bounded size.
    fn rebuild(&self, version: u64) -> Result<()> {
        const BATCH: usize = 64 * 1024;
        let (db, dir) = (&self.db, &self.dir);
        let mut wb = WriteBatch::default();
        self.files.restore(version, |k, v| {
            match v {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            }
            if wb.len() >= BATCH {
                db.write(std::mem::take(&mut wb))
                    .map_err(|e| db_err(dir, e))?;
            }
            Ok(())
        })?;
        self.db.write(wb).map_err(|e| db_err(&self.dir, e))
    }

    /// Whether `key` exists, this batch's writes included. (A key read
    /// this batch is known without asking RocksDB again: operators read a
    /// key before they write it.)
    fn exists(&self, key: &[u8]) -> bool {
        if let Some(v) = self.pending.get(key) {
            return v.is_some();
        }
        if let Some(known) = self.read.borrow().get(key) {
            return *known;
        }
        match self.db.get_pinned(key) {
            Ok(v) => v.is_some(),
            Err(e) => {
                self.record(e);
                false
            }
        }
    }
}

impl StateStore for RocksDbStateStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        match self.pending.get(key) {
            Some(v) => v.as_deref().map(Cow::Borrowed),
            None => {
                let v = self.db_get(key);
                self.read.borrow_mut().insert(key.to_vec(), v.is_some());
                v.map(Cow::Owned)
            }
        }
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        if !self.exists(&key) {
            self.len += 1;
        }
        self.read.get_mut().remove(&key);
        self.pending.insert(key, Some(value));
    }

    fn remove(&mut self, key: &[u8]) {
        if self.exists(key) {
            self.len -= 1;
            self.read.get_mut().remove(key);
            self.pending.insert(key.to_vec(), None);
        }
    }

    fn iter(&self) -> StateIter<'_> {
        let committed = self
            .db
            .iterator(IteratorMode::Start)
            .map_while(move |kv| match kv {
                Ok(kv) => Some(kv),
                Err(e) => {
                    self.record(e);
                    None
                }
            })
            .filter(|(k, _)| !self.pending.contains_key(k.as_ref()))
            .map(|(k, v)| (Cow::Owned(k.into_vec()), Cow::Owned(v.into_vec())));
        let written = self
            .pending
            .iter()
            .filter_map(|(k, v)| Some((Cow::Borrowed(k.as_slice()), Cow::Borrowed(v.as_deref()?))));
        Box::new(committed.chain(written))
    }

    fn len(&self) -> usize {
        self.len
    }

    fn check(&self) -> Result<()> {
        match &*self.failed.borrow() {
            Some(e) => Err(self.read_err(e)),
            None => Ok(()),
        }
    }

    fn commit(&mut self, version: u64) -> Result<()> {
        // Nothing computed from a failed read becomes a version.
        self.check()?;
        let delta = encode(
            self.pending
                .iter()
                .map(|(k, v)| (k.as_slice(), v.as_deref())),
            0,
        );
        self.files.write_delta(version, &delta)?;
        // The instance is not a committed version while the batch is applied
        // (the removal is made durable before the instance changes).
        Self::remove_marker(&self.dir, self.sync)?;
        self.read.get_mut().clear();
        let mut wb = WriteBatch::default();
        for (k, v) in self.pending.drain() {
            match v {
                Some(v) => wb.put(k, v),
                None => wb.delete(k),
            }
        }
        self.db.write(wb).map_err(|e| db_err(&self.dir, e))?;
        self.committed_len = self.len;
        if version % SNAPSHOT_INTERVAL == 0 {
            let all = self
                .db
                .iterator(IteratorMode::Start)
                .map(|kv| kv.map(|(k, v)| (k.into_vec(), v.into_vec())))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| self.read_err(e))?;
            let snap = encode(
                all.iter().map(|(k, v)| (k.as_slice(), Some(v.as_slice()))),
                0,
            );
            self.files.write_snapshot(version, &snap)?;
        }
        if self.sync {
            // The marker below must not name a version the instance could
            // lose in a crash: sync RocksDB's log of this write first.
            self.db.flush_wal(true).map_err(|e| db_err(&self.dir, e))?;
        }
        self.write_marker(version, Some(&delta_sum(&delta)))?;
        self.files.purge(version);
        Ok(())
    }

    fn abort(&mut self) {
        self.pending.clear();
        self.read.get_mut().clear();
        *self.failed.get_mut() = None;
        self.len = self.committed_len;
    }

    fn memory_used_bytes(&self) -> usize {
        let pending: usize = self
            .pending
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, |v| v.len()))
            .sum();
        pending
            + [
                "rocksdb.cur-size-all-mem-tables",
                "rocksdb.estimate-table-readers-mem",
                "rocksdb.block-cache-usage",
            ]
            .iter()
            .filter_map(|p| self.db.property_int_value(*p).ok().flatten())
            .sum::<u64>() as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_restore_abort_and_share_the_memory_format() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.put(b"b".to_vec(), b"2".to_vec());
        s.commit(1).unwrap();
        s.remove(b"a");
        s.put(b"c".to_vec(), b"3".to_vec());
        s.commit(2).unwrap();
        s.put(b"d".to_vec(), b"4".to_vec());
        s.abort();
        assert_eq!(s.len(), 2);
        drop(s);
        // The cached instance is reused at its version...
        let v2 = RocksDbStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(v2.get(b"c").as_deref(), Some(&b"3"[..]));
        assert_eq!(v2.len(), 2);
        drop(v2);
        // ...and rebuilt from the deltas for an older one.
        let v1 = RocksDbStateStore::open(dir.path(), 1, 100, false).unwrap();
        assert_eq!(v1.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(v1.get(b"c"), None);
        drop(v1);
        let m = super::super::MemoryStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(m.get(b"c").as_deref(), Some(&b"3"[..]));
    }

    #[test]
    fn a_batch_in_flight_at_a_crash_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.commit(1).unwrap();
        s.put(b"half".to_vec(), b"x".to_vec()); // then the process dies
        drop(s);
        let s = RocksDbStateStore::open(dir.path(), 1, 100, false).unwrap();
        assert_eq!(s.get(b"half"), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn reads_and_iteration_see_the_batch_until_it_aborts() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, true).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.put(b"b".to_vec(), b"2".to_vec());
        s.commit(1).unwrap();
        s.put(b"b".to_vec(), b"20".to_vec());
        s.remove(b"a");
        s.remove(b"never");
        s.put(b"c".to_vec(), b"3".to_vec());
        assert_eq!(s.get(b"b").as_deref(), Some(&b"20"[..]));
        assert_eq!(s.get(b"a"), None);
        assert_eq!(s.len(), 2);
        let mut all: Vec<(Vec<u8>, Vec<u8>)> = s
            .iter()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        all.sort();
        assert_eq!(
            all,
            [
                (b"b".to_vec(), b"20".to_vec()),
                (b"c".to_vec(), b"3".to_vec())
            ]
        );
        s.abort();
        assert_eq!(s.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(s.get(b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(s.len(), 2);
        // Read, then written: the count knows which keys were there.
        assert_eq!(s.get(b"x"), None);
        s.put(b"x".to_vec(), b"9".to_vec());
        s.put(b"b".to_vec(), b"21".to_vec());
        assert_eq!(s.len(), 3);
        s.remove(b"x");
        assert_eq!(s.get(b"x"), None);
        s.remove(b"x");
        assert_eq!(s.len(), 2);
        s.abort();
        assert_eq!(s.len(), 2);
        // A committed batch survives a reopen at its version (the cached
        // instance, synced before its marker).
        s.remove(b"a");
        s.commit(2).unwrap();
        drop(s);
        let s = RocksDbStateStore::open(dir.path(), 2, 100, true).unwrap();
        assert_eq!(s.get(b"a"), None);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn a_checkpoint_copied_without_the_instance_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.commit(1).unwrap();
        drop(s);
        // The marker stays, the instance (a cache) is gone.
        fs::remove_dir_all(dir.path().join("rocksdb")).unwrap();
        let s = RocksDbStateStore::open(dir.path(), 1, 100, false).unwrap();
        assert_eq!(s.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(s.len(), 1);
    }

    /// Overwrites bytes of every table file under `db_dir` in place (the
    /// instance keeps them open), as a failing disk would.
    fn damage_tables(db_dir: &Path) {
        use std::io::{Seek, SeekFrom, Write};
        let mut n = 0;
        for e in fs::read_dir(db_dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "sst") {
                let mut f = fs::OpenOptions::new().write(true).open(e.path()).unwrap();
                f.seek(SeekFrom::Start(4)).unwrap();
                f.write_all(&[0xA5; 16]).unwrap();
                f.sync_all().unwrap();
                n += 1;
            }
        }
        assert!(n > 0, "no table file to damage");
    }

    #[test]
    fn a_failed_read_fails_the_batch_instead_of_reading_as_absent() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"count".to_vec(), b"41".to_vec());
        s.commit(1).unwrap();
        // The committed value moves from the memtable to a table file, which
        // the disk then damages (its blocks were never cached).
        s.db.flush().unwrap();
        damage_tables(&dir.path().join("rocksdb"));
        assert!(s.check().is_ok());
        // The read fails: the operator may see "absent", but the batch cannot
        // get past `check` or `commit`, so "count = 1" never replaces 41.
        let v = s.get(b"count");
        assert_ne!(v.as_deref(), Some(&b"41"[..]), "the damage was not read");
        s.put(b"count".to_vec(), b"1".to_vec());
        let err = s.check().unwrap_err().to_string();
        assert!(err.contains("RocksDB read failed"), "{err}");
        let err = s.commit(2).unwrap_err().to_string();
        assert!(err.contains("RocksDB read failed"), "{err}");
        assert!(!dir.path().join("2.delta").exists());
        // The partitioned store (what operators hold) reports it too, and
        // commits no partition.
        let mut p = super::super::PartitionedStore::new(vec![Box::new(s)]);
        assert!(p.check().is_err());
        assert!(p.commit(2).is_err());
        // An abort forgets the failure (the batch runs again).
        p.abort();
        assert!(p.check().is_ok());
        drop(p);
        // A restart trusts nothing from the damaged instance it cannot read:
        // the instance is rebuilt from the deltas, which restore 41.
        let s = RocksDbStateStore::open(dir.path(), 1, 100, false).unwrap();
        assert_eq!(s.get(b"count").as_deref(), Some(&b"41"[..]));
        assert!(s.check().is_ok());
    }

    /// Overwrites the bytes just before the footer of every table file
    /// under `db_dir` (its meta blocks, which RocksDB reads when it opens
    /// the instance), as a failing disk would.
    fn damage_table_meta_blocks(db_dir: &Path) {
        use std::io::{Seek, SeekFrom, Write};
        // The footer of RocksDB's block-based table format (version 5).
        const FOOTER: u64 = 53;
        let mut n = 0;
        for e in fs::read_dir(db_dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "sst") {
                let mut f = fs::OpenOptions::new().write(true).open(e.path()).unwrap();
                let len = f.metadata().unwrap().len();
                f.seek(SeekFrom::Start(len - FOOTER - 12)).unwrap();
                f.write_all(&[0xA5; 12]).unwrap();
                f.sync_all().unwrap();
                n += 1;
            }
        }
        assert!(n > 0, "no table file to damage");
    }

    #[test]
    fn a_working_copy_rocksdb_cannot_open_is_rebuilt_from_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.put(b"b".to_vec(), b"2".to_vec());
        s.commit(1).unwrap();
        s.remove(b"a");
        s.commit(2).unwrap();
        s.db.flush().unwrap();
        drop(s);
        let db_dir = dir.path().join("rocksdb");
        damage_table_meta_blocks(&db_dir);
        // RocksDB itself refuses the damaged instance with a corruption
        // error ("... block checksum mismatch ...")...
        let err = DB::open(&Options::default(), &db_dir).err().unwrap();
        assert!(err.to_string().contains("Corruption"), "{err}");
        assert!(in_use(&db_dir, &err).is_none(), "{err}");
        // ...which is no other store holding it: the store discards it and
        // rebuilds version 2 from the checkpoint's deltas.
        let s = RocksDbStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(s.get(b"a"), None);
        assert_eq!(s.get(b"b").as_deref(), Some(&b"2"[..]));
        assert_eq!(s.len(), 1);
        assert!(s.check().is_ok());
        drop(s);
        // The rebuilt instance is trusted at its version from then on.
        let s = RocksDbStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(s.get(b"b").as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn only_rocksdbs_lock_errors_read_as_an_instance_in_use() {
        let db_dir = Path::new("/data/weir/state/0/0/rocksdb");
        for held in [
            "IO error: While lock file: /data/weir/state/0/0/rocksdb/LOCK: Resource temporarily unavailable",
            "IO error: lock hold by current process, acquire time 1764608400 acquiring thread 140245: /data/weir/state/0/0/rocksdb/LOCK: No locks available",
        ] {
            assert!(lock_held(db_dir, held), "{held}");
        }
        for other in [
            "Corruption: block checksum mismatch: stored = 1, computed = 2, type = 1  in /data/weir/state/0/0/rocksdb/000009.sst offset 0 size 80",
            "Corruption: truncated block read from /data/weir/state/0/0/rocksdb/000009.sst offset 0, expected 80 bytes, got 3",
            "IO error: while open a file for lock: /data/weir/state/0/0/rocksdb/LOCK: Permission denied",
            "IO error: While lock file: /data/other/rocksdb/LOCK: Resource temporarily unavailable",
        ] {
            assert!(!lock_held(db_dir, other), "{other}");
        }
    }

    #[test]
    fn an_instance_open_in_another_store_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        a.put(b"a".to_vec(), b"1".to_vec());
        a.commit(1).unwrap();
        // At the version the instance holds, and at another one (which
        // would rebuild it): both refused, the instance left as it is.
        for v in [1, 0] {
            let err = RocksDbStateStore::open(dir.path(), v, 100, false)
                .err()
                .unwrap()
                .to_string();
            assert!(err.contains("open in another store"), "{err}");
        }
        a.put(b"b".to_vec(), b"2".to_vec());
        a.commit(2).unwrap();
        assert_eq!(a.get(b"a").as_deref(), Some(&b"1"[..]));
        drop(a);
        let s = RocksDbStateStore::open(dir.path(), 2, 100, false).unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn opening_an_older_version_does_not_leave_a_marker_naming_the_newer() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        s.put(b"a".to_vec(), b"1".to_vec());
        s.commit(1).unwrap();
        drop(s);
        // Version 0 replaces the instance (empty)...
        let v0 = RocksDbStateStore::open(dir.path(), 0, 100, false).unwrap();
        assert_eq!(v0.len(), 0);
        drop(v0);
        // ...so version 1 must not trust it.
        let v1 = RocksDbStateStore::open(dir.path(), 1, 100, false).unwrap();
        assert_eq!(v1.get(b"a").as_deref(), Some(&b"1"[..]));
        assert_eq!(v1.len(), 1);
    }
}
