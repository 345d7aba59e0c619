//! The PostgreSQL sink (feature `postgres`): each micro-batch's rows written
//! to a table, exactly once — beyond Spark, where a JDBC write inside
//! `foreachBatch` duplicates rows when a batch is retried.
//!
//! ```no_run
//! use weir_engine::sink::PostgresSink;
//!
//! let sink = PostgresSink::new("host=127.0.0.1 port=5433 user=postgres dbname=postgres", "page_views")
//!     .key_columns(vec!["window", "page"])
//!     .create_table(true);
//! ```
//!
//! ## Exactly once
//!
//! Each batch is ONE transaction that
//!
//! 1. claims the batch in `<schema>.weir_sink_commits(query_id text, sink text,
//!    batch_id bigint, primary key (query_id, sink))` with an upsert that only
//!    raises `batch_id` — if the recorded id is already at or above this batch's,
//!    the batch was written before (a re-run after a crash: the engine logged
//!    `offsets/N` but died before `commits/N`) and the transaction is rolled back
//!    without writing anything; the claim also locks the row, so a second
//!    writer of the same query (a zombie) waits and then finds the batch
//!    taken (or fails after `lock_timeout`, writing nothing);
//! 2. writes the rows: in update mode an upsert (`INSERT ... ON CONFLICT (keys)
//!    DO UPDATE`), in complete mode `DELETE FROM` the table and insert the whole
//!    result (readers keep seeing the previous result until the commit), in
//!    append mode a plain insert;
//! 3. commits. A crash anywhere before the commit leaves neither the rows nor
//!    the batch id; after it, both.
//!
//! `query_id` is the query's id from its checkpoint (stable across restarts;
//! a new checkpoint is a new query and writes from batch 0 again), `sink` is
//! the table name as given to [`PostgresSink::new`].
//!
//! The commit table lives in the schema of the target table (`<schema>` above:
//! the one the table name gives, or else the schema the connection's
//! `search_path` finds the table in when the sink connects), and is always
//! named with that schema — never looked up through the search path, where a
//! `weir_sink_commits` in another schema could capture the markers. The data
//! and its markers so stay together (a user who may create tables in its own
//! schema needs no rights on `public`); the sink creates the commit table
//! there when it is missing. (Earlier versions found the commit table through
//! the search path, usually `public.weir_sink_commits`. After an upgrade,
//! while the commit table in the target's schema has no row for the query
//! and table, the batch's transaction reads the row from the commit table the
//! search path finds, if that is another table, and carries its batch id
//! over before claiming: a batch pending at the upgrade is not written
//! again, whichever schema the target table is in.)
//!
//! ## Names
//!
//! Every identifier is quoted whole, embedded `"` doubled: a column `a.b` is
//! the column `"a.b"` (never the field `b` of a composite column `a`), and
//! names are case-sensitive. The table is `name` or `schema.name`: the first
//! `.` separates the schema, so a table whose own name holds a `.` is given
//! with its schema (`public.daily.views` is the table `daily.views` in
//! `public`).
//!
//! ## Timeouts
//!
//! Nothing the sink does waits without bound: connecting gives up after
//! [`connect_timeout`](PostgresSink::connect_timeout) (10 s), and the session
//! runs with `statement_timeout` ([`statement_timeout`](PostgresSink::statement_timeout),
//! 60 s per statement) and `lock_timeout` ([`lock_timeout`](PostgresSink::lock_timeout),
//! 10 s waiting for any one lock, e.g. a row another session holds with
//! `SELECT ... FOR UPDATE`, or the table during an `ALTER TABLE`). TCP
//! keepalives (after 30 s idle, unless the connection string sets them) find a
//! server that vanished. A batch that hits a timeout fails the query with the
//! server's error and what to do (the transaction is rolled back, nothing of
//! the batch is written); restarted, the query re-runs the batch.
//!
//! ## Columns
//!
//! Each output column is a table column of the same name; a window column
//! `w` is two columns `w_start` and `w_end` (`timestamptz`). Types:
//!
//! | Arrow | PostgreSQL |
//! |---|---|
//! | Int8, Int16 | `smallint` |
//! | Int32, UInt8, UInt16 | `integer` |
//! | Int64, UInt32 | `bigint` |
//! | Float32 | `real` |
//! | Float64 | `double precision` |
//! | Utf8, LargeUtf8, Utf8View | `text` |
//! | Boolean | `boolean` |
//! | Timestamp with a time zone (weir's: µs, UTC) | `timestamptz` |
//! | Timestamp without a time zone | `timestamp` |
//! | Binary, LargeBinary, BinaryView | `bytea` |
//! | Date32, Date64 | `date` |
//! | window `struct<start, end>` | two `timestamptz` columns |
//!
//! Values are sent with these types and PostgreSQL's assignment casts apply,
//! so an existing table may use a wider type (`numeric` for a `bigint` count).
//! Table columns the output lacks must be nullable or have a default.
//!
//! The sink connects when the query runs its first batch, not in `start()`:
//! a server that is down — at start or later — fails the query, and
//! `await_termination` / `exception()` returns the error; restarted on the
//! same checkpoint, the query re-runs the failed batch and the sink writes it
//! once. A connection lost mid-batch is retried once on a new connection
//! (safe: the batch id decides). The session's `application_name` is
//! `weir-sink` unless the connection string sets one.
//!
//! The crash-injection point `postgres_before_commit` (see
//! [`crate::failpoint`]) is reached with the rows and the marker written and
//! `COMMIT` not yet sent.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::postgres::config::Host;
use ::postgres::types::ToSql;
use ::postgres::{Client, Config, NoTls, Statement};
use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::cast;
use arrow::datatypes::{
    DataType, Date32Type, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, SchemaRef,
    TimeUnit, TimestampMicrosecondType,
};
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter, SortField};
use weir_plan::OutputMode;

