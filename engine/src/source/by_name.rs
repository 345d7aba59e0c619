//! Sources by Spark's format name and options, as Spark's
//! `spark.readStream.format("rate").option("rowsPerSecond", "10").load()`
//! builds them: [`from_options`] checks every option against weir-plan's
//! connector table ([`weir_plan::connectors`]: unknown and missing options,
//! each value by its rule, the same messages `stream_query!` gives), then
//! the source's own `from_options` builds it from the checked values.
//!
//! A new source registers here with one line in `BUILDERS` (and its row
//! in the connector table).

use weir_plan::connectors;
use weir_plan::Field;

use super::BoxSource;
use crate::connector;
use crate::error::{Result, WeirError};

/// A source's options, checked by the connector table: what a source's
/// `from_options` reads.
pub use crate::connector::ConnectorOptions as SourceOptions;

/// Builds one kind of source from its checked options.
pub type Builder = fn(&SourceOptions) -> std::result::Result<BoxSource, connectors::OptionError>;

/// The sources [`from_options`] builds, by their connector-table name.
const BUILDERS: &[(&str, Builder)] = &[
    ("rate", super::rate::from_options),
    ("files", super::file::from_options),
    ("socket", super::socket::from_options),
    ("memory", super::memory::from_options),
    ("rate_micro_batch", super::rate_micro_batch::from_options),
    #[cfg(feature = "kafka")]
    ("kafka", super::kafka::from_options),
];

/// The source of Spark's `format` (or weir's name, e.g. `files`, or
/// `rate_micro_batch`) with these Spark-named options; `fields` is the
/// schema of a source that has no fixed one (the file source's). Unknown,
/// missing and invalid options are refused with the connector table's
/// messages.
///
/// ```
/// use weir_engine::source::from_options;
/// let rate = from_options("rate", [("rowsPerSecond", "10")], vec![]).unwrap();
/// assert_eq!(rate.schema().fields().len(), 2);
/// let e = from_options("rate", [("rowsPerSecond", "0")], vec![]).err().unwrap();
/// assert!(e.to_string().contains("`rowsPerSecond` takes a whole number of at least 1"));
/// ```
pub fn from_options<'a>(
    format: &str,
    options: impl IntoIterator<Item = (&'a str, &'a str)>,
    fields: Vec<Field>,
) -> Result<BoxSource> {
    let spec = connectors::source(format).ok_or_else(|| {
        let names: Vec<&str> = connectors::SOURCES
            .iter()
            .flat_map(|s| s.spark_formats.iter().copied())
            .collect();
        WeirError::Config(format!(
            "unknown source format `{format}` (formats: {})",
            names.join(", ")
        ))
    })?;
    connector::build(&spec.connector, format, options, fields, BUILDERS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::DataType;

    fn refused<'a>(format: &str, options: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
        match from_options(format, options, vec![]) {
            Err(e) => e.to_string(),
            Ok(s) => panic!("{format}: built {}", s.description()),
        }
    }

    #[test]
    fn every_table_source_has_a_builder() {
        for s in connectors::SOURCES {
            let registered = BUILDERS.iter().any(|(n, _)| *n == s.name);
            assert!(
                registered || (s.name == "kafka" && !cfg!(feature = "kafka")),
                "{}",
                s.name
            );
        }
    }

    #[test]
    fn builds_sources_by_sparks_format_and_options() {
        let s = from_options(
            "rate",
            [("rowsPerSecond", "7"), ("rampUpTime", "3 seconds")],
            vec![],
        )
        .unwrap();
        assert_eq!(
            s.description(),
            "RateStreamV2[rowsPerSecond=7, rampUpTimeSeconds=3, numPartitions=1]"
        );
        let s = from_options(
            "rate-micro-batch",
            [
                ("rowsPerBatch", "5"),
                ("numPartitions", "3"),
                ("advanceMillisPerBatch", "10"),
            ],
            vec![],
        )
        .unwrap();
        // Spark's description of the source.
        assert_eq!(
            s.description(),
            "RatePerMicroBatchStream[rowsPerBatch=5, numPartitions=3, startTimestamp=0, advanceMsPerBatch=10]"
        );
        let fields = vec![Field::new("page", DataType::String)];
        let s = from_options(
            "csv",
            [("path", "in"), ("header", "true"), ("mode", "failfast")],
            fields,
        )
        .unwrap();
        assert_eq!(s.schema().field(0).name(), "page");
        let s = from_options("socket", [("port", "9999")], vec![]).unwrap();
        assert_eq!(s.schema().field(0).name(), "value");
    }

    #[test]
    fn refuses_with_the_connector_tables_messages() {
        assert_eq!(
            refused("rate", [("rowsPerSecond", "0")]),
            WeirError::Config(
                connectors::count("rowsPerSecond", 0, u64::MAX)
                    .unwrap_err()
                    .to_string()
            )
            .to_string()
        );
        assert!(refused("rate", [("rowsPerSecnd", "1")])
            .contains("unknown option `rowsPerSecnd` for the rate source"));
        assert!(refused("rate-micro-batch", [])
            .contains("the rate_micro_batch source needs the option `rowsPerBatch`"));
        assert!(refused("json", [("path", "in")]).contains("Schema must be specified"));
        assert!(refused("json", [("path", "in"), ("cleanSource", "delete")])
            .contains("weir does not support `cleanSource`"));
        assert!(refused("socket", [("port", "0")])
            .contains("`port` takes a whole number from 1 to 65535"));
        assert!(refused("memory", []).contains("MemoryStream"));
        assert!(refused("xml", []).contains("unknown source format `xml`"));
        if cfg!(feature = "kafka") {
            let rule = connectors::assign("assign", "{}").unwrap_err().to_string();
            assert!(refused(
                "kafka",
                [("kafka.bootstrap.servers", "h:1"), ("assign", "{}")]
            )
            .ends_with(&rule));
            assert!(refused("kafka", [("subscribe", "t")])
                .contains("the kafka source needs the option `kafka.bootstrap.servers`"));
            let s = from_options(
                "kafka",
                [
                    ("kafka.bootstrap.servers", "h:1"),
                    ("subscribe", "t"),
                    ("kafka.client.id", "me"),
                ],
                vec![],
            )
            .unwrap();
            assert_eq!(s.description(), "KafkaV2[Subscribe[t]]");
        }
        assert!(
            refused("rate", [("rowsPerSecond", "1"), ("ROWSPERSECOND", "2")])
                .contains("given twice")
        );
        assert!(refused("csv", [("path", "in"), ("format", "json")])
            .ends_with("option `format` is `json` but the format is `csv` (drop the option, or make the two agree)"));
        assert!(refused(
            "csv",
            [("path", "in"), ("format", "csv"), ("format", "csv")]
        )
        .contains("option `format` is given twice"));
    }
}
