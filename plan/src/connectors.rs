//! The connector table: each source's and sink's options under Spark's
//! names (and the name `stream_query!` gives them, when it offers them),
//! which are required, their defaults, how their values are checked, which
//! options exclude each other, and the sources' fixed schemas.
//!
//! One rule lives in one place: the macro checks a declared source's
//! options with these functions at compile time, and the engine's sources
//! check the options set through their builders with the same functions
//! when the query starts, so a value is refused by both or by neither, with
//! the same message. Each rule takes the option's name as the caller's user
//! spelled it (`starting_offsets` in the macro, `startingOffsets` in the
//! engine) and returns an [`OptionError`] with the message and the help.
//!
//! Adding a source: one [`SourceSpec`] in [`SOURCES`] (its options, rules
//! and fixed schema), the engine's source file, and its registration.
//! Adding a sink: one [`SinkSpec`] in [`SINKS`], the engine's sink file and
//! its line in the engine's `sink/by_name.rs`; `stream_query!` then takes
//! `sink: name(option = value, ...)` with no change of its own.
//!
//! ```
//! use weir_plan::connectors::{self, source};
//! let kafka = source("kafka").unwrap();
//! assert!(kafka.option("startingOffsets").is_some());
//! let e = connectors::assign("assign", r#"{"clicks":[]}"#).unwrap_err();
//! assert_eq!(e.message, "`assign`: topic `clicks` needs a list of partition numbers, e.g. [0,1]");
//! ```

mod json;

use crate::plan::SinkKind;
use crate::types::{DataType, Field};

/// A refused option value: the message (naming the option as the user
/// wrote it) and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionError {
    /// The option, as the user wrote it.
    pub option: String,
    /// What is wrong.
    pub message: String,
    /// What to write instead (may be empty).
    pub help: String,
}

impl OptionError {
    fn new(option: &str, message: impl Into<String>, help: impl Into<String>) -> OptionError {
        OptionError {
            option: option.to_string(),
            message: message.into(),
            help: help.into(),
        }
    }
}

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.help.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{} ({})", self.message, self.help)
        }
    }
}

impl std::error::Error for OptionError {}

/// A check of a text value: the option's name as written, then the value.
pub type Rule = fn(&str, &str) -> Result<(), OptionError>;

/// What an option takes.
#[derive(Debug, Clone, Copy)]
pub enum ValueKind {
    /// A non-empty string ([`text`]).
    Text,
    /// A connection setting: a non-empty string; the macro also takes
    /// `env("VAR")`, read when the query is built.
    Setting,
    /// A storage location ([`location`]).
    Location,
    /// A duration, zero allowed ([`duration`]).
    Duration,
    /// `true` or `false` ([`boolean`]).
    Bool,
    /// A whole number in `1..=max` ([`count`]).
    Count {
        /// The largest value.
        max: u64,
    },
    /// A whole number in `0..=max` ([`whole`]).
    Whole {
        /// The largest value.
        max: u64,
    },
    /// One of these names ([`choice`]).
    Choice(&'static [&'static str]),
    /// Column names, comma-separated ([`columns`]); the macro writes
    /// `[a, b]`.
    Columns,
    /// A string this rule accepts.
    Checked(Rule),
    /// An option Spark has and weir refuses: the reason and what to do.
    Unsupported(&'static str),
}

/// One option of a source.
#[derive(Debug)]
pub struct OptionSpec {
    /// Spark's name (matched case-insensitively, as Spark does).
    pub name: &'static str,
    /// `stream_query!`'s name for it; `None`: only the builder takes it.
    pub macro_name: Option<&'static str>,
    /// What it takes.
    pub kind: ValueKind,
    /// Whether the source needs it.
    pub required: bool,
    /// The value when it is not set, as text (`None`: unset means none).
    pub default: Option<&'static str>,
    /// What it means, in a line.
    pub doc: &'static str,
}

const fn opt(
    name: &'static str,
    macro_name: Option<&'static str>,
    kind: ValueKind,
    default: Option<&'static str>,
    doc: &'static str,
) -> OptionSpec {
    OptionSpec {
        name,
        macro_name,
        kind,
        required: false,
        default,
        doc,
    }
}

const fn req(
    name: &'static str,
    macro_name: Option<&'static str>,
    kind: ValueKind,
    doc: &'static str,
) -> OptionSpec {
    OptionSpec {
        name,
        macro_name,
        kind,
        required: true,
        default: None,
        doc,
    }
}

/// A column of a source's fixed schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedField {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub dtype: DataType,
    /// Whether it may be null.
    pub nullable: bool,
}

const fn col(name: &'static str, dtype: DataType, nullable: bool) -> FixedField {
    FixedField {
        name,
        dtype,
        nullable,
    }
}

/// A fixed schema's columns as plan fields.
pub fn fields(schema: &[FixedField]) -> Vec<Field> {
    schema.iter().map(|f| Field::new(f.name, f.dtype)).collect()
}

/// Spark's Kafka source schema. With `includeHeaders` a last column
/// [`KAFKA_HEADERS`] follows (`array<struct<key: string, value: binary>>`,
/// a type weir's plan types cannot name yet).
pub const KAFKA_SCHEMA: &[FixedField] = &[
    col("key", DataType::Binary, true),
    col("value", DataType::Binary, true),
    col("topic", DataType::String, false),
    col("partition", DataType::Int32, false),
    col("offset", DataType::Int64, false),
    col("timestamp", DataType::Timestamp, true),
    col("timestampType", DataType::Int32, false),
];

/// The name of the Kafka source's `headers` column (with `includeHeaders`).
pub const KAFKA_HEADERS: &str = "headers";

/// The rate and rate-micro-batch sources' schema.
pub const RATE_SCHEMA: &[FixedField] = &[
    col("timestamp", DataType::Timestamp, false),
    col("value", DataType::Int64, false),
];

/// The socket source's schema.
pub const SOCKET_SCHEMA: &[FixedField] = &[col("value", DataType::String, false)];

/// The options part every connector has, source or sink: its name, its
/// options and their passthrough prefix. The lookups and checks of an
/// option by name live here once; a [`SourceSpec`] and a [`SinkSpec`]
/// dereference to it (`spec.name`, `spec.option(..)`).
#[derive(Debug, Clone, Copy)]
pub struct Connector {
    /// `source` or `sink`, as the messages name it.
    pub what: &'static str,
    /// weir's name (`stream_query!`'s `source:` or `sink:`).
    pub name: &'static str,
    /// Its options.
    pub options: &'static [OptionSpec],
    /// A prefix whose options go to the client as they are (`kafka.`).
    pub passthrough: Option<&'static str>,
}

