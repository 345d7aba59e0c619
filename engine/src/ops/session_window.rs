//! Session-window aggregation (Spark's `session_window(col, gap)`): per
//! key, events less than `gap` apart form one session `[first, last + gap)`;
//! sessions merge when a new event bridges them. Append mode emits a session
//! once the watermark passes its end; complete mode emits all of them (update
//! mode is refused, as by Spark).
//!
//! State: per key and session start, the session's end and accumulators,
//! in the state partition of the key's hash (the grouping keys without the
//! session window), so each partition merges, closes and evicts its keys'
//! sessions on its own, as a task of the batch. An in-memory index by key
//! per partition is rebuilt from the store on start.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{Field as ArrowField, Schema, SchemaRef, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use weir_plan::OutputMode;

use crate::error::{Result, WeirError};
use crate::ops::aggregate::{
    agg_arrays, kind_of, output_type, Acc, AggExec, Kind, Reader, Watermarks,
};
use crate::ops::narrow::Narrow;
use crate::ops::operator::{
    length_prefixed_key, rehome, set_update_time, single_store, unknown_store, DecodedState,
    OperatorState, PartitionCounts, StatefulOperator,
};
use crate::ops::BatchContext;
use crate::progress::StateOperatorProgress;
use crate::row::{timestamp_type, ArrowValue, Timestamp, Window};
use crate::state::{partition_of, PartitionedStore, StateStore};

#[derive(Clone, Debug)]
struct Session {
    start: i64,
    end: i64,
    accs: Vec<Acc>,
    changed: bool,
}

/// The session-window aggregation operator.
pub struct SessionAggregateOp {
    /// Index among the query's stateful operators.
    pub id: usize,
    time_col: usize,
    gap_us: i64,
    /// Position of the session window among the grouping keys.
    session_pos: usize,
    keys: Vec<usize>,
    key_conv: RowConverter,
    aggs: Vec<AggExec>,
    kinds: Vec<Kind>,
    schema: SchemaRef,
    watermarked: bool,
    /// Per state partition, its sessions by key (an index of the
    /// partition's store, rebuilt from it on open).
    index: Vec<Index>,
    /// The state, split over the state partitions by the hash of the key.
    store: OperatorState,
    metrics: StateOperatorProgress,
    /// The most values one session may collect (`collect_list`/`collect_set`).
    collect_max_values: usize,
}

/// One state partition's sessions by key, each key's in start order.
type Index = HashMap<Vec<u8>, Vec<Session>>;

/// One-event sessions routed to a partition, with their keys, in input order.
type Routed = Vec<(Vec<u8>, Session)>;

/// One state partition's share of a micro-batch: what it emits and counts.
#[derive(Default)]
struct PartitionOutput {
    out: Vec<(Vec<u8>, Session)>,
    counts: PartitionCounts,
}

fn store_key(key: &[u8], start: i64) -> Vec<u8> {
    let mut k = (key.len() as u32).to_le_bytes().to_vec();
    k.extend_from_slice(key);
    k.extend_from_slice(&start.to_be_bytes());
    k
}

