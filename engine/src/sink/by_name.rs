//! Sinks by Spark's format name and options, as Spark's
//! `df.writeStream.format("console").option("numRows", "5")` names them:
//! [`from_options`] checks every option against weir-plan's connector table
//! ([`weir_plan::connectors::SINKS`]: unknown and missing options, each
//! value by its rule, the messages `stream_query!` gives), then the sink's
//! own `from_options` builds it from the checked values. The sinks' typed
//! builders check their values with the same rules when the query starts
//! ([`check`]).
//!
//! A new sink registers here with one line in `BUILDERS` (and its row in
//! the connector table); `stream_query!` then takes `sink: name(...)`.

use weir_plan::connectors::{self, OptionError};

use super::BoxSink;
use crate::connector;
use crate::error::{Result, WeirError};

/// A sink's options, checked by the connector table: what a sink's
/// `from_options` reads.
pub use crate::connector::ConnectorOptions as SinkOptions;

/// Builds one kind of sink from its checked options.
pub type Builder = fn(&SinkOptions) -> std::result::Result<BoxSink, OptionError>;

/// The sinks [`from_options`] builds, by their connector-table name.
const BUILDERS: &[(&str, Builder)] = &[
    ("console", super::console::from_options),
    ("memory", super::memory::from_options),
    ("files", super::file::from_options),
    #[cfg(feature = "kafka")]
    ("kafka", super::kafka::from_options),
    #[cfg(feature = "postgres")]
    ("postgres", super::postgres::from_options),
    #[cfg(feature = "redis")]
    ("redis", super::redis::from_options),
    ("noop", super::noop::from_options),
];

