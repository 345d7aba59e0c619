// Scale-out mistakes: a source that is not a Kafka subscription, a file
// sink (one manifest writer), a trigger that would end, no checkpoint
// shared by the group's processes, and a sort (all rows in one task) with
// complete mode into PostgreSQL (each task has only its own keys).
weir_macros::stream_query! {
    query RateScaled {
        source: rate(rows_per_second = 10),
        sink: console,
        checkpoint: "chk/rate",
        scale_out: "rate-group",
    }
}

weir_macros::stream_query! {
    query FilesScaled {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = "clicks", format = json),
        schema: Click { page: String, event_ts: Timestamp },
        watermark: event_ts delay "1 minute",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: { views: count() },
        sink: files(path = "out/views", format = json),
        trigger: available_now,
        checkpoint: "chk/files",
        scale_out: "views",
    }
}

weir_macros::stream_query! {
    query NoCheckpoint {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = "clicks", format = json),
        schema: Click2 { page: String },
        sink: console,
        scale_out: "no-checkpoint",
    }
}


weir_macros::stream_query! {
    query CompleteToPostgres {
        source: kafka(bootstrap_servers = "127.0.0.1:9092", subscribe = "clicks", format = json),
        schema: Click3 { page: String },
        group_by: [page],
        aggregate: { views: count() },
        order_by: [views desc],
        output_mode: complete,
        sink: postgres(url = "host=127.0.0.1", table = "views", key = [page]),
        checkpoint: "chk/complete",
        scale_out: "complete",
    }
}

fn main() {}
