//! The console sink: each batch printed exactly as Spark's console sink
//! prints it (`Batch: N` banner, then `Dataset.show(numRows, truncate)`).

use std::io::Write;
use std::sync::{Arc, Mutex};

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, TimeUnit};
use arrow::record_batch::RecordBatch;

use super::Sink;
use crate::error::{Result, WeirError};

/// Prints batches like Spark's `console` format.
pub struct ConsoleSink {
    truncate: bool,
    num_rows: usize,
    out: Option<Arc<Mutex<Vec<u8>>>>,
    schema: Option<arrow::datatypes::SchemaRef>,
}

impl Default for ConsoleSink {
    fn default() -> Self {
        Self::new()
    }
}

impl ConsoleSink {
    /// Truncating cells to 20 characters, 20 rows per batch (Spark's defaults).
    pub fn new() -> ConsoleSink {
        ConsoleSink {
            truncate: true,
            num_rows: 20,
            out: None,
            schema: None,
        }
    }

    /// Truncate long cells (Spark's `truncate` option).
    pub fn truncate(mut self, yes: bool) -> Self {
        self.truncate = yes;
        self
    }

    /// Rows shown per batch (Spark's `numRows`).
    pub fn num_rows(mut self, n: usize) -> Self {
        self.num_rows = n;
        self
    }

    /// Writes into a buffer instead of stdout (for tests); returns the buffer.
    pub fn capture(mut self) -> (Self, Arc<Mutex<Vec<u8>>>) {
        let buf = Arc::new(Mutex::new(Vec::new()));
        self.out = Some(buf.clone());
        (self, buf)
    }
}

/// Formats a double as Java's `Double.toString` does for common values.
pub fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let a = v.abs();
    if a != 0.0 && !(1e-3..1e7).contains(&a) {
        let s = format!("{v:E}");
        let (m, e) = s.split_once('E').unwrap_or((&s, "0"));
        let m = if m.contains('.') {
            m.to_string()
        } else {
            format!("{m}.0")
        };
        return format!("{m}E{e}");
    }
    let s = format!("{v}");
    if s.contains('.') {
        s
    } else {
        format!("{s}.0")
    }
}

/// One cell as Spark's `show()` renders it.
pub fn cell(a: &dyn Array, i: usize) -> String {
    if a.is_null(i) {
        return "null".into();
    }
    match a.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => crate::row::Timestamp(
            a.as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                .value(i),
        )
        .to_string(),
        DataType::Float64 => {
            java_double(a.as_primitive::<arrow::datatypes::Float64Type>().value(i))
        }
        DataType::Struct(_) => {
            let s = a.as_struct();
            let parts: Vec<String> = s.columns().iter().map(|c| cell(c.as_ref(), i)).collect();
            format!("{{{}}}", parts.join(", "))
        }
        DataType::Binary => {
            let b = a.as_binary::<i32>().value(i);
            format!(
                "[{}]",
                b.iter()
                    .map(|x| format!("{x:02X}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
        _ => arrow::util::display::array_value_to_string(a, i).unwrap_or_default(),
    }
}

/// Spark's `Dataset.showString(numRows, truncate)` over Arrow batches.
pub fn show_string(
    batches: &[RecordBatch],
    schema: &arrow::datatypes::Schema,
    num_rows: usize,
    truncate: usize,
) -> String {
    let mut rows: Vec<Vec<String>> = Vec::new();
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    'outer: for b in batches {
        for i in 0..b.num_rows() {
            if rows.len() >= num_rows {
                break 'outer;
            }
            rows.push(b.columns().iter().map(|c| cell(c.as_ref(), i)).collect());
        }
    }
    let fit = |s: String| -> String {
        if truncate > 0 && s.chars().count() > truncate {
            if truncate < 4 {
                s.chars().take(truncate).collect()
            } else {
                format!("{}...", s.chars().take(truncate - 3).collect::<String>())
            }
        } else {
            s
        }
    };
    let header: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| fit(f.name().clone()))
        .collect();
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|r| r.into_iter().map(fit).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count().max(3)).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let sep: String = widths
        .iter()
        .map(|w| "-".repeat(*w))
        .collect::<Vec<_>>()
        .join("+");
    let sep = format!("+{sep}+\n");
    let line = |cells: &[String]| -> String {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| {
                let pad = " ".repeat(w - c.chars().count());
                if truncate > 0 {
                    format!("{pad}{c}")
                } else {
                    format!("{c}{pad}")
                }
            })
            .collect();
        format!("|{}|\n", parts.join("|"))
    };
    let mut out = String::new();
    out.push_str(&sep);
    out.push_str(&line(&header));
    out.push_str(&sep);
    for r in &rows {
        out.push_str(&line(r));
    }
    out.push_str(&sep);
    if total > num_rows {
        out.push_str(&format!(
            "only showing top {num_rows} {}\n",
            if num_rows == 1 { "row" } else { "rows" }
        ));
    }
    out
}

