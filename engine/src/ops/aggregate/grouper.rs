//! One task's grouping: each input row's group found by a batch-local key.
//!
//! The key is packed into two 128-bit words when the key columns fit: one
//! string (or binary) column's value in the first, in place when it is
//! shorter than 16 bytes; the window start, integers and booleans in place
//! and other values interned to a task-local id in the second. So the
//! common key (a window and a short string) costs one lookup of a
//! fixed-size key per row, no byte comparison; otherwise the key is the
//! columns' bytes. Either way it is local to the task:
//! the state key is built once per group, from the group's first row, in
//! Arrow's row format.
//!
//! A key of a window start alone (a windowed count over all rows) is
//! compared with the last row's: rows of a time-ordered source come in
//! runs of one window and are looked up only when the window changes.

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, StringArray};
use arrow::datatypes::{ArrowNativeType, DataType as ArrowType};
use arrow::row::{RowConverter, SortField};

use super::{Acc, Reader};
use crate::error::{Result, WeirError};
use crate::hash::FastMap;

/// How many (group, row) pairs a task notes before it folds them into the
/// accumulators: 4096 pairs are 32 KB, which stay in the first-level cache.
pub(super) const FOLD_EVERY: usize = 4096;

/// A batch's groups by batch-local key, in first-seen order, with their
/// accumulators side by side in one vector (no pointer to chase per row).
pub(super) struct Grouper {
    /// A new group's accumulators.
    template: Vec<Acc>,
    /// Every group's accumulators, `template.len()` per group.
    accs: Vec<Acc>,
    /// Each group's eviction time.
    evicts: Vec<i64>,
    /// Each group's first input row.
    pub(super) firsts: Vec<u32>,
    /// Each group's window start (µs; 0 without a window).
    pub(super) starts: Vec<i64>,
    /// The rows seen, in order, each with its group: (group, input row)
    /// pairs folded into the accumulators by [`Grouper::fold`].
    seen_groups: Vec<u32>,
    /// The input row of each entry of `seen_groups`.
    seen_rows: Vec<u32>,
    /// With only row counts to make (`count(*)`s, which read no column):
    /// each group's rows seen, added to its counts by [`Grouper::fold`],
    /// instead of (group, row) pairs.
    row_counts: Option<Vec<i64>>,
}

impl Grouper {
    /// An empty grouping whose groups start from `template`, with room
    /// for `groups` groups; `rows_only`: the caller's word that every
    /// aggregate reads no column, so that, when every accumulator of
    /// `template` is a count too (`count(*)`), a group's rows are only
    /// counted.
    pub(super) fn new(template: Vec<Acc>, groups: usize, rows_only: bool) -> Grouper {
        let rows_only = rows_only && template.iter().all(|a| matches!(a, Acc::Count(_)));
        Grouper {
            row_counts: rows_only.then(|| Vec::with_capacity(groups)),
            accs: Vec::with_capacity(groups * template.len()),
            template,
            evicts: Vec::with_capacity(groups),
            firsts: Vec::with_capacity(groups),
            starts: Vec::with_capacity(groups),
            seen_groups: Vec::with_capacity(FOLD_EVERY + 64),
            seen_rows: Vec::with_capacity(FOLD_EVERY + 64),
        }
    }

    /// Whether enough rows were seen to fold them in now ([`FOLD_EVERY`]):
    /// the rows seen are kept in a small buffer that stays in cache (grown
    /// only for rows in more than 64 windows), not one entry per input row.
    /// Never when rows are only counted: they are folded once, at the end.
    #[inline]
    pub(super) fn should_fold(&self) -> bool {
        self.seen_groups.len() >= FOLD_EVERY
    }

    /// Notes that row `row` belongs to group `group` (folded in by [`Grouper::fold`]).
    #[inline]
    fn see(&mut self, group: u32, row: usize) {
        if let Some(counts) = &mut self.row_counts {
            counts[group as usize] += 1;
            return;
        }
        self.seen_groups.push(group);
        self.seen_rows.push(row as u32);
    }

