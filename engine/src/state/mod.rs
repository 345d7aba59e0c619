//! Keyed operator state, versioned per micro-batch.
//!
//! A [`StateStore`] holds one operator partition's key/value pairs. Writes of
//! a batch are applied in place (the operator reads its own writes) and become
//! durable at [`StateStore::commit`]; [`StateStore::abort`] undoes them. A
//! restart opens the last committed version. Version `v` is the state after
//! batch `v - 1`, as in Spark.

pub mod memory;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;

use std::borrow::Cow;
use std::path::Path;

use crate::error::Result;

#[cfg(feature = "rocksdb")]
pub use self::rocksdb::{RocksDbStateProvider, RocksDbStateStore};
pub use memory::MemoryStateStore;

/// One operator partition's versioned key/value state.
pub trait StateStore: Send {
    /// The value of `key` (borrowed where the store can).
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>>;
    /// Sets `key`.
    fn put(&mut self, key: Vec<u8>, value: Vec<u8>);
    /// Removes `key`.
    fn remove(&mut self, key: &[u8]);
    /// All pairs (including this batch's uncommitted writes).
    fn iter(&self) -> Box<dyn Iterator<Item = (Cow<'_, [u8]>, Cow<'_, [u8]>)> + '_>;
    /// Number of keys.
    fn len(&self) -> usize;
    /// True when there are no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Makes this batch's writes durable as version `version`.
    fn commit(&mut self, version: u64) -> Result<()>;
    /// Undoes this batch's writes.
    fn abort(&mut self);
    /// Approximate bytes held in memory.
    fn memory_used_bytes(&self) -> usize;
}

/// Opens state stores: selected by session config, like Spark's
/// `spark.sql.streaming.stateStore.providerClass`.
pub trait StateStoreProvider: Send + Sync {
    /// The provider's name.
    fn name(&self) -> &'static str;
    /// Opens the store in `dir` at committed `version` (0: empty).
    fn open(
        &self,
        dir: &Path,
        version: u64,
        min_versions_to_retain: u64,
        sync: bool,
    ) -> Result<Box<dyn StateStore>>;
}

/// The in-memory provider: a hash map per partition, persisted as delta and
/// snapshot files under the checkpoint.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryStateProvider;

impl StateStoreProvider for MemoryStateProvider {
    fn name(&self) -> &'static str {
        "memory"
    }
    fn open(
        &self,
        dir: &Path,
        version: u64,
        retain: u64,
        sync: bool,
    ) -> Result<Box<dyn StateStore>> {
        Ok(Box::new(MemoryStateStore::open(
            dir, version, retain, sync,
        )?))
    }
}
