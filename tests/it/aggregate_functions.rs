//! Spark's further aggregate functions on streams (approx_count_distinct, first, last,
//! collect_list/collect_set, stddev/variance): results batch by batch.
