// A valid continuous query: Spark's rules pass, but weir cannot run
// continuous processing yet, and says so.
weir_macros::stream_query! {
    query Evens {
        source: rate(rows_per_second = 5),
        filter: value % 2 == 0,
        select: { timestamp, half: value / 2 },
        trigger: continuous("1 second"),
        sink: console,
    }
}

fn main() {}
