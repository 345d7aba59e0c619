//! The file source (Spark's `json`/`csv`/`parquet` stream formats): new files
//! in a directory become micro-batches. Files taken by each batch are logged
//! under the checkpoint (`sources/<i>/<n>`), so a file is read once, and a
//! re-run batch reads the same files. Malformed JSON/CSV records become rows
//! of nulls (Spark's PERMISSIVE mode; the raw text goes to `_corrupt_record`
//! when the schema has that column), are dropped (DROPMALFORMED), or fail the
//! query with the file and line (FAILFAST).

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, StringArray};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_plan::Field;

use super::{Offset, Source, SourceContext};
use crate::checkpoint::write_atomic;
use crate::error::{Result, WeirError};

/// File formats for the file source and sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON lines.
    Json,
    /// Comma-separated values.
    Csv,
    /// Apache Parquet.
    Parquet,
}

impl FileFormat {
    /// The usual file extension.
    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Json => "json",
            FileFormat::Csv => "csv",
            FileFormat::Parquet => "parquet",
        }
    }
}

/// How malformed records are handled (Spark's `mode` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseMode {
    /// A row of nulls (and the raw record in `_corrupt_record`, if declared).
    Permissive,
    /// Skip the record.
    DropMalformed,
    /// Fail the query, naming file and line.
    FailFast,
}

/// A directory of files as a stream.
pub struct FileSource {
    dir: PathBuf,
    format: FileFormat,
    schema: SchemaRef,
    max_files: Option<usize>,
    latest_first: bool,
    header: bool,
    mode: ParseMode,
    log_dir: Option<PathBuf>,
    sync: bool,
    /// Files of each logged batch, by log offset.
    log: Vec<Vec<PathBuf>>,
    seen: HashSet<PathBuf>,
    available_now_cap: Option<usize>,
    malformed: u64,
}

impl FileSource {
    /// Files of `format` in `dir`, read with this schema.
    pub fn new(dir: impl Into<PathBuf>, format: FileFormat, fields: Vec<Field>) -> FileSource {
        FileSource {
            dir: dir.into(),
            format,
            schema: crate::row::arrow_schema(&fields),
            max_files: None,
            latest_first: false,
            header: false,
            mode: ParseMode::Permissive,
            log_dir: None,
            sync: true,
            log: Vec::new(),
            seen: HashSet::new(),
            available_now_cap: None,
            malformed: 0,
        }
    }

    /// At most this many new files per micro-batch (Spark's `maxFilesPerTrigger`).
    pub fn max_files_per_trigger(mut self, n: usize) -> Self {
        self.max_files = Some(n.max(1));
        self
    }

    /// Take the newest files first (Spark's `latestFirst`).
    pub fn latest_first(mut self, yes: bool) -> Self {
        self.latest_first = yes;
        self
    }

    /// CSV files have a header line (Spark's `header`, default false).
    pub fn header(mut self, yes: bool) -> Self {
        self.header = yes;
        self
    }

    /// How malformed records are handled.
    pub fn mode(mut self, mode: ParseMode) -> Self {
        self.mode = mode;
        self
    }

    /// Malformed records seen so far.
    pub fn malformed_records(&self) -> u64 {
        self.malformed
    }

