//! Static tables for stream-static joins: in-memory batches or Parquet, JSON
//! or CSV files, optionally re-read on a schedule for slowly changing
//! dimensions (the seed's `spark.read.parquet("s3://dim/users/")`,
//! "refreshed periodically").

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::Field;

use crate::error::{Result, WeirError};
use crate::source::FileFormat;
use crate::storage::{Location, S3Settings, Storage};

/// Where a table's rows come from.
#[derive(Clone)]
enum Contents {
    /// Rows given in memory.
    Batches(Vec<RecordBatch>),
    /// A local file, or the files of a local directory.
    Local(PathBuf),
    /// The objects directly under an S3 prefix (or the one object the
    /// location names), read through the storage layer.
    S3 {
        /// The `s3://bucket/prefix` URL.
        url: String,
        /// The storage opened at the first load (one client for every
        /// refresh); cleared when the settings change.
        storage: Arc<Mutex<Option<Storage>>>,
    },
    /// A location that could not be parsed: the error, reported at load.
    Invalid(String),
}

/// A batch (non-streaming) table to join a stream with.
#[derive(Clone)]
pub struct StaticTable {
    schema: SchemaRef,
    contents: Contents,
    format: FileFormat,
    s3: Option<S3Settings>,
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

/// Files whose names start with `.` or `_` (Spark's `_SUCCESS`, editors'
/// temp files) are not part of a table.
fn hidden(name: &str) -> bool {
    name.starts_with('.') || name.starts_with('_')
}

fn files_in(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out: Vec<PathBuf> = fs::read_dir(path)
        .map_err(|e| WeirError::io(path, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && !p.file_name().and_then(|n| n.to_str()).is_some_and(hidden))
        .collect();
    out.sort();
    Ok(out)
}

/// An object's bytes as Parquet's in-memory reader input (object_store's
/// `Bytes`, which Parquet reads without copying).
fn parquet_input(bytes: Vec<u8>) -> impl parquet::file::reader::ChunkReader {
    object_store::PutPayload::from(bytes)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// Decodes one file's `bytes` (`name` for messages) as `format`, with
/// `schema` (for Parquet the file schema is cast to it by name), into `out`.
/// Local files and S3 objects are read the same way.
fn decode(
    format: FileFormat,
    schema: &SchemaRef,
    name: &str,
    bytes: Vec<u8>,
    out: &mut Vec<RecordBatch>,
) -> Result<()> {
    let bad = |e: String| WeirError::Source {
        source_name: format!("static table {name}"),
        message: e,
    };
    match format {
        FileFormat::Parquet => {
            let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                parquet_input(bytes),
            )
            .and_then(|b| b.build())
            .map_err(|e| bad(e.to_string()))?;
            for b in r {
                let b = b?;
                let cols = schema
                    .fields()
                    .iter()
                    .map(|fl| match b.schema().index_of(fl.name()) {
                        Ok(i) => Ok(arrow::compute::cast(b.column(i), fl.data_type())?),
                        Err(_) => Err(bad(format!("no column `{}`", fl.name()))),
                    })
                    .collect::<Result<Vec<_>>>()?;
                out.push(RecordBatch::try_new(schema.clone(), cols)?);
            }
        }
        FileFormat::Json => {
            // Values as the file source and `from_json` read them
            // (timestamps as Spark reads them: `json_time`).
            for b in crate::source::json_time::reader_builder(schema).build(&bytes[..])? {
                out.push(crate::source::json_time::to_timestamps(b?, schema).map_err(bad)?);
            }
        }
        FileFormat::Csv => {
            for b in arrow::csv::ReaderBuilder::new(schema.clone())
                .with_header(true)
                .build(&bytes[..])?
            {
                out.push(b?);
            }
        }
    }
    Ok(())
}

impl StaticTable {
    /// A table of these batches.
    pub fn from_batches(schema: SchemaRef, batches: Vec<RecordBatch>) -> StaticTable {
        let n: usize = batches.iter().map(|b| b.num_rows()).sum();
        StaticTable {
            schema,
            contents: Contents::Batches(batches),
            format: FileFormat::Parquet,
            s3: None,
            refresh: None,
            description: format!("in-memory table ({n} rows)"),
        }
    }

    /// The files of `format` at `path`, read with `fields` (for Parquet the
    /// file schema is cast to them by name). `path` is a local file or
    /// directory (a plain path or `file:///...`), or `s3://bucket/prefix`:
    /// the objects directly under the prefix (or the one object it names),
    /// read through [`Storage`] with the settings of
    /// [`StaticTable::with_s3_settings`], else the session's (when joined
    /// with [`DataStream::join_static`](crate::dataset::DataStream::join_static)
    /// on a session that passes them), else the environment's `AWS_*`.
    /// Names starting with `.` or `_` are skipped. A missing bucket, or a
    /// prefix with no objects, is an error when the query starts.
    pub fn files(path: impl Into<PathBuf>, format: FileFormat, fields: Vec<Field>) -> StaticTable {
        let path: PathBuf = path.into();
        let schema = crate::row::arrow_schema(&fields);
        let (contents, shown) = match path.to_str().map(Location::parse) {
            Some(Ok(Location::S3 { bucket, prefix })) => {
                let url = Location::S3 { bucket, prefix }.to_string();
                (
                    Contents::S3 {
                        url: url.clone(),
                        storage: Arc::new(Mutex::new(None)),
                    },
                    url,
                )
            }
            Some(Ok(Location::Local(p))) => {
                let shown = p.display().to_string();
                (Contents::Local(p), shown)
            }
            Some(Err(e)) => (
                Contents::Invalid(e.to_string()),
                "an invalid location".into(),
            ),
            None => (Contents::Local(path.clone()), path.display().to_string()),
        };
        StaticTable {
            schema,
            contents,
            format,
            s3: None,
            refresh: None,
            description: format!("{} files at {shown}", format.extension()),
        }
    }

    /// The S3 settings to read an `s3://` table with (Spark's S3A names,
    /// see [`S3Settings`]; the environment's `AWS_*` fill what they leave
    /// unset). Replaces the session's.
    pub fn with_s3_settings(mut self, s3: S3Settings) -> Self {
        self.s3 = Some(s3);
        self.reset_storage();
        self
    }

    /// `s3` (the session's settings) unless the table was given its own
    /// with [`StaticTable::with_s3_settings`].
    pub fn or_s3_settings(self, s3: &S3Settings) -> Self {
        if self.s3.is_some() {
            return self;
        }
        self.with_s3_settings(s3.clone())
    }

    fn reset_storage(&mut self) {
        if let Contents::S3 { storage, .. } = &mut self.contents {
            *storage = Arc::new(Mutex::new(None));
        }
    }

    /// The storage of an S3 table, opened once (a missing bucket or a
    /// refused credential is reported here).
    fn s3_storage(&self, url: &str, cache: &Mutex<Option<Storage>>) -> Result<Storage> {
        let mut cached = cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = cached.as_ref() {
            return Ok(s.clone());
        }
        let default = S3Settings::default();
        let s = Storage::open(url, self.s3.as_ref().unwrap_or(&default), false)?;
        *cached = Some(s.clone());
        Ok(s)
    }

    /// Reads the objects under an S3 prefix (one LIST, one GET each), or
    /// the one object the location names.
    fn load_s3(&self, url: &str, cache: &Mutex<Option<Storage>>) -> Result<Vec<RecordBatch>> {
        let storage = self.s3_storage(url, cache)?;
        let mut out = Vec::new();
        let names: Vec<String> = storage
            .list("")?
            .into_iter()
            .filter(|n| !hidden(n))
            .collect();
        if names.is_empty() {
            if let Some(bytes) = self.single_object(&storage)? {
                decode(self.format, &self.schema, url, bytes, &mut out)?;
                return Ok(out);
            }
            return Err(WeirError::Source {
                source_name: format!("static table {}", self.description),
                message: format!(
                    "there are no objects at {}: the prefix is empty or does not exist. Check the path (a prefix of {} objects, or one object), or write the table there before starting the query",
                    storage.describe(),
                    self.format.extension()
                ),
            });
        }
        for name in names {
            // An object removed since the listing is no longer in the table.
            if let Some(bytes) = storage.get(&name)? {
                let shown = storage.display_path(&name);
                decode(
                    self.format,
                    &self.schema,
                    &shown.display().to_string(),
                    bytes,
                    &mut out,
                )?;
            }
        }
        Ok(out)
    }

    /// The object an `s3://bucket/key` location names, when it is one.
    fn single_object(&self, storage: &Storage) -> Result<Option<Vec<u8>>> {
        let Location::S3 { bucket, prefix } = storage.location() else {
            return Ok(None);
        };
        if prefix.is_empty() {
            return Ok(None);
        }
        let (parent, name) = prefix.rsplit_once('/').unwrap_or(("", prefix.as_str()));
        let default = S3Settings::default();
        let parent = Storage::open(
            &format!("s3://{bucket}/{parent}"),
            self.s3.as_ref().unwrap_or(&default),
            false,
        )?;
        parent.get(name)
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
        match &self.contents {
            Contents::Batches(b) => Ok(b.clone()),
            Contents::Local(path) => {
                let mut out = Vec::new();
                for f in files_in(path)? {
                    let bytes = fs::read(&f).map_err(|e| WeirError::io(&f, e))?;
                    decode(
                        self.format,
                        &self.schema,
                        &f.display().to_string(),
                        bytes,
                        &mut out,
                    )?;
                }
                Ok(out)
            }
            Contents::S3 { url, storage } => self.load_s3(url, storage),
            Contents::Invalid(e) => Err(WeirError::Config(format!("static table: {e}"))),
        }
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
    fn a_file_url_is_read_like_its_path_and_a_bad_url_is_an_error_at_load() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.csv"), "key,tier\nx,1\n").unwrap();
        std::fs::write(dir.path().join("_SUCCESS"), "").unwrap();
        let fields = vec![
            Field::new("key", DataType::String),
            Field::new("tier", DataType::Int32),
        ];
        let by_path = StaticTable::files(dir.path(), FileFormat::Csv, fields.clone());
        let by_url = StaticTable::files(
            format!("file://{}", dir.path().display()),
            FileFormat::Csv,
            fields.clone(),
        );
        let (a, b) = (by_path.load().unwrap(), by_url.load().unwrap());
        assert_eq!(a, b);
        assert_eq!(a.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        assert_eq!(by_url.description(), by_path.description());
        let bad = StaticTable::files("s3:///users", FileFormat::Csv, fields);
        let e = bad.load().unwrap_err().to_string();
        assert!(e.contains("no bucket: write s3://bucket/prefix"), "{e}");
    }

    #[test]
    fn a_json_table_reads_values_as_the_file_source_does() {
        use arrow::array::AsArray;
        // An integer timestamp is seconds; a number in a string field its text.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.json"),
            "{\"key\":7,\"ts\":1700000000}\n{\"key\":\"x\",\"ts\":\"2023-11-14T22:13:20Z\"}\n",
        )
        .unwrap();
        let fields = vec![
            Field::new("key", DataType::String),
            Field::new("ts", DataType::Timestamp),
        ];
        let rows = StaticTable::files(dir.path(), FileFormat::Json, fields)
            .load()
            .unwrap();
        let b = arrow::compute::concat_batches(&rows[0].schema(), &rows).unwrap();
        let key = b.column(0).as_string::<i32>();
        assert_eq!((key.value(0), key.value(1)), ("7", "x"));
        let ts = b
            .column(1)
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(ts.values().to_vec(), vec![1_700_000_000_000_000; 2]);
    }

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
