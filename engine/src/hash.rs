//! The hash maps on the hot path: keyed by group keys (packed integers or
//! bytes in aggregation, Arrow row-format bytes in state), hashed with
//! foldhash (SipHash, std's default, showed up at ~6% of a page-views
//! profile; foldhash is hashbrown's own default and DataFusion's). Keys
//! come from the engine, not from an adversary choosing collisions, but
//! each map is still randomly seeded.

/// A `HashMap` with foldhash.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// XXH64 of `data` (the public xxHash specification, through twox-hash):
/// Spark's hash for HyperLogLog++ (seed 42) and the state files' checksum
/// (seed 0). Stable across versions and machines.
pub(crate) fn xxh64(data: &[u8], seed: u64) -> u64 {
    twox_hash::XxHash64::oneshot(seed, data)
}

#[cfg(test)]
mod tests {
    use super::xxh64;

    #[test]
    fn xxh64_matches_the_reference_vectors() {
        assert_eq!(xxh64(b"", 0), 0xef46db3751d8e999);
        assert_eq!(xxh64(b"a", 0), 0xd24ec4f1a98c6e5b);
        assert_eq!(xxh64(b"abc", 42), 0x13c1d910702770e6);
        let long = b"0123456789abcdef0123456789abcdef0123";
        assert_eq!(xxh64(long, 0), 0xc4255ba3d1af5461);
        assert_eq!(xxh64(long, 42), 0xd5ed95f3f6ec49dc);
        assert_eq!(xxh64(&1i64.to_le_bytes(), 42), 0x9ed50fd59358d232);
    }
}
