//! Streaming aggregation: group by time windows and columns, fold each
//! batch's rows into per-group accumulators, keep them in a [`StateStore`],
//! and emit per output mode with Spark's semantics:
//!
//! - rows are first aggregated within the batch; a group is late (dropped and
//!   counted in `numRowsDroppedByWatermark`) when its window end (or its
//!   watermarked key) is at or before the previous batch's watermark;
//! - complete: every group, every batch; no eviction;
//! - update: the groups this batch changed; groups whose window closed
//!   (end <= this batch's watermark) are evicted silently;
//! - append: the groups whose window closed, once, as they are evicted.
//!
//! State: key = the group's key columns in Arrow's row format; value = the
//! group's eviction time followed by its accumulators.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use arrow::compute::{cast, take};
use arrow::datatypes::{
    DataType as ArrowType, Field as ArrowField, Float64Type, Schema, SchemaRef,
};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use weir_plan::{AggFn, OutputMode};

pub(crate) mod accumulators;
mod group_set;
mod grouper;
mod shared;

pub(crate) use accumulators::{agg_arrays, kind_of, output_type, Acc, Kind, Reader};

use crate::error::{Result, WeirError};
use crate::ops::ahead::{Prepared, Preparer};
use crate::ops::narrow::{Narrow, NarrowSteps, SliceEventTimes};
use crate::ops::operator::{
    single_store, unknown_store, DecodedState, OperatorState, PartitionCounts, StatefulOperator,
};
use crate::ops::window::WindowAssigner;
use crate::ops::BatchContext;
use crate::progress::StateOperatorProgress;
use crate::row::{timestamp_type, Timestamp, Window};
use crate::state::{partition_of, PartitionedStore, StateStore};
use group_set::GroupSet;
use grouper::{Grouper, KeyCol, Keyer, RowKey, TaskGroups};
use rayon::prelude::*;

/// One grouping key.
pub enum KeyExec {
    /// A time window, output as `struct<start, end>`.
    Window {
        /// The window assignment.
        assigner: WindowAssigner,
        /// Output name.
        name: String,
        /// True when the window's time column carries the watermark.
        watermarked: bool,
    },
    /// An input column.
    Column {
        /// Column index in the input.
        index: usize,
        /// Output name.
        name: String,
        /// True when the column carries the watermark (then it bounds state).
        watermarked: bool,
    },
}

/// One aggregate.
pub struct AggExec {
    /// The function.
    pub func: AggFn,
    /// Input column index (None for `count(*)`).
    pub input: Option<usize>,
    /// Input Arrow type.
    pub input_type: Option<ArrowType>,
    /// Output name.
    pub name: String,
}

/// The aggregation operator.
pub struct AggregateOp {
    /// Index among the query's stateful operators.
    pub id: usize,
    /// What its tasks read (shared with the next batch's read ahead, which
    /// routes its rows while this batch runs).
    core: Arc<AggCore>,
    store: OperatorState,
    metrics: StateOperatorProgress,
}

/// The aggregation as its routing tasks read it: keys, aggregates and
/// formats, no state.
pub struct AggCore {
    keys: Vec<KeyExec>,
    aggs: Vec<AggExec>,
    kinds: Vec<Kind>,
    converter: Option<RowConverter>,
    schema: SchemaRef,
    /// The key position that bounds state (window end or watermarked column).
    watermark_key: Option<usize>,
    /// Each aggregate as written (`collect_list(user) AS users`), for errors.
    calls: Vec<String>,
    /// `spark.sql.streaming.weir.collectMaxValues`.
    collect_max_values: AtomicUsize,
    /// How many groups a task found lately (the last task of a fixed cut,
    /// the most any task of a shared batch found): the next task's first
    /// guess.
    groups_hint: AtomicUsize,
}

impl std::ops::Deref for AggregateOp {
    type Target = AggCore;

    fn deref(&self) -> &AggCore {
        &self.core
    }
}

/// The starts of the windows a timestamp falls in, oldest first: in `i64`
/// arithmetic when the timestamp is far enough from the ends of time, else
/// through [`WindowAssigner::starts`] (which leaves out windows that cannot
/// be represented).
enum Starts {
    /// `k` candidates left before `last` (the newest start), stepping by `slide`.
    Within {
        last: i64,
        k: i64,
        slide: i64,
        size: i64,
        t: i64,
    },
    NearTheEnds(crate::ops::window::WindowStarts),
}

impl Iterator for Starts {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        match self {
            Starts::Within {
                last,
                k,
                slide,
                size,
                t,
            } => {
                while *k > 0 {
                    *k -= 1;
                    let start = *last - *k * *slide;
                    if start <= *t && *t < start + *size {
                        return Some(start);
                    }
                }
                None
            }
            Starts::NearTheEnds(s) => s.next(),
        }
    }
}

/// A task's rows as its grouping loop reads them: their event times and
/// the window they fall in, and what evicts a new group.
struct TaskRows<'a> {
    /// The next rows to group (a range of the task's batch), until `None`.
    rows: &'a dyn Fn() -> Option<Range<usize>>,
    /// The window's time column (`None` without a window).
    times: Option<&'a arrow::array::TimestampMicrosecondArray>,
    /// The window.
    window: Option<&'a WindowAssigner>,
    /// Within this of the ends of time, windows are assigned in i128
    /// (`None`: always).
    margin: Option<i64>,
    /// Windows a row can fall in (one when tumbling).
    per_row: i64,
    /// The window's size (µs).
    size: i64,
    /// The window's slide (µs; its size when tumbling).
    slide: i64,
    /// Whether a group is evicted at its window's end.
    window_evicts: bool,
    /// Else the watermarked key column that evicts it, if any.
    column_evict: Option<&'a arrow::array::TimestampMicrosecondArray>,
}

impl TaskRows<'_> {
    /// Puts every row it is handed (`rows`) in its groups (one per window
    /// it falls in) with
    /// `keyer`, folding them in with `fold` every [`grouper::FOLD_EVERY`]
    /// (row, window) pairs (once, at the end, when rows are only counted);
    /// returns how many rows lost windows near the ends of time.
    /// Generic over the key's shape: the loop is compiled once per shape,
    /// each copy a function of its own (inlined into one, they crowded out
    /// the inlining of the key's hash).
    #[inline(never)]
    fn group<K: RowKey>(
        &self,
        mut keyer: K,
        g: &mut Grouper,
        fold: &impl Fn(&mut Grouper) -> Result<()>,
    ) -> Result<i64> {
        let (size, slide, per_row) = (self.size, self.slide, self.per_row);
        let mut lost = 0i64;
        // With `K::RUNS`: the last row's newest window start, and the
        // times it holds for.
        let (mut span_lo, mut span_hi) = (i64::MAX, i64::MIN);
        // A range of rows at a time (nested loops: the row loop stays as
        // tight as over one range).
        while let Some(range) = (self.rows)() {
            for r in range {
                if g.should_fold() {
                    fold(g)?;
                }
                let column_evict_at = || {
                    self.column_evict
                        .and_then(|c| c.is_valid(r).then(|| c.value(r)))
                        .unwrap_or(i64::MAX)
                };
                let Some(ts) = self.times else {
                    keyer.row(r);
                    keyer.add_row(g, r, 0, column_evict_at);
                    continue;
                };
                // A new group's eviction time: its window's end, or the row's
                // watermarked key column.
                let evict_at = |start: i64| {
                    if self.window_evicts {
                        start + size
                    } else {
                        column_evict_at()
                    }
                };
                if ts.is_null(r) {
                    continue; // Spark leaves rows with a null time out
                }
                let t = ts.value(r);
                let near_the_ends = self
                    .margin
                    .is_none_or(|m| t.checked_sub(m).is_none() || t.checked_add(m).is_none());
                let Some(assigner) = self.window else {
                    continue;
                };
                // Oldest window first.
                let starts = if near_the_ends {
                    if assigner.loses_windows(t) {
                        lost += 1;
                    }
                    Starts::NearTheEnds(assigner.starts(t))
                } else {
                    let last = if !K::RUNS {
                        t - t.rem_euclid(slide)
                    } else {
                        if !(span_lo <= t && t < span_hi) {
                            // Not near the ends: `+ slide` cannot overflow.
                            span_lo = t - t.rem_euclid(slide);
                            span_hi = span_lo + slide;
                        }
                        span_lo
                    };
                    if size == slide {
                        // Tumbling: the row's one window starts at `last`.
                        keyer.row(r);
                        keyer.add_row(g, r, last, || evict_at(last));
                        continue;
                    }
                    Starts::Within {
                        last,
                        k: per_row,
                        slide,
                        size,
                        t,
                    }
                };
                keyer.row(r);
                for start in starts {
                    keyer.add_row(g, r, start, || evict_at(start));
                }
            }
        }
        fold(g)?;
        Ok(lost)
    }
}

