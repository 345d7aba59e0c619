//! The Redis sink (feature `redis`): each micro-batch's rows written to
//! Redis atomically and exactly once, for dashboards that read the latest
//! aggregate by key.
//!
//! ```no_run
//! use weir_engine::sink::RedisSink;
//!
//! let sink = RedisSink::new("redis://127.0.0.1:6380/0")
//!     .key_prefix("page_views")
//!     .key_columns(vec!["window", "page"]);
//! ```
//!
//! ## Layout
//!
//! With key columns, each row is a hash at `<prefix>:<key part>:<key part>...`
//! (one part per key column, in the order given), e.g.
//! `page_views:2024-01-01T12:00:00Z/2024-01-01T12:01:00Z:/home`, whose fields
//! are the other columns (all columns with [`RedisSink::key_fields`]). A row
//! replaces its hash as a whole, so a field that became null disappears.
//! Values are text: timestamps ISO-8601 in UTC (`2024-01-01T12:00:00Z`), a
//! window column `w` two fields `w_start` and `w_end`, numbers and booleans
//! as Rust prints them, strings and binary as they are; a null field is left
//! out.
//!
//! ### Key parts
//!
//! The key is an injective function of the key values: two rows with
//! different keys never share a hash, and no row's key is one of the sink's
//! own names. Each part is:
//!
//! - a string, binary or other value: its text with `\` written `\\` and `:`
//!   written `\:` (so `("a:b", "c")` is `a\:b:c` and `("a", "b:c")` is
//!   `a:b\:c`); text without `:` or `\` — the common case — is unchanged;
//! - a timestamp: ISO-8601 as above, unescaped: its text has exactly two `:`
//!   (or none: a value beyond chrono's range, ±262,000 years, is the integer
//!   of microseconds), so where it ends is known from the column's type;
//! - a window: `start/end`, each bound a timestamp as above (ISO-8601's
//!   interval);
//! - null: `\N` (distinct from the empty string, which is an empty part).
//!
//! A part never begins with `\` followed by anything but `\`, `:` or `N`, so
//! the sink's own keys, which begin `<prefix>:\_`, cannot be reached by a
//! value: `<prefix>:\__weir_batch__` (the batch marker),
//! `<prefix>:\__weir_keys__` (complete mode's key index) and
//! `<prefix>:\__weir_stage__:...` (a batch being staged). Give each query its
//! own prefix, not one that is another's prefix followed by `:`.
//!
//! ### Output modes
//!
//! - update mode: each row's hash is replaced (key columns required);
//! - complete mode: the hashes the previous batch wrote (listed in the set
//!   `<prefix>:\__weir_keys__`) are deleted and the whole result written;
//! - append mode: hashes as in update mode.
//!
//! Without key columns (append or complete mode), rows go to the list
//! `<prefix>` as JSON objects (windows as `{"start", "end"}`); in complete
//! mode the list is replaced.
//!
//! ## Exactly once: staged chunks, one apply script per batch
//!
//! A batch is written in three steps, so that no request grows with the
//! batch and the batch still lands whole or not at all:
//!
//! 1. the query's last written batch id is read from the hash
//!    `<prefix>:\__weir_batch__` (field: the query id from the checkpoint,
//!    value: the batch id); a batch at or below it was written before (a
//!    re-run after a crash) and nothing is sent;
//! 2. the rows are staged, [`chunk_rows`](RedisSink::chunk_rows) (1000) rows
//!    per pipelined request, under keys of this attempt alone:
//!    `<prefix>:\__weir_stage__:<query id>:<batch id>:<nonce>` lists each row's
//!    target key, and `...:<nonce>:<i>` holds row `i`'s hash (the list layout
//!    stages the JSON rows in the first key). Readers never look there.
//!    Before the first batch a sink stages, and after a failed attempt, the
//!    query's leftover staging keys (`<prefix>:\__weir_stage__:<query id>:*`,
//!    found with `SCAN`, so one pass over the database's keys) are deleted
//!    first;
//! 3. one `EVALSHA` of the apply script checks the marker again, checks that
//!    every staged row is there (else it fails before writing anything: a
//!    script has no rollback), then moves each staged hash onto its target
//!    with `RENAME` (replacing the old hash; a row without fields deletes
//!    it), updates complete mode's key index and records the batch id. Its
//!    arguments are a handful of names and numbers whatever the batch's size.
//!
//! Redis runs a script atomically — no other client's command runs in
//! between, and its writes reach replicas and the AOF as one `MULTI/EXEC` —
//! so the rows and the batch id land together or not at all. A crash between
//! chunks, or before the script, leaves only staging keys, which are never
//! applied: the re-run deletes them and stages afresh under a new nonce, so
//! once it is done no key under the prefix but the rows and the sink's own
//! marker and key index remains (a staged row is a hash with the row's
//! fields, which a reader scanning `<prefix>*` must not take for a row).
//! Staging keys also carry a 24-hour TTL (removed by `PERSIST` once moved),
//! for a query that is never restarted. A crash after the script leaves the
//! batch written and marked, and the re-run writes nothing. Two writers of
//! one query (a zombie) each stage their own copy; the marker lets only the
//! first apply, and the second's script drops its staging. (One writer's
//! cleanup may delete the other's staging mid-batch; that writer's script
//! then finds rows missing and fails the batch, writing nothing.)
//!
//! Why a script rather than `WATCH` + `MULTI/EXEC`: the check and the write
//! happen in one round trip on the server, with no optimistic-lock retry loop
//! when another client touches the marker between `WATCH` and `EXEC`, and the
//! guard cannot be left out by a later edit of the client code. The marker is
//! a hash keyed by query id rather than one number so that a new checkpoint
//! (a new query whose batch ids restart at 0) writing to the same prefix is
//! not mistaken for a replay.
//!
//! ### Upgrading from versions with unescaped keys
//!
//! Markers and key indexes of earlier versions, at `<prefix>:__weir_batch__`
//! and `<prefix>:__weir_keys__`, are still read, so an upgrade neither
//! re-writes a batch nor leaves a stale complete result. Earlier versions
//! wrote key parts unescaped, a null as an empty part (a window `start/end`
//! with empty null bounds). When a row is written whose key in that format
//! differs and can be no row's key now (as for a string or binary key value
//! with `:`, or with a `\` not followed by `\` or `:`; a null timestamp or
//! window; a window with a null bound), the apply script deletes the hash at
//! the former key in the same script as the row's write, so a reader sees
//! one hash per group. A former key that is also a possible key now is left alone, as it
//! may be another row's current hash: a null string, binary or other non-time
//! key value (its former part was empty, which is now the empty string's
//! key) or a value whose text reads as escaped (e.g. `a\\b`, now the key
//! of `a\b`). Such a row's hash at the former key stays beside the new one
//! until it is deleted by hand (`DEL <prefix>:<former key>`); complete mode
//! is not affected (the previous result's keys are deleted from its index).
//!
//! One server (or a cluster with every key in one slot: use a hash tag as
//! the prefix, e.g. `{page_views}`; `RENAME` needs it too). The sink connects
//! when the query runs its first batch, not in `start()`: a server that is
//! down fails the query with an error that `await_termination` returns. A
//! connection lost mid-batch is retried once on a new connection (safe: the
//! batch id decides). The connection's name (`CLIENT LIST`) is
//! `weir:<prefix>`. The crash-injection points `redis_before_script` and
//! `redis_after_script` (see [`crate::failpoint`]) surround the apply script.

