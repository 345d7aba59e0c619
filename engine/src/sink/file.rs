//! The file sink (Spark's `parquet`/`json`/`csv` stream formats): each batch's
//! rows as new files under `path` (in `col=value/` directories with
//! `partition_by`), then the batch's file list appended to the manifest
//! `path/_spark_metadata/<batch>`. A batch already in the manifest is skipped
//! on re-run, so a replay never duplicates files for readers of the manifest.
//! Append mode only, as in Spark.
//!
//! Durability: each data file is written under a hidden in-progress name,
//! fsynced, renamed, and its directory fsynced (every new partition directory
//! also in its parent) before the manifest entry is written and fsynced, so
//! after a power cut the manifest never lists a missing or empty file. A data
//! file of a batch killed before its manifest entry is an orphan readers of
//! the manifest never see; in-progress files are removed when the sink opens.
//!
//! On object storage (`s3://bucket/prefix`) each data file is one whole
//! object (a PUT, atomic: no in-progress name is needed), and the manifest
//! entry is created once (a conditional PUT, `If-None-Match: *`): a batch
//! re-run after a restart whose entry exists writes nothing, and a run that
//! loses the race to another leaves only orphans. The sink also writes an
//! empty `_spark_metadata/.weir-sink` object when it first opens, so a
//! reader knows the prefix is a sink's output (S3 has no directories)
//! before its first batch is committed. Requests per batch: one PUT per
//! data object and one for the manifest entry, nothing read.
//!
//! Partition directories are named as Spark/Hive name them
//! (`ExternalCatalogUtils.escapePathName`): `/`, `%`, `=`, `:`, control
//! characters (NUL too) and `"#'*?\{[]^` become `%XX`; a null or empty value
//! is `__HIVE_DEFAULT_PARTITION__`. A `col=value` name longer than 255 bytes
//! (the usual file-name limit) is cut to fit and ends with `%~` and a 64-bit
//! hash of the whole value (`%~` never appears in an escaped name); the data
//! files under such a directory keep the partition columns themselves, so
//! the value reads back whole.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use weir_plan::OutputMode;

use super::{FileFormat, Sink, SinkContext};
use crate::checkpoint::{
    create_dir_all_synced, parse_batch_id, remove_files_below, remove_temp_files, sync_dir,
    write_atomic,
};
use crate::error::{Result, WeirError};
use crate::failpoint::failpoint;
use crate::storage::{Created, Location, Storage};

/// Writes batches as files with a manifest.
pub struct FileSink {
    path: PathBuf,
    format: FileFormat,
    partition_by: Vec<String>,
    sync: bool,
    /// The output directory on object storage, once opened (None: local).
    remote: Option<Storage>,
    /// On object storage: the batches whose manifest entries were there
    /// when the sink opened, and the newest compact entry's batch.
    committed: BTreeSet<i64>,
    committed_upto: Option<i64>,
}

impl FileSink {
    /// Files of `format` under `path`.
    pub fn new(path: impl Into<PathBuf>, format: FileFormat) -> FileSink {
        FileSink {
            path: path.into(),
            format,
            partition_by: Vec::new(),
            sync: true,
            remote: None,
            committed: BTreeSet::new(),
            committed_upto: None,
        }
    }

    /// Partition output directories by these columns (Spark's `partitionBy`).
    pub fn partition_by(mut self, cols: Vec<String>) -> Self {
        self.partition_by = cols;
        self
    }

    /// Whether data files, their directories and the manifest are fsynced
    /// before a batch counts as written (default true; false only for tests
    /// and scratch output: a power cut can then leave listed files empty).
    pub fn fsync(mut self, yes: bool) -> Self {
        self.sync = yes;
        self
    }

    fn manifest(&self, batch_id: i64) -> PathBuf {
        self.path.join(METADATA_DIR).join(batch_id.to_string())
    }

    fn err(&self, message: String) -> WeirError {
        WeirError::Sink {
            sink: format!("FileSink[{}]", self.path.display()),
            message,
        }
    }

