//! Session-window aggregation (Spark's `session_window(col, gap)`): per
//! key, events less than `gap` apart form one session `[first, last + gap)`;
//! sessions merge when a new event bridges them. Append mode emits a session
//! once the watermark passes its end; complete mode emits all of them (update
//! mode is refused, as by Spark).
//!
//! State: per key and session start, the session's end and accumulators
//! (an in-memory index by key is rebuilt from the store on start).

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
use crate::ops::aggregate::{agg_arrays, kind_of, Acc, AggExec, Kind, Reader, Watermarks};
use crate::ops::operator::{single_store, StatefulOperator};
use crate::ops::BatchContext;
use crate::progress::StateOperatorProgress;
use crate::row::{timestamp_type, ArrowValue, Timestamp, Window};
use crate::state::{PartitionedStore, StateStore};

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
    index: HashMap<Vec<u8>, Vec<Session>>,
    store: Option<Box<dyn StateStore>>,
    metrics: StateOperatorProgress,
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
            let kind = a.input_type.as_ref().map(kind_of).unwrap_or(Kind::Int);
            kinds.push(kind);
            let t = match a.func {
                weir_plan::AggFn::Count | weir_plan::AggFn::CountDistinct => {
                    arrow::datatypes::DataType::Int64
                }
                weir_plan::AggFn::Avg => arrow::datatypes::DataType::Float64,
                weir_plan::AggFn::Sum if kind == Kind::Float => arrow::datatypes::DataType::Float64,
                weir_plan::AggFn::Sum => arrow::datatypes::DataType::Int64,
                _ => a
                    .input_type
                    .clone()
                    .unwrap_or(arrow::datatypes::DataType::Int64),
            };
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
            index: HashMap::new(),
            store: None,
            metrics: StateOperatorProgress::new("sessionWindowStateStoreSaveExec"),
        })
    }

    /// The output schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn new_accs(&self) -> Vec<Acc> {
        self.aggs
            .iter()
            .zip(&self.kinds)
            .map(|(a, k)| Acc::new(a.func, *k))
            .collect()
    }

    /// Gives the operator its store and loads the index from it.
    pub fn set_store(&mut self, store: Box<dyn StateStore>) -> Result<()> {
        let bad = || {
            WeirError::Config("damaged session state entry (written by a different query?)".into())
        };
        self.index.clear();
        for (k, v) in store.iter() {
            let kl = u32::from_le_bytes(k.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?)
                as usize;
            let key = k.get(4..4 + kl).ok_or_else(bad)?.to_vec();
            let start = i64::from_be_bytes(
                k.get(4 + kl..)
                    .ok_or_else(bad)?
                    .try_into()
                    .map_err(|_| bad())?,
            );
            let end =
                i64::from_le_bytes(v.get(..8).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
            let mut accs = self.new_accs();
            let mut pos = 8;
            for a in &mut accs {
                a.decode(&v, &mut pos).ok_or_else(bad)?;
            }
            self.index.entry(key).or_default().push(Session {
                start,
                end,
                accs,
                changed: false,
            });
        }
        // A failed read while loading must not pass for missing state.
        store.check()?;
        for v in self.index.values_mut() {
            v.sort_by_key(|s| s.start);
        }
        self.store = Some(store);
        Ok(())
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
    pub fn process(
        &mut self,
        input: &[RecordBatch],
        wm: Watermarks,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        let mut m = StateOperatorProgress::new("sessionWindowStateStoreSaveExec");
        let late_us = if self.watermarked {
            wm.late_ms.map(|w| w.saturating_mul(1000))
        } else {
            None
        };
        // One session per event, grouped by key.
        let mut new: HashMap<Vec<u8>, Vec<Session>> = HashMap::new();
        for b in input {
            if b.num_rows() == 0 {
                continue;
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
                if late_us.is_some_and(|l| t + self.gap_us <= l) {
                    m.num_rows_dropped_by_watermark += 1;
                    continue;
                }
                let mut accs = self.new_accs();
                for (a, rd) in accs.iter_mut().zip(&readers) {
                    a.update(rd, r);
                }
                let key = rows
                    .as_ref()
                    .map(|rs| rs.row(r).data().to_vec())
                    .unwrap_or_default();
                new.entry(key).or_default().push(Session {
                    start: t,
                    end: t + self.gap_us,
                    accs,
                    changed: true,
                });
            }
        }
        // Merge each key's new sessions into its stored ones.
        let store = self
            .store
            .as_mut()
            .ok_or_else(|| WeirError::Config("state store not opened".into()))?;
        for (key, mut sessions) in new {
            let old = self.index.remove(&key).unwrap_or_default();
            for s in &old {
                store.remove(&store_key(&key, s.start));
            }
            sessions.extend(old);
            sessions.sort_by_key(|s| s.start);
            let mut merged: Vec<Session> = Vec::new();
            for s in sessions {
                match merged.last_mut() {
                    Some(cur) if s.start < cur.end => {
                        cur.end = cur.end.max(s.end);
                        for (a, o) in cur.accs.iter_mut().zip(&s.accs) {
                            a.merge(o);
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
                    m.num_rows_updated += 1;
                }
            }
            self.index.insert(key, merged);
        }
        m.all_updates_time_ms = started.elapsed().as_millis() as i64;
        // Emit closed sessions (append) or all (complete).
        let t = Instant::now();
        let mut out: Vec<(Vec<u8>, Session)> = Vec::new();
        match mode {
            OutputMode::Complete => {
                for (k, v) in &self.index {
                    out.extend(v.iter().map(|s| (k.clone(), s.clone())));
                }
            }
            _ => {
                if let (true, Some(ev)) = (self.watermarked, wm.evict_ms) {
                    let ev_us = ev.saturating_mul(1000);
                    for (k, v) in self.index.iter_mut() {
                        v.retain(|s| {
                            if s.end <= ev_us {
                                store.remove(&store_key(k, s.start));
                                m.num_rows_removed += 1;
                                out.push((k.clone(), s.clone()));
                                false
                            } else {
                                true
                            }
                        });
                    }
                    self.index.retain(|_, v| !v.is_empty());
                }
            }
        }
        for v in self.index.values_mut() {
            for s in v.iter_mut() {
                s.changed = false;
            }
        }
        m.all_removals_time_ms = t.elapsed().as_millis() as i64;
        m.num_rows_total = self.index.values().map(|v| v.len() as i64).sum();
        m.memory_used_bytes = store.memory_used_bytes() as i64;
        self.metrics = m;
        out.sort_by(|a, b| (&a.0, a.1.start).cmp(&(&b.0, b.1.start)));
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
        cols.extend(agg_arrays(
            &self.aggs,
            &self.kinds,
            &self.schema,
            nkeys,
            &accs,
        )?);
        Ok(vec![RecordBatch::try_new(self.schema.clone(), cols)?])
    }

    /// Commits this batch's state as `version`.
    pub fn commit(&mut self, version: u64) -> Result<()> {
        let t = Instant::now();
        if let Some(s) = self.store.as_mut() {
            s.commit(version)?;
        }
        self.metrics.commit_time_ms = t.elapsed().as_millis() as i64;
        Ok(())
    }

    /// Undoes this batch's state changes and reloads the index.
    pub fn abort(&mut self) -> Result<()> {
        if let Some(mut s) = self.store.take() {
            s.abort();
            self.set_store(s)?;
        }
        Ok(())
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
        self.set_store(single_store("session window", stores)?.into_store())
    }
    fn process(
        &mut self,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        SessionAggregateOp::process(self, input, ctx.watermarks, mode)
    }
    fn commit(&mut self, version: u64) -> Result<()> {
        SessionAggregateOp::commit(self, version)
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
}