/// A task's batch as its grouping reads it ([`AggCore::slice_input`]):
/// the window's times, each key column once (floats normalised), the
/// watermarked key column that evicts a group, and each aggregate's input.
struct SliceInput<'b> {
    batch: &'b RecordBatch,
    times: Option<arrow::array::TimestampMicrosecondArray>,
    key_values: Vec<Option<ArrayRef>>,
    cols: Vec<KeyCol>,
    column_evict: Option<arrow::array::TimestampMicrosecondArray>,
    readers: Vec<Reader>,
}

/// One state partition's share of a micro-batch: what it emits (the
/// groups `rows` of `groups`) and counts.
struct PartitionOutput {
    groups: GroupSet,
    rows: Vec<u32>,
    counts: PartitionCounts,
}

/// One task's groups (of one slice), which of them go to each state
/// partition, and the rows it found outside any representable window.
struct TaskShare {
    groups: TaskGroups,
    parts: Vec<Vec<u32>>,
    lost: i64,
    /// What the narrow steps' watermarks saw in the rows the task grouped.
    seen: SliceEventTimes,
}

/// The batch's groups routed to the state partitions: merged per partition
/// (`sets`) but for the last wave of tasks, which each partition merges in
/// its own task.
struct Routed {
    sets: Vec<GroupSet>,
    last: Vec<TaskShare>,
    /// Rows outside any representable window, in every wave.
    lost: i64,
    /// What the narrow steps' watermarks saw, in every wave but the last.
    seen: Vec<SliceEventTimes>,
}

/// The partitions' sets for a batch whose groups came from one task (or
/// none): a task's groups are distinct, so its partitions copy them out
/// without lookups (sets without an index), with room for their share.
fn one_task_sets(width: usize, n: usize, task: Option<&TaskShare>) -> Vec<GroupSet> {
    (0..n)
        .map(|p| GroupSet::new(width, task.map_or(0, |t| t.parts[p].len())))
        .collect()
}

/// Per-batch watermarks, in ms.
#[derive(Debug, Clone, Copy, Default)]
pub struct Watermarks {
    /// Rows at or before this are late (the previous batch's watermark).
    pub late_ms: Option<i64>,
    /// State at or before this is evicted (this batch's watermark).
    pub evict_ms: Option<i64>,
}

impl AggCore {
    fn new_accs(&self) -> Vec<Acc> {
        self.aggs
            .iter()
            .zip(&self.kinds)
            .map(|(a, k)| Acc::bounded(a.func, *k, self.collect_max_values.load(Ordering::Relaxed)))
            .collect()
    }

    /// Folds `from` (later rows) into `into`, an accumulator's error
    /// naming the aggregate and the group (`key` in the state's format).
    fn merge_accs(&self, into: &mut [Acc], from: &[Acc], key: &[u8]) -> Result<()> {
        for (ai, (a, o)) in into.iter_mut().zip(from).enumerate() {
            a.merge(o)
                .map_err(|e| self.in_group(ai, || self.describe_key(key), e))?;
        }
        Ok(())
    }

    /// An accumulator's error, with the aggregate and the group it concerns.
    fn in_group(&self, ai: usize, group: impl FnOnce() -> String, e: WeirError) -> WeirError {
        WeirError::Config(format!(
            "aggregate `{}` of the group {}: {e}",
            self.calls[ai],
            group()
        ))
    }

    /// A group's keys as `name=value` (from its state key).
    fn describe_key(&self, key: &[u8]) -> String {
        let Some(conv) = &self.converter else {
            return "of all rows (no grouping keys)".into();
        };
        let parser = conv.parser();
        match conv.convert_rows([parser.parse(key)]) {
            Ok(cols) => self.describe(&cols),
            Err(_) => "(whose key could not be read)".into(),
        }
    }

    /// A group's keys as `name=value`, from row `r` of `batch` (in the
    /// window starting `start` µs, when grouped by a window).
    fn describe_row(&self, batch: &RecordBatch, r: usize, start: i64) -> String {
        if self.keys.is_empty() {
            return "of all rows (no grouping keys)".into();
        }
        let ts = |t: i64| -> ArrayRef {
            Arc::new(arrow::array::TimestampMicrosecondArray::from(vec![t]).with_timezone("UTC"))
        };
        let mut cols: Vec<ArrayRef> = Vec::new();
        for k in &self.keys {
            match k {
                KeyExec::Window { assigner, .. } => {
                    cols.push(ts(start));
                    cols.push(ts(start.saturating_add(assigner.size_us)));
                }
                KeyExec::Column { index, .. } => cols.push(batch.column(*index).slice(r, 1)),
            }
        }
        self.describe(&cols)
    }

    /// `name=value, ...` of one group's key columns (a window is two).
    fn describe(&self, cols: &[ArrayRef]) -> String {
        let options = arrow::util::display::FormatOptions::default().with_null("null");
        let show = |a: Option<&ArrayRef>| {
            a.and_then(|a| {
                arrow::util::display::ArrayFormatter::try_new(a.as_ref(), &options)
                    .ok()
                    .map(|f| f.value(0).to_string())
            })
            .unwrap_or_else(|| "?".into())
        };
        let mut it = cols.iter();
        let parts: Vec<String> = self
            .keys
            .iter()
            .map(|k| match k {
                KeyExec::Window { name, .. } => {
                    let (start, end) = (show(it.next()), show(it.next()));
                    format!("{name}=[{start}, {end})")
                }
                KeyExec::Column { name, .. } => format!("{name}={}", show(it.next())),
            })
            .collect();
        parts.join(", ")
    }

    /// Aggregates one batch within itself: its groups (state keys,
    /// eviction times, accumulators) in first-seen order.
    ///
    /// Rows are grouped by a batch-local key (the window start, then each key
    /// column's value bytes) without expanding or copying the input; only the
    /// distinct groups are converted to the state's row-format keys. Each
    /// group sees its rows in input order (windows oldest first), so within
    /// one task the result matches a row-by-row fold exactly (float sums
    /// included); tasks' partial results are then merged in input order, so
    /// a float sum over more than one task can differ from a row fold in its
    /// last bits (as Spark's partial aggregation does), never with the
    /// partition or worker count. Also returns the rows that lost a window
    /// that cannot be represented.
    fn partial(&self, batch: &RecordBatch) -> Result<(TaskGroups, i64)> {
        let input = self.slice_input(batch)?;
        let all = std::cell::Cell::new(Some(0..batch.num_rows()));
        let (groups, lost) = self.group_slice(&input, &|| all.take())?;
        self.groups_hint.store(groups.len(), Ordering::Relaxed);
        Ok((groups, lost))
    }

