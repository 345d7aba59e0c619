//! Keyed operator state, versioned per micro-batch.
//!
//! A [`StateStore`] holds one operator partition's key/value pairs. Writes of
//! a batch are applied in place (the operator reads its own writes) and become
//! durable at [`StateStore::commit`]; [`StateStore::abort`] undoes them. A
//! restart opens the last committed version. Version `v` is the state after
//! batch `v - 1`, as in Spark.

mod files;
pub mod memory;
pub mod read;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::logged::OffsetsLogged;
use crate::error::Result;
use crate::storage::Storage;

#[cfg(feature = "rocksdb")]
pub use self::rocksdb::{RocksDbStateProvider, RocksDbStateStore};
pub use memory::MemoryStateStore;

/// Iterates a store's key/value pairs.
pub type StateIter<'a> = Box<dyn Iterator<Item = (Cow<'a, [u8]>, Cow<'a, [u8]>)> + 'a>;

/// What [`StateStore::update`] makes of a key's value (`None`: absent),
/// written into the empty buffer it is given (the memory store reuses one
/// from key to key: no allocation per key).
pub type Updater<'a> = &'a mut dyn FnMut(Option<&[u8]>, &mut Vec<u8>) -> Result<()>;

/// One operator partition's versioned key/value state.
pub trait StateStore: Send {
    /// The value of `key` (borrowed where the store can).
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>>;
    /// Sets `key`.
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>);
    /// Sets `key` to what `f` makes of its value (`None`: absent), finding
    /// the key once where the store can (the memory store finds a key it
    /// holds once, and writes a value of the same length in place). An
    /// error from `f` is returned and leaves the key as it was.
    fn update(&mut self, key: &[u8], f: Updater<'_>) -> Result<()> {
        let mut value = Vec::new();
        f(self.get(key).as_deref(), &mut value)?;
        self.put(key.to_vec(), value);
        Ok(())
    }
    /// Removes `key`.
    fn remove(&mut self, key: &[u8]);
    /// All pairs (including this batch's uncommitted writes).
    fn iter(&self) -> StateIter<'_>;
    /// Number of keys.
    fn len(&self) -> usize;
    /// True when there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first read error of this batch, if any. `get` and `iter` cannot
    /// return one (a store on disk, such as RocksDB, records it and answers
    /// as if the key were absent): an operator calls `check` after its reads
    /// and before its output leaves the batch, so nothing computed from a
    /// failed read reaches a sink, and `commit` fails with the same error.
    /// Cleared by `abort`. Stores whose reads cannot fail keep the default.
    fn check(&self) -> Result<()> {
        Ok(())
    }
    /// Makes this batch's writes durable as version `version` (an error if
    /// a read of this batch failed: see [`StateStore::check`]).
    fn commit(&mut self, version: u64) -> Result<()>;
    /// Undoes this batch's writes.
    fn abort(&mut self);
    /// Approximate bytes held in memory.
    fn memory_used_bytes(&self) -> usize;
}

/// An operator's state split by key hash over `n` partition stores
/// (`spark.sql.shuffle.partitions`), each versioned on its own under
/// `state/<operator>/<partition>/`. The hash is stable across runs and
/// machines, so a restarted query finds every key in its partition.
pub struct PartitionedStore {
    parts: Vec<Box<dyn StateStore>>,
    /// Per partition: committed in its task by [`PartitionedStore::map_parts`]
    /// at this version, and how long that commit took.
    committed_in_task: Vec<Option<(u64, Duration)>>,
}

/// A state version the partitions commit in their own tasks
/// ([`PartitionedStore::map_parts`]), each once its batch is logged.
#[derive(Debug, Clone)]
pub struct InTaskCommit {
    /// The version (batch N commits version N+1).
    pub version: u64,
    /// The batch's `offsets/N`: a partition commits once it is durable.
    pub logged: Arc<OffsetsLogged>,
}

#[cfg(test)]
impl InTaskCommit {
    /// Version `version`, its batch (`version - 1`) already logged.
    pub fn after_logged(version: u64) -> InTaskCommit {
        InTaskCommit {
            version,
            logged: OffsetsLogged::already(version as i64 - 1),
        }
    }
}

/// 64-bit FNV-1a of `bytes`: a hash that is the same in every process and
/// on every machine (key partitions, working copy names, and the checksum
/// of state files in their first format, `WEIRST01`).
pub fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// The partition of `key` among `n` (FNV-1a: stable everywhere).
pub fn partition_of(key: &[u8], n: usize) -> usize {
    (fnv64(key) % n.max(1) as u64) as usize
}

