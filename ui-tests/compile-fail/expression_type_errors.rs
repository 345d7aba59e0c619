// Type errors inside Rust-syntax expressions point at the operand.
weir_macros::stream_query! {
    query Views {
        source: files(path = "data/clicks", format = json),
        schema: Click { page: String, n: i64 },
        filter: page + 1 > n,
        select: { page, flag: n && true },
        sink: console,
    }
}

fn main() {}
