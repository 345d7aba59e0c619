//! The parsed declaration: what the user wrote, with the tokens kept so that
//! errors can point back at them.

use proc_macro2::TokenStream;
use syn::{Attribute, Expr, Ident, LitStr};
use weir_plan::{AggFn, JoinType, OutputMode};

use crate::types::ColType;

/// One `query Name { ... }` declaration.
pub struct QueryDecl {
    /// Doc comments (and only those) on the query; carried onto the query struct.
    pub docs: Vec<Attribute>,
    /// The query's identifier (`PageViews`).
    pub ident: Ident,
    /// `source:`.
    pub source: Option<SourceDecl>,
    /// `schema:`.
    pub schema: Option<SchemaDecl>,
    /// `filter:`.
    pub filter: Option<Expr>,
    /// `select:`.
    pub select: Option<SelectDecl>,
    /// `with_column:`.
    pub with_column: Option<SelectDecl>,
    /// `watermark:`.
    pub watermark: Option<WatermarkDecl>,
    /// `join:`.
    pub join: Option<Box<JoinDecl>>,
    /// `drop_duplicates:`.
    pub drop_duplicates: Option<ColumnsDecl>,
    /// `drop_duplicates_within_watermark:`.
    pub drop_duplicates_within_watermark: Option<ColumnsDecl>,
    /// `group_by:`.
    pub group_by: Option<GroupByDecl>,
    /// `aggregate:`.
    pub aggregate: Option<AggregateDecl>,
    /// `order_by:`.
    pub order_by: Option<OrderByDecl>,
    /// `limit:`.
    pub limit: Option<LimitDecl>,
    /// `output_mode:`.
    pub output_mode: Option<ModeDecl>,
    /// `trigger:`.
    pub trigger: Option<TriggerDecl>,
    /// The `trigger:` value as written (errors about the trigger point here).
    pub trigger_tokens: Option<TokenStream>,
    /// `sink:`.
    pub sink: Option<SinkDecl>,
    /// `late_rows:`: the sink for rows dropped as late (beyond Spark).
    pub late_rows: Option<SinkDecl>,
    /// The `late_rows` key as written.
    pub late_rows_key: Option<Ident>,
    /// `checkpoint:`.
    pub checkpoint: Option<LitStr>,
    /// `name:`.
    pub name: Option<LitStr>,
    /// `scale_out:`: the Kafka consumer group the query's processes form.
    pub scale_out: Option<LitStr>,
    /// The `schema:` key as written (errors about the schema as a whole point here).
    pub schema_key: Option<Ident>,
    /// True when an entry that shapes the plan did not parse: the plan is
    /// then incomplete and its checks would only add noise.
    pub incomplete: bool,
}

impl QueryDecl {
    /// A declaration with nothing but its name (the parser fills it in).
    pub fn empty(ident: Ident) -> QueryDecl {
        QueryDecl {
            docs: vec![],
            ident,
            source: None,
            schema: None,
            filter: None,
            select: None,
            with_column: None,
            watermark: None,
            join: None,
            drop_duplicates: None,
            drop_duplicates_within_watermark: None,
            group_by: None,
            aggregate: None,
            order_by: None,
            limit: None,
            output_mode: None,
            trigger: None,
            trigger_tokens: None,
            sink: None,
            late_rows: None,
            late_rows_key: None,
            checkpoint: None,
            name: None,
            scale_out: None,
            schema_key: None,
            incomplete: false,
        }
    }
}

/// `join: { how: ..., stream: { ... } | table: { ... }, on: expr | using: [cols] }`.
pub struct JoinDecl {
    /// The `join` key: errors about the join as a whole point here.
    pub key: Ident,
    /// The join type (`how:`, default inner).
    pub how: JoinType,
    /// The `how:` value as written.
    pub how_ident: Option<Ident>,
    /// The other side: a stream (source, schema, filter, select,
    /// with_column, watermark) or a static table (source, schema). Its
    /// `ident` is the `stream` or `table` key.
    pub side: QueryDecl,
    /// True for `table:` (a stream-static join).
    pub table: bool,
    /// `refresh_every:` of a table: re-read it on this schedule (ms).
    pub refresh_every: Option<(LitStr, u64)>,
    /// `on:`, a boolean expression over both sides' columns.
    pub on: Option<Expr>,
    /// `using: [cols]`, columns both sides have.
    pub using: Option<ColumnsDecl>,
}

