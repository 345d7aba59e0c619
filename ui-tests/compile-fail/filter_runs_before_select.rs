// The ops run in a fixed order (filter, select, watermark, group_by/aggregate):
// a filter cannot see a column the select computes, and the note says why.
weir_macros::stream_query! {
    query Doubled {
        source: rate(rows_per_second = 5),
        select: { timestamp, doubled: value * 2 },
        filter: doubled > 10,
        sink: console,
    }
}

fn main() {}
