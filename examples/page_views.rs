//! The seed's motivating example: click events in Kafka, page views per
//! page and minute with a 2-minute watermark, update mode, every minute, to
//! the console (or, with `--sink kafka`, exactly once to a Kafka topic). The
//! checkpoint keeps the Kafka offsets: stop it and start it again and it
//! picks up where it left off.
//!
//! ```text
//! bash scripts/kafka.sh start                                        # a local broker: 127.0.0.1:39092
//! cargo run --features kafka --example click_generator &             # 1000 clicks/s into `clicks`
//! cargo run --features kafka --example page_views                    # console, a batch every minute
//! cargo run --features kafka --example page_views -- --trigger "10 seconds" --seconds 60
//! cargo run --features kafka --example page_views -- --sink kafka    # to topic `page_views`, exactly once
//! ```
//!
//! Options: `--bootstrap` (default `$KAFKA_BOOTSTRAP` or 127.0.0.1:39092),
//! `--topic clicks`, `--sink console|kafka`, `--out-topic page_views`,
//! `--at-least-once` (Kafka sink without transactions), `--checkpoint DIR`
//! (default: `weir-page-views-chk[-kafka]` in the temp dir), `--starting-offsets
//! latest|earliest` (a new checkpoint only), `--trigger "1 minute"`,
//! `--max-offsets N` (per trigger), `--available-now` (process what is in the
//! topic, then stop), `--seconds N` (stop after N s), `--group-id G` (commit
//! offsets to group G so Kafka's tools show the lag), `--verbose` (each
//! batch's phase durations on stderr). At the end it prints
//! the throughput: events in, rows out, events per second.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::sink::KafkaSink;
use weir::source::{DecodeExt, KafkaSource, StartingOffsets};
use weir::{Row, Session, Trigger};

weir::stream_query! {
    /// Page views per page and minute from the clicks topic.
    query PageViews {
        // The Kafka source (decoded from JSON) is handed in by `writer_from`.
        source: memory,
        schema: Click { page: String, event_ts: Timestamp },
        watermark: event_ts delay "2 minutes",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: update,
        trigger: processing_time("1 minute"),
        sink: console(truncate = false),
        name: "page_views_1m",
    }
}

/// Sums every batch's progress (recent_progress keeps only the last 100).
#[derive(Default)]
struct Totals {
    batches: AtomicI64,
    events: AtomicI64,
    rows: AtomicI64,
    busy_ms: AtomicI64,
    phases: Mutex<std::collections::BTreeMap<String, i64>>,
    watermark: Mutex<Option<String>>,
    verbose: bool,
}

impl weir::QueryListener for Totals {
    fn on_query_progress(&self, p: &weir::StreamingQueryProgress) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        if self.verbose {
            eprintln!(
                "batch {}: {} events, {} rows out, durations {:?}",
                p.batch_id, p.num_input_rows, p.sink.num_output_rows, p.duration_ms
            );
        }
        self.events.fetch_add(p.num_input_rows, Ordering::Relaxed);
        self.rows
            .fetch_add(p.sink.num_output_rows, Ordering::Relaxed);
        let busy = p.duration_ms.get("triggerExecution").copied().unwrap_or(0);
        self.busy_ms.fetch_add(busy, Ordering::Relaxed);
        let mut phases = self.phases.lock().unwrap();
        for (k, v) in &p.duration_ms {
            *phases.entry(k.clone()).or_default() += v;
        }
        if let Some(w) = p.event_time.get("watermark") {
            *self.watermark.lock().unwrap() = Some(w.clone());
        }
    }
}

/// Where the page views go.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum SinkKind {
    /// The console.
    Console,
    /// A Kafka topic, exactly once.
    Kafka,
}

/// Where a new checkpoint starts reading.
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum Start {
    /// New records only.
    Latest,
    /// Everything in the topic.
    Earliest,
}