impl SessionAggregateOp {
    /// Sessions over timestamp column `time_col` with `gap_ms`, grouped also
    /// by `keys` (input column indexes, named `key_names`); the session
    /// column is output at position `session_pos` among the keys as `name`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: usize,
        time_col: usize,
        gap_ms: i64,
        session_pos: usize,
        name: &str,
        keys: Vec<(usize, String)>,
        aggs: Vec<AggExec>,
        watermarked: bool,
        input: &Schema,
    ) -> Result<SessionAggregateOp> {
        let mut fields: Vec<ArrowField> = keys
            .iter()
            .map(|(i, n)| ArrowField::new(n, input.field(*i).data_type().clone(), true))
            .collect();
        fields.insert(
            session_pos.min(fields.len()),
            ArrowField::new(name, crate::row::window_type(), true),
        );
        let mut kinds = Vec::new();
        for a in &aggs {
            kinds.push(a.input_type.as_ref().map(kind_of).unwrap_or(Kind::Int));
            let t = output_type(a.func, a.input_type.as_ref());
            fields.push(ArrowField::new(&a.name, t, true));
        }
        let key_conv = RowConverter::new(
            keys.iter()
                .map(|(i, _)| SortField::new(input.field(*i).data_type().clone()))
                .collect(),
        )?;
        Ok(SessionAggregateOp {
            id,
            time_col,
            gap_us: gap_ms * 1000,
            session_pos,
            keys: keys.into_iter().map(|k| k.0).collect(),
            key_conv,
            aggs,
            kinds,
            schema: Arc::new(Schema::new(fields)),
            watermarked,
            index: Vec::new(),
            collect_max_values: crate::config::COLLECT_MAX_VALUES_DEFAULT,
            store: OperatorState::default(),
            metrics: StateOperatorProgress::new("sessionWindowStateStoreSaveExec"),
        })
    }

    /// The output schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// One stored session: its key (the group keys, row-encoded), start,
    /// end and aggregates; `None` for a damaged entry.
    fn decode_entry<'a>(&self, k: &'a [u8], v: &[u8]) -> Option<(&'a [u8], i64, i64, Vec<Acc>)> {
        let key = length_prefixed_key(k)?;
        let start = i64::from_be_bytes(k.get(4 + key.len()..)?.try_into().ok()?);
        let end = i64::from_le_bytes(v.get(..8)?.try_into().ok()?);
        let mut accs = self.new_accs();
        let mut pos = 8;
        for a in &mut accs {
            a.decode(v, &mut pos)?;
        }
        Some((key, start, end, accs))
    }

    fn new_accs(&self) -> Vec<Acc> {
        self.aggs
            .iter()
            .zip(&self.kinds)
            .map(|(a, k)| Acc::bounded(a.func, *k, self.collect_max_values))
            .collect()
    }

    /// Gives the operator its state, split over the state partitions, and
    /// loads each partition's index from it. Sessions stored where another
    /// routing put them (before sessions ran per partition) move to their
    /// key's partition first.
    pub fn set_store(&mut self, mut store: PartitionedStore) -> Result<()> {
        self.index.clear();
        let loaded = rehome(&mut store, length_prefixed_key).and_then(|_| self.load(&store));
        self.store.set(store);
        self.index = loaded?;
        Ok(())
    }

    /// Each partition's sessions by key, read from its store.
    fn load(&self, store: &PartitionedStore) -> Result<Vec<Index>> {
        let bad = || {
            WeirError::Config("damaged session state entry (written by a different query?)".into())
        };
        let mut out = Vec::with_capacity(store.partitions());
        for part in store.parts() {
            let mut index = Index::new();
            for (k, v) in part.iter() {
                let (key, start, end, accs) = self.decode_entry(&k, &v).ok_or_else(bad)?;
                index.entry(key.to_vec()).or_default().push(Session {
                    start,
                    end,
                    accs,
                    changed: false,
                });
            }
            // A failed read while loading must not pass for missing state.
            part.check()?;
            for v in index.values_mut() {
                v.sort_by_key(|s| s.start);
            }
            out.push(index);
        }
        Ok(out)
    }

    /// This batch's metrics.
    pub fn metrics(&self) -> StateOperatorProgress {
        self.metrics.clone()
    }

    /// True when a watermark advance can close sessions.
    pub fn needs_no_data_batch(&self, mode: OutputMode) -> bool {
        self.watermarked && mode != OutputMode::Complete
    }

    /// Runs one micro-batch.
    ///
    /// The batch runs as tasks on the worker pool it is called in (rayon):
    /// each slice of [`crate::ops::tasks::ROWS_PER_TASK`] input rows turns
    /// its events into one-event sessions, dropping those behind the
    /// (global) watermark, and routes them by the hash of their key (the
    /// grouping keys without the session window) to the state partitions;
    /// then each partition merges its keys' sessions, closes and evicts
    /// them behind the watermark and produces its output, in parallel. The
    /// output is the union of the partitions', sorted by key and start.
    /// `narrow` steps run on each slice in its task first, and what their
    /// watermarks saw goes into `ctx`.
    pub fn process(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        let mut store = self.store.take()?;
        let mut index = std::mem::take(&mut self.index);
        let result = self.process_partitions(&mut store, &mut index, narrow, input, ctx, mode);
        let memory = store.memory_used_bytes() as i64;
        // The updates' time leaves out the partitions' commits (`commitTimeMs`).
        let started = started + store.in_task_commit_time();
        self.store.put(store);
        self.index = index;
        let (parts, dropped) = result?;
        let mut m = StateOperatorProgress::new("sessionWindowStateStoreSaveExec");
        m.num_rows_dropped_by_watermark = dropped;
        let mut out: Vec<(Vec<u8>, Session)> = Vec::new();
        for p in parts {
            p.counts.add_to(&mut m);
            out.extend(p.out);
        }
        set_update_time(&mut m, started);
        m.num_rows_total = self
            .index
            .iter()
            .flat_map(|i| i.values())
            .map(|v| v.len() as i64)
            .sum();
        m.memory_used_bytes = memory;
        self.metrics = m;
        // (key, start) is unique: an unstable sort gives the same order.
        out.sort_unstable_by(|a, b| (&a.0, a.1.start).cmp(&(&b.0, b.1.start)));
        if out.is_empty() {
            return Ok(vec![]);
        }
        let mut cols: Vec<ArrayRef> = if self.keys.is_empty() {
            vec![]
        } else {
            let parser = self.key_conv.parser();
            self.key_conv
                .convert_rows(out.iter().map(|(k, _)| parser.parse(k)))?
        };
        let windows: Vec<Window> = out
            .iter()
            .map(|(_, s)| Window {
                start: Timestamp(s.start),
                end: Timestamp(s.end),
            })
            .collect();
        cols.insert(self.session_pos.min(cols.len()), Window::to_array(windows));
        let accs: Vec<&[Acc]> = out.iter().map(|(_, s)| s.accs.as_slice()).collect();
        let nkeys = self.keys.len() + 1;
        cols.extend(agg_arrays(&self.aggs, &self.schema, nkeys, &accs)?);
        Ok(vec![RecordBatch::try_new(self.schema.clone(), cols)?])
    }

    /// The input rows this batch drops as late (their one-event session
    /// ends at or before the watermark, as `route_slice` decides), for the
    /// late-rows side output.
    pub fn late_rows(&self, input: &[RecordBatch], wm: Watermarks) -> Result<Vec<RecordBatch>> {
        let (true, Some(late)) = (self.watermarked, wm.late_ms) else {
            return Ok(vec![]);
        };
        let gap = self.gap_us;
        let mut out = Vec::new();
        for b in input {
            out.extend(crate::ops::watermark::late_rows(
                b,
                self.time_col,
                late,
                |t| t.saturating_add(gap),
            )?);
        }
        Ok(out)
    }

    /// One task's events as one-event sessions, per state partition in
    /// input order, and how many it dropped as late.
    fn route_slice(
        &self,
        b: &RecordBatch,
        late_us: Option<i64>,
        n: usize,
    ) -> Result<(Vec<Routed>, i64)> {
        let mut parts: Vec<Routed> = (0..n).map(|_| Vec::new()).collect();
        let mut dropped = 0;
        if b.num_rows() == 0 {
            return Ok((parts, 0));
        }
        let ts: Vec<Option<i64>> = cast(b.column(self.time_col), &timestamp_type())?
            .as_primitive::<TimestampMicrosecondType>()
            .iter()
            .collect();
        let cols: Vec<ArrayRef> = self.keys.iter().map(|i| b.column(*i).clone()).collect();
        let rows = if cols.is_empty() {
            None
        } else {
            Some(self.key_conv.convert_columns(&cols)?)
        };
        let readers = self
            .aggs
            .iter()
            .map(|a| Reader::new(a.input.map(|i| b.column(i))))
            .collect::<Result<Vec<_>>>()?;
        for (r, t) in ts.iter().enumerate() {
            let Some(t) = *t else { continue };
            if late_us.is_some_and(|l| t.saturating_add(self.gap_us) <= l) {
                dropped += 1;
                continue;
            }
            let mut accs = self.new_accs();
            for (a, rd) in accs.iter_mut().zip(&readers) {
                a.update(rd, r)?;
            }
            let key = rows
                .as_ref()
                .map(|rs| rs.row(r).data().to_vec())
                .unwrap_or_default();
            let p = if n == 1 { 0 } else { partition_of(&key, n) };
            parts[p].push((
                key,
                Session {
                    start: t,
                    end: t.saturating_add(self.gap_us),
                    accs,
                    changed: true,
                },
            ));
        }
        Ok((parts, dropped))
    }

    fn process_partitions(
        &self,
        store: &mut PartitionedStore,
        index: &mut [Index],
        narrow: &Narrow,
        input: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<(Vec<PartitionOutput>, i64)> {
        let wm = ctx.watermarks;
        let n = store.partitions();
        if index.len() != n {
            return Err(WeirError::Config(
                "session window state not loaded for every partition".into(),
            ));
        }
        let late_us = if self.watermarked {
            wm.late_ms.map(|w| w.saturating_mul(1000))
        } else {
            None
        };
        let per_task: Vec<(Vec<Routed>, i64)> =
            narrow.map_tasks(input, ctx, |b| self.route_slice(&b, late_us, n))?;
        // Per partition, the tasks' sessions in input order.
        let mut per_part: Vec<Routed> = (0..n).map(|_| Vec::new()).collect();
        let mut dropped = 0;
        for (parts, d) in per_task {
            dropped += d;
            for (p, sessions) in parts.into_iter().enumerate() {
                per_part[p].extend(sessions);
            }
        }
        let inputs: Vec<_> = index.iter_mut().zip(per_part).collect();
        let outputs = store.map_parts(
            inputs,
            ctx.state_commit.as_ref(),
            |_, store, (index, new)| self.apply_partition(store, index, new, wm, mode),
        )?;
        Ok((outputs, dropped))
    }

    /// One state partition's part of a batch: merges its keys' new sessions
    /// into their stored ones, then emits closed sessions (append, evicting
    /// them) or all of them (complete).
    fn apply_partition(
        &self,
        store: &mut dyn StateStore,
        index: &mut Index,
        new: Routed,
        wm: Watermarks,
        mode: OutputMode,
    ) -> Result<PartitionOutput> {
        let mut po = PartitionOutput::default();
        // One session per event, grouped by key (each key's in input order).
        let mut by_key: HashMap<Vec<u8>, Vec<Session>> = HashMap::new();
        for (k, s) in new {
            by_key.entry(k).or_default().push(s);
        }
        for (key, sessions) in by_key {
            let old = index.remove(&key).unwrap_or_default();
            for s in &old {
                store.remove(&store_key(&key, s.start));
            }
            // Stored sessions first: on an equal start the stored one is the
            // earlier arrival (first/last, collect_list keep arrival order).
            let mut all = old;
            all.extend(sessions);
            let mut sessions = all;
            sessions.sort_by_key(|s| s.start);
            let mut merged: Vec<Session> = Vec::new();
            for s in sessions {
                match merged.last_mut() {
                    Some(cur) if s.start < cur.end => {
                        cur.end = cur.end.max(s.end);
                        for (a, o) in cur.accs.iter_mut().zip(&s.accs) {
                            a.merge(o)?;
                        }
                        cur.changed |= s.changed;
                    }
                    _ => merged.push(s),
                }
            }
            for s in &merged {
                let mut v = s.end.to_le_bytes().to_vec();
                for a in &s.accs {
                    a.encode(&mut v);
                }
                store.put(store_key(&key, s.start), v);
                if s.changed {
                    po.counts.updated += 1;
                }
            }
            index.insert(key, merged);
        }
        // Emit closed sessions (append) or all (complete).
        let t = Instant::now();
        match mode {
            OutputMode::Complete => {
                for (k, v) in index.iter() {
                    po.out.extend(v.iter().map(|s| (k.clone(), s.clone())));
                }
            }
            _ => {
                if let (true, Some(ev)) = (self.watermarked, wm.evict_ms) {
                    let ev_us = ev.saturating_mul(1000);
                    for (k, v) in index.iter_mut() {
                        v.retain(|s| {
                            if s.end <= ev_us {
                                store.remove(&store_key(k, s.start));
                                po.counts.removed += 1;
                                po.out.push((k.clone(), s.clone()));
                                false
                            } else {
                                po.counts.note_open(s.end, Some(s.start));
                                true
                            }
                        });
                    }
                    index.retain(|_, v| !v.is_empty());
                }
            }
        }
        for v in index.values_mut() {
            for s in v.iter_mut() {
                s.changed = false;
            }
        }
        po.counts.removals_ms = t.elapsed().as_millis() as i64;
        Ok(po)
    }

    /// Commits this batch's state as `version`, in every partition.
    pub fn commit(&mut self, version: u64) -> Result<()> {
        self.metrics.commit_time_ms = self.store.commit(version)?.as_millis() as i64;
        Ok(())
    }

    /// Undoes this batch's state changes and reloads the index.
    pub fn abort(&mut self) -> Result<()> {
        self.store.abort();
        match self.store.take() {
            Ok(store) => self.set_store(store),
            // Never opened: nothing to undo.
            Err(_) => Ok(()),
        }
    }
}