use super::exactly_once::{self, Attempt, AttemptError, MarkedWrite, Written};
use super::{BoxSink, Sink, SinkContext};
use crate::error::{Result, WeirError};

/// The `postgres` crate (the synchronous client) this sink is built on,
/// re-exported so code that reads what the sink wrote uses the same version.
pub use ::postgres as client;

/// The table that records each query's last written batch id (in the schema
/// of the target table).
pub const COMMITS_TABLE: &str = "weir_sink_commits";

/// Rows per `INSERT` statement (fewer when the columns would pass
/// PostgreSQL's 65535-parameter limit).
const ROWS_PER_STATEMENT: usize = 1000;

/// Writes each micro-batch to a PostgreSQL table in one transaction, exactly
/// once (see the [module docs](self)).
pub struct PostgresSink {
    conn_str: String,
    table: String,
    key_columns: Vec<String>,
    create_table: bool,
    connect_timeout: Duration,
    statement_timeout: Duration,
    lock_timeout: Duration,
    rt: Option<Runtime>,
}

/// What `open` worked out, plus the connection once made.
struct Runtime {
    config: Config,
    query_id: String,
    mode: OutputMode,
    columns: Vec<SqlColumn>,
    /// Indexes of the output's key columns (Arrow columns, for deduplication).
    key_sources: Vec<usize>,
    conn: Option<Conn>,
}

struct Conn {
    client: Client,
    /// The target table, schema-qualified and quoted.
    table: String,
    /// The commit table in the target's schema, qualified and quoted.
    commits: String,
    /// Prepared `INSERT`s by row count.
    statements: HashMap<usize, Statement>,
    /// The commit table is known to hold a row for this query and table (no
    /// need to look for an earlier version's marker).
    marked: bool,
}

/// One table column and where its values come from.
#[derive(Debug, Clone)]
struct SqlColumn {
    name: String,
    /// The output (Arrow) column.
    source: usize,
    /// The output column's name (for messages).
    source_name: String,
    part: Part,
    ty: SqlType,
    key: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Whole,
    WindowStart,
    WindowEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SqlType {
    SmallInt,
    Integer,
    BigInt,
    Real,
    Double,
    Text,
    Boolean,
    TimestampTz,
    Timestamp,
    Bytea,
    Date,
}

impl SqlType {
    fn sql(self) -> &'static str {
        match self {
            SqlType::SmallInt => "smallint",
            SqlType::Integer => "integer",
            SqlType::BigInt => "bigint",
            SqlType::Real => "real",
            SqlType::Double => "double precision",
            SqlType::Text => "text",
            SqlType::Boolean => "boolean",
            SqlType::TimestampTz => "timestamptz",
            SqlType::Timestamp => "timestamp",
            SqlType::Bytea => "bytea",
            SqlType::Date => "date",
        }
    }

    /// The placeholder for parameter `n`, typed so that the server knows
    /// what it receives (dates travel as text).
    fn placeholder(self, n: usize) -> String {
        match self {
            SqlType::Date => format!("${n}::text::date"),
            t => format!("${n}::{}", t.sql()),
        }
    }

    /// The SQL type of an Arrow type, and the Arrow type values are cast to first.
    fn of(t: &DataType) -> Option<(SqlType, DataType)> {
        Some(match t {
            DataType::Int8 | DataType::Int16 => (SqlType::SmallInt, DataType::Int16),
            DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
                (SqlType::Integer, DataType::Int32)
            }
            DataType::Int64 | DataType::UInt32 => (SqlType::BigInt, DataType::Int64),
            DataType::Float16 | DataType::Float32 => (SqlType::Real, DataType::Float32),
            DataType::Float64 => (SqlType::Double, DataType::Float64),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                (SqlType::Text, DataType::Utf8)
            }
            DataType::Boolean => (SqlType::Boolean, DataType::Boolean),
            DataType::Timestamp(_, tz) => (
                if tz.is_some() {
                    SqlType::TimestampTz
                } else {
                    SqlType::Timestamp
                },
                DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
            ),
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
                (SqlType::Bytea, DataType::Binary)
            }
            DataType::Date32 | DataType::Date64 => (SqlType::Date, DataType::Date32),
            _ => return None,
        })
    }
}

/// One column's values for one batch, typed for the client.
enum Values {
    I16(Vec<Option<i16>>),
    I32(Vec<Option<i32>>),
    I64(Vec<Option<i64>>),
    F32(Vec<Option<f32>>),
    F64(Vec<Option<f64>>),
    Text(Vec<Option<String>>),
    Bool(Vec<Option<bool>>),
    Time(Vec<Option<SystemTime>>),
    Bytes(Vec<Option<Vec<u8>>>),
}

impl Values {
    fn param(&self, r: usize) -> &(dyn ToSql + Sync) {
        match self {
            Values::I16(v) => &v[r],
            Values::I32(v) => &v[r],
            Values::I64(v) => &v[r],
            Values::F32(v) => &v[r],
            Values::F64(v) => &v[r],
            Values::Text(v) => &v[r],
            Values::Bool(v) => &v[r],
            Values::Time(v) => &v[r],
            Values::Bytes(v) => &v[r],
        }
    }
}