    /// Folds the rows seen into their groups' accumulators, aggregate by
    /// aggregate (`readers[i]` reads aggregate `i`'s input). On an error,
    /// also which aggregate, and the row and window start it happened at.
    pub(super) fn fold(
        &mut self,
        readers: &[Reader],
    ) -> std::result::Result<(), (usize, usize, i64, WeirError)> {
        let n = self.template.len();
        if let Some(counts) = &mut self.row_counts {
            debug_assert!(readers.iter().all(|r| matches!(r, Reader::None)));
            for (g, c) in counts.iter_mut().enumerate() {
                let c = std::mem::take(c);
                for a in &mut self.accs[g * n..(g + 1) * n] {
                    a.add_rows(c);
                }
            }
            return Ok(());
        }
        for (ai, r) in readers.iter().enumerate() {
            Acc::update_rows(&mut self.accs, n, ai, &self.seen_groups, &self.seen_rows, r)
                .map_err(|(k, e)| {
                    let g = self.seen_groups[k] as usize;
                    (ai, self.seen_rows[k] as usize, self.starts[g], e)
                })?;
        }
        self.seen_groups.clear();
        self.seen_rows.clear();
        Ok(())
    }

    /// Adds a group seen first at `row` and returns its index.
    fn add(&mut self, row: usize, start: i64, evict_at: i64) -> u32 {
        let i = self.evicts.len() as u32;
        self.accs.extend_from_slice(&self.template);
        if let Some(counts) = &mut self.row_counts {
            counts.push(0);
        }
        self.evicts.push(evict_at);
        self.firsts.push(row as u32);
        self.starts.push(start);
        i
    }

    /// How many groups.
    pub(super) fn len(&self) -> usize {
        self.evicts.len()
    }

    /// The groups with their state keys (`keys`, in first-seen order;
    /// `None` without grouping keys).
    pub(super) fn finish(self, keys: Option<arrow::row::Rows>) -> TaskGroups {
        TaskGroups {
            keys,
            width: self.template.len(),
            evicts: self.evicts,
            accs: self.accs,
        }
    }
}

/// One task's groups in first-seen order: their state keys (Arrow's row
/// format, in one buffer) and accumulators side by side, read in place as
/// they are merged into their partitions' sets.
pub(super) struct TaskGroups {
    /// `None` without grouping keys (every group's key is empty).
    keys: Option<arrow::row::Rows>,
    /// Accumulators per group.
    width: usize,
    /// Each group's eviction time.
    evicts: Vec<i64>,
    /// Every group's accumulators, `width` per group.
    accs: Vec<Acc>,
}

impl TaskGroups {
    /// How many groups.
    pub(super) fn len(&self) -> usize {
        self.evicts.len()
    }

    /// Group `i`'s state key.
    pub(super) fn key(&self, i: usize) -> &[u8] {
        self.keys.as_ref().map_or(&[], |k| k.row(i).data())
    }

    /// Group `i`'s eviction time.
    pub(super) fn evict_at(&self, i: usize) -> i64 {
        self.evicts[i]
    }

    /// Group `i`'s accumulators.
    pub(super) fn accs(&self, i: usize) -> &[Acc] {
        &self.accs[i * self.width..(i + 1) * self.width]
    }

    /// Every group as (key, eviction time, accumulators), in first-seen order.
    #[cfg(test)]
    pub(super) fn into_groups(self) -> Vec<(Vec<u8>, i64, Vec<Acc>)> {
        (0..self.len())
            .map(|i| {
                (
                    self.key(i).to_vec(),
                    self.evict_at(i),
                    self.accs(i).to_vec(),
                )
            })
            .collect()
    }
}

/// One key column, read in place to write each row's value into a
/// batch-local group key. Two values write the same bytes exactly when
/// Arrow's row format (the state key) encodes them the same.
pub(super) enum KeyCol {
    /// Fixed-width values (integers, floats by bits, dates, timestamps, decimals).
    Fixed {
        values: arrow::buffer::Buffer,
        offset: usize,
        width: usize,
        nulls: Option<arrow::buffer::NullBuffer>,
    },
    /// `Utf8` values.
    Utf8(StringArray),
    /// `Binary` values.
    Binary(BinaryArray),
    /// Booleans.
    Bool(arrow::array::BooleanArray),
    /// Any other type: the column in Arrow's row format.
    Rows(arrow::row::Rows),
}

