//! The file sink (Spark's `parquet`/`json`/`csv` stream formats): each batch's
//! rows as new files under `path` (in `col=value/` directories with
//! `partition_by`), then the batch's file list appended to the manifest
//! `path/_spark_metadata/<batch>`. A batch already in the manifest is skipped
//! on re-run, so a replay never duplicates files for readers of the manifest.
//! Append mode only, as in Spark.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_plan::OutputMode;

use super::{FileFormat, Sink, SinkContext};
use crate::checkpoint::write_atomic;
use crate::error::{Result, WeirError};

/// Writes batches as files with a manifest.
pub struct FileSink {
    path: PathBuf,
    format: FileFormat,
    partition_by: Vec<String>,
}

impl FileSink {
    /// Files of `format` under `path`.
    pub fn new(path: impl Into<PathBuf>, format: FileFormat) -> FileSink {
        FileSink {
            path: path.into(),
            format,
            partition_by: Vec::new(),
        }
    }

    /// Partition output directories by these columns (Spark's `partitionBy`).
    pub fn partition_by(mut self, cols: Vec<String>) -> Self {
        self.partition_by = cols;
        self
    }

    fn manifest(&self, batch_id: i64) -> PathBuf {
        self.path.join("_spark_metadata").join(batch_id.to_string())
    }

    fn err(&self, message: String) -> WeirError {
        WeirError::Sink {
            sink: format!("FileSink[{}]", self.path.display()),
            message,
        }
    }

    fn write_file(&self, path: &Path, batches: &[RecordBatch], schema: SchemaRef) -> Result<()> {
        if let Some(d) = path.parent() {
            fs::create_dir_all(d).map_err(|e| WeirError::io(d, e))?;
        }
        let tmp = path.with_extension("inprogress");
        let f = fs::File::create(&tmp).map_err(|e| WeirError::io(&tmp, e))?;
        match self.format {
            FileFormat::Parquet => {
                let mut w = parquet::arrow::ArrowWriter::try_new(f, schema, None)
                    .map_err(|e| self.err(e.to_string()))?;
                for b in batches {
                    w.write(b).map_err(|e| self.err(e.to_string()))?;
                }
                w.close().map_err(|e| self.err(e.to_string()))?;
            }
            FileFormat::Json => {
                let mut w = arrow::json::LineDelimitedWriter::new(f);
                for b in batches {
                    w.write(b)?;
                }
                w.finish()?;
            }
            FileFormat::Csv => {
                let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(f);
                for b in batches {
                    w.write(b)?;
                }
            }
        }
        fs::rename(&tmp, path).map_err(|e| WeirError::io(path, e))?;
        Ok(())
    }

    /// Splits rows by partition values: `("k=v/...", rows without the partition columns)`.
    fn partitions(&self, batch: &RecordBatch) -> Result<Vec<(String, RecordBatch)>> {
        if self.partition_by.is_empty() {
            return Ok(vec![(String::new(), batch.clone())]);
        }
        let schema = batch.schema();
        let idx: Vec<usize> = self
            .partition_by
            .iter()
            .map(|c| {
                schema
                    .index_of(c)
                    .map_err(|_| self.err(format!("partition column `{c}` is not in the output")))
            })
            .collect::<Result<_>>()?;
        let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for r in 0..batch.num_rows() {
            let dir: Vec<String> = idx
                .iter()
                .zip(&self.partition_by)
                .map(|(i, name)| {
                    let c = batch.column(*i);
                    let v = if c.is_null(r) {
                        "__HIVE_DEFAULT_PARTITION__".to_string()
                    } else {
                        crate::sink::console::cell(c.as_ref(), r)
                    };
                    format!("{name}={}", v.replace(['/', '\\'], "%2F"))
                })
                .collect();
            groups.entry(dir.join("/")).or_default().push(r as u32);
        }
        let keep: Vec<usize> = (0..schema.fields().len())
            .filter(|i| !idx.contains(i))
            .collect();
        let projected = batch.project(&keep)?;
        groups
            .into_iter()
            .map(|(d, rows)| Ok((d, take_record_batch(&projected, &UInt32Array::from(rows))?)))
            .collect()
    }
}

impl Sink for FileSink {
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::File
    }

    fn description(&self) -> String {
        format!("FileSink[{}]", self.path.display())
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        if ctx.output_mode != OutputMode::Append {
            return Err(self.err(format!(
                "Data source {} does not support {} output mode; the file sink writes append-only",
                self.format.extension(),
                ctx.output_mode.spark_name()
            )));
        }
        for c in &self.partition_by {
            if ctx.schema.index_of(c).is_err() {
                return Err(self.err(format!("partition column `{c}` is not in the output")));
            }
        }
        fs::create_dir_all(self.path.join("_spark_metadata"))
            .map_err(|e| WeirError::io(&self.path, e))?;
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        if self.manifest(batch_id).exists() {
            return Ok(()); // committed before a restart: never write twice
        }
        let mut by_dir: BTreeMap<String, Vec<RecordBatch>> = BTreeMap::new();
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            for (d, rows) in self.partitions(b)? {
                by_dir.entry(d).or_default().push(rows);
            }
        }
        let mut files = Vec::new();
        for (dir, rows) in by_dir {
            let name = format!(
                "part-{batch_id:05}-{}.{}",
                uuid::Uuid::new_v4(),
                self.format.extension()
            );
            let rel = if dir.is_empty() {
                PathBuf::from(&name)
            } else {
                Path::new(&dir).join(&name)
            };
            let schema: SchemaRef = rows[0].schema();
            let schema = if schema.fields().is_empty() {
                std::sync::Arc::new(Schema::empty())
            } else {
                schema
            };
            self.write_file(&self.path.join(&rel), &rows, schema)?;
            files.push(serde_json::json!({"path": rel.to_string_lossy(), "action": "add"}));
        }
        let text = std::iter::once("v1".to_string())
            .chain(files.iter().map(|f| f.to_string()))
            .collect::<Vec<_>>()
            .join("\n");
        write_atomic(&self.manifest(batch_id), text.as_bytes(), true)
    }
}

/// The files a file sink committed, read from its manifest (what a reader should read).
pub fn committed_files(path: &Path) -> Result<Vec<PathBuf>> {
    let dir = path.join("_spark_metadata");
    let mut ids: Vec<i64> = match fs::read_dir(&dir) {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .collect(),
        Err(_) => return Ok(vec![]),
    };
    ids.sort();
    let mut out = Vec::new();
    for id in ids {
        let p = dir.join(id.to_string());
        let t = fs::read_to_string(&p).map_err(|e| WeirError::io(&p, e))?;
        for line in t.lines().skip(1) {
            let v: serde_json::Value = serde_json::from_str(line)?;
            if let Some(f) = v.get("path").and_then(|p| p.as_str()) {
                out.push(path.join(f));
            }
        }
    }
    Ok(out)
}