use std::time::Duration;

use ::redis::{Client, Connection, ConnectionAddr, RedisError, Script};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use weir_plan::OutputMode;

use super::exactly_once::{self, Attempt, AttemptError, MarkedWrite, Written};
use super::{BoxSink, Sink, SinkContext};
use crate::error::{Result, WeirError};

/// The `redis` crate this sink is built on, re-exported so code that reads
/// what the sink wrote uses the same version.
pub use ::redis as client;

/// Lua: the query's last batch id recorded in the marker hash `k` (nil if
/// none, or if `k` is not a hash: a legacy name a row hash may hold).
const LAST_FN: &str = r"
local function last_in(k)
  if redis.call('TYPE', k).ok ~= 'hash' then return nil end
  return tonumber(redis.call('HGET', k, ARGV[1]))
end
local function written(bid)
  local a, b = last_in(KEYS[1]), last_in(KEYS[2])
  return (a ~= nil and a >= bid) or (b ~= nil and b >= bid)
end
";

/// The last batch id written. KEYS: marker, legacy marker; ARGV: query id.
const LAST_SCRIPT: &str = r"
local a, b = last_in(KEYS[1]), last_in(KEYS[2])
return math.max(a or -1, b or -1)
";

/// Applies a staged batch of hashes. KEYS: marker, legacy marker, key index,
/// legacy key index, staging list (triples: target key, '1' if the row has a
/// staged hash at `<staging list>:<i>` else '0', and the row's key in an
/// earlier version's format to delete, or ''); ARGV: query id, batch id,
/// complete ('1'/'0'), staged row count.
const HASH_APPLY_SCRIPT: &str = r"
local stage = KEYS[5]
local n = redis.call('LLEN', stage) / 3
if written(tonumber(ARGV[2])) then
  for i = 1, n do redis.call('DEL', stage .. ':' .. i) end
  redis.call('DEL', stage)
  return 0
end
if n ~= tonumber(ARGV[4]) then
  return redis.error_reply('WEIR_STAGE the staged batch has ' .. n .. ' of ' .. ARGV[4] ..
    ' rows (its staging keys expired or were deleted); nothing was written')
end
-- Everything is checked before the first write: a script has no rollback.
for i = 1, n, 500 do
  local e = redis.call('LRANGE', stage, 3 * (i - 1), 3 * (i - 1) + 1499)
  for j = 1, #e, 3 do
    local row = i + (j - 1) / 3
    if e[j + 1] == '1' and redis.call('EXISTS', stage .. ':' .. row) == 0 then
      return redis.error_reply('WEIR_STAGE staged row ' .. row ..
        ' is missing (expired or deleted); nothing was written')
    end
  end
end
local complete = ARGV[3] == '1'
if complete then
  for _, index in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('TYPE', index).ok == 'set' then
      for _, k in ipairs(redis.call('SMEMBERS', index)) do redis.call('DEL', k) end
      redis.call('DEL', index)
    end
  end
end
for i = 1, n, 500 do
  local e = redis.call('LRANGE', stage, 3 * (i - 1), 3 * (i - 1) + 1499)
  for j = 1, #e, 3 do
    local row = i + (j - 1) / 3
    local target = e[j]
    if e[j + 2] ~= '' then redis.call('DEL', e[j + 2]) end
    if e[j + 1] == '1' then
      redis.call('RENAME', stage .. ':' .. row, target)
      redis.call('PERSIST', target)
    else
      redis.call('DEL', target)
    end
    if complete then redis.call('SADD', KEYS[3], target) end
  end
end
redis.call('DEL', stage)
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

/// Applies a staged batch of JSON rows to the list. KEYS: marker, legacy
/// marker, list, staging list; ARGV: query id, batch id, complete ('1'/'0'),
/// staged row count.
const LIST_APPLY_SCRIPT: &str = r"
local stage = KEYS[4]
local n = redis.call('LLEN', stage)
if written(tonumber(ARGV[2])) then
  redis.call('DEL', stage)
  return 0
end
if n ~= tonumber(ARGV[4]) then
  return redis.error_reply('WEIR_STAGE the staged batch has ' .. n .. ' of ' .. ARGV[4] ..
    ' rows (its staging key expired or was deleted); nothing was written')
end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[3])
  if n > 0 then
    redis.call('RENAME', stage, KEYS[3])
    redis.call('PERSIST', KEYS[3])
  end
else
  for i = 0, n - 1, 1000 do
    local chunk = redis.call('LRANGE', stage, i, i + 999)
    redis.call('RPUSH', KEYS[3], unpack(chunk))
  end
  redis.call('DEL', stage)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

/// How long staging keys outlive a writer that died before applying them.
const STAGE_TTL_SECS: u64 = 24 * 60 * 60;

/// The escape character of key parts.
const ESC: u8 = b'\\';

/// A null key part.
const NULL_PART: &[u8] = b"\\N";

/// The sink's own names under `<prefix>:`, out of reach of any key value
/// (a key part never begins with `\_`).
const MARKER_NAME: &str = "\\__weir_batch__";
const INDEX_NAME: &str = "\\__weir_keys__";
const STAGE_NAME: &str = "\\__weir_stage__";

/// Appends `bytes` to a key with `\` and `:` escaped.
fn push_escaped(key: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b == b':' || b == ESC {
            key.push(ESC);
        }
        key.push(b);
    }
}

/// The key of row `r`: the prefix and each key column's part, each after a
/// `:` (see the module docs for why it is injective).
fn row_key(prefix: &str, cells: &[Cells], keys: &[usize], r: usize) -> Vec<u8> {
    let mut key = prefix.as_bytes().to_vec();
    for &k in keys {
        key.push(b':');
        cells[k].key_part(r, &mut key);
    }
    key
}

/// The key an earlier version gave row `r` (key parts unescaped, null and
/// a null window bound empty, a window `start/end`).
fn legacy_row_key(prefix: &str, cells: &[Cells], keys: &[usize], r: usize) -> Vec<u8> {
    let mut key = prefix.as_bytes().to_vec();
    for &k in keys {
        key.push(b':');
        for (i, p) in cells[k].render(r).iter().enumerate() {
            if i > 0 {
                key.push(b'/');
            }
            key.extend_from_slice(p.as_deref().unwrap_or_default());
        }
    }
    key
}

/// What a key part may look like, by the key column's type.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KeyKind {
    /// Escaped text (strings, binary and every other type).
    Escaped,
    Time,
    Window,
}

