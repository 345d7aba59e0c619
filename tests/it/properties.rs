//! Property tests (proptest): round trips of what the checkpoint stores,
//! window assignment over the whole time range.