impl KeyCol {
    /// Reads `a` (floats already normalised) as a key column.
    pub(super) fn new(a: &ArrayRef) -> Result<KeyCol> {
        let t = a.data_type();
        Ok(match t {
            ArrowType::Utf8 => KeyCol::Utf8(a.as_string::<i32>().clone()),
            ArrowType::Binary => KeyCol::Binary(a.as_binary::<i32>().clone()),
            ArrowType::Boolean => KeyCol::Bool(a.as_boolean().clone()),
            _ if t.is_primitive() && t.primitive_width().is_some() => {
                let d = a.to_data();
                KeyCol::Fixed {
                    values: d.buffers()[0].clone(),
                    offset: d.offset(),
                    width: t.primitive_width().unwrap_or(0),
                    nulls: d.nulls().cloned(),
                }
            }
            _ => {
                let conv = RowConverter::new(vec![SortField::new(t.clone())])?;
                KeyCol::Rows(conv.convert_columns(std::slice::from_ref(a))?)
            }
        })
    }

    /// Row `r`'s value as bytes (`None` for null).
    #[inline]
    fn bytes(&self, r: usize) -> Option<&[u8]> {
        match self {
            KeyCol::Fixed {
                values,
                offset,
                width,
                nulls,
            } => {
                if nulls.as_ref().is_some_and(|n| n.is_null(r)) {
                    None
                } else {
                    let at = (offset + r) * width;
                    Some(&values.as_slice()[at..at + width])
                }
            }
            KeyCol::Utf8(a) => a.is_valid(r).then(|| a.value(r).as_bytes()),
            KeyCol::Binary(a) => a.is_valid(r).then(|| a.value(r)),
            KeyCol::Bool(_) => None,
            KeyCol::Rows(rows) => Some(rows.row(r).data()),
        }
    }

    /// Appends row `r`'s value (self-delimiting) to `out`.
    #[inline]
    fn write(&self, r: usize, out: &mut Vec<u8>) {
        match self {
            KeyCol::Fixed { .. } => match self.bytes(r) {
                None => out.push(0),
                Some(b) => {
                    out.push(1);
                    out.extend_from_slice(b);
                }
            },
            KeyCol::Bool(_) => out.push(self.small(r) as u8),
            _ => var(out, self.bytes(r)),
        }
    }

    /// The bits row `r`'s value takes in place in a packed key, when it is
    /// packed in place (fixed width up to 8 bytes, booleans) rather than interned.
    fn direct_bits(&self) -> Option<u32> {
        match self {
            KeyCol::Fixed { width, nulls, .. } if *width <= 8 => {
                Some(*width as u32 * 8 + nulls.is_some() as u32)
            }
            KeyCol::Bool(_) => Some(2),
            _ => None,
        }
    }

    /// Row `r`'s value packed in place ([`KeyCol::direct_bits`] wide: a
    /// nullable 8-byte value takes 65 bits, so this is wider than `u64`).
    #[inline]
    fn small(&self, r: usize) -> u128 {
        match self {
            KeyCol::Bool(a) => match a.is_valid(r).then(|| a.value(r)) {
                None => 0,
                Some(false) => 1,
                Some(true) => 2,
            },
            KeyCol::Fixed { nulls, .. } => {
                let mut v = [0u8; 8];
                let bytes = self.bytes(r);
                if let Some(b) = bytes {
                    v[..b.len()].copy_from_slice(b);
                }
                let value = u64::from_le_bytes(v) as u128;
                match nulls {
                    // A value goes before its validity bit.
                    Some(_) => (value << 1) | bytes.is_some() as u128,
                    None => value,
                }
            }
            _ => 0,
        }
    }
}

/// Appends a nullable variable-length value: a tag, then its length and bytes.
#[inline]
fn var(out: &mut Vec<u8>, v: Option<&[u8]>) {
    match v {
        None => out.push(0),
        Some(b) => {
            out.push(1);
            out.extend_from_slice(&(b.len() as u32).to_le_bytes());
            out.extend_from_slice(b);
        }
    }
}

