//! The file source (Spark's `json`/`csv`/`parquet` stream formats): new files
//! in a directory become micro-batches. Files taken by each batch are logged
//! under the checkpoint (`sources/<i>/<n>`), so a file is read once, and a
//! re-run batch reads the same files. Malformed JSON/CSV records become rows
//! of nulls (Spark's PERMISSIVE mode; the raw text goes to `_corrupt_record`
//! when the schema has that column), are dropped (DROPMALFORMED), or fail the
//! query with the file and line (FAILFAST).
//!
//! A directory a file sink writes (it has a `_spark_metadata` manifest) is
//! read through the manifest, as Spark's `FileStreamSource` does
//! (`MetadataLogFileIndex`): only files of committed batches, never the
//! orphans of a killed batch nor a file still being written. Those files may
//! sit in `col=value` partition directories: a schema column named like a
//! partition column takes the directory's (unescaped) value.
//!
//! The seen-files log is compacted as Spark's `FileStreamSourceLog` is: every
//! `log_compact_interval` entries (default 10, Spark's
//! `spark.sql.streaming.fileSource.log.compactInterval`) one `<n>.compact`
//! file replaces the entries before it, so the log stays a bounded number of
//! files; a restart still skips every file ever logged.

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
use crate::checkpoint::{parse_batch_id, write_atomic};
use crate::error::{Result, WeirError};
use crate::sink::file::{committed_files, parse_partition_dir};