    fn list_new(&self) -> Result<Vec<PathBuf>> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(WeirError::io(&self.dir, e)),
        };
        let mut files = Vec::new();
        for e in rd {
            let e = e.map_err(|e| WeirError::io(&self.dir, e))?;
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with('.') || name.starts_with('_') {
                continue;
            }
            let md = e.metadata().map_err(|er| WeirError::io(e.path(), er))?;
            if !md.is_file() || self.seen.contains(&e.path()) {
                continue;
            }
            files.push((md.modified().ok(), e.path()));
        }
        files.sort();
        if self.latest_first {
            files.reverse();
        }
        Ok(files.into_iter().map(|(_, p)| p).collect())
    }

    fn read_file(&mut self, path: &Path) -> Result<Vec<RecordBatch>> {
        let open = || fs::File::open(path).map_err(|e| WeirError::io(path, e));
        match self.format {
            FileFormat::Parquet => {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(open()?)
                        .map_err(|e| self.err(path, e.to_string()))?
                        .build()
                        .map_err(|e| self.err(path, e.to_string()))?;
                let mut out = Vec::new();
                for b in reader {
                    let b = b?;
                    out.push(self.conform(&b, path)?);
                }
                Ok(out)
            }
            FileFormat::Json | FileFormat::Csv => self.read_text(path, BufReader::new(open()?)),
        }
    }

    fn err(&self, path: &Path, message: String) -> WeirError {
        WeirError::Source {
            source_name: format!("FileStreamSource[{}]", self.dir.display()),
            message: format!("{}: {message}", path.display()),
        }
    }

    /// Projects/casts a batch to the source schema by column name (missing columns are null).
    fn conform(&self, b: &RecordBatch, path: &Path) -> Result<RecordBatch> {
        let cols = self
            .schema
            .fields()
            .iter()
            .map(|f| match b.schema().index_of(f.name()) {
                Ok(i) => arrow::compute::cast(b.column(i), f.data_type())
                    .map_err(|e| self.err(path, format!("column `{}`: {e}", f.name()))),
                Err(_) => Ok(new_null_array(f.data_type(), b.num_rows())),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
        )?)
    }

    fn read_text(&mut self, path: &Path, reader: impl BufRead) -> Result<Vec<RecordBatch>> {
        let corrupt_idx = self.schema.index_of("_corrupt_record").ok();
        let parse_schema: SchemaRef = match corrupt_idx {
            Some(i) => {
                let mut fields: Vec<_> = self.schema.fields().iter().cloned().collect();
                fields.remove(i);
                Arc::new(Schema::new(fields))
            }
            None => self.schema.clone(),
        };
        let mut rows: Vec<Option<RecordBatch>> = Vec::new();
        let mut raw: Vec<Option<String>> = Vec::new();
        for (ln, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| WeirError::io(path, e))?;
            if ln == 0 && self.header && self.format == FileFormat::Csv {
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            let parsed = match self.format {
                FileFormat::Json => parse_json_line(&parse_schema, &line),
                _ => parse_csv_line(&parse_schema, &line),
            };
            match parsed {
                Ok(b) => {
                    rows.push(Some(b));
                    raw.push(None);
                }
                Err(e) => {
                    self.malformed += 1;
                    match self.mode {
                        ParseMode::FailFast => {
                            return Err(self.err(path, format!("malformed record at line {}: {e} (mode FAILFAST; use PERMISSIVE to keep going)", ln + 1)))
                        }
                        ParseMode::DropMalformed => {
                            tracing::warn!(file = %path.display(), line = ln + 1, "dropping malformed record: {e}");
                        }
                        ParseMode::Permissive => {
                            tracing::warn!(file = %path.display(), line = ln + 1, "malformed record kept as nulls: {e}");
                            rows.push(None);
                            raw.push(Some(line));
                        }
                    }
                }
            }
        }
        let n = rows.len();
        let mut cols: Vec<ArrayRef> = Vec::new();
        for (fi, f) in parse_schema.fields().iter().enumerate() {
            let parts: Vec<ArrayRef> = rows
                .iter()
                .map(|r| match r {
                    Some(b) => b.column(fi).clone(),
                    None => new_null_array(f.data_type(), 1),
                })
                .collect();
            let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
            cols.push(if refs.is_empty() {
                new_null_array(f.data_type(), 0)
            } else {
                arrow::compute::concat(&refs)?
            });
        }
        if let Some(i) = corrupt_idx {
            cols.insert(i, Arc::new(StringArray::from(raw)));
        }
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        Ok(vec![batch])
    }

    fn write_log(&self, n: usize, files: &[PathBuf]) -> Result<()> {
        if let Some(dir) = &self.log_dir {
            let list: Vec<String> = files
                .iter()
                .map(|p| p.to_string_lossy().to_string())
                .collect();
            write_atomic(
                &dir.join(n.to_string()),
                format!("v1\n{}", serde_json::to_string(&list)?).as_bytes(),
                self.sync,
            )?;
        }
        Ok(())
    }
}

fn parse_json_line(schema: &SchemaRef, line: &str) -> Result<RecordBatch> {
    let v: serde_json::Value =
        serde_json::from_str(line).map_err(|e| WeirError::Row(e.to_string()))?;
    if !v.is_object() {
        return Err(WeirError::Row("a JSON record must be an object".into()));
    }
    let mut dec = arrow::json::ReaderBuilder::new(schema.clone())
        .with_strict_mode(false)
        .build_decoder()?;
    dec.serialize(&[v])?;
    dec.flush()?
        .ok_or_else(|| WeirError::Row("empty record".into()))
}

fn parse_csv_line(schema: &SchemaRef, line: &str) -> Result<RecordBatch> {
    let mut r = arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(false)
        .build(std::io::Cursor::new(line.as_bytes().to_vec()))?;
    match r.next() {
        Some(b) => Ok(b?),
        None => Err(WeirError::Row("empty record".into())),
    }
}

