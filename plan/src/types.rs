//! Column types of weir's typed schemas.

use serde::{Deserialize, Serialize};

/// A column type. The names are those of the conformance `plan` format;
/// [`DataType::spark_name`] gives Spark's DDL name. Serialized as its name
/// (`"int64"`, `"array<string>"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// An array of non-null values of a scalar type (Spark
    /// `ARRAY<T>`): what `collect_list` and `collect_set` return;
    /// `Vec<T>` in Rust.
    List(ElementType),
}

/// The type of a [`DataType::List`]'s values: the scalar types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    /// An instant (Spark `TIMESTAMP`).
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
}

impl ElementType {
    /// Every element type.
    pub const ALL: [ElementType; 7] = [
        ElementType::Timestamp,
        ElementType::String,
        ElementType::Int32,
        ElementType::Int64,
        ElementType::Float64,
        ElementType::Bool,
        ElementType::Binary,
    ];

    /// The column type of one value.
    pub fn data_type(self) -> DataType {
        match self {
            ElementType::Timestamp => DataType::Timestamp,
            ElementType::String => DataType::String,
            ElementType::Int32 => DataType::Int32,
            ElementType::Int64 => DataType::Int64,
            ElementType::Float64 => DataType::Float64,
            ElementType::Bool => DataType::Bool,
            ElementType::Binary => DataType::Binary,
        }
    }

    /// The plan-format name of a list of it (`array<int64>`).
    fn list_name(self) -> &'static str {
        match self {
            ElementType::Timestamp => "array<timestamp>",
            ElementType::String => "array<string>",
            ElementType::Int32 => "array<int32>",
            ElementType::Int64 => "array<int64>",
            ElementType::Float64 => "array<float64>",
            ElementType::Bool => "array<bool>",
            ElementType::Binary => "array<binary>",
        }
    }

    /// Spark's name of a list of it (`array<bigint>`).
    fn list_spark_name(self) -> &'static str {
        match self {
            ElementType::Timestamp => "array<timestamp>",
            ElementType::String => "array<string>",
            ElementType::Int32 => "array<int>",
            ElementType::Int64 => "array<bigint>",
            ElementType::Float64 => "array<double>",
            ElementType::Bool => "array<boolean>",
            ElementType::Binary => "array<binary>",
        }
    }
}

impl DataType {
    /// Parses a type name: the plan format's (`int64`) or Spark's (`bigint`).
    /// Lists: `array<T>` (or `list<T>`) of a scalar type `T`.
    pub fn parse(s: &str) -> Option<DataType> {
        let lower = s.trim().to_ascii_lowercase();
        let inner = ["array<", "list<"]
            .iter()
            .find_map(|p| lower.strip_prefix(p)?.strip_suffix('>'));
        if let Some(inner) = inner {
            return DataType::parse(inner)?.element().map(DataType::List);
        }
        Some(match lower.as_str() {
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
            DataType::List(e) => e.list_name(),
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
            DataType::List(e) => e.list_spark_name(),
        }
    }

    /// The element type of this scalar type (None for a window or a list:
    /// lists hold scalars).
    pub fn element(self) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|e| e.data_type() == self)
    }

    /// True for the numeric types (sum and avg take these).
    pub fn is_numeric(self) -> bool {
        matches!(self, DataType::Int32 | DataType::Int64 | DataType::Float64)
    }

    /// True when min and max are defined on the type.
    pub fn is_orderable(self) -> bool {
        !matches!(
            self,
            DataType::Binary | DataType::Window | DataType::List(_)
        )
    }
}

impl Serialize for DataType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for DataType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<DataType, D::Error> {
        let name = String::deserialize(d)?;
        DataType::parse(&name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown column type `{name}`")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_types_are_named_as_spark_names_arrays() {
        let l = DataType::List(ElementType::Int64);
        assert_eq!(l.name(), "array<int64>");
        assert_eq!(l.spark_name(), "array<bigint>");
        assert_eq!(DataType::parse("ARRAY<bigint>"), Some(l));
        assert_eq!(DataType::parse("array<int64>"), Some(l));
        assert_eq!(DataType::parse("array<window>"), None);
        assert_eq!(DataType::parse("array<array<int>>"), None);
        for e in ElementType::ALL {
            let t = DataType::List(e);
            assert_eq!(DataType::parse(t.name()), Some(t));
            assert_eq!(DataType::parse(t.spark_name()), Some(t));
            assert_eq!(e.data_type().element(), Some(e));
        }
    }

    #[test]
    fn types_serialize_as_their_names() {
        for t in [
            DataType::Int64,
            DataType::Window,
            DataType::List(ElementType::String),
        ] {
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", t.name()));
            assert_eq!(serde_json::from_str::<DataType>(&json).unwrap(), t);
        }
        assert!(serde_json::from_str::<DataType>("\"uint8\"").is_err());
    }
}
