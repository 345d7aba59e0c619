//! [`SessionConfig`]: a session's settings, set by their Spark (or `weir.`)
//! keys; what the session's queries run with.

use std::sync::Arc;
use std::time::Duration;

use weir_plan::WatermarkPolicy;

use crate::clock::{Clock, SystemClock};
use crate::cores::available_cores;
use crate::error::{Result, WeirError};
use crate::state::{MemoryStateProvider, StateStoreProvider};

/// The default of `spark.sql.streaming.weir.collectMaxValues`: the most
/// values `collect_list` (distinct values `collect_set`) keeps per group.
pub const COLLECT_MAX_VALUES_DEFAULT: usize = 10_000;

/// Session settings. Where Spark has a setting, the Spark key is given.
#[derive(Clone)]
pub struct SessionConfig {
    /// `spark.sql.shuffle.partitions`: state partitions per stateful operator
    /// (each runs as its own task of a micro-batch). Unset (`None`): a new
    /// checkpoint takes the number of available cores (Spark's default of 200
    /// suits a cluster, not one process) and an existing checkpoint keeps the
    /// count it recorded; set, it must match an existing checkpoint's.
    pub shuffle_partitions: Option<usize>,
    /// `weir.workerThreads`: threads of the pool a micro-batch's tasks run
    /// on (default: the available cores).
    pub worker_threads: usize,
    /// `weir.readAhead`: while a micro-batch runs, the next batch's rows
    /// are read and routed beside it, as a task of its own on the pool
    /// (see `crate::ops::ahead`; default true); the next batch takes them
    /// if its source still ends there when it starts. Only where that
    /// gives the same results: the default or available-now trigger (or a
    /// zero interval), one source that reads ahead, an aggregation first,
    /// no late-rows side output, not a scale-out task.
    pub read_ahead: bool,
    /// `spark.sql.streaming.noDataMicroBatches.enabled` (default true).
    pub no_data_batches: bool,
    /// `spark.sql.streaming.multipleWatermarkPolicy` (default min).
    pub watermark_policy: WatermarkPolicy,
    /// `spark.sql.streaming.minBatchesToRetain` (default 100).
    pub min_batches_to_retain: u64,
    /// `spark.sql.streaming.asyncLogPurge.enabled` (default true, as
    /// Spark): old `offsets/N` and `commits/N` are removed on a thread of
    /// the query's own, not by the batch that asks for it.
    pub async_log_purge: bool,
    /// `spark.sql.streaming.numRecentProgressUpdates` (default 100).
    pub num_recent_progress_updates: usize,
    /// `spark.sql.streaming.pollingDelay`: idle wait between checks for data (default 10 ms).
    pub polling_delay: Duration,
    /// `weir.checkpoint.fsync`: fsync checkpoint files (default true).
    pub fsync_checkpoint: bool,
    /// `spark.sql.streaming.stateStore.providerClass`: the state store.
    pub state_store: Arc<dyn StateStoreProvider>,
    /// `spark.ui.enabled` (default true): false starts no Streaming UI
    /// where weir would start one (`weir::ui::UiServer::start_if_enabled`).
    pub ui_enabled: bool,
    /// `spark.ui.port` (default 4040): the Streaming UI's first port to try.
    pub ui_port: u16,
    /// `weir.ui.allowedHosts` (comma-separated, default none): `Host` names
    /// the Streaming UI answers besides `localhost`, `127.0.0.1`, `[::1]` and its
    /// bound address (`name` for its port, `name:port`, or `*` for any).
    pub ui_allowed_hosts: Vec<String>,
    /// `spark.sql.streaming.weir.adminToken` (default none): the secret the
    /// Streaming UI's admin endpoints (`POST .../queries/{id}/stop`) want as
    /// `Authorization: Bearer <token>`; unset or empty, they are off.
    pub admin_token: Option<String>,
    /// `spark.sql.streaming.weir.stopOnSignal` (default true): SIGTERM and
    /// SIGINT stop the session's queries gracefully (see [`crate::signals`]).
    pub stop_on_signal: bool,
    /// `spark.sql.streaming.stopTimeout` (default 0: wait as long as it
    /// takes, as Spark): how long a signal waits for the queries to stop
    /// before the process is ended anyway.
    pub stop_timeout: Duration,
    /// S3 settings with Spark's Hadoop names (`spark.hadoop.fs.s3a.endpoint`,
    /// `.access.key`, `.secret.key`, `.endpoint.region`, ...; see
    /// [`crate::storage::S3_SETTINGS`]), over the environment's `AWS_*`, for
    /// checkpoints on `s3://`.
    pub s3: crate::storage::S3Settings,
    /// `spark.sql.streaming.weir.collectMaxValues` (default
    /// 10,000): the most values a group's
    /// `collect_list` (distinct values for `collect_set`) keeps in the
    /// state store. Spark has no bound (a group's array grows until memory
    /// runs out); a group that would pass this one fails the query with an
    /// error naming the aggregate and the group, never a truncated array.
    pub collect_max_values: usize,
    /// The clock the session's queries read time from: processing-time
    /// triggers, batch timestamps and the rate source (default: the
    /// system clock; a [`crate::clock::ManualClock`] in tests).
    pub clock: Arc<dyn Clock>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            shuffle_partitions: None,
            worker_threads: available_cores(),
            read_ahead: true,
            no_data_batches: true,
            watermark_policy: WatermarkPolicy::Min,
            min_batches_to_retain: 100,
            async_log_purge: true,
            num_recent_progress_updates: 100,
            polling_delay: Duration::from_millis(10),
            fsync_checkpoint: true,
            state_store: Arc::new(MemoryStateProvider),
            ui_enabled: true,
            ui_port: 4040,
            ui_allowed_hosts: Vec::new(),
            admin_token: None,
            stop_on_signal: true,
            stop_timeout: Duration::ZERO,
            s3: crate::storage::S3Settings::default(),
            collect_max_values: COLLECT_MAX_VALUES_DEFAULT,
            clock: Arc::new(SystemClock),
        }
    }
}

