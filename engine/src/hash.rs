//! The hash maps on the hot path: keyed by group keys (packed integers or
//! bytes in aggregation, Arrow row-format bytes in state), hashed with
//! foldhash (SipHash, std's default, showed up at ~6% of a page-views
//! profile; foldhash is hashbrown's own default and DataFusion's). Keys
//! come from the engine, not from an adversary choosing collisions, but
//! each map is still randomly seeded.

/// A `HashMap` with foldhash.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