    /// Writes one data file durably: a hidden in-progress file, fsync,
    /// rename, fsync of its directory (new directories fsynced in their
    /// parents).
    fn write_file(&self, path: &Path, batches: &[RecordBatch], schema: SchemaRef) -> Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        create_dir_all_synced(dir, self.sync)?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("part");
        let tmp = dir.join(format!(".{name}{IN_PROGRESS}"));
        let f = fs::File::create(&tmp).map_err(|e| WeirError::io(&tmp, e))?;
        let handle = f.try_clone().map_err(|e| WeirError::io(&tmp, e))?;
        self.encode(f, batches, schema)?;
        if self.sync {
            handle.sync_all().map_err(|e| WeirError::io(&tmp, e))?;
        }
        drop(handle);
        fs::rename(&tmp, path).map_err(|e| WeirError::io(path, e))?;
        if self.sync {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// Writes `batches` in the sink's format to `w`, and returns it.
    fn encode<W: Write + Send>(
        &self,
        w: W,
        batches: &[RecordBatch],
        schema: SchemaRef,
    ) -> Result<W> {
        match self.format {
            FileFormat::Parquet => {
                let mut w = parquet::arrow::ArrowWriter::try_new(w, schema, None)
                    .map_err(|e| self.err(e.to_string()))?;
                for b in batches {
                    w.write(b).map_err(|e| self.err(e.to_string()))?;
                }
                // Writes the footer.
                w.into_inner().map_err(|e| self.err(e.to_string()))
            }
            FileFormat::Json => {
                let mut w = arrow::json::LineDelimitedWriter::new(w);
                for b in batches {
                    w.write(b)?;
                }
                w.finish()?;
                Ok(w.into_inner())
            }
            FileFormat::Csv => {
                // Each `write` flushes to the writer.
                let mut w = arrow::csv::WriterBuilder::new().with_header(true).build(w);
                for b in batches {
                    w.write(b)?;
                }
                Ok(w.into_inner())
            }
        }
    }

    /// Opens the output directory on object storage: notes the batches
    /// already committed (one listing) and marks the prefix as a sink's
    /// output on first use.
    fn open_remote(&mut self, storage: Storage) -> Result<()> {
        let meta = storage.child(METADATA_DIR)?;
        let names = meta.list("")?;
        for name in &names {
            match name.strip_suffix(".compact") {
                Some(n) => self.committed_upto = self.committed_upto.max(parse_batch_id(n)),
                None => self.committed.extend(parse_batch_id(name)),
            }
        }
        if !names.iter().any(|n| n == SINK_MARKER) {
            meta.put(SINK_MARKER, b"")?;
        }
        self.remote = Some(storage);
        Ok(())
    }

    /// Writes batch `batch_id` to object storage: each data object with one
    /// PUT, then its manifest entry, created once.
    fn add_batch_remote(
        &mut self,
        storage: &Storage,
        batch_id: i64,
        by_dir: BTreeMap<String, Vec<RecordBatch>>,
    ) -> Result<()> {
        let mut files = Vec::new();
        for (dir, rows) in by_dir {
            let name = format!(
                "part-{batch_id:05}-{}.{}",
                uuid::Uuid::new_v4(),
                self.format.extension()
            );
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            let bytes = self.encode(Vec::new(), &rows, file_schema(&rows))?;
            storage.put(&rel, &bytes)?;
            failpoint("file_sink_after_data", batch_id);
            files.push(serde_json::json!({"path": rel, "action": "add"}));
        }
        let meta = storage.child(METADATA_DIR)?;
        match meta.put_create(&batch_id.to_string(), manifest_text(&files).as_bytes())? {
            Created::Created => {}
            Created::Exists => tracing::warn!(
                sink = %self.description(),
                batch_id,
                "the batch's manifest entry was written meanwhile by another run; this run's data objects of the batch are orphans no reader of the manifest sees"
            ),
        }
        self.committed.insert(batch_id);
        failpoint("file_sink_after_manifest", batch_id);
        Ok(())
    }

    /// Splits rows by partition values: `("k=v/...", rows)`, the rows
    /// without the partition columns, unless a directory name had to be cut
    /// (then the rows keep them, so the whole value is in the file).
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
        let mut groups: BTreeMap<(String, bool), Vec<u32>> = BTreeMap::new();
        for r in 0..batch.num_rows() {
            let mut cut = false;
            let dir: Vec<String> = idx
                .iter()
                .zip(&self.partition_by)
                .map(|(i, name)| {
                    let c = batch.column(*i);
                    let v = (!c.is_null(r)).then(|| crate::sink::console::cell(c.as_ref(), r));
                    let (d, was_cut) = partition_dir_name(name, v.as_deref());
                    cut |= was_cut;
                    d
                })
                .collect();
            groups
                .entry((dir.join("/"), cut))
                .or_default()
                .push(r as u32);
        }
        let keep: Vec<usize> = (0..schema.fields().len())
            .filter(|i| !idx.contains(i))
            .collect();
        let projected = batch.project(&keep)?;
        groups
            .into_iter()
            .map(|((d, cut), rows)| {
                let from = if cut { batch } else { &projected };
                Ok((d, take_record_batch(from, &UInt32Array::from(rows))?))
            })
            .collect()
    }
}

