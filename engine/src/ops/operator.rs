//! The one interface of every stateful operator (aggregation, session-window
//! aggregation, deduplication, stream-stream join): the pipeline opens,
//! runs, commits and measures them through [`StatefulOperator`] and never
//! matches on which operator it holds. Each operator's file implements it
//! next to its own state handling and metrics.

use arrow::array::{ArrayRef, RecordBatch, StructArray};
use arrow::datatypes::Field;
use weir_plan::OutputMode;

use super::aggregate::Watermarks;
use super::ahead::{Prepared, Preparer};
use super::narrow::{Narrow, NarrowSteps};
use super::BatchContext;
use std::sync::Mutex;

use crate::error::{Result, WeirError};
use crate::progress::StateOperatorProgress;
use crate::state::PartitionedStore;

/// An operator that keeps state across micro-batches, versioned with them.
pub trait StatefulOperator: Send {
    /// Its index among the query's stateful operators (its directory under
    /// `state/`).
    fn id(&self) -> usize;

    /// The stores it keeps in each state partition: `[""]` for one store,
    /// `["left", "right"]` for a join's two sides.
    fn store_names(&self) -> &'static [&'static str];

    /// Gives it its stores, in [`StatefulOperator::store_names`] order, each
    /// split over the query's state partitions and opened at the last
    /// committed version. An operator may run its partitions in parallel
    /// ([`PartitionedStore::parts_mut`]) or use the store as one
    /// ([`PartitionedStore::into_store`]).
    fn open_state(&mut self, stores: Vec<PartitionedStore>) -> Result<()>;

    /// Runs one micro-batch's work: `input` rows, which still have to go
    /// through the `narrow` steps (filters, projections, watermarks), and
    /// a stream-stream join's `right` rows (empty otherwise), against its
    /// state, producing output per `mode`. An operator that cuts its input
    /// into tasks runs the steps in those tasks ([`Narrow::map_tasks`], or
    /// [`Narrow::apply`] on each slice and [`Narrow::record`] after);
    /// another runs them first ([`Narrow::run`]). Called through
    /// [`StatefulOperator::process`].
    fn run(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>>;

    /// The rows of `input` (and `right`) that this batch drops as late
    /// under `wm`, for the late-rows side output.
    fn late_rows(
        &self,
        input: &[RecordBatch],
        right: &[RecordBatch],
        wm: Watermarks,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>>;

    /// Its metrics of the last batch, to be completed.
    fn metrics_mut(&mut self) -> &mut StateOperatorProgress;

    /// Runs one micro-batch ([`StatefulOperator::run`]). When late rows
    /// are sent aside (`ctx.collect_late`) the steps run first, the rows it
    /// drops as late ([`StatefulOperator::late_rows`], read from the rows
    /// after the steps) go to `ctx.late_rows` and their count to its
    /// `numLateRowsToSideOutput`.
    fn process(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        if !ctx.collect_late {
            return self.run(narrow, input, right, ctx, mode);
        }
        let input = narrow.run(input.to_vec(), ctx)?;
        let wm = ctx.watermarks;
        let late = ctx.collect_late(|| self.late_rows(&input, right, wm, mode))?;
        let out = self.run(&Narrow::none(), &input, right, ctx, mode)?;
        if let Some(rows) = late {
            crate::progress::held::note_late_rows(self.metrics_mut(), rows);
        }
        Ok(out)
    }

    /// Its first stage as a task of its own, over the rows of the narrow
    /// `steps` before it, for reading ahead ([`super::ahead`]): `None`
    /// (the default) when its first stage reads state or it has none.
    /// Called once its state is open.
    fn preparer(&self, _steps: NarrowSteps) -> Option<Preparer> {
        None
    }

    /// Runs one micro-batch as [`StatefulOperator::process`] does, on the
    /// input its [`StatefulOperator::preparer`] prepared from `input`
    /// (given too). The default ignores `prepared`.
    fn process_prepared(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
        _prepared: Prepared,
    ) -> Result<Vec<RecordBatch>> {
        self.process(narrow, input, right, ctx, mode)
    }

    /// Makes this batch's state changes durable as `version`.
    fn commit(&mut self, version: u64) -> Result<()>;

    /// False when every state partition already committed `version` in its
    /// task (`BatchContext::state_commit`): `commit` then writes nothing
    /// and needs no tasks.
    fn commit_pending(&mut self, _version: u64) -> bool {
        true
    }

    /// Bounds what one group may collect (`collect_list`/`collect_set`),
    /// from `spark.sql.streaming.weir.collectMaxValues`; operators that
    /// collect nothing ignore it.
    fn set_collect_max_values(&mut self, _n: usize) {}

    /// Undoes this batch's uncommitted state changes.
    fn abort(&mut self) -> Result<()>;

    /// The last batch's state metrics (Spark's `stateOperators` entry).
    fn metrics(&self) -> StateOperatorProgress;

    /// True when a moved watermark makes it evict or emit, so a no-data
    /// batch is due (Spark's `shouldRunAnotherBatch`).
    fn needs_no_data_batch(&self, mode: OutputMode) -> bool;

    /// Decodes entries of its store `store` (one of
    /// [`StatefulOperator::store_names`]), as they are stored, into `key`
    /// and `value` columns named after the query's columns: how
    /// `weir::state::read` shows its state. Each operator decodes beside its
    /// own encoding. With no entries: empty columns of the store's key and
    /// value types. A damaged entry or an unknown store is an error.
    fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState>;
}

/// One state store's entries decoded into columns (one row per entry): the
/// `key` and `value` structs of `weir::state::read`.
#[derive(Debug, Clone)]
pub struct DecodedState {
    /// The entries' keys.
    pub key: StructArray,
    /// The entries' values.
    pub value: StructArray,
}

impl DecodedState {
    /// Key and value structs from named columns, all `len` rows long.
    pub(crate) fn new(
        key: Vec<(Field, ArrayRef)>,
        value: Vec<(Field, ArrayRef)>,
        len: usize,
    ) -> Result<DecodedState> {
        Ok(DecodedState {
            key: state_struct(key, len)?,
            value: state_struct(value, len)?,
        })
    }

    /// The first `key_columns` columns of `batch` as the key, the rest as
    /// the value (an aggregation's output row: its keys, then its
    /// aggregates).
    pub(crate) fn split(batch: &RecordBatch, key_columns: usize) -> Result<DecodedState> {
        let cols: Vec<(Field, ArrayRef)> = batch
            .schema()
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, c)| (f.as_ref().clone(), c.clone()))
            .collect();
        let mut key = cols;
        let value = key.split_off(key_columns.min(key.len()));
        DecodedState::new(key, value, batch.num_rows())
    }
}