/// One key column's part of a packed key.
pub(super) enum Part<'a> {
    /// Packed in place, `bits` wide.
    Direct { col: &'a KeyCol, bits: u32 },
    /// Interned to a task-local id (32 bits; `u32::MAX` is null).
    Interned(Interner<'a>),
}

/// A column's values to task-local ids, in first-seen order. Strings and
/// binaries of up to 15 bytes are looked up as one integer (their bytes
/// and length), so the common short string costs no byte comparison.
pub(super) struct Interner<'a> {
    /// The column interned.
    col: &'a KeyCol,
    /// Ids of values of up to 15 bytes, by their [`Short::Value`].
    short: FastMap<u128, u32>,
    /// Ids of longer values, by their bytes.
    long: FastMap<&'a [u8], u32>,
}

impl<'a> Interner<'a> {
    fn new(col: &'a KeyCol) -> Interner<'a> {
        Interner {
            col,
            short: FastMap::default(),
            long: FastMap::default(),
        }
    }

    /// Row `r`'s value as a [`Short`] (strings and binaries only; other
    /// values are always looked up by their bytes).
    #[inline(always)]
    fn short_form(&self, r: usize) -> Short {
        match self.col {
            KeyCol::Utf8(a) => short_value(a, r),
            KeyCol::Binary(a) => short_value(a, r),
            _ => Short::Long,
        }
    }

    /// Row `r`'s value as 128 bits: a short value in place (its bytes, and
    /// its length in the top byte), else its id tagged `0xFF` (or `0xFE`
    /// for null) in the top byte, which no length reaches.
    #[inline(always)]
    fn code(&mut self, r: usize) -> u128 {
        let short = self.short_form(r);
        match short {
            Short::Value(v) => v,
            Short::Null => 0xFE << 120,
            Short::Long => (0xFF << 120) | self.id_of(Short::Long, r) as u128,
        }
    }

    /// Row `r`'s id.
    #[inline]
    fn id(&mut self, r: usize) -> u32 {
        let short = self.short_form(r);
        self.id_of(short, r)
    }

    /// The id of row `r`, whose [`Short`] form is `short`.
    #[inline]
    fn id_of(&mut self, short: Short, r: usize) -> u32 {
        let next = (self.short.len() + self.long.len()) as u32;
        match short {
            Short::Null => u32::MAX,
            Short::Value(v) => match self.short.get(&v) {
                Some(&id) => id,
                None => {
                    self.short.insert(v, next);
                    next
                }
            },
            Short::Long => match self.col.bytes(r) {
                None => u32::MAX,
                Some(b) => match self.long.get(b) {
                    Some(&id) => id,
                    None => {
                        self.long.insert(b, next);
                        next
                    }
                },
            },
        }
    }
}

/// A string or binary value as an interning key.
enum Short {
    /// A null.
    Null,
    /// Up to 15 bytes, with the length in the top byte.
    Value(u128),
    /// Longer: looked up by its bytes.
    Long,
}

/// Row `r` of `a` as a [`Short`]: its bytes read as one 16-byte word from
/// the values buffer (no copy) where the buffer extends that far.
#[inline(always)]
fn short_value<T: arrow::array::types::ByteArrayType>(
    a: &arrow::array::GenericByteArray<T>,
    r: usize,
) -> Short {
    if a.is_null(r) {
        return Short::Null;
    }
    let offsets = a.value_offsets();
    let (start, end) = (offsets[r].as_usize(), offsets[r + 1].as_usize());
    let len = end - start;
    if len >= 16 {
        return Short::Long;
    }
    let values = a.value_data();
    let word = match values.get(start..start + 16) {
        Some(w) => u128::from_le_bytes(w.try_into().unwrap_or([0; 16])),
        None => {
            let mut v = [0u8; 16];
            v[..len].copy_from_slice(&values[start..end]);
            u128::from_le_bytes(v)
        }
    };
    let mask = (1u128 << (len * 8)) - 1;
    Short::Value((word & mask) | ((len as u128) << 120))
}

/// No group yet (a window-only key's last group before the first row).
const NO_GROUP: u32 = u32::MAX;

/// Makes each row's batch-local group key and finds its group: one
/// implementation per shape of key. The row loop is generic over it, so a
/// row pays no dispatch on the key's shape.
pub(super) trait RowKey {
    /// Whether rows are expected in runs of one window (a key of the
    /// window alone): the loop then reuses the last row's window instead
    /// of dividing. Not for other keys: where rows arrive out of order the
    /// guess mispredicts about as often as it saves a division.
    const RUNS: bool = false;