impl Connector {
    const fn new(what: &'static str, name: &'static str, options: &'static [OptionSpec]) -> Self {
        Connector {
            what,
            name,
            options,
            passthrough: None,
        }
    }

    /// The same connector, with `prefix`'s options going to the client.
    const fn with_passthrough(self, prefix: &'static str) -> Self {
        Connector {
            passthrough: Some(prefix),
            ..self
        }
    }

    /// The option named `name` by Spark (case-insensitive).
    pub fn option(&self, name: &str) -> Option<&'static OptionSpec> {
        find_option(self.options, name)
    }

    /// The option `stream_query!` names `name`.
    pub fn macro_option(&self, name: &str) -> Option<&'static OptionSpec> {
        self.options.iter().find(|o| o.macro_name == Some(name))
    }

    /// Checks one option set by Spark's name: an unknown name, or a value
    /// the option refuses, is an error. `Ok(None)`: a passthrough option.
    pub fn check(
        &self,
        name: &str,
        value: &str,
    ) -> Result<Option<&'static OptionSpec>, OptionError> {
        let Connector {
            what,
            name: connector,
            options,
            passthrough,
        } = *self;
        if let Some(prefix) = passthrough {
            let lower = name.to_ascii_lowercase();
            if lower.starts_with(prefix) && find_option(options, name).is_none() {
                return Ok(None);
            }
        }
        let Some(spec) = find_option(options, name) else {
            let known: Vec<String> = options
                .iter()
                .filter(|o| !matches!(o.kind, ValueKind::Unsupported(_)))
                .map(|o| o.name.to_string())
                .chain(passthrough.map(|p| format!("{p}*")))
                .collect();
            let help = if known.is_empty() {
                format!("the {connector} {what} takes no options")
            } else {
                format!("options of {connector}: {}", known.join(", "))
            };
            return Err(OptionError::new(
                name,
                format!("unknown option `{name}` for the {connector} {what}"),
                help,
            ));
        };
        check_value(spec.kind, name, value)?;
        Ok(Some(spec))
    }

    /// The error for its required option `name` left unset.
    pub fn missing(&self, name: &str) -> OptionError {
        needs(self.what, self.name, name)
    }
}

/// One source kind.
#[derive(Debug)]
pub struct SourceSpec {
    /// Its name, options and passthrough prefix.
    pub connector: Connector,
    /// Spark's `format(...)` names it stands for.
    pub spark_formats: &'static [&'static str],
    /// Options of which exactly one must be set (Spark's names).
    pub exactly_one: &'static [&'static str],
    /// Its fixed schema; `None`: the user declares it.
    pub schema: Option<&'static [FixedField]>,
}

impl std::ops::Deref for SourceSpec {
    type Target = Connector;

    fn deref(&self) -> &Connector {
        &self.connector
    }
}

impl SourceSpec {
    /// Spark's rule for [`SourceSpec::exactly_one`]: `set` holds, for each
    /// of those options in order, whether it is set; `names` how the user
    /// spells them.
    pub fn check_exactly_one(&self, names: &[&str], set: &[bool]) -> Result<(), OptionError> {
        exactly_one(self.name, names, set)
    }
}

const fn source_spec(
    name: &'static str,
    spark_formats: &'static [&'static str],
    options: &'static [OptionSpec],
    schema: Option<&'static [FixedField]>,
) -> SourceSpec {
    SourceSpec {
        connector: Connector::new("source", name, options),
        spark_formats,
        exactly_one: &[],
        schema,
    }
}

fn find_option(options: &'static [OptionSpec], name: &str) -> Option<&'static OptionSpec> {
    options.iter().find(|o| o.name.eq_ignore_ascii_case(name))
}

/// Checks a text value by its option's kind (the builder's path: every
/// value is text there).
pub fn check_value(kind: ValueKind, name: &str, value: &str) -> Result<(), OptionError> {
    match kind {
        ValueKind::Text | ValueKind::Setting => text(name, value),
        ValueKind::Location => location(name, value),
        ValueKind::Duration => duration(name, value).map(|_| ()),
        ValueKind::Bool => boolean(name, value).map(|_| ()),
        ValueKind::Count { max } => parse_count(name, value, max).map(|_| ()),
        ValueKind::Whole { max } => parse_whole(name, value, max).map(|_| ()),
        ValueKind::Choice(choices) => choice(name, value, choices),
        ValueKind::Columns => columns(name, value).map(|_| ()),
        ValueKind::Checked(rule) => rule(name, value),
        ValueKind::Unsupported(why) => Err(unsupported(name, why)),
    }
}

/// The sources, in the order `stream_query!` lists them.
pub const SOURCES: &[SourceSpec] = &[
    source_spec("rate", &["rate"], RATE, Some(RATE_SCHEMA)),
    source_spec("files", &["json", "csv", "parquet"], FILES, None),
    source_spec("socket", &["socket"], SOCKET, Some(SOCKET_SCHEMA)),
    source_spec("memory", &["memory"], &[], None),
    source_spec(
        "rate_micro_batch",
        &["rate-micro-batch"],
        RATE_MICRO_BATCH,
        Some(RATE_SCHEMA),
    ),
    SourceSpec {
        connector: Connector::new("source", "kafka", KAFKA).with_passthrough("kafka."),
        spark_formats: &["kafka"],
        exactly_one: &["subscribe", "subscribePattern", "assign"],
        schema: Some(KAFKA_SCHEMA),
    },
];

/// The source named `name`: weir's name or one of Spark's formats.
pub fn source(name: &str) -> Option<&'static SourceSpec> {
    SOURCES
        .iter()
        .find(|s| s.name == name || s.spark_formats.contains(&name))
}

const U32_MAX: u64 = u32::MAX as u64;

/// The file formats the file source reads.
pub const FILE_FORMATS: &[&str] = &["json", "csv", "parquet"];

#[rustfmt::skip]
const RATE: &[OptionSpec] = &[
    opt("rowsPerSecond", Some("rows_per_second"), ValueKind::Count { max: u64::MAX }, Some("1"), "rows generated per second"),
    opt("rampUpTime", Some("ramp_up_time"), ValueKind::Duration, Some("0 seconds"), "time to reach rowsPerSecond"),
    opt("numPartitions", Some("num_partitions"), ValueKind::Count { max: U32_MAX }, None, "partitions a batch's rows are generated in, in parallel (default: the session's worker threads, as Spark's is its defaultParallelism)"),
];