/// A struct of `len` rows from named columns (none: a struct without fields).
fn state_struct(cols: Vec<(Field, ArrayRef)>, len: usize) -> Result<StructArray> {
    if cols.is_empty() {
        return Ok(StructArray::new_empty_fields(len, None));
    }
    let (fields, arrays): (Vec<Field>, Vec<ArrayRef>) = cols.into_iter().unzip();
    let fields: Vec<Field> = fields.into_iter().map(|f| f.with_nullable(true)).collect();
    Ok(StructArray::try_new(fields.into(), arrays, None)?)
}

/// What one state partition counted in its share of a micro-batch. The
/// operator's metrics are the sums over its partitions, as Spark reports
/// them; the removal time is the slowest partition's.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PartitionCounts {
    /// Rows dropped as late.
    pub dropped: i64,
    /// State rows written.
    pub updated: i64,
    /// State rows removed.
    pub removed: i64,
    /// Time spent removing (ms).
    pub removals_ms: i64,
    /// The earliest eviction time (µs) of the rows left in the partition,
    /// with the start of that row's window if it is one.
    pub next_eviction: Option<(i64, Option<i64>)>,
}

impl PartitionCounts {
    /// Adds this partition's counts to the operator's metrics `m`.
    pub(crate) fn add_to(&self, m: &mut StateOperatorProgress) {
        m.num_rows_dropped_by_watermark += self.dropped;
        m.num_rows_updated += self.updated;
        m.num_rows_removed += self.removed;
        m.all_removals_time_ms = m.all_removals_time_ms.max(self.removals_ms);
        if let Some((at, start)) = self.next_eviction {
            crate::progress::held::note_next_eviction(m, at, start);
        }
    }

    /// Notes a row left in state that is evicted at `at_us` (in the window
    /// starting at `window_start_us`, if a window), keeping the earliest.
    pub(crate) fn note_open(&mut self, at_us: i64, window_start_us: Option<i64>) {
        if self.next_eviction.is_none_or(|(e, _)| at_us < e) {
            self.next_eviction = Some((at_us, window_start_us));
        }
    }
}

/// Sets `m`'s update time: the batch's time since `started` without the
/// slowest partition's removals (never below zero).
pub(crate) fn set_update_time(m: &mut StateOperatorProgress, started: std::time::Instant) {
    m.all_updates_time_ms = (started.elapsed().as_millis() as i64 - m.all_removals_time_ms).max(0);
}