    /// The window key, if any: its position among the keys, and its assigner.
    fn window_key(&self) -> Option<(usize, &WindowAssigner)> {
        self.keys.iter().enumerate().find_map(|(ki, k)| match k {
            KeyExec::Window { assigner, .. } => Some((ki, assigner)),
            KeyExec::Column { .. } => None,
        })
    }

    /// `batch`'s columns as the grouping reads them, read (and cast) once
    /// however many tasks group its rows.
    fn slice_input<'b>(&self, batch: &'b RecordBatch) -> Result<SliceInput<'b>> {
        let times = match self.window_key() {
            Some((_, a)) => Some(a.time_array(batch)?),
            None => None,
        };
        let mut cols = Vec::new();
        let mut column_evict: Option<arrow::array::TimestampMicrosecondArray> = None;
        // Each key column once, floats normalised as Spark groups them.
        let key_values: Vec<Option<ArrayRef>> = self
            .keys
            .iter()
            .map(|k| match k {
                KeyExec::Column { index, .. } => Some(normalize_floats(batch.column(*index))),
                KeyExec::Window { .. } => None,
            })
            .collect();
        for (ki, k) in self.keys.iter().enumerate() {
            if let (KeyExec::Column { .. }, Some(a)) = (k, &key_values[ki]) {
                cols.push(KeyCol::new(a)?);
                if self.watermark_key == Some(ki) {
                    column_evict = Some(
                        cast(a, &timestamp_type())?
                            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                            .clone(),
                    );
                }
            }
        }
        let readers = self
            .aggs
            .iter()
            .map(|a| Reader::new(a.input.map(|i| batch.column(i))))
            .collect::<Result<Vec<_>>>()?;
        Ok(SliceInput {
            batch,
            times,
            key_values,
            cols,
            column_evict,
            readers,
        })
    }

    /// The groups of the rows of `input` that `rows` hands out, a range at
    /// a time until `None` (see [`AggCore::partial`]).
    fn group_slice(
        &self,
        input: &SliceInput<'_>,
        rows: &dyn Fn() -> Option<Range<usize>>,
    ) -> Result<(TaskGroups, i64)> {
        let SliceInput {
            batch,
            times,
            key_values,
            cols,
            column_evict,
            readers,
        } = input;
        let n = batch.num_rows();
        let window = self.window_key();
        let (size, slide) = window
            .map(|(_, a)| (a.size_us, a.slide_us))
            .unwrap_or((1, 1));
        // Windows a row can fall in (one when tumbling).
        let per_row = window.map(|(_, a)| a.max_windows_per_row()).unwrap_or(1);
        // Within `margin` of the ends of time, windows are assigned in i128
        // (and those that cannot be represented left out, counted).
        let margin = size.checked_add(slide);
        let window_evicts = matches!(window, Some((ki, _)) if self.watermark_key == Some(ki));
        // Room for as many groups as the last task found (at most a group
        // per row and window), so the index is not regrown as it fills.
        let hint = self
            .groups_hint
            .load(Ordering::Relaxed)
            .min(n.saturating_mul(per_row.max(1) as usize));
        // `count(*)`s alone (no column read): rows are only counted.
        let rows_only = readers.iter().all(|r| matches!(r, Reader::None));
        let mut g = Grouper::new(self.new_accs(), hint, rows_only);
        let fold = |g: &mut Grouper| {
            g.fold(readers).map_err(|(ai, r, start, e)| {
                self.in_group(ai, || self.describe_row(batch, r, start), e)
            })
        };
        let rows = TaskRows {
            rows,
            times: times.as_ref(),
            window: window.map(|(_, a)| a),
            margin,
            per_row,
            size,
            slide,
            window_evicts,
            column_evict: column_evict.as_ref(),
        };
        let lost = match Keyer::new(cols, times.is_some(), hint) {
            Keyer::Window(k) => rows.group(k, &mut g, &fold)?,
            Keyer::Packed(k) => rows.group(k, &mut g, &fold)?,
            Keyer::Bytes(k) => rows.group(k, &mut g, &fold)?,
        };
        // No groups, or no grouping keys: no state keys to build.
        let (Some(conv), false) = (&self.converter, g.len() == 0) else {
            return Ok((g.finish(None), lost));
        };
        // The distinct groups' key columns, in the state's row format.
        let firsts = UInt32Array::from(std::mem::take(&mut g.firsts));
        let mut key_arrays: Vec<ArrayRef> = Vec::new();
        for (k, values) in self.keys.iter().zip(key_values) {
            match k {
                KeyExec::Window { assigner, .. } => {
                    let ts = |v: Vec<i64>| -> ArrayRef {
                        Arc::new(
                            arrow::array::TimestampMicrosecondArray::from(v).with_timezone("UTC"),
                        )
                    };
                    let ends = g.starts.iter().map(|s| s + assigner.size_us).collect();
                    key_arrays.push(ts(g.starts.clone()));
                    key_arrays.push(ts(ends));
                }
                KeyExec::Column { index, .. } => {
                    let a = values.as_ref().unwrap_or(batch.column(*index));
                    key_arrays.push(take(a.as_ref(), &firsts, None)?)
                }
            }
        }
        let rows = conv.convert_columns(&key_arrays)?;
        Ok((g.finish(Some(rows)), lost))
    }

    /// The batch's groups per state partition: each task (a slice of the
    /// input) aggregated on its own, routed by key hash, and merged into its
    /// partition in input order (so a result never depends on how many
    /// workers computed it). Tasks run in waves of a few per worker, each
    /// wave merged before the next starts, so a large batch holds one wave's
    /// partial groups at a time, not every slice's. The last wave is
    /// returned unmerged: each partition merges it in its own task, right
    /// before applying it to its store.
    /// Also returns the rows that lost a window that cannot be represented.
    /// Where how rows are split cannot change a result, the slices are
    /// shared among the free workers instead (`shared.rs`).
    fn route(&self, narrow: &Narrow, input: &[RecordBatch], n: usize) -> Result<Routed> {
        if self.shares_rows(narrow) {
            return self.route_shared(narrow, input, n);
        }
        let tasks = crate::ops::tasks::slices(input);
        let width = self.aggs.len();
        // A task's groups, and which of them go to each partition.
        let task = |slice: &RecordBatch| -> Result<TaskShare> {
            let (b, seen) = narrow.apply(slice)?;
            let (groups, lost) = self.partial(&b)?;
            Ok(self.routed_share(groups, lost, seen, n))
        };
        if tasks.len() <= 1 {
            let last: Vec<TaskShare> = tasks.first().map(task).transpose()?.into_iter().collect();
            let sets = one_task_sets(width, n, last.first());
            let lost = last.iter().map(|t| t.lost).sum();
            return Ok(Routed {
                sets,
                last,
                lost,
                seen: vec![],
            });
        }
        let wave = rayon::current_num_threads().max(1) * 2;
        // Each partition holds about its share of a task's groups (the
        // tasks of a batch mostly see the same groups).
        // Never more than this batch's rows: a hint from a far larger batch
        // must not reserve room for groups this one cannot have.
        let rows: usize = tasks.iter().map(|t| t.num_rows()).sum();
        let share = self.groups_hint.load(Ordering::Relaxed).min(rows) / n.max(1);
        let mut sets: Vec<GroupSet> = (0..n).map(|_| GroupSet::indexed(width, share)).collect();
        let mut lost = 0;
        let mut seen = Vec::new();
        let mut waves: Vec<&[RecordBatch]> = tasks.chunks(wave).collect();
        // More than one task here, so at least one wave.
        let last_wave = waves.pop().unwrap_or_default();
        for chunk in waves {
            let per_task: Vec<TaskShare> = chunk.par_iter().map(task).collect::<Result<_>>()?;
            lost += per_task.iter().map(|t| t.lost).sum::<i64>();
            let merge = |(p, set): (usize, &mut GroupSet)| self.merge_wave(p, set, &per_task);
            if n > 1 {
                sets.par_iter_mut().enumerate().try_for_each(merge)?;
            } else {
                sets.iter_mut().enumerate().try_for_each(merge)?;
            }
            seen.extend(per_task.into_iter().map(|t| t.seen));
        }
        let last: Vec<TaskShare> = last_wave.par_iter().map(task).collect::<Result<_>>()?;
        lost += last.iter().map(|t| t.lost).sum::<i64>();
        Ok(Routed {
            sets,
            last,
            lost,
            seen,
        })
    }

    /// A task's groups with which of them go to each of the `n` partitions.
    fn routed_share(
        &self,
        groups: TaskGroups,
        lost: i64,
        seen: SliceEventTimes,
        n: usize,
    ) -> TaskShare {
        let mut parts: Vec<Vec<u32>> = (0..n).map(|_| Vec::new()).collect();
        for i in 0..groups.len() {
            let p = if n == 1 {
                0
            } else {
                partition_of(groups.key(i), n)
            };
            parts[p].push(i as u32);
        }
        TaskShare {
            groups,
            parts,
            lost,
            seen,
        }
    }

    /// Merges partition `p`'s groups from every task of a wave into `set`,
    /// in input order. A set without an index (one task's groups, which
    /// are distinct) takes them as they are.
    fn merge_wave(&self, p: usize, set: &mut GroupSet, wave: &[TaskShare]) -> Result<()> {
        if !set.is_indexed() {
            debug_assert!(wave.len() <= 1, "a set without an index takes one task");
            for t in wave {
                for &i in &t.parts[p] {
                    let i = i as usize;
                    set.push(t.groups.key(i), t.groups.evict_at(i), t.groups.accs(i));
                }
            }
            return Ok(());
        }
        for t in wave {
            for &i in &t.parts[p] {
                let i = i as usize;
                let k = t.groups.key(i);
                set.merge(k, t.groups.evict_at(i), t.groups.accs(i), |into, from| {
                    self.merge_accs(into, from, k)
                })?;
            }
        }
        Ok(())
    }
}