fn system_time(us: i64) -> SystemTime {
    if us >= 0 {
        UNIX_EPOCH + Duration::from_micros(us as u64)
    } else {
        UNIX_EPOCH - Duration::from_micros(us.unsigned_abs())
    }
}

/// Quotes one identifier whole (a `.` in it stays part of the name),
/// doubling embedded quotes.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Quotes a table name given as `name` or `schema.name` (the first `.`
/// separates the schema).
fn quote_table(name: &str) -> String {
    match name.split_once('.') {
        Some((schema, table)) => format!("{}.{}", quote_ident(schema), quote_ident(table)),
        None => quote_ident(name),
    }
}

/// PostgreSQL's error with its detail and hint, or the client's with its causes.
fn pg_message(e: &::postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut m = format!("{}: {}", db.severity(), db.message());
        if let Some(d) = db.detail() {
            let _ = write!(m, " ({d})");
        }
        if let Some(h) = db.hint() {
            let _ = write!(m, "; hint: {h}");
        }
        return m;
    }
    let mut m = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if !m.contains(&t) {
            let _ = write!(m, ": {t}");
        }
        src = s.source();
    }
    m
}

/// An error that a new connection may cure (the connection broke or the
/// server ended the session), as opposed to one about the statement.
fn is_connection_error(e: &::postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.as_db_error() {
        None => e.code().is_none(),
        Some(db) => {
            let code = db.code().code();
            matches!(db.severity(), "FATAL" | "PANIC")
                || code.starts_with("08")
                || code.starts_with("57P")
        }
    }
}

impl PostgresSink {
    /// Writes to `table` (`name` or `schema.name`) of the database that
    /// `conn_str` names: `host=127.0.0.1 port=5433 user=postgres dbname=app`
    /// or `postgresql://user@host:port/db` (libpq's formats; TLS is not
    /// supported).
    pub fn new(conn_str: impl Into<String>, table: impl Into<String>) -> PostgresSink {
        PostgresSink {
            conn_str: conn_str.into(),
            table: table.into(),
            key_columns: Vec::new(),
            create_table: false,
            connect_timeout: Duration::from_secs(10),
            statement_timeout: Duration::from_secs(60),
            lock_timeout: Duration::from_secs(10),
            rt: None,
        }
    }

    /// The output columns that identify a row (the query's group-by keys, e.g.
    /// `["window", "page"]`): the `ON CONFLICT` target in update mode, and the
    /// primary key of a table made by [`create_table`](Self::create_table).
    /// Required in update mode. Rows of one batch with the same key: the last wins.
    pub fn key_columns<I, S>(mut self, columns: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.key_columns = columns.into_iter().map(Into::into).collect();
        self
    }

    /// With `true`, a missing table is created at the first batch, with a
    /// primary key on the key columns (default `false`: a missing table is an
    /// error that shows the `CREATE TABLE` statement to run).
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// How long connecting may take, unless the connection string sets
    /// `connect_timeout` (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The session's `statement_timeout`: how long any one statement of the
    /// sink may run before the server cancels it and the batch fails
    /// (default 60 s; at least 1 ms).
    pub fn statement_timeout(mut self, timeout: Duration) -> Self {
        self.statement_timeout = timeout;
        self
    }

    /// The session's `lock_timeout`: how long a statement may wait for a lock
    /// (a row or table another session holds) before the batch fails
    /// (default 10 s; at least 1 ms).
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    fn err(&self, message: impl Into<String>) -> WeirError {
        WeirError::Sink {
            sink: self.description(),
            message: message.into(),
        }
    }

