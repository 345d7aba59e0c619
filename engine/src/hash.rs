//! The hash maps on the hot path: keyed by group-key bytes (batch-local keys
//! in aggregation, Arrow row-format bytes in state), hashed with aHash
//! (SipHash, std's default, showed up at ~6% of a page-views profile). Keys
//! come from the engine, not from an adversary choosing collisions, but
//! aHash is still randomly seeded.

/// A `HashMap` with aHash.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
