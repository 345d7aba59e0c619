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
//! Files in subdirectories are read too (Spark's file index lists every
//! leaf file), but for hidden names (`.` or `_` first) and all below them;
//! a schema column named like a `col=value` directory takes its value.
//!
//! The directory may be on object storage (`s3://bucket/prefix`): one
//! listing per poll and subdirectory, each new object read with one GET. A
//! prefix is a file sink's output when `_spark_metadata/` has an object
//! (weir's sink marks it when it opens), checked, as Spark does, until the
//! prefix has data files without one. The seen-files log lives under the
//! checkpoint's `sources/<i>/` on the checkpoint's storage, each entry
//! created once, so two runs cannot both log an entry.
//!
//! `max_file_age` (Spark's `maxFileAge`) skips files older, by modification
//! time, than the newest file already taken minus the age (every file
//! counts until one is taken; ignored with `latest_first` and
//! `max_files_per_trigger` together, as in Spark). Unset, no file is too
//! old.
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
use std::time::{Duration, SystemTime};

use arrow::array::{new_null_array, ArrayRef, StringArray};
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_plan::Field;

use super::{Offset, Source, SourceContext, SourceStorage};
use crate::checkpoint::parse_batch_id;
use crate::error::{Result, WeirError};
use crate::sink::file::{parse_partition_dir, Manifest, METADATA_DIR};
use crate::storage::{Created, Location, Storage};

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
    /// The seen-files log's directory (the checkpoint's `sources/<i>/`).
    log_dir: Option<Storage>,
    sync: bool,
    /// The directory on object storage, once opened (None: local).
    remote: Option<Storage>,
    /// Whether the directory is a file sink's output (object storage:
    /// None until known).
    has_metadata: Option<bool>,
    /// The sink manifest's entries read so far.
    manifest: Manifest,
    max_file_age_ms: Option<i64>,
    /// The newest modification time of a file taken, in ms since the epoch.
    latest_ms: Option<i64>,
    /// Files of each logged batch, by log offset.
    log: Vec<Vec<PathBuf>>,
    seen: HashSet<PathBuf>,
    available_now_cap: Option<usize>,
    malformed: u64,
    compact_interval: usize,
    /// The first option the connector table refused (fails `open`).
    error: Option<String>,
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
            remote: None,
            has_metadata: None,
            manifest: Manifest::default(),
            max_file_age_ms: None,
            latest_ms: None,
            log: Vec::new(),
            seen: HashSet::new(),
            available_now_cap: None,
            malformed: 0,
            compact_interval: DEFAULT_LOG_COMPACT_INTERVAL,
            error: None,
        }
    }

    /// At most this many new files per micro-batch (Spark's
    /// `maxFilesPerTrigger`, at least 1). Kept under [`crate::Trigger::Once`]
    /// too, where Spark ignores it: use [`crate::Trigger::AvailableNow`] to
    /// read every file, in batches of this many.
    pub fn max_files_per_trigger(mut self, n: usize) -> Self {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        match weir_plan::connectors::count("maxFilesPerTrigger", n, u32::MAX.into()) {
            Ok(n) => self.max_files = Some(n as usize),
            Err(e) => {
                self.error.get_or_insert(e.to_string());
            }
        }
        self
    }

    /// Take the newest files first (Spark's `latestFirst`).
    pub fn latest_first(mut self, yes: bool) -> Self {
        self.latest_first = yes;
        self
    }

    /// Skip files older than the newest file taken minus `age` (Spark's
    /// `maxFileAge`; unset: none is too old). Ignored with `latest_first`
    /// and `max_files_per_trigger` together, as in Spark.
    pub fn max_file_age(mut self, age: Duration) -> Self {
        self.max_file_age_ms = Some(i64::try_from(age.as_millis()).unwrap_or(i64::MAX));
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

    fn list_new(&mut self) -> Result<Vec<PathBuf>> {
        if let Some(data) = self.remote.clone() {
            return self.list_new_remote(&data);
        }
        if self.dir.join(METADATA_DIR).is_dir() {
            // A file sink's output: only what its manifest committed, in
            // commit order.
            let files = self.manifest.files(&self.dir)?;
            return Ok(self.unseen_committed(files));
        }
        // Every file below the directory, in its subdirectories too (as
        // Spark's file index lists leaf files; `col=value` directories fill
        // their columns), but for hidden names (`.` or `_` first) and all
        // below them.
        let mut files = Vec::new();
        let mut dirs = vec![self.dir.clone()];
        while let Some(dir) = dirs.pop() {
            let rd = match fs::read_dir(&dir) {
                Ok(rd) => rd,
                // A subdirectory removed meanwhile; the source's own is
                // checked when the query starts.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(WeirError::io(&dir, e)),
            };
            for e in rd {
                let e = e.map_err(|e| WeirError::io(&dir, e))?;
                if hidden(&e.file_name().to_string_lossy()) {
                    continue;
                }
                let md = match e.metadata() {
                    Ok(m) => m,
                    Err(er) if er.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(er) => return Err(WeirError::io(e.path(), er)),
                };
                if md.is_dir() {
                    dirs.push(e.path());
                    continue;
                }
                if !md.is_file() {
                    continue;
                }
                let modified = md.modified().ok();
                if self.seen.contains(&e.path()) {
                    self.note_taken(modified.map(millis));
                    continue;
                }
                files.push((modified, e.path()));
            }
        }
        files.sort();
        if self.latest_first {
            files.reverse();
        }
        let files = files
            .into_iter()
            .filter(|(m, _)| !self.too_old(m.map(millis)))
            .map(|(_, p)| p)
            .collect();
        Ok(files)
    }

    /// [`FileSource::list_new`] on object storage: a sink's output through
    /// its manifest, otherwise every object below the prefix (but for
    /// hidden names and all below them).
    fn list_new_remote(&mut self, data: &Storage) -> Result<Vec<PathBuf>> {
        if self.has_metadata.is_none() && !data.list(METADATA_DIR)?.is_empty() {
            self.has_metadata = Some(true);
        }
        if self.has_metadata == Some(true) {
            let files = self
                .manifest
                .objects(data)?
                .into_iter()
                .map(|name| self.dir.join(name))
                .collect();
            return Ok(self.unseen_committed(files));
        }
        let mut files = Vec::new();
        let mut any = false;
        for e in data.list_tree("", &hidden)? {
            any = true;
            let path = self.dir.join(&e.name);
            if self.seen.contains(&path) {
                self.note_taken(Some(e.modified_ms));
                continue;
            }
            files.push((e.modified_ms, path));
        }
        if any {
            // Data without a manifest: not a sink's output, once the
            // manifest is looked for again (a sink's first data may come
            // just before it; Spark checks twice the same way).
            if self.has_metadata.is_none() && !data.list(METADATA_DIR)?.is_empty() {
                self.has_metadata = Some(true);
                return self.list_new_remote(data);
            }
            self.has_metadata = Some(false);
        }
        files.sort();
        if self.latest_first {
            files.reverse();
        }
        Ok(files
            .into_iter()
            .filter(|(m, _)| !self.too_old(Some(*m)))
            .map(|(_, p)| p)
            .collect())
    }

    /// The manifest's files not taken yet, each once, in commit order
    /// (reversed with `latest_first`).
    fn unseen_committed(&self, files: Vec<PathBuf>) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = files
            .into_iter()
            .filter(|p| !self.seen.contains(p))
            .collect();
        let mut dedup = HashSet::new();
        files.retain(|p| dedup.insert(p.clone()));
        if self.latest_first {
            files.reverse();
        }
        files
    }

    /// Notes the modification time of a file taken before (for
    /// `max_file_age`).
    fn note_taken(&mut self, modified_ms: Option<i64>) {
        if let Some(m) = modified_ms {
            self.latest_ms = Some(self.latest_ms.map_or(m, |l| l.max(m)));
        }
    }

    /// Whether a file modified at `modified_ms` is past `max_file_age`.
    fn too_old(&self, modified_ms: Option<i64>) -> bool {
        let (Some(age), Some(latest), Some(m)) =
            (self.max_file_age_ms, self.latest_ms, modified_ms)
        else {
            return false;
        };
        if self.latest_first && self.max_files.is_some() {
            return false;
        }
        m < latest.saturating_sub(age)
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
        let parts = self.partition_values(path);
        if let Some(data) = &self.remote {
            let name = object_name(&self.dir, path).ok_or_else(|| {
                self.err(path, "the file is not in the source's directory".into())
            })?;
            let bytes = data.get(&name)?.ok_or_else(|| {
                self.err(
                    path,
                    "the object is gone: it was deleted after the source logged it. Restore it, or start with a new checkpoint location".into(),
                )
            })?;
            return match self.format {
                FileFormat::Parquet => self.read_parquet(parquet_input(bytes), path, &parts),
                FileFormat::Json | FileFormat::Csv => {
                    self.read_text(path, std::io::Cursor::new(bytes), &parts)
                }
            };
        }
        let open = || fs::File::open(path).map_err(|e| WeirError::io(path, e));
        match self.format {
            FileFormat::Parquet => self.read_parquet(open()?, path, &parts),
            FileFormat::Json | FileFormat::Csv => {
                self.read_text(path, BufReader::new(open()?), &parts)
            }
        }
    }

    /// Reads one Parquet file; the columns in `parts` come from the path.
    fn read_parquet<R: parquet::file::reader::ChunkReader + 'static>(
        &self,
        input: R,
        path: &Path,
        parts: &[(usize, Option<String>)],
    ) -> Result<Vec<RecordBatch>> {
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(input)
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
            for (i, v) in parts {
                cols[*i] = self.constant_column(*i, v.as_deref(), b.num_rows())?;
            }
            out.push(RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
            )?);
        }
        Ok(out)
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
            let name = format!("{n}.compact");
            log_create(dir, &name, text.as_bytes())?;
            remove_compacted(dir, n)?;
        } else {
            let text = format!("v1\n{}", serde_json::to_string(&names(files))?);
            log_create(dir, &n.to_string(), text.as_bytes())?;
        }
        crate::failpoint::failpoint_here("after_source_log");
        Ok(())
    }
}