/// The join types `how:` takes, by name.
pub const JOIN_TYPES: &[(&str, JoinType)] = &[
    ("inner", JoinType::Inner),
    ("left_outer", JoinType::LeftOuter),
    ("right_outer", JoinType::RightOuter),
    ("full_outer", JoinType::FullOuter),
    ("left_semi", JoinType::LeftSemi),
    ("left_anti", JoinType::LeftAnti),
];

/// The name of a join type in `how:`.
pub fn join_type_name(how: JoinType) -> &'static str {
    JOIN_TYPES
        .iter()
        .find(|(_, t)| *t == how)
        .map(|(n, _)| *n)
        .unwrap_or("inner")
}

/// A source or sink file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON lines.
    Json,
    /// CSV with a header.
    Csv,
    /// Parquet.
    Parquet,
}

impl FileFormat {
    /// The format's name as written.
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Json => "json",
            FileFormat::Csv => "csv",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// `source: kind(options)`.
pub struct SourceDecl {
    /// The kind as written (`files`).
    pub ident: Ident,
    /// The kind with its options.
    pub kind: Source,
}

/// The sources.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// `rate(rows_per_second, ramp_up_time, num_partitions)`.
    Rate {
        /// Rows per second.
        rows_per_second: Option<u64>,
        /// Ramp-up time, e.g. `"5 seconds"`.
        ramp_up_time: Option<String>,
        /// Partitions.
        num_partitions: Option<u64>,
    },
    /// `files(path, format, max_files_per_trigger, latest_first)`.
    Files {
        /// The directory.
        path: String,
        /// The format.
        format: FileFormat,
        /// Cap on new files per trigger.
        max_files_per_trigger: Option<u64>,
        /// Newest files first.
        latest_first: Option<bool>,
    },
    /// `socket(host, port)`.
    Socket {
        /// The host.
        host: String,
        /// The port.
        port: u64,
    },
    /// `memory`: the stream is handed in at run time.
    Memory,
    /// `rate_micro_batch(rows_per_batch, num_partitions, start_timestamp, advance_millis_per_batch)`:
    /// Spark's `rate-micro-batch`, a fixed number of rows per micro-batch.
    RateMicroBatch {
        /// Rows per micro-batch.
        rows_per_batch: u64,
        /// Partitions a batch's rows are generated in.
        num_partitions: Option<u64>,
        /// The first batch's timestamp, ms since the epoch.
        start_timestamp: Option<u64>,
        /// Event time advance per batch, ms.
        advance_millis_per_batch: Option<u64>,
    },
    /// `kafka(...)`: Spark's Kafka source.
    Kafka(KafkaSourceDecl),
}

/// A connection setting: a literal, or `env("VAR")`, read when the query
/// is built (so addresses and credentials need not be in the source).
#[derive(Debug, Clone, PartialEq)]
pub enum Setting {
    /// `"..."`.
    Lit(String),
    /// `env("VAR")`.
    Env(String),
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Setting::Lit(s) => write!(f, "\"{s}\""),
            Setting::Env(v) => write!(f, "env(\"{v}\")"),
        }
    }
}

/// The options of `source: kafka(...)` (Spark's names, snake_case).
#[derive(Debug, Clone, PartialEq)]
pub struct KafkaSourceDecl {
    /// `host:port,...`.
    pub bootstrap_servers: Setting,
    /// Comma-separated topics.
    pub subscribe: Option<String>,
    /// A regex over topic names.
    pub subscribe_pattern: Option<String>,
    /// `{"topic":[0,1]}`: these partitions.
    pub assign: Option<String>,
    /// `earliest`, `latest` (Spark's default) or per-partition offsets JSON.
    pub starting_offsets: Option<String>,
    /// A cap on records per micro-batch.
    pub max_offsets_per_trigger: Option<u64>,
    /// Fail (default) or skip when offsets were lost.
    pub fail_on_data_loss: Option<bool>,
    /// Commit processed offsets to this consumer group.
    pub group_id: Option<String>,
    /// Decode `value` as `json` or `csv` into `schema:`; without it the rows
    /// have Spark's Kafka schema.
    pub format: Option<FileFormat>,
}

