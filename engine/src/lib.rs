//! weir-engine: the runtime of weir, Structured Streaming for Rust.
//!
//! A stream is an unbounded table; each trigger appends rows; a query runs
//! incrementally as micro-batches over Arrow batches, with Spark's semantics
//! (watermarks, output modes, no-data batches) and a Spark-style checkpoint.
//!
//! ```no_run
//! use weir_engine::{functions::*, sink::ConsoleSink, source::RateSource, Session, Trigger};
//! use weir_plan::OutputMode;
//!
//! let session = Session::new();
//! let query = session
//!     .read_stream(RateSource::new().rows_per_second(5))
//!     .with_watermark("timestamp", "10 seconds")
//!     .group_by(vec![window("timestamp", "10 seconds")])
//!     .agg(vec![count_star("n")])
//!     .write_stream()
//!     .output_mode(OutputMode::Update)
//!     .trigger(Trigger::processing_time("5 seconds")?)
//!     .sink(ConsoleSink::new().truncate(false))
//!     .checkpoint_location("/tmp/weir-lab-chk")
//!     .start()?;
//! query.await_termination(Some(std::time::Duration::from_secs(60)))?;
//! # Ok::<(), weir_engine::WeirError>(())
//! ```

#![warn(missing_docs)]

pub mod checkpoint;
pub mod clock;
mod config;
mod connector;
mod cores;
pub mod dataset;
pub mod error;
pub mod failpoint;
pub mod functions;
mod hash;
pub mod ops;
pub mod progress;
pub mod query;
pub mod row;
#[cfg(feature = "kafka")]
pub mod scale;
pub mod session;
pub mod signals;
pub mod sink;
pub mod source;
pub mod state;
pub mod storage;
pub mod table;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "ui")]
pub mod ui;

pub use arrow;
pub use dataset::{DataStream, GroupedStream, StreamWriter};
pub use error::{Result, WeirError};
pub use progress::{QueryListener, QueryStatus, StateOperatorProgress, StreamingQueryProgress};
pub use query::{StreamingQuery, Trigger};
pub use row::{ArrowValue, Row, Timestamp, Window};
pub use session::{Session, SessionConfig};
pub use table::StaticTable;
pub use weir_plan as plan;
