//! A source's or sink's options by Spark's names, checked by weir-plan's
//! connector table: what `source::from_options` and `sink::from_options`
//! share. [`build`] checks every option (unknown, given twice, each value
//! by its rule, a required one missing) and hands the checked
//! [`ConnectorOptions`] to the connector's builder, which reads them with
//! the typed accessors.

use std::collections::BTreeMap;
use std::time::Duration;

use weir_plan::connectors::{self, Connector, OptionError};
use weir_plan::Field;

use crate::error::{Result, WeirError};

/// A connector's options, checked by the connector table: what a source's
/// or a sink's `from_options` reads.
pub struct ConnectorOptions {
    connector: &'static Connector,
    format: String,
    /// By the table's (Spark's) name: the value as given.
    values: BTreeMap<&'static str, String>,
    /// Every option as given, passthrough ones (`kafka.*`) too.
    given: Vec<(String, String)>,
    fields: Vec<Field>,
}

impl ConnectorOptions {
    /// The Spark format name the connector was asked for (`json`, `rate`,
    /// `noop`, ...).
    pub fn format(&self) -> &str {
        &self.format
    }

    /// The option's value as given (by Spark's name), or its table default.
    pub fn get(&self, name: &str) -> Option<&str> {
        let spec = self.connector.option(name)?;
        self.values
            .get(spec.name)
            .map(String::as_str)
            .or(spec.default)
    }

    /// Whether the user set the option.
    pub fn is_set(&self, name: &str) -> bool {
        self.connector
            .option(name)
            .is_some_and(|s| self.values.contains_key(s.name))
    }

    /// A whole-number option (its value or default).
    pub fn number(&self, name: &str) -> std::result::Result<Option<u64>, OptionError> {
        self.get(name)
            .map(|v| connectors::parse_whole(name, v, u64::MAX))
            .transpose()
    }

    /// A `true`/`false` option (its value or default).
    pub fn flag(&self, name: &str) -> std::result::Result<Option<bool>, OptionError> {
        self.get(name)
            .map(|v| connectors::boolean(name, v))
            .transpose()
    }

    /// A duration option (its value or default).
    pub fn duration(&self, name: &str) -> std::result::Result<Option<Duration>, OptionError> {
        self.get(name)
            .map(|v| connectors::duration(name, v).map(|ms| Duration::from_millis(ms as u64)))
            .transpose()
    }

    /// A comma-separated column list (empty when unset).
    pub fn columns(&self, name: &str) -> std::result::Result<Vec<String>, OptionError> {
        self.get(name)
            .map_or(Ok(vec![]), |v| connectors::columns(name, v))
    }

    /// Every option as given, in order (for a connector that reads them
    /// all, as the Kafka source and sink do).
    pub fn given(&self) -> impl Iterator<Item = (&str, &str)> {
        self.given.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The declared schema (for sources without a fixed one; empty for a
    /// sink).
    pub fn fields(&self) -> &[Field] {
        &self.fields
    }
}

/// Builds a connector of one kind (a source or a sink) from its checked
/// options.
pub(crate) type Builder<T> = fn(&ConnectorOptions) -> std::result::Result<T, OptionError>;

/// Checks `options` against `connector`'s table and builds it with its
/// builder in `builders` (by the table's name). `format` is the name it
/// was asked for: Spark's format of a file connector (`csv`) is its
/// `format` option, and an explicit `format` option must agree with it.
pub(crate) fn build<T, K, V>(
    connector: &'static Connector,
    format: &str,
    options: impl IntoIterator<Item = (K, V)>,
    fields: Vec<Field>,
    builders: &[(&str, Builder<T>)],
) -> Result<T>
where
    K: AsRef<str>,
    V: AsRef<str>,
{
    let refuse = |e: OptionError| WeirError::Config(e.to_string());
    let mut o = ConnectorOptions {
        connector,
        format: format.to_string(),
        values: BTreeMap::new(),
        given: Vec::new(),
        fields,
    };
    // Spark's format names a file connector's format.
    let mut format_by_name = connector.name == "files" && format != connector.name;
    if format_by_name {
        o.values.insert("format", format.to_string());
    }
    for (k, v) in options {
        let (k, v) = (k.as_ref(), v.as_ref());
        if let Some(option) = connector.check(k, v).map_err(refuse)? {
            if format_by_name && option.name == "format" {
                if !v.eq_ignore_ascii_case(format) {
                    return Err(WeirError::Config(format!(
                        "option `{k}` is `{v}` but the format is `{format}` (drop the option, or make the two agree)"
                    )));
                }
                format_by_name = false;
            } else if o.values.insert(option.name, v.to_string()).is_some() {
                return Err(WeirError::Config(format!("option `{k}` is given twice")));
            }
        }
        o.given.push((k.to_string(), v.to_string()));
    }
    if let Some(missing) = connector
        .options
        .iter()
        .find(|s| s.required && !o.values.contains_key(s.name))
    {
        return Err(refuse(connector.missing(missing.name)));
    }
    let build = builders
        .iter()
        .find(|(name, _)| *name == connector.name)
        .map(|(_, b)| *b)
        .ok_or_else(|| {
            WeirError::Config(format!(
                "the {} {} is not built into this weir (enable its feature)",
                connector.name, connector.what
            ))
        })?;
    build(&o).map_err(refuse)
}
/// Checks a value a sink's typed builder was given with the connector
/// table's rule for `option` (Spark's name) of `sink`: what the sinks call
/// when the query starts, so a builder's value is refused as
/// `weir::sink::from_options` and `stream_query!` refuse it.
pub(crate) fn check_sink_option(sink: &str, option: &str, value: &str) -> Result<()> {
    match connectors::sink(sink) {
        Some(spec) => spec
            .check(option, value)
            .map(|_| ())
            .map_err(|e| WeirError::Config(e.to_string())),
        None => Ok(()),
    }
}