/// Creates log entry `name`; one that exists was written by another run
/// of the query on this checkpoint at the same time: an error.
fn log_create(dir: &Storage, name: &str, bytes: &[u8]) -> Result<()> {
    match dir.put_create(name, bytes)? {
        Created::Created => Ok(()),
        Created::Exists => Err(WeirError::checkpoint(
            dir.display_path(name),
            "another run of this query logged this file-source entry at the same time: only one run may use a checkpoint location; stop the other run",
        )),
    }
}

/// What a log directory holds: the newest `<n>.compact` and the plain
/// entries' ids.
fn list_log(dir: &Storage) -> Result<(Option<usize>, Vec<usize>)> {
    let mut compact = None;
    let mut plain = Vec::new();
    for name in dir.list("")? {
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
fn remove_compacted(dir: &Storage, upto: usize) -> Result<()> {
    for name in dir.list("")? {
        let (n, compact) = match name.strip_suffix(".compact") {
            Some(n) => (n, true),
            None => (name.as_str(), false),
        };
        let Some(n) = parse_batch_id(n).and_then(|n| usize::try_from(n).ok()) else {
            continue;
        };
        if (compact && n < upto) || (!compact && n <= upto) {
            dir.delete(&name)?;
        }
    }
    Ok(())
}

/// Whether `path` is in the part of the existing directory `dir` the
/// source reads: below it, as the file system resolves them (through its
/// nearest existing ancestor: a path not made yet is below `dir` only
/// through `dir`), and under no hidden name.
fn inside(path: &Path, dir: &Path) -> bool {
    let Ok(dir) = fs::canonicalize(dir) else {
        return false;
    };
    let Some((at, resolved)) = path
        .ancestors()
        .find_map(|a| fs::canonicalize(a).ok().map(|r| (a, r)))
    else {
        return false;
    };
    let (Ok(existing), Ok(rest)) = (resolved.strip_prefix(&dir), path.strip_prefix(at)) else {
        return false;
    };
    !existing
        .components()
        .chain(rest.components())
        .any(|c| hidden(&c.as_os_str().to_string_lossy()))
}

/// A name the file source skips, with all below it: Spark's rule for the
/// files of a directory (`shouldFilterOutPathName`): `.` first, `_` first
/// unless it holds `=` (a partition directory such as `_date=2024-01-01`),
/// and a copy in progress (`._COPYING_` last).
fn hidden(name: &str) -> bool {
    name.starts_with('.')
        || (name.starts_with('_') && !name.contains('='))
        || name.ends_with("._COPYING_")
}

/// `path`'s object name below `dir` (both as the source spells them:
/// `s3://bucket/prefix/...`).
fn object_name(dir: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(dir).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| match c {
            std::path::Component::Normal(s) => Some(s.to_string_lossy().to_string()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// An object's bytes as Parquet's in-memory reader input (object_store's
/// `Bytes`).
fn parquet_input(bytes: Vec<u8>) -> impl parquet::file::reader::ChunkReader {
    object_store::PutPayload::from(bytes)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// A modification time in ms since the epoch.
fn millis(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn parse_json_line(schema: &SchemaRef, line: &str) -> Result<RecordBatch> {
    // One JSON object by serde_json's grammar (the check `from_json` makes),
    // then its values as Spark reads them (`json_time`), from the line as
    // written (`1e3` stays `1e3` in a string field).
    super::json_record::check_json_object(line.as_bytes()).map_err(WeirError::Row)?;
    let mut dec = super::json_time::reader_builder(schema)
        .with_strict_mode(false)
        .build_decoder()?;
    dec.decode(line.as_bytes())?;
    let read = dec
        .flush()?
        .ok_or_else(|| WeirError::Row("empty record".into()))?;
    super::json_time::to_timestamps(read, schema).map_err(WeirError::Row)
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
        self.open_on(ctx, &SourceStorage::local(ctx))
    }

    fn log_on_storage(&self) -> bool {
        true
    }

    fn open_on(&mut self, ctx: &SourceContext, storage: &SourceStorage) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(WeirError::Config(e.clone()));
        }
        match Location::parse(&self.dir.to_string_lossy())? {
            // Spark refuses a path that does not exist when the query
            // starts: a mistyped one would otherwise run with no input.
            Location::Local(p) if !fs::metadata(&p).is_ok_and(|m| m.is_dir()) => {
                let why = match fs::metadata(&p) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        "Path does not exist (create it before the query starts)".to_string()
                    }
                    Err(e) => format!("cannot read the path ({e})"),
                    Ok(_) => "the path is not a directory".to_string(),
                };
                return Err(WeirError::Source {
                    source_name: self.description(),
                    message: format!("{why}: {}", p.display()),
                });
            }
            // Subdirectories are read too: a checkpoint below the source's
            // directory would be read as input.
            Location::Local(p) if inside(&ctx.metadata_dir, &p) => {
                return Err(WeirError::Source {
                    source_name: self.description(),
                    message: format!(
                        "the checkpoint ({}) is inside the source's directory {}, whose subdirectories are read as input: put the checkpoint elsewhere",
                        ctx.metadata_dir.display(),
                        p.display()
                    ),
                });
            }
            Location::Local(p) => self.dir = p,
            loc @ Location::S3 { .. } => {
                let url = loc.to_string();
                self.remote = Some(Storage::open(&url, &storage.s3, ctx.sync)?);
                self.dir = PathBuf::from(url);
            }
        }
        let dir = storage.metadata.clone();
        self.log_dir = Some(dir.clone());
        self.sync = ctx.sync;
        let damaged = |p: &Path, e: String| {
            WeirError::checkpoint(p, format!("damaged file-source log ({e}); restore it or start with a new checkpoint location"))
        };
        let read = |name: &str| -> Result<String> {
            let bytes = dir.get(name)?.ok_or_else(|| {
                damaged(
                    &dir.display_path(name),
                    "an entry vanished while it was read; is another run using this checkpoint?"
                        .into(),
                )
            })?;
            Ok(String::from_utf8_lossy(&bytes).into_owned())
        };
        let (compact, plain) = list_log(&dir)?;
        let mut n = 0;
        if let Some(c) = compact {
            let name = format!("{c}.compact");
            let p = dir.display_path(&name);
            let t = read(&name)?;
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
        while plain.binary_search(&n).is_ok() {
            let name = n.to_string();
            let t = read(&name)?;
            let list: Vec<String> = serde_json::from_str(t.lines().nth(1).unwrap_or("[]"))
                .map_err(|e| damaged(&dir.display_path(&name), e.to_string()))?;
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

/// The file source from its options, checked by the connector table
/// ([`super::from_options`]), and the declared schema.
pub(super) fn from_options(
    o: &super::SourceOptions,
) -> std::result::Result<super::BoxSource, weir_plan::connectors::OptionError> {
    use weir_plan::connectors::OptionError;
    if o.fields().is_empty() {
        return Err(OptionError {
            option: "schema".into(),
            message: "Schema must be specified when creating a streaming source DataFrame".into(),
            help: "pass the files' fields: a stream does not infer its schema (Spark's rule)"
                .into(),
        });
    }
    let format = match o.get("format").map(str::to_ascii_lowercase).as_deref() {
        Some("csv") => FileFormat::Csv,
        Some("parquet") => FileFormat::Parquet,
        _ => FileFormat::Json,
    };
    let mut s = FileSource::new(
        o.get("path").unwrap_or_default(),
        format,
        o.fields().to_vec(),
    );
    if let Some(n) = o.number("maxFilesPerTrigger")? {
        s = s.max_files_per_trigger(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(yes) = o.flag("latestFirst")? {
        s = s.latest_first(yes);
    }
    if o.is_set("maxFileAge") {
        if let Some(age) = o.duration("maxFileAge")? {
            s = s.max_file_age(age);
        }
    }
    if let Some(yes) = o.flag("header")? {
        s = s.header(yes);
    }
    s = s.mode(
        match o.get("mode").map(str::to_ascii_uppercase).as_deref() {
            Some("DROPMALFORMED") => ParseMode::DropMalformed,
            Some("FAILFAST") => ParseMode::FailFast,
            _ => ParseMode::Permissive,
        },
    );
    Ok(Box::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_plan::DataType;

    /// A context whose source log lives in `metadata_dir`.
    fn ctx(metadata_dir: impl Into<PathBuf>) -> SourceContext {
        SourceContext {
            metadata_dir: metadata_dir.into(),
            sync: false,
            default_parallelism: 1,
        }
    }

    fn fields() -> Vec<Field> {
        vec![
            Field::new("ts", DataType::Timestamp),
            Field::new("key", DataType::String),
            Field::new("_corrupt_record", DataType::String),
        ]
    }

    #[test]
    fn a_json_line_is_read_as_spark_reads_it() {
        use arrow::array::AsArray;
        let schema = crate::row::arrow_schema(&fields()[..2]);
        let b = parse_json_line(&schema, r#"{"ts":1700000000,"key":1e3}"#).unwrap();
        let ts = b
            .column(0)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_000_000);
        // The number's text as written, not as serde would print it.
        assert_eq!(b.column(1).as_string::<i32>().value(0), "1e3");
        assert!(parse_json_line(&schema, r#"{"ts":1.5}"#).is_err());
    }

    /// `maxFilesPerTrigger` 0 is refused by the connector table's rule, as
    /// `stream_query!` refuses `max_files_per_trigger = 0` (it was raised to 1).
    #[test]
    fn max_files_per_trigger_is_checked_by_the_connector_table() {
        let dir = tempfile::tempdir().unwrap();
        let mut s =
            FileSource::new(dir.path(), FileFormat::Json, fields()).max_files_per_trigger(0);
        let e = s.open(&ctx(dir.path().join("chk"))).unwrap_err();
        let rule =
            weir_plan::connectors::count("maxFilesPerTrigger", 0, u32::MAX.into()).unwrap_err();
        assert!(e.to_string().ends_with(&rule.to_string()), "{e}");
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
        s.open(&ctx(chk.path().to_path_buf())).unwrap();
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
        s2.open(&ctx(chk.path().to_path_buf())).unwrap();
        assert_eq!(s2.latest_offset(Some(&end)).unwrap(), Some(end));
    }

    fn open(dir: &Path, chk: &Path) -> FileSource {
        let mut s = FileSource::new(dir, FileFormat::Json, fields())
            .max_files_per_trigger(1)
            .log_compact_interval(4);
        s.open(&ctx(chk.to_path_buf())).unwrap();
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
    fn files_in_subdirectories_are_read_and_partition_directories_fill_their_column() {
        let dir = tempfile::tempdir().unwrap();
        let chk = tempfile::tempdir().unwrap();
        let row = |k: &str| format!("{{\"ts\":\"2024-01-01T12:00:00Z\",\"key\":\"{k}\"}}");
        let put = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        put("top.json", &row("top"));
        put("2024/01/nested.json", &row("nested"));
        // A `col=value` directory: its files need not hold the column.
        put("key=p/part-0.json", "{\"ts\":\"2024-01-01T12:00:00Z\"}");
        // Hidden, with all below them.
        put("_hidden/x.json", &row("hidden"));
        put(".staging/y.json", &row("staging"));
        put("2024/_SUCCESS", "");
        put("2024/copy.json._COPYING_", &row("copying"));
        // `_` first but a partition directory: read (Spark's rule).
        put("_day=1/part-0.json", &row("underscore"));
        let mut s = FileSource::new(dir.path(), FileFormat::Json, fields());
        s.open(&ctx(chk.path().to_path_buf())).unwrap();
        let end = s.latest_offset(None).unwrap().unwrap();
        let mut got = keys(&s.get_batch(None, &end).unwrap());
        got.sort();
        assert_eq!(got, ["nested", "p", "top", "underscore"]);
        // Each file once: a new one in a new subdirectory is the next batch.
        put("2024/02/later.json", &row("later"));
        let next = s.latest_offset(Some(&end)).unwrap().unwrap();
        assert_eq!(keys(&s.get_batch(Some(&end), &next).unwrap()), ["later"]);
    }

    #[test]
    fn a_checkpoint_inside_the_source_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let chk = dir.path().join("chk/sources/0");
        let mut s = FileSource::new(dir.path(), FileFormat::Json, fields());
        let err = s.open(&ctx(chk)).unwrap_err().to_string();
        assert!(err.contains("is inside the source's directory"), "{err}");
        // Under a hidden name the source does not read: accepted.
        let mut s = FileSource::new(dir.path(), FileFormat::Json, fields());
        s.open(&ctx(dir.path().join("_chk/sources/0"))).unwrap();
        // Beside it (a sibling whose name starts alike): accepted.
        let input = dir.path().join("in");
        fs::create_dir_all(&input).unwrap();
        let mut s = FileSource::new(&input, FileFormat::Json, fields());
        s.open(&ctx(dir.path().join("in2/sources/0"))).unwrap();
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

    #[test]
    fn files_older_than_max_file_age_behind_the_newest_taken_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let chk = tempfile::tempdir().unwrap();
        let base = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let add = |name: &str, key: &str, age_s: u64| {
            let p = dir.path().join(name);
            fs::write(
                &p,
                format!("{{\"ts\":\"2024-01-01T12:00:00Z\",\"key\":\"{key}\"}}"),
            )
            .unwrap();
            fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(base - Duration::from_secs(age_s))
                .unwrap();
        };
        let open = || {
            let mut s = FileSource::new(dir.path(), FileFormat::Json, fields())
                .max_file_age(Duration::from_secs(60));
            s.open(&ctx(chk.path().to_path_buf())).unwrap();
            s
        };
        // Before any file is taken, every file counts, however old.
        add("a.json", "a", 3600);
        add("b.json", "b", 0);
        let mut s = open();
        let o0 = s.latest_offset(None).unwrap().unwrap();
        assert_eq!(keys(&s.get_batch(None, &o0).unwrap()), ["a", "b"]);
        // Now b (the newest taken) sets the bar: older than b - 60 s is skipped.
        add("c.json", "c", 120);
        add("d.json", "d", 30);
        let o1 = s.latest_offset(Some(&o0)).unwrap().unwrap();
        assert_eq!(keys(&s.get_batch(Some(&o0), &o1).unwrap()), ["d"]);
        // The same after a restart (the bar comes from the files taken).
        let mut s2 = open();
        assert_eq!(s2.latest_offset(Some(&o1)).unwrap(), Some(o1.clone()));
        // Ignored with latestFirst and maxFilesPerTrigger together (Spark).
        let chk2 = tempfile::tempdir().unwrap();
        let mut s3 = FileSource::new(dir.path(), FileFormat::Json, fields())
            .max_file_age(Duration::from_secs(60))
            .latest_first(true)
            .max_files_per_trigger(10);
        s3.open(&ctx(chk2.path().to_path_buf())).unwrap();
        let e = s3.latest_offset(None).unwrap().unwrap();
        let mut got = keys(&s3.get_batch(None, &e).unwrap());
        got.sort();
        assert_eq!(got, ["a", "b", "c", "d"]);
    }

    #[test]
    fn a_log_entry_another_run_wrote_meanwhile_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let chk = tempfile::tempdir().unwrap();
        let mut s = open(dir.path(), chk.path());
        fs::write(
            dir.path().join("a.json"),
            "{\"ts\":\"2024-01-01T12:00:00Z\",\"key\":\"a\"}",
        )
        .unwrap();
        // Another run of the query logged entry 0 after this one opened.
        fs::write(chk.path().join("0"), "v1\n[\"/elsewhere/x.json\"]").unwrap();
        let err = s.latest_offset(None).unwrap_err().to_string();
        assert!(err.contains("only one run may use a checkpoint"), "{err}");
        assert_eq!(
            fs::read_to_string(chk.path().join("0")).unwrap(),
            "v1\n[\"/elsewhere/x.json\"]"
        );
    }
}
