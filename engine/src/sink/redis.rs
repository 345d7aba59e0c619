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
//! With key columns, each row is a hash at `<prefix>:<key values joined by
//! ':'>`, e.g. `page_views:2024-01-01T12:00:00Z/2024-01-01T12:01:00Z:/home`,
//! whose fields are the other columns (all columns with
//! [`RedisSink::key_fields`]). A row replaces its hash as a whole (`DEL` then
//! `HSET`), so a field that became null disappears. Values are text:
//! timestamps ISO-8601 in UTC (`2024-01-01T12:00:00Z`), a window column `w`
//! two fields `w_start` and `w_end` (in a key: `start/end`, ISO-8601's
//! interval), numbers and booleans as Rust prints them, strings and binary as
//! they are; a null field is left out (a null key part is empty).
//!
//! - update mode: each row's hash is replaced (key columns required);
//! - complete mode: the hashes the previous batch wrote (listed in the set
//!   `<prefix>:__weir_keys__`) are deleted and the whole result written;
//! - append mode: hashes as in update mode.
//!
//! Without key columns (append or complete mode), rows go to the list
//! `<prefix>` as JSON objects (`RPUSH`; windows as `{"start", "end"}`); in
//! complete mode the list is replaced.
//!
//! ## Exactly once: one Lua script per batch
//!
//! The batch is written by one `EVALSHA` of a Lua script that first reads
//! the query's last written batch id from the hash `<prefix>:__weir_batch__`
//! (field: the query id from the checkpoint, value: the batch id), returns
//! without writing anything if this batch's id is at or below it (a re-run
//! after a crash), and otherwise writes the rows and records the batch id.
//! Redis runs a script atomically — no other client's command runs in
//! between, and its writes reach replicas and the AOF as one `MULTI/EXEC` —
//! so the rows and the batch id land together or not at all.
//!
//! Why a script rather than `WATCH` + `MULTI/EXEC`: the check and the write
//! happen in one round trip on the server, with no optimistic-lock retry loop
//! when another client touches the marker between `WATCH` and `EXEC`, and the
//! guard cannot be left out by a later edit of the client code. (A script has
//! no rollback: the script writes only hashes, sets and lists it has just
//! deleted or created, so it does not fail half-way short of the server
//! running out of memory.) The marker is a hash keyed by query id rather than
//! one number so that a new checkpoint (a new query whose batch ids restart at
//! 0) writing to the same prefix is not mistaken for a replay.
//!
//! One server (or a cluster with every key in one slot: use a hash tag as
//! the prefix, e.g. `{page_views}`). The sink connects when the query runs
//! its first batch, not in `start()`: a server that is down fails the query
//! with an error that `await_termination` returns. A connection lost
//! mid-batch is retried once on a new connection (safe: the batch id decides).
//! The connection's name (`CLIENT LIST`) is `weir:<prefix>`.

use std::time::Duration;