/// Suffix of a data file being written (hidden: its name starts with `.`).
const IN_PROGRESS: &str = ".inprogress";

/// The manifest's directory below the sink's.
pub const METADATA_DIR: &str = "_spark_metadata";

/// The object marking an object-storage prefix as a file sink's output
/// (ignored by manifest readers: not a batch id).
pub const SINK_MARKER: &str = ".weir-sink";

/// A batch's manifest text: `v1`, then one JSON entry a line.
fn manifest_text(files: &[serde_json::Value]) -> String {
    std::iter::once("v1".to_string())
        .chain(files.iter().map(|f| f.to_string()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The schema a data file is written with (a row-less schema for a
/// column-less result).
fn file_schema(rows: &[RecordBatch]) -> SchemaRef {
    let schema: SchemaRef = rows[0].schema();
    if schema.fields().is_empty() {
        std::sync::Arc::new(Schema::empty())
    } else {
        schema
    }
}

/// The directory name of a null or empty partition value (Hive's).
pub const DEFAULT_PARTITION_NAME: &str = "__HIVE_DEFAULT_PARTITION__";

/// The longest file name most file systems accept, in bytes.
const MAX_NAME_BYTES: usize = 255;

/// Marks a partition directory name cut to fit: `%~` and 16 hex digits.
const CUT_MARK: &str = "%~";

/// Characters escaped in partition directory names: Spark's
/// `ExternalCatalogUtils.charToEscape`, plus NUL (never valid in a path).
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\u{0}'
            ..='\u{1F}'
                | '"'
                | '#'
                | '%'
                | '\''
                | '*'
                | '/'
                | ':'
                | '='
                | '?'
                | '\\'
                | '\u{7F}'
                | '{'
                | '['
                | ']'
                | '^'
    )
}

/// Escapes a partition column name or value as Spark/Hive do
/// (`ExternalCatalogUtils.escapePathName`): each special character becomes
/// `%` and its two-digit upper-case hex code.
pub fn escape_path_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if needs_escape(c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Reverses [`escape_path_name`] (Spark's `unescapePathName`): `%XX` becomes
/// the character with that code; a `%` not followed by two hex digits stays.
pub fn unescape_path_name(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |x: u8| (x as char).to_digit(16);
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(char::from((hi * 16 + lo) as u8));
                i += 3;
                continue;
            }
        }
        // Copy one whole character.
        let c = s[i..]
            .chars()
            .next()
            .expect("in bounds, on a char boundary");
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// FNV-1a, 64 bits: stable across runs and versions (a directory name must
/// not change between batches).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The `col=value` directory name of one partition value (`None`: null), and
/// whether it was cut to fit (`MAX_NAME_BYTES`, 255 bytes).
pub fn partition_dir_name(column: &str, value: Option<&str>) -> (String, bool) {
    let col = escape_path_name(column);
    let value = match value {
        None | Some("") => return (format!("{col}={DEFAULT_PARTITION_NAME}"), false),
        Some(v) => v,
    };
    let escaped = escape_path_name(value);
    if col.len() + 1 + escaped.len() <= MAX_NAME_BYTES {
        return (format!("{col}={escaped}"), false);
    }
    let suffix = format!("{CUT_MARK}{:016x}", fnv1a(value.as_bytes()));
    let budget = MAX_NAME_BYTES.saturating_sub(col.len() + 1 + suffix.len());
    // Cut at a whole escaped character: never inside `%XX` or a UTF-8 sequence.
    let mut prefix = String::new();
    for c in value.chars() {
        let piece = if needs_escape(c) {
            format!("%{:02X}", c as u32)
        } else {
            c.to_string()
        };
        if prefix.len() + piece.len() > budget {
            break;
        }
        prefix.push_str(&piece);
    }
    (format!("{col}={prefix}{suffix}"), true)
}

/// Reads one `col=value` directory name back: the column and its value
/// (`Some(None)`: null). `None` when the name is not a partition directory;
/// the value is `Err(())` when the name was cut (the whole value is in the
/// data files).
#[allow(clippy::type_complexity)]
pub fn parse_partition_dir(
    name: &str,
) -> Option<(String, std::result::Result<Option<String>, ()>)> {
    let (col, value) = name.split_once('=')?;
    if col.is_empty() {
        return None;
    }
    let col = unescape_path_name(col);
    if value.contains(CUT_MARK) {
        return Some((col, Err(())));
    }
    if value == DEFAULT_PARTITION_NAME {
        return Some((col, Ok(None)));
    }
    Some((col, Ok(Some(unescape_path_name(value)))))
}

/// Removes the in-progress data files of a killed run in `dir` and its
/// partition directories (`col=value`), and returns how many.
fn remove_in_progress(dir: &Path) -> Result<usize> {
    remove_files_below(
        dir,
        &|name| name.contains('=') && !name.starts_with(['.', '_']),
        &|name| {
            (name.starts_with("part-") || name.starts_with(".part-")) && name.ends_with(IN_PROGRESS)
        },
    )
}

/// `format("parquet" | "json" | "csv")` (or `files` with `format`):
/// `path`, `partitionBy`.
pub(super) fn from_options(
    o: &super::SinkOptions,
) -> std::result::Result<super::BoxSink, weir_plan::connectors::OptionError> {
    let format = match o.get("format").map(str::to_ascii_lowercase).as_deref() {
        Some("json") => FileFormat::Json,
        Some("csv") => FileFormat::Csv,
        _ => FileFormat::Parquet,
    };
    let s = FileSink::new(o.get("path").unwrap_or_default(), format)
        .partition_by(o.columns("partitionBy")?);
    Ok(Box::new(s))
}

impl Sink for FileSink {
    fn kind(&self) -> weir_plan::SinkKind {
        weir_plan::SinkKind::File
    }

    fn description(&self) -> String {
        format!("FileSink[{}]", self.path.display())
    }

    fn open(&mut self, ctx: &SinkContext) -> Result<()> {
        self.sync &= ctx.sync;
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
            if escape_path_name(c).len() + 1 + CUT_MARK.len() + 16 > MAX_NAME_BYTES {
                return Err(self.err(format!(
                    "partition column name `{c}` is too long for a directory name ({MAX_NAME_BYTES} bytes with its value); rename the column"
                )));
            }
        }
        match Location::parse(&self.path.to_string_lossy())? {
            Location::Local(p) => self.path = p,
            Location::S3 { .. } => {
                let storage = Storage::open(&self.path.to_string_lossy(), &ctx.s3, self.sync)?;
                return self.open_remote(storage);
            }
        }
        let meta = self.path.join(METADATA_DIR);
        create_dir_all_synced(&meta, self.sync)?;
        // What a killed run left: temp manifests, half-written data files.
        remove_temp_files(&meta)?;
        remove_in_progress(&self.path)?;
        Ok(())
    }

    fn add_batch(&mut self, batch_id: i64, batches: &[RecordBatch]) -> Result<()> {
        let committed = match &self.remote {
            Some(_) => {
                self.committed.contains(&batch_id)
                    || self.committed_upto.is_some_and(|c| batch_id <= c)
            }
            None => self.manifest(batch_id).exists(),
        };
        if committed {
            return Ok(()); // committed before a restart: never write twice
        }
        let mut by_dir: BTreeMap<String, Vec<RecordBatch>> = BTreeMap::new();
        for b in batches.iter().filter(|b| b.num_rows() > 0) {
            for (d, rows) in self.partitions(b)? {
                by_dir.entry(d).or_default().push(rows);
            }
        }
        if let Some(storage) = self.remote.clone() {
            return self.add_batch_remote(&storage, batch_id, by_dir);
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
            self.write_file(&self.path.join(&rel), &rows, file_schema(&rows))?;
            failpoint("file_sink_after_data", batch_id);
            files.push(serde_json::json!({"path": rel.to_string_lossy(), "action": "add"}));
        }
        write_atomic(
            &self.manifest(batch_id),
            manifest_text(&files).as_bytes(),
            self.sync,
        )?;
        failpoint("file_sink_after_manifest", batch_id);
        Ok(())
    }
}

/// The files a file sink committed, read from its manifest (what a reader
/// should read), in batch order. Reads weir's manifests and Spark's (a
/// `<N>.compact` file holds every entry up to batch N; `file:` paths;
/// `delete` actions). Names that are not batch ids are ignored.
pub fn committed_files(path: &Path) -> Result<Vec<PathBuf>> {
    Manifest::default().files(path)
}

/// The objects a file sink on object storage committed, by their names
/// below `root` (the sink's directory), in batch order: as
/// [`committed_files`], for `s3://` (Spark's `s3://`/`s3a://` URIs below
/// `root` are read too).
pub fn committed_objects(root: &Storage) -> Result<Vec<String>> {
    Manifest::default().objects(root)
}

/// One line of a manifest: an entry's path and whether it is a `delete`.
type ManifestLine = (String, bool);

/// Reads a file sink's manifest (`_spark_metadata`), each manifest file
/// once: entries are never rewritten, so a reader polling the manifest
/// keeps one of these and reads only what is new (one listing per poll).
#[derive(Debug, Default)]
pub struct Manifest {
    read: HashMap<String, Vec<ManifestLine>>,
}

impl Manifest {
    /// [`committed_files`] of the local sink directory `path`.
    pub fn files(&mut self, path: &Path) -> Result<Vec<PathBuf>> {
        let meta = Storage::local(path.join(METADATA_DIR), false);
        self.committed(&meta, &|f| Ok(manifest_path(path, f)))
    }

    /// [`committed_objects`] of the sink directory `root`.
    pub fn objects(&mut self, root: &Storage) -> Result<Vec<String>> {
        let meta = root.child(METADATA_DIR)?;
        self.committed(&meta, &|f| manifest_object(root, f))
    }

    /// Every committed entry, in batch order, as `map` turns the entry's
    /// path into the reader's name for it (`delete` actions applied).
    pub fn committed<T: PartialEq>(
        &mut self,
        meta: &Storage,
        map: &dyn Fn(&str) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut ids: Vec<(i64, bool)> = meta
            .list("")?
            .into_iter()
            .filter_map(|name| match name.strip_suffix(".compact") {
                Some(n) => parse_batch_id(n).map(|n| (n, true)),
                None => parse_batch_id(&name).map(|n| (n, false)),
            })
            .collect();
        ids.sort();
        // The newest compact file replaces everything up to its batch.
        if let Some(c) = ids.iter().rev().find(|(_, compact)| *compact).map(|x| x.0) {
            ids.retain(|(n, compact)| (*n == c && *compact) || *n > c);
        }
        let mut out: Vec<T> = Vec::new();
        for (id, compact) in ids {
            let name = if compact {
                format!("{id}.compact")
            } else {
                id.to_string()
            };
            if !self.read.contains_key(&name) {
                let lines = read_manifest_file(meta, &name)?;
                self.read.insert(name.clone(), lines);
            }
            for (f, delete) in &self.read[&name] {
                let f = map(f)?;
                if *delete {
                    out.retain(|x| *x != f);
                } else {
                    out.push(f);
                }
            }
        }
        Ok(out)
    }
}

/// Reads one manifest file's entries.
fn read_manifest_file(meta: &Storage, name: &str) -> Result<Vec<ManifestLine>> {
    let p = meta.display_path(name);
    let bytes = meta.get(name)?.ok_or_else(|| {
        WeirError::checkpoint(
            &p,
            "the file-sink manifest entry vanished while it was read; another process is changing the sink's directory",
        )
    })?;
    let t = String::from_utf8_lossy(&bytes);
    let mut out = Vec::new();
    for line in t.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            WeirError::checkpoint(
                &p,
                format!("damaged file-sink manifest entry ({e}); restore the file or remove the output directory and its checkpoint to rewrite it"),
            )
        })?;
        let Some(f) = v.get("path").and_then(|p| p.as_str()) else {
            continue;
        };
        let delete = v.get("action").and_then(|a| a.as_str()) == Some("delete");
        out.push((f.to_string(), delete));
    }
    Ok(out)
}

