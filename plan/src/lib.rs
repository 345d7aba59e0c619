//! weir-plan: the logical stream plan as plain data.
//!
//! This crate holds what both the `stream_query!` macro (at compile time) and
//! the engine (at run time) need to agree on: column types, durations, the
//! plan of a streaming query ([`StreamPlan`]) and the streaming rules that
//! decide whether a plan may run ([`check::check`]). It has no heavy
//! dependencies: no arrow, no tokio.
//!
//! ```
//! use weir_plan::{parse_duration_ms, DataType};
//! assert_eq!(parse_duration_ms("10 minutes").unwrap(), 600_000);
//! assert_eq!(DataType::parse("timestamp"), Some(DataType::Timestamp));
//! ```

#![warn(missing_docs)]

pub mod aggregates;
pub mod check;
pub mod connectors;
pub mod duration;
pub mod explain;
pub mod expr;
pub mod functions;
pub mod location;
pub mod plan;
pub mod resolve;
pub mod state_schema;
pub mod types;
pub mod violation;

pub use check::check;
pub use duration::{parse_duration_ms, Duration, DurationError};
pub use location::{LocationError, StorageLocation};
pub use plan::*;
pub use resolve::{resolve, Column, NodeSchema, ResolveError};
pub use state_schema::{classify, Change, StateFingerprint};
pub use types::{DataType, Field};
pub use violation::{Location, Rule, Violation};