/// Whether `key` may be the key of some row whose key columns are of
/// `kinds`. True for every key [`row_key`] gives (it may also be true for
/// some that no row has): a key for which it is false is no row's.
fn may_be_row_key(prefix: &str, kinds: &[KeyKind], key: &[u8]) -> bool {
    fn rest_matches(kinds: &[KeyKind], k: &[u8]) -> bool {
        let Some((kind, more)) = kinds.split_first() else {
            return k.is_empty();
        };
        let Some(k) = k.strip_prefix(b":") else {
            return false;
        };
        part_ends(*kind, k)
            .into_iter()
            .any(|end| rest_matches(more, &k[end..]))
    }
    key.strip_prefix(prefix.as_bytes())
        .is_some_and(|k| rest_matches(kinds, k))
}

/// The lengths a part of `kind` at the start of `k` may have.
fn part_ends(kind: KeyKind, k: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    if k.starts_with(NULL_PART) {
        ends.push(NULL_PART.len());
    }
    match kind {
        KeyKind::Escaped => {
            // Up to the first unescaped `:`; an escape is `\\` or `\:`.
            let mut i = 0;
            loop {
                match k.get(i) {
                    None | Some(b':') => {
                        ends.push(i);
                        break;
                    }
                    Some(&ESC) if matches!(k.get(i + 1), Some(&ESC | b':')) => i += 2,
                    Some(&ESC) => break,
                    Some(_) => i += 1,
                }
            }
        }
        KeyKind::Time => ends.extend(time_ends(k)),
        KeyKind::Window => {
            // `start/end`, each bound a timestamp or `\N`.
            let bound = |k: &[u8]| -> Vec<usize> {
                let mut e = time_ends(k);
                if k.starts_with(NULL_PART) {
                    e.push(NULL_PART.len());
                }
                e
            };
            for s in bound(k) {
                if k.get(s) == Some(&b'/') {
                    ends.extend(bound(&k[s + 1..]).into_iter().map(|e| s + 1 + e));
                }
            }
        }
    }
    ends
}

/// The lengths a timestamp's text at the start of `k` may have: ISO-8601
/// has two `:` and the integer form none, neither has `/` or `\`, and
/// neither is empty.
fn time_ends(k: &[u8]) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut colons = 0;
    for i in 1..=k.len() {
        let b = k[i - 1];
        if b == b'/' || b == ESC {
            break;
        }
        if b == b':' {
            colons += 1;
            if colons > 2 {
                break;
            }
            continue;
        }
        if (colons == 0 || colons == 2) && matches!(k.get(i), None | Some(b':' | b'/')) {
            ends.push(i);
        }
    }
    ends
}

/// The key to delete along with writing row `r` at `key`: the row's key in
/// an earlier version's format, when that differs and can be no row's key
/// now nor one of the sink's own names (a value with `:` or `\` in a text
/// key, a null timestamp or window). None: nothing to delete.
fn stale_legacy_key(
    prefix: &str,
    cells: &[Cells],
    keys: &[usize],
    kinds: &[KeyKind],
    r: usize,
    key: &[u8],
) -> Option<Vec<u8>> {
    let legacy = legacy_row_key(prefix, cells, keys, r);
    let own = |name: &str| legacy == format!("{prefix}:{name}").as_bytes();
    (legacy != key
        && !legacy.starts_with(format!("{prefix}:\\_").as_bytes())
        && !own("__weir_batch__")
        && !own("__weir_keys__")
        && !may_be_row_key(prefix, kinds, &legacy))
    .then_some(legacy)
}

/// Escapes the glob characters of `s` for a `SCAN ... MATCH` pattern.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A name unique to this staging attempt.
fn nonce() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{nanos:x}{:x}{:x}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// Writes each micro-batch to Redis atomically, exactly once (see the
/// [module docs](self)).
pub struct RedisSink {
    url: String,
    key_prefix: Option<String>,
    key_columns: Vec<String>,
    key_fields: bool,
    timeout: Duration,
    chunk_rows: usize,
    rt: Option<Runtime>,
}

struct Runtime {
    client: Client,
    query_id: String,
    prefix: String,
    complete: bool,
    /// Output columns that make the key (empty: the list layout).
    keys: Vec<usize>,
    /// Output columns written as fields, with their field names.
    fields: Vec<(usize, Vec<String>)>,
    conn: Option<Connection>,
    /// Staging keys of this query may be left over (from a process that
    /// died before its apply script, or an attempt that failed): removed
    /// before the next batch is staged.
    stale_staging: bool,
    last_script: Script,
    hash_script: Script,
    list_script: Script,
}

/// Microseconds since the epoch as ISO-8601 UTC (`2024-01-01T12:00:00Z`,
/// with a fraction only when there is one).
fn iso(us: i64) -> String {
    chrono::DateTime::from_timestamp_micros(us)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true))
        .unwrap_or_else(|| us.to_string())
}

/// One output column, ready to render cell by cell.
enum Cells<'a> {
    Text(ArrayRef),
    Binary(ArrayRef),
    Time(ArrayRef),
    Window(ArrayRef, ArrayRef, &'a dyn Array),
    Other(&'a dyn Array, ArrayFormatter<'a>),
}

