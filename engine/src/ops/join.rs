//! Joins: stream-static (a hash join of each micro-batch against a static
//! table, no state) and stream-stream (Spark's symmetric hash join).
//!
//! Stream-stream, per micro-batch, with Spark's semantics:
//! 1. input rows whose own event time is at or before the previous batch's
//!    watermark are dropped as late (counted raw);
//! 2. new left rows join the right side's state, then new right rows join the
//!    left state including this batch's left rows, so each pair is found once;
//! 3. new rows are added to their side's state with a matched flag;
//! 4. with a time-range condition (`r.ts >= l.ts AND r.ts <= l.ts + INTERVAL
//!    '15 minutes'`), each side gets a state watermark (global watermark plus
//!    the bound the condition gives); rows at or before it can never match
//!    again and are evicted. On an outer side an evicted row that never
//!    matched is emitted with nulls for the other side.
//!
//! State: per side, key = join key (Arrow row format) + sequence number,
//! value = event time, matched flag, the row (Arrow row format). Both sides'
//! rows are in the state partition of their join key's hash (one numbering
//! for both sides), so steps 2 to 4 run per partition, each partition as a
//! task of the batch; late rows (step 1) are judged against the global
//! watermark before routing. A join without an equi-join key (a time-range
//! condition only) gives every row the same, empty key: it runs, and keeps
//! its state, in one partition.