impl PartitionedStore {
    /// Partition stores in key-hash order.
    pub fn new(parts: Vec<Box<dyn StateStore>>) -> PartitionedStore {
        let committed_in_task = vec![None; parts.len()];
        PartitionedStore {
            parts,
            committed_in_task,
        }
    }

    fn part(&self, key: &[u8]) -> usize {
        partition_of(key, self.parts.len())
    }

    /// The number of partitions.
    pub fn partitions(&self) -> usize {
        self.parts.len()
    }

    /// The partition stores, in key-hash order: an operator that processes
    /// partitions in parallel routes each key to `partition_of(key, n)`.
    pub fn parts_mut(&mut self) -> &mut [Box<dyn StateStore>] {
        &mut self.parts
    }

    /// Runs `f(partition, its store, inputs[partition])` for every partition,
    /// as parallel tasks on the worker pool this runs in when there are
    /// several; the results come in partition order.
    ///
    /// `commit_at`: `f` is the operator's last change to its state in this
    /// batch, and each partition commits that version in its own task right
    /// after it (as a Spark task commits its state store), instead of in a
    /// second round of tasks after the sink ([`StateStore::commit`] then
    /// skips it). A failure after that leaves the version written ahead of
    /// `commits/N`, as a crash between two partitions' commits does: the
    /// batch runs again on restart and writes it again. A partition waits
    /// for its batch's `offsets/N` to be durable before it commits (the
    /// batch computes while it is written) and commits nothing when that
    /// write failed.
    pub fn map_parts<I: Send, R: Send>(
        &mut self,
        inputs: Vec<I>,
        commit_at: Option<&InTaskCommit>,
        f: impl Fn(usize, &mut dyn StateStore, I) -> Result<R> + Sync + Send,
    ) -> Result<Vec<R>> {
        use rayon::prelude::*;
        let many = self.parts.len() > 1;
        // Each partition's store, its in-task commit mark and its input.
        type Job<'a, I> = (
            &'a mut Box<dyn StateStore>,
            &'a mut Option<(u64, Duration)>,
            I,
        );
        let jobs = self
            .parts
            .iter_mut()
            .zip(self.committed_in_task.iter_mut())
            .zip(inputs)
            .map(|((store, committed), input)| (store, committed, input))
            .enumerate();
        let run = |(p, (store, committed, input)): (usize, Job<'_, I>)| {
            if let (Some(c), Some((done, _))) = (commit_at, *committed) {
                if c.version == done {
                    // A second commit of the version would write only the
                    // second call's changes over the first's.
                    return Err(crate::error::WeirError::Config(format!(
                        "state partition {p} was asked to commit version {} twice in one batch: an operator commits its state in the tasks of its last change only",
                        c.version
                    )));
                }
            }
            let out = f(p, store.as_mut(), input)?;
            if let Some(c) = commit_at {
                // The commit's time includes its wait for the batch's log.
                let t = Instant::now();
                c.logged.wait()?;
                store.commit(c.version)?;
                *committed = Some((c.version, t.elapsed()));
                if many {
                    crate::failpoint::failpoint_here("between_state_partitions");
                }
            }
            Ok(out)
        };
        if many {
            jobs.collect::<Vec<_>>().into_par_iter().map(run).collect()
        } else {
            jobs.map(run).collect()
        }
    }

    /// The longest of this batch's in-task commits (their share of the
    /// operator's wall time, which its `allUpdatesTimeMs` leaves out, as
    /// Spark times updates before the commit).
    pub fn in_task_commit_time(&self) -> Duration {
        self.committed_in_task
            .iter()
            .filter_map(|c| c.map(|(_, d)| d))
            .max()
            .unwrap_or_default()
    }

    /// True unless every partition committed `version` in its task.
    pub fn commit_pending(&self, version: u64) -> bool {
        !self
            .committed_in_task
            .iter()
            .all(|c| matches!(c, Some((v, _)) if *v == version))
    }

    /// Commits `version` in every partition not committed at it in its task
    /// ([`PartitionedStore::map_parts`]); returns the time the partitions'
    /// commits took, summed (as Spark sums its tasks' `commitTimeMs`).
    pub fn commit_timed(&mut self, version: u64) -> Result<Duration> {
        let in_tasks: Duration = self
            .committed_in_task
            .iter()
            .filter_map(|c| c.filter(|(v, _)| *v == version).map(|(_, d)| d))
            .sum();
        let t = Instant::now();
        self.commit(version)?;
        Ok(in_tasks + t.elapsed())
    }

    /// The partition stores, in key-hash order.
    pub fn parts(&self) -> &[Box<dyn StateStore>] {
        &self.parts
    }

    /// One store over every partition: the single partition itself when
    /// there is one (no hashing per key), else this store.
    pub fn into_store(mut self) -> Box<dyn StateStore> {
        if self.parts.len() == 1 {
            self.parts.pop().expect("one partition")
        } else {
            Box::new(self)
        }
    }
}

