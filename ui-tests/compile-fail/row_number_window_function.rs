// A non-time window function (row_number over a partition): Spark refuses it
// on a stream; only time windows (in group_by) are supported.
weir_macros::stream_query! {
    query Ranked {
        source: files(path = "data/clicks", format = json),
        schema: Click { user: String, page: String, event_ts: Timestamp },
        with_column: { rn: row_number().over(partition_by(user), order_by(event_ts)) },
        sink: console,
    }
}

fn main() {}
