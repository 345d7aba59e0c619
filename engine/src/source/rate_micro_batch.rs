//! Spark's `rate-micro-batch` source: exactly `rows_per_batch` rows per
//! micro-batch, `value` counting up, `timestamp` advancing by
//! `advance_millis_per_batch` per batch from `start_timestamp`. Data is
//! always available, so batches run back to back: the source for
//! throughput benchmarks. Replayable: batch N's rows depend only on N.

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use weir_plan::connectors;

use super::{Offset, Source};
use crate::error::Result;

/// Spark's `rate-micro-batch` source.
pub struct RateMicroBatchSource {
    rows_per_batch: u64,
    /// `numPartitions` as given (`None`: Spark's `defaultParallelism`, the
    /// session's worker threads, set when the query opens the source).
    num_partitions: Option<u32>,
    /// The partitions batches are generated in.
    partitions: u32,
    start_ms: i64,
    advance_ms: i64,
    /// Stop offering batches after this many (None: forever).
    max_batches: Option<i64>,
    /// Under the available-now trigger: the batch that was next when the
    /// query started is the last (Spark's target offset).
    available_now: bool,
    target: Option<i64>,
    /// The first option the connector table refused (fails `open`).
    error: Option<String>,
}

impl RateMicroBatchSource {
    /// `rows_per_batch` rows per batch (Spark's `rowsPerBatch`, 1 to
    /// 100,000,000), timestamps from 0 advancing 1 s per batch.
    pub fn new(rows_per_batch: u64) -> RateMicroBatchSource {
        let mut s = RateMicroBatchSource {
            rows_per_batch,
            num_partitions: None,
            partitions: 1,
            start_ms: 0,
            advance_ms: 1000,
            max_batches: None,
            available_now: false,
            target: None,
            error: None,
        };
        s.check(rows_per_batch, "rowsPerBatch");
        s
    }

    /// Checks `value` by the connector table's rule for `option`; keeps
    /// the first refusal.
    fn check(&mut self, value: impl ToString, option: &str) {
        let spec = connectors::source("rate-micro-batch").and_then(|s| s.option(option));
        if let Some(spec) = spec {
            let r = connectors::check_value(spec.kind, spec.name, &value.to_string());
            if let Err(e) = r {
                self.error.get_or_insert(e.to_string());
            }
        }
    }

    /// Partitions a batch's rows are generated in (Spark's `numPartitions`,
    /// at least 1; default: the session's worker threads, as Spark's is its
    /// `defaultParallelism`): partition `p` of `n` takes every `n`th value
    /// from the batch's first plus `p`, each partition its own batches (runs
    /// of at most 64k values), generated in parallel on the query's worker
    /// pool.
    pub fn num_partitions(mut self, n: u32) -> Self {
        self.num_partitions = Some(n);
        self.partitions = n;
        self.check(n, "numPartitions");
        self
    }

    /// The first batch's timestamp (ms since the epoch; Spark's `startTimestamp`).
    pub fn start_timestamp(mut self, ms: i64) -> Self {
        self.start_ms = ms;
        self.check(ms, "startTimestamp");
        self
    }

    /// Event time advance per batch (Spark's `advanceMillisPerBatch`).
    pub fn advance_millis_per_batch(mut self, ms: i64) -> Self {
        self.advance_ms = ms;
        self.check(ms, "advanceMillisPerBatch");
        self
    }

    /// Offer only this many batches (then no new data), e.g. for benchmarks.
    pub fn max_batches(mut self, n: i64) -> Self {
        self.max_batches = Some(n);
        self
    }
}

impl Source for RateMicroBatchSource {
    /// Yes: it keeps no log: a batch's rows follow from its offsets.
    fn log_on_storage(&self) -> bool {
        true
    }

    fn open(&mut self, ctx: &super::SourceContext) -> Result<()> {
        if let Some(e) = &self.error {
            return Err(crate::error::WeirError::Config(e.clone()));
        }
        self.partitions = super::rate_partitions::count(self.num_partitions, ctx);
        Ok(())
    }

    fn schema(&self) -> SchemaRef {
        crate::row::arrow_schema(&super::rate::RateSource::fields())
    }

    fn description(&self) -> String {
        format!(
            "RatePerMicroBatchStream[rowsPerBatch={}, numPartitions={}, startTimestamp={}, advanceMsPerBatch={}]",
            self.rows_per_batch, self.partitions, self.start_ms, self.advance_ms
        )
    }

    /// Yes: its rows are computed from the offsets.
    fn reads_ahead(&self) -> bool {
        true
    }

    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>> {
        let next = start.and_then(|o| o.as_i64()).map(|b| b + 1).unwrap_or(0);
        let mut latest = match self.max_batches {
            Some(m) if next >= m => m - 1,
            _ => next,
        };
        if self.available_now {
            latest = latest.min(*self.target.get_or_insert(latest));
        }
        Ok(Some(Offset::from(latest)))
    }