impl<'a> Cells<'a> {
    fn new(a: &'a ArrayRef) -> Result<Cells<'a>> {
        Ok(match a.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                Cells::Text(cast(a, &DataType::Utf8)?)
            }
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                Cells::Binary(cast(a, &DataType::Binary)?)
            }
            DataType::Timestamp(_, _) => Cells::Time(cast(
                a,
                &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            )?),
            t if crate::row::is_window_type(t) => {
                let s = a.as_struct();
                let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
                Cells::Window(cast(s.column(0), &ts)?, cast(s.column(1), &ts)?, a.as_ref())
            }
            _ => Cells::Other(
                a.as_ref(),
                ArrayFormatter::try_new(a.as_ref(), &FormatOptions::default())?,
            ),
        })
    }

    fn time(a: &ArrayRef, r: usize) -> Option<String> {
        let t = a.as_primitive::<TimestampMicrosecondType>();
        (!t.is_null(r)).then(|| iso(t.value(r)))
    }

    /// The cell's text (bytes for binary); a window gives start and end.
    fn render(&self, r: usize) -> Vec<Option<Vec<u8>>> {
        match self {
            Cells::Text(a) => {
                let s = a.as_string::<i32>();
                vec![(!s.is_null(r)).then(|| s.value(r).as_bytes().to_vec())]
            }
            Cells::Binary(a) => {
                let b = a.as_binary::<i32>();
                vec![(!b.is_null(r)).then(|| b.value(r).to_vec())]
            }
            Cells::Time(a) => vec![Self::time(a, r).map(String::into_bytes)],
            Cells::Window(start, end, w) => {
                if w.is_null(r) {
                    vec![None, None]
                } else {
                    vec![
                        Self::time(start, r).map(String::into_bytes),
                        Self::time(end, r).map(String::into_bytes),
                    ]
                }
            }
            Cells::Other(a, f) => {
                vec![(!a.is_null(r)).then(|| f.value(r).to_string().into_bytes())]
            }
        }
    }

    /// What the column's key parts look like.
    fn key_kind(&self) -> KeyKind {
        match self {
            Cells::Time(_) => KeyKind::Time,
            Cells::Window(..) => KeyKind::Window,
            _ => KeyKind::Escaped,
        }
    }

    /// Appends the cell's key part (see the module docs): text escaped,
    /// timestamps and windows as they are, null `\N`.
    fn key_part(&self, r: usize, key: &mut Vec<u8>) {
        let time = |a: &ArrayRef, key: &mut Vec<u8>| match Self::time(a, r) {
            Some(t) => key.extend_from_slice(t.as_bytes()),
            None => key.extend_from_slice(NULL_PART),
        };
        match self {
            Cells::Time(a) => time(a, key),
            Cells::Window(_, _, w) if w.is_null(r) => key.extend_from_slice(NULL_PART),
            Cells::Window(start, end, _) => {
                time(start, key);
                key.push(b'/');
                time(end, key);
            }
            _ => match self.render(r).into_iter().next().flatten() {
                Some(v) => push_escaped(key, &v),
                None => key.extend_from_slice(NULL_PART),
            },
        }
    }

    /// The cell as JSON (for the list layout).
    fn json(&self, r: usize) -> serde_json::Value {
        use serde_json::Value;
        let text = |b: &Option<Vec<u8>>| match b {
            Some(b) => Value::String(String::from_utf8_lossy(b).into_owned()),
            None => Value::Null,
        };
        match self {
            Cells::Window(_, _, w) if !w.is_null(r) => {
                let v = self.render(r);
                serde_json::json!({"start": text(&v[0]), "end": text(&v[1])})
            }
            Cells::Binary(a) => {
                let b = a.as_binary::<i32>();
                if b.is_null(r) {
                    Value::Null
                } else {
                    Value::String(b.value(r).iter().map(|x| format!("{x:02x}")).collect())
                }
            }
            Cells::Other(a, f) if !a.is_null(r) => {
                let s = f.value(r).to_string();
                match a.data_type() {
                    DataType::Boolean
                    | DataType::Int8
                    | DataType::Int16
                    | DataType::Int32
                    | DataType::Int64
                    | DataType::UInt8
                    | DataType::UInt16
                    | DataType::UInt32
                    | DataType::UInt64
                    | DataType::Float32
                    | DataType::Float64 => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                    _ => Value::String(s),
                }
            }
            _ => text(&self.render(r)[0]),
        }
    }
}

impl RedisSink {
    /// Writes to the Redis server at `url` (`redis://[:password@]host:port[/db]`).
    pub fn new(url: impl Into<String>) -> RedisSink {
        RedisSink {
            url: url.into(),
            key_prefix: None,
            key_columns: Vec::new(),
            key_fields: false,
            timeout: Duration::from_secs(30),
            chunk_rows: 1000,
            rt: None,
        }
    }

