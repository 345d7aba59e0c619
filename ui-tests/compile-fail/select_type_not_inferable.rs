// The macro cannot know what a SQL function outside weir's catalogue returns: it asks for `as Type`.
weir_macros::stream_query! {
    query Hours {
        source: rate(rows_per_second = 5),
        select: { timestamp, h: date_trunc("hour", timestamp) },
        sink: console,
    }
}

fn main() {}