impl Source for FileSource {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn description(&self) -> String {
        format!("FileStreamSource[{}]", self.dir.display())
    }

    fn open(&mut self, ctx: &SourceContext) -> Result<()> {
        self.log_dir = Some(ctx.metadata_dir.clone());
        self.sync = ctx.sync;
        let mut n = 0;
        loop {
            let p = ctx.metadata_dir.join(n.to_string());
            let Ok(t) = fs::read_to_string(&p) else { break };
            let list: Vec<String> = serde_json::from_str(t.lines().nth(1).unwrap_or("[]"))
                .map_err(|e| WeirError::checkpoint(&p, format!("damaged file-source log ({e}); restore it or start with a new checkpoint location")))?;
            let files: Vec<PathBuf> = list.into_iter().map(PathBuf::from).collect();
            self.seen.extend(files.iter().cloned());
            self.log.push(files);
            n += 1;
        }
        Ok(())
    }

    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>> {
        let next = start.and_then(|o| o.as_i64()).map(|s| s + 1).unwrap_or(0) as usize;
        if next < self.log.len() {
            // Logged before a crash but not yet processed: same files, same batch.
            return Ok(Some(Offset::from(next as i64)));
        }
        if let Some(cap) = self.available_now_cap {
            if self.log.len() >= cap {
                return Ok(self
                    .log
                    .len()
                    .checked_sub(1)
                    .map(|n| Offset::from(n as i64)));
            }
        }
        let mut files = self.list_new()?;
        if let Some(m) = self.max_files {
            files.truncate(m);
        }
        if !files.is_empty() {
            let n = self.log.len();
            self.write_log(n, &files)?;
            self.seen.extend(files.iter().cloned());
            self.log.push(files);
        }
        Ok(self
            .log
            .len()
            .checked_sub(1)
            .map(|n| Offset::from(n as i64)))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let from = start.and_then(|o| o.as_i64()).map(|s| s + 1).unwrap_or(0) as usize;
        let to = end.as_i64().unwrap_or(-1);
        let mut out = Vec::new();
        for n in from..=(to.max(-1) as usize).min(self.log.len().saturating_sub(1)) {
            if to < 0 {
                break;
            }
            for f in self.log[n].clone() {
                out.extend(self.read_file(&f)?);
            }
        }
        Ok(out)
    }

    fn prepare_for_available_now(&mut self) -> Result<()> {
        // Log everything present now (respecting maxFilesPerTrigger per entry), then stop growing.
        let mut files = self.list_new()?;
        let per = self.max_files.unwrap_or(usize::MAX);
        while !files.is_empty() {
            let rest = files.split_off(per.min(files.len()));
            let n = self.log.len();
            self.write_log(n, &files)?;
            self.seen.extend(files.iter().cloned());
            self.log.push(files);
            files = rest;
        }
        self.available_now_cap = Some(self.log.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::DataType;

    fn fields() -> Vec<Field> {
        vec![
            Field::new("ts", DataType::Timestamp),
            Field::new("key", DataType::String),
            Field::new("_corrupt_record", DataType::String),
        ]
    }

    #[test]
    fn reads_new_files_once_and_keeps_malformed_records() {
        let dir = tempfile::tempdir().unwrap();
        let chk = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("a.json"),
            "{\"ts\":\"2024-01-01T12:00:00Z\",\"key\":\"a\"}\nnot json\n",
        )
        .unwrap();
        let mut s =
            FileSource::new(dir.path(), FileFormat::Json, fields()).max_files_per_trigger(1);
        s.open(&SourceContext {
            metadata_dir: chk.path().to_path_buf(),
            sync: false,
        })
        .unwrap();
        let end = s.latest_offset(None).unwrap().unwrap();
        let b = s.get_batch(None, &end).unwrap();
        assert_eq!(b[0].num_rows(), 2);
        assert!(b[0].column(2).is_null(0));
        assert_eq!(
            b[0].column(2)
                .as_any()
                .downcast_ref::<StringArray>()
                .unwrap()
                .value(1),
            "not json"
        );
        assert_eq!(s.latest_offset(Some(&end)).unwrap(), Some(end.clone()));
        // A restarted source remembers the file.
        let mut s2 = FileSource::new(dir.path(), FileFormat::Json, fields());
        s2.open(&SourceContext {
            metadata_dir: chk.path().to_path_buf(),
            sync: false,
        })
        .unwrap();
        assert_eq!(s2.latest_offset(Some(&end)).unwrap(), Some(end));
    }
}