impl Source {
    /// The kind's name as written.
    pub fn name(&self) -> &'static str {
        match self {
            Source::Rate { .. } => "rate",
            Source::Files { .. } => "files",
            Source::Socket { .. } => "socket",
            Source::Memory => "memory",
            Source::RateMicroBatch { .. } => "rate_micro_batch",
            Source::Kafka(_) => "kafka",
        }
    }
}

/// `schema: Name { field: Type, ... }`.
pub struct SchemaDecl {
    /// The row struct's name.
    pub ident: Ident,
    /// The fields in order.
    pub fields: Vec<SchemaField>,
}

/// One schema field.
pub struct SchemaField {
    /// Its doc comments.
    pub docs: Vec<Attribute>,
    /// The field name as written.
    pub ident: Ident,
    /// The column name (raw identifiers unrawed).
    pub name: String,
    /// Its type.
    pub ty: ColType,
}

/// `select: { item, ... }` (and `with_column: { name: expr, ... }`).
pub struct SelectDecl {
    /// The `select` (or `with_column`) key: an error about the entry as a whole points here.
    pub key: Ident,
    /// The items in order.
    pub items: Vec<SelectItemDecl>,
}

/// `drop_duplicates: [column, ...]` (and `drop_duplicates_within_watermark:`).
pub struct ColumnsDecl {
    /// The key as written.
    pub key: Ident,
    /// The columns in order.
    pub columns: Vec<Ident>,
}

/// `order_by: [column, column desc, ...]`.
pub struct OrderByDecl {
    /// The `order_by` key.
    pub key: Ident,
    /// The sort keys, most significant first: the column and whether it is descending.
    pub keys: Vec<(Ident, bool)>,
}

/// `limit: N`.
pub struct LimitDecl {
    /// The `limit` key.
    pub key: Ident,
    /// How many rows.
    pub n: u64,
}

/// `name: expr` or a bare column.
pub struct SelectItemDecl {
    /// The output name (for a bare column, the column).
    pub alias: Ident,
    /// The expression; `None` for a bare column.
    pub expr: Option<Expr>,
}

/// `watermark: column delay "duration"`.
pub struct WatermarkDecl {
    /// The `watermark` key.
    pub key: Ident,
    /// The event-time column.
    pub column: Ident,
    /// The delay.
    pub delay: LitStr,
}

/// `group_by: [key, ...]`.
pub struct GroupByDecl {
    /// The `group_by` key.
    pub key: Ident,
    /// The keys in order.
    pub keys: Vec<KeyDecl>,
}

/// One grouping key.
pub enum KeyDecl {
    /// `window(column, size[, slide])`.
    Window {
        /// The whole call.
        tokens: TokenStream,
        /// The time column.
        column: Ident,
        /// The size.
        size: LitStr,
        /// The slide.
        slide: Option<LitStr>,
    },
    /// `session_window(column, gap)`: a session closes after `gap` without rows.
    Session {
        /// The whole call.
        tokens: TokenStream,
        /// The time column.
        column: Ident,
        /// The gap.
        gap: LitStr,
    },
    /// A column.
    Column(Ident),
}

/// `aggregate: { name: func(column), ... }`.
pub struct AggregateDecl {
    /// The `aggregate` key.
    pub key: Ident,
    /// The aggregates in order.
    pub aggs: Vec<AggDecl>,
}

/// One aggregate.
pub struct AggDecl {
    /// The output name.
    pub alias: Ident,
    /// The function.
    pub kind: AggFn,
    /// The column; `None` for `count()` / `count(*)`.
    pub arg: Option<Ident>,
    /// The call as written (`sum(n)`).
    pub call: TokenStream,
}

/// `output_mode: mode`.
pub struct ModeDecl {
    /// The mode as written.
    pub ident: Ident,
    /// The mode.
    pub mode: OutputMode,
}

/// `trigger: ...`.
pub enum TriggerDecl {
    /// `processing_time("1 minute")`, the interval in milliseconds.
    ProcessingTime {
        /// The interval as written.
        lit: LitStr,
        /// The interval in milliseconds.
        ms: u64,
    },
    /// `available_now`.
    AvailableNow,
    /// `once`.
    Once,
    /// `continuous("1 second")`: Spark's continuous processing, the
    /// checkpoint interval in milliseconds. weir checks the rules of
    /// continuous processing but cannot run it yet.
    Continuous {
        /// The interval as written.
        lit: LitStr,
        /// The interval in milliseconds.
        ms: u64,
    },
}