/// The sink of Spark's `format` (or weir's name, e.g. `files`) with these
/// Spark-named options. Unknown, missing and invalid options are refused
/// with the connector table's messages; `foreach` and `foreachBatch` are
/// code, handed to the writer instead.
///
/// ```
/// use weir_engine::sink::from_options;
/// let console = from_options("console", [("numRows", "5"), ("truncate", "false")]).unwrap();
/// assert_eq!(console.kind(), weir_plan::SinkKind::Console);
/// let noop = from_options("noop", Vec::<(&str, &str)>::new()).unwrap();
/// assert!(noop.description().contains("NoopTable"));
/// let e = from_options("console", [("numRows", "0")]).err().unwrap();
/// assert!(e.to_string().contains("`numRows` takes a whole number from 1 to 2147483647"));
/// ```
pub fn from_options<K, V>(
    format: &str,
    options: impl IntoIterator<Item = (K, V)>,
) -> Result<BoxSink>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    let spec = connectors::sink(format).ok_or_else(|| {
        let names: Vec<&str> = connectors::SINKS
            .iter()
            .flat_map(|s| s.spark_formats.iter().copied())
            .collect();
        WeirError::Config(format!(
            "unknown sink format `{format}` (formats: {})",
            names.join(", ")
        ))
    })?;
    if spec.code.is_some() {
        return Err(WeirError::Config(format!(
            "the {format} sink is code, not options: hand it to the writer with `.foreach_batch(f)` or `.sink(ForeachSink::new(writer))`"
        )));
    }
    connector::build(&spec.connector, format, options, vec![], BUILDERS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused<'a>(format: &str, options: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        match from_options(format, options) {
            Err(e) => e.to_string(),
            Ok(s) => panic!("{format}: built {}", s.description()),
        }
    }

    #[test]
    fn every_table_sink_has_a_builder_or_is_code() {
        for s in connectors::SINKS {
            let registered = BUILDERS.iter().any(|(n, _)| *n == s.name);
            let featured = match s.name {
                "kafka" => cfg!(feature = "kafka"),
                "postgres" => cfg!(feature = "postgres"),
                "redis" => cfg!(feature = "redis"),
                _ => true,
            };
            assert!(
                registered || s.code.is_some() || !featured,
                "{} has no builder",
                s.name
            );
            assert!(!(registered && s.code.is_some()), "{}", s.name);
        }
    }

    #[test]
    fn builds_sinks_by_sparks_format_and_options() {
        let s = from_options("console", [("numRows", "3"), ("TRUNCATE", "false")]).unwrap();
        assert_eq!(s.kind(), weir_plan::SinkKind::Console);
        let s = from_options("memory", [("queryName", "views")]).unwrap();
        assert_eq!(s.description(), "MemorySink[views]");
        let s = from_options("csv", [("path", "out"), ("partitionBy", "day, page")]).unwrap();
        assert_eq!(s.description(), "FileSink[out]");
        assert_eq!(s.kind(), weir_plan::SinkKind::File);
        let s = from_options("files", [("path", "out"), ("format", "JSON")]).unwrap();
        assert_eq!(s.kind(), weir_plan::SinkKind::File);
        // The format option may repeat Spark's format name.
        let s = from_options("csv", [("path", "out"), ("FORMAT", "CSV")]).unwrap();
        assert_eq!(s.kind(), weir_plan::SinkKind::File);
        let s = from_options("noop", Vec::<(String, String)>::new()).unwrap();
        assert_eq!(
            s.description(),
            "org.apache.spark.sql.execution.datasources.noop.NoopTable$"
        );
        if cfg!(feature = "kafka") {
            let s = from_options(
                "kafka",
                [
                    ("kafka.bootstrap.servers", "h:1"),
                    ("topic", "out"),
                    ("valueFormat", "json"),
                    ("kafka.acks", "all"),
                ],
            )
            .unwrap();
            assert_eq!(s.kind(), weir_plan::SinkKind::KafkaJson);
        }
    }

    #[test]
    fn refuses_with_the_connector_tables_messages() {
        let rule = |sink: &str, option: &str, value: &str| {
            connectors::sink(sink)
                .unwrap()
                .check(option, value)
                .unwrap_err()
                .to_string()
        };
        assert!(refused("console", [("numRows", "0")]).ends_with(&rule("console", "numRows", "0")));
        assert!(
            refused("console", [("truncate", "yes")]).contains("`truncate` takes true or false")
        );
        assert!(refused("console", [("numRow", "5")])
            .contains("unknown option `numRow` for the console sink"));
        assert!(refused("noop", [("numRows", "5")]).contains("the noop sink takes no options"));
        assert!(refused("parquet", []).contains("the files sink needs the option `path`"));
        assert!(refused("parquet", [("path", "gs://out")])
            .contains("the scheme `gs://` is not supported"));
        assert!(refused("memory", [("queryName", "")]).contains("`queryName` must not be empty"));
        assert!(refused("foreachBatch", []).contains("is code, not options"));
        assert!(refused("xml", []).contains("unknown sink format `xml`"));
        assert!(refused("console", [("numRows", "1"), ("NUMROWS", "2")]).contains("given twice"));
        assert_eq!(
            refused("csv", [("path", "out"), ("format", "json")]),
            "option `format` is `json` but the format is `csv` (drop the option, or make the two agree)"
        );
        assert!(refused(
            "files",
            [("path", "out"), ("format", "csv"), ("format", "json")]
        )
        .contains("option `format` is given twice"));
        if cfg!(feature = "kafka") {
            assert!(refused("kafka", [("topic", "t")])
                .contains("the kafka sink needs the option `kafka.bootstrap.servers`"));
            assert!(refused(
                "kafka",
                [
                    ("kafka.bootstrap.servers", "h:1"),
                    ("deliveryGuarantee", "maybe")
                ]
            )
            .ends_with(&rule("kafka", "deliveryGuarantee", "maybe")));
        }
        if cfg!(feature = "postgres") {
            assert!(refused("postgres", [("url", "postgresql://h/db")])
                .contains("the postgres sink needs the option `table`"));
        }
        if cfg!(feature = "redis") {
            assert!(refused("redis", [("url", "redis://h"), ("keyPrefix", "")])
                .contains("`keyPrefix` must not be empty"));
        }
    }

    #[test]
    fn typed_builders_are_checked_by_the_same_rules() {
        assert!(
            crate::connector::check_sink_option("console", "numRows", "0")
                .unwrap_err()
                .to_string()
                .contains("`numRows` takes a whole number from 1 to 2147483647")
        );
        assert!(crate::connector::check_sink_option("console", "numRows", "20").is_ok());
    }
}