impl StatefulOperator for SessionAggregateOp {
    fn id(&self) -> usize {
        self.id
    }
    fn store_names(&self) -> &'static [&'static str] {
        &[""]
    }
    fn open_state(&mut self, stores: Vec<PartitionedStore>) -> Result<()> {
        self.set_store(single_store("session window", stores)?)
    }
    fn run(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        SessionAggregateOp::process(self, narrow, input, ctx, mode)
    }
    fn late_rows(
        &self,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        wm: Watermarks,
        _mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        SessionAggregateOp::late_rows(self, input, wm)
    }
    fn metrics_mut(&mut self) -> &mut StateOperatorProgress {
        &mut self.metrics
    }
    fn set_collect_max_values(&mut self, n: usize) {
        self.collect_max_values = n.max(1);
    }

    fn commit(&mut self, version: u64) -> Result<()> {
        SessionAggregateOp::commit(self, version)
    }
    fn commit_pending(&mut self, version: u64) -> bool {
        self.store.commit_pending(version)
    }
    fn abort(&mut self) -> Result<()> {
        SessionAggregateOp::abort(self)
    }
    fn metrics(&self) -> StateOperatorProgress {
        SessionAggregateOp::metrics(self)
    }
    fn needs_no_data_batch(&self, mode: OutputMode) -> bool {
        SessionAggregateOp::needs_no_data_batch(self, mode)
    }
    fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        SessionAggregateOp::decode_state(self, store, entries)
    }
}

