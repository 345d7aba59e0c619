//! Helpers shared by the integration tests.

use weir::arrow::array::{Array, AsArray};
use weir::arrow::datatypes::{DataType, TimeUnit};
use weir::arrow::record_batch::RecordBatch;

/// One cell as JSON, in the conformance files' conventions (timestamps as
/// ISO-8601 UTC with `Z`, windows as `{"start", "end"}`).
pub fn cell_json(a: &dyn Array, i: usize) -> serde_json::Value {
    use serde_json::Value;
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let us = a
                .as_primitive::<weir::arrow::datatypes::TimestampMicrosecondType>()
                .value(i);
            Value::String(iso(us))
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let mut m = serde_json::Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                m.insert(f.name().clone(), cell_json(c.as_ref(), i));
            }
            Value::Object(m)
        }
        DataType::Int64 => Value::from(
            a.as_primitive::<weir::arrow::datatypes::Int64Type>()
                .value(i),
        ),
        DataType::Int32 => Value::from(
            a.as_primitive::<weir::arrow::datatypes::Int32Type>()
                .value(i),
        ),
        DataType::Float64 => Value::from(
            a.as_primitive::<weir::arrow::datatypes::Float64Type>()
                .value(i),
        ),
        DataType::Boolean => Value::from(a.as_boolean().value(i)),
        DataType::Utf8 => Value::from(a.as_string::<i32>().value(i)),
        other => Value::String(format!("<{other}>")),
    }
}

/// Microseconds since the epoch as `2024-01-01T12:00:00Z`.
pub fn iso(us: i64) -> String {
    let t = chrono::DateTime::from_timestamp_micros(us).unwrap();
    if us % 1_000_000 == 0 {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }
}

/// Rows of batches as JSON objects.
pub fn rows_json(batches: &[RecordBatch]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let mut m = serde_json::Map::new();
            for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                m.insert(f.name().clone(), cell_json(c.as_ref(), i));
            }
            out.push(serde_json::Value::Object(m));
        }
    }
    out
}

/// Parses an ISO-8601 instant to epoch milliseconds.
pub fn iso_ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

/// The events schema most tests use: `ts`, `key`, `value`.
pub fn fields() -> Vec<weir::plan::Field> {
    use weir::plan::{DataType, Field};
    vec![
        Field::new("ts", DataType::Timestamp),
        Field::new("key", DataType::String),
        Field::new("value", DataType::Int64),
    ]
}

/// A session whose checkpoint files are not fsync'd (tests need no durability).
pub fn session() -> weir::Session {
    weir::Session::with_config(weir::SessionConfig {
        fsync_checkpoint: false,
        ..weir::SessionConfig::default()
    })
}

/// Runs test `name` of this test binary in a child process with `envs` set
/// (one of them a `WEIR_FAILPOINT`), and asserts the child was killed by
/// SIGKILL at its failpoint (not a panic, not a normal end).
pub fn run_child_killed_at_failpoint(name: &str, envs: &[(&str, String)]) {
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .envs(envs.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{name}: the child was meant to be killed (SIGKILL) at its failpoint ({envs:?}): {status}"
    );
}