#[rustfmt::skip]
const RATE_MICRO_BATCH: &[OptionSpec] = &[
    req("rowsPerBatch", Some("rows_per_batch"), ValueKind::Count { max: 100_000_000 }, "rows per micro-batch"),
    opt("numPartitions", Some("num_partitions"), ValueKind::Count { max: U32_MAX }, None, "partitions a batch's rows are generated in, in parallel (default: the session's worker threads, as Spark's is its defaultParallelism)"),
    // Milliseconds since the epoch, up to the year 9999.
    opt("startTimestamp", Some("start_timestamp"), ValueKind::Whole { max: 253_402_300_799_999 }, Some("0"), "the first batch's timestamp, ms since the epoch"),
    opt("advanceMillisPerBatch", Some("advance_millis_per_batch"), ValueKind::Whole { max: 86_400_000_000 }, Some("1000"), "event time advance per batch, ms"),
];

#[rustfmt::skip]
const FILES: &[OptionSpec] = &[
    req("path", Some("path"), ValueKind::Location, "the directory: a local path, file:///... or s3://bucket/prefix"),
    req("format", Some("format"), ValueKind::Choice(FILE_FORMATS), "the files' format (Spark's format(...))"),
    opt("maxFilesPerTrigger", Some("max_files_per_trigger"), ValueKind::Count { max: U32_MAX }, None, "at most this many new files per batch"),
    opt("latestFirst", Some("latest_first"), ValueKind::Bool, Some("false"), "take the newest files first"),
    opt("maxFileAge", None, ValueKind::Duration, None, "skip files older than the newest taken minus this"),
    opt("header", None, ValueKind::Bool, Some("false"), "CSV files have a header line"),
    opt("mode", None, ValueKind::Choice(&["PERMISSIVE", "DROPMALFORMED", "FAILFAST"]), Some("PERMISSIVE"), "what a malformed record becomes"),
    opt("fileNameOnly", None, ValueKind::Unsupported("weir tells files apart by their whole path; leave it unset"), Some("false"), "Spark: new files by name only"),
    opt("cleanSource", None, ValueKind::Unsupported("weir leaves the files it read in place; move or delete them yourself once their batch is committed"), Some("off"), "Spark: archive or delete files read"),
    opt("sourceArchiveDir", None, ValueKind::Unsupported("weir has no cleanSource; leave it unset"), None, "Spark: where cleanSource=archive moves files"),
];

#[rustfmt::skip]
const SOCKET: &[OptionSpec] = &[
    opt("host", Some("host"), ValueKind::Text, Some("localhost"), "the server's host"),
    req("port", Some("port"), ValueKind::Count { max: 65535 }, "the server's port"),
    opt("includeTimestamp", None, ValueKind::Unsupported("weir's socket source has only the `value` column; add a timestamp with current_timestamp()"), Some("false"), "Spark: a timestamp column"),
];

#[rustfmt::skip]
const KAFKA: &[OptionSpec] = &[
    req("kafka.bootstrap.servers", Some("bootstrap_servers"), ValueKind::Setting, "host:port,..."),
    opt("subscribe", Some("subscribe"), ValueKind::Checked(check_topics), None, "comma-separated topics"),
    opt("subscribePattern", Some("subscribe_pattern"), ValueKind::Checked(pattern), None, "a regex matched against whole topic names"),
    opt("assign", Some("assign"), ValueKind::Checked(check_assign), None, "{\"topicA\":[0,1]}"),
    opt("startingOffsets", Some("starting_offsets"), ValueKind::Checked(check_starting_offsets), Some("latest"), "earliest, latest or {\"t\":{\"0\":23,\"1\":-2}}"),
    opt("startingTimestamp", None, ValueKind::Whole { max: i64::MAX as u64 }, None, "epoch ms: each partition starts at its first record at or after it"),
    opt("startingOffsetsByTimestamp", None, ValueKind::Checked(check_offsets_by_timestamp), None, "{\"t\":{\"0\":1700000000000}}"),
    opt("startingOffsetsByTimestampStrategy", None, ValueKind::Choice(&["error", "latest"]), Some("error"), "when no record is that new"),
    opt("endingOffsets", None, ValueKind::Checked(stream_has_no_end), None, "batch queries only"),
    opt("endingOffsetsByTimestamp", None, ValueKind::Checked(stream_has_no_end), None, "batch queries only"),
    opt("maxOffsetsPerTrigger", Some("max_offsets_per_trigger"), ValueKind::Count { max: i64::MAX as u64 }, Some("1000000"), "a cap per batch, split across partitions by lag (Spark: none)"),
    opt("minOffsetsPerTrigger", None, ValueKind::Unsupported("weir runs a batch with whatever is available; leave it unset"), None, "Spark: wait for this many offsets"),
    opt("maxTriggerDelay", None, ValueKind::Unsupported("it goes with minOffsetsPerTrigger, which weir does not have"), None, "Spark: the longest wait for minOffsetsPerTrigger"),
    opt("minPartitions", None, ValueKind::Count { max: U32_MAX }, None, "accepted; weir does not split partitions"),
    opt("failOnDataLoss", Some("fail_on_data_loss"), ValueKind::Bool, Some("true"), "fail when offsets to read are gone"),
    opt("includeHeaders", None, ValueKind::Bool, Some("false"), "add the headers column"),
    opt("kafkaConsumer.pollTimeoutMs", None, ValueKind::Whole { max: u64::MAX }, Some("120000"), "how long a read may make no progress, ms"),
    opt("group.id", Some("group_id"), ValueKind::Text, None, "beyond Spark: commit each batch's end offsets to this group"),
    opt("kafka.group.id", None, ValueKind::Text, None, "the same as group.id"),
    opt("groupIdPrefix", None, ValueKind::Text, Some("weir-kafka-source"), "prefix of the generated group id"),
    opt("kafka.auto.offset.reset", None, ValueKind::Unsupported("set startingOffsets to earliest or latest instead: the query decides which offsets it reads (a consumer that reset on its own would skip records without a data-loss report); Spark refuses it too"), None, "Spark: refused"),
    opt("kafka.enable.auto.commit", None, ValueKind::Unsupported("the query keeps its offsets in its checkpoint, and commits each batch's end offsets to group.id when set; Spark refuses it too"), None, "Spark: refused"),
    opt("format", Some("format"), ValueKind::Choice(&["json", "csv"]), None, "weir: decode `value` into the declared schema"),
];

// ---- The sinks -----------------------------------------------------------

