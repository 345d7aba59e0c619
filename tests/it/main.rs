//! weir's integration tests: one binary (each test binary links the whole
//! engine, so they share one).

mod aggregate_functions;
mod common;
mod conformance;
mod crash_matrix;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod external_sinks;
mod joins;
#[cfg(feature = "kafka")]
mod kafka;
mod macros;
#[cfg(feature = "ui")]
mod operate;
mod partitions;
mod plan_agreement;
mod properties;
mod query_changes;
mod read_ahead;
mod recovery;
mod reliability;
mod s3;
mod s3_tables;
#[cfg(feature = "kafka")]
mod scale_out;
mod sessions;
mod sinks;
mod spark_calls;
mod state_read;
#[cfg(feature = "testing")]
mod testing_kit;
mod triggers;
#[cfg(feature = "ui")]
mod web_ui;

// The `ui-tests/pass` cases: valid `stream_query!` declarations, compiled
// (and their tests run) as part of this binary.
#[allow(dead_code)]
#[path = "../../ui-tests/pass/clicks_enriched.rs"]
mod pass_clicks_enriched;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/dedup_events.rs"]
mod pass_dedup_events;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/files_append.rs"]
mod pass_files_append;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/foreach_batch.rs"]
mod pass_foreach_batch;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/foreach_rows.rs"]
mod pass_foreach_rows;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/joins.rs"]
mod pass_joins;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/late_rows.rs"]
mod pass_late_rows;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/micro_batches.rs"]
mod pass_micro_batches;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/noop_sink.rs"]
mod pass_noop_sink;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/page_views.rs"]
mod pass_page_views;
#[cfg(feature = "kafka")]
#[allow(dead_code)]
#[path = "../../ui-tests/pass/page_views_scaled.rs"]
mod pass_page_views_scaled;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/rate_lab.rs"]
mod pass_rate_lab;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/s3_paths.rs"]
mod pass_s3_paths;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/shop_totals.rs"]
mod pass_shop_totals;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/top_shops.rs"]
mod pass_top_shops;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/user_sessions.rs"]
mod pass_user_sessions;