impl SessionAggregateOp {
    /// Decodes state entries (key: the grouping keys in Arrow's row format,
    /// length-prefixed, then the session's start; value: its end and
    /// accumulators) into the grouping keys without the session window
    /// (`key`) and the session window with its aggregates as the query
    /// emits them (`value`), as Spark's session state shows them.
    pub fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        if !store.is_empty() {
            return Err(unknown_store("session window", store, &[""]));
        }
        let bad = || {
            WeirError::Config("damaged session state entry (written by a different query?)".into())
        };
        let mut keys = Vec::with_capacity(entries.len());
        let mut windows = Vec::with_capacity(entries.len());
        let mut accs = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            let (key, start, end, a) = self.decode_entry(k, v).ok_or_else(bad)?;
            keys.push(key);
            windows.push(Window {
                start: Timestamp(start),
                end: Timestamp(end),
            });
            accs.push(a);
        }
        let nkeys = self.keys.len() + 1;
        let session = self.session_pos.min(self.keys.len());
        let key_fields: Vec<ArrowField> = self.schema.fields()[..nkeys]
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != session)
            .map(|(_, f)| f.as_ref().clone())
            .collect();
        let key_cols: Vec<ArrayRef> = if self.keys.is_empty() {
            vec![]
        } else if entries.is_empty() {
            key_fields
                .iter()
                .map(|f| arrow::array::new_empty_array(f.data_type()))
                .collect()
        } else {
            let parser = self.key_conv.parser();
            self.key_conv
                .convert_rows(keys.iter().map(|k| parser.parse(k)))?
        };
        let mut value = vec![(
            self.schema.field(session).clone(),
            Window::to_array(windows),
        )];
        let accs: Vec<&[Acc]> = accs.iter().map(|a| a.as_slice()).collect();
        let aggs = agg_arrays(&self.aggs, &self.schema, nkeys, &accs)?;
        value.extend(
            self.schema.fields()[nkeys..]
                .iter()
                .map(|f| f.as_ref().clone())
                .zip(aggs),
        );
        DecodedState::new(
            key_fields.into_iter().zip(key_cols).collect(),
            value,
            entries.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::operator::test_stores::partitioned;
    use arrow::array::{StringArray, TimestampMicrosecondArray};

    fn schema() -> Schema {
        Schema::new(vec![
            ArrowField::new("ts", timestamp_type(), true),
            ArrowField::new("user", arrow::datatypes::DataType::Utf8, true),
        ])
    }

    /// 5-minute sessions per user, counted.
    fn op() -> SessionAggregateOp {
        let count = AggExec {
            func: weir_plan::AggFn::Count,
            input: None,
            input_type: None,
            name: "n".into(),
        };
        let keys = vec![(1, "user".to_string())];
        SessionAggregateOp::new(0, 0, 300_000, 0, "s", keys, vec![count], true, &schema()).unwrap()
    }

    /// Events at these minutes, of these users.
    fn input(events: &[(i64, &str)]) -> RecordBatch {
        let ts: Vec<i64> = events.iter().map(|e| e.0 * 60_000_000).collect();
        let users: Vec<&str> = events.iter().map(|e| e.1).collect();
        RecordBatch::try_new(
            Arc::new(schema()),
            vec![
                Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
                Arc::new(StringArray::from(users)),
            ],
        )
        .unwrap()
    }

    fn entries(op: &mut SessionAggregateOp) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
        let store = op.store.take().unwrap();
        let out = store
            .parts()
            .iter()
            .enumerate()
            .flat_map(|(p, s)| s.iter().map(move |(k, v)| (p, k.to_vec(), v.to_vec())))
            .collect();
        op.store.put(store);
        out
    }

    /// One batch of `input` under watermarks `wm`, in append mode.
    fn run(op: &mut SessionAggregateOp, input: &[RecordBatch], wm: Watermarks) -> Vec<RecordBatch> {
        let mut ctx = BatchContext {
            watermarks: wm,
            ..BatchContext::default()
        };
        op.process(&Narrow::none(), input, &mut ctx, OutputMode::Append)
            .unwrap()
    }

    /// Closes every session: the rows it emits, printed.
    fn close_all(op: &mut SessionAggregateOp) -> String {
        let wm = Watermarks {
            late_ms: None,
            evict_ms: Some(i64::MAX / 1000),
        };
        let out = run(op, &[], wm);
        arrow::util::pretty::pretty_format_batches(&out)
            .unwrap()
            .to_string()
    }

    /// Sessions stored by the whole stored key (as before sessions ran per
    /// partition) move to their key's partition when opened, and then merge
    /// and close as if they had always been there.
    #[test]
    fn sessions_stored_by_an_earlier_routing_move_to_their_keys_partition() {
        let users = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let events: Vec<(i64, &str)> = users
            .iter()
            .enumerate()
            .flat_map(|(i, u)| [(i as i64, *u), (i as i64 + 20, *u)])
            .collect();
        let mut now = op();
        now.set_store(partitioned(3)).unwrap();
        run(&mut now, &[input(&events)], Watermarks::default());
        let stored = entries(&mut now);
        assert_eq!(stored.len(), 16, "two sessions per user");
        for (p, k, _) in &stored {
            assert_eq!(partition_of(length_prefixed_key(k).unwrap(), 3), *p);
        }
        // The same sessions spread by the whole stored key.
        let mut old = partitioned(3);
        for (_, k, v) in stored {
            StateStore::put(&mut old, k, v);
        }
        let off = old
            .parts()
            .iter()
            .enumerate()
            .flat_map(|(p, s)| s.iter().map(move |(k, _)| (p, k.to_vec())))
            .filter(|(p, k)| partition_of(length_prefixed_key(k).unwrap(), 3) != *p)
            .count();
        assert!(off > 0, "some sessions start off their key's partition");
        let mut moved = op();
        moved.set_store(old).unwrap();
        let after = entries(&mut moved);
        assert_eq!(after.len(), 16);
        for (p, k, _) in &after {
            assert_eq!(partition_of(length_prefixed_key(k).unwrap(), 3), *p);
        }
        // Events every 4 minutes bridge each user's two sessions, in both.
        let bridge: Vec<(i64, &str)> = users
            .iter()
            .enumerate()
            .flat_map(|(i, u)| [4, 8, 12, 16].map(|m| (i as i64 + m, *u)))
            .collect();
        for o in [&mut now, &mut moved] {
            run(o, &[input(&bridge)], Watermarks::default());
        }
        let (want, got) = (close_all(&mut now), close_all(&mut moved));
        assert_eq!(got, want);
        assert_eq!(
            want.matches("| 6 ").count(),
            8,
            "one session of 6 events per user: {want}"
        );
    }

    /// The earliest open session's end and start are the operator's next
    /// eviction, over all partitions; none once every session closed.
    #[test]
    fn metrics_report_the_earliest_open_session() {
        use crate::progress::held::{NEXT_EVICTION_TIME_MS, NEXT_EVICTION_WINDOW_START_MS};
        let mut o = op();
        o.set_store(partitioned(3)).unwrap();
        let wm = |m: i64| Watermarks {
            late_ms: None,
            evict_ms: Some(m * 60_000),
        };
        let events = [(0, "a"), (1, "a"), (10, "b"), (12, "c"), (30, "d")];
        run(&mut o, &[input(&events)], wm(7));
        // a's session [0, 6) closed; b's [10, 15) is the earliest open.
        let m = o.metrics();
        assert_eq!(m.custom_metrics[NEXT_EVICTION_TIME_MS], 15 * 60_000);
        assert_eq!(m.custom_metrics[NEXT_EVICTION_WINDOW_START_MS], 10 * 60_000);
        close_all(&mut o);
        assert!(!o
            .metrics()
            .custom_metrics
            .contains_key(NEXT_EVICTION_TIME_MS));
    }
}
