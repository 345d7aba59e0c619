//! weir's integration tests: one binary (each test binary links the whole
//! engine, so they share one).

mod common;
mod conformance;
mod recovery;
mod sinks;