impl AggregateOp {
    /// Builds the operator over `input`.
    pub fn new(
        id: usize,
        keys: Vec<KeyExec>,
        aggs: Vec<AggExec>,
        input: &Schema,
    ) -> Result<AggregateOp> {
        let mut key_fields = Vec::new();
        let mut out_fields = Vec::new();
        let mut watermark_key = None;
        for (i, k) in keys.iter().enumerate() {
            match k {
                KeyExec::Window {
                    name, watermarked, ..
                } => {
                    key_fields.push(SortField::new(timestamp_type()));
                    key_fields.push(SortField::new(timestamp_type()));
                    out_fields.push(ArrowField::new(name, crate::row::window_type(), true));
                    if *watermarked && watermark_key.is_none() {
                        watermark_key = Some(i);
                    }
                }
                KeyExec::Column {
                    index,
                    name,
                    watermarked,
                } => {
                    let t = input.field(*index).data_type().clone();
                    key_fields.push(SortField::new(t.clone()));
                    out_fields.push(ArrowField::new(name, t, true));
                    if *watermarked && watermark_key.is_none() {
                        watermark_key = Some(i);
                    }
                }
            }
        }
        let mut kinds = Vec::new();
        let mut calls = Vec::new();
        for a in &aggs {
            let column = a.input.map_or("*", |i| input.field(i).name().as_str());
            calls.push(format!("{} AS {}", a.func.call(column), a.name));
            kinds.push(a.input_type.as_ref().map(kind_of).unwrap_or(Kind::Int));
            let out_t = output_type(a.func, a.input_type.as_ref());
            out_fields.push(ArrowField::new(&a.name, out_t, true));
        }
        let converter = if key_fields.is_empty() {
            None
        } else {
            Some(RowConverter::new(key_fields)?)
        };
        Ok(AggregateOp {
            id,
            core: Arc::new(AggCore {
                keys,
                aggs,
                kinds,
                converter,
                schema: Arc::new(Schema::new(out_fields)),
                watermark_key,
                calls,
                collect_max_values: AtomicUsize::new(crate::config::COLLECT_MAX_VALUES_DEFAULT),
                groups_hint: AtomicUsize::new(0),
            }),
            store: OperatorState::default(),
            metrics: StateOperatorProgress::new("stateStoreSave"),
        })
    }

    /// Bounds each group's `collect_list`/`collect_set` to `n` values
    /// (`spark.sql.streaming.weir.collectMaxValues`).
    pub fn set_collect_max_values(&mut self, n: usize) {
        self.collect_max_values.store(n.max(1), Ordering::Relaxed);
    }

    /// The output schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// True when the grouping includes a watermarked key (state is bounded).
    pub fn has_watermark(&self) -> bool {
        self.watermark_key.is_some()
    }

    /// The window size (µs) when the watermarked key is a window (a group
    /// is evicted at its window's end), else `None`.
    fn evicting_window_size(&self) -> Option<i64> {
        match self.keys.get(self.watermark_key?)? {
            KeyExec::Window { assigner, .. } => Some(assigner.size_us),
            KeyExec::Column { .. } => None,
        }
    }

    /// Gives the operator its state, split over the state partitions (opened
    /// at the last committed version).
    pub fn set_store(&mut self, store: PartitionedStore) {
        self.store.set(store);
    }

    /// This batch's metrics.
    pub fn metrics(&self) -> StateOperatorProgress {
        self.metrics.clone()
    }

    /// A group's state value: its eviction time, then its accumulators,
    /// encoded into `buf` (emptied first; the state store's buffer).
    fn encode_group(evict_at: i64, accs: &[Acc], buf: &mut Vec<u8>) {
        buf.clear();
        buf.extend_from_slice(&evict_at.to_le_bytes());
        for a in accs {
            a.encode(buf);
        }
    }

    /// The input rows this batch drops as late in full (every window they
    /// fall in is closed), for the late-rows side output.
    pub fn late_rows(
        &self,
        input: &[RecordBatch],
        wm: Watermarks,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        let (Some(ki), Some(late)) = (self.watermark_key, wm.late_ms) else {
            return Ok(vec![]);
        };
        if mode == OutputMode::Complete {
            return Ok(vec![]);
        }
        let mut out = Vec::new();
        for b in input {
            let late = match &self.keys[ki] {
                KeyExec::Window { assigner, .. } => match assigner.source {
                    crate::ops::window::TimeSource::Column(c) => {
                        crate::ops::watermark::late_rows(b, c, late, |t| {
                            assigner.last_window_end(t)
                        })?
                    }
                    crate::ops::window::TimeSource::WindowTime(_) => None,
                },
                KeyExec::Column { index, .. } => {
                    crate::ops::watermark::late_rows(b, *index, late, |t| t)?
                }
            };
            out.extend(late);
        }
        Ok(out)
    }