/// A manifest entry's object name below `root` (an object-storage sink's
/// directory): weir writes names relative to it; Spark writes `s3a://`
/// URIs (percent-encoded). An entry outside `root` is an error.
fn manifest_object(root: &Storage, entry: &str) -> Result<String> {
    if !entry.contains("://") {
        return Ok(entry.to_string());
    }
    let outside = || {
        WeirError::Source {
            source_name: format!("file sink output {}", root.location()),
            message: format!(
                "its manifest lists `{entry}`, which is not below {}; weir reads a sink's output only from its own directory",
                root.location()
            ),
        }
    };
    let (
        Ok(Location::S3 { bucket, prefix }),
        Location::S3 {
            bucket: b,
            prefix: p,
        },
    ) = (Location::parse(entry), root.location())
    else {
        return Err(outside());
    };
    if bucket != *b {
        return Err(outside());
    }
    // The key as stored (`%25` in the URI is the `%` of an escaped name).
    let prefix = unescape_uri(&prefix);
    let rel = if p.is_empty() {
        Some(prefix.as_str())
    } else {
        prefix
            .strip_prefix(p.as_str())
            .and_then(|r| r.strip_prefix('/'))
    };
    match rel {
        Some(r) if !r.is_empty() => Ok(r.to_string()),
        _ => Err(outside()),
    }
}