use ::redis::{Client, Connection, ConnectionAddr, RedisError, Script};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{DataType, SchemaRef, TimeUnit, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use weir_plan::OutputMode;

use super::{Sink, SinkContext};
use crate::error::{Result, WeirError};

/// The `redis` crate this sink is built on, re-exported so code that reads
/// what the sink wrote uses the same version.
pub use ::redis as client;

/// Writes rows as hashes. KEYS: marker, key index, row keys...; ARGV: query
/// id, batch id, complete ('1'/'0'), then per row a field count and pairs.
const HASH_SCRIPT: &str = r"
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then return 0 end
local complete = ARGV[3] == '1'
if complete then
  local old = redis.call('SMEMBERS', KEYS[2])
  for _, k in ipairs(old) do redis.call('DEL', k) end
  redis.call('DEL', KEYS[2])
end
local a = 4
for i = 3, #KEYS do
  local k = KEYS[i]
  local n = tonumber(ARGV[a])
  a = a + 1
  redis.call('DEL', k)
  if n > 0 then
    local args = {}
    for j = 1, 2 * n do args[j] = ARGV[a + j - 1] end
    redis.call('HSET', k, unpack(args))
    a = a + 2 * n
  end
  if complete then redis.call('SADD', KEYS[2], k) end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

/// Appends JSON rows to a list. KEYS: marker, list; ARGV: query id, batch id,
/// complete ('1'/'0'), then the rows.
const LIST_SCRIPT: &str = r"
local last = redis.call('HGET', KEYS[1], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '1' then redis.call('DEL', KEYS[2]) end
local i = 4
while i <= #ARGV do
  local chunk = {}
  for j = i, math.min(i + 999, #ARGV) do chunk[#chunk + 1] = ARGV[j] end
  redis.call('RPUSH', KEYS[2], unpack(chunk))
  i = i + 1000
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

/// Writes each micro-batch to Redis atomically, exactly once (see the
/// [module docs](self)).
pub struct RedisSink {
    url: String,
    key_prefix: Option<String>,
    key_columns: Vec<String>,
    key_fields: bool,
    timeout: Duration,
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
    hash_script: Script,
    list_script: Script,
}

fn is_window(t: &DataType) -> bool {
    matches!(t, DataType::Struct(f) if f.len() == 2 && f[0].name() == "start" && f[1].name() == "end")
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
            t if is_window(t) => {
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
            rt: None,
        }
    }

    /// The prefix of every key the sink writes (default: the query's name).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// The output columns that identify a row (the query's group-by keys, e.g.
    /// `["window", "page"]`): their values, joined by `:`, follow the prefix
    /// in each row's key. Required in update mode; without them, append and
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

    /// How long connecting, and each batch's write, may take (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
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

    /// Runs the batch's script; `Ok(false)`: the batch was written before.
    fn write(
        rt: &Runtime,
        conn: &mut Connection,
        batch_id: i64,
        batches: &[RecordBatch],
    ) -> std::result::Result<bool, WriteError> {
        let marker = format!("{}:__weir_batch__", rt.prefix);
        let complete = if rt.complete { "1" } else { "0" };
        let written: i64 = if rt.keys.is_empty() {
            let mut inv = rt.list_script.prepare_invoke();
            inv.key(&marker)
                .key(&rt.prefix)
                .arg(&rt.query_id)
                .arg(batch_id)
                .arg(complete);
            for b in batches {
                let cells: Vec<Cells> = b
                    .columns()
                    .iter()
                    .map(Cells::new)
                    .collect::<Result<_>>()
                    .map_err(WriteError::Other)?;
                let schema = b.schema();
                for r in 0..b.num_rows() {
                    let mut row = serde_json::Map::new();
                    for (f, c) in schema.fields().iter().zip(&cells) {
                        row.insert(f.name().clone(), c.json(r));
                    }
                    inv.arg(serde_json::Value::Object(row).to_string());
                }
            }
            inv.invoke(conn).map_err(WriteError::Redis)?
        } else {
            let mut inv = rt.hash_script.prepare_invoke();
            inv.key(&marker)
                .key(format!("{}:__weir_keys__", rt.prefix))
                .arg(&rt.query_id)
                .arg(batch_id)
                .arg(complete);
            for b in batches {
                let cols = b.columns();
                let cells: Vec<Cells> = cols
                    .iter()
                    .map(Cells::new)
                    .collect::<Result<_>>()
                    .map_err(WriteError::Other)?;
                for r in 0..b.num_rows() {
                    let mut key = rt.prefix.as_bytes().to_vec();
                    for &k in &rt.keys {
                        key.push(b':');
                        let parts = cells[k].render(r);
                        for (i, p) in parts.iter().enumerate() {
                            if i > 0 {
                                key.push(b'/');
                            }
                            key.extend_from_slice(p.as_deref().unwrap_or_default());
                        }
                    }
                    inv.key(key);
                    let mut pairs: Vec<(&str, Vec<u8>)> = Vec::new();
                    for (c, names) in &rt.fields {
                        for (name, v) in names.iter().zip(cells[*c].render(r)) {
                            if let Some(v) = v {
                                pairs.push((name, v));
                            }
                        }
                    }
                    inv.arg(pairs.len());
                    for (n, v) in pairs {
                        inv.arg(n).arg(v);
                    }
                }
            }
            inv.invoke(conn).map_err(WriteError::Redis)?
        };
        Ok(written == 1)
    }
}

enum WriteError {
    Redis(RedisError),
    Other(WeirError),
}

/// The query's id from its checkpoint's `metadata` (stable across restarts).
fn query_id(checkpoint_dir: &std::path::Path) -> Result<String> {
    let path = checkpoint_dir.join("metadata");
    std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v.get("id").and_then(|i| i.as_str()).map(str::to_string))
        .ok_or_else(|| {
            WeirError::checkpoint(
                &path,
                "the Redis sink needs the query id from the checkpoint's metadata",
            )
        })
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

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
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
        let names: Vec<&String> = schema.fields().iter().map(|f| f.name()).collect();
        let mut keys = Vec::new();
        for k in &self.key_columns {
            match names.iter().position(|n| *n == k) {
                Some(i) => keys.push(i),
                None => {
                    return Err(self.err(format!(
                        "key column `{k}` is not in the query's output (its columns: {})",
                        names
                            .iter()
                            .map(|n| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            }
        }
        if ctx.output_mode == OutputMode::Update && keys.is_empty() {
            return Err(self.err(
                "update output mode overwrites rows by key: call .key_columns(vec![...]) with \
                 the query's group-by columns, e.g. [\"window\", \"page\"]",
            ));
        }
        let fields: Vec<(usize, Vec<String>)> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.key_fields || !keys.contains(i))
            .map(|(i, f)| {
                let names = if is_window(f.data_type()) {
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
            query_id: query_id(&ctx.checkpoint_dir)?,
            prefix,
            complete: ctx.output_mode == OutputMode::Complete,
            keys,
            fields,
            conn: None,
            hash_script: Script::new(HASH_SCRIPT),
            list_script: Script::new(LIST_SCRIPT),
        });
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let mut rt = self
            .rt
            .take()
            .ok_or_else(|| self.err("add_batch before open"))?;
        let result = self.add_batch_with(&mut rt, batch_id, batches);
        self.rt = Some(rt);
        result
    }
}

impl RedisSink {
    fn add_batch_with(
        &self,
        rt: &mut Runtime,
        batch_id: i64,
        batches: &[RecordBatch],
    ) -> Result<()> {
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        for attempt in 0..2 {
            let mut conn = match rt.conn.take() {
                Some(c) => c,
                None => self.connect(rt)?,
            };
            if rows == 0 && !rt.complete {
                rt.conn = Some(conn);
                return Ok(()); // nothing to write, nothing to duplicate
            }
            match Self::write(rt, &mut conn, batch_id, batches) {
                Ok(written) => {
                    if !written {
                        tracing::info!(
                            prefix = %rt.prefix,
                            "Redis sink: batch {batch_id} was written before; skipped"
                        );
                    }
                    rt.conn = Some(conn);
                    return Ok(());
                }
                Err(WriteError::Redis(e))
                    if attempt == 0 && (e.is_io_error() || e.is_unrecoverable_error()) =>
                {
                    tracing::warn!(
                        prefix = %rt.prefix,
                        "Redis sink: batch {batch_id}: {e}; retrying on a new connection"
                    );
                }
                Err(WriteError::Redis(e)) => {
                    if !e.is_io_error() {
                        rt.conn = Some(conn);
                    }
                    return Err(self.err(format!(
                        "writing batch {batch_id} to Redis at {} failed: {e}",
                        Self::address(&rt.client)
                    )));
                }
                Err(WriteError::Other(e)) => {
                    rt.conn = Some(conn);
                    return Err(e);
                }
            }
        }
        unreachable!("the second attempt returns")
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

    #[test]
    fn the_description_hides_the_password() {
        let d = RedisSink::new("redis://:secret@127.0.0.1:6380/2")
            .key_prefix("pv")
            .description();
        assert_eq!(d, "RedisSink[127.0.0.1:6380/2 prefix pv]");
    }
}