    /// `host:port` of each host in the connection string.
    fn address(config: &Config) -> String {
        let ports = config.get_ports();
        let port = |i: usize| {
            ports
                .get(i)
                .or_else(|| (ports.len() == 1).then(|| &ports[0]))
                .copied()
                .unwrap_or(5432)
        };
        let hosts: Vec<String> = config
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| match h {
                Host::Tcp(h) => format!("{h}:{}", port(i)),
                #[cfg(unix)]
                Host::Unix(p) => format!("{}/.s.PGSQL.{}", p.display(), port(i)),
            })
            .collect();
        if hosts.is_empty() {
            "<no host>".into()
        } else {
            hosts.join(",")
        }
    }

    /// The table's columns in the order of the output.
    fn table_columns(&self, schema: &SchemaRef) -> Result<Vec<SqlColumn>> {
        let mut out: Vec<SqlColumn> = Vec::new();
        for (i, f) in schema.fields().iter().enumerate() {
            let key = self.key_columns.iter().any(|k| k == f.name());
            match f.data_type() {
                t if crate::row::is_window_type(t) => {
                    for (part, suffix) in [(Part::WindowStart, "start"), (Part::WindowEnd, "end")] {
                        out.push(SqlColumn {
                            name: format!("{}_{suffix}", f.name()),
                            source: i,
                            source_name: f.name().clone(),
                            part,
                            ty: SqlType::TimestampTz,
                            key,
                        });
                    }
                }
                t => {
                    let (ty, _) = SqlType::of(t).ok_or_else(|| {
                        self.err(format!(
                            "column `{}` has type {t}, which the PostgreSQL sink cannot write \
                             (it writes integers, floats, strings, booleans, timestamps, dates, \
                             binary and windows); select it cast to a string",
                            f.name()
                        ))
                    })?;
                    out.push(SqlColumn {
                        name: f.name().clone(),
                        source: i,
                        source_name: f.name().clone(),
                        part: Part::Whole,
                        ty,
                        key,
                    });
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for c in &out {
            if !seen.insert(c.name.as_str()) {
                return Err(self.err(format!(
                    "two output columns map to the table column `{}` (a window column `w` \
                     becomes `w_start` and `w_end`); rename one in the query",
                    c.name
                )));
            }
        }
        Ok(out)
    }

    fn create_table_sql(&self, columns: &[SqlColumn]) -> String {
        let mut cols: Vec<String> = columns
            .iter()
            .map(|c| format!("{} {}", quote_ident(&c.name), c.ty.sql()))
            .collect();
        let keys: Vec<String> = columns
            .iter()
            .filter(|c| c.key)
            .map(|c| quote_ident(&c.name))
            .collect();
        if !keys.is_empty() {
            cols.push(format!("PRIMARY KEY ({})", keys.join(", ")));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS {} ({})",
            quote_table(&self.table),
            cols.join(", ")
        )
    }

    /// The `INSERT` into `table` (quoted) for `rows` rows: an upsert in update mode.
    fn insert_sql(rt: &Runtime, table: &str, rows: usize) -> String {
        let cols = &rt.columns;
        let mut sql = format!(
            "INSERT INTO {table} ({}) VALUES ",
            cols.iter()
                .map(|c| quote_ident(&c.name))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut n = 0;
        for r in 0..rows {
            if r > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            for (j, c) in cols.iter().enumerate() {
                if j > 0 {
                    sql.push_str(", ");
                }
                n += 1;
                sql.push_str(&c.ty.placeholder(n));
            }
            sql.push(')');
        }
        if rt.mode == OutputMode::Update {
            let keys: Vec<String> = cols
                .iter()
                .filter(|c| c.key)
                .map(|c| quote_ident(&c.name))
                .collect();
            let sets: Vec<String> = cols
                .iter()
                .filter(|c| !c.key)
                .map(|c| format!("{0} = EXCLUDED.{0}", quote_ident(&c.name)))
                .collect();
            let _ = write!(sql, " ON CONFLICT ({}) ", keys.join(", "));
            if sets.is_empty() {
                sql.push_str("DO NOTHING");
            } else {
                let _ = write!(sql, "DO UPDATE SET {}", sets.join(", "));
            }
        }
        sql
    }

    fn rows_per_statement(rt: &Runtime) -> usize {
        (65535 / rt.columns.len().max(1)).clamp(1, ROWS_PER_STATEMENT)
    }

    /// Connects, sets the session's timeouts, makes sure the table and the
    /// commit table in its schema exist and fit the output, and prepares the
    /// `INSERT`.
    fn connect(&self, rt: &Runtime) -> Result<Conn> {
        let address = Self::address(&rt.config);
        let mut client = rt.config.connect(NoTls).map_err(|e| {
            self.err(format!(
                "cannot connect to PostgreSQL at {address} (database `{}`, user `{}`): {}. \
                 Is the server running and listening there? Start it (e.g. `pg_ctl -D <datadir> start`, \
                 or in weir's repository `bash scripts/services.sh start`, which prints WEIR_POSTGRES_URL) \
                 or fix the connection string",
                rt.config.get_dbname().unwrap_or("<default>"),
                rt.config.get_user().unwrap_or("<default>"),
                pg_message(&e)
            ))
        })?;
        let sql_err = |what: &str, e: ::postgres::Error| {
            self.err(format!("{what} at {address}: {}", pg_message(&e)))
        };
        let ms = |d: Duration| d.as_millis().clamp(1, i32::MAX as u128);
        client
            .batch_execute(&format!(
                "SET statement_timeout = {}; SET lock_timeout = {}",
                ms(self.statement_timeout),
                ms(self.lock_timeout)
            ))
            .map_err(|e| sql_err("cannot set statement_timeout and lock_timeout", e))?;
        // The schema a (quoted) name resolves to, or None: no such table.
        let schema_of = |client: &mut Client, name: &str| -> Result<Option<String>> {
            let row = client
                .query_opt(
                    "SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n \
                     ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1::text)",
                    &[&name],
                )
                .map_err(|e| sql_err(&format!("cannot look up table `{name}`"), e))?;
            Ok(row.map(|r| r.get(0)))
        };
        // DDL under an advisory lock: concurrent CREATE TABLE IF NOT EXISTS can fail.
        let ddl = |client: &mut Client, sql: &str| -> Result<()> {
            let mut tx = client
                .transaction()
                .map_err(|e| sql_err("cannot begin a transaction", e))?;
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('weir_sink_ddl'))",
                &[],
            )
            .map_err(|e| sql_err("cannot take the DDL lock", e))?;
            tx.batch_execute(sql)
                .map_err(|e| sql_err(&format!("`{sql}` failed"), e))?;
            tx.commit().map_err(|e| sql_err("cannot commit DDL", e))
        };
        let given = quote_table(&self.table);
        let create = self.create_table_sql(&rt.columns);
        let schema = match schema_of(&mut client, &given)? {
            Some(s) => s,
            None => {
                if !self.create_table {
                    return Err(self.err(format!(
                        "table `{}` does not exist at {address}: create it, e.g. `{create}`, or \
                         call .create_table(true)",
                        self.table
                    )));
                }
                ddl(&mut client, &create)?;
                schema_of(&mut client, &given)?.ok_or_else(|| {
                    self.err(format!(
                        "table `{}` is not found at {address} right after `{create}`: is the \
                         first schema of the connection's search_path one the user can use?",
                        self.table
                    ))
                })?
            }
        };
        // From here on both tables are named with their schema.
        let table_name = self
            .table
            .split_once('.')
            .map_or(self.table.as_str(), |(_, t)| t);
        let quoted = format!("{}.{}", quote_ident(&schema), quote_ident(table_name));
        let commits = format!("{}.{}", quote_ident(&schema), quote_ident(COMMITS_TABLE));
        if schema_of(&mut client, &commits)?.is_none() {
            ddl(
                &mut client,
                &format!(
                    "CREATE TABLE IF NOT EXISTS {commits} (query_id text NOT NULL, \
                     sink text NOT NULL, batch_id bigint NOT NULL, PRIMARY KEY (query_id, sink))"
                ),
            )?;
        }
        let rows = client
            .query(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
                 WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
                &[&quoted],
            )
            .map_err(|e| sql_err(&format!("cannot read the columns of `{}`", self.table), e))?;
        let have: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        for c in &rt.columns {
            if !have.iter().any(|(n, _)| n == &c.name) {
                let from = if c.part == Part::Whole {
                    String::new()
                } else {
                    format!(" (from its window column `{}`)", c.source_name)
                };
                return Err(self.err(format!(
                    "table `{}` has no column `{}` ({}) for the query's output{from}; \
                     the table has: {}. Add it (`ALTER TABLE {} ADD COLUMN {} {}`) or change the query",
                    self.table,
                    c.name,
                    c.ty.sql(),
                    have.iter()
                        .map(|(n, t)| format!("{n} {t}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    quoted,
                    quote_ident(&c.name),
                    c.ty.sql()
                )));
            }
        }
        // Preparing checks the types (and, for an upsert, the key's unique
        // index) without writing anything.
        let mut statements = HashMap::new();
        let sql = Self::insert_sql(rt, &quoted, 1);
        let stmt = client.prepare(&sql).map_err(|e| {
            let writes = rt
                .columns
                .iter()
                .map(|c| format!("{} {}", c.name, c.ty.sql()))
                .collect::<Vec<_>>()
                .join(", ");
            let mut m = format!(
                "table `{}` does not fit the query's output: {} (the output writes: {writes})",
                self.table,
                pg_message(&e)
            );
            if e.code() == Some(&::postgres::error::SqlState::INVALID_COLUMN_REFERENCE) {
                let keys: Vec<String> = rt
                    .columns
                    .iter()
                    .filter(|c| c.key)
                    .map(|c| quote_ident(&c.name))
                    .collect();
                let _ = write!(
                    m,
                    ". The upsert needs a primary key or unique index on exactly the key columns: \
                     `ALTER TABLE {quoted} ADD PRIMARY KEY ({})`",
                    keys.join(", ")
                );
            }
            self.err(m)
        })?;
        statements.insert(1, stmt);
        Ok(Conn {
            client,
            table: quoted,
            commits,
            statements,
            marked: false,
        })
    }

    /// The rows to write, as (batch, row) pairs: in update mode the last row
    /// of each key (an upsert cannot touch a row twice in one statement).
    fn rows_to_write(rt: &Runtime, batches: &[RecordBatch]) -> Result<Vec<(usize, usize)>> {
        let all = || {
            batches
                .iter()
                .enumerate()
                .flat_map(|(b, batch)| (0..batch.num_rows()).map(move |r| (b, r)))
        };
        if rt.mode != OutputMode::Update || rt.key_sources.is_empty() {
            return Ok(all().collect());
        }
        let Some(first) = batches.first() else {
            return Ok(vec![]);
        };
        let converter = RowConverter::new(
            rt.key_sources
                .iter()
                .map(|&i| SortField::new(first.schema().field(i).data_type().clone()))
                .collect(),
        )?;
        let mut pos: HashMap<OwnedRow, usize> = HashMap::new();
        let mut out: Vec<Option<(usize, usize)>> = Vec::new();
        for (b, batch) in batches.iter().enumerate() {
            let cols: Vec<ArrayRef> = rt
                .key_sources
                .iter()
                .map(|&i| batch.column(i).clone())
                .collect();
            let keys = converter.convert_columns(&cols)?;
            for r in 0..batch.num_rows() {
                if let Some(old) = pos.insert(keys.row(r).owned(), out.len()) {
                    out[old] = None;
                }
                out.push(Some((b, r)));
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// One batch's values per table column.
    fn values(rt: &Runtime, batch: &RecordBatch) -> Result<Vec<Values>> {
        rt.columns
            .iter()
            .map(|c| {
                let col = batch.column(c.source);
                let array: ArrayRef = match c.part {
                    Part::Whole => col.clone(),
                    Part::WindowStart | Part::WindowEnd => {
                        let s = col.as_struct();
                        let child = s.column(if c.part == Part::WindowStart { 0 } else { 1 });
                        // A null window has null bounds.
                        if col.null_count() > 0 {
                            arrow::compute::nullif(child, &arrow::compute::is_null(col)?)?
                        } else {
                            child.clone()
                        }
                    }
                };
                let target = match c.part {
                    Part::Whole => SqlType::of(array.data_type()).map(|(_, t)| t),
                    _ => Some(DataType::Timestamp(
                        TimeUnit::Microsecond,
                        Some("UTC".into()),
                    )),
                }
                .expect("checked in open");
                let a = cast(&array, &target)?;
                Ok(match c.ty {
                    SqlType::SmallInt => {
                        Values::I16(a.as_primitive::<Int16Type>().iter().collect())
                    }
                    SqlType::Integer => Values::I32(a.as_primitive::<Int32Type>().iter().collect()),
                    SqlType::BigInt => Values::I64(a.as_primitive::<Int64Type>().iter().collect()),
                    SqlType::Real => Values::F32(a.as_primitive::<Float32Type>().iter().collect()),
                    SqlType::Double => {
                        Values::F64(a.as_primitive::<Float64Type>().iter().collect())
                    }
                    SqlType::Text => Values::Text(
                        a.as_string::<i32>()
                            .iter()
                            .map(|v| v.map(str::to_string))
                            .collect(),
                    ),
                    SqlType::Boolean => Values::Bool(a.as_boolean().iter().collect()),
                    SqlType::TimestampTz | SqlType::Timestamp => Values::Time(
                        a.as_primitive::<TimestampMicrosecondType>()
                            .iter()
                            .map(|v| v.map(system_time))
                            .collect(),
                    ),
                    SqlType::Bytea => Values::Bytes(
                        a.as_binary::<i32>()
                            .iter()
                            .map(|v| v.map(<[u8]>::to_vec))
                            .collect(),
                    ),
                    SqlType::Date => Values::Text(
                        a.as_primitive::<Date32Type>()
                            .iter()
                            .map(|v| {
                                v.and_then(|d| {
                                    chrono::DateTime::from_timestamp(d as i64 * 86_400, 0)
                                        .map(|t| t.format("%Y-%m-%d").to_string())
                                })
                            })
                            .collect(),
                    ),
                })
            })
            .collect()
    }

    /// Writes one batch in one transaction (or nothing, if its marker says
    /// it was written before).
    fn write(
        &self,
        rt: &Runtime,
        conn: &mut Conn,
        batch_id: i64,
        batches: &[RecordBatch],
    ) -> std::result::Result<Written, AttemptError<::postgres::Error>> {
        let rows = Self::rows_to_write(rt, batches).map_err(AttemptError::Other)?;
        if rows.is_empty() && rt.mode != OutputMode::Complete {
            return Ok(Written::Now); // nothing to write, nothing to duplicate
        }
        let values: Vec<Vec<Values>> = batches
            .iter()
            .map(|b| Self::values(rt, b))
            .collect::<Result<_>>()
            .map_err(AttemptError::Other)?;
        let per_stmt = Self::rows_per_statement(rt);
        // Prepare (outside the transaction) the statements this batch needs.
        let mut sizes = vec![];
        if rows.len() >= per_stmt {
            sizes.push(per_stmt);
        }
        if rows.len() % per_stmt != 0 {
            sizes.push(rows.len() % per_stmt);
        }
        if conn.statements.len() > 16 {
            conn.statements.retain(|n, _| *n == 1 || *n == per_stmt);
        }
        for n in sizes {
            if !conn.statements.contains_key(&n) {
                let stmt = conn
                    .client
                    .prepare(&Self::insert_sql(rt, &conn.table, n))
                    .map_err(AttemptError::Client)?;
                conn.statements.insert(n, stmt);
            }
        }
        let Conn {
            client,
            table,
            commits,
            statements,
            marked,
        } = conn;
        let mut tx = client.transaction().map_err(AttemptError::Client)?;
        if !*marked {
            Self::carry_earlier_marker(&mut tx, commits, &rt.query_id, &self.table)
                .map_err(AttemptError::Client)?;
        }
        let claimed = tx
            .execute(
                &format!(
                    "INSERT INTO {commits} AS c (query_id, sink, batch_id) VALUES ($1, $2, $3) \
                     ON CONFLICT (query_id, sink) DO UPDATE SET batch_id = EXCLUDED.batch_id \
                     WHERE c.batch_id < EXCLUDED.batch_id"
                ),
                &[&rt.query_id, &self.table, &batch_id],
            )
            .map_err(AttemptError::Client)?;
        if claimed == 0 {
            // Nothing written but a carried-over marker (see above).
            tx.commit().map_err(AttemptError::Client)?;
            *marked = true;
            return Ok(Written::Before);
        }
        if rt.mode == OutputMode::Complete {
            tx.execute(&format!("DELETE FROM {table}"), &[])
                .map_err(AttemptError::Client)?;
        }
        for chunk in rows.chunks(per_stmt) {
            let mut params: Vec<&(dyn ToSql + Sync)> =
                Vec::with_capacity(chunk.len() * rt.columns.len());
            for &(b, r) in chunk {
                for v in &values[b] {
                    params.push(v.param(r));
                }
            }
            tx.execute(&statements[&chunk.len()], &params)
                .map_err(AttemptError::Client)?;
        }
        crate::failpoint::failpoint("postgres_before_commit", batch_id);
        tx.commit().map_err(AttemptError::Client)?;
        *marked = true;
        Ok(Written::Now)
    }

    /// In the batch's transaction, before the claim: when the commit table
    /// `commits` (in the target's schema) has no row for `(query_id, sink)`,
    /// copies the row of the commit table that the search path finds (where
    /// earlier versions kept their markers), if that is another table and has
    /// one. A batch an earlier version wrote, or claimed and then crashed
    /// before `commits/N`, so is not written again after an upgrade.
    fn carry_earlier_marker(
        tx: &mut ::postgres::Transaction<'_>,
        commits: &str,
        query_id: &str,
        sink: &str,
    ) -> std::result::Result<(), ::postgres::Error> {
        let here = tx.query_opt(
            &format!("SELECT 1 FROM {commits} WHERE query_id = $1 AND sink = $2"),
            &[&query_id, &sink],
        )?;
        if here.is_some() {
            return Ok(());
        }
        let earlier = tx.query_opt(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = to_regclass('weir_sink_commits') \
             AND c.oid IS DISTINCT FROM to_regclass($1::text)",
            &[&commits],
        )?;
        let Some(earlier) = earlier else {
            return Ok(());
        };
        let earlier: String = earlier.get(0);
        tx.execute(
            &format!(
                "INSERT INTO {commits} (query_id, sink, batch_id) SELECT query_id, sink, batch_id \
                 FROM {earlier} WHERE query_id = $1 AND sink = $2 \
                 ON CONFLICT (query_id, sink) DO NOTHING"
            ),
            &[&query_id, &sink],
        )?;
        Ok(())
    }
}

/// `format("postgres")`: `url`, `table`, `keyColumns`, `createTable` and
/// the timeouts.
pub(super) fn from_options(
    o: &super::SinkOptions,
) -> std::result::Result<super::BoxSink, weir_plan::connectors::OptionError> {
    let mut s = PostgresSink::new(
        o.get("url").unwrap_or_default(),
        o.get("table").unwrap_or_default(),
    )
    .key_columns(o.columns("keyColumns")?);
    if let Some(yes) = o.flag("createTable")? {
        s = s.create_table(yes);
    }
    if let Some(t) = o.duration("connectTimeout")? {
        s = s.connect_timeout(t);
    }
    if let Some(t) = o.duration("statementTimeout")? {
        s = s.statement_timeout(t);
    }
    if let Some(t) = o.duration("lockTimeout")? {
        s = s.lock_timeout(t);
    }
    Ok(Box::new(s))
}

impl Sink for PostgresSink {
    fn description(&self) -> String {
        let at = match Config::from_str(&self.conn_str) {
            Ok(c) => format!(
                " at {}/{}",
                Self::address(&c),
                c.get_dbname().unwrap_or("<default>")
            ),
            Err(_) => String::new(),
        };
        format!("PostgresSink[{}{at}]", self.table)
    }

    fn for_task(&self, task: &str, mode: OutputMode) -> Result<BoxSink> {
        exactly_once::refuse_complete_per_task(
            mode,
            task,
            "the whole table",
            " (an upsert by key)",
        )
        .map_err(|m| self.err(m))?;
        // Each task's batch markers are its own (keyed by the task's query
        // id); the tasks write disjoint keys.
        Ok(Box::new(PostgresSink {
            conn_str: self.conn_str.clone(),
            table: self.table.clone(),
            key_columns: self.key_columns.clone(),
            create_table: self.create_table,
            connect_timeout: self.connect_timeout,
            statement_timeout: self.statement_timeout,
            lock_timeout: self.lock_timeout,
            rt: None,
        }))
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        crate::connector::check_sink_option("postgres", "url", &self.conn_str)?;
        crate::connector::check_sink_option("postgres", "table", &self.table)?;
        let mut config = Config::from_str(&self.conn_str).map_err(|e| {
            self.err(format!(
                "invalid connection string ({e}); use `host=127.0.0.1 port=5432 user=me dbname=app` \
                 or `postgresql://me@127.0.0.1:5432/app`"
            ))
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.connect_timeout);
        }
        // Keepalives find a server that vanished mid-statement (the
        // operating system's default waits two hours before the first probe).
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(Duration::from_secs(30));
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(Duration::from_secs(10));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
        if config.get_application_name().is_none() {
            // What pg_stat_activity shows for the sink's session.
            config.application_name("weir-sink");
        }
        if self.table.trim().is_empty() {
            return Err(self.err("the table name is empty"));
        }
        let columns = self.table_columns(&ctx.schema)?;
        let key_sources =
            exactly_once::key_positions(&ctx.schema, &self.key_columns).map_err(|m| self.err(m))?;
        exactly_once::require_keys_in_update_mode(
            ctx.output_mode,
            &self.key_columns,
            "upserts rows by key",
        )
        .map_err(|m| self.err(m))?;
        let query_id = ctx.query_id.clone();
        self.rt = Some(Runtime {
            config,
            query_id,
            mode: ctx.output_mode,
            columns,
            key_sources,
            conn: None,
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

impl PostgresSink {
    /// What to do about a statement the server cancelled for a timeout.
    fn timeout_hint(&self, e: &::postgres::Error) -> String {
        use ::postgres::error::SqlState;
        match e.code() {
            Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE => format!(
                ". Another session held a lock the batch needed (a row of `{}` or of its \
                 schema's `{COMMITS_TABLE}`, or the table) for longer than lock_timeout ({:?}): \
                 find it in pg_locks / pg_stat_activity and end it, or raise \
                 .lock_timeout(...); restarted, the query writes the batch once",
                self.table, self.lock_timeout
            ),
            Some(c) if *c == SqlState::QUERY_CANCELED => format!(
                ". A statement ran longer than statement_timeout ({:?}): raise \
                 .statement_timeout(...) or make the table cheaper to write (indexes, \
                 triggers); restarted, the query writes the batch once",
                self.statement_timeout
            ),
            _ => String::new(),
        }
    }
}

/// One batch written to PostgreSQL, as [`exactly_once::write_batch`] runs it.
impl MarkedWrite for Attempt<'_, PostgresSink, Runtime> {
    type Conn = Conn;
    type Error = ::postgres::Error;
    fn conn(&mut self) -> &mut Option<Self::Conn> {
        &mut self.rt.conn
    }

    fn sink(&self) -> String {
        self.sink.description()
    }

    fn connect(&mut self) -> Result<Conn> {
        self.sink.connect(self.rt)
    }

    fn reusable(&self, conn: &Conn) -> bool {
        !conn.client.is_closed()
    }

    fn write(
        &mut self,
        conn: &mut Conn,
    ) -> std::result::Result<Written, AttemptError<Self::Error>> {
        self.sink.write(self.rt, conn, self.batch_id, self.batches)
    }

    fn describe(&self, e: &::postgres::Error) -> String {
        pg_message(e)
    }

    fn is_connection_error(&self, e: &::postgres::Error) -> bool {
        is_connection_error(e)
    }

    fn keeps_connection(&self, conn: &Conn, _e: &::postgres::Error) -> bool {
        !conn.client.is_closed()
    }

    fn failed(&self, e: ::postgres::Error) -> WeirError {
        self.sink.err(format!(
            "writing batch {} to `{}` at {} failed (nothing of it was committed): {}{}",
            self.batch_id,
            self.sink.table,
            PostgresSink::address(&self.rt.config),
            pg_message(&e),
            self.sink.timeout_hint(&e)
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("window", crate::row::window_type(), true),
            Field::new("page", DataType::Utf8, true),
            Field::new("views", DataType::Int64, false),
        ]))
    }

    fn runtime(sink: &PostgresSink, mode: OutputMode) -> Runtime {
        Runtime {
            config: Config::new(),
            query_id: "q".into(),
            mode,
            columns: sink.table_columns(&schema()).unwrap(),
            key_sources: vec![0, 1],
            conn: None,
        }
    }

    #[test]
    fn windows_become_two_columns_and_keys_the_primary_key() {
        let sink =
            PostgresSink::new("host=h", "analytics.page_views").key_columns(vec!["window", "page"]);
        let cols = sink.table_columns(&schema()).unwrap();
        assert_eq!(
            sink.create_table_sql(&cols),
            "CREATE TABLE IF NOT EXISTS \"analytics\".\"page_views\" (\"window_start\" timestamptz, \
             \"window_end\" timestamptz, \"page\" text, \"views\" bigint, \
             PRIMARY KEY (\"window_start\", \"window_end\", \"page\"))"
        );
    }

    #[test]
    fn update_mode_upserts_and_append_inserts() {
        let sink = PostgresSink::new("host=h", "t").key_columns(vec!["window", "page"]);
        let rt = runtime(&sink, OutputMode::Update);
        assert_eq!(
            PostgresSink::insert_sql(&rt, "\"t\"", 2),
            "INSERT INTO \"t\" (\"window_start\", \"window_end\", \"page\", \"views\") VALUES \
             ($1::timestamptz, $2::timestamptz, $3::text, $4::bigint), \
             ($5::timestamptz, $6::timestamptz, $7::text, $8::bigint) \
             ON CONFLICT (\"window_start\", \"window_end\", \"page\") DO UPDATE SET \"views\" = EXCLUDED.\"views\""
        );
        let rt = runtime(&sink, OutputMode::Append);
        assert!(!PostgresSink::insert_sql(&rt, "\"t\"", 1).contains("ON CONFLICT"));
    }

    #[test]
    fn names_are_quoted_whole() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a.b", DataType::Utf8, false),
            Field::new("say \"hi\"", DataType::Int64, true),
        ]));
        let sink = PostgresSink::new("host=h", "s.daily.views").key_columns(vec!["a.b"]);
        let cols = sink.table_columns(&schema).unwrap();
        assert_eq!(
            sink.create_table_sql(&cols),
            "CREATE TABLE IF NOT EXISTS \"s\".\"daily.views\" (\"a.b\" text, \
             \"say \"\"hi\"\"\" bigint, PRIMARY KEY (\"a.b\"))"
        );
        let rt = Runtime {
            columns: cols,
            key_sources: vec![0],
            ..runtime(&sink, OutputMode::Update)
        };
        assert_eq!(
            PostgresSink::insert_sql(&rt, "\"s\".\"daily.views\"", 1),
            "INSERT INTO \"s\".\"daily.views\" (\"a.b\", \"say \"\"hi\"\"\") VALUES \
             ($1::text, $2::bigint) ON CONFLICT (\"a.b\") DO UPDATE SET \
             \"say \"\"hi\"\"\" = EXCLUDED.\"say \"\"hi\"\"\""
        );
    }

    #[test]
    fn unsupported_types_name_the_column() {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        )]));
        let e = PostgresSink::new("host=h", "t")
            .table_columns(&schema)
            .unwrap_err()
            .to_string();
        assert!(e.contains("column `tags`"), "{e}");
    }

    #[test]
    fn the_description_names_the_address_not_the_password() {
        let d = PostgresSink::new("postgresql://u:secret@10.0.0.1:5433/app", "t").description();
        assert_eq!(d, "PostgresSink[t at 10.0.0.1:5433/app]");
    }
}