/// `sink: kind(options)`.
pub struct SinkDecl {
    /// The kind as written (`files`): errors about the sink point here.
    pub ident: Ident,
    /// The kind with its options.
    pub kind: Sink,
}

/// The sinks.
pub enum Sink {
    /// `console(truncate, num_rows)`.
    Console {
        /// Cut long cells at 20 characters.
        truncate: Option<bool>,
        /// Rows to show per batch.
        num_rows: Option<u64>,
    },
    /// `memory(name)`; the name defaults to the query name.
    Memory {
        /// The table name.
        name: Option<String>,
    },
    /// `files(path, format, partition_by)`.
    Files {
        /// The directory.
        path: String,
        /// The format (default parquet, as Spark's).
        format: FileFormat,
        /// Partition columns.
        partition_by: Vec<Ident>,
    },
    /// `foreach_batch(f)`.
    ForeachBatch(Expr),
    /// `foreach(writer)`: a `ForeachWriter` of the result row struct.
    Foreach(Expr),
    /// `kafka(bootstrap_servers, topic, format, key, delivery)`.
    Kafka {
        /// `host:port,...`.
        bootstrap_servers: Setting,
        /// The topic written to.
        topic: String,
        /// `json`: each row becomes a JSON object value (otherwise the
        /// result's `value` column is the value, as in Spark).
        json: bool,
        /// Columns that make the record key (with `json`).
        key: Vec<Ident>,
        /// At-least-once instead of exactly-once (transactions).
        at_least_once: bool,
    },
    /// `postgres(url, table, key, create_table)`: exactly once, upserts in
    /// update mode.
    Postgres {
        /// The connection string.
        url: Setting,
        /// The table.
        table: String,
        /// The columns that identify a row (upsert keys).
        key: Vec<Ident>,
        /// Create the table when it does not exist.
        create_table: Option<bool>,
    },
    /// `redis(url, key_prefix, key, key_fields)`: one hash per row, exactly once.
    Redis {
        /// `redis://host:port/db`.
        url: Setting,
        /// The prefix of every key.
        key_prefix: Option<String>,
        /// The columns that make the key.
        key: Vec<Ident>,
        /// Also write the key columns as hash fields.
        key_fields: Option<bool>,
    },
    /// A sink of the connector table with no typed form here (`noop`):
    /// built when the query is built by `weir::sink::from_options`, from
    /// the options given, by the table's (Spark's) names.
    ByName {
        /// Its row of the connector table.
        spec: &'static weir_plan::connectors::SinkSpec,
        /// The options given, in the table's order, each value as text
        /// (or read from the environment).
        options: Vec<(&'static weir_plan::connectors::OptionSpec, Setting)>,
    },
}

impl Sink {
    /// The kind's name as written.
    pub fn name(&self) -> &'static str {
        match self {
            Sink::Console { .. } => "console",
            Sink::Memory { .. } => "memory",
            Sink::Files { .. } => "files",
            Sink::ForeachBatch(_) => "foreach_batch",
            Sink::Foreach(_) => "foreach",
            Sink::Kafka { .. } => "kafka",
            Sink::Postgres { .. } => "postgres",
            Sink::Redis { .. } => "redis",
            Sink::ByName { spec, .. } => spec.name,
        }
    }

    /// The kind as the plan's rules see it.
    pub fn kind(&self) -> weir_plan::SinkKind {
        match self {
            Sink::Console { .. } => weir_plan::SinkKind::Console,
            Sink::Memory { .. } => weir_plan::SinkKind::Memory,
            Sink::Files { .. } => weir_plan::SinkKind::File,
            Sink::ForeachBatch(_) => weir_plan::SinkKind::ForeachBatch,
            Sink::Foreach(_) => weir_plan::SinkKind::Other,
            Sink::Kafka { json: true, .. } => weir_plan::SinkKind::KafkaJson,
            Sink::Kafka { .. } => weir_plan::SinkKind::Kafka,
            Sink::Postgres { .. } | Sink::Redis { .. } => weir_plan::SinkKind::Other,
            Sink::ByName { spec, .. } => spec.kind,
        }
    }
}
