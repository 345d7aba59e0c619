//! # weir — Structured Streaming for Rust
//!
//! Spark's model — a stream is an unbounded table, each trigger appends rows,
//! the query runs incrementally as micro-batches, a checkpoint makes it
//! restartable — on Arrow and DataFusion, with the pipeline declared by the
//! [`stream_query!`] macro and checked by the compiler.
//!
//! This facade re-exports the engine ([`weir_engine`]), the plan types
//! ([`plan`]) and the macro.

pub use weir_engine::*;
pub use weir_macros::stream_query;