impl Sink for ConsoleSink {
    fn for_task(&self, _task: &str, _mode: weir_plan::OutputMode) -> Result<super::BoxSink> {
        // Each task prints its own batches in this process.
        Ok(Box::new(ConsoleSink {
            truncate: self.truncate,
            num_rows: self.num_rows,
            out: self.out.clone(),
            schema: None,
        }))
    }

    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::Console
    }

    fn description(&self) -> String {
        "org.apache.spark.sql.execution.streaming.ConsoleTable$".into()
    }

    fn open(&mut self, ctx: &super::SinkContext) -> Result<()> {
        crate::connector::check_sink_option("console", "numRows", &self.num_rows.to_string())?;
        self.schema = Some(ctx.schema.clone());
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let schema = match (batches.first(), &self.schema) {
            (Some(b), _) => b.schema(),
            (None, Some(s)) => s.clone(),
            (None, None) => return self.write(batch_id, None),
        };
        self.write(batch_id, Some((batches, schema)))
    }
}

impl ConsoleSink {
    fn write(
        &mut self,
        batch_id: i64,
        data: Option<(&[RecordBatch], arrow::datatypes::SchemaRef)>,
    ) -> Result<()> {
        let mut text = format!("-------------------------------------------\nBatch: {batch_id}\n-------------------------------------------\n");
        let table = match data {
            Some((b, s)) => show_string(b, &s, self.num_rows, if self.truncate { 20 } else { 0 }),
            None => String::new(),
        };
        text.push_str(&table);
        text.push('\n');
        match &self.out {
            Some(buf) => buf.lock().unwrap().extend_from_slice(text.as_bytes()),
            None => {
                let mut o = std::io::stdout().lock();
                o.write_all(text.as_bytes())
                    .and_then(|_| o.flush())
                    .map_err(|e| WeirError::Sink {
                        sink: "console".into(),
                        message: e.to_string(),
                    })?;
            }
        }
        Ok(())
    }
}

/// `format("console")`: `numRows`, `truncate`.
pub(super) fn from_options(
    o: &super::SinkOptions,
) -> std::result::Result<super::BoxSink, weir_plan::connectors::OptionError> {
    let mut s = ConsoleSink::new();
    if let Some(n) = o.number("numRows")? {
        s = s.num_rows(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(yes) = o.flag("truncate")? {
        s = s.truncate(yes);
    }
    Ok(Box::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_like_java() {
        assert_eq!(java_double(2.0), "2.0");
        assert_eq!(java_double(1.0833333333333333), "1.0833333333333333");
        assert_eq!(java_double(-2.25), "-2.25");
        assert_eq!(java_double(1e7), "1.0E7");
    }

    #[test]
    fn num_rows_is_checked_by_the_connector_table_at_start() {
        let schema = std::sync::Arc::new(arrow::datatypes::Schema::empty());
        let ctx = super::super::SinkContext::for_tests(None, weir_plan::OutputMode::Append, schema);
        let e = ConsoleSink::new().num_rows(0).open(&ctx).unwrap_err();
        assert!(
            e.to_string()
                .contains("`numRows` takes a whole number from 1 to 2147483647"),
            "{e}"
        );
        assert!(ConsoleSink::new().num_rows(1).open(&ctx).is_ok());
    }
}