/// One sink kind.
#[derive(Debug)]
pub struct SinkSpec {
    /// Its name, options and passthrough prefix.
    pub connector: Connector,
    /// Spark's `writeStream.format(...)` names it stands for.
    pub spark_formats: &'static [&'static str],
    /// The kind the plan's rules see (the Kafka sink's is
    /// [`SinkKind::KafkaJson`] with `valueFormat` json).
    pub kind: SinkKind,
    /// `Some(how)`: the sink is code the user hands in (`foreach`,
    /// `foreachBatch`), not options; `how` says how to write it.
    pub code: Option<&'static str>,
    /// Options (Spark's names) `stream_query!` needs beyond the required
    /// ones: the macro's Kafka sink writes every row to one `topic`.
    pub macro_required: &'static [&'static str],
}

impl std::ops::Deref for SinkSpec {
    type Target = Connector;

    fn deref(&self) -> &Connector {
        &self.connector
    }
}

impl SinkSpec {
    /// Whether `stream_query!` needs the option (required, or one of
    /// [`SinkSpec::macro_required`]).
    pub fn macro_needs(&self, option: &OptionSpec) -> bool {
        option.required || self.macro_required.contains(&option.name)
    }
}

/// The sinks, in the order `stream_query!` lists them.
pub const SINKS: &[SinkSpec] = &[
    spec("console", &["console"], SinkKind::Console, CONSOLE),
    spec("memory", &["memory"], SinkKind::Memory, MEMORY),
    spec("files", &["parquet", "json", "csv"], SinkKind::File, FILE_SINK),
    SinkSpec {
        code: Some("write `foreach_batch(|batch_id, batches| { ...; Ok(()) })` or `foreach_batch(path::to::handler)`"),
        ..spec("foreach_batch", &["foreachBatch"], SinkKind::ForeachBatch, &[])
    },
    SinkSpec {
        code: Some("write `foreach(MyWriter { .. })` with a `weir::sink::ForeachWriter` of the result rows, or `foreach(weir::sink::row_fn(|row: QueryRow| { ...; Ok(()) }))`"),
        ..spec("foreach", &["foreach"], SinkKind::Other, &[])
    },
    SinkSpec {
        connector: Connector::new("sink", "kafka", KAFKA_SINK).with_passthrough("kafka."),
        spark_formats: &["kafka"],
        kind: SinkKind::Kafka,
        code: None,
        macro_required: &["topic"],
    },
    spec("postgres", &["postgres"], SinkKind::Other, POSTGRES),
    spec("redis", &["redis"], SinkKind::Other, REDIS),
    spec("noop", &["noop"], SinkKind::Noop, &[]),
];

const fn spec(
    name: &'static str,
    spark_formats: &'static [&'static str],
    kind: SinkKind,
    options: &'static [OptionSpec],
) -> SinkSpec {
    SinkSpec {
        connector: Connector::new("sink", name, options),
        spark_formats,
        kind,
        code: None,
        macro_required: &[],
    }
}

/// The sink named `name`: weir's name or one of Spark's formats.
pub fn sink(name: &str) -> Option<&'static SinkSpec> {
    SINKS
        .iter()
        .find(|s| s.name == name || s.spark_formats.contains(&name))
}

const I32_MAX: u64 = i32::MAX as u64;

#[rustfmt::skip]
const CONSOLE: &[OptionSpec] = &[
    opt("numRows", Some("num_rows"), ValueKind::Count { max: I32_MAX }, Some("20"), "rows shown per batch"),
    opt("truncate", Some("truncate"), ValueKind::Bool, Some("true"), "cut cells at 20 characters"),
];

#[rustfmt::skip]
const MEMORY: &[OptionSpec] = &[
    opt("queryName", Some("name"), ValueKind::Text, None, "the table's name (default: the query's name)"),
];

#[rustfmt::skip]
const FILE_SINK: &[OptionSpec] = &[
    req("path", Some("path"), ValueKind::Location, "the directory: a local path, file:///... or s3://bucket/prefix"),
    opt("format", Some("format"), ValueKind::Choice(FILE_FORMATS), Some("parquet"), "the files' format (Spark's format(...))"),
    opt("partitionBy", Some("partition_by"), ValueKind::Columns, None, "partition directories by these columns"),
];

#[rustfmt::skip]
const KAFKA_SINK: &[OptionSpec] = &[
    req("kafka.bootstrap.servers", Some("bootstrap_servers"), ValueKind::Setting, "host:port,..."),
    opt("topic", Some("topic"), ValueKind::Text, None, "every row goes to this topic (else each row's `topic` column)"),
    opt("valueFormat", Some("format"), ValueKind::Choice(&["column", "json"]), Some("column"), "weir: json writes each row as a JSON value"),
    opt("keyColumns", Some("key"), ValueKind::Columns, None, "weir: the record key from these columns (with json values)"),
    opt("deliveryGuarantee", Some("delivery"), ValueKind::Checked(check_delivery), Some("exactly_once"), "weir: exactly_once (transactions) or at_least_once"),
    opt("transactionalId", None, ValueKind::Text, None, "weir: the producer's transactional.id (default weir-<query id>)"),
    opt("markerTopic", None, ValueKind::Text, None, "weir: the topic carrying the batch marker"),
    opt("deliveryTimeoutMs", None, ValueKind::Count { max: i64::MAX as u64 }, Some("120000"), "weir: the bound on a batch's delivery, ms"),
];

#[rustfmt::skip]
const POSTGRES: &[OptionSpec] = &[
    req("url", Some("url"), ValueKind::Setting, "postgresql://user@host:port/db or host=... dbname=..."),
    req("table", Some("table"), ValueKind::Text, "the table: name or schema.name"),
    opt("keyColumns", Some("key"), ValueKind::Columns, None, "the columns that identify a row (upsert keys)"),
    opt("createTable", Some("create_table"), ValueKind::Bool, Some("false"), "create a missing table"),
    opt("connectTimeout", None, ValueKind::Duration, Some("10 seconds"), "how long connecting may take"),
    opt("statementTimeout", None, ValueKind::Duration, Some("60 seconds"), "how long one statement may run"),
    opt("lockTimeout", None, ValueKind::Duration, Some("10 seconds"), "how long a statement may wait for a lock"),
];

#[rustfmt::skip]
const REDIS: &[OptionSpec] = &[
    req("url", Some("url"), ValueKind::Setting, "redis://[:password@]host:port[/db]"),
    opt("keyPrefix", Some("key_prefix"), ValueKind::Text, None, "the prefix of every key (default: the query's name)"),
    opt("keyColumns", Some("key"), ValueKind::Columns, None, "the columns that make each row's key"),
    opt("keyFields", Some("key_fields"), ValueKind::Bool, Some("false"), "also write the key columns as hash fields"),
    opt("timeout", None, ValueKind::Duration, Some("30 seconds"), "how long connecting and each request may take"),
    opt("chunkRows", None, ValueKind::Count { max: U32_MAX }, Some("1000"), "rows per staging request"),
];

