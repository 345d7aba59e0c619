//! # weir — Structured Streaming for Rust
//!
//! Spark's model — a stream is an unbounded table, each trigger appends rows,
//! the query runs incrementally as micro-batches, a checkpoint makes it
//! restartable — on Arrow and DataFusion, with the pipeline declared by the
//! [`stream_query!`] macro and checked by the compiler.
//!
//! This facade re-exports the engine ([`weir_engine`]), the plan types
//! ([`plan`]) and the macro.
//!
//! ```
//! weir::stream_query! {
//!     /// Counts the rate source's rows per 10-second window.
//!     query RateLab {
//!         source: rate(rows_per_second = 5),
//!         watermark: timestamp delay "10 seconds",
//!         group_by: [window(timestamp, "10 seconds")],
//!         aggregate: { n: count() },
//!         output_mode: update,
//!         sink: console(truncate = false),
//!     }
//! }
//!
//! // The declared plan passed every streaming rule at compile time.
//! assert!(weir::plan::check(&RateLab::plan()).is_empty());
//! assert_eq!(RateLab::NAME, "rate_lab");
//! // The generated result row is typed: a window and a count.
//! let row = RateLabRow { window: weir::Window { start: weir::Timestamp(0), end: weir::Timestamp(10_000_000) }, n: 50 };
//! assert_eq!(row.n, 50);
//! ```

pub use weir_engine::*;
pub use weir_macros::stream_query;
