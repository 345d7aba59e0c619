//! Streaming deduplication (Spark's `dropDuplicates` and
//! `dropDuplicatesWithinWatermark`): a row passes the first time its key
//! columns are seen; later rows with the same key are dropped.
//!
//! - Rows whose event time is at or before the previous batch's watermark are
//!   dropped as late (counted raw, as Spark counts them), whether or not the
//!   watermark column is part of the key.
//! - `dropDuplicates` with the watermark column in the key: a key is evicted
//!   once the watermark passes its event time. Without it in the key, keys
//!   are kept forever.
//! - `dropDuplicatesWithinWatermark`: a key is kept until the watermark
//!   passes its first event time plus the watermark delay.
//!
//! State: key = the key columns in Arrow's row format; value = the time (µs)
//! at or after which the key may be evicted (`i64::MAX`: never).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{new_empty_array, ArrayRef, AsArray, BooleanArray, TimestampMicrosecondArray};
use arrow::compute::{cast, filter_record_batch};
use arrow::datatypes::Field as ArrowField;
use arrow::datatypes::{SchemaRef, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};

use crate::error::{Result, WeirError};
use crate::ops::aggregate::Watermarks;
use crate::ops::narrow::Narrow;
use crate::ops::operator::{
    single_store, unknown_store, DecodedState, OperatorState, StatefulOperator,
};
use crate::ops::BatchContext;
use crate::progress::StateOperatorProgress;
use crate::row::timestamp_type;
use crate::state::{partition_of, PartitionedStore, StateStore};
use weir_plan::OutputMode;

/// The deduplication operator.
pub struct DedupOp {
    /// Index among the query's stateful operators.
    pub id: usize,
    keys: Vec<usize>,
    converter: RowConverter,
    /// The watermarked event-time column and its delay (ms), if any.
    event_time: Option<(usize, i64)>,
    /// Whether the event-time column is one of the keys.
    time_in_key: bool,
    within_watermark: bool,
    schema: SchemaRef,
    /// The state, split over the state partitions.
    store: OperatorState,
    metrics: StateOperatorProgress,
}

/// One state partition's counts for a batch.
#[derive(Default)]
struct PartitionCounts {
    dropped: i64,
    updated: i64,
    removed: i64,
}

impl DedupOp {
    /// Dedup of `schema` rows on columns `keys`; `event_time` is the
    /// watermarked column (index, delay ms) when the query has one.
    pub fn new(
        id: usize,
        keys: Vec<usize>,
        event_time: Option<(usize, i64)>,
        within_watermark: bool,
        schema: SchemaRef,
    ) -> Result<DedupOp> {
        let fields = keys
            .iter()
            .map(|i| SortField::new(schema.field(*i).data_type().clone()))
            .collect();
        let time_in_key = event_time.is_some_and(|(t, _)| keys.contains(&t));
        let name = if within_watermark {
            "dedupeWithinWatermark"
        } else {
            "dedupe"
        };
        Ok(DedupOp {
            id,
            keys,
            converter: RowConverter::new(fields)?,
            event_time,
            time_in_key,
            within_watermark,
            schema,
            store: OperatorState::default(),
            metrics: StateOperatorProgress::new(name),
        })
    }

    /// The output schema (the input's).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Gives the operator its state, split over the state partitions.
    pub fn set_store(&mut self, store: PartitionedStore) {
        self.store.set(store);
    }

    /// This batch's metrics.
    pub fn metrics(&self) -> StateOperatorProgress {
        self.metrics.clone()
    }

    /// The input rows this batch drops as late, for the late-rows side output.
    pub fn late_rows(&self, input: &[RecordBatch], wm: Watermarks) -> Result<Vec<RecordBatch>> {
        let (Some((c, _)), Some(late)) = (self.event_time, wm.late_ms) else {
            return Ok(vec![]);
        };
        let mut out = Vec::new();
        for b in input {
            out.extend(crate::ops::watermark::late_rows(b, c, late, |t| t)?);
        }
        Ok(out)
    }