    /// The prefix of every key the sink writes (default: the query's name).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// The output columns that identify a row (the query's group-by keys, e.g.
    /// `["window", "page"]`): their values, each after a `:` with `:` and `\`
    /// escaped (see the [module docs](self#key-parts)), follow the prefix in
    /// each row's key. Required in update mode; without them, append and
    /// complete mode write a list of JSON rows.
    pub fn key_columns<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key_columns = columns.into_iter().map(Into::into).collect();
        self
    }

    /// With `true`, each hash also holds the key columns as fields (so a reader
    /// need not parse the key); default `false`: only the other columns.
    pub fn key_fields(mut self, include: bool) -> Self {
        self.key_fields = include;
        self
    }

    /// How long connecting, and each request of a batch's write, may take
    /// (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many rows each staging request carries (default 1000, at least 1):
    /// a batch of any size is sent in requests of this many rows and applied
    /// by one small script (see the [module docs](self)).
    pub fn chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = rows.max(1);
        self
    }

    fn err(&self, message: impl Into<String>) -> WeirError {
        WeirError::Sink {
            sink: self.description(),
            message: message.into(),
        }
    }

    fn address(client: &Client) -> String {
        let info = client.get_connection_info();
        let at = match &info.addr {
            ConnectionAddr::Tcp(h, p) => format!("{h}:{p}"),
            ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port} (TLS)"),
            ConnectionAddr::Unix(p) => p.display().to_string(),
        };
        format!("{at}/{}", info.redis.db)
    }

    fn connect(&self, rt: &Runtime) -> Result<Connection> {
        let address = Self::address(&rt.client);
        let conn = rt
            .client
            .get_connection_with_timeout(self.timeout)
            .map_err(|e| {
                self.err(format!(
                    "cannot connect to Redis at {address}: {e}. Is redis-server running and \
                     listening there? Start one (e.g. `redis-server --port 6380 --bind 127.0.0.1 \
                     --save ''`, or in weir's repository `bash scripts/services.sh start`, which \
                     prints WEIR_REDIS_URL) or fix the URL"
                ))
            })?;
        conn.set_read_timeout(Some(self.timeout))
            .and_then(|_| conn.set_write_timeout(Some(self.timeout)))
            .map_err(|e| self.err(format!("cannot set timeouts on the connection: {e}")))?;
        // What CLIENT LIST shows for the sink's connection.
        let name: String = format!("weir:{}", rt.prefix)
            .chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '_' })
            .collect();
        let mut conn = conn;
        ::redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(&name)
            .query::<()>(&mut conn)
            .map_err(|e| self.err(format!("Redis at {address}: CLIENT SETNAME failed: {e}")))?;
        Ok(conn)
    }

    /// Deletes this query's staging keys (`<prefix>:\__weir_stage__:<query
    /// id>:*`, found with `SCAN`) when some may be left over: before the
    /// first batch the sink stages, and after a failed attempt. A staged row
    /// carries the row's fields, so a reader scanning the prefix must not
    /// find one once a batch is done.
    fn drop_stale_staging(
        &self,
        rt: &mut Runtime,
        conn: &mut Connection,
    ) -> std::result::Result<(), RedisError> {
        if !rt.stale_staging {
            return Ok(());
        }
        let pattern = format!(
            "{}:{}:{}:*",
            glob_escape(&rt.prefix),
            glob_escape(STAGE_NAME),
            glob_escape(&rt.query_id)
        );
        let mut cursor: u64 = 0;
        let mut dropped = 0usize;
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query(conn)?;
            for chunk in keys.chunks(500) {
                ::redis::cmd("DEL").arg(chunk).query::<()>(conn)?;
                dropped += chunk.len();
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        if dropped > 0 {
            tracing::info!(
                prefix = %rt.prefix,
                "Redis sink: deleted {dropped} staging keys an unfinished batch left"
            );
        }
        rt.stale_staging = false;
        Ok(())
    }

    /// Stages the batch in chunks and applies it with one script (see the
    /// module docs), or writes nothing if its marker says it was written
    /// before.
    fn write(
        &self,
        rt: &Runtime,
        conn: &mut Connection,
        batch_id: i64,
        batches: &[RecordBatch],
    ) -> std::result::Result<Written, AttemptError<RedisError>> {
        let marker = format!("{}:{MARKER_NAME}", rt.prefix);
        let legacy_marker = format!("{}:__weir_batch__", rt.prefix);
        let last: i64 = rt
            .last_script
            .key(&marker)
            .key(&legacy_marker)
            .arg(&rt.query_id)
            .invoke(conn)
            .map_err(AttemptError::Client)?;
        // The script answers -1 when the query wrote no batch yet.
        if exactly_once::written_before(Some(last).filter(|l| *l >= 0), batch_id) {
            return Ok(Written::Before);
        }
        let stage = format!(
            "{}:{STAGE_NAME}:{}:{batch_id}:{}",
            rt.prefix,
            rt.query_id,
            nonce()
        );
        let chunk = self.chunk_rows.max(1);
        let mut staged = 0usize;
        let mut pipe = ::redis::pipe();
        let mut in_pipe = 0usize;
        let flush = |pipe: &mut ::redis::Pipeline,
                     in_pipe: &mut usize,
                     conn: &mut Connection|
         -> std::result::Result<(), AttemptError<RedisError>> {
            if *in_pipe > 0 {
                pipe.cmd("EXPIRE").arg(&stage).arg(STAGE_TTL_SECS).ignore();
                pipe.query::<()>(conn).map_err(AttemptError::Client)?;
                pipe.clear();
                *in_pipe = 0;
            }
            Ok(())
        };
        for b in batches {
            let cells: Vec<Cells> = b
                .columns()
                .iter()
                .map(Cells::new)
                .collect::<Result<_>>()
                .map_err(AttemptError::Other)?;
            let schema = b.schema();
            let kinds: Vec<KeyKind> = rt.keys.iter().map(|&k| cells[k].key_kind()).collect();
            for r in 0..b.num_rows() {
                staged += 1;
                if rt.keys.is_empty() {
                    let mut row = serde_json::Map::new();
                    for (f, c) in schema.fields().iter().zip(&cells) {
                        row.insert(f.name().clone(), c.json(r));
                    }
                    pipe.cmd("RPUSH")
                        .arg(&stage)
                        .arg(serde_json::Value::Object(row).to_string())
                        .ignore();
                } else {
                    let key = row_key(&rt.prefix, &cells, &rt.keys, r);
                    let legacy = stale_legacy_key(&rt.prefix, &cells, &rt.keys, &kinds, r, &key)
                        .unwrap_or_default();
                    let mut hset = ::redis::cmd("HSET");
                    let staged_row = format!("{stage}:{staged}");
                    hset.arg(&staged_row);
                    let mut any = false;
                    for (c, names) in &rt.fields {
                        for (name, v) in names.iter().zip(cells[*c].render(r)) {
                            if let Some(v) = v {
                                hset.arg(name).arg(v);
                                any = true;
                            }
                        }
                    }
                    if any {
                        pipe.add_command(hset).ignore();
                        pipe.cmd("EXPIRE")
                            .arg(&staged_row)
                            .arg(STAGE_TTL_SECS)
                            .ignore();
                    }
                    pipe.cmd("RPUSH")
                        .arg(&stage)
                        .arg(key)
                        .arg(if any { "1" } else { "0" })
                        .arg(legacy)
                        .ignore();
                }
                in_pipe += 1;
                if in_pipe >= chunk {
                    flush(&mut pipe, &mut in_pipe, conn)?;
                }
            }
        }
        flush(&mut pipe, &mut in_pipe, conn)?;
        let complete = if rt.complete { "1" } else { "0" };
        let mut inv = if rt.keys.is_empty() {
            let mut inv = rt.list_script.prepare_invoke();
            inv.key(&marker).key(&legacy_marker).key(&rt.prefix);
            inv
        } else {
            let mut inv = rt.hash_script.prepare_invoke();
            inv.key(&marker)
                .key(&legacy_marker)
                .key(format!("{}:{INDEX_NAME}", rt.prefix))
                .key(format!("{}:__weir_keys__", rt.prefix));
            inv
        };
        inv.key(&stage)
            .arg(&rt.query_id)
            .arg(batch_id)
            .arg(complete)
            .arg(staged);
        crate::failpoint::failpoint("redis_before_script", batch_id);
        let written: i64 = inv.invoke(conn).map_err(AttemptError::Client)?;
        crate::failpoint::failpoint("redis_after_script", batch_id);
        Ok(if written == 1 {
            Written::Now
        } else {
            Written::Before
        })
    }
}

/// `format("redis")`: `url`, `keyPrefix`, `keyColumns`, `keyFields`,
/// `timeout`, `chunkRows`.
pub(super) fn from_options(
    o: &super::SinkOptions,
) -> std::result::Result<super::BoxSink, weir_plan::connectors::OptionError> {
    let mut s =
        RedisSink::new(o.get("url").unwrap_or_default()).key_columns(o.columns("keyColumns")?);
    if let Some(p) = o.get("keyPrefix") {
        s = s.key_prefix(p);
    }
    if let Some(yes) = o.flag("keyFields")? {
        s = s.key_fields(yes);
    }
    if let Some(t) = o.duration("timeout")? {
        s = s.timeout(t);
    }
    if let Some(n) = o.number("chunkRows")? {
        s = s.chunk_rows(usize::try_from(n).unwrap_or(usize::MAX));
    }
    Ok(Box::new(s))
}

impl Sink for RedisSink {
    fn description(&self) -> String {
        let at = Client::open(self.url.as_str())
            .map(|c| Self::address(&c))
            .unwrap_or_else(|_| "<invalid url>".into());
        match &self.key_prefix {
            Some(p) => format!("RedisSink[{at} prefix {p}]"),
            None => format!("RedisSink[{at}]"),
        }
    }