/// Page views per page and minute from a Kafka topic of clicks.
#[derive(clap::Parser, Debug)]
struct Args {
    /// The Kafka brokers.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:39092")]
    bootstrap: String,
    /// The clicks topic.
    #[arg(long, default_value = "clicks")]
    topic: String,
    /// Where the page views go.
    #[arg(long, value_enum, default_value_t = SinkKind::Console)]
    sink: SinkKind,
    /// The output topic of `--sink kafka`.
    #[arg(long, default_value = "page_views")]
    out_topic: String,
    /// The Kafka sink without transactions.
    #[arg(long)]
    at_least_once: bool,
    /// The checkpoint location (default: `weir-page-views-chk[-kafka]` in the temp dir).
    #[arg(long)]
    checkpoint: Option<String>,
    /// Where a new checkpoint starts reading.
    #[arg(long, value_enum, default_value_t = Start::Latest)]
    starting_offsets: Start,
    /// The trigger interval, e.g. "10 seconds" (default: 1 minute).
    #[arg(long)]
    trigger: Option<String>,
    /// At most this many offsets per trigger.
    #[arg(long)]
    max_offsets: Option<u64>,
    /// Process what is in the topic, then stop.
    #[arg(long)]
    available_now: bool,
    /// Stop after this many seconds.
    #[arg(long)]
    seconds: Option<u64>,
    /// Commit offsets to this consumer group (so Kafka's tools show the lag).
    #[arg(long)]
    group_id: Option<String>,
    /// Each batch's phase durations on stderr.
    #[arg(long)]
    verbose: bool,
}

fn main() -> weir::Result<()> {
    let a = <Args as clap::Parser>::parse();
    let checkpoint = a.checkpoint.clone().unwrap_or_else(|| {
        let name = if a.sink == SinkKind::Kafka {
            "weir-page-views-chk-kafka"
        } else {
            "weir-page-views-chk"
        };
        std::env::temp_dir()
            .join(name)
            .to_string_lossy()
            .into_owned()
    });
    let mut source = KafkaSource::new(&a.bootstrap)
        .subscribe(&a.topic)
        .fail_on_data_loss(false)
        .starting_offsets(if a.starting_offsets == Start::Earliest {
            StartingOffsets::Earliest
        } else {
            StartingOffsets::Latest
        });
    if let Some(n) = a.max_offsets {
        source = source.max_offsets_per_trigger(n);
    }
    if let Some(g) = &a.group_id {
        source = source.group_id(g);
    }
    let clicks = source.from_json("value", Click::fields());
    let malformed = clicks.malformed_counter();
    let session = Session::new();
    let totals = Arc::new(Totals {
        verbose: a.verbose,
        ..Totals::default()
    });
    session.add_listener(totals.clone());
    let mut writer =
        PageViews::writer_from(&session, clicks.into())?.checkpoint_location(&checkpoint);
    if a.sink == SinkKind::Kafka {
        weir::source::KafkaAdmin::new(&a.bootstrap)?.create_topic(&a.out_topic, 1)?;
        let mut sink = KafkaSink::new(&a.bootstrap)
            .topic(&a.out_topic)
            .json_values()
            .key_columns(&["page"]);
        if a.at_least_once {
            sink = sink.at_least_once();
        }
        writer = writer.sink(sink);
    }
    if a.available_now {
        writer = writer.trigger(Trigger::AvailableNow);
    } else if let Some(t) = &a.trigger {
        writer = writer.trigger(Trigger::processing_time(t)?);
    }
    let started = Instant::now();
    let query = writer.start()?;
    println!(
        "page_views: {} -> {} (checkpoint {checkpoint})",
        a.topic,
        if a.sink == SinkKind::Kafka {
            format!("Kafka topic `{}`", a.out_topic)
        } else {
            "console".into()
        }
    );
    let q = query.clone();
    ctrlc::set_handler(move || {
        eprintln!("stopping (Ctrl+C)...");
        let _ = q.stop();
    })
    .map_err(|e| weir::WeirError::Config(format!("cannot install the Ctrl+C handler: {e}")))?;
    match a.seconds {
        Some(s) => {
            if !query.await_termination(Some(Duration::from_secs(s)))? {
                query.stop()?;
            }
        }
        None => {
            query.await_termination(None)?;
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let events = totals.events.load(Ordering::Relaxed);
    let busy_ms = totals.busy_ms.load(Ordering::Relaxed);
    println!(
        "{} batches: {events} events in, {} rows out, {} malformed; {:.1} s wall, {:.1} s in batches",
        totals.batches.load(Ordering::Relaxed),
        totals.rows.load(Ordering::Relaxed),
        malformed.load(Ordering::Relaxed),
        wall,
        busy_ms as f64 / 1000.0
    );
    if busy_ms > 0 {
        println!(
            "throughput: {:.0} events/s (in batches), {:.0} events/s (wall, startup included)",
            events as f64 * 1000.0 / busy_ms as f64,
            events as f64 / wall
        );
    }
    println!("time per phase (ms): {:?}", totals.phases.lock().unwrap());
    if let Some(w) = totals.watermark.lock().unwrap().as_ref() {
        println!("watermark: {w}");
    }
    Ok(())
}