    /// Runs one micro-batch: keeps each input row whose key was not seen
    /// before (in state or earlier in the batch) and is not behind the
    /// watermark, in input order. Keys are routed by hash to the state
    /// partitions, which decide their rows and evict in parallel on the
    /// worker pool the batch runs in. `narrow` steps run on each slice of
    /// the input in the task that encodes its keys; what their watermarks
    /// saw goes into `ctx`.
    pub fn process(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        ctx: &mut BatchContext,
    ) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        let mut store = self.store.take()?;
        let result = self.process_partitions(&mut store, narrow, input, ctx);
        let (total, memory) = (store.len() as i64, store.memory_used_bytes() as i64);
        // The updates' time leaves out the partitions' commits (`commitTimeMs`).
        let started = started + store.in_task_commit_time();
        self.store.put(store);
        let (out, counts) = result?;
        let mut m = StateOperatorProgress::new(&self.metrics.operator_name);
        for c in counts {
            m.num_rows_dropped_by_watermark += c.dropped;
            m.num_rows_updated += c.updated;
            m.num_rows_removed += c.removed;
        }
        m.all_updates_time_ms = started.elapsed().as_millis() as i64;
        m.num_rows_total = total;
        m.memory_used_bytes = memory;
        self.metrics = m;
        Ok(out)
    }

    fn process_partitions(
        &self,
        store: &mut PartitionedStore,
        narrow: &Narrow,
        input: &[RecordBatch],
        ctx: &mut BatchContext,
    ) -> Result<(Vec<RecordBatch>, Vec<PartitionCounts>)> {
        let n = store.partitions();
        let wm = ctx.watermarks;
        let late_us = wm.late_ms.map(|w| w.saturating_mul(1000));
        // Each slice's keys (row format) and event times, and each row's
        // partition, as a task per slice.
        let encoded = narrow.map_tasks(input, ctx, |batch| {
            if batch.num_rows() == 0 {
                return Ok(None);
            }
            let times = match self.event_time {
                Some((i, _)) => {
                    let a = cast(batch.column(i), &timestamp_type())?;
                    Some(
                        a.as_primitive::<TimestampMicrosecondType>()
                            .iter()
                            .collect::<Vec<_>>(),
                    )
                }
                None => None,
            };
            let cols: Vec<_> = self.keys.iter().map(|i| batch.column(*i).clone()).collect();
            let rows = self.converter.convert_columns(&cols)?;
            // Each partition's rows of this batch, in input order.
            let mut parts: Vec<Vec<u32>> = vec![Vec::new(); n];
            for r in 0..batch.num_rows() {
                parts[partition_of(rows.row(r).data(), n)].push(r as u32);
            }
            Ok(Some((batch, times, rows, parts)))
        })?;
        let encoded: &Vec<_> = &encoded.into_iter().flatten().collect();
        // One partition: the rows it keeps (per batch) and its counts.
        type Kept = Vec<Vec<u32>>;
        let run =
            |p: usize, store: &mut dyn StateStore, _: ()| -> Result<(Kept, PartitionCounts)> {
                let mut c = PartitionCounts::default();
                let mut seen_now: HashSet<Vec<u8>> = HashSet::new();
                let mut keeps = Vec::with_capacity(encoded.len());
                for (_, times, rows, parts) in encoded {
                    let mut keep = Vec::new();
                    for r in parts[p].iter().map(|r| *r as usize) {
                        let t = times.as_ref().and_then(|t| t[r]);
                        if let (Some(late), Some(t)) = (late_us, t) {
                            if t <= late {
                                c.dropped += 1;
                                continue;
                            }
                        }
                        let key = rows.row(r).data();
                        if seen_now.contains(key) || store.get(key).is_some() {
                            continue;
                        }
                        let expires = match (self.event_time, t) {
                            (Some((_, delay)), Some(t)) if self.within_watermark => {
                                t.saturating_add(delay.saturating_mul(1000))
                            }
                            (Some(_), Some(t)) if self.time_in_key => t,
                            _ => i64::MAX,
                        };
                        store.put(key.to_vec(), expires.to_le_bytes().to_vec());
                        seen_now.insert(key.to_vec());
                        c.updated += 1;
                        keep.push(r as u32);
                    }
                    keeps.push(keep);
                }
                if let Some(ev) = wm.evict_ms {
                    let ev_us = ev.saturating_mul(1000);
                    let expired: Vec<Vec<u8>> = store
                        .iter()
                        .filter(|(_, v)| {
                            v.len() == 8 && i64::from_le_bytes(v[..].try_into().unwrap()) <= ev_us
                        })
                        .map(|(k, _)| k.to_vec())
                        .collect();
                    for k in expired {
                        store.remove(&k);
                        c.removed += 1;
                    }
                }
                // A failed state read must not decide what is emitted.
                store.check()?;
                Ok((keeps, c))
            };
        let results: Vec<(Kept, PartitionCounts)> =
            store.map_parts(vec![(); n], ctx.state_commit.as_ref(), run)?;
        // A row is kept by its partition; rows keep their input order.
        let mut out = Vec::new();
        for (bi, (batch, ..)) in encoded.iter().enumerate() {
            let mut keep = vec![false; batch.num_rows()];
            for (kept, _) in &results {
                for r in &kept[bi] {
                    keep[*r as usize] = true;
                }
            }
            let b = filter_record_batch(batch, &BooleanArray::from(keep))?;
            if b.num_rows() > 0 {
                out.push(b);
            }
        }
        Ok((out, results.into_iter().map(|(_, c)| c).collect()))
    }

    /// Commits this batch's state as `version`.
    pub fn commit(&mut self, version: u64) -> Result<()> {
        self.metrics.commit_time_ms = self.store.commit(version)?.as_millis() as i64;
        Ok(())
    }

    /// Undoes this batch's state changes.
    pub fn abort(&mut self) {
        self.store.abort();
    }
}

