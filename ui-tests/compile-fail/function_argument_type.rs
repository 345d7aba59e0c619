// weir's function catalogue types calls at compile time: `hour` takes a
// timestamp, `lpad` two or three arguments.
weir_macros::stream_query! {
    query Hours {
        source: memory,
        schema: Click { page: String, ts: Timestamp },
        select: { page, h: hour(page), p: lpad(page) },
        sink: console,
    }
}

fn main() {}