    fn prepare_for_available_now(&mut self) -> Result<()> {
        self.available_now = true;
        self.target = None;
        Ok(())
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let from = start.and_then(|o| o.as_i64()).map(|b| b + 1).unwrap_or(0);
        let to = end.as_i64().unwrap_or(-1);
        let mut out = Vec::new();
        for b in from..=to {
            let n = i64::try_from(self.rows_per_batch).unwrap_or(i64::MAX);
            // Every row of a batch has the batch's timestamp.
            let ts = self
                .start_ms
                .saturating_add(b.saturating_mul(self.advance_ms))
                .saturating_mul(1000);
            let values = b.saturating_mul(n)..b.saturating_add(1).saturating_mul(n);
            out.extend(super::rate_partitions::strided(
                self.schema(),
                values,
                self.partitions,
                |_| ts,
            )?);
        }
        Ok(out)
    }
}

/// The rate-micro-batch source from its options, checked by the connector
/// table ([`super::from_options`]).
pub(super) fn from_options(
    o: &super::SourceOptions,
) -> std::result::Result<super::BoxSource, connectors::OptionError> {
    let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let mut s = RateMicroBatchSource::new(o.number("rowsPerBatch")?.unwrap_or(1));
    if let Some(n) = o.number("numPartitions")? {
        s = s.num_partitions(u32::try_from(n).unwrap_or(u32::MAX));
    }
    if let Some(ms) = o.number("startTimestamp")? {
        s = s.start_timestamp(signed(ms));
    }
    if let Some(ms) = o.number("advanceMillisPerBatch")? {
        s = s.advance_millis_per_batch(signed(ms));
    }
    Ok(Box::new(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builder refuses what the connector table refuses, with its message.
    #[test]
    fn options_are_checked_by_the_connector_table() {
        let open = |mut s: RateMicroBatchSource| {
            let ctx = crate::source::SourceContext {
                metadata_dir: std::env::temp_dir(),
                sync: false,
                default_parallelism: 1,
            };
            s.open(&ctx).map_err(|e| e.to_string())
        };
        let spec = connectors::source("rate-micro-batch").unwrap();
        let rule = |name: &str, v: &str| {
            let o = spec.option(name).unwrap();
            connectors::check_value(o.kind, o.name, v)
                .unwrap_err()
                .to_string()
        };
        let e = open(RateMicroBatchSource::new(0)).unwrap_err();
        assert!(e.ends_with(&rule("rowsPerBatch", "0")), "{e}");
        assert!(
            e.contains("`rowsPerBatch` takes a whole number from 1 to 100000000"),
            "{e}"
        );
        let e = open(RateMicroBatchSource::new(1).start_timestamp(-1)).unwrap_err();
        assert!(e.ends_with(&rule("startTimestamp", "-1")), "{e}");
        let e = open(RateMicroBatchSource::new(1).advance_millis_per_batch(-5)).unwrap_err();
        assert!(e.ends_with(&rule("advanceMillisPerBatch", "-5")), "{e}");
        assert!(open(RateMicroBatchSource::new(10).advance_millis_per_batch(0)).is_ok());
        let e = open(RateMicroBatchSource::new(10).num_partitions(0)).unwrap_err();
        assert!(e.ends_with(&rule("numPartitions", "0")), "{e}");
    }

    /// Batch `b`'s values `b * rows .. (b + 1) * rows`, each partition `p`
    /// of `n` every `n`th from the first plus `p` (Spark's split), all at
    /// the batch's timestamp.
    #[test]
    fn a_batch_is_split_over_its_partitions_as_spark_splits_it() {
        let mut s = RateMicroBatchSource::new(10)
            .num_partitions(3)
            .start_timestamp(1_000)
            .advance_millis_per_batch(500);
        let batches = s
            .get_batch(Some(&Offset::from(0)), &Offset::from(1))
            .unwrap();
        let cols = super::super::rate_partitions::columns(&batches);
        let values: Vec<&Vec<i64>> = cols.iter().map(|(_, v)| v).collect();
        assert_eq!(
            values,
            vec![&vec![10, 13, 16, 19], &vec![11, 14, 17], &vec![12, 15, 18]]
        );
        for (ts, _) in &cols {
            assert!(ts.iter().all(|&t| t == 1_500_000), "{ts:?}");
        }
    }

    /// Without `numPartitions`, a batch is split over Spark's default,
    /// `defaultParallelism`: the session's worker threads, as the query
    /// opens the source. A given `numPartitions` is kept.
    #[test]
    fn partitions_default_to_the_sessions_worker_threads() {
        let ctx = |workers| crate::source::SourceContext {
            metadata_dir: std::env::temp_dir(),
            sync: false,
            default_parallelism: workers,
        };
        let values = |s: &mut RateMicroBatchSource| {
            let batches = s.get_batch(None, &Offset::from(0)).unwrap();
            let cols = super::super::rate_partitions::columns(&batches);
            cols.into_iter().map(|(_, v)| v).collect::<Vec<_>>()
        };
        let mut s = RateMicroBatchSource::new(5);
        s.open(&ctx(2)).unwrap();
        assert_eq!(values(&mut s), vec![vec![0, 2, 4], vec![1, 3]]);
        assert!(
            s.description().contains("numPartitions=2"),
            "{}",
            s.description()
        );
        let mut s = RateMicroBatchSource::new(5).num_partitions(1);
        s.open(&ctx(2)).unwrap();
        assert_eq!(values(&mut s), vec![vec![0, 1, 2, 3, 4]]);
        assert!(
            s.description().contains("numPartitions=1"),
            "{}",
            s.description()
        );
    }
}