impl StatefulOperator for DedupOp {
    fn id(&self) -> usize {
        self.id
    }
    fn store_names(&self) -> &'static [&'static str] {
        &[""]
    }
    fn open_state(&mut self, stores: Vec<PartitionedStore>) -> Result<()> {
        self.set_store(single_store("deduplication", stores)?);
        Ok(())
    }
    fn run(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        ctx: &mut BatchContext,
        _mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        DedupOp::process(self, narrow, input, ctx)
    }
    fn late_rows(
        &self,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        wm: Watermarks,
        _mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        DedupOp::late_rows(self, input, wm)
    }
    fn metrics_mut(&mut self) -> &mut StateOperatorProgress {
        &mut self.metrics
    }
    fn commit(&mut self, version: u64) -> Result<()> {
        DedupOp::commit(self, version)
    }
    fn commit_pending(&mut self, version: u64) -> bool {
        self.store.commit_pending(version)
    }
    fn abort(&mut self) -> Result<()> {
        DedupOp::abort(self);
        Ok(())
    }
    fn metrics(&self) -> StateOperatorProgress {
        DedupOp::metrics(self)
    }
    fn needs_no_data_batch(&self, _mode: OutputMode) -> bool {
        true
    }
    fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        DedupOp::decode_state(self, store, entries)
    }
}

impl DedupOp {
    /// Decodes state entries (key: the key columns in Arrow's row format;
    /// value: when the key may be evicted) into the key columns (`key`) and
    /// `expires_at`, the event time at or after which the watermark evicts
    /// the key (null: kept forever) (`value`).
    pub fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        if !store.is_empty() {
            return Err(unknown_store("deduplication", store, &[""]));
        }
        let fields: Vec<ArrowField> = self
            .keys
            .iter()
            .map(|i| self.schema.field(*i).clone())
            .collect();
        let cols: Vec<ArrayRef> = if entries.is_empty() {
            fields
                .iter()
                .map(|f| new_empty_array(f.data_type()))
                .collect()
        } else {
            let parser = self.converter.parser();
            self.converter
                .convert_rows(entries.iter().map(|(k, _)| parser.parse(k)))?
        };
        let expires = entries
            .iter()
            .map(|(_, v)| {
                let at = i64::from_le_bytes((*v).try_into().map_err(|_| {
                    WeirError::Config(
                        "damaged deduplication state value (written by a different query?)".into(),
                    )
                })?);
                Ok((at != i64::MAX).then_some(at))
            })
            .collect::<Result<Vec<_>>>()?;
        let expires: ArrayRef =
            Arc::new(TimestampMicrosecondArray::from(expires).with_timezone("UTC"));
        DecodedState::new(
            fields.into_iter().zip(cols).collect(),
            vec![(
                ArrowField::new("expires_at", timestamp_type(), true),
                expires,
            )],
            entries.len(),
        )
    }
}
