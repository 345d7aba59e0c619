//! Column types of weir's typed schemas.

use serde::{Deserialize, Serialize};

/// A column type. The names are those of the conformance `plan` format;
/// [`DataType::spark_name`] gives Spark's DDL name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DataType {
    /// An instant, microsecond precision, UTC (Spark `TIMESTAMP`).
    Timestamp,
    /// UTF-8 text (Spark `STRING`).
    String,
    /// 32-bit signed integer (Spark `INT`).
    Int32,
    /// 64-bit signed integer (Spark `BIGINT`).
    Int64,
    /// 64-bit float (Spark `DOUBLE`).
    Float64,
    /// Boolean (Spark `BOOLEAN`).
    Bool,
    /// Raw bytes (Spark `BINARY`).
    Binary,
    /// A time window: `struct<start: timestamp, end: timestamp>`.
    Window,
}

impl DataType {
    /// Parses a type name: the plan format's (`int64`) or Spark's (`bigint`).
    pub fn parse(s: &str) -> Option<DataType> {
        Some(match s.to_ascii_lowercase().as_str() {
            "timestamp" => DataType::Timestamp,
            "string" => DataType::String,
            "int32" | "int" | "integer" | "i32" => DataType::Int32,
            "int64" | "bigint" | "long" | "i64" => DataType::Int64,
            "float64" | "double" | "f64" => DataType::Float64,
            "bool" | "boolean" => DataType::Bool,
            "binary" | "bytes" => DataType::Binary,
            "window" => DataType::Window,
            _ => return None,
        })
    }

    /// The plan-format name (`int64`).
    pub fn name(self) -> &'static str {
        match self {
            DataType::Timestamp => "timestamp",
            DataType::String => "string",
            DataType::Int32 => "int32",
            DataType::Int64 => "int64",
            DataType::Float64 => "float64",
            DataType::Bool => "bool",
            DataType::Binary => "binary",
            DataType::Window => "window",
        }
    }

    /// Spark's name for the type (`bigint`).
    pub fn spark_name(self) -> &'static str {
        match self {
            DataType::Timestamp => "timestamp",
            DataType::String => "string",
            DataType::Int32 => "int",
            DataType::Int64 => "bigint",
            DataType::Float64 => "double",
            DataType::Bool => "boolean",
            DataType::Binary => "binary",
            DataType::Window => "struct<start:timestamp,end:timestamp>",
        }
    }

    /// True for the numeric types (sum and avg take these).
    pub fn is_numeric(self) -> bool {
        matches!(self, DataType::Int32 | DataType::Int64 | DataType::Float64)
    }

    /// True when min and max are defined on the type.
    pub fn is_orderable(self) -> bool {
        !matches!(self, DataType::Binary | DataType::Window)
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A named, typed column of a source schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    /// Column name.
    pub name: String,
    /// Column type.
    #[serde(rename = "type")]
    pub dtype: DataType,
}

impl Field {
    /// A field from a name and a type.
    pub fn new(name: impl Into<String>, dtype: DataType) -> Field {
        Field {
            name: name.into(),
            dtype,
        }
    }
}
