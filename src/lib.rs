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
//!
//! Joins are declared too, and their rules checked at compile time (an
//! outer stream-stream join needs watermarks and a time range):
//!
//! ```
//! weir::stream_query! {
//!     /// Impressions with their click, if one came within 15 minutes.
//!     query AdClicks {
//!         source: memory,
//!         schema: Impression { imp_ad_id: i32, imp_ts: Timestamp },
//!         watermark: imp_ts delay "10 minutes",
//!         join: {
//!             how: left_outer,
//!             stream: {
//!                 source: memory,
//!                 schema: Click { click_ad_id: i32, click_ts: Timestamp },
//!                 watermark: click_ts delay "20 minutes",
//!             },
//!             on: click_ad_id == imp_ad_id && click_ts >= imp_ts && click_ts <= imp_ts + interval("15 minutes"),
//!         },
//!         sink: memory,
//!     }
//! }
//!
//! // The click's columns can be null: the impression may get no click.
//! let row = AdClicksRow { imp_ad_id: 1, imp_ts: weir::Timestamp(0), click_ad_id: None, click_ts: None };
//! assert!(row.click_ts.is_none());
//! // Both streams are handed in at run time.
//! let _: fn(&weir::Session, weir::source::BoxSource, weir::source::BoxSource) -> weir::Result<weir::StreamWriter> =
//!     AdClicks::writer_from;
//! ```

#![warn(missing_docs)]

pub use weir_engine::*;
pub use weir_macros::stream_query;

/// Used by `stream_query!` around the Kafka source and sink it generates:
/// the expression itself when weir has its `kafka` feature, a clear compile
/// error when it has not.
#[cfg(feature = "kafka")]
#[doc(hidden)]
#[macro_export]
macro_rules! __kafka {
    ($e:expr) => {
        $e
    };
}

/// Used by `stream_query!` around the Kafka source and sink it generates:
/// the expression itself when weir has its `kafka` feature, a clear compile
/// error when it has not.
#[cfg(not(feature = "kafka"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __kafka {
    ($e:expr) => {
        ::core::compile_error!(
            "this query reads or writes Kafka: enable weir's `kafka` feature (weir = { version = \"..\", features = [\"kafka\"] })"
        )
    };
}

/// Used by `stream_query!` around the PostgreSQL sink it generates (see
/// [`__kafka!`]).
#[cfg(feature = "postgres")]
#[doc(hidden)]
#[macro_export]
macro_rules! __postgres {
    ($e:expr) => {
        $e
    };
}

/// Used by `stream_query!` around the PostgreSQL sink it generates (see
/// [`__kafka!`]).
#[cfg(not(feature = "postgres"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __postgres {
    ($e:expr) => {
        ::core::compile_error!(
            "this query writes to PostgreSQL: enable weir's `postgres` feature (weir = { version = \"..\", features = [\"postgres\"] })"
        )
    };
}

/// Used by `stream_query!` around the Redis sink it generates (see
/// [`__kafka!`]).
#[cfg(feature = "redis")]
#[doc(hidden)]
#[macro_export]
macro_rules! __redis {
    ($e:expr) => {
        $e
    };
}

/// Used by `stream_query!` around the Redis sink it generates (see
/// [`__kafka!`]).
#[cfg(not(feature = "redis"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __redis {
    ($e:expr) => {
        ::core::compile_error!(
            "this query writes to Redis: enable weir's `redis` feature (weir = { version = \"..\", features = [\"redis\"] })"
        )
    };
}

/// Used by `stream_query!` for a connector setting written `env("VAR")`:
/// the variable's value, or an error naming it and what it configures.
#[doc(hidden)]
pub fn __env_setting(var: &str, what: &str) -> Result<String> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Ok(v),
        Ok(_) => Err(WeirError::Config(format!(
            "the environment variable `{var}` (for {what}) is empty"
        ))),
        Err(_) => Err(WeirError::Config(format!(
            "the environment variable `{var}` (for {what}) is not set"
        ))),
    }
}
