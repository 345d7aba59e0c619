//! weir's integration tests: one binary (each test binary links the whole
//! engine, so they share one).

mod common;
mod conformance;
mod joins;
mod macros;
mod recovery;
mod sinks;
mod triggers;

// The `ui-tests/pass` cases: valid `stream_query!` declarations, compiled
// (and their tests run) as part of this binary.
#[allow(dead_code)]
#[path = "../../ui-tests/pass/foreach_batch.rs"]
mod pass_foreach_batch;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/page_views.rs"]
mod pass_page_views;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/rate_lab.rs"]
mod pass_rate_lab;
#[allow(dead_code)]
#[path = "../../ui-tests/pass/shop_totals.rs"]
mod pass_shop_totals;