/// A manifest entry's path on disk: relative to the sink directory (weir),
/// or an absolute path or `file:` URI (Spark).
fn manifest_path(root: &Path, entry: &str) -> PathBuf {
    let local = entry
        .strip_prefix("file://")
        .or_else(|| entry.strip_prefix("file:"))
        .map(|p| {
            // Spark percent-encodes URIs (`%20` for a space, `%25` for `%`).
            unescape_uri(p)
        });
    match local {
        Some(p) => PathBuf::from(p),
        None => root.join(entry),
    }
}

/// Decodes a URI path's `%XX` escapes (bytes, then UTF-8).
fn unescape_uri(s: &str) -> String {
    let b = s.as_bytes();
    let hex = |x: u8| (x as char).to_digit(16);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(hi), Some(lo)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_escape_as_spark_does_and_read_back() {
        assert_eq!(escape_path_name("a/b"), "a%2Fb");
        assert_eq!(escape_path_name("100%"), "100%25");
        assert_eq!(escape_path_name("k=v"), "k%3Dv");
        assert_eq!(escape_path_name("12:00"), "12%3A00");
        assert_eq!(escape_path_name("nul\0"), "nul%00");
        assert_eq!(escape_path_name("é ü"), "é ü");
        assert_eq!(unescape_path_name("100%"), "100%", "a lone % stays");
        assert_eq!(unescape_path_name("%zz%4"), "%zz%4");
        assert_eq!(
            unescape_path_name("%é"),
            "%é",
            "no slicing inside a character"
        );
        for v in [
            "a/b", "..", ".", "%", "%25", "=", "a=b/c=d", "\0", "\n\t", "\\", "é/ü", "x:y",
        ] {
            let (name, cut) = partition_dir_name("k", Some(v));
            assert!(!cut);
            assert!(!name.contains('/') && !name.contains('\0'), "{name:?}");
            assert_eq!(name.matches('=').count(), 1, "{name:?}");
            assert_eq!(
                parse_partition_dir(&name),
                Some(("k".to_string(), Ok(Some(v.to_string())))),
                "{v:?}"
            );
        }
        for v in [None, Some("")] {
            let (name, _) = partition_dir_name("k", v);
            assert_eq!(name, "k=__HIVE_DEFAULT_PARTITION__");
            assert_eq!(parse_partition_dir(&name), Some(("k".into(), Ok(None))));
        }
        // Distinct values, distinct directories.
        let names: std::collections::HashSet<String> = ["a/b", "a%2Fb", "a%252Fb", "a_b"]
            .iter()
            .map(|v| partition_dir_name("k", Some(v)).0)
            .collect();
        assert_eq!(names.len(), 4);
    }

    #[test]
    fn over_long_partition_values_are_cut_to_fit_and_stay_distinct() {
        let long_a = "a".repeat(300);
        let long_b = format!("{}b", "a".repeat(299));
        let slashes = "/".repeat(200);
        let unicode = "é".repeat(200);
        let mut names = std::collections::HashSet::new();
        for v in [&long_a, &long_b, &slashes, &unicode] {
            let (name, cut) = partition_dir_name("key", Some(v));
            assert!(cut, "{v}");
            assert!(name.len() <= 255, "{} bytes", name.len());
            assert!(!name.contains('/'));
            assert_eq!(parse_partition_dir(&name).unwrap().1, Err(()));
            assert_eq!(partition_dir_name("key", Some(v)).0, name, "stable");
            names.insert(name);
        }
        assert_eq!(names.len(), 4);
        let (name, cut) = partition_dir_name("key", Some(&"a".repeat(251)));
        assert!(!cut, "exactly 255 bytes fits: {}", name.len());
    }
}