    /// Runs one micro-batch: input rows in, output rows per `mode` out.
    ///
    /// The batch runs as tasks on the worker pool it is called in (rayon):
    /// each slice of [`crate::ops::tasks::ROWS_PER_TASK`] input rows is
    /// aggregated on its own and its groups routed by key hash to the state
    /// partitions; then each partition merges its groups in input order,
    /// applies them to its store, evicts behind the watermark and produces
    /// its output, in parallel. The output is the union of the partitions',
    /// sorted by key. `narrow` steps run on each slice in its task before
    /// it is aggregated, and what their watermarks saw goes into `ctx`.
    /// Order-free aggregates (counts, say) share the rows among the free
    /// workers a morsel at a time instead ([`crate::ops::morsels`]), each
    /// task's share merged in no particular order, which cannot change
    /// their result.
    ///
    /// The slices' tasks read no state: `prepared` holds them when they
    /// ran ahead ([`crate::ops::ahead`]), while the batch before ran.
    pub fn process(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
        prepared: Option<Prepared>,
    ) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        let mut store = self.store.take()?;
        let n = store.partitions();
        let routed = match prepared.and_then(|p| p.downcast::<Routed>().ok()) {
            Some(r) if r.sets.len() == n => Ok(*r),
            _ => self.route(narrow, input, n),
        };
        let result = routed.and_then(|r| self.process_partitions(&mut store, narrow, r, ctx, mode));
        let (total, memory) = (store.len() as i64, store.memory_used_bytes() as i64);
        // The updates' time leaves out the partitions' commits (`commitTimeMs`).
        let started = started + store.in_task_commit_time();
        self.store.put(store);
        let (parts, lost) = result?;
        let mut m = StateOperatorProgress::new("stateStoreSave");
        if lost > 0 {
            m.custom_metrics
                .insert("numRowsOutsideRepresentableWindows".into(), lost);
        }
        for p in &parts {
            p.counts.add_to(&mut m);
        }
        // The union of the partitions' output, sorted by key: each
        // partition sorted its own in its task, and the stable sort finds
        // those runs and merges them.
        let mut out: Vec<(&[u8], &[Acc])> =
            Vec::with_capacity(parts.iter().map(|p| p.rows.len()).sum());
        for p in &parts {
            out.extend(p.rows.iter().map(|&i| {
                let i = i as usize;
                (p.groups.key(i), p.groups.accs(i))
            }));
        }
        out.sort_by(|a, b| a.0.cmp(b.0));
        m.all_updates_time_ms = started.elapsed().as_millis() as i64;
        m.num_rows_total = total;
        m.memory_used_bytes = memory;
        self.metrics = m;
        let batch = self.build_output(&out)?;
        Ok(if batch.num_rows() == 0 {
            vec![]
        } else {
            vec![batch]
        })
    }

    /// The state stage of a batch whose input is `routed`: each state
    /// partition's share applied to its store, as one task per partition.
    fn process_partitions(
        &self,
        store: &mut PartitionedStore,
        narrow: &Narrow,
        routed: Routed,
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<(Vec<PartitionOutput>, i64)> {
        let n = store.partitions();
        let Routed {
            mut sets,
            last,
            lost,
            seen,
        } = routed;
        narrow.record(seen.iter().chain(last.iter().map(|t| &t.seen)), ctx);
        let (wm, no_data) = (ctx.watermarks, ctx.no_data);
        // A global aggregation always has its one group in a data batch.
        if self.keys.is_empty()
            && !no_data
            && sets.iter().all(GroupSet::is_empty)
            && last.iter().all(|t| t.groups.len() == 0)
        {
            sets[partition_of(&[], n)].push(&[], i64::MAX, &self.new_accs());
        }
        // Each partition merges the last wave, applies its groups to its
        // store and sorts what it emits, as one task.
        let outputs =
            store.map_parts(sets, ctx.state_commit.as_ref(), |p, store, mut groups| {
                self.merge_wave(p, &mut groups, &last)?;
                let mut out = self.apply_partition(store, groups, wm, mode)?;
                let PartitionOutput { groups, rows, .. } = &mut out;
                // Keys are unique: an unstable sort gives the one order.
                let mut sorted: Vec<(&[u8], u32)> =
                    rows.iter().map(|&i| (groups.key(i as usize), i)).collect();
                sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (r, (_, i)) in rows.iter_mut().zip(sorted) {
                    *r = i;
                }
                Ok(out)
            })?;
        Ok((outputs, lost))
    }

    /// One state partition's part of a batch: applies the batch's groups
    /// (merged over its tasks) to the partition's store, evicts behind the
    /// watermark and returns what the partition emits. Each group is merged
    /// into its stored value in place in `groups` (which then holds it as
    /// the output reads it).
    fn apply_partition(
        &self,
        store: &mut dyn StateStore,
        mut groups: GroupSet,
        wm: Watermarks,
        mode: OutputMode,
    ) -> Result<PartitionOutput> {
        let mut counts = PartitionCounts::default();
        let watermarked = self.watermark_key.is_some() && mode != OutputMode::Complete;
        // Groups at or before the previous watermark are late: dropped.
        let late_us = wm
            .late_ms
            .filter(|_| watermarked)
            .map(|late| late.saturating_mul(1000));
        let mut updated: Vec<u32> = Vec::with_capacity(groups.len());
        // A stored group is decoded here, the batch's folded into it, and
        // the two swapped, its new value encoded into the store's buffer
        // (the memory store's is reused: no vector per group; counts, sums
        // and the like allocate nothing else; a `collect_*` or HLL
        // accumulator holds its own).
        let mut stored = self.new_accs();
        for i in 0..groups.len() {
            let (key, evict_at, accs) = groups.group_mut(i);
            if late_us.is_some_and(|late| *evict_at <= late) {
                counts.dropped += 1;
                continue;
            }
            store.update(key, &mut |old, out| {
                if let Some(old) = old {
                    *evict_at = self.decode_into(old, &mut stored)?;
                    self.merge_accs(&mut stored, accs, key)?;
                    accs.swap_with_slice(&mut stored);
                }
                Self::encode_group(*evict_at, accs, out);
                Ok(())
            })?;
            updated.push(i as u32);
        }
        counts.updated = updated.len() as i64;
        let mut evicted = GroupSet::new(self.aggs.len(), 0);
        if watermarked {
            if let Some(ev) = wm.evict_ms {
                let ev_us = ev.saturating_mul(1000);
                let window_size = self.evicting_window_size();
                let mut expired: Vec<Vec<u8>> = Vec::new();
                for (k, v) in store.iter() {
                    let Some(at) = v.get(..8).and_then(|b| b.try_into().ok()) else {
                        continue;
                    };
                    let at = i64::from_le_bytes(at);
                    if at <= ev_us {
                        expired.push(k.to_vec());
                    } else if at != i64::MAX {
                        // Still open: when it closes (null keys never do).
                        counts.note_open(at, window_size.map(|s| at.saturating_sub(s)));
                    }
                }
                for k in expired {
                    if mode == OutputMode::Append {
                        let v = store.get(&k).ok_or_else(|| {
                            WeirError::Config("aggregation state changed during eviction".into())
                        })?;
                        let at = self.decode_into(&v, &mut stored)?;
                        evicted.push(&k, at, &stored);
                    }
                    store.remove(&k);
                    counts.removed += 1;
                }
            }
        }
        // A failed state read must not reach the output.
        store.check()?;
        // Spark emits updated groups before evicting: a group updated
        // and closed in one batch is still emitted.
        let (groups, rows) = match mode {
            OutputMode::Complete => {
                let mut all = GroupSet::new(self.aggs.len(), store.len());
                for (k, v) in store.iter() {
                    let at = self.decode_into(&v, &mut stored)?;
                    all.push(&k, at, &stored);
                }
                let rows = (0..all.len() as u32).collect();
                (all, rows)
            }
            OutputMode::Update => (groups, updated),
            OutputMode::Append => {
                let rows = (0..evicted.len() as u32).collect();
                (evicted, rows)
            }
        };
        Ok(PartitionOutput {
            groups,
            rows,
            counts,
        })
    }

    /// Decodes a stored group's value into `accs` (accumulators of this
    /// query's functions, whose contents it replaces); returns its
    /// eviction time.
    fn decode_into(&self, bytes: &[u8], accs: &mut [Acc]) -> Result<i64> {
        let bad = || {
            WeirError::Config(
                "damaged aggregation state value (written by a different query?)".into(),
            )
        };
        let evict_at = i64::from_le_bytes(
            bytes
                .get(..8)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        let mut pos = 8;
        for a in accs {
            a.decode(bytes, &mut pos).ok_or_else(bad)?;
        }
        Ok(evict_at)
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

    /// True when a watermark advance to `new_wm_ms` would evict or emit here
    /// (Spark's `shouldRunAnotherBatch` for aggregations).
    pub fn needs_no_data_batch(
        &self,
        mode: OutputMode,
        current_ms: Option<i64>,
        new_wm_ms: i64,
    ) -> bool {
        self.watermark_key.is_some()
            && mode != OutputMode::Complete
            && current_ms.is_none_or(|c| new_wm_ms > c)
    }

    /// The output batch of groups given as (state key, accumulators).
    fn build_output(&self, groups: &[(&[u8], &[Acc])]) -> Result<RecordBatch> {
        if groups.is_empty() {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let mut cols: Vec<ArrayRef> = Vec::new();
        if let Some(conv) = &self.converter {
            let parser = conv.parser();
            let rows: Vec<_> = groups.iter().map(|(k, _)| parser.parse(k)).collect();
            let keys = conv.convert_rows(rows)?;
            let mut it = keys.into_iter();
            for k in &self.keys {
                match k {
                    KeyExec::Window { .. } => {
                        let s = <Timestamp as crate::row::ArrowValue>::from_array(
                            it.next().unwrap().as_ref(),
                        )?;
                        let e = <Timestamp as crate::row::ArrowValue>::from_array(
                            it.next().unwrap().as_ref(),
                        )?;
                        let w: Vec<Window> = s
                            .into_iter()
                            .zip(e)
                            .map(|(start, end)| Window { start, end })
                            .collect();
                        cols.push(<Window as crate::row::ArrowValue>::to_array(w));
                    }
                    KeyExec::Column { .. } => cols.push(it.next().unwrap()),
                }
            }
        }
        let accs: Vec<&[Acc]> = groups.iter().map(|(_, a)| *a).collect();
        cols.extend(agg_arrays(
            &self.aggs,
            &self.schema,
            self.keys.len(),
            &accs,
        )?);
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}

/// Spark's `NormalizeFloatingNumbers` for grouping keys: -0.0 groups with
/// 0.0, and every NaN with every other NaN.
fn normalize_floats(a: &ArrayRef) -> ArrayRef {
    fn f64n(v: f64) -> f64 {
        if v == 0.0 {
            0.0
        } else {
            accumulators::one_nan(v)
        }
    }
    match a.data_type() {
        ArrowType::Float64 => Arc::new(
            a.as_primitive::<Float64Type>()
                .unary::<_, Float64Type>(f64n),
        ),
        ArrowType::Float32 => Arc::new(
            a.as_primitive::<arrow::datatypes::Float32Type>()
                .unary::<_, arrow::datatypes::Float32Type>(|v| f64n(v as f64) as f32),
        ),
        _ => a.clone(),
    }
}

impl StatefulOperator for AggregateOp {
    fn id(&self) -> usize {
        self.id
    }
    fn store_names(&self) -> &'static [&'static str] {
        &[""]
    }
    fn open_state(&mut self, stores: Vec<PartitionedStore>) -> Result<()> {
        self.set_store(single_store("aggregation", stores)?);
        Ok(())
    }
    fn run(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        AggregateOp::process(self, narrow, input, ctx, mode, None)
    }
    fn preparer(&self, steps: NarrowSteps) -> Option<Preparer> {
        let n = self.store.partitions()?;
        let core = self.core.clone();
        Some(Arc::new(move |rows: &[RecordBatch]| -> Result<Prepared> {
            Ok(Box::new(core.route(&steps.narrow(), rows, n)?))
        }))
    }
    fn process_prepared(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        right: &[RecordBatch],
        ctx: &mut BatchContext,
        mode: OutputMode,
        prepared: Prepared,
    ) -> Result<Vec<RecordBatch>> {
        // Late rows sent aside are read from the whole input first.
        if ctx.collect_late {
            return StatefulOperator::process(self, narrow, input, right, ctx, mode);
        }
        AggregateOp::process(self, narrow, input, ctx, mode, Some(prepared))
    }
    fn late_rows(
        &self,
        input: &[RecordBatch],
        _right: &[RecordBatch],
        wm: Watermarks,
        mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        AggregateOp::late_rows(self, input, wm, mode)
    }
    fn metrics_mut(&mut self) -> &mut StateOperatorProgress {
        &mut self.metrics
    }
    fn set_collect_max_values(&mut self, n: usize) {
        AggregateOp::set_collect_max_values(self, n);
    }

    fn commit(&mut self, version: u64) -> Result<()> {
        AggregateOp::commit(self, version)
    }
    fn commit_pending(&mut self, version: u64) -> bool {
        self.store.commit_pending(version)
    }
    fn abort(&mut self) -> Result<()> {
        AggregateOp::abort(self);
        Ok(())
    }
    fn metrics(&self) -> StateOperatorProgress {
        AggregateOp::metrics(self)
    }
    fn needs_no_data_batch(&self, mode: OutputMode) -> bool {
        mode != OutputMode::Complete
    }
    fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        AggregateOp::decode_state(self, store, entries)
    }
}

impl AggregateOp {
    /// Decodes state entries (key: the group's key columns in Arrow's row
    /// format; value: its eviction time and accumulators) into the group's
    /// key columns (`key`) and its aggregates as the query emits them
    /// (`value`).
    pub fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        if !store.is_empty() {
            return Err(unknown_store("aggregation", store, &[""]));
        }
        let mut groups = GroupSet::new(self.aggs.len(), entries.len());
        let mut accs = self.new_accs();
        for (k, v) in entries {
            let at = self.decode_into(v, &mut accs)?;
            groups.push(k, at, &accs);
        }
        let rows: Vec<(&[u8], &[Acc])> = (0..groups.len())
            .map(|i| (groups.key(i), groups.accs(i)))
            .collect();
        DecodedState::split(&self.build_output(&rows)?, self.keys.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::window::TimeSource;
    use arrow::array::{BooleanArray, DictionaryArray, Float64Array, Int32Array, StringArray};
    use arrow::datatypes::Int8Type;

    /// Groups and counts rows the slow way: every row's key in Arrow's row format.
    fn reference(keys: &[ArrayRef]) -> std::collections::BTreeMap<Vec<u8>, i64> {
        let conv = RowConverter::new(
            keys.iter()
                .map(|k| SortField::new(k.data_type().clone()))
                .collect(),
        )
        .unwrap();
        let rows = conv.convert_columns(keys).unwrap();
        let mut out = std::collections::BTreeMap::new();
        for r in rows.iter() {
            *out.entry(r.data().to_vec()).or_insert(0) += 1;
        }
        out
    }

    fn counts(groups: Vec<(Vec<u8>, i64, Vec<Acc>)>) -> std::collections::BTreeMap<Vec<u8>, i64> {
        counts_at(&groups, 0)
    }

    /// Each group's count in its accumulator `i`.
    fn counts_at(
        groups: &[(Vec<u8>, i64, Vec<Acc>)],
        i: usize,
    ) -> std::collections::BTreeMap<Vec<u8>, i64> {
        groups
            .iter()
            .map(|(k, _, accs)| {
                let out = Acc::evaluate(&[&accs[i]], &ArrowType::Int64).unwrap();
                (
                    k.clone(),
                    out.as_primitive::<arrow::datatypes::Int64Type>().value(0),
                )
            })
            .collect()
    }

    fn count_star() -> AggExec {
        AggExec {
            func: AggFn::Count,
            input: None,
            input_type: None,
            name: "n".into(),
        }
    }

    #[test]
    fn batch_local_keys_group_exactly_as_the_row_format() {
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(1),
            None,
            Some(1),
            Some(2),
            None,
            Some(2),
            Some(1),
            Some(3),
        ]));
        // x and -x differ only in the top bit, which a nullable 8-byte
        // value's packed form (value, then a validity bit) must keep.
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(0.0),
            Some(-0.0),
            Some(f64::NAN),
            Some(0.0),
            None,
            Some(f64::NAN),
            Some(-1.5),
            Some(1.5),
        ]));
        let longs: ArrayRef = Arc::new(arrow::array::Int64Array::from(vec![
            Some(-1),
            Some(i64::MAX),
            None,
            Some(0),
            Some(i64::MIN),
            Some(-1),
            Some(i64::MAX),
            Some(0),
        ]));
        // Short strings are interned as one integer, 16 bytes and more by
        // their bytes; the last value ends the buffer (no 16-byte word to read).
        let strings: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("0123456789abcde"),
            None,
            Some("a"),
            Some("0123456789abcdef"),
            Some("0123456789abcde"),
            Some("0123456789abcdef"),
            Some(""),
        ]));
        let bools: ArrayRef = Arc::new(BooleanArray::from(vec![
            Some(true),
            None,
            Some(false),
            Some(true),
            None,
            Some(false),
            Some(true),
            Some(true),
        ]));
        let dict: ArrayRef = Arc::new(
            vec![
                Some("x"),
                Some("y"),
                None,
                Some("x"),
                Some("y"),
                None,
                Some("x"),
                Some("z"),
            ]
            .into_iter()
            .collect::<DictionaryArray<Int8Type>>(),
        );
        // Binary values as the one column keyed in place (with strings
        // absent from the subset), or interned beside a string column.
        let binary: ArrayRef = Arc::new(arrow::array::BinaryArray::from(vec![
            Some(&b"\x00"[..]),
            Some(&b""[..]),
            None,
            Some(&b"\x00"[..]),
            Some(&b"sixteen bytes..."[..]),
            Some(&b"\x00\x00"[..]),
            Some(&b"sixteen bytes..."[..]),
            None,
        ]));
        let cols = vec![ints, floats, strings, bools, dict, binary, longs];
        let fields: Vec<ArrowField> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| ArrowField::new(format!("c{i}"), c.data_type().clone(), true))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let batch = RecordBatch::try_new(schema.clone(), cols.clone()).unwrap();
        // Every subset of key columns, and a sliced batch (non-zero offsets).
        for mask in 1..(1u32 << cols.len()) {
            let picked: Vec<usize> = (0..cols.len()).filter(|i| mask & (1 << i) != 0).collect();
            let keys = picked
                .iter()
                .map(|&i| KeyExec::Column {
                    index: i,
                    name: format!("c{i}"),
                    watermarked: false,
                })
                .collect();
            let op = AggregateOp::new(0, keys, vec![count_star()], &schema).unwrap();
            for b in [batch.clone(), batch.slice(2, 5)] {
                // The reference: the row format over the keys as Spark
                // normalises them (-0.0 is 0.0, one NaN).
                let key_cols: Vec<ArrayRef> = picked
                    .iter()
                    .map(|&i| normalize_floats(b.column(i)))
                    .collect();
                assert_eq!(
                    counts(op.partial(&b).unwrap().0.into_groups()),
                    reference(&key_cols),
                    "keys {picked:?}"
                );
            }
        }
    }

    #[test]
    fn row_counts_alone_are_folded_once_and_each_count_sees_every_row() {
        // Two `count(*)`s (rows only counted), then one with a column's
        // count beside it (rows noted and folded): the same counts.
        let keys: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "a", "c", "a", "b"]));
        let values: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(1),
            None,
            Some(3),
            Some(4),
            None,
            Some(6),
        ]));
        let schema = Arc::new(Schema::new(vec![
            ArrowField::new("k", ArrowType::Utf8, true),
            ArrowField::new("v", ArrowType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![keys.clone(), values]).unwrap();
        let key = || {
            vec![KeyExec::Column {
                index: 0,
                name: "k".into(),
                watermarked: false,
            }]
        };
        let count_v = || AggExec {
            func: AggFn::Count,
            input: Some(1),
            input_type: Some(ArrowType::Int32),
            name: "nv".into(),
        };
        let want = reference(&[keys]);
        for with_column in [false, true] {
            let second = if with_column { count_v() } else { count_star() };
            let op = AggregateOp::new(0, key(), vec![count_star(), second], &schema).unwrap();
            let groups = op.partial(&batch).unwrap().0.into_groups();
            assert_eq!(counts_at(&groups, 0), want);
            let got: Vec<i64> = counts_at(&groups, 1).into_values().collect();
            // Keys a, b, c: every row, or the non-null values of `v` (a {1, 3}, b {6}, c {4}).
            let expected = if with_column {
                vec![2, 1, 1]
            } else {
                vec![3, 2, 1]
            };
            assert_eq!(got, expected, "with a column: {with_column}");
        }
    }

    #[test]
    fn sliding_windows_group_each_row_into_every_window() {
        const MIN: i64 = 60_000_000;
        let ts: ArrayRef = Arc::new(
            arrow::array::TimestampMicrosecondArray::from(vec![
                Some(12 * MIN),
                Some(10 * MIN),
                None,
                Some(-MIN - 1),
                Some(12 * MIN + 5),
            ])
            .with_timezone("UTC"),
        );
        let k: ArrayRef = Arc::new(StringArray::from(vec!["a", "a", "a", "b", "a"]));
        let schema = Arc::new(Schema::new(vec![
            ArrowField::new("ts", timestamp_type(), true),
            ArrowField::new("k", ArrowType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(schema.clone(), vec![ts, k.clone()]).unwrap();
        let assigner = WindowAssigner {
            source: TimeSource::Column(0),
            size_us: 30 * MIN,
            slide_us: 5 * MIN,
        };
        let times = assigner.times(&batch).unwrap();
        let (idx, starts) = assigner.assign(&times);
        let idx = UInt32Array::from(idx);
        let ts_arr = |v: Vec<i64>| -> ArrayRef {
            Arc::new(arrow::array::TimestampMicrosecondArray::from(v).with_timezone("UTC"))
        };
        let expected = reference(&[
            ts_arr(starts.clone()),
            ts_arr(starts.iter().map(|s| s + 30 * MIN).collect()),
            take(k.as_ref(), &idx, None).unwrap(),
        ]);
        let keys = vec![
            KeyExec::Window {
                assigner,
                name: "window".into(),
                watermarked: true,
            },
            KeyExec::Column {
                index: 1,
                name: "k".into(),
                watermarked: false,
            },
        ];
        let op = AggregateOp::new(0, keys, vec![count_star()], &schema).unwrap();
        let got = op.partial(&batch).unwrap().0.into_groups();
        assert_evicted_at_window_ends(&got);
        assert_eq!(counts(got), expected);
    }

    /// Each group, keyed by a window first, is evicted at its window's end
    /// (the key's second column).
    fn assert_evicted_at_window_ends(groups: &[(Vec<u8>, i64, Vec<Acc>)]) {
        for (key, evict_at, _) in groups {
            let end = i64::from_be_bytes(key[10..18].try_into().unwrap()) ^ i64::MIN;
            assert_eq!(*evict_at, end);
        }
    }

    /// With the window as the only key, a row finds its group by the last
    /// row's window: rows that go back to an earlier window, nulls and
    /// rows near the ends of time between runs, and several windows per
    /// row still group as Spark does, each group evicted at its window's end.
    #[test]
    fn window_only_keys_group_rows_that_return_to_earlier_windows() {
        const SEC: i64 = 1_000_000;
        let ts: ArrayRef = Arc::new(
            arrow::array::TimestampMicrosecondArray::from(vec![
                Some(SEC),
                Some(2 * SEC),
                Some(11 * SEC),
                Some(3 * SEC),
                None,
                Some(12 * SEC),
                Some(12 * SEC),
                Some(-SEC),
                Some(25 * SEC),
                Some(i64::MIN + SEC),
                Some(4 * SEC),
                Some(i64::MAX),
                Some(5 * SEC),
            ])
            .with_timezone("UTC"),
        );
        let schema = Arc::new(Schema::new(vec![ArrowField::new(
            "ts",
            timestamp_type(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema.clone(), vec![ts]).unwrap();
        for (size, slide) in [(10 * SEC, 10 * SEC), (10 * SEC, 5 * SEC)] {
            let assigner = WindowAssigner {
                source: TimeSource::Column(0),
                size_us: size,
                slide_us: slide,
            };
            let (_, starts) = assigner.assign(&assigner.times(&batch).unwrap());
            let ts_arr = |v: Vec<i64>| -> ArrayRef {
                Arc::new(arrow::array::TimestampMicrosecondArray::from(v).with_timezone("UTC"))
            };
            let expected = reference(&[
                ts_arr(starts.clone()),
                ts_arr(starts.iter().map(|s| s + size).collect()),
            ]);
            let keys = vec![KeyExec::Window {
                assigner,
                name: "window".into(),
                watermarked: true,
            }];
            let op = AggregateOp::new(0, keys, vec![count_star()], &schema).unwrap();
            let got = op.partial(&batch).unwrap().0.into_groups();
            assert_evicted_at_window_ends(&got);
            assert_eq!(got.len(), expected.len(), "size {size} slide {slide}");
            assert_eq!(counts(got), expected, "size {size} slide {slide}");
        }
    }

    /// After each batch an append-mode window count reports the end and
    /// start of its earliest open window, and how many input rows it sent
    /// to the late-rows side output.
    #[test]
    fn metrics_report_the_earliest_open_window_and_late_rows_sent_aside() {
        use crate::ops::operator::test_stores::partitioned;
        use crate::progress::held::{
            LATE_ROWS_TO_SIDE_OUTPUT, NEXT_EVICTION_TIME_MS, NEXT_EVICTION_WINDOW_START_MS,
        };
        const MIN: i64 = 60_000;
        let at = |h: i64, m: i64| (h * 60 + m) * MIN;
        let schema = Arc::new(Schema::new(vec![
            ArrowField::new("ts", timestamp_type(), true),
            ArrowField::new("k", ArrowType::Utf8, true),
        ]));
        let batch = |mins: &[i64]| {
            let ts: Vec<i64> = mins.iter().map(|m| m * 1000).collect();
            let k: Vec<&str> = mins.iter().map(|_| "a").collect();
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(
                        arrow::array::TimestampMicrosecondArray::from(ts).with_timezone("UTC"),
                    ),
                    Arc::new(StringArray::from(k)),
                ],
            )
            .unwrap()
        };
        let keys = vec![KeyExec::Window {
            assigner: WindowAssigner {
                source: TimeSource::Column(0),
                size_us: 5 * MIN * 1000,
                slide_us: 5 * MIN * 1000,
            },
            name: "window".into(),
            watermarked: true,
        }];
        let mut op = AggregateOp::new(0, keys, vec![count_star()], &schema).unwrap();
        op.set_store(partitioned(3));
        let mut run = |rows: &[i64], late: Option<i64>, evict: i64| {
            let mut ctx = BatchContext {
                watermarks: Watermarks {
                    late_ms: late,
                    evict_ms: Some(evict),
                },
                collect_late: true,
                ..BatchContext::default()
            };
            let input = [batch(rows)];
            let none = Narrow::none();
            StatefulOperator::process(&mut op, &none, &input, &[], &mut ctx, OutputMode::Append)
                .unwrap();
            let late_rows: usize = ctx.late_rows.iter().map(RecordBatch::num_rows).sum();
            (StatefulOperator::metrics(&op), late_rows)
        };
        // Windows [10:00, 10:05) and [10:05, 10:10) open; the watermark 10:02.
        let (m, _) = run(&[at(10, 1), at(10, 4), at(10, 7)], None, at(10, 2));
        assert_eq!(m.custom_metrics[NEXT_EVICTION_TIME_MS], at(10, 5));
        assert_eq!(m.custom_metrics[NEXT_EVICTION_WINDOW_START_MS], at(10, 0));
        assert_eq!(m.custom_metrics[LATE_ROWS_TO_SIDE_OUTPUT], 0);
        // Two rows behind 10:02 (windows ending 09:55 and 10:00) go aside;
        // the watermark 10:06 closes [10:00, 10:05).
        let (m, aside) = run(
            &[at(9, 50), at(9, 58), at(10, 6)],
            Some(at(10, 2)),
            at(10, 6),
        );
        assert_eq!(aside, 2);
        assert_eq!(m.custom_metrics[LATE_ROWS_TO_SIDE_OUTPUT], 2);
        assert_eq!(m.num_rows_dropped_by_watermark, 2);
        assert_eq!(m.custom_metrics[NEXT_EVICTION_TIME_MS], at(10, 10));
        assert_eq!(m.custom_metrics[NEXT_EVICTION_WINDOW_START_MS], at(10, 5));
        // Every window closed: nothing waits on the watermark.
        let (m, _) = run(&[], Some(at(10, 6)), at(10, 10));
        assert!(
            !m.custom_metrics.contains_key(NEXT_EVICTION_TIME_MS),
            "{m:?}"
        );
        assert!(!m.custom_metrics.contains_key(NEXT_EVICTION_WINDOW_START_MS));
        assert_eq!(m.custom_metrics[LATE_ROWS_TO_SIDE_OUTPUT], 0);
    }
}
