// PostgreSQL and Redis sinks: update mode overwrites rows by key, so it
// needs `key = [...]`; late rows cannot go there yet; `env` takes a name.
weir_macros::stream_query! {
    query NoKey {
        source: memory,
        schema: Click { ts: Timestamp, page: String },
        watermark: ts delay "1 minute",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: update,
        sink: postgres(url = env("WEIR_POSTGRES_URL"), table = "page_views"),
        checkpoint: "chk/no_key",
    }
}

weir_macros::stream_query! {
    query LateToRedis {
        source: memory,
        schema: Click2 { ts: Timestamp, page: String },
        watermark: ts delay "1 minute",
        group_by: [window(ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: update,
        sink: redis(url = env(WEIR_REDIS_URL), key = [window, page]),
        late_rows: redis(url = "redis://127.0.0.1:6380/0"),
        checkpoint: "chk/late",
    }
}

fn main() {}