impl std::fmt::Debug for SessionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionConfig")
            .field("shuffle_partitions", &self.shuffle_partitions)
            .field("worker_threads", &self.worker_threads)
            .field("read_ahead", &self.read_ahead)
            .field("no_data_batches", &self.no_data_batches)
            .field("watermark_policy", &self.watermark_policy)
            .field("min_batches_to_retain", &self.min_batches_to_retain)
            .field("async_log_purge", &self.async_log_purge)
            .field("fsync_checkpoint", &self.fsync_checkpoint)
            .field("state_store", &self.state_store.name())
            .field("ui_enabled", &self.ui_enabled)
            .field("ui_port", &self.ui_port)
            .field("ui_allowed_hosts", &self.ui_allowed_hosts)
            .field("admin_token", &self.admin_token.as_ref().map(|_| "(set)"))
            .field("stop_on_signal", &self.stop_on_signal)
            .field("stop_timeout", &self.stop_timeout)
            .field("s3", &self.s3)
            .field("collect_max_values", &self.collect_max_values)
            .field("clock", &self.clock.name())
            .finish()
    }
}

impl SessionConfig {
    /// Sets a setting by its Spark (or `weir.`) key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        let bad = || WeirError::Config(format!("invalid value `{value}` for `{key}`"));
        let flag = || match value.to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(bad()),
        };
        match key {
            "spark.sql.shuffle.partitions" => {
                let n: usize = value.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                self.shuffle_partitions = Some(n)
            }
            "weir.workerThreads" => {
                let n: usize = value.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                self.worker_threads = n
            }
            "weir.readAhead" => self.read_ahead = flag()?,
            "spark.sql.streaming.noDataMicroBatches.enabled" => self.no_data_batches = flag()?,
            "spark.sql.streaming.multipleWatermarkPolicy" => {
                self.watermark_policy = match value.to_ascii_lowercase().as_str() {
                    "min" => WatermarkPolicy::Min,
                    "max" => WatermarkPolicy::Max,
                    _ => return Err(bad()),
                }
            }
            // Spark's rule: positive (and here at most `i64::MAX`, a batch id).
            "spark.sql.streaming.minBatchesToRetain" => {
                self.min_batches_to_retain = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=i64::MAX as u64).contains(n))
                    .ok_or_else(bad)?
            }
            "spark.sql.streaming.asyncLogPurge.enabled" => self.async_log_purge = flag()?,
            "spark.sql.streaming.numRecentProgressUpdates" => {
                self.num_recent_progress_updates = value.parse().map_err(|_| bad())?
            }
            "spark.sql.streaming.pollingDelay" => {
                self.polling_delay = Duration::from_millis(
                    weir_plan::parse_duration_ms(value).map_err(|_| bad())? as u64,
                )
            }
            "weir.checkpoint.fsync" => self.fsync_checkpoint = flag()?,
            "spark.ui.enabled" => self.ui_enabled = flag()?,
            "spark.ui.port" => self.ui_port = value.trim().parse().map_err(|_| bad())?,
            "weir.ui.allowedHosts" => {
                self.ui_allowed_hosts = value
                    .split(',')
                    .map(str::trim)
                    .filter(|h| !h.is_empty())
                    .map(str::to_string)
                    .collect()
            }
            "spark.sql.streaming.weir.adminToken" => {
                self.admin_token = Some(value.trim().to_string()).filter(|t| !t.is_empty())
            }
            "spark.sql.streaming.weir.stopOnSignal" => self.stop_on_signal = flag()?,
            "spark.sql.streaming.weir.collectMaxValues" => {
                let n: usize = value.trim().parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                self.collect_max_values = n
            }
            "spark.sql.streaming.stopTimeout" => {
                // Spark's value is milliseconds; a unit (`30s`) is taken too.
                // Zero or negative: wait as long as it takes.
                let ms = match value.trim().parse::<i64>() {
                    Ok(ms) => ms,
                    Err(_) => weir_plan::parse_duration_ms(value).map_err(|_| bad())?,
                };
                self.stop_timeout = Duration::from_millis(ms.max(0) as u64)
            }
            "spark.sql.streaming.stateStore.providerClass" => match value {
                "memory"
                | "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider" => {
                    self.state_store = Arc::new(MemoryStateProvider)
                }
                #[cfg(feature = "rocksdb")]
                "rocksdb"
                | "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" => {
                    self.state_store = Arc::new(crate::state::RocksDbStateProvider)
                }
                #[cfg(not(feature = "rocksdb"))]
                "rocksdb"
                | "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider" => {
                    return Err(WeirError::Config(
                        "the RocksDB state store needs weir built with the `rocksdb` feature"
                            .into(),
                    ))
                }
                _ => {
                    return Err(WeirError::Config(format!(
                        "unknown state store provider `{value}` (available: memory, rocksdb)"
                    )))
                }
            },
            k if k.starts_with("spark.hadoop.fs.s3a.") || k.starts_with("weir.s3.") => {
                if !self.s3.set(k, value)? {
                    return Err(WeirError::Config(format!(
                        "unknown setting `{k}` (S3 settings: {})",
                        crate::storage::S3_SETTINGS
                            .iter()
                            .map(|(name, _)| *name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
            }
            _ => return Err(WeirError::Config(format!("unknown setting `{key}`"))),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts `conf` refuses `value` for `key`, naming the value.
    fn refused(conf: &mut SessionConfig, key: &str, value: &str) {
        let err = conf.set(key, value).unwrap_err().to_string();
        assert!(err.contains(&format!("invalid value `{value}`")), "{err}");
    }

    #[test]
    fn settings_are_set_by_their_spark_keys() {
        let mut conf = SessionConfig::default();
        conf.set("spark.sql.shuffle.partitions", "3").unwrap();
        conf.set("spark.sql.streaming.multipleWatermarkPolicy", "MAX")
            .unwrap();
        conf.set("spark.sql.streaming.stopTimeout", "30s").unwrap();
        assert_eq!(conf.shuffle_partitions, Some(3));
        assert_eq!(conf.watermark_policy, WatermarkPolicy::Max);
        assert_eq!(conf.stop_timeout, Duration::from_secs(30));
        assert_eq!(conf.collect_max_values, COLLECT_MAX_VALUES_DEFAULT);
        conf.set("spark.sql.streaming.weir.collectMaxValues", "50")
            .unwrap();
        assert_eq!(conf.collect_max_values, 50);
        for bad in ["0", "-1", "many"] {
            refused(&mut conf, "spark.sql.streaming.weir.collectMaxValues", bad);
        }
        assert_eq!(conf.collect_max_values, 50);
        assert!(conf.async_log_purge, "Spark's default");
        conf.set("spark.sql.streaming.asyncLogPurge.enabled", "false")
            .unwrap();
        assert!(!conf.async_log_purge);
        conf.set("spark.sql.streaming.minBatchesToRetain", "7")
            .unwrap();
        assert_eq!(conf.min_batches_to_retain, 7);
        // Positive, as Spark requires, and a batch id.
        for bad in ["0", "-1", "9223372036854775808"] {
            refused(&mut conf, "spark.sql.streaming.minBatchesToRetain", bad);
        }
        assert_eq!(conf.min_batches_to_retain, 7);
    }

    #[test]
    fn a_bad_value_or_an_unknown_key_is_refused_naming_it() {
        let mut conf = SessionConfig::default();
        let err = conf
            .set("spark.sql.shuffle.partitions", "0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid value `0`"), "{err}");
        assert!(err.contains("spark.sql.shuffle.partitions"), "{err}");
        let err = conf
            .set("spark.sql.shufle.partitions", "3")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown setting `spark.sql.shufle.partitions`"),
            "{err}"
        );
        assert_eq!(conf.shuffle_partitions, None);
    }

    #[test]
    fn the_worker_pool_defaults_to_the_available_cores() {
        assert_eq!(SessionConfig::default().worker_threads, available_cores());
    }
}