/// Spark's `spark.sql.streaming.fileSource.log.compactInterval` default.
pub const DEFAULT_LOG_COMPACT_INTERVAL: usize = 10;

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
    compact_interval: usize,
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
            compact_interval: DEFAULT_LOG_COMPACT_INTERVAL,
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

    /// Compact the seen-files log every `n` entries (Spark's
    /// `spark.sql.streaming.fileSource.log.compactInterval`, default 10).
    pub fn log_compact_interval(mut self, n: usize) -> Self {
        self.compact_interval = n.max(1);
        self
    }

    /// Malformed records seen so far.
    pub fn malformed_records(&self) -> u64 {
        self.malformed
    }

    fn list_new(&self) -> Result<Vec<PathBuf>> {
        if self.dir.join("_spark_metadata").is_dir() {
            // A file sink's output: only what its manifest committed, in
            // commit order.
            let mut files: Vec<PathBuf> = committed_files(&self.dir)?
                .into_iter()
                .filter(|p| !self.seen.contains(p))
                .collect();
            let mut dedup = HashSet::new();
            files.retain(|p| dedup.insert(p.clone()));
            if self.latest_first {
                files.reverse();
            }
            return Ok(files);
        }
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

    /// The partition values `path`'s `col=value` directories (below the
    /// source directory) give the schema's columns: `(column index, value)`.
    /// A directory name cut to fit gives none (its files hold the column).
    fn partition_values(&self, path: &Path) -> Vec<(usize, Option<String>)> {
        let Ok(rel) = path.strip_prefix(&self.dir) else {
            return vec![];
        };
        let Some(parent) = rel.parent() else {
            return vec![];
        };
        let mut out: Vec<(usize, Option<String>)> = Vec::new();
        for c in parent.components() {
            let std::path::Component::Normal(name) = c else {
                continue;
            };
            let Some((col, Ok(value))) = parse_partition_dir(&name.to_string_lossy()) else {
                continue;
            };
            if let Ok(i) = self.schema.index_of(&col) {
                out.retain(|(j, _)| *j != i);
                out.push((i, value));
            }
        }
        out
    }

    /// `value` as a column of `n` rows of the schema's column `i` (a value
    /// the type cannot hold becomes null).
    fn constant_column(&self, i: usize, value: Option<&str>, n: usize) -> Result<ArrayRef> {
        let strings: ArrayRef = Arc::new(StringArray::from(vec![value; n]));
        Ok(arrow::compute::cast(
            &strings,
            self.schema.field(i).data_type(),
        )?)
    }

    fn read_file(&mut self, path: &Path) -> Result<Vec<RecordBatch>> {
        let open = || fs::File::open(path).map_err(|e| WeirError::io(path, e));
        let parts = self.partition_values(path);
        match self.format {
            FileFormat::Parquet => {
                let reader =
                    parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(open()?)
                        .map_err(|e| self.err(path, e.to_string()))?
                        .build()
                        .map_err(|e| self.err(path, e.to_string()))?;
                let mut out = Vec::new();
                for b in reader {
                    let b = self.conform(&b?, path)?;
                    if parts.is_empty() {
                        out.push(b);
                        continue;
                    }
                    let mut cols = b.columns().to_vec();
                    for (i, v) in &parts {
                        cols[*i] = self.constant_column(*i, v.as_deref(), b.num_rows())?;
                    }
                    out.push(RecordBatch::try_new_with_options(
                        self.schema.clone(),
                        cols,
                        &arrow::record_batch::RecordBatchOptions::new()
                            .with_row_count(Some(b.num_rows())),
                    )?);
                }
                Ok(out)
            }
            FileFormat::Json | FileFormat::Csv => {
                self.read_text(path, BufReader::new(open()?), &parts)
            }
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

    /// Reads JSON/CSV lines; the columns in `parts` come from the path, not
    /// the file (a CSV file of a partitioned sink has no such column).
    fn read_text(
        &mut self,
        path: &Path,
        reader: impl BufRead,
        parts: &[(usize, Option<String>)],
    ) -> Result<Vec<RecordBatch>> {
        let corrupt_idx = self.schema.index_of("_corrupt_record").ok();
        let from_file: Vec<usize> = (0..self.schema.fields().len())
            .filter(|i| Some(*i) != corrupt_idx && !parts.iter().any(|(j, _)| j == i))
            .collect();
        let parse_schema: SchemaRef = if from_file.len() == self.schema.fields().len() {
            self.schema.clone()
        } else {
            Arc::new(Schema::new(
                from_file
                    .iter()
                    .map(|i| self.schema.field(*i).clone())
                    .collect::<Vec<_>>(),
            ))
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
        let mut parsed = cols.into_iter();
        let mut raw = Some(raw);
        let cols = (0..self.schema.fields().len())
            .map(|i| {
                if Some(i) == corrupt_idx {
                    let raw = raw.take().unwrap_or_default();
                    return Ok(Arc::new(StringArray::from(raw)) as ArrayRef);
                }
                if let Some((_, v)) = parts.iter().find(|(j, _)| *j == i) {
                    return self.constant_column(i, v.as_deref(), n);
                }
                parsed
                    .next()
                    .ok_or_else(|| self.err(path, "internal: column count mismatch".into()))
            })
            .collect::<Result<Vec<_>>>()?;
        let batch = RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        Ok(vec![batch])
    }

    /// Logs entry `n` (the files of one offset) durably, before the offset
    /// is used. Every `compact_interval`-th entry is written as `<n>.compact`
    /// with every entry so far, and the files it replaces are removed.
    fn write_log(&self, n: usize, files: &[PathBuf]) -> Result<()> {
        let Some(dir) = &self.log_dir else {
            return Ok(());
        };
        let names = |files: &[PathBuf]| -> Vec<String> {
            files
                .iter()
                .map(|p| p.to_string_lossy().to_string())
                .collect()
        };
        if (n + 1) % self.compact_interval == 0 {
            let mut text = String::from("v1");
            let entries = self.log[..n.min(self.log.len())]
                .iter()
                .map(Vec::as_slice)
                .chain(std::iter::once(files));
            for (id, f) in entries.enumerate() {
                text.push('\n');
                text.push_str(&serde_json::to_string(
                    &serde_json::json!({"id": id, "files": names(f)}),
                )?);
            }
            write_atomic(
                &dir.join(format!("{n}.compact")),
                text.as_bytes(),
                self.sync,
            )?;
            remove_compacted(dir, n)?;
        } else {
            write_atomic(
                &dir.join(n.to_string()),
                format!("v1\n{}", serde_json::to_string(&names(files))?).as_bytes(),
                self.sync,
            )?;
        }
        crate::failpoint::failpoint_here("after_source_log");
        Ok(())
    }
}

/// What a log directory holds: the newest `<n>.compact` and the plain
/// entries' ids.
fn list_log(dir: &Path) -> Result<(Option<usize>, Vec<usize>)> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, vec![])),
        Err(e) => return Err(WeirError::io(dir, e)),
    };
    let mut compact = None;
    let mut plain = Vec::new();
    for e in rd {
        let e = e.map_err(|e| WeirError::io(dir, e))?;
        let name = e.file_name().to_string_lossy().to_string();
        let id = |s: &str| parse_batch_id(s).and_then(|n| usize::try_from(n).ok());
        match name.strip_suffix(".compact") {
            Some(n) => compact = compact.max(id(n)),
            None => plain.extend(id(&name)),
        }
    }
    plain.sort_unstable();
    Ok((compact, plain))
}