    /// Makes row `r` the current row (its key columns read once for all
    /// its windows).
    fn row(&mut self, r: usize);

    /// Puts the current row (`r`) in its group in the window starting at
    /// `start` (0 without a window); a new group's eviction time is
    /// `evict_at`.
    fn add_row(&mut self, g: &mut Grouper, r: usize, start: i64, evict_at: impl FnOnce() -> i64);
}

/// A key of one window start and nothing else: rows of a time-ordered
/// source come in runs of one window, so a row finds its group by
/// comparing with the last row's window start, looked up only when it
/// changes. That saves for tumbling windows; a row in several sliding
/// windows alternates between them and is looked up for each.
pub(super) struct WindowKey {
    /// Group index by window start.
    index: FastMap<i64, u32>,
    /// The last row's window start and group ([`NO_GROUP`] before the first).
    last: (i64, u32),
}

impl RowKey for WindowKey {
    const RUNS: bool = true;

    #[inline(always)]
    fn row(&mut self, _r: usize) {}

    #[inline(always)]
    fn add_row(&mut self, g: &mut Grouper, r: usize, start: i64, evict_at: impl FnOnce() -> i64) {
        if self.last.0 != start || self.last.1 == NO_GROUP {
            let i = *self
                .index
                .entry(start)
                .or_insert_with(|| g.add(r, start, evict_at()));
            self.last = (start, i);
        }
        g.see(self.last.1, r);
    }
}

/// The key in two 128-bit words: one string or binary column's value in
/// the first ([`Interner::code`]), the window start and every other key
/// column packed in the second.
pub(super) struct PackedKey<'a> {
    /// The string or binary column that has the first word to itself.
    wide: Option<Interner<'a>>,
    /// The other key columns, packed in order into the second word.
    parts: Vec<Part<'a>>,
    /// 64 with a window (its start takes the low bits), else 0.
    shift: u32,
    /// The current row's wide value and its other columns, shifted past
    /// the window start.
    base: (u128, u128),
    /// Group index by key.
    index: FastMap<(u128, u128), u32>,
}

impl RowKey for PackedKey<'_> {
    #[inline(always)]
    fn row(&mut self, r: usize) {
        let mut key: u128 = 0;
        for p in self.parts.iter_mut() {
            match p {
                Part::Direct { col, bits } => {
                    key = (key << *bits) | col.small(r);
                }
                Part::Interned(ids) => {
                    key = (key << 32) | ids.id(r) as u128;
                }
            }
        }
        let first = match &mut self.wide {
            Some(w) => w.code(r),
            None => 0,
        };
        // (`shift` is 0 or 64: constant shifts, not a variable u128 one.)
        let rest = if self.shift == 64 { key << 64 } else { key };
        self.base = (first, rest);
    }

    #[inline(always)]
    fn add_row(&mut self, g: &mut Grouper, r: usize, start: i64, evict_at: impl FnOnce() -> i64) {
        let key = (self.base.0, self.base.1 | start as u64 as u128);
        let i = match self.index.get(&key) {
            Some(&i) => i,
            None => {
                let i = g.add(r, start, evict_at());
                self.index.insert(key, i);
                i
            }
        };
        g.see(i, r);
    }
}

/// The key columns' bytes, after 8 bytes for the window start.
pub(super) struct BytesKey<'a> {
    /// The key columns.
    cols: &'a [KeyCol],
    /// The current row's key (the window start's 8 bytes first).
    buf: Vec<u8>,
    /// Group index by key.
    index: FastMap<Vec<u8>, u32>,
}