    fn for_task(&self, task: &str, mode: OutputMode) -> Result<BoxSink> {
        exactly_once::refuse_complete_per_task(mode, task, "every key", "")
            .map_err(|m| self.err(m))?;
        // Each task's batch markers are its own (keyed by the task's query
        // id); the tasks write disjoint keys under one prefix.
        if self.key_prefix.as_deref().is_none_or(str::is_empty) {
            return Err(self.err(
                "under scale-out each task is a query of its own name, so the key prefix cannot default to the query name: call .key_prefix(\"...\")",
            ));
        }
        Ok(Box::new(RedisSink {
            url: self.url.clone(),
            key_prefix: self.key_prefix.clone(),
            key_columns: self.key_columns.clone(),
            key_fields: self.key_fields,
            timeout: self.timeout,
            chunk_rows: self.chunk_rows,
            rt: None,
        }))
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        crate::connector::check_sink_option("redis", "url", &self.url)?;
        if let Some(p) = &self.key_prefix {
            crate::connector::check_sink_option("redis", "keyPrefix", p)?;
        }
        let client = Client::open(self.url.as_str()).map_err(|e| {
            self.err(format!(
                "invalid Redis URL ({e}); use `redis://host:port/db`, e.g. `redis://127.0.0.1:6379/0`"
            ))
        })?;
        let prefix = match (&self.key_prefix, &ctx.query_name) {
            (Some(p), _) if !p.is_empty() => p.clone(),
            (None, Some(n)) if !n.is_empty() => n.clone(),
            _ => {
                return Err(
                    self.err("no key prefix: call .key_prefix(\"...\") or give the query a name")
                )
            }
        };
        let schema: &SchemaRef = &ctx.schema;
        let keys =
            exactly_once::key_positions(schema, &self.key_columns).map_err(|m| self.err(m))?;
        exactly_once::require_keys_in_update_mode(
            ctx.output_mode,
            &self.key_columns,
            "overwrites rows by key",
        )
        .map_err(|m| self.err(m))?;
        let fields: Vec<(usize, Vec<String>)> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.key_fields || !keys.contains(i))
            .map(|(i, f)| {
                let names = if crate::row::is_window_type(f.data_type()) {
                    vec![format!("{}_start", f.name()), format!("{}_end", f.name())]
                } else {
                    vec![f.name().clone()]
                };
                (i, names)
            })
            .collect();
        if !keys.is_empty() && fields.is_empty() {
            return Err(self.err(
                "every output column is a key column, so the hashes would be empty: call \
                 .key_fields(true) to store the keys as fields too",
            ));
        }
        self.rt = Some(Runtime {
            client,
            query_id: ctx.query_id.clone(),
            prefix,
            complete: ctx.output_mode == OutputMode::Complete,
            keys,
            fields,
            conn: None,
            stale_staging: true,
            last_script: Script::new(&format!("{LAST_FN}{LAST_SCRIPT}")),
            hash_script: Script::new(&format!("{LAST_FN}{HASH_APPLY_SCRIPT}")),
            list_script: Script::new(&format!("{LAST_FN}{LIST_APPLY_SCRIPT}")),
        });
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let mut rt = self
            .rt
            .take()
            .ok_or_else(|| self.err("add_batch before open"))?;
        let result = exactly_once::write_batch(
            &mut Attempt::new(self, &mut rt, batch_id, batches),
            batch_id,
        );
        self.rt = Some(rt);
        result
    }
}