/// Removes the log files `<upto>.compact` replaces: plain entries up to it
/// and older compact files (also what a crash between the two left).
fn remove_compacted(dir: &Path, upto: usize) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(|e| WeirError::io(dir, e))?;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let (n, compact) = match name.strip_suffix(".compact") {
            Some(n) => (n, true),
            None => (name.as_str(), false),
        };
        let Some(n) = parse_batch_id(n).and_then(|n| usize::try_from(n).ok()) else {
            continue;
        };
        if (compact && n < upto) || (!compact && n <= upto) {
            match fs::remove_file(e.path()) {
                Ok(()) => {}
                Err(er) if er.kind() == std::io::ErrorKind::NotFound => {}
                Err(er) => return Err(WeirError::io(e.path(), er)),
            }
        }
    }
    Ok(())
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
        let dir = ctx.metadata_dir.clone();
        self.log_dir = Some(dir.clone());
        self.sync = ctx.sync;
        let damaged = |p: &Path, e: String| {
            WeirError::checkpoint(p, format!("damaged file-source log ({e}); restore it or start with a new checkpoint location"))
        };
        let (compact, _) = list_log(&dir)?;
        let mut n = 0;
        if let Some(c) = compact {
            let p = dir.join(format!("{c}.compact"));
            let t = fs::read_to_string(&p).map_err(|e| WeirError::io(&p, e))?;
            for line in t.lines().skip(1).filter(|l| !l.trim().is_empty()) {
                #[derive(serde::Deserialize)]
                struct Entry {
                    id: usize,
                    files: Vec<String>,
                }
                let e: Entry =
                    serde_json::from_str(line).map_err(|e| damaged(&p, e.to_string()))?;
                if e.id != self.log.len() {
                    return Err(damaged(
                        &p,
                        format!("entry {} where {} was expected", e.id, self.log.len()),
                    ));
                }
                let files: Vec<PathBuf> = e.files.into_iter().map(PathBuf::from).collect();
                self.seen.extend(files.iter().cloned());
                self.log.push(files);
            }
            if self.log.len() != c + 1 {
                return Err(damaged(
                    &p,
                    format!("{} entries where {} were expected", self.log.len(), c + 1),
                ));
            }
            // A crash after the compact file, before the removals.
            remove_compacted(&dir, c)?;
            n = c + 1;
        }
        loop {
            let p = dir.join(n.to_string());
            let t = match fs::read_to_string(&p) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(WeirError::io(&p, e)),
            };
            let list: Vec<String> = serde_json::from_str(t.lines().nth(1).unwrap_or("[]"))
                .map_err(|e| damaged(&p, e.to_string()))?;
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

    fn open(dir: &Path, chk: &Path) -> FileSource {
        let mut s = FileSource::new(dir, FileFormat::Json, fields())
            .max_files_per_trigger(1)
            .log_compact_interval(4);
        s.open(&SourceContext {
            metadata_dir: chk.to_path_buf(),
            sync: false,
        })
        .unwrap();
        s
    }

    fn keys(batches: &[RecordBatch]) -> Vec<String> {
        let mut out = Vec::new();
        for b in batches {
            let k = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            out.extend((0..b.num_rows()).map(|i| k.value(i).to_string()));
        }
        out
    }

    #[test]
    fn the_seen_files_log_is_compacted_and_still_skips_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let chk = tempfile::tempdir().unwrap();
        let add = |i: usize| {
            fs::write(
                dir.path().join(format!("f{i:03}.json")),
                format!("{{\"ts\":\"2024-01-01T12:00:00Z\",\"key\":\"k{i}\"}}"),
            )
            .unwrap()
        };
        let mut s = open(dir.path(), chk.path());
        let mut end = None;
        for i in 0..23 {
            add(i);
            let next = s.latest_offset(end.as_ref()).unwrap().unwrap();
            assert_eq!(next, Offset::from(i as i64));
            assert_eq!(
                keys(&s.get_batch(end.as_ref(), &next).unwrap()),
                [format!("k{i}")]
            );
            end = Some(next);
            let logged = fs::read_dir(chk.path()).unwrap().count();
            assert!(logged <= 4, "{logged} log files after {} entries", i + 1);
        }
        // Entries 0..=19 are in 19.compact, 20..=22 are plain files.
        let mut names: Vec<String> = fs::read_dir(chk.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["19.compact", "20", "21", "22"]);
        // A restart skips every file ever logged, and re-reads a logged entry.
        let mut s2 = open(dir.path(), chk.path());
        assert_eq!(s2.latest_offset(end.as_ref()).unwrap(), end);
        let o5 = Offset::from(5);
        assert_eq!(
            keys(&s2.get_batch(Some(&Offset::from(4)), &o5).unwrap()),
            ["k5"]
        );
        add(23);
        let next = s2.latest_offset(end.as_ref()).unwrap().unwrap();
        assert_eq!(next, Offset::from(23));
        assert_eq!(keys(&s2.get_batch(end.as_ref(), &next).unwrap()), ["k23"]);
        // A crash between a compact file and the removals it allows.
        fs::write(chk.path().join("3"), "v1\n[\"stale\"]").unwrap();
        let mut s3 = open(dir.path(), chk.path());
        assert!(!chk.path().join("3").exists());
        assert_eq!(s3.latest_offset(Some(&next)).unwrap(), Some(next));
    }

    #[test]
    fn a_sink_directory_is_read_through_its_manifest_with_partition_values() {
        let dir = tempfile::tempdir().unwrap();
        let chk = tempfile::tempdir().unwrap();
        let row = |k: &str| format!("{{\"ts\":\"2024-01-01T12:00:00Z\",\"key\":\"{k}\"}}");
        let part = dir.path().join("key=a%2Fb%25");
        fs::create_dir_all(&part).unwrap();
        fs::create_dir_all(dir.path().join("_spark_metadata")).unwrap();
        // A committed file in a partition directory (without the column), an
        // orphan of a killed batch and a file still being written.
        fs::write(
            part.join("part-0.json"),
            "{\"ts\":\"2024-01-01T12:00:00Z\"}",
        )
        .unwrap();
        fs::write(dir.path().join("part-1.json"), row("orphan")).unwrap();
        fs::write(dir.path().join(".part-2.json.inprogress"), row("writing")).unwrap();
        fs::write(
            dir.path().join("_spark_metadata/0"),
            "v1\n{\"path\":\"key=a%2Fb%25/part-0.json\",\"action\":\"add\"}",
        )
        .unwrap();
        let mut s = open(dir.path(), chk.path());
        let end = s.latest_offset(None).unwrap().unwrap();
        assert_eq!(keys(&s.get_batch(None, &end).unwrap()), ["a/b%"]);
        assert_eq!(s.latest_offset(Some(&end)).unwrap(), Some(end.clone()));
        // The orphan is committed by a later batch: now it is read.
        fs::write(
            dir.path().join("_spark_metadata/1"),
            "v1\n{\"path\":\"part-1.json\",\"action\":\"add\"}",
        )
        .unwrap();
        let next = s.latest_offset(Some(&end)).unwrap().unwrap();
        assert_eq!(keys(&s.get_batch(Some(&end), &next).unwrap()), ["orphan"]);
    }
}