impl StateStore for PartitionedStore {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        self.parts[self.part(key)].get(key)
    }
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        let p = self.part(&key);
        self.parts[p].put(key, value)
    }
    fn update(&mut self, key: &[u8], f: Updater<'_>) -> Result<()> {
        let p = self.part(key);
        self.parts[p].update(key, f)
    }
    fn remove(&mut self, key: &[u8]) {
        let p = self.part(key);
        self.parts[p].remove(key)
    }
    fn iter(&self) -> StateIter<'_> {
        Box::new(self.parts.iter().flat_map(|p| p.iter()))
    }
    fn len(&self) -> usize {
        self.parts.iter().map(|p| p.len()).sum()
    }
    fn check(&self) -> Result<()> {
        self.parts.iter().try_for_each(|p| p.check())
    }
    fn commit(&mut self, version: u64) -> Result<()> {
        // A failed read in any partition: no partition commits here (one
        // that committed in its task already wrote the version; the
        // batch's rerun after a restart writes it again).
        self.check()?;
        // Every partition at once on the worker pool this runs in (each
        // writes and fsyncs its own files): one step of latency whatever the
        // partition count. A crash between two partitions' commits (the
        // failpoint fires after the first one done) re-runs the batch.
        // Partitions that committed in their task are skipped (none left:
        // no tasks).
        let many = self.parts.len() > 1;
        let mut left: Vec<&mut Box<dyn StateStore>> = self
            .parts
            .iter_mut()
            .zip(&self.committed_in_task)
            .filter(|(_, c)| !matches!(c, Some((v, _)) if *v == version))
            .map(|(p, _)| p)
            .collect();
        let commit = |p: &mut Box<dyn StateStore>| {
            p.commit(version)?;
            if many {
                crate::failpoint::failpoint_here("between_state_partitions");
            }
            Ok(())
        };
        let result = if left.len() > 1 {
            use rayon::prelude::*;
            left.par_iter_mut().try_for_each(|p| commit(p))
        } else {
            left.into_iter().try_for_each(commit)
        };
        self.committed_in_task.fill(None);
        result
    }
    fn abort(&mut self) {
        self.committed_in_task.fill(None);
        for p in &mut self.parts {
            p.abort();
        }
    }
    fn memory_used_bytes(&self) -> usize {
        self.parts.iter().map(|p| p.memory_used_bytes()).sum()
    }
}

/// Opens state stores: selected by session config, like Spark's
/// `spark.sql.streaming.stateStore.providerClass`.
pub trait StateStoreProvider: Send + Sync {
    /// The provider's name.
    fn name(&self) -> &'static str;
    /// Opens the store in `dir` (the checkpoint's
    /// `state/<operator>/<partition>/`: a local directory or an object store
    /// prefix) at committed `version` (0: empty), keeping
    /// `min_versions_to_retain` versions restorable; `sync`: local files
    /// are fsync'd.
    fn open(
        &self,
        dir: &Storage,
        version: u64,
        min_versions_to_retain: u64,
        sync: bool,
    ) -> Result<Box<dyn StateStore>>;
}

/// The in-memory provider: a hash map per partition, persisted as delta and
/// snapshot files under the checkpoint (local or on object storage).
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStateProvider;

