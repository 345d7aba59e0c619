//! Static tables for stream-static joins: in-memory batches or Parquet, JSON
//! or CSV files, optionally re-read on a schedule for slowly changing
//! dimensions (the seed's `spark.read.parquet("s3://dim/users/")`,
//! "refreshed periodically").

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::Field;

use crate::error::{Result, WeirError};
use crate::source::FileFormat;

type Loader = Arc<dyn Fn() -> Result<Vec<RecordBatch>> + Send + Sync>;

/// A batch (non-streaming) table to join a stream with.
#[derive(Clone)]
pub struct StaticTable {
    schema: SchemaRef,
    loader: Loader,
    refresh: Option<Duration>,
    description: String,
}

impl std::fmt::Debug for StaticTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticTable")
            .field("description", &self.description)
            .field("refresh", &self.refresh)
            .finish()
    }
}

fn files_in(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out: Vec<PathBuf> = fs::read_dir(path)
        .map_err(|e| WeirError::io(path, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.') || n.starts_with('_'))
        })
        .collect();
    out.sort();
    Ok(out)
}

impl StaticTable {
    /// A table of these batches.
    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> StaticTable {
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        StaticTable {
            schema,
            loader: Arc::new(move || Ok(batches.clone())),
            refresh: None,
            description: format!("in-memory table ({n} rows)"),
        }
    }

    /// The files of `format` at `path` (a file or a directory), read with
    /// `fields` (for Parquet the file schema is cast to them by name).
    pub fn files(path: impl Into<PathBuf>, format: FileFormat, fields: Vec<Field>) -> StaticTable {
        let path: PathBuf = path.into();
        let schema = crate::row::arrow_schema(&fields);
        let description = format!("{} files at {}", format.extension(), path.display());
        let s2 = schema.clone();
        let loader: Loader = Arc::new(move || {
            let mut out = Vec::new();
            for f in files_in(&path)? {
                let file = fs::File::open(&f).map_err(|e| WeirError::io(&f, e))?;
                let bad = |e: String| WeirError::Source {
                    source_name: format!("static table {}", f.display()),
                    message: e,
                };
                match format {
                    FileFormat::Parquet => {
                        let r =
                            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                                file,
                            )
                            .and_then(|b| b.build())
                            .map_err(|e| bad(e.to_string()))?;
                        for b in r {
                            let b = b?;
                            let cols = s2
                                .fields()
                                .iter()
                                .map(|fl| match b.schema().index_of(fl.name()) {
                                    Ok(i) => Ok(arrow::compute::cast(b.column(i), fl.data_type())?),
                                    Err(_) => Err(bad(format!("no column `{}`", fl.name()))),
                                })
                                .collect::<Result<Vec<_>>>()?;
                            out.push(RecordBatch::try_new(s2.clone(), cols)?);
                        }
                    }
                    FileFormat::Json => {
                        for b in arrow::json::ReaderBuilder::new(s2.clone())
                            .build(std::io::BufReader::new(file))?
                        {
                            out.push(b?);
                        }
                    }
                    FileFormat::Csv => {
                        for b in arrow::csv::ReaderBuilder::new(s2.clone())
                            .with_header(true)
                            .build(file)?
                        {
                            out.push(b?);
                        }
                    }
                }
            }
            Ok(out)
        });
        StaticTable {
            schema,
            loader,
            refresh: None,
            description,
        }
    }

    /// Re-read the table at most this often (checked at each micro-batch).
    pub fn refresh_every(mut self, every: Duration) -> Self {
        self.refresh = Some(every);
        self
    }

    /// The table's schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The refresh interval.
    pub fn refresh(&self) -> Option<Duration> {
        self.refresh
    }

    /// Reads the table now.
    pub fn load(&self) -> Result<Vec<RecordBatch>> {
        (self.loader)()
    }

    /// What the table is.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Checks that the table has exactly these columns (names and types, in
    /// order), as a query declared with `stream_query!` expects.
    pub fn expect_fields(&self, fields: &[Field]) -> Result<()> {
        let have = crate::row::plan_fields(&self.schema);
        if have == fields {
            return Ok(());
        }
        let show = |f: &[Field]| {
            f.iter()
                .map(|f| format!("{}: {}", f.name, f.dtype))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(WeirError::Config(format!(
            "the static table ({}) has columns ({}), but the query declares ({})",
            self.description,
            show(&have),
            show(fields)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::DataType;

    #[test]
    fn a_table_with_other_columns_is_refused() {
        let declared = vec![
            Field::new("key", DataType::String),
            Field::new("tier", DataType::Int32),
        ];
        let t = StaticTable::from_batches(crate::row::arrow_schema(&declared), vec![]);
        t.expect_fields(&declared).unwrap();
        let other = vec![
            Field::new("key", DataType::String),
            Field::new("tier", DataType::Int64),
        ];
        let e = t.expect_fields(&other).unwrap_err().to_string();
        assert!(
            e.contains("has columns (key: string, tier: int32), but the query declares (key: string, tier: int64)"),
            "{e}"
        );
    }
}