/// The error for a store name an operator does not keep.
pub(crate) fn unknown_store(operator: &str, store: &str, known: &[&str]) -> WeirError {
    WeirError::Config(format!(
        "the {operator} operator keeps no state store named \"{store}\" (its stores: {})",
        known
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// The stateful operators of a compiled pipeline, in id order (upstream
/// first), for reading their state.
pub(crate) fn stateful_operators(pipeline: &super::Pipeline) -> Vec<&dyn StatefulOperator> {
    pipeline.stateful().collect()
}

/// The one store of a single-store operator, or an error naming the operator.
pub(crate) fn single_store(
    name: &str,
    mut stores: Vec<PartitionedStore>,
) -> Result<PartitionedStore> {
    match (stores.pop(), stores.is_empty()) {
        (Some(s), true) => Ok(s),
        _ => Err(crate::error::WeirError::Config(format!(
            "the {name} operator keeps one state store per partition"
        ))),
    }
}

/// A partition-parallel operator's state: its [`PartitionedStore`], taken
/// out for a batch (so the batch's tasks can share the operator) and put
/// back. The lock only makes the operator shareable; `get_mut` costs nothing.
#[derive(Default)]
pub(crate) struct OperatorState(Mutex<Option<PartitionedStore>>);

impl OperatorState {
    fn slot(&mut self) -> &mut Option<PartitionedStore> {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives the operator its state.
    pub(crate) fn set(&mut self, store: PartitionedStore) {
        *self.slot() = Some(store);
    }

    /// Takes the state out for a batch ([`OperatorState::put`] returns it).
    pub(crate) fn take(&mut self) -> Result<PartitionedStore> {
        self.slot()
            .take()
            .ok_or_else(|| WeirError::Config("state store not opened".into()))
    }

    /// Its state partitions, once opened.
    pub(crate) fn partitions(&self) -> Option<usize> {
        let slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slot.as_ref().map(PartitionedStore::partitions)
    }

    /// Puts the state back after a batch.
    pub(crate) fn put(&mut self, store: PartitionedStore) {
        *self.slot() = Some(store);
    }

    /// Commits the batch's changes as `version` (in the partitions not
    /// committed in their tasks); returns the partitions' commit time,
    /// summed ([`PartitionedStore::commit_timed`]).
    pub(crate) fn commit(&mut self, version: u64) -> Result<std::time::Duration> {
        match self.slot() {
            Some(s) => s.commit_timed(version),
            None => Ok(std::time::Duration::ZERO),
        }
    }

    /// True unless every partition committed `version` in its task.
    pub(crate) fn commit_pending(&mut self, version: u64) -> bool {
        self.slot()
            .as_ref()
            .is_some_and(|s| s.commit_pending(version))
    }

    /// Undoes the batch's changes.
    pub(crate) fn abort(&mut self) {
        if let Some(s) = self.slot() {
            crate::state::StateStore::abort(s);
        }
    }
}

/// Moves each entry of `store` to the partition its routing key hashes to
/// (`partition_of(route(key), n)`), for operators that route by a prefix
/// of the stored key (a session's or a join row's key without its start or
/// sequence number). State written before those operators ran their
/// partitions as tasks was spread by the whole stored key; this puts it
/// where the partition tasks look. The moves are writes of the current
/// batch, durable at its commit (an abort undoes them and the next open
/// moves again). Entries `route` does not recognise stay for the operator's
/// loader to report. Returns how many entries moved.
pub(crate) fn rehome(
    store: &mut PartitionedStore,
    route: fn(&[u8]) -> Option<&[u8]>,
) -> Result<usize> {
    let n = store.partitions();
    if n <= 1 {
        return Ok(0);
    }
    let mut moves = Vec::new();
    for (p, part) in store.parts().iter().enumerate() {
        for (k, v) in part.iter() {
            match route(&k).map(|r| crate::state::partition_of(r, n)) {
                Some(q) if q != p => moves.push((p, q, k.into_owned(), v.into_owned())),
                _ => {}
            }
        }
        // A failed read must not pass for an entry in its place.
        part.check()?;
    }
    let moved = moves.len();
    let parts = store.parts_mut();
    for (p, q, k, v) in moves {
        parts[p].remove(&k);
        parts[q].put(k, v);
    }
    Ok(moved)
}

/// The key inside a stored key laid out as `key length (u32 LE), key,
/// suffix` (sessions and join rows), or `None` if it is not laid out so.
pub(crate) fn length_prefixed_key(stored: &[u8]) -> Option<&[u8]> {
    let len = u32::from_le_bytes(stored.get(..4)?.try_into().ok()?) as usize;
    stored.get(4..4usize.checked_add(len)?)
}

/// Stores for operators' unit tests: plain maps, nothing on disk.
#[cfg(test)]
pub(crate) mod test_stores {
    use std::borrow::Cow;
    use std::collections::BTreeMap;

    use crate::error::Result;
    use crate::state::{PartitionedStore, StateIter, StateStore};

    /// One partition's pairs in a map; commit and abort do nothing.
    #[derive(Default)]
    struct MapStore(BTreeMap<Vec<u8>, Vec<u8>>);

    impl StateStore for MapStore {
        fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
            self.0.get(key).map(|v| Cow::Borrowed(v.as_slice()))
        }
        fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
            self.0.insert(key, value);
        }
        fn remove(&mut self, key: &[u8]) {
            self.0.remove(key);
        }
        fn iter(&self) -> StateIter<'_> {
            Box::new(
                self.0
                    .iter()
                    .map(|(k, v)| (Cow::Borrowed(k.as_slice()), Cow::Borrowed(v.as_slice()))),
            )
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn commit(&mut self, _version: u64) -> Result<()> {
            Ok(())
        }
        fn abort(&mut self) {}
        fn memory_used_bytes(&self) -> usize {
            0
        }
    }

    /// `n` empty partitions.
    pub(crate) fn partitioned(n: usize) -> PartitionedStore {
        PartitionedStore::new(
            (0..n)
                .map(|_| Box::new(MapStore::default()) as Box<dyn StateStore>)
                .collect(),
        )
    }
}
