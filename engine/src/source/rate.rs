//! The rate source (Spark's `rate` format): `rows_per_second` rows each
//! second with columns `timestamp` and `value`, optionally ramping up over
//! `ramp_up_time`. The offset is seconds since the stream was created; the
//! creation time is kept in the checkpoint (`sources/<i>/0`, written once, on
//! the checkpoint's storage: a local directory or an `s3://` prefix), so
//! replayed batches are identical.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::connectors;
use weir_plan::Field;

use super::{Offset, Source, SourceContext, SourceStorage};
use crate::clock::{Clock, SystemClock};
use crate::error::{Result, WeirError};
use crate::storage::Created;

/// The file in the source's checkpoint directory holding the stream's
/// creation time (`v1` then `{"creationTimeMs":...}`, as Spark writes it).
const START_FILE: &str = "0";

/// Spark's rate source.
pub struct RateSource {
    rows_per_second: u64,
    ramp_up: String,
    ramp_up_secs: i64,
    /// `numPartitions` as given (`None`: Spark's `defaultParallelism`, the
    /// session's worker threads, set when the query opens the source).
    num_partitions: Option<u32>,
    /// The partitions batches are generated in.
    partitions: u32,
    creation_ms: Option<i64>,
    error: Option<String>,
    /// The session's clock (rows per second follow it).
    clock: Arc<dyn Clock>,
}

impl Default for RateSource {
    fn default() -> Self {
        Self::new()
    }
}