// ---- The rules -----------------------------------------------------------

fn unsupported(name: &str, why: &str) -> OptionError {
    OptionError::new(name, format!("weir does not support `{name}`"), why)
}

/// A required option of a source that is not set ([`Connector::missing`]
/// of a source named by text).
pub fn missing(source: &str, name: &str) -> OptionError {
    needs("source", source, name)
}

/// A required option of a sink that is not set.
pub fn missing_in_sink(sink: &str, name: &str) -> OptionError {
    needs("sink", sink, name)
}

fn needs(what: &str, connector: &str, name: &str) -> OptionError {
    OptionError::new(
        name,
        format!("the {connector} {what} needs the option `{name}`"),
        "",
    )
}

/// Column names, comma-separated (Spark's `partitionBy` list, a sink's
/// key columns): at least one, none empty.
pub fn columns(name: &str, value: &str) -> Result<Vec<String>, OptionError> {
    let list: Vec<String> = value.split(',').map(|c| c.trim().to_string()).collect();
    if list.iter().any(String::is_empty) {
        return Err(OptionError::new(
            name,
            format!("`{name}` = \"{value}\" has an empty column name"),
            "name the columns, comma-separated, e.g. page,day",
        ));
    }
    Ok(list)
}

/// A sink's delivery guarantee: `exactly_once` or `at_least_once` (also
/// with `-`, in any case); true for at least once.
pub fn at_least_once(name: &str, value: &str) -> Result<bool, OptionError> {
    match value.trim().replace('-', "_").to_ascii_lowercase().as_str() {
        "exactly_once" => Ok(false),
        "at_least_once" => Ok(true),
        _ => Err(OptionError::new(
            name,
            format!("`{name}`: unknown delivery guarantee `{value}`"),
            "use exactly_once (transactions, the default) or at_least_once",
        )),
    }
}

fn check_delivery(name: &str, value: &str) -> Result<(), OptionError> {
    at_least_once(name, value).map(|_| ())
}

/// A non-empty string.
pub fn text(name: &str, value: &str) -> Result<(), OptionError> {
    if value.is_empty() {
        return Err(OptionError::new(
            name,
            format!("`{name}` must not be empty"),
            "",
        ));
    }
    Ok(())
}

/// A storage location: a local path, `file:///...` or `s3://bucket/prefix`.
pub fn location(name: &str, value: &str) -> Result<(), OptionError> {
    text(name, value)?;
    crate::StorageLocation::parse(value)
        .map(|_| ())
        .map_err(|e| {
            OptionError::new(
                name,
                format!(
                    "invalid storage location `{}` for `{name}`: {}",
                    e.location(),
                    e.reason()
                ),
                crate::location::ACCEPTED_LOCATIONS,
            )
        })
}

/// A duration, zero allowed; its milliseconds.
pub fn duration(name: &str, value: &str) -> Result<i64, OptionError> {
    crate::parse_duration_ms(value)
        .map_err(|e| {
            OptionError::new(
                name,
                format!("invalid duration \"{value}\" for `{name}`: {e}"),
                "write a duration like \"5 seconds\" or \"1 minute\"",
            )
        })
        .and_then(|ms| {
            if ms < 0 {
                Err(OptionError::new(
                    name,
                    format!("invalid duration \"{value}\" for `{name}`: the duration must not be negative"),
                    "write a duration like \"5 seconds\" or \"1 minute\"",
                ))
            } else {
                Ok(ms)
            }
        })
}

/// `true` or `false`, in any case (Spark's reading).
pub fn boolean(name: &str, value: &str) -> Result<bool, OptionError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(OptionError::new(
            name,
            format!("`{name}` takes true or false"),
            "",
        )),
    }
}

/// A whole number in `1..=max`.
pub fn count(name: &str, n: u64, max: u64) -> Result<u64, OptionError> {
    if (1..=max).contains(&n) {
        return Ok(n);
    }
    Err(count_error(name, max))
}

fn count_error(name: &str, max: u64) -> OptionError {
    if max >= i64::MAX as u64 {
        OptionError::new(
            name,
            format!("`{name}` takes a whole number of at least 1"),
            "",
        )
    } else {
        OptionError::new(
            name,
            format!("`{name}` takes a whole number from 1 to {max}"),
            "",
        )
    }
}

/// [`count`] of a text value.
pub fn parse_count(name: &str, value: &str, max: u64) -> Result<u64, OptionError> {
    let n = value
        .trim()
        .parse::<u64>()
        .map_err(|_| count_error(name, max))?;
    count(name, n, max)
}

/// A whole number in `0..=max`.
pub fn whole(name: &str, n: u64, max: u64) -> Result<u64, OptionError> {
    if n <= max {
        return Ok(n);
    }
    Err(whole_error(name, max))
}

fn whole_error(name: &str, max: u64) -> OptionError {
    if max >= i64::MAX as u64 {
        OptionError::new(
            name,
            format!("`{name}` takes a whole number of at least 0"),
            "",
        )
    } else {
        OptionError::new(
            name,
            format!("`{name}` takes a whole number from 0 to {max}"),
            "",
        )
    }
}

/// [`whole`] of a text value.
pub fn parse_whole(name: &str, value: &str, max: u64) -> Result<u64, OptionError> {
    let n = value
        .trim()
        .parse::<u64>()
        .map_err(|_| whole_error(name, max))?;
    whole(name, n, max)
}

/// One of `choices` (case-insensitive, as Spark reads them).
pub fn choice(name: &str, value: &str, choices: &[&str]) -> Result<(), OptionError> {
    if choices.iter().any(|c| c.eq_ignore_ascii_case(value.trim())) {
        return Ok(());
    }
    Err(OptionError::new(
        name,
        format!("unknown {name} `{value}`"),
        format!("{name}s: {}", choices.join(", ")),
    ))
}

/// Spark's rule for a source's strategy options: exactly one is set.
/// `names` are the options as the user spells them, `set` whether each is.
pub fn exactly_one(source: &str, names: &[&str], set: &[bool]) -> Result<(), OptionError> {
    if set.iter().filter(|s| **s).count() == 1 {
        return Ok(());
    }
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    let list = match quoted.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => quoted.join(""),
    };
    Err(OptionError::new(
        names.first().copied().unwrap_or_default(),
        format!("the {source} source needs exactly one of {list}"),
        "Spark's rule: they are the ways to choose the topics",
    ))
}