use crate::hash::FastMap;
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{new_null_array, Array, ArrayRef, AsArray, BooleanArray};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::{Field, Schema, SchemaRef, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use datafusion::physical_plan::PhysicalExpr;
use weir_plan::expr::Expr;
use weir_plan::{JoinType, OutputMode};

use crate::error::{Result, WeirError};
use crate::ops::aggregate::Watermarks;
use crate::ops::narrow::Narrow;
use crate::ops::operator::{
    length_prefixed_key, rehome, set_update_time, unknown_store, DecodedState, OperatorState,
    PartitionCounts, StatefulOperator,
};
use crate::ops::stateless::{eval, ExprPlanner};
use crate::ops::BatchContext;
use crate::progress::StateOperatorProgress;
use crate::row::timestamp_type;
use crate::state::{partition_of, PartitionedStore, StateStore};

/// What the index keeps of one stored row: enough to find it in the store
/// (`store_key(join key, seq)`) and to evict it; the row itself is read
/// from the store when it is joined or emitted.
#[derive(Clone, Copy, Debug)]
struct Entry {
    seq: u64,
    /// Event time in µs; [`NO_TIME`]: none (never evicted by time).
    ts: i64,
    matched: bool,
}

/// The stored event time of a row without one (as on disk).
const NO_TIME: i64 = i64::MIN;

/// Bytes before the row in a stored value: event time, matched flag.
const VALUE_HEADER: usize = 9;

/// One side of a join: its shape (its rows live in `SideState`s, one
/// per state partition).
pub struct JoinSide {
    schema: SchemaRef,
    keys: Vec<usize>,
    /// The watermarked event-time column.
    time: Option<usize>,
    /// Rows with event time <= watermark + this (ms) can never match again.
    state_bound_ms: Option<i64>,
    rows_conv: RowConverter,
}

impl JoinSide {
    /// A side with these key columns and (optionally) watermarked event-time column.
    pub fn new(schema: SchemaRef, keys: Vec<usize>, time: Option<usize>) -> Result<JoinSide> {
        let fields = schema
            .fields()
            .iter()
            .map(|f| SortField::new(f.data_type().clone()))
            .collect();
        Ok(JoinSide {
            rows_conv: RowConverter::new(fields)?,
            schema,
            keys,
            time,
            state_bound_ms: None,
        })
    }

    /// True when this side's rows are evicted by event time.
    fn evictable(&self) -> bool {
        self.state_bound_ms.is_some() && self.time.is_some()
    }
}

/// Sets `buf` to the stored key of `seq` under join key `key`: the join
/// key, length-prefixed, then the sequence number (big-endian).
fn set_store_key(buf: &mut Vec<u8>, key: &[u8], seq: u64) {
    buf.clear();
    buf.extend_from_slice(&(key.len() as u32).to_le_bytes());
    buf.extend_from_slice(key);
    buf.extend_from_slice(&seq.to_be_bytes());
}

fn store_key(key: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(4 + key.len() + 8);
    set_store_key(&mut k, key, seq);
    k
}

/// A stored value: event time, matched flag, the row (Arrow row format).
fn store_value(ts: i64, matched: bool, row: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(VALUE_HEADER + row.len());
    v.extend_from_slice(&ts.to_le_bytes());
    v.push(matched as u8);
    v.extend_from_slice(row);
    v
}

fn damaged() -> WeirError {
    WeirError::Config("damaged join state entry (written by a different query?)".into())
}

/// The row of a stored value.
fn stored_row(value: &[u8]) -> Result<&[u8]> {
    value.get(VALUE_HEADER..).ok_or_else(damaged)
}

/// One row taken out of a side's index by [`SideState::evict`].
struct Evicted {
    key: Arc<[u8]>,
    seq: u64,
    matched: bool,
}

/// One join key's rows, in sequence order: inline while there is one (the
/// common case: no allocation), else a queue (the oldest leave first),
/// boxed so that the index's slot per key is 24 bytes, not 32.
enum KeyRows {
    One(Entry),
    // Boxed on purpose: the extra allocation is for keys with several
    // rows only, and keeps the far more common one-row slot small.
    #[allow(clippy::box_collection)]
    Many(Box<VecDeque<Entry>>),
}

impl KeyRows {
    /// The rows, as one or two slices in order.
    fn as_slices(&self) -> (&[Entry], &[Entry]) {
        match self {
            KeyRows::One(e) => (std::slice::from_ref(e), &[]),
            KeyRows::Many(q) => q.as_slices(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> {
        let (a, b) = self.as_slices();
        a.iter().chain(b)
    }

    fn push(&mut self, e: Entry) {
        match self {
            KeyRows::One(first) => *self = KeyRows::Many(Box::new(VecDeque::from([*first, e]))),
            KeyRows::Many(q) => q.push_back(e),
        }
    }

    /// Row `seq`.
    fn get_mut(&mut self, seq: u64) -> Option<&mut Entry> {
        match self {
            KeyRows::One(e) => (e.seq == seq).then_some(e),
            KeyRows::Many(q) => {
                let i = q.binary_search_by_key(&seq, |e| e.seq).ok()?;
                q.get_mut(i)
            }
        }
    }

    /// Puts the rows in sequence order (after loading in store order).
    fn sort(&mut self) {
        if let KeyRows::Many(q) = self {
            q.make_contiguous().sort_unstable_by_key(|e| e.seq);
        }
    }

    /// Takes out the rows `seqs` (ascending) into `out`; true when none
    /// are left. The key's oldest rows leave from the front; others cost
    /// a pass over the key's rows.
    fn take(&mut self, seqs: &[u64], mut out: impl FnMut(Entry)) -> bool {
        let q = match self {
            KeyRows::One(e) => {
                if seqs.contains(&e.seq) {
                    out(*e);
                    return true;
                }
                return false;
            }
            KeyRows::Many(q) => q,
        };
        let m = seqs.len();
        if q.len() >= m && q.iter().zip(seqs).all(|(e, s)| e.seq == *s) {
            q.drain(..m).for_each(&mut out);
        } else {
            let mut g = 0;
            q.retain(|e| {
                while g < m && seqs[g] < e.seq {
                    g += 1;
                }
                let gone = g < m && seqs[g] == e.seq;
                if gone {
                    out(*e);
                }
                !gone
            });
        }
        if q.len() == 1 {
            *self = KeyRows::One(q[0]);
        }
        matches!(self, KeyRows::Many(q) if q.is_empty())
    }
}

/// One side's rows in one state partition: an index of the partition's
/// store for that side (which holds the rows), by join key, and for
/// eviction by event time. Sequence numbers are per partition (a stored
/// key is the join key and its sequence number, unique per key).
#[derive(Default)]
struct SideState {
    /// Join key -> its rows, in sequence order.
    index: FastMap<Arc<[u8]>, KeyRows>,
    /// Rows with an event time, by (event time, seq), when the side is
    /// evicted by time (the key shared with `index`).
    by_time: BTreeMap<(i64, u64), Arc<[u8]>>,
    evictable: bool,
    count: usize,
    next_seq: u64,
}

impl SideState {
    /// The index of one partition's store; `evictable`: rows are evicted
    /// by event time (and indexed by it).
    fn load(store: &dyn StateStore, evictable: bool) -> Result<SideState> {
        let mut st = SideState {
            evictable,
            ..SideState::default()
        };
        for (k, v) in store.iter() {
            let key = length_prefixed_key(&k).ok_or_else(damaged)?;
            let seq = u64::from_be_bytes(
                k.get(4 + key.len()..)
                    .ok_or_else(damaged)?
                    .try_into()
                    .map_err(|_| damaged())?,
            );
            let ts = i64::from_le_bytes(
                v.get(..8)
                    .ok_or_else(damaged)?
                    .try_into()
                    .map_err(|_| damaged())?,
            );
            let matched = *v.get(8).ok_or_else(damaged)? == 1;
            st.next_seq = st.next_seq.max(seq.saturating_add(1));
            st.insert(key, Entry { seq, ts, matched });
        }
        // A failed read while loading must not pass for missing state.
        store.check()?;
        for v in st.index.values_mut() {
            v.sort();
        }
        Ok(st)
    }

    /// Indexes `e` under `key` (at the end of the key's rows).
    fn insert(&mut self, key: &[u8], e: Entry) {
        let shared = match self.index.get_key_value(key).map(|(k, _)| k.clone()) {
            Some(k) => {
                if let Some(rows) = self.index.get_mut(&k) {
                    rows.push(e);
                }
                k
            }
            None => {
                let k: Arc<[u8]> = Arc::from(key);
                self.index.insert(k.clone(), KeyRows::One(e));
                k
            }
        };
        if self.evictable && e.ts != NO_TIME {
            self.by_time.insert((e.ts, e.seq), shared);
        }
        self.count += 1;
    }

    /// Stores a new row (`value`: see [`store_value`]) under `key`.
    fn add(
        &mut self,
        store: &mut dyn StateStore,
        key: &[u8],
        ts: i64,
        matched: bool,
        value: Vec<u8>,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        store.put(store_key(key, seq), value);
        self.insert(key, Entry { seq, ts, matched });
    }

    /// Flags the stored row `seq` of `key` as matched; `value` is its
    /// stored value (read while joining).
    fn mark_matched(
        &mut self,
        store: &mut dyn StateStore,
        key: &[u8],
        seq: u64,
        mut value: Vec<u8>,
    ) {
        let Some(e) = self.index.get_mut(key).and_then(|rows| rows.get_mut(seq)) else {
            return;
        };
        if !e.matched && value.len() >= VALUE_HEADER {
            e.matched = true;
            value[8] = 1;
            store.put(store_key(key, seq), value);
        }
    }

    /// Takes rows with event time <= `bound_us` out of the index (not the
    /// store: the caller reads what it emits, then removes them), in
    /// sequence order. Costs what it removes (plus, for a key whose expired
    /// rows are not its oldest, a pass over that key's rows).
    fn evict(&mut self, bound_us: i64) -> Vec<Evicted> {
        let mut gone: Vec<(Arc<[u8]>, u64)> = Vec::new();
        while let Some(first) = self.by_time.first_entry() {
            if first.key().0 > bound_us {
                break;
            }
            let ((_, seq), key) = first.remove_entry();
            gone.push((key, seq));
        }
        if gone.is_empty() {
            return Vec::new();
        }
        // Group by key (one shared key per join key), in sequence order.
        gone.sort_unstable_by_key(|(k, seq)| (Arc::as_ptr(k) as *const u8 as usize, *seq));
        let mut out = Vec::with_capacity(gone.len());
        let mut seqs = Vec::new();
        for group in gone.chunk_by(|a, b| Arc::ptr_eq(&a.0, &b.0)) {
            let key = &group[0].0;
            let Some(rows) = self.index.get_mut(&**key) else {
                continue;
            };
            seqs.clear();
            seqs.extend(group.iter().map(|g| g.1));
            let emptied = rows.take(&seqs, |e| {
                out.push(Evicted {
                    key: key.clone(),
                    seq: e.seq,
                    matched: e.matched,
                })
            });
            if emptied {
                self.index.remove(&**key);
            }
        }
        self.count -= out.len();
        out.sort_unstable_by_key(|e| e.seq);
        out
    }
}

/// One side of a candidate pair: a new row of this batch (its index) or a
/// stored row read for it (its index in the side's [`Probes`]).
#[derive(Clone, Copy)]
enum Ref {
    New(usize),
    State(usize),
}

/// Stored rows of one side read while joining one partition's batch: each
/// join key's rows are read once, however many new rows of the other side
/// meet them (borrowed where the store can, e.g. the memory store).
#[derive(Default)]
struct Probes<'k, 's> {
    keys: Vec<&'k [u8]>,
    entries: Vec<Entry>,
    values: Vec<Cow<'s, [u8]>>,
    read: FastMap<&'k [u8], Range<usize>>,
}

impl<'k, 's> Probes<'k, 's> {
    /// The stored rows of `key` in `side` (indexes into these probes).
    fn fetch(
        &mut self,
        side: &SideState,
        store: &'s dyn StateStore,
        key: &'k [u8],
        kbuf: &mut Vec<u8>,
    ) -> Result<Range<usize>> {
        if let Some(r) = self.read.get(key) {
            return Ok(r.clone());
        }
        let Some(rows) = side.index.get(key) else {
            return Ok(0..0);
        };
        let start = self.values.len();
        for e in rows.iter() {
            set_store_key(kbuf, key, e.seq);
            // A failed read (a store on disk) answers absent and is found
            // by `check` before the batch's output leaves.
            let Some(v) = store.get(kbuf) else { continue };
            if v.len() < VALUE_HEADER {
                return Err(damaged());
            }
            self.keys.push(key);
            self.entries.push(*e);
            self.values.push(v);
        }
        let r = start..self.values.len();
        self.read.insert(key, r.clone());
        Ok(r)
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    /// The row of probe `p`.
    fn row(&self, p: usize) -> &[u8] {
        &self.values[p][VALUE_HEADER..]
    }

    /// The probes `hit` that were not matched before: key, seq and stored
    /// value, to flag as matched.
    fn newly_matched(self, hit: &[bool]) -> Vec<(&'k [u8], u64, Vec<u8>)> {
        self.keys
            .into_iter()
            .zip(self.entries)
            .zip(self.values)
            .zip(hit)
            .filter(|(((_, e), _), h)| **h && !e.matched)
            .map(|(((k, e), v), _)| (k, e.seq, v.into_owned()))
            .collect()
    }
}

/// Both sides' rows in one state partition.
#[derive(Default)]
struct PartState {
    left: SideState,
    right: SideState,
}

/// One state partition's share of a micro-batch: what it emits and counts.
#[derive(Default)]
struct PartitionOutput {
    out: Vec<RecordBatch>,
    counts: PartitionCounts,
}

/// New rows of one side in this batch, in flat buffers (no allocation per
/// row): row `i`'s join key is `keys[i]` in `key_bytes` (None: a null in a
/// key column), its row (Arrow row format) `rows[i]` in `row_bytes`.
#[derive(Default)]
struct NewRows {
    keys: Vec<Option<Range<usize>>>,
    key_bytes: Vec<u8>,
    rows: Vec<Range<usize>>,
    row_bytes: Vec<u8>,
    ts: Vec<Option<i64>>,
}

impl NewRows {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn key(&self, i: usize) -> Option<&[u8]> {
        self.keys[i].clone().map(|r| &self.key_bytes[r])
    }

    fn row(&self, i: usize) -> &[u8] {
        &self.row_bytes[self.rows[i].clone()]
    }

    fn push(&mut self, key: Option<&[u8]>, row: &[u8], ts: Option<i64>) {
        self.keys.push(key.map(|k| {
            let at = self.key_bytes.len();
            self.key_bytes.extend_from_slice(k);
            at..self.key_bytes.len()
        }));
        let at = self.row_bytes.len();
        self.row_bytes.extend_from_slice(row);
        self.rows.push(at..self.row_bytes.len());
        self.ts.push(ts);
    }

    /// Appends `other`'s rows after these.
    fn append(&mut self, other: NewRows) {
        if self.len() == 0 {
            *self = other;
            return;
        }
        for i in 0..other.len() {
            self.push(other.key(i), other.row(i), other.ts[i]);
        }
    }

    /// The rows of each of `n` state partitions, routed by the hash of
    /// their join key, in input order. A row without a key (a null in a key
    /// column) matches nothing and touches no state: it goes to partition 0.
    /// A join without an equi-join key has the same (empty) key for every
    /// row, so all its rows, and all its state, are in one partition.
    fn split(self, n: usize) -> Vec<NewRows> {
        if n <= 1 {
            return vec![self];
        }
        let mut parts: Vec<NewRows> = (0..n).map(|_| NewRows::default()).collect();
        for i in 0..self.len() {
            let k = self.key(i);
            let p = k.map_or(0, |k| partition_of(k, n));
            parts[p].push(k, self.row(i), self.ts[i]);
        }
        parts
    }
}

/// One side's late rows in the join's late schema: `side` = `name`, the
/// side's own columns, nulls in the other's.
fn widen(schema: &SchemaRef, name: &str, rows: &RecordBatch) -> Result<RecordBatch> {
    let n = rows.num_rows();
    let mut cols: Vec<ArrayRef> = vec![Arc::new(arrow::array::StringArray::from(vec![name; n]))];
    for f in schema.fields().iter().skip(1) {
        cols.push(match rows.schema().index_of(f.name()) {
            Ok(i) => cast(rows.column(i), f.data_type())?,
            Err(_) => new_null_array(f.data_type(), n),
        });
    }
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

/// The join operator.
pub struct JoinOp {
    /// Index among stateful operators (stream-stream only).
    pub id: usize,
    how: JoinType,
    left: JoinSide,
    right: JoinSide,
    key_conv: RowConverter,
    /// Key types to cast the right side's keys to.
    key_types: Vec<arrow::datatypes::DataType>,
    condition: Option<Arc<dyn PhysicalExpr>>,
    joined: SchemaRef,
    /// Output column picks from the joined row (for USING joins); None: all.
    project: Option<Vec<usize>>,
    /// Coalesce pairs (left idx, right idx) for full outer USING keys.
    coalesce: Vec<(usize, usize)>,
    schema: SchemaRef,
    /// Static right side (stream-static join): the table, its rows, when read.
    static_right: Option<(crate::table::StaticTable, RecordBatch, Instant)>,
    /// Per state partition, both sides' rows (stream-stream only).
    parts: Vec<PartState>,
    /// Each side's state, split over the state partitions by the hash of
    /// the join key (the same numbering on both sides).
    left_store: OperatorState,
    right_store: OperatorState,
    metrics: StateOperatorProgress,
}

/// From the join condition: for each side, the tightest lower bound of its
/// event time relative to the other side's: `side >= other + c` gives `c`.
fn state_bounds(
    on: &Expr,
    left_time: Option<&str>,
    right_time: Option<&str>,
) -> (Option<i64>, Option<i64>) {
    let (Some(lt), Some(rt)) = (left_time, right_time) else {
        return (None, None);
    };
    let (mut lb, mut rb): (Option<i64>, Option<i64>) = (None, None);
    for c in on.conjuncts() {
        let Some((left, op, right)) = c.comparison() else {
            continue;
        };
        let op = op.sql();
        if !["<", "<=", ">", ">="].contains(&op) {
            continue;
        }
        let (Some((a, ao)), Some((b, bo))) = (left.time_term(), right.time_term()) else {
            continue;
        };
        // Normalise to `x + xo >= y + yo`, i.e. x >= y + (yo - xo). Future
        // rows of the other side have y > watermark, so x > watermark + c
        // (strict) or x >= watermark + c: rows at or before the returned
        // bound can never match. Spark's bound is one ms lower for `>=`.
        let (x, xo, y, yo) = if op.starts_with('>') {
            (a, ao, b, bo)
        } else {
            (b, bo, a, ao)
        };
        let strict = op == "<" || op == ">";
        let c = yo - xo - if strict { 0 } else { 1 };
        if x == lt && y == rt {
            lb = Some(lb.map_or(c, |v: i64| v.max(c)));
        } else if x == rt && y == lt {
            rb = Some(rb.map_or(c, |v: i64| v.max(c)));
        }
    }
    (lb, rb)
}

impl JoinOp {
    /// Builds a join. `on` is the SQL condition, or `using` the shared key
    /// columns. `left_time`/`right_time`: watermarked event-time columns.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: usize,
        planner: &ExprPlanner,
        how: JoinType,
        left: SchemaRef,
        right: SchemaRef,
        on: Option<&Expr>,
        using: Option<&[String]>,
        left_time: Option<&str>,
        right_time: Option<&str>,
        static_right: Option<(crate::table::StaticTable, RecordBatch)>,
    ) -> Result<JoinOp> {
        let mut fields: Vec<Field> = Vec::new();
        for f in left.fields().iter().chain(right.fields().iter()) {
            fields.push(f.as_ref().clone().with_nullable(true));
        }
        let names: Vec<&String> = fields.iter().map(|f| f.name()).collect();
        let dup = names
            .iter()
            .enumerate()
            .any(|(i, n)| names[..i].contains(n));
        // Equi-join keys: USING columns, or `l = r` conjuncts of the ON condition.
        let mut lk = Vec::new();
        let mut rk = Vec::new();
        let mut condition: Option<&Expr> = None;
        let mut project = None;
        let mut coalesce = Vec::new();
        let joined: SchemaRef;
        if let Some(cols) = using {
            for c in cols {
                lk.push(left.index_of(c).map_err(|_| {
                    WeirError::Config(format!("join column `{c}` is not on the left side"))
                })?);
                rk.push(right.index_of(c).map_err(|_| {
                    WeirError::Config(format!("join column `{c}` is not on the right side"))
                })?);
            }
            // Internal names keep both sides apart; output is key, left rest, right rest.
            let mut internal = Vec::new();
            for f in left.fields() {
                internal.push(Field::new(
                    format!("l.{}", f.name()),
                    f.data_type().clone(),
                    true,
                ));
            }
            for f in right.fields() {
                internal.push(Field::new(
                    format!("r.{}", f.name()),
                    f.data_type().clone(),
                    true,
                ));
            }
            joined = Arc::new(Schema::new(internal));
            let nl = left.fields().len();
            let mut pick: Vec<usize> = lk.clone();
            if how == JoinType::FullOuter || how == JoinType::RightOuter {
                for (a, b) in lk.iter().zip(&rk) {
                    coalesce.push((*a, nl + *b));
                }
            }
            pick.extend((0..nl).filter(|i| !lk.contains(i)));
            if how != JoinType::LeftSemi && how != JoinType::LeftAnti {
                pick.extend(
                    (0..right.fields().len())
                        .filter(|i| !rk.contains(i))
                        .map(|i| nl + i),
                );
            }
            project = Some(pick);
        } else {
            let on = on.ok_or_else(|| WeirError::Config("a join needs `on` or `using`".into()))?;
            if dup {
                return Err(WeirError::Config(format!("join `{on}`: both sides have columns of the same name; rename one side with a select first")));
            }
            joined = Arc::new(Schema::new(fields.clone()));
            if let Some(e) = on.invalid() {
                return Err(WeirError::Config(format!("join condition: {e}")));
            }
            for c in on.conjuncts() {
                let Some((a, weir_plan::expr::BinaryOp::Eq, b)) = c.comparison() else {
                    continue;
                };
                if let (Some(a), Some(b)) = (a.as_column(), b.as_column()) {
                    match (
                        left.index_of(a),
                        right.index_of(b),
                        left.index_of(b),
                        right.index_of(a),
                    ) {
                        (Ok(l), Ok(r), _, _) | (_, _, Ok(l), Ok(r)) => {
                            lk.push(l);
                            rk.push(r);
                        }
                        _ => {}
                    }
                }
            }
            condition = Some(on);
            if how == JoinType::LeftSemi || how == JoinType::LeftAnti {
                project = Some((0..left.fields().len()).collect());
            }
        }
        let (lb, rb) = match condition {
            Some(on) => state_bounds(on, left_time, right_time),
            None => (None, None),
        };
        let condition = match condition {
            Some(on) => Some(planner.plan_tree(on, &joined)?),
            None => None,
        };
        let key_types: Vec<_> = lk
            .iter()
            .map(|i| left.field(*i).data_type().clone())
            .collect();
        let key_conv = RowConverter::new(
            key_types
                .iter()
                .map(|t| SortField::new(t.clone()))
                .collect(),
        )?;
        let mut out_fields: Vec<Field> =
            joined.fields().iter().map(|f| f.as_ref().clone()).collect();
        let schema = match &project {
            Some(p) => {
                let nl = left.fields().len();
                Arc::new(Schema::new(
                    p.iter()
                        .map(|i| {
                            let (src, j) = if *i < nl {
                                (&left, *i)
                            } else {
                                (&right, *i - nl)
                            };
                            src.field(j).as_ref().clone().with_nullable(true)
                        })
                        .collect::<Vec<_>>(),
                ))
            }
            None => {
                for f in out_fields.iter_mut() {
                    *f = f.clone().with_nullable(true);
                }
                Arc::new(Schema::new(out_fields))
            }
        };
        let mut lside = JoinSide::new(
            left.clone(),
            lk,
            left_time.and_then(|c| left.index_of(c).ok()),
        )?;
        let mut rside = JoinSide::new(
            right.clone(),
            rk,
            right_time.and_then(|c| right.index_of(c).ok()),
        )?;
        lside.state_bound_ms = lb;
        rside.state_bound_ms = rb;
        Ok(JoinOp {
            id,
            how,
            left: lside,
            right: rside,
            key_conv,
            key_types,
            condition,
            joined,
            project,
            coalesce,
            schema,
            static_right: static_right.map(|(t, b)| (t, b, Instant::now())),
            parts: Vec::new(),
            left_store: OperatorState::default(),
            right_store: OperatorState::default(),
            metrics: StateOperatorProgress::new("symmetricHashJoin"),
        })
    }

    /// The output schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// True for a stream-stream join (it keeps state).
    pub fn is_stateful(&self) -> bool {
        self.static_right.is_none()
    }

    /// Gives both sides their state, split over the same state partitions,
    /// and loads each partition's index. Rows stored where another routing
    /// put them (before joins ran per partition) move to their join key's
    /// partition first.
    pub fn set_stores(
        &mut self,
        mut left: PartitionedStore,
        mut right: PartitionedStore,
    ) -> Result<()> {
        self.parts.clear();
        let loaded = if left.partitions() != right.partitions() {
            Err(WeirError::Config(format!(
                "the join's two sides have {} and {} state partitions; restore the checkpoint's state directory",
                left.partitions(),
                right.partitions()
            )))
        } else {
            let evictable = (self.left.evictable(), self.right.evictable());
            Self::load(&mut left, &mut right, evictable)
        };
        self.left_store.set(left);
        self.right_store.set(right);
        self.parts = loaded?;
        Ok(())
    }

    fn load(
        left: &mut PartitionedStore,
        right: &mut PartitionedStore,
        evictable: (bool, bool),
    ) -> Result<Vec<PartState>> {
        rehome(left, length_prefixed_key)?;
        rehome(right, length_prefixed_key)?;
        left.parts()
            .iter()
            .zip(right.parts())
            .map(|(l, r)| {
                Ok(PartState {
                    left: SideState::load(l.as_ref(), evictable.0)?,
                    right: SideState::load(r.as_ref(), evictable.1)?,
                })
            })
            .collect()
    }

    /// This batch's metrics.
    pub fn metrics(&self) -> StateOperatorProgress {
        self.metrics.clone()
    }

    /// True when a watermark advance can evict state (Spark runs a no-data batch then).
    pub fn needs_no_data_batch(&self) -> bool {
        self.is_stateful() && (self.left.evictable() || self.right.evictable())
    }

    fn new_rows(
        &self,
        side: &JoinSide,
        batch: &RecordBatch,
        late_us: Option<i64>,
        dropped: &mut i64,
    ) -> Result<NewRows> {
        let n = batch.num_rows();
        let ts: Vec<Option<i64>> = match side.time {
            Some(i) => cast(batch.column(i), &timestamp_type())?
                .as_primitive::<TimestampMicrosecondType>()
                .iter()
                .collect(),
            None => vec![None; n],
        };
        let mut keep: Vec<bool> = vec![true; n];
        if let Some(late) = late_us {
            for (k, t) in keep.iter_mut().zip(&ts) {
                if t.is_some_and(|t| t <= late) {
                    *k = false;
                    *dropped += 1;
                }
            }
        }
        let batch = arrow::compute::filter_record_batch(batch, &BooleanArray::from(keep.clone()))?;
        let ts: Vec<Option<i64>> = ts
            .into_iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(t, _)| t)
            .collect();
        let key_cols = side
            .keys
            .iter()
            .zip(&self.key_types)
            .map(|(i, t)| Ok(cast(batch.column(*i), t)?))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let all = side.rows_conv.convert_columns(batch.columns())?;
        let n = batch.num_rows();
        let mut out = NewRows {
            keys: Vec::with_capacity(n),
            rows: Vec::with_capacity(n),
            ts: Vec::with_capacity(n),
            ..NewRows::default()
        };
        // No equi-join key (a time-range condition only): every row has
        // the same, empty key (Arrow's row format has no rows without columns).
        if key_cols.is_empty() {
            for (r, t) in ts.into_iter().enumerate() {
                out.push(Some(&[]), all.row(r).data(), t);
            }
            return Ok(out);
        }
        let key_rows = self.key_conv.convert_columns(&key_cols)?;
        for (r, t) in ts.into_iter().enumerate() {
            let key = (!key_cols.iter().any(|c| c.is_null(r))).then(|| key_rows.row(r).data());
            out.push(key, all.row(r).data(), t);
        }
        Ok(out)
    }

    fn decode(side: &JoinSide, rows: &[&[u8]]) -> Result<Vec<ArrayRef>> {
        if rows.is_empty() {
            return Ok(side
                .schema
                .fields()
                .iter()
                .map(|f| new_null_array(f.data_type(), 0))
                .collect());
        }
        let parser = side.rows_conv.parser();
        Ok(side
            .rows_conv
            .convert_rows(rows.iter().map(|r| parser.parse(r)))?)
    }

    /// Evaluates candidate pairs; returns which match.
    fn matches(&self, pairs: &[(&[u8], &[u8])]) -> Result<(Vec<bool>, Option<RecordBatch>)> {
        if pairs.is_empty() {
            return Ok((vec![], None));
        }
        let l = Self::decode(&self.left, &pairs.iter().map(|p| p.0).collect::<Vec<_>>())?;
        let r = Self::decode(&self.right, &pairs.iter().map(|p| p.1).collect::<Vec<_>>())?;
        let batch = RecordBatch::try_new(self.joined.clone(), l.into_iter().chain(r).collect())?;
        let mask: Vec<bool> = match &self.condition {
            Some(c) => {
                let m = eval(c, &batch)?;
                let m = m
                    .as_boolean_opt()
                    .ok_or_else(|| WeirError::Config("join condition is not boolean".into()))?;
                (0..m.len()).map(|i| m.is_valid(i) && m.value(i)).collect()
            }
            None => vec![true; batch.num_rows()],
        };
        Ok((mask, Some(batch)))
    }

    fn output(&self, joined: &RecordBatch) -> Result<RecordBatch> {
        let mut cols: Vec<ArrayRef> = joined.columns().to_vec();
        for (a, b) in &self.coalesce {
            let m = arrow::compute::is_null(&cols[*a])?;
            cols[*a] = arrow::compute::kernels::zip::zip(&m, &cols[*b], &cols[*a])?;
        }
        let cols = match &self.project {
            Some(p) => p.iter().map(|i| cols[*i].clone()).collect(),
            None => cols,
        };
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(joined.num_rows())),
        )?)
    }

    /// Rows of one side padded with nulls for the other.
    fn null_padded(&self, left_side: bool, rows: &[&[u8]]) -> Result<RecordBatch> {
        let (l, r) = if left_side {
            (
                Self::decode(&self.left, rows)?,
                self.right
                    .schema
                    .fields()
                    .iter()
                    .map(|f| new_null_array(f.data_type(), rows.len()))
                    .collect::<Vec<_>>(),
            )
        } else {
            (
                self.left
                    .schema
                    .fields()
                    .iter()
                    .map(|f| new_null_array(f.data_type(), rows.len()))
                    .collect::<Vec<_>>(),
                Self::decode(&self.right, rows)?,
            )
        };
        let joined = RecordBatch::try_new(self.joined.clone(), l.into_iter().chain(r).collect())?;
        self.output(&joined)
    }

    fn matched_output(
        &self,
        mask: &[bool],
        joined: Option<RecordBatch>,
    ) -> Result<Option<RecordBatch>> {
        let Some(j) = joined else { return Ok(None) };
        let b = arrow::compute::filter_record_batch(&j, &BooleanArray::from(mask.to_vec()))?;
        (b.num_rows() > 0).then(|| self.output(&b)).transpose()
    }

    /// This batch's rows of each side that are dropped as late (left, right),
    /// for the late-rows side output.
    pub fn late_rows(
        &self,
        left: &[RecordBatch],
        right: &[RecordBatch],
        wm: Watermarks,
    ) -> Result<Vec<RecordBatch>> {
        let Some(late) = wm.late_ms else {
            return Ok(vec![]);
        };
        if !self.is_stateful() {
            return Ok(vec![]);
        }
        let schema = self.late_schema();
        let mut out = Vec::new();
        for (name, side, batches) in [("left", &self.left, left), ("right", &self.right, right)] {
            if let Some(c) = side.time {
                for b in batches {
                    if let Some(rows) = crate::ops::watermark::late_rows(b, c, late, |t| t)? {
                        out.push(widen(&schema, name, &rows)?);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The schema of the rows this join drops as late: `side` (`left` or
    /// `right`; `_side` if a side has a `side` column), the left's columns,
    /// then the right's not named on the left (a USING key shares its
    /// column), all nullable: one late-rows sink takes the rows of both sides.
    pub fn late_schema(&self) -> SchemaRef {
        // `side`, or `_side` etc. when a side has a column of that name.
        let taken =
            |n: &str| self.left.schema.index_of(n).is_ok() || self.right.schema.index_of(n).is_ok();
        let mut marker = "side".to_string();
        while taken(&marker) {
            marker.insert(0, '_');
        }
        let mut fields = vec![Field::new(marker, arrow::datatypes::DataType::Utf8, false)];
        for f in self
            .left
            .schema
            .fields()
            .iter()
            .chain(self.right.schema.fields())
        {
            if !fields.iter().any(|g| g.name() == f.name()) {
                fields.push(f.as_ref().clone().with_nullable(true));
            }
        }
        Arc::new(Schema::new(fields))
    }

    /// Runs one micro-batch with this batch's rows of each side.
    pub fn process(
        &mut self,
        left: &[RecordBatch],
        right: &[RecordBatch],
        wm: Watermarks,
    ) -> Result<Vec<RecordBatch>> {
        let started = Instant::now();
        let mut m = StateOperatorProgress::new("symmetricHashJoin");
        let late_us = wm.late_ms.map(|w| w.saturating_mul(1000));
        let mut out = Vec::new();
        if let Some((table, _, loaded)) = &self.static_right {
            if table
                .refresh()
                .is_some_and(|every| loaded.elapsed() >= every)
            {
                // A slowly changing dimension: read it again.
                let rows = concat_batches(&table.schema(), &table.load()?)?;
                let t = table.clone();
                self.static_right = Some((t, rows, Instant::now()));
            }
        }
        if let Some(stat) = self.static_right.as_ref().map(|s| s.1.clone()) {
            // Stream-static: hash join against the static table, no state.
            let lb = concat_batches(&self.left.schema, left)?;
            let ln = self.new_rows(&self.left, &lb, None, &mut 0)?;
            let rn = self.new_rows(&self.right, &stat, None, &mut 0)?;
            let mut by_key: FastMap<&[u8], Vec<usize>> = FastMap::default();
            for j in 0..rn.len() {
                if let Some(k) = rn.key(j) {
                    by_key.entry(k).or_default().push(j);
                }
            }
            let mut pairs = Vec::new();
            let mut owner = Vec::new();
            for i in 0..ln.len() {
                for j in ln.key(i).and_then(|k| by_key.get(k)).into_iter().flatten() {
                    pairs.push((ln.row(i), rn.row(*j)));
                    owner.push(i);
                }
            }
            let (mask, joined) = self.matches(&pairs)?;
            let mut matched = vec![false; ln.len()];
            for (p, ok) in owner.iter().zip(&mask) {
                if *ok {
                    matched[*p] = true;
                }
            }
            if self.how == JoinType::LeftSemi || self.how == JoinType::LeftAnti {
                let want = self.how == JoinType::LeftSemi;
                let rows: Vec<&[u8]> = (0..ln.len())
                    .filter(|i| matched[*i] == want)
                    .map(|i| ln.row(i))
                    .collect();
                if !rows.is_empty() {
                    out.push(self.null_padded(true, &rows)?);
                }
                return Ok(out);
            }
            out.extend(self.matched_output(&mask, joined)?);
            if self.how == JoinType::LeftOuter {
                let rows: Vec<&[u8]> = (0..ln.len())
                    .filter(|i| !matched[*i])
                    .map(|i| ln.row(i))
                    .collect();
                if !rows.is_empty() {
                    out.push(self.null_padded(true, &rows)?);
                }
            }
            return Ok(out);
        }
        let n = self.parts.len().max(1);
        let (ln, left_dropped) = self.routed_rows(&self.left, left, late_us, n)?;
        let (rn, right_dropped) = self.routed_rows(&self.right, right, late_us, n)?;
        m.num_rows_dropped_by_watermark = left_dropped + right_dropped;
        let mut lstore = self.left_store.take()?;
        let mut rstore = match self.right_store.take() {
            Ok(s) => s,
            Err(e) => {
                self.left_store.put(lstore);
                return Err(e);
            }
        };
        let mut parts = std::mem::take(&mut self.parts);
        let result = self.process_partitions(&mut lstore, &mut rstore, &mut parts, ln, rn, wm);
        m.memory_used_bytes = (lstore.memory_used_bytes() + rstore.memory_used_bytes()) as i64;
        self.left_store.put(lstore);
        self.right_store.put(rstore);
        self.parts = parts;
        for p in result? {
            p.counts.add_to(&mut m);
            out.extend(p.out);
        }
        set_update_time(&mut m, started);
        m.num_rows_total = self
            .parts
            .iter()
            .map(|p| (p.left.count + p.right.count) as i64)
            .sum();
        self.metrics = m;
        Ok(out)
    }

    /// One side's new rows of this batch, routed by the hash of their join
    /// key to `n` state partitions (each partition's in input order), and
    /// how many were dropped as late. Each slice of
    /// [`crate::ops::tasks::ROWS_PER_TASK`] input rows is filtered, encoded
    /// and routed as a task on the worker pool the batch runs in.
    fn routed_rows(
        &self,
        side: &JoinSide,
        batches: &[RecordBatch],
        late_us: Option<i64>,
        n: usize,
    ) -> Result<(Vec<NewRows>, i64)> {
        let per_task: Vec<(Vec<NewRows>, i64)> = crate::ops::tasks::map_tasks(batches, |b| {
            let mut dropped = 0;
            let rows = self.new_rows(side, b, late_us, &mut dropped)?;
            Ok((rows.split(n), dropped))
        })?;
        let mut parts: Vec<NewRows> = (0..n).map(|_| NewRows::default()).collect();
        let mut dropped = 0;
        for (task_parts, d) in per_task {
            dropped += d;
            for (p, rows) in parts.iter_mut().zip(task_parts) {
                p.append(rows);
            }
        }
        Ok((parts, dropped))
    }

    /// Joins and evicts each state partition's new rows of both sides
    /// (routed by the hash of their join key, one numbering for both sides)
    /// as a task on the worker pool the batch runs in.
    fn process_partitions(
        &self,
        lstore: &mut PartitionedStore,
        rstore: &mut PartitionedStore,
        parts: &mut [PartState],
        ln: Vec<NewRows>,
        rn: Vec<NewRows>,
        wm: Watermarks,
    ) -> Result<Vec<PartitionOutput>> {
        let n = lstore.partitions();
        if parts.len() != n || rstore.partitions() != n || ln.len() != n || rn.len() != n {
            return Err(WeirError::Config(
                "join state not loaded for every partition".into(),
            ));
        }
        let inputs: Vec<_> = parts
            .iter_mut()
            .zip(rstore.parts_mut().iter_mut())
            .zip(ln.into_iter().zip(rn))
            .collect();
        // Each partition task changes both sides' stores: they commit after
        // the sink, as a pair.
        lstore.map_parts(inputs, None, |_, lst, ((st, rst), (ln, rn))| {
            self.join_partition(st, lst, rst.as_mut(), ln, rn, wm)
        })
    }

    /// One state partition's part of a batch (steps 2 to 4 of the module
    /// doc): its new left rows join its right state, its new right rows its
    /// left state and new left rows; new rows are stored; rows behind each
    /// side's state watermark are evicted, an outer side's unmatched ones
    /// emitted with nulls.
    fn join_partition(
        &self,
        st: &mut PartState,
        lstore: &mut dyn StateStore,
        rstore: &mut dyn StateStore,
        ln: NewRows,
        rn: NewRows,
        wm: Watermarks,
    ) -> Result<PartitionOutput> {
        let mut po = PartitionOutput::default();
        let semi = self.how == JoinType::LeftSemi;
        // Candidate pairs, each side a new row or a stored row read for
        // this batch; what matched; the stored rows newly matched (with
        // their values, flag to set).
        let (l_new_matched, r_new_matched, l_marks, r_marks) = {
            let (ls, rs): (&dyn StateStore, &dyn StateStore) = (&*lstore, &*rstore);
            let mut kbuf = Vec::new();
            let mut l_state = Probes::default();
            let mut r_state = Probes::default();
            let mut pairs: Vec<(Ref, Ref)> = Vec::new();
            for i in 0..ln.len() {
                let Some(k) = ln.key(i) else { continue };
                for p in r_state.fetch(&st.right, rs, k, &mut kbuf)? {
                    pairs.push((Ref::New(i), Ref::State(p)));
                }
            }
            // This batch's left rows by key: a chain through `next`, in
            // input order from each key's first row.
            const END: usize = usize::MAX;
            let mut first: FastMap<&[u8], usize> = FastMap::default();
            let mut next = vec![END; ln.len()];
            if rn.len() > 0 {
                for i in (0..ln.len()).rev() {
                    if let Some(k) = ln.key(i) {
                        next[i] = first.insert(k, i).unwrap_or(END);
                    }
                }
            }
            for j in 0..rn.len() {
                let Some(k) = rn.key(j) else { continue };
                for p in l_state.fetch(&st.left, ls, k, &mut kbuf)? {
                    pairs.push((Ref::State(p), Ref::New(j)));
                }
                let mut i = first.get(k).copied().unwrap_or(END);
                while i != END {
                    pairs.push((Ref::New(i), Ref::New(j)));
                    i = next[i];
                }
            }
            let bytes: Vec<(&[u8], &[u8])> = pairs
                .iter()
                .map(|(l, r)| {
                    let lb = match *l {
                        Ref::New(i) => ln.row(i),
                        Ref::State(p) => l_state.row(p),
                    };
                    let rb = match *r {
                        Ref::New(j) => rn.row(j),
                        Ref::State(p) => r_state.row(p),
                    };
                    (lb, rb)
                })
                .collect();
            let (mask, joined) = self.matches(&bytes)?;
            drop(bytes);
            let mut l_new_matched = vec![false; ln.len()];
            let mut r_new_matched = vec![false; rn.len()];
            let mut l_hit = vec![false; l_state.len()];
            let mut r_hit = vec![false; r_state.len()];
            let mut semi_emit: Vec<&[u8]> = Vec::new();
            for ((l, r), ok) in pairs.iter().zip(&mask) {
                if !*ok {
                    continue;
                }
                match *l {
                    Ref::New(i) => l_new_matched[i] = true,
                    Ref::State(p) => {
                        // A left semi join emits a stored row when it first matches.
                        if semi && !l_hit[p] && !l_state.entries[p].matched {
                            semi_emit.push(l_state.row(p));
                        }
                        l_hit[p] = true;
                    }
                }
                match *r {
                    Ref::New(j) => r_new_matched[j] = true,
                    Ref::State(p) => r_hit[p] = true,
                }
            }
            if semi {
                semi_emit.extend(
                    (0..ln.len())
                        .filter(|i| l_new_matched[*i])
                        .map(|i| ln.row(i)),
                );
                if !semi_emit.is_empty() {
                    po.out.push(self.null_padded(true, &semi_emit)?);
                }
            } else {
                po.out.extend(self.matched_output(&mask, joined)?);
            }
            drop(semi_emit);
            (
                l_new_matched,
                r_new_matched,
                l_state.newly_matched(&l_hit),
                r_state.newly_matched(&r_hit),
            )
        };
        for (k, seq, v) in l_marks {
            st.left.mark_matched(lstore, k, seq, v);
        }
        for (k, seq, v) in r_marks {
            st.right.mark_matched(rstore, k, seq, v);
        }
        // Store new rows unless they are already below their side's state watermark.
        let ev_us = wm.evict_ms.map(|w| w.saturating_mul(1000));
        let left_outer = matches!(self.how, JoinType::LeftOuter | JoinType::FullOuter);
        let right_outer = matches!(self.how, JoinType::RightOuter | JoinType::FullOuter);
        let mut unstored_unmatched: (Vec<&[u8]>, Vec<&[u8]>) = (vec![], vec![]);
        for (is_left, nr, matched) in [(true, &ln, &l_new_matched), (false, &rn, &r_new_matched)] {
            let (side, state, store): (&JoinSide, &mut SideState, &mut dyn StateStore) = if is_left
            {
                (&self.left, &mut st.left, &mut *lstore)
            } else {
                (&self.right, &mut st.right, &mut *rstore)
            };
            let unstored = if is_left {
                &mut unstored_unmatched.0
            } else {
                &mut unstored_unmatched.1
            };
            for (i, (ts, matched)) in nr.ts.iter().zip(matched.iter()).enumerate() {
                let below = match (side.state_bound_ms, ts, ev_us) {
                    (Some(c), Some(t), Some(ev)) => *t <= ev.saturating_add(c.saturating_mul(1000)),
                    _ => false,
                };
                match nr.key(i) {
                    Some(k) if !below => {
                        let t = ts.unwrap_or(NO_TIME);
                        let value = store_value(t, *matched, nr.row(i));
                        state.add(store, k, t, *matched, value);
                        po.counts.updated += 1;
                    }
                    _ if !*matched => unstored.push(nr.row(i)),
                    _ => {}
                }
            }
        }
        if left_outer && !unstored_unmatched.0.is_empty() {
            po.out.push(self.null_padded(true, &unstored_unmatched.0)?);
        }
        if right_outer && !unstored_unmatched.1.is_empty() {
            po.out.push(self.null_padded(false, &unstored_unmatched.1)?);
        }
        // Evict what can never match again; outer sides emit their unmatched
        // rows (in the order they were stored).
        let t = Instant::now();
        if let Some(ev) = ev_us {
            let mut kbuf = Vec::new();
            for is_left in [true, false] {
                let (side, state, store): (&JoinSide, &mut SideState, &mut dyn StateStore) =
                    if is_left {
                        (&self.left, &mut st.left, &mut *lstore)
                    } else {
                        (&self.right, &mut st.right, &mut *rstore)
                    };
                if !side.evictable() {
                    continue;
                }
                let Some(c) = side.state_bound_ms else {
                    continue;
                };
                let gone = state.evict(ev.saturating_add(c.saturating_mul(1000)));
                // The earliest row left goes once the watermark reaches its
                // time minus the bound.
                if let Some((&(t, _), _)) = state.by_time.first_key_value() {
                    po.counts
                        .note_open(t.saturating_sub(c.saturating_mul(1000)), None);
                }
                let outer = if is_left { left_outer } else { right_outer };
                if !outer {
                    // Spark counts removals of the outer side's state elsewhere (not in numRowsRemoved).
                    po.counts.removed += gone.len() as i64;
                } else {
                    let mut values = Vec::new();
                    for e in gone.iter().filter(|e| !e.matched) {
                        set_store_key(&mut kbuf, &e.key, e.seq);
                        // A failed read (a store on disk) is found by `check` below.
                        values.extend(store.get(&kbuf));
                    }
                    let rows = values
                        .iter()
                        .map(|v| stored_row(v))
                        .collect::<Result<Vec<&[u8]>>>()?;
                    if !rows.is_empty() {
                        po.out.push(self.null_padded(is_left, &rows)?);
                    }
                }
                for e in &gone {
                    set_store_key(&mut kbuf, &e.key, e.seq);
                    store.remove(&kbuf);
                }
            }
        }
        po.counts.removals_ms = t.elapsed().as_millis() as i64;
        // A failed state read must not reach the output.
        lstore.check()?;
        rstore.check()?;
        Ok(po)
    }

    /// Commits both sides' state as `version`, in every partition.
    pub fn commit(&mut self, version: u64) -> Result<()> {
        let left = self.left_store.commit(version)?;
        let right = self.right_store.commit(version)?;
        self.metrics.commit_time_ms = (left + right).as_millis() as i64;
        Ok(())
    }

    /// Undoes this batch's state changes (and reloads the index).
    pub fn abort(&mut self) -> Result<()> {
        self.left_store.abort();
        self.right_store.abort();
        match (self.left_store.take(), self.right_store.take()) {
            (Ok(l), Ok(r)) => self.set_stores(l, r),
            (Ok(s), Err(_)) => {
                self.left_store.put(s);
                Ok(())
            }
            (Err(_), Ok(s)) => {
                self.right_store.put(s);
                Ok(())
            }
            // Never opened (a stream-static join): nothing to undo.
            (Err(_), Err(_)) => Ok(()),
        }
    }
}

/// A stream-stream join (a stream-static join keeps no state and runs as a
/// stateless step of the pipeline).
impl StatefulOperator for JoinOp {
    fn id(&self) -> usize {
        self.id
    }
    fn store_names(&self) -> &'static [&'static str] {
        &["left", "right"]
    }
    fn open_state(&mut self, stores: Vec<PartitionedStore>) -> Result<()> {
        let [left, right]: [PartitionedStore; 2] = stores.try_into().map_err(|_| {
            WeirError::Config("a stream-stream join keeps two state stores per partition".into())
        })?;
        self.set_stores(left, right)
    }
    fn run(
        &mut self,
        narrow: &Narrow,
        input: &[RecordBatch],
        right: &[RecordBatch],
        ctx: &mut BatchContext,
        _mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        // (A join starts a node of its own: no steps come before it.)
        let input = narrow.run(input.to_vec(), ctx)?;
        JoinOp::process(self, &input, right, ctx.watermarks)
    }
    fn late_rows(
        &self,
        input: &[RecordBatch],
        right: &[RecordBatch],
        wm: Watermarks,
        _mode: OutputMode,
    ) -> Result<Vec<RecordBatch>> {
        JoinOp::late_rows(self, input, right, wm)
    }
    fn metrics_mut(&mut self) -> &mut StateOperatorProgress {
        &mut self.metrics
    }
    fn commit(&mut self, version: u64) -> Result<()> {
        JoinOp::commit(self, version)
    }
    fn abort(&mut self) -> Result<()> {
        JoinOp::abort(self)
    }
    fn metrics(&self) -> StateOperatorProgress {
        JoinOp::metrics(self)
    }
    fn needs_no_data_batch(&self, _mode: OutputMode) -> bool {
        JoinOp::needs_no_data_batch(self)
    }
    fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        JoinOp::decode_state(self, store, entries)
    }
}

impl JoinOp {
    /// Decodes one side's state entries (store `left` or `right`; key: the
    /// join key in Arrow's row format, length-prefixed, then a sequence
    /// number; value: event time, matched flag, the row in Arrow's row
    /// format) into the join key columns, named after the side's key
    /// columns (`key`), and the side's row with `matched`, whether it has
    /// joined a row of the other side (`value`), as Spark's join state shows
    /// them.
    pub fn decode_state(&self, store: &str, entries: &[(&[u8], &[u8])]) -> Result<DecodedState> {
        let side = match store {
            "left" => &self.left,
            "right" => &self.right,
            _ => {
                return Err(unknown_store(
                    "stream-stream join",
                    store,
                    &["left", "right"],
                ))
            }
        };
        let bad =
            || WeirError::Config("damaged join state entry (written by a different query?)".into());
        let mut keys = Vec::with_capacity(entries.len());
        let mut rows = Vec::with_capacity(entries.len());
        let mut matched = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            keys.push(length_prefixed_key(k).ok_or_else(bad)?);
            matched.push(*v.get(8).ok_or_else(bad)? == 1);
            rows.push(v.get(9..).ok_or_else(bad)?);
        }
        let key_fields: Vec<Field> = side
            .keys
            .iter()
            .zip(&self.key_types)
            .map(|(i, t)| Field::new(side.schema.field(*i).name(), t.clone(), true))
            .collect();
        let key_cols: Vec<ArrayRef> = if key_fields.is_empty() {
            vec![]
        } else if entries.is_empty() {
            key_fields
                .iter()
                .map(|f| new_null_array(f.data_type(), 0))
                .collect()
        } else {
            let parser = self.key_conv.parser();
            self.key_conv
                .convert_rows(keys.iter().map(|k| parser.parse(k)))?
        };
        let mut value: Vec<(Field, ArrayRef)> = side
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .zip(Self::decode(side, &rows)?)
            .collect();
        // A side with a column of that name keeps it; the flag steps aside.
        let flag = if side.schema.field_with_name("matched").is_ok() {
            "__matched"
        } else {
            "matched"
        };
        value.push((
            Field::new(flag, arrow::datatypes::DataType::Boolean, true),
            Arc::new(BooleanArray::from(matched)),
        ));
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
    use arrow::array::{Int64Array, TimestampMicrosecondArray};

    #[test]
    fn a_keys_rows_take_24_bytes_in_the_index() {
        // One slot per join key in every side's index: a queue inline
        // would make it 32.
        assert!(std::mem::size_of::<KeyRows>() <= 24);
    }

    fn side_schema(p: &str) -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(format!("{p}_key"), arrow::datatypes::DataType::Int64, true),
            Field::new(format!("{p}_ts"), timestamp_type(), true),
        ]))
    }

    /// A left outer join, the right's time within 10 minutes after the
    /// left's, on the key (`on_key`) or on the time range only; its state
    /// over `n` partitions.
    fn op(n: usize, on_key: bool) -> JoinOp {
        let range = "r_ts >= l_ts AND r_ts <= l_ts + INTERVAL '10 minutes'";
        let on = Expr::read(&if on_key {
            format!("l_key = r_key AND {range}")
        } else {
            range.to_string()
        });
        let mut j = JoinOp::new(
            0,
            &ExprPlanner::new(),
            JoinType::LeftOuter,
            side_schema("l"),
            side_schema("r"),
            Some(&on),
            None,
            Some("l_ts"),
            Some("r_ts"),
            None,
        )
        .unwrap();
        j.set_stores(partitioned(n), partitioned(n)).unwrap();
        j
    }

    /// Rows (key, minute) of side `p`.
    fn rows(p: &str, rows: &[(i64, i64)]) -> RecordBatch {
        let keys: Vec<i64> = rows.iter().map(|r| r.0).collect();
        let ts: Vec<i64> = rows.iter().map(|r| r.1 * 60_000_000).collect();
        RecordBatch::try_new(
            side_schema(p),
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
            ],
        )
        .unwrap()
    }

    /// Each side's stored entries: (partition, stored key, value).
    type Entries = Vec<(usize, Vec<u8>, Vec<u8>)>;

    fn entries(j: &mut JoinOp) -> [Entries; 2] {
        [&mut j.left_store, &mut j.right_store].map(|s| {
            let store = s.take().unwrap();
            let out = store
                .parts()
                .iter()
                .enumerate()
                .flat_map(|(p, s)| s.iter().map(move |(k, v)| (p, k.to_vec(), v.to_vec())))
                .collect();
            s.put(store);
            out
        })
    }

    /// A batch's output rows, printed and sorted.
    fn printed(out: &[RecordBatch]) -> Vec<String> {
        let text = arrow::util::pretty::pretty_format_batches(out)
            .unwrap()
            .to_string();
        let mut rows: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with("| ") && !l.contains("l_key"))
            .map(String::from)
            .collect();
        rows.sort();
        rows
    }

    /// Rows stored by the whole stored key (as before joins ran per
    /// partition) move to their join key's partition when opened, and then
    /// match, are evicted and emitted with nulls as if they had always been
    /// there.
    #[test]
    fn join_rows_stored_by_an_earlier_routing_move_to_their_keys_partition() {
        let mut now = op(3, true);
        let left: Vec<(i64, i64)> = (0..8).flat_map(|k| [(k, 0), (k, 1)]).collect();
        now.process(&[rows("l", &left)], &[], Watermarks::default())
            .unwrap();
        let [stored_left, stored_right] = entries(&mut now);
        assert_eq!((stored_left.len(), stored_right.len()), (16, 0));
        // The same rows spread by the whole stored key.
        let mut old = partitioned(3);
        let mut off = 0;
        for (_, k, v) in stored_left {
            let p = partition_of(&k, 3);
            off += usize::from(p != partition_of(length_prefixed_key(&k).unwrap(), 3));
            StateStore::put(&mut old, k, v);
        }
        assert!(off > 0, "some rows start off their key's partition");
        let mut moved = JoinOp::new(
            0,
            &ExprPlanner::new(),
            JoinType::LeftOuter,
            side_schema("l"),
            side_schema("r"),
            Some(&Expr::read(
                "l_key = r_key AND r_ts >= l_ts AND r_ts <= l_ts + INTERVAL '10 minutes'",
            )),
            None,
            Some("l_ts"),
            Some("r_ts"),
            None,
        )
        .unwrap();
        moved.set_stores(old, partitioned(3)).unwrap();
        for (p, k, _) in &entries(&mut moved)[0] {
            assert_eq!(partition_of(length_prefixed_key(k).unwrap(), 3), *p);
        }
        // Keys 0..4 are clicked; then the watermark passes every row.
        let right = rows("r", &[(0, 5), (1, 5), (2, 5), (3, 5)]);
        let late = Watermarks {
            late_ms: None,
            evict_ms: Some(60 * 60_000),
        };
        let mut outputs = Vec::new();
        for j in [&mut now, &mut moved] {
            let matched = j
                .process(&[], std::slice::from_ref(&right), Watermarks::default())
                .unwrap();
            let closed = j.process(&[], &[], late).unwrap();
            outputs.push((printed(&matched), printed(&closed)));
        }
        assert_eq!(outputs[1], outputs[0]);
        let (matched, closed) = &outputs[0];
        assert_eq!(matched.len(), 8, "keys 0..4, two rows each: {matched:?}");
        assert_eq!(closed.len(), 8, "keys 4..8 with nulls: {closed:?}");
        assert!(entries(&mut moved).iter().all(Vec::is_empty));
    }

    /// A join on a time range only (no equi-join key) keeps its state in one
    /// partition and pairs every row within the range.
    #[test]
    fn a_join_without_an_equi_key_keeps_its_state_in_one_partition() {
        let mut j = op(4, false);
        let out = j
            .process(
                &[rows("l", &[(1, 0), (2, 3)])],
                &[rows("r", &[(7, 4), (8, 30)])],
                Watermarks::default(),
            )
            .unwrap();
        assert_eq!(printed(&out).len(), 2, "(1, 7) and (2, 7)");
        let [l, r] = entries(&mut j);
        let home = partition_of(&[], 4);
        assert_eq!((l.len(), r.len()), (2, 2));
        assert!(l.iter().chain(&r).all(|(p, ..)| *p == home));
    }

    /// The (key, seq, event time, matched) of every row a side's index holds, sorted.
    fn indexed(side: &SideState) -> Vec<(Vec<u8>, u64, i64, bool)> {
        let mut out: Vec<_> = side
            .index
            .iter()
            .flat_map(|(k, rows)| {
                rows.iter()
                    .map(move |e| (k.to_vec(), e.seq, e.ts, e.matched))
            })
            .collect();
        out.sort();
        out
    }

    /// Eviction takes out exactly the rows at or below the bound, over many
    /// keys (a key's expired rows its oldest, or among later ones; rows
    /// without an event time never), in the order they were stored, and
    /// keeps the rest: the index afterwards is what the store reloads to.
    #[test]
    fn eviction_removes_exactly_the_rows_at_or_below_the_bound() {
        let mut store = partitioned(1);
        let mut side = SideState {
            evictable: true,
            ..SideState::default()
        };
        // (key, seq, event time, matched) of every stored row.
        let mut all = Vec::new();
        for k in 0u8..40 {
            for r in 0..5i64 {
                let ts = match (k % 4, r) {
                    (0, 4) => NO_TIME,
                    // Later rows of the key have earlier event times: its
                    // expired rows are not its oldest.
                    (1, _) => 60 - r * 10 + k as i64 / 4,
                    _ => r * 10 + k as i64,
                };
                let (key, matched) = ([k, k ^ 0x5a], r % 2 == 0);
                all.push((key.to_vec(), side.next_seq, ts, matched));
                let value = store_value(ts, matched, &[k, r as u8]);
                side.add(&mut store, &key, ts, matched, value);
            }
        }
        let bound = 45;
        let expired = |t: i64| t != NO_TIME && t <= bound;
        let gone = side.evict(bound);
        let taken: Vec<_> = gone
            .iter()
            .map(|e| (e.key.to_vec(), e.seq, e.matched))
            .collect();
        let want: Vec<_> = all
            .iter()
            .filter(|r| expired(r.2))
            .map(|(k, s, _, m)| (k.clone(), *s, *m))
            .collect();
        assert!(want.len() > 40 && want.len() < all.len() - 40);
        assert!(
            want.iter().any(|r| r.0[0] % 4 == 1),
            "some expire after newer rows"
        );
        assert_eq!(taken, want, "the expired rows, in stored order");
        let mut kept: Vec<_> = all.iter().filter(|r| !expired(r.2)).cloned().collect();
        kept.sort();
        assert_eq!(indexed(&side), kept);
        assert_eq!(side.count, kept.len());
        assert_eq!(
            side.by_time.len(),
            kept.iter().filter(|r| r.2 != NO_TIME).count()
        );
        // The caller removes them from the store; a reload agrees.
        for e in &gone {
            StateStore::remove(&mut store, &store_key(&e.key, e.seq));
        }
        let back = SideState::load(&store, true).unwrap();
        assert_eq!(indexed(&back), kept);
        assert_eq!(back.by_time, side.by_time);
        assert_eq!((back.count, back.next_seq), (side.count, side.next_seq));
        // Nothing at or below the bound is left to evict; then every row
        // with an event time goes, and only the ones without one stay.
        assert!(side.evict(bound).is_empty());
        side.evict(i64::MAX);
        assert_eq!(side.count, 10);
        assert!(side.by_time.is_empty());
        assert!(indexed(&side).iter().all(|r| r.2 == NO_TIME));
    }

    /// A left outer join's stored rows, over many keys, leave the state
    /// exactly when the watermark passes them: the unmatched ones are
    /// emitted with nulls in the order they arrived, the matched ones
    /// silently; the rest stay and still match.
    #[test]
    fn expired_rows_of_an_outer_side_are_emitted_once_in_arrival_order() {
        let mut j = op(1, true);
        // Key k at minute k % 8, then again at minute 20 + k % 3.
        let left: Vec<(i64, i64)> = (0..30)
            .map(|k| (k, k % 8))
            .chain((0..30).map(|k| (k, 20 + k % 3)))
            .collect();
        j.process(&[rows("l", &left)], &[], Watermarks::default())
            .unwrap();
        // Even keys are clicked within the range of their first row.
        let clicks: Vec<(i64, i64)> = (0..30).step_by(2).map(|k| (k, k % 8 + 1)).collect();
        let matched = j
            .process(&[], &[rows("r", &clicks)], Watermarks::default())
            .unwrap();
        assert_eq!(printed(&matched).len(), 15);
        // Left rows at or before minute 5 expire (10 minutes and 1 ms
        // before the watermark).
        let wm = Watermarks {
            late_ms: None,
            evict_ms: Some(15 * 60_000 + 1),
        };
        let closed = j.process(&[], &[], wm).unwrap();
        let emitted: Vec<(i64, i64)> = closed
            .iter()
            .flat_map(|b| {
                let k = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
                let t = b.column(1).as_primitive::<TimestampMicrosecondType>();
                (0..b.num_rows())
                    .map(|i| (k.value(i), t.value(i) / 60_000_000))
                    .collect::<Vec<_>>()
            })
            .collect();
        let want: Vec<(i64, i64)> = left
            .iter()
            .filter(|(k, m)| *m <= 5 && k % 2 == 1)
            .copied()
            .collect();
        assert_eq!(emitted, want);
        assert!(closed
            .iter()
            .all(|b| b.column(2).null_count() == b.num_rows()));
        let [l, r] = entries(&mut j);
        assert_eq!(l.len(), left.iter().filter(|(_, m)| *m > 5).count());
        assert!(r.is_empty(), "every click is behind the watermark");
        assert_eq!(j.metrics().num_rows_total as usize, l.len());
        // The earliest left row left (minute 6) goes when the watermark
        // is 10 minutes and 1 ms past it.
        assert_eq!(
            j.metrics().custom_metrics[crate::progress::held::NEXT_EVICTION_TIME_MS],
            16 * 60_000 + 1
        );
        // What stays still joins.
        let late_click = j.process(&[], &[rows("r", &[(3, 21)])], wm).unwrap();
        assert_eq!(printed(&late_click).len(), 1, "key 3 at minute 20");
    }

    /// A left semi join emits each left row once, when it first matches:
    /// a stored row met by two new right rows in one batch, a new row by
    /// a new right row, never again once matched.
    #[test]
    fn a_left_semi_join_emits_each_left_row_once() {
        let mut j = JoinOp::new(
            0,
            &ExprPlanner::new(),
            JoinType::LeftSemi,
            side_schema("l"),
            side_schema("r"),
            Some(&Expr::read(
                "l_key = r_key AND r_ts >= l_ts AND r_ts <= l_ts + INTERVAL '10 minutes'",
            )),
            None,
            Some("l_ts"),
            Some("r_ts"),
            None,
        )
        .unwrap();
        j.set_stores(partitioned(2), partitioned(2)).unwrap();
        let none = Watermarks::default();
        let keys = |out: &[RecordBatch]| -> Vec<i64> {
            let mut k: Vec<i64> = out
                .iter()
                .flat_map(|b| {
                    b.column(0)
                        .as_primitive::<arrow::datatypes::Int64Type>()
                        .values()
                        .to_vec()
                })
                .collect();
            k.sort();
            k
        };
        let out = j
            .process(&[rows("l", &[(1, 0), (2, 0)])], &[], none)
            .unwrap();
        assert!(keys(&out).is_empty());
        let out = j
            .process(
                &[rows("l", &[(3, 1)])],
                &[rows("r", &[(1, 1), (1, 2), (3, 2), (3, 3)])],
                none,
            )
            .unwrap();
        assert_eq!(keys(&out), vec![1, 3]);
        assert_eq!(out[0].num_columns(), 2, "left columns only");
        let out = j
            .process(&[], &[rows("r", &[(1, 3), (3, 4), (2, 5)])], none)
            .unwrap();
        assert_eq!(keys(&out), vec![2]);
    }

    #[test]
    fn time_range_conditions_bound_each_side() {
        let (l, r) = state_bounds(
            &Expr::read("click_ad_id = imp_ad_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '15 minutes'"),
            Some("imp_ts"),
            Some("click_ts"),
        );
        assert_eq!(l, Some(-15 * 60_000 - 1));
        assert_eq!(r, Some(-1));
        assert_eq!(
            state_bounds(&Expr::read("a = b"), Some("imp_ts"), Some("click_ts")),
            (None, None)
        );
    }
}
