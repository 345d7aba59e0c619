//! The plan `stream_query!` emits as a literal agrees with the plan its builder calls
//! build, and both explain the same way.