/// Spark's `subscribe`: comma-separated topics, at least one.
pub fn topics(name: &str, value: &str) -> Result<Vec<String>, OptionError> {
    let list: Vec<String> = value
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if list.is_empty() {
        return Err(OptionError::new(
            name,
            format!("`{name}` = \"{value}\" names no topic"),
            "name the topics, comma-separated, e.g. clicks,views",
        ));
    }
    Ok(list)
}

fn check_topics(name: &str, value: &str) -> Result<(), OptionError> {
    topics(name, value).map(|_| ())
}

/// Spark's `subscribePattern`: a non-empty pattern (the engine compiles it).
pub fn pattern(name: &str, value: &str) -> Result<(), OptionError> {
    if value.trim().is_empty() {
        return Err(OptionError::new(
            name,
            format!("`{name}` is empty"),
            "write a regex matched against whole topic names, e.g. clicks-.*",
        ));
    }
    Ok(())
}

const ASSIGN_HELP: &str = "write {\"topic\":[0,1]}: topics and their partitions";

/// Spark's `assign`: `{"topic":[0,1],...}`, at least one topic, each with
/// at least one partition from 0 to 2^31-1; sorted, without repeats.
///
/// Spark reads `{}` and `{"t":[]}` as assigning nothing (a query that
/// never reads a record) and refuses other empty strategies (`subscribe`
/// naming no topic): weir refuses these too.
pub fn assign(name: &str, value: &str) -> Result<Vec<(String, i32)>, OptionError> {
    let v = json::parse(value)
        .map_err(|e| OptionError::new(name, format!("`{name}`: not JSON ({e})"), ASSIGN_HELP))?;
    let topics = match v {
        json::Json::Object(t) if !t.is_empty() => t,
        _ => {
            return Err(OptionError::new(
                name,
                format!("`{name}`: {ASSIGN_HELP}"),
                "",
            ))
        }
    };
    let mut out = Vec::new();
    for (t, parts) in topics {
        let bad = || {
            OptionError::new(
                name,
                format!("`{name}`: topic `{t}` needs a list of partition numbers, e.g. [0,1]"),
                "",
            )
        };
        let json::Json::Array(parts) = parts else {
            return Err(bad());
        };
        if parts.is_empty() {
            return Err(bad());
        }
        for p in parts {
            let p = p
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .filter(|p| *p >= 0)
                .ok_or_else(bad)?;
            out.push((t.clone(), p));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn check_assign(name: &str, value: &str) -> Result<(), OptionError> {
    assign(name, value).map(|_| ())
}

/// A number per topic-partition, in (topic, partition) order.
pub type PartitionValues = Vec<((String, i32), i64)>;

/// Where a new query starts, as `startingOffsets` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartingOffsets {
    /// Each partition's earliest offset.
    Earliest,
    /// Each partition's end (Spark's default).
    Latest,
    /// Per topic-partition offsets (-2 earliest, -1 latest).
    Offsets(PartitionValues),
}

const STARTING_HELP: &str =
    "use earliest, latest or {\"topic\":{\"0\":23,\"1\":-2}} (-2: earliest, -1: latest)";

/// Spark's `startingOffsets`: `earliest`, `latest` (any case) or
/// `{"topic":{"0":23,"1":-2}}`: at least one topic, each with at least one
/// partition (0 to 2^31-1) and an offset of at least -2 (Spark's consumer
/// refuses to seek to other negative offsets).
pub fn starting_offsets(name: &str, value: &str) -> Result<StartingOffsets, OptionError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "earliest" => return Ok(StartingOffsets::Earliest),
        "latest" => return Ok(StartingOffsets::Latest),
        _ => {}
    }
    partition_values(name, value, -2, STARTING_HELP).map(StartingOffsets::Offsets)
}

fn check_starting_offsets(name: &str, value: &str) -> Result<(), OptionError> {
    starting_offsets(name, value).map(|_| ())
}

/// Spark's `startingOffsetsByTimestamp`: `{"topic":{"0":1700000000000}}`,
/// each a time in ms since the epoch.
pub fn offsets_by_timestamp(name: &str, value: &str) -> Result<PartitionValues, OptionError> {
    partition_values(
        name,
        value,
        0,
        "write {\"topic\":{\"0\":1700000000000}}: a time in ms since the epoch per partition",
    )
}

fn check_offsets_by_timestamp(name: &str, value: &str) -> Result<(), OptionError> {
    offsets_by_timestamp(name, value).map(|_| ())
}

/// `{"topic":{"partition":n}}` with every `n >= min`.
fn partition_values(
    name: &str,
    value: &str,
    min: i64,
    help: &str,
) -> Result<PartitionValues, OptionError> {
    let v = json::parse(value).map_err(|e| {
        let word = value.trim();
        if !word.starts_with('{') && !word.is_empty() && min < 0 {
            OptionError::new(name, format!("`{name}`: unknown value `{word}`"), help)
        } else {
            OptionError::new(name, format!("`{name}`: not JSON ({e})"), help)
        }
    })?;
    let topics = match v {
        json::Json::Object(t) if !t.is_empty() => t,
        _ => return Err(OptionError::new(name, format!("`{name}`: {help}"), "")),
    };
    let mut out = Vec::new();
    for (t, parts) in topics {
        let bad = || OptionError::new(name, format!("`{name}`: topic `{t}`: {help}"), "");
        let json::Json::Object(parts) = parts else {
            return Err(bad());
        };
        if parts.is_empty() {
            return Err(bad());
        }
        for (p, n) in parts {
            let p: i32 = p.parse().ok().filter(|p: &i32| *p >= 0).ok_or_else(bad)?;
            let n = n.as_i64().filter(|n| *n >= min).ok_or_else(bad)?;
            out.push(((t.clone(), p), n));
        }
    }
    out.sort();
    Ok(out)
}

