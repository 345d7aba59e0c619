// The macro cannot know what an arbitrary SQL function returns: it asks for `as Type`.
weir_macros::stream_query! {
    query Hours {
        source: rate(rows_per_second = 5),
        select: { timestamp, h: hour(timestamp) },
        sink: console,
    }
}

fn main() {}