impl StateStoreProvider for MemoryStateProvider {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn open(
        &self,
        dir: &Storage,
        version: u64,
        retain: u64,
        _sync: bool,
    ) -> Result<Box<dyn StateStore>> {
        Ok(Box::new(MemoryStateStore::open_on(
            dir.clone(),
            version,
            retain,
        )?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv64_is_fnv1a_so_partitions_and_names_stay_where_they_were() {
        // FNV-1a's published test vectors.
        assert_eq!(fnv64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv64(b"foobar"), 0x85944171f73967e8);
        // A key's partition is its hash modulo the count, as checkpoints
        // written by earlier runs expect.
        assert_eq!(
            partition_of(b"foobar", 7),
            (0x85944171f73967e8u64 % 7) as usize
        );
        assert_eq!(partition_of(b"a", 0), 0);
    }

    /// Two memory partitions under `dir`, opened at `version`.
    fn two_parts(dir: &std::path::Path, version: u64) -> PartitionedStore {
        PartitionedStore::new(
            (0..2)
                .map(|p| {
                    let store =
                        MemoryStateStore::open(&dir.join(p.to_string()), version, 10, false)
                            .unwrap();
                    Box::new(store) as Box<dyn StateStore>
                })
                .collect(),
        )
    }

    /// Puts `key` = `value` into every partition as its batch's change.
    fn put_everywhere(store: &mut PartitionedStore, commit_at: Option<u64>, value: &[u8]) {
        let commit_at = commit_at.map(InTaskCommit::after_logged);
        store
            .map_parts(vec![(); 2], commit_at.as_ref(), |p, s, ()| {
                s.put(format!("k{p}").into_bytes(), value.to_vec());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn partitions_commit_in_their_tasks_only_once_their_batch_is_logged() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = two_parts(dir.path(), 0);
        let (logged, logging) = OffsetsLogged::pending(0);
        let at_1 = InTaskCommit { version: 1, logged };
        std::thread::scope(|s| {
            let tasks = s.spawn(|| {
                store.map_parts(vec![(); 2], Some(&at_1), |p, s, ()| {
                    s.put(format!("k{p}").into_bytes(), b"a".to_vec());
                    Ok(())
                })
            });
            std::thread::sleep(std::time::Duration::from_millis(50));
            for p in 0..2 {
                assert!(!dir.path().join(format!("{p}/1.delta")).exists());
            }
            logging.logged();
            tasks.join().unwrap().unwrap();
        });
        for p in 0..2 {
            assert!(dir.path().join(format!("{p}/1.delta")).exists());
        }
        // Its log failed: no partition writes the version.
        let (logged, logging) = OffsetsLogged::pending(1);
        drop(logging);
        let at_2 = InTaskCommit { version: 2, logged };
        let err = store
            .map_parts(vec![(); 2], Some(&at_2), |_, s, ()| {
                s.put(b"k".to_vec(), b"b".to_vec());
                Ok(())
            })
            .unwrap_err()
            .to_string();
        assert!(err.contains("batch 1 was not logged"), "{err}");
        for p in 0..2 {
            assert!(!dir.path().join(format!("{p}/2.delta")).exists());
        }
    }

    #[test]
    fn partitions_commit_in_their_tasks_once_and_the_commit_after_the_sink_writes_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = two_parts(dir.path(), 0);
        // Committed in the tasks: durable before the commit after the sink.
        put_everywhere(&mut store, Some(1), b"a");
        assert!(!store.commit_pending(1));
        for p in 0..2 {
            assert!(dir.path().join(format!("{p}/1.delta")).exists());
        }
        // That commit skips them: version 1 keeps the batch's changes (a
        // second commit would write an empty delta over them).
        store.commit_timed(1).unwrap();
        let at_1 = two_parts(dir.path(), 1);
        assert_eq!(at_1.get(b"k0").as_deref(), Some(&b"a"[..]));
        assert_eq!(at_1.get(b"k1").as_deref(), Some(&b"a"[..]));
        // Not committed in the tasks: the commit after the sink writes them.
        put_everywhere(&mut store, None, b"b");
        assert!(store.commit_pending(2));
        assert!(!dir.path().join("0/2.delta").exists());
        store.commit_timed(2).unwrap();
        assert!(dir.path().join("0/2.delta").exists());
        // A version committed in tasks but never confirmed (the batch failed
        // after them) is written again by the batch's rerun after a restart.
        put_everywhere(&mut store, Some(3), b"c");
        drop(store);
        let mut again = two_parts(dir.path(), 2);
        assert_eq!(again.get(b"k0").as_deref(), Some(&b"b"[..]));
        put_everywhere(&mut again, Some(3), b"d");
        // A second in-task commit of the version in one batch is refused.
        let at_3 = InTaskCommit::after_logged(3);
        let twice = again.map_parts(vec![(); 2], Some(&at_3), |_, _, ()| Ok(()));
        assert!(
            twice
                .unwrap_err()
                .to_string()
                .contains("twice in one batch"),
            "a second commit would write only its own changes"
        );
        again.commit_timed(3).unwrap();
        let reopened = two_parts(dir.path(), 3);
        assert_eq!(reopened.get(b"k0").as_deref(), Some(&b"d"[..]));
        assert_eq!(reopened.get(b"k1").as_deref(), Some(&b"d"[..]));
    }
}