impl RateSource {
    /// One row per second, no ramp-up (Spark's defaults).
    pub fn new() -> RateSource {
        RateSource {
            rows_per_second: 1,
            ramp_up: "0 seconds".into(),
            ramp_up_secs: 0,
            num_partitions: None,
            partitions: 1,
            creation_ms: None,
            error: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Rows generated per second (Spark's `rowsPerSecond`, at least 1).
    pub fn rows_per_second(mut self, n: u64) -> Self {
        self.rows_per_second = n;
        self.check(connectors::count("rowsPerSecond", n, u64::MAX));
        self
    }

    /// Time to reach full speed, e.g. `"5 seconds"` (Spark's `rampUpTime`).
    pub fn ramp_up_time(mut self, d: &str) -> Self {
        self.ramp_up = d.to_string();
        if let Some(ms) = self.check(connectors::duration("rampUpTime", d)) {
            self.ramp_up_secs = ms / 1000;
        }
        self
    }

    /// Partitions a batch's rows are generated in, at least 1 (Spark's
    /// `numPartitions`; default: the session's worker threads, as Spark's
    /// is its `defaultParallelism`): partition `p` of `n` takes every `n`th
    /// value from the batch's first plus `p`, each partition its own batches
    /// (runs of at most 64k values), generated in parallel on the query's
    /// worker pool.
    pub fn num_partitions(mut self, n: u32) -> Self {
        if let Some(n) = self.check(connectors::count(
            "numPartitions",
            n.into(),
            u32::MAX.into(),
        )) {
            self.num_partitions = Some(n as u32);
            self.partitions = n as u32;
        }
        self
    }

    /// Keeps the first option the connector table refuses (reported when
    /// the query starts).
    fn check<T>(&mut self, r: std::result::Result<T, connectors::OptionError>) -> Option<T> {
        r.map_err(|e| {
            self.error.get_or_insert(e.to_string());
        })
        .ok()
    }

    /// The source's schema: `timestamp`, `value` (the connector table's
    /// [`connectors::RATE_SCHEMA`]).
    pub fn fields() -> Vec<Field> {
        connectors::fields(connectors::RATE_SCHEMA)
    }

    fn value_at_second(&self, secs: i64) -> i64 {
        let rps = self.rows_per_second as i64;
        let ramp = self.ramp_up_secs;
        let delta = rps / (ramp + 1);
        if secs <= ramp {
            if secs % 2 == 1 {
                (secs + 1) / 2 * delta * secs
            } else {
                secs / 2 * delta * (secs + 1)
            }
        } else {
            self.value_at_second(ramp) + (secs - ramp) * rps
        }
    }
}

impl Source for RateSource {
    fn schema(&self) -> SchemaRef {
        crate::row::arrow_schema(&Self::fields())
    }

    fn description(&self) -> String {
        format!(
            "RateStreamV2[rowsPerSecond={}, rampUpTimeSeconds={}, numPartitions={}]",
            self.rows_per_second, self.ramp_up_secs, self.partitions
        )
    }

    fn use_clock(&mut self, clock: Arc<dyn Clock>) {
        self.clock = clock;
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
        self.partitions = super::rate_partitions::count(self.num_partitions, ctx);
        let dir = &storage.metadata;
        let damaged = |e: String| {
            WeirError::checkpoint(
                dir.display_path(START_FILE),
                format!("damaged rate source metadata ({e}); restore the file or start with a new checkpoint location"),
            )
        };
        let parse = |bytes: &[u8]| -> Result<Option<i64>> {
            let t = std::str::from_utf8(bytes).map_err(|e| damaged(e.to_string()))?;
            let v: serde_json::Value = serde_json::from_str(t.lines().last().unwrap_or(""))
                .map_err(|e| damaged(e.to_string()))?;
            Ok(v.get("creationTimeMs").and_then(|v| v.as_i64()))
        };
        self.creation_ms = match dir.get(START_FILE)? {
            Some(bytes) => parse(&bytes)?,
            None => {
                let ms = self.clock.now_ms();
                let bytes = format!("v1\n{{\"creationTimeMs\":{ms}}}");
                match dir.put_create(START_FILE, bytes.as_bytes())? {
                    Created::Created => Some(ms),
                    // This run's own write, retried after a lost answer.
                    Created::Exists
                        if dir.get(START_FILE)?.as_deref() == Some(bytes.as_bytes()) =>
                    {
                        Some(ms)
                    }
                    Created::Exists => {
                        return Err(WeirError::checkpoint(
                            dir.display_path(START_FILE),
                            "another run of this query recorded the rate source's start time at the same time: only one run may use a checkpoint location; stop the other run",
                        ))
                    }
                }
            }
        };
        Ok(())
    }

    /// Yes: its rows are computed from the offsets.
    fn reads_ahead(&self) -> bool {
        true
    }

    fn latest_offset(&mut self, _start: Option<&Offset>) -> Result<Option<Offset>> {
        let now = self.clock.now_ms();
        let created = self.creation_ms.unwrap_or(now);
        let secs = (now - created).max(0) / 1000;
        Ok(Some(Offset::from(secs)))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let s = start.and_then(|o| o.as_i64()).unwrap_or(0);
        let e = end.as_i64().unwrap_or(0);
        if e <= s {
            return Ok(vec![]);
        }
        let (from, to) = (self.value_at_second(s), self.value_at_second(e));
        let created = self.creation_ms.unwrap_or(0);
        let local_start = created + s * 1000;
        let ms_per_value = ((e - s) * 1000) as f64 / (to - from).max(1) as f64;
        super::rate_partitions::strided(self.schema(), from..to, self.partitions, |v| {
            (local_start + ((v - from) as f64 * ms_per_value).round() as i64) * 1000
        })
    }
}

/// The rate source from its options, checked by the connector table
/// ([`super::from_options`]).
pub(super) fn from_options(
    o: &super::SourceOptions,
) -> std::result::Result<super::BoxSource, connectors::OptionError> {
    let mut s = RateSource::new();
    if let Some(n) = o.number("rowsPerSecond")? {
        s = s.rows_per_second(n);
    }
    if let Some(d) = o.get("rampUpTime") {
        s = s.ramp_up_time(d);
    }
    if let Some(n) = o.number("numPartitions")? {
        s = s.num_partitions(u32::try_from(n).unwrap_or(u32::MAX));
    }
    Ok(Box::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_by_the_connector_table() {
        let open = |mut r: RateSource| {
            let dir = tempfile::tempdir().unwrap();
            r.open(&SourceContext {
                metadata_dir: dir.path().to_path_buf(),
                sync: false,
                default_parallelism: 1,
            })
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        let rule =
            |r: std::result::Result<u64, connectors::OptionError>| r.unwrap_err().to_string();
        let e = open(RateSource::new().rows_per_second(0)).unwrap_err();
        assert!(
            e.ends_with(&rule(connectors::count("rowsPerSecond", 0, u64::MAX))),
            "{e}"
        );
        let e = open(RateSource::new().num_partitions(0)).unwrap_err();
        assert!(
            e.ends_with(&rule(connectors::count(
                "numPartitions",
                0,
                u32::MAX.into()
            ))),
            "{e}"
        );
        let e = open(RateSource::new().ramp_up_time("5 secs later")).unwrap_err();
        let want = connectors::duration("rampUpTime", "5 secs later")
            .unwrap_err()
            .to_string();
        assert!(e.ends_with(&want), "{e}");
        assert!(open(
            RateSource::new()
                .rows_per_second(3)
                .ramp_up_time("0 seconds")
        )
        .is_ok());
    }

    #[test]
    fn generates_spark_values_and_timestamps() {
        let mut r = RateSource::new().rows_per_second(5);
        r.creation_ms = Some(1_000_000);
        let b = r
            .get_batch(Some(&Offset::from(2)), &Offset::from(4))
            .unwrap();
        let cols = super::super::rate_partitions::columns(&b);
        assert_eq!(cols[0].1, (10..20).collect::<Vec<_>>());
        assert_eq!(cols[0].0[..2], [1_002_000_000, 1_002_200_000]);
        // Two partitions: Spark's split, every value keeping its timestamp.
        let mut r = RateSource::new().rows_per_second(5).num_partitions(2);
        r.creation_ms = Some(1_000_000);
        let b = r
            .get_batch(Some(&Offset::from(2)), &Offset::from(4))
            .unwrap();
        let cols = super::super::rate_partitions::columns(&b);
        assert_eq!(
            (&cols[0].1, &cols[1].1),
            (&vec![10, 12, 14, 16, 18], &vec![11, 13, 15, 17, 19])
        );
        assert_eq!(cols[1].0[0], 1_002_200_000);
    }

    #[test]
    fn offsets_follow_the_session_clock() {
        let clock = Arc::new(crate::clock::ManualClock::new(5_000));
        let mut r = RateSource::new().rows_per_second(3);
        r.use_clock(clock.clone());
        r.creation_ms = Some(5_000);
        assert_eq!(r.latest_offset(None).unwrap(), Some(Offset::from(0)));
        clock.advance(std::time::Duration::from_millis(2_500));
        assert_eq!(r.latest_offset(None).unwrap(), Some(Offset::from(2)));
    }

    #[test]
    fn ramps_up_like_spark() {
        let r = RateSource::new()
            .rows_per_second(10)
            .ramp_up_time("4 seconds");
        // speed grows by 10/5 = 2 rows per second each second
        assert_eq!(r.value_at_second(1), 2);
        assert_eq!(r.value_at_second(2), 6);
        assert_eq!(r.value_at_second(4), 20);
        assert_eq!(r.value_at_second(5), 30);
    }

    #[test]
    fn start_time_is_written_once_where_it_always_was() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = SourceContext {
            metadata_dir: dir.path().join("sources").join("0"),
            sync: false,
            default_parallelism: 1,
        };
        let clock = Arc::new(crate::clock::ManualClock::new(7_000));
        let mut r = RateSource::new();
        r.use_clock(clock.clone());
        r.open(&ctx).unwrap();
        let path = ctx.metadata_dir.join("0");
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "v1\n{\"creationTimeMs\":7000}"
        );
        // A restart later reads it back, on a local Storage as on `open`.
        clock.advance(std::time::Duration::from_secs(60));
        let mut again = RateSource::new();
        again.use_clock(clock.clone());
        again.open_on(&ctx, &SourceStorage::local(&ctx)).unwrap();
        assert_eq!(again.creation_ms, Some(7_000));
        assert_eq!(again.latest_offset(None).unwrap(), Some(Offset::from(60)));
        // A damaged file is an error naming it, not a new start time.
        std::fs::write(&path, "v1\nnot json").unwrap();
        let e = RateSource::new().open(&ctx).unwrap_err().to_string();
        assert!(e.contains("damaged rate source metadata"), "{e}");
    }
}