/// `endingOffsets` and `endingOffsetsByTimestamp`: for batch queries only.
pub fn stream_has_no_end(name: &str, _value: &str) -> Result<(), OptionError> {
    Err(OptionError::new(
        name,
        format!("`{name}` is for batch queries; a stream has no end"),
        "use the available-now trigger to stop at the data present at start",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg<T: std::fmt::Debug>(r: Result<T, OptionError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn every_source_and_option_is_found_by_its_names() {
        for s in SOURCES {
            assert_eq!(source(s.name).map(|f| f.name), Some(s.name));
            for o in s.options {
                assert_eq!(
                    s.option(&o.name.to_ascii_uppercase()).map(|f| f.name),
                    Some(o.name)
                );
                if let Some(m) = o.macro_name {
                    assert_eq!(s.macro_option(m).map(|f| f.name), Some(o.name));
                }
                if let Some(d) = o.default {
                    assert!(
                        check_value(o.kind, o.name, d).is_ok()
                            || matches!(o.kind, ValueKind::Unsupported(_)),
                        "{}: {d}",
                        o.name
                    );
                }
            }
        }
        assert_eq!(source("rate-micro-batch").unwrap().name, "rate_micro_batch");
        assert_eq!(source("csv").unwrap().name, "files");
        assert!(source("kafak").is_none());
    }

    #[test]
    fn fixed_schemas_are_sparks() {
        let names: Vec<&str> = KAFKA_SCHEMA.iter().map(|f| f.name).collect();
        assert_eq!(
            names,
            [
                "key",
                "value",
                "topic",
                "partition",
                "offset",
                "timestamp",
                "timestampType"
            ]
        );
        assert_eq!(source("kafka").unwrap().schema, Some(KAFKA_SCHEMA));
        assert_eq!(
            source("rate").unwrap().schema.unwrap()[1].dtype,
            DataType::Int64
        );
        assert_eq!(source("socket").unwrap().schema.unwrap()[0].name, "value");
        assert_eq!(source("files").unwrap().schema, None);
        assert_eq!(
            fields(SOCKET_SCHEMA),
            [Field::new("value", DataType::String)]
        );
    }

    #[test]
    fn check_finds_unknown_passthrough_and_unsupported_options() {
        let k = source("kafka").unwrap();
        assert!(k
            .check("kafka.isolation.level", "read_uncommitted")
            .unwrap()
            .is_none());
        assert_eq!(
            k.check("KAFKA.BOOTSTRAP.SERVERS", "h:1")
                .unwrap()
                .unwrap()
                .name,
            "kafka.bootstrap.servers"
        );
        let e = k.check("startingOfsets", "earliest").unwrap_err();
        assert_eq!(
            e.message,
            "unknown option `startingOfsets` for the kafka source"
        );
        assert!(
            e.help
                .starts_with("options of kafka: kafka.bootstrap.servers, subscribe,"),
            "{}",
            e.help
        );
        assert!(!e.help.contains("minOffsetsPerTrigger"));
        assert_eq!(
            msg(k.check("minOffsetsPerTrigger", "10")),
            "weir does not support `minOffsetsPerTrigger` (weir runs a batch with whatever is available; leave it unset)"
        );
        assert_eq!(
            msg(k.check("endingOffsets", "latest")),
            "`endingOffsets` is for batch queries; a stream has no end (use the available-now trigger to stop at the data present at start)"
        );
        assert!(source("memory").unwrap().check("name", "x").is_err());
    }

    #[test]
    fn every_sink_and_option_is_found_by_its_names() {
        for s in SINKS {
            assert_eq!(sink(s.name).map(|f| f.name), Some(s.name));
            for f in s.spark_formats {
                assert_eq!(sink(f).map(|f| f.name), Some(s.name));
            }
            for o in s.options {
                assert_eq!(
                    s.option(&o.name.to_ascii_lowercase()).map(|f| f.name),
                    Some(o.name)
                );
                if let Some(m) = o.macro_name {
                    assert_eq!(s.macro_option(m).map(|f| f.name), Some(o.name));
                }
                if let Some(d) = o.default {
                    assert!(check_value(o.kind, o.name, d).is_ok(), "{}: {d}", o.name);
                }
            }
            for r in s.macro_required {
                assert!(s.option(r).is_some(), "{}: {r}", s.name);
            }
        }
        assert_eq!(sink("csv").unwrap().name, "files");
        assert_eq!(sink("foreachBatch").unwrap().name, "foreach_batch");
        assert_eq!(sink("noop").unwrap().kind, SinkKind::Noop);
        assert!(sink("noop").unwrap().options.is_empty());
        assert!(sink("nop").is_none());
    }

    #[test]
    fn sink_options_are_checked_by_their_rules() {
        let console = sink("console").unwrap();
        assert_eq!(
            msg(console.check("numRows", "0")),
            "`numRows` takes a whole number from 1 to 2147483647"
        );
        assert_eq!(
            console.check("NUMROWS", "5").unwrap().unwrap().name,
            "numRows"
        );
        assert_eq!(
            msg(console.check("truncate", "no")),
            "`truncate` takes true or false"
        );
        let e = console.check("numRow", "5").unwrap_err();
        assert_eq!(e.message, "unknown option `numRow` for the console sink");
        assert_eq!(e.help, "options of console: numRows, truncate");
        let e = sink("noop").unwrap().check("numRows", "5").unwrap_err();
        assert_eq!(e.message, "unknown option `numRows` for the noop sink");
        assert_eq!(e.help, "the noop sink takes no options");
        let kafka = sink("kafka").unwrap();
        assert!(kafka.check("kafka.acks", "all").unwrap().is_none());
        assert_eq!(msg(kafka.check("topic", "")), "`topic` must not be empty");
        assert_eq!(
            msg(kafka.check("valueFormat", "avro")),
            "unknown valueFormat `avro` (valueFormats: column, json)"
        );
        assert!(kafka.macro_needs(kafka.option("topic").unwrap()));
        assert!(!sink("postgres")
            .unwrap()
            .macro_needs(sink("postgres").unwrap().option("keyColumns").unwrap()));
        assert_eq!(
            msg(sink("files").unwrap().check("partitionBy", "day,,page")),
            "`partitionBy` = \"day,,page\" has an empty column name (name the columns, comma-separated, e.g. page,day)"
        );
        assert_eq!(
            missing_in_sink("kafka", "topic").to_string(),
            "the kafka sink needs the option `topic`"
        );
    }

    #[test]
    fn columns_and_delivery() {
        assert_eq!(columns("c", " page, day ").unwrap(), ["page", "day"]);
        assert!(columns("c", "").is_err());
        assert!(!at_least_once("d", "EXACTLY-ONCE").unwrap());
        assert!(at_least_once("d", "at_least_once").unwrap());
        assert_eq!(
            msg(at_least_once("delivery", "at_most_once")),
            "`delivery`: unknown delivery guarantee `at_most_once` (use exactly_once (transactions, the default) or at_least_once)"
        );
    }

    #[test]
    fn a_missing_option_is_named() {
        assert_eq!(
            missing("socket", "port").to_string(),
            "the socket source needs the option `port`"
        );
    }

    #[test]
    fn exactly_one_strategy() {
        let k = source("kafka").unwrap();
        let names = ["subscribe", "subscribePattern", "assign"];
        assert!(k.check_exactly_one(&names, &[false, true, false]).is_ok());
        let e = k
            .check_exactly_one(&names, &[true, true, false])
            .unwrap_err();
        assert_eq!(
            e.message,
            "the kafka source needs exactly one of `subscribe`, `subscribePattern` and `assign`"
        );
        assert_eq!(k.check_exactly_one(&names, &[false; 3]).unwrap_err(), e);
    }

    #[test]
    fn assign_needs_topics_with_partitions_in_range() {
        assert_eq!(
            assign("assign", r#"{"b":[1,0,1],"a":[2]}"#).unwrap(),
            vec![("a".into(), 2), ("b".into(), 0), ("b".into(), 1)]
        );
        let partitions = "`assign`: topic `t` needs a list of partition numbers, e.g. [0,1]";
        for bad in [
            r#"{"t":[]}"#,
            r#"{"t":[-1]}"#,
            r#"{"t":[2147483648]}"#,
            r#"{"t":["0"]}"#,
            r#"{"t":[1.5]}"#,
            r#"{"t":0}"#,
        ] {
            assert_eq!(msg(assign("assign", bad)), partitions, "{bad}");
        }
        assert_eq!(
            msg(assign("assign", "{}")),
            "`assign`: write {\"topic\":[0,1]}: topics and their partitions"
        );
        assert_eq!(
            msg(assign("assign", "[1]")),
            "`assign`: write {\"topic\":[0,1]}: topics and their partitions"
        );
        assert_eq!(
            msg(assign("assign", "{t:[0]}")),
            "`assign`: not JSON (expected a string in double quotes at character 2) (write {\"topic\":[0,1]}: topics and their partitions)"
        );
        assert_eq!(
            assign("assign", r#"{"t":[2147483647]}"#).unwrap(),
            vec![("t".into(), i32::MAX)]
        );
    }

    #[test]
    fn starting_offsets_are_earliest_latest_or_per_partition() {
        assert_eq!(
            starting_offsets("s", "EARLIEST").unwrap(),
            StartingOffsets::Earliest
        );
        assert_eq!(
            starting_offsets("s", " latest").unwrap(),
            StartingOffsets::Latest
        );
        assert_eq!(
            starting_offsets("s", r#"{"t":{"1":-2,"0":23}}"#).unwrap(),
            StartingOffsets::Offsets(vec![(("t".into(), 0), 23), (("t".into(), 1), -2)])
        );
        let topic = "`s`: topic `t`: use earliest, latest or {\"topic\":{\"0\":23,\"1\":-2}} (-2: earliest, -1: latest)";
        for bad in [
            r#"{"t":{"0":-5}}"#,
            r#"{"t":{}}"#,
            r#"{"t":{"x":1}}"#,
            r#"{"t":{"-1":1}}"#,
            r#"{"t":[0]}"#,
        ] {
            assert_eq!(msg(starting_offsets("s", bad)), topic, "{bad}");
        }
        assert_eq!(
            msg(starting_offsets("s", "{}")),
            "`s`: use earliest, latest or {\"topic\":{\"0\":23,\"1\":-2}} (-2: earliest, -1: latest)"
        );
        assert_eq!(
            msg(starting_offsets("s", "earliset")),
            "`s`: unknown value `earliset` (use earliest, latest or {\"topic\":{\"0\":23,\"1\":-2}} (-2: earliest, -1: latest))"
        );
    }

    #[test]
    fn offsets_by_timestamp_are_times_per_partition() {
        assert_eq!(
            offsets_by_timestamp("o", r#"{"t":{"0":1700000000000}}"#).unwrap(),
            vec![(("t".into(), 0), 1_700_000_000_000)]
        );
        assert!(offsets_by_timestamp("o", r#"{"t":{"0":-2}}"#).is_err());
        assert!(offsets_by_timestamp("o", "latest")
            .unwrap_err()
            .message
            .contains("not JSON"));
    }

    #[test]
    fn subscribe_and_pattern_name_something() {
        assert_eq!(topics("subscribe", " a, b ,").unwrap(), ["a", "b"]);
        assert_eq!(
            msg(topics("subscribe", " , ")),
            "`subscribe` = \" , \" names no topic (name the topics, comma-separated, e.g. clicks,views)"
        );
        assert!(pattern("subscribePattern", "a.*").is_ok());
        assert_eq!(pattern("p", " ").unwrap_err().message, "`p` is empty");
    }

    #[test]
    fn numbers_booleans_durations_choices_and_text() {
        assert_eq!(count("n", 3, 10).unwrap(), 3);
        assert_eq!(
            msg(count("rows_per_second", 0, u64::MAX)),
            "`rows_per_second` takes a whole number of at least 1"
        );
        assert_eq!(
            msg(count("port", 70000, 65535)),
            "`port` takes a whole number from 1 to 65535"
        );
        assert_eq!(
            msg(parse_count("rowsPerSecond", "-1", u64::MAX)),
            "`rowsPerSecond` takes a whole number of at least 1"
        );
        assert_eq!(parse_count("n", " 7", 10).unwrap(), 7);
        assert_eq!(whole("w", 0, 5).unwrap(), 0);
        assert_eq!(
            msg(parse_whole("w", "6", 5)),
            "`w` takes a whole number from 0 to 5"
        );
        assert_eq!(
            msg(parse_whole("w", "x", u64::MAX)),
            "`w` takes a whole number of at least 0"
        );
        assert!(boolean("b", "TRUE").unwrap());
        assert!(!boolean("b", "false").unwrap());
        assert_eq!(msg(boolean("b", "yes")), "`b` takes true or false");
        assert_eq!(duration("d", "0 seconds").unwrap(), 0);
        assert_eq!(duration("d", "2 minutes").unwrap(), 120_000);
        assert!(msg(duration("rampUpTime", "5 secs later"))
            .starts_with("invalid duration \"5 secs later\" for `rampUpTime`: "));
        assert!(choice("mode", "failfast", &["PERMISSIVE", "FAILFAST"]).is_ok());
        assert_eq!(
            msg(choice("format", "xml", FILE_FORMATS)),
            "unknown format `xml` (formats: json, csv, parquet)"
        );
        assert_eq!(msg(text("host", "")), "`host` must not be empty");
        assert!(location("path", "s3://dim/users").is_ok());
        assert!(
            msg(location("path", "gs://out/views")).contains("the scheme `gs://` is not supported")
        );
    }
}