impl RowKey for BytesKey<'_> {
    #[inline(always)]
    fn row(&mut self, r: usize) {
        self.buf.clear();
        self.buf.resize(8, 0);
        for c in self.cols.iter() {
            c.write(r, &mut self.buf);
        }
    }

    #[inline(always)]
    fn add_row(&mut self, g: &mut Grouper, r: usize, start: i64, evict_at: impl FnOnce() -> i64) {
        self.buf[..8].copy_from_slice(&start.to_le_bytes());
        let i = match self.index.get(self.buf.as_slice()) {
            Some(&i) => i,
            None => {
                let i = g.add(r, start, evict_at());
                self.index.insert(self.buf.clone(), i);
                i
            }
        };
        g.see(i, r);
    }
}

/// The key of a task's rows, in the shape that fits it.
pub(super) enum Keyer<'a> {
    /// The window start alone.
    Window(WindowKey),
    /// Key columns (and a window start) that fit in two words.
    Packed(PackedKey<'a>),
    /// Any other key, as bytes.
    Bytes(BytesKey<'a>),
}

impl<'a> Keyer<'a> {
    /// Keys rows by `cols` (and, when `window`, a window start): by the
    /// window start alone when there are no columns, packed when they fit
    /// in two words, else as bytes; with room for `groups` groups before
    /// the index grows.
    pub(super) fn new(cols: &'a [KeyCol], window: bool, groups: usize) -> Keyer<'a> {
        if window && cols.is_empty() {
            return Keyer::Window(WindowKey {
                index: FastMap::with_capacity_and_hasher(groups, Default::default()),
                last: (0, NO_GROUP),
            });
        }
        let window_bits = if window { 64 } else { 0 };
        let wide_at = cols
            .iter()
            .position(|c| matches!(c, KeyCol::Utf8(_) | KeyCol::Binary(_)));
        let bits: u32 = cols
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != wide_at)
            .map(|(_, c)| c.direct_bits().unwrap_or(32))
            .sum();
        if bits + window_bits > 128 {
            return Keyer::Bytes(BytesKey {
                cols,
                buf: Vec::with_capacity(64),
                index: FastMap::with_capacity_and_hasher(groups, Default::default()),
            });
        }
        let parts = cols
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != wide_at)
            .map(|(_, col)| match col.direct_bits() {
                Some(bits) => Part::Direct { col, bits },
                None => Part::Interned(Interner::new(col)),
            })
            .collect();
        Keyer::Packed(PackedKey {
            wide: wide_at.map(|i| Interner::new(&cols[i])),
            parts,
            shift: window_bits,
            base: (0, 0),
            index: FastMap::with_capacity_and_hasher(groups, Default::default()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::accumulators::Kind;
    use super::*;
    use weir_plan::AggFn;

    /// The two accumulators of group `group`.
    fn counted(g: &Grouper, group: usize) -> Vec<Acc> {
        g.accs[group * 2..group * 2 + 2].to_vec()
    }

    #[test]
    fn row_counts_alone_are_counted_and_folded_once_at_the_end() {
        let count = || Acc::new(AggFn::Count, Kind::Int);
        let readers = [Reader::None, Reader::None];
        // Counts only (and not with another function, or when the caller
        // says a column is read).
        let mut g = Grouper::new(vec![count(), count()], 0, true);
        assert!(g.row_counts.is_some());
        assert!(Grouper::new(vec![count()], 0, false).row_counts.is_none());
        let sum = Acc::new(AggFn::Sum, Kind::Int);
        assert!(Grouper::new(vec![count(), sum], 0, true)
            .row_counts
            .is_none());
        let (a, b) = (g.add(0, 0, i64::MAX), g.add(1, 0, i64::MAX));
        for r in 0..3 * FOLD_EVERY {
            g.see(if r % 3 == 0 { b } else { a }, r);
            assert!(
                !g.should_fold(),
                "row {r}: rows only counted fold at the end"
            );
        }
        g.fold(&readers).unwrap();
        // A second fold adds nothing.
        g.fold(&readers).unwrap();
        let mut want_a = vec![count(), count()];
        let mut want_b = vec![count(), count()];
        for acc in &mut want_a {
            acc.add_rows(2 * FOLD_EVERY as i64);
        }
        for acc in &mut want_b {
            acc.add_rows(FOLD_EVERY as i64);
        }
        assert_eq!(counted(&g, a as usize), want_a);
        assert_eq!(counted(&g, b as usize), want_b);
    }
}