/// One batch written to Redis, as [`exactly_once::write_batch`] runs it.
impl MarkedWrite for Attempt<'_, RedisSink, Runtime> {
    type Conn = Connection;
    type Error = RedisError;
    fn conn(&mut self) -> &mut Option<Self::Conn> {
        &mut self.rt.conn
    }

    fn sink(&self) -> String {
        self.sink.description()
    }

    fn connect(&mut self) -> Result<Connection> {
        self.sink.connect(self.rt)
    }

    fn write(
        &mut self,
        conn: &mut Connection,
    ) -> std::result::Result<Written, AttemptError<RedisError>> {
        let rows: usize = self.batches.iter().map(|b| b.num_rows()).sum();
        if rows == 0 && !self.rt.complete {
            return Ok(Written::Now); // nothing to write, nothing to duplicate
        }
        let result = self
            .sink
            .drop_stale_staging(self.rt, conn)
            .map_err(AttemptError::Client)
            .and_then(|()| self.sink.write(self.rt, conn, self.batch_id, self.batches));
        if result.is_err() {
            self.rt.stale_staging = true;
        }
        result
    }

    fn is_connection_error(&self, e: &RedisError) -> bool {
        e.is_io_error() || e.is_unrecoverable_error()
    }

    fn keeps_connection(&self, _conn: &Connection, e: &RedisError) -> bool {
        !e.is_io_error()
    }

    fn failed(&self, e: RedisError) -> WeirError {
        self.sink.err(format!(
            "writing batch {} to Redis at {} failed: {e}",
            self.batch_id,
            RedisSink::address(&self.rt.client)
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray, StructArray, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Fields};

    use super::*;

    #[test]
    fn cells_render_iso_timestamps_and_window_bounds() {
        let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let start: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![1_704_110_400_000_000]).with_timezone("UTC"),
        );
        let end: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![1_704_110_460_500_000]).with_timezone("UTC"),
        );
        let w: ArrayRef = Arc::new(StructArray::new(
            Fields::from(vec![
                Field::new("start", ts.clone(), true),
                Field::new("end", ts, true),
            ]),
            vec![start, end],
            None,
        ));
        let c = Cells::new(&w).unwrap();
        assert_eq!(
            c.render(0),
            vec![
                Some(b"2024-01-01T12:00:00Z".to_vec()),
                Some(b"2024-01-01T12:01:00.500Z".to_vec())
            ]
        );
        assert_eq!(
            c.json(0),
            serde_json::json!({"start": "2024-01-01T12:00:00Z", "end": "2024-01-01T12:01:00.500Z"})
        );
        let n: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), None]));
        let c = Cells::new(&n).unwrap();
        assert_eq!(c.render(0), vec![Some(b"7".to_vec())]);
        assert_eq!(c.render(1), vec![None]);
        assert_eq!(c.json(0), serde_json::json!(7));
        let s: ArrayRef = Arc::new(StringArray::from(vec!["/home"]));
        assert_eq!(Cells::new(&s).unwrap().json(0), serde_json::json!("/home"));
    }

    /// A window's bounds (either may be null).
    type Bounds = (Option<i64>, Option<i64>);

    /// A key column's value, for the key property tests.
    #[derive(Debug, Clone, PartialEq)]
    enum KeyVal {
        Text(Option<String>),
        Bin(Option<Vec<u8>>),
        Int(Option<i64>),
        Time(Option<i64>),
        Window(Option<Bounds>),
    }

    fn utc() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    }

    /// One column holding `values` (all of one kind).
    fn key_column(values: &[KeyVal]) -> ArrayRef {
        use arrow::array::BinaryArray;
        match &values[0] {
            KeyVal::Text(_) => Arc::new(StringArray::from(
                values
                    .iter()
                    .map(|v| match v {
                        KeyVal::Text(t) => t.clone(),
                        _ => unreachable!(),
                    })
                    .collect::<Vec<_>>(),
            )),
            KeyVal::Bin(_) => Arc::new(BinaryArray::from(
                values
                    .iter()
                    .map(|v| match v {
                        KeyVal::Bin(b) => b.as_deref(),
                        _ => unreachable!(),
                    })
                    .collect::<Vec<_>>(),
            )),
            KeyVal::Int(_) => Arc::new(Int64Array::from(
                values
                    .iter()
                    .map(|v| match v {
                        KeyVal::Int(i) => *i,
                        _ => unreachable!(),
                    })
                    .collect::<Vec<_>>(),
            )),
            KeyVal::Time(_) => Arc::new(
                TimestampMicrosecondArray::from(
                    values
                        .iter()
                        .map(|v| match v {
                            KeyVal::Time(t) => *t,
                            _ => unreachable!(),
                        })
                        .collect::<Vec<_>>(),
                )
                .with_timezone("UTC"),
            ),
            KeyVal::Window(_) => {
                let w: Vec<Option<Bounds>> = values
                    .iter()
                    .map(|v| match v {
                        KeyVal::Window(w) => *w,
                        _ => unreachable!(),
                    })
                    .collect();
                let bound = |f: fn(&Bounds) -> Option<i64>| -> ArrayRef {
                    Arc::new(
                        TimestampMicrosecondArray::from(
                            w.iter().map(|x| x.as_ref().and_then(f)).collect::<Vec<_>>(),
                        )
                        .with_timezone("UTC"),
                    )
                };
                Arc::new(StructArray::new(
                    Fields::from(vec![
                        Field::new("start", utc(), true),
                        Field::new("end", utc(), true),
                    ]),
                    vec![bound(|x| x.0), bound(|x| x.1)],
                    Some(w.iter().map(Option::is_some).collect::<Vec<_>>().into()),
                ))
            }
        }
    }

    /// The keys of the rows `tuples` (each a tuple of key values).
    fn keys_of(prefix: &str, tuples: &[Vec<KeyVal>]) -> Vec<Vec<u8>> {
        let columns: Vec<ArrayRef> = (0..tuples[0].len())
            .map(|c| key_column(&tuples.iter().map(|t| t[c].clone()).collect::<Vec<_>>()))
            .collect();
        let cells: Vec<Cells> = columns.iter().map(|c| Cells::new(c).unwrap()).collect();
        let keys: Vec<usize> = (0..columns.len()).collect();
        (0..tuples.len())
            .map(|r| row_key(prefix, &cells, &keys, r))
            .collect()
    }

    /// The kind of key part a value gives.
    fn kind_of(v: &KeyVal) -> KeyKind {
        match v {
            KeyVal::Time(_) => KeyKind::Time,
            KeyVal::Window(_) => KeyKind::Window,
            _ => KeyKind::Escaped,
        }
    }

    /// The earlier version's key of each row of `tuples` that the sink
    /// deletes when it writes the row (see [`stale_legacy_key`]).
    fn stale_legacy_keys(prefix: &str, tuples: &[Vec<KeyVal>]) -> Vec<Option<String>> {
        let columns: Vec<ArrayRef> = (0..tuples[0].len())
            .map(|c| key_column(&tuples.iter().map(|t| t[c].clone()).collect::<Vec<_>>()))
            .collect();
        let cells: Vec<Cells> = columns.iter().map(|c| Cells::new(c).unwrap()).collect();
        let keys: Vec<usize> = (0..columns.len()).collect();
        let kinds: Vec<KeyKind> = cells.iter().map(Cells::key_kind).collect();
        (0..tuples.len())
            .map(|r| {
                let key = row_key(prefix, &cells, &keys, r);
                stale_legacy_key(prefix, &cells, &keys, &kinds, r, &key)
                    .map(|k| String::from_utf8_lossy(&k).into_owned())
            })
            .collect()
    }

    /// What a value's key part decodes to: its text (a timestamp's ISO
    /// text, a window's `start/end` with `\N` for a null bound), None: null.
    fn canonical(v: &KeyVal) -> Option<Vec<u8>> {
        let time = |t: &Option<i64>| t.map_or("\\N".to_string(), iso);
        match v {
            KeyVal::Text(t) => t.clone().map(String::into_bytes),
            KeyVal::Bin(b) => b.clone(),
            KeyVal::Int(i) => i.map(|i| i.to_string().into_bytes()),
            KeyVal::Time(t) => t.map(|t| iso(t).into_bytes()),
            KeyVal::Window(w) => w.map(|(s, e)| format!("{}/{}", time(&s), time(&e)).into_bytes()),
        }
    }

    /// Parses a key back into its parts, knowing only the prefix and the
    /// key columns' kinds: that this always succeeds and gives back the
    /// values is what makes the key function injective.
    fn decode(prefix: &str, kinds: &[KeyVal], key: &[u8]) -> Vec<Option<Vec<u8>>> {
        let mut k = key
            .strip_prefix(prefix.as_bytes())
            .expect("the key starts with the prefix");
        let is_null = |k: &[u8]| k.starts_with(b"\\N");
        // A timestamp: an integer (no ':'), or ISO text with exactly two.
        let time = |k: &mut &[u8]| -> Vec<u8> {
            if is_null(k) {
                *k = &k[2..];
                return b"\\N".to_vec();
            }
            let seg = |k: &[u8]| k.iter().position(|&b| b == b':').unwrap_or(k.len());
            let first = seg(k);
            let integer = k[..first]
                .iter()
                .enumerate()
                .all(|(i, &b)| b.is_ascii_digit() || (i == 0 && b == b'-'));
            let mut end = first;
            if !integer {
                for _ in 0..2 {
                    end += 1 + seg(&k[end + 1..]);
                }
            }
            let t = k[..end].to_vec();
            *k = &k[end..];
            t
        };
        let mut out = Vec::new();
        for kind in kinds {
            assert_eq!(k.first(), Some(&b':'), "a ':' before each part");
            k = &k[1..];
            let part = match kind {
                KeyVal::Text(_) | KeyVal::Bin(_) | KeyVal::Int(_) => {
                    if is_null(k) {
                        k = &k[2..];
                        None
                    } else {
                        let mut v = Vec::new();
                        while let Some(&b) = k.first() {
                            if b == b':' {
                                break;
                            }
                            if b == ESC {
                                assert!(matches!(k.get(1), Some(b'\\' | b':')), "{key:?}");
                                v.push(k[1]);
                                k = &k[2..];
                            } else {
                                v.push(b);
                                k = &k[1..];
                            }
                        }
                        Some(v)
                    }
                }
                KeyVal::Time(_) => Some(time(&mut k)).filter(|t| t != b"\\N"),
                KeyVal::Window(_) => {
                    if is_null(k) && k.get(2) != Some(&b'/') {
                        k = &k[2..];
                        None
                    } else {
                        let slash = k.iter().position(|&b| b == b'/').expect("start/end");
                        let mut w = k[..slash + 1].to_vec();
                        k = &k[slash + 1..];
                        w.extend(time(&mut k));
                        Some(w)
                    }
                }
            };
            out.push(part);
        }
        assert!(k.is_empty(), "the key has more than its parts: {key:?}");
        out
    }

    mod key_properties {
        use proptest::prelude::*;

        use super::*;

        fn time() -> impl Strategy<Value = i64> {
            prop_oneof![
                any::<i64>(),
                -10_000_000i64..10_000_000,
                Just(i64::MIN),
                Just(i64::MAX),
                Just(-8_210_298_412_800_000_000i64), // chrono's lower bound
            ]
        }

        fn text() -> impl Strategy<Value = String> {
            prop_oneof![
                "[a:\\\\N_/]{0,5}",
                Just("__weir_batch__".to_string()),
                Just("__weir_keys__".to_string()),
                Just("\\__weir_batch__".to_string()),
                Just("\\N".to_string()),
                any::<String>(),
            ]
        }

        /// A value of the same kind as `kind`.
        fn value(kind: u8) -> BoxedStrategy<KeyVal> {
            match kind {
                0 => proptest::option::of(text()).prop_map(KeyVal::Text).boxed(),
                1 => proptest::option::of(proptest::collection::vec(
                    prop_oneof![Just(b':'), Just(b'\\'), Just(b'N'), any::<u8>()],
                    0..5,
                ))
                .prop_map(KeyVal::Bin)
                .boxed(),
                2 => proptest::option::of(any::<i64>())
                    .prop_map(KeyVal::Int)
                    .boxed(),
                3 => proptest::option::of(time()).prop_map(KeyVal::Time).boxed(),
                _ => proptest::option::of((
                    proptest::option::of(time()),
                    proptest::option::of(time()),
                ))
                .prop_map(KeyVal::Window)
                .boxed(),
            }
        }

        /// Two tuples of key values of the same kinds.
        fn two_tuples() -> impl Strategy<Value = (Vec<KeyVal>, Vec<KeyVal>)> {
            proptest::collection::vec(0u8..5, 1..4).prop_flat_map(|kinds| {
                let tuple = |kinds: &[u8]| kinds.iter().map(|&k| value(k)).collect::<Vec<_>>();
                (tuple(&kinds), tuple(&kinds))
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            /// Distinct key tuples give distinct keys, the key decodes back to
            /// its values, and no key is one of the sink's own names.
            #[test]
            fn the_key_function_is_injective((a, b) in two_tuples()) {
                let prefix = "pv";
                let keys = keys_of(prefix, &[a.clone(), b.clone()]);
                for (t, key) in [&a, &b].into_iter().zip(&keys) {
                    let want: Vec<Option<Vec<u8>>> = t.iter().map(canonical).collect();
                    prop_assert_eq!(decode(prefix, t, key), want);
                    for own in [MARKER_NAME, INDEX_NAME] {
                        let own = format!("{prefix}:{own}").into_bytes();
                        prop_assert_ne!(key, &own);
                    }
                    let stage = format!("{prefix}:{STAGE_NAME}");
                    let own = format!("{prefix}:\\_");
                    prop_assert!(!key.starts_with(stage.as_bytes()));
                    prop_assert!(!key.starts_with(own.as_bytes()));
                }
                prop_assert_eq!(a == b, keys[0] == keys[1], "{:?} / {:?}", a, b);
            }

            /// Every key the sink gives passes [`may_be_row_key`], so an
            /// earlier version's key the sink deletes is never another row's
            /// current hash, nor one of the sink's own names.
            #[test]
            fn a_deleted_legacy_key_is_no_rows_key((a, b) in two_tuples()) {
                let prefix = "pv";
                let kinds: Vec<KeyKind> = a.iter().map(kind_of).collect();
                let keys = keys_of(prefix, &[a.clone(), b.clone()]);
                for key in &keys {
                    prop_assert!(may_be_row_key(prefix, &kinds, key), "{:?}", String::from_utf8_lossy(key));
                }
                if let Some(stale) = &stale_legacy_keys(prefix, &[a.clone(), b.clone()])[0] {
                    prop_assert_ne!(stale.as_bytes(), &keys[1][..]);
                    prop_assert!(!stale.starts_with("pv:\\_"));
                }
            }

            /// Timestamps render injectively (the key leaves them unescaped).
            #[test]
            fn iso_timestamps_are_injective(a in time(), b in time()) {
                prop_assert_eq!(a == b, iso(a) == iso(b));
                prop_assert_eq!(iso(a).bytes().filter(|&c| c == b':').count() % 2, 0);
            }
        }
    }

    #[test]
    fn keys_escape_the_separator_and_name_null() {
        let t = |s: Option<&str>| KeyVal::Text(s.map(str::to_string));
        let keys = keys_of(
            "pv",
            &[
                vec![t(Some("a:b")), t(Some("c"))],
                vec![t(Some("a")), t(Some("b:c"))],
                vec![t(Some("x\\")), t(None)],
                vec![t(Some("/home")), t(Some(""))],
                vec![t(Some("__weir_batch__")), t(Some("__weir_keys__"))],
            ],
        );
        let keys: Vec<String> = keys
            .into_iter()
            .map(|k| String::from_utf8(k).unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "pv:a\\:b:c",
                "pv:a:b\\:c",
                "pv:x\\\\:\\N",
                "pv:/home:",
                "pv:__weir_batch__:__weir_keys__"
            ]
        );
        let w = keys_of(
            "pv",
            &[vec![
                KeyVal::Window(Some((
                    Some(1_704_110_400_000_000),
                    Some(1_704_110_460_000_000),
                ))),
                t(Some("/home")),
            ]],
        );
        assert_eq!(
            String::from_utf8(w[0].clone()).unwrap(),
            "pv:2024-01-01T12:00:00Z/2024-01-01T12:01:00Z:/home"
        );
    }

    /// A row's key in the earlier format is deleted when it can be no row's
    /// key now, and kept when it may be (a null text key was `pv:`, which is
    /// now the empty string's key).
    #[test]
    fn stale_legacy_keys_are_the_unambiguous_ones() {
        let t = |s: Option<&str>| KeyVal::Text(s.map(str::to_string));
        let two = stale_legacy_keys(
            "pv",
            &[
                vec![t(Some("a:b")), t(Some("c"))],
                vec![t(Some("a")), t(Some("b"))],
                vec![t(Some("x")), t(None)],
                vec![t(Some("x\\y")), t(Some("z"))],
                vec![t(Some("x\\\\")), t(Some("z"))],
            ],
        );
        let key = |k: &str| Some(k.to_string());
        assert_eq!(two, [key("pv:a:b:c"), None, None, key("pv:x\\y:z"), None]);
        let one = stale_legacy_keys(
            "pv",
            &[
                vec![t(Some("http://x"))],
                vec![t(Some("\\__weir_batch__"))],
                vec![t(Some("x\\"))],
            ],
        );
        assert_eq!(one, [key("pv:http://x"), None, key("pv:x\\")]);
        let times = stale_legacy_keys(
            "pv",
            &[
                vec![KeyVal::Time(None), t(Some("a"))],
                vec![KeyVal::Time(Some(0)), t(Some("a"))],
            ],
        );
        assert_eq!(times, [key("pv::a"), None]);
        let windows = stale_legacy_keys(
            "pv",
            &[
                vec![KeyVal::Window(None)],
                vec![KeyVal::Window(Some((Some(0), None)))],
                vec![KeyVal::Window(Some((Some(0), Some(60_000_000))))],
            ],
        );
        assert_eq!(
            windows,
            [key("pv:/"), key("pv:1970-01-01T00:00:00Z/"), None]
        );
    }

    #[test]
    fn the_description_hides_the_password() {
        let d = RedisSink::new("redis://:secret@127.0.0.1:6380/2")
            .key_prefix("pv")
            .description();
        assert_eq!(d, "RedisSink[127.0.0.1:6380/2 prefix pv]");
    }
}
