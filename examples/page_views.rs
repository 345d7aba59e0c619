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
//! offsets to group G so Kafka's tools show the lag), `--source-option
//! KEY=VALUE` (a Kafka source option by Spark's name, e.g.
//! `kafka.fetch.max.bytes=52428800`), `--verbose` (each batch's phase
//! durations on stderr). Log lines go to stderr (`RUST_LOG`; by default
//! `warn,weir_engine::scale=info`: warnings and a scale-out group's task
//! moves). At the end it prints
//! the throughput: events in, rows out, events per second.
//!
//! Scale-out (see README, "Running on many machines"): start the same
//! command in several processes with `--scale-out GROUP` and one shared
//! `--checkpoint`; they divide the topic's partitions. `--group-by key`
//! counts per window and Kafka message key instead of per page (the clicks'
//! key is the user): that aggregation runs whole in each input partition's
//! task, while the default (`page`) runs behind a repartition topic.
//! `--conf KEY=VALUE` sets a session setting (e.g. `weir.workerThreads=1`),
//! `--trigger default` runs batches back to back, and `--stats-file PATH`
//! keeps a one-line JSON summary of this process's batches up to date
//! (events per stage, last busy moment, phase times; scripts/scale_bench.sh
//! reads it to tell when the whole input is processed).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir::functions::{col, count_star, window};
use weir::plan::OutputMode;
use weir::sink::{ConsoleSink, KafkaSink};
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
    /// Per stage, for `--stats-file` (scale-out: each task reports its own
    /// batches; a task reading the input topic is the first stage).
    stages: Mutex<Stats>,
    /// The input topic (tells the first stage's tasks from the second's).
    topic: String,
    stats_file: Option<std::path::PathBuf>,
}

/// What `--stats-file` holds: this process's batches so far.
#[derive(Default, serde::Serialize)]
struct Stats {
    /// Process id.
    pid: u32,
    /// Input events read by tasks of the input topic (a single-process
    /// query: all of them).
    input_events: i64,
    /// Rows read by second-stage tasks (from the repartition topic).
    repartition_events: i64,
    /// Batches that read rows, per stage.
    input_batches: i64,
    repartition_batches: i64,
    /// Wall clock (ms since the epoch) when the first batch that read rows
    /// started, and when the last batch that read rows ended.
    first_busy_ms: Option<i64>,
    last_busy_ms: Option<i64>,
    /// Summed phase durations (ms) of batches that read rows, per stage.
    input_phases: std::collections::BTreeMap<String, i64>,
    repartition_phases: std::collections::BTreeMap<String, i64>,
    /// The tasks seen (scale-out: one per partition this process ran).
    tasks: std::collections::BTreeSet<String>,
}

impl Totals {
    /// Adds a batch to the per-stage stats and rewrites `--stats-file`.
    fn record(&self, p: &weir::StreamingQueryProgress) {
        let Some(path) = &self.stats_file else {
            return;
        };
        let now = chrono::Utc::now().timestamp_millis();
        let mut guard = self.stages.lock().unwrap();
        let st = &mut *guard;
        st.pid = std::process::id();
        if let Some(n) = &p.name {
            st.tasks.insert(n.clone());
        }
        if p.num_input_rows > 0 {
            let first_stage = p.sources.iter().any(|s| {
                s.end_offset
                    .as_ref()
                    .is_some_and(|o| o.get(&self.topic).is_some())
            });
            let (events, batches, phases) = if first_stage {
                (
                    &mut st.input_events,
                    &mut st.input_batches,
                    &mut st.input_phases,
                )
            } else {
                (
                    &mut st.repartition_events,
                    &mut st.repartition_batches,
                    &mut st.repartition_phases,
                )
            };
            *events += p.num_input_rows;
            *batches += 1;
            for (k, v) in &p.duration_ms {
                *phases.entry(k.clone()).or_default() += v;
            }
            let took = p.duration_ms.get("triggerExecution").copied().unwrap_or(0);
            st.first_busy_ms = Some(st.first_busy_ms.map_or(now - took, |f| f.min(now - took)));
            st.last_busy_ms = Some(now);
        }
        // Written whole, then renamed: a reader never sees half a line.
        let tmp = path.with_extension("tmp");
        let line = serde_json::to_string(&*st).unwrap_or_default();
        if std::fs::write(&tmp, line + "\n").is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

impl weir::QueryListener for Totals {
    fn on_query_progress(&self, p: &weir::StreamingQueryProgress) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        if self.verbose {
            eprintln!(
                "batch {}{}: {} events, {} rows out, durations {:?}",
                p.batch_id,
                p.name
                    .as_ref()
                    .map(|n| format!(" of {n}"))
                    .unwrap_or_default(),
                p.num_input_rows,
                p.sink.num_output_rows,
                p.duration_ms
            );
        }
        self.record(p);
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

/// What the views are counted by (besides the minute).
#[derive(Clone, Copy, Debug, PartialEq, clap::ValueEnum)]
enum GroupBy {
    /// The page (the declared query; under scale-out, behind a repartition topic).
    Page,
    /// The Kafka message key (the user, for click_generator's clicks): under
    /// scale-out each input partition's task aggregates on its own.
    Key,
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
    /// The trigger interval, e.g. "10 seconds" (default: 1 minute), or
    /// `default`: each batch as soon as the previous one finished.
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
    /// Run as one process of a query spread over many: every process
    /// started with this consumer group and the same `--checkpoint`
    /// divides the topic's partitions (runs until stopped).
    #[arg(long, value_name = "GROUP")]
    scale_out: Option<String>,
    /// What the views are counted by (besides the minute).
    #[arg(long, value_enum, default_value_t = GroupBy::Page)]
    group_by: GroupBy,
    /// A session setting, KEY=VALUE (repeatable), e.g. weir.workerThreads=1.
    #[arg(long = "conf", value_name = "KEY=VALUE")]
    confs: Vec<String>,
    /// A source option, KEY=VALUE (repeatable; Spark's Kafka option names,
    /// e.g. kafka.fetch.max.bytes=52428800).
    #[arg(long = "source-option", value_name = "KEY=VALUE")]
    source_options: Vec<String>,
    /// Keep a one-line JSON summary of this process's batches in this file.
    #[arg(long, value_name = "PATH")]
    stats_file: Option<std::path::PathBuf>,
}

fn main() -> weir::Result<()> {
    let a = <Args as clap::Parser>::parse();
    // Log lines on stderr: by default the engine's warnings and a scale-out
    // group's task moves (`RUST_LOG` overrides, e.g. `RUST_LOG=debug`).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,weir_engine::scale=info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
    for kv in &a.source_options {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            weir::WeirError::Config(format!(
                "--source-option {kv}: expected KEY=VALUE, e.g. --source-option kafka.fetch.max.bytes=52428800"
            ))
        })?;
        source = source.option(k.trim(), v.trim());
    }
    let clicks = source.from_json("value", Click::fields());
    let malformed = clicks.malformed_counter();
    let mut conf = weir::SessionConfig::default();
    for kv in &a.confs {
        let (k, v) = kv.split_once('=').ok_or_else(|| {
            weir::WeirError::Config(format!(
                "--conf {kv}: expected KEY=VALUE, e.g. --conf weir.workerThreads=1"
            ))
        })?;
        conf.set(k.trim(), v.trim())?;
    }
    let session = Session::with_config(conf);
    let totals = Arc::new(Totals {
        verbose: a.verbose,
        topic: a.topic.clone(),
        stats_file: a.stats_file.clone(),
        ..Totals::default()
    });
    session.add_listener(totals.clone());
    let key_column = match a.group_by {
        GroupBy::Page => "page",
        GroupBy::Key => "key",
    };
    let mut writer = match a.group_by {
        GroupBy::Page => PageViews::writer_from(&session, clicks.into())?,
        // The declared query with the message key for the page.
        GroupBy::Key => session
            .read_stream(clicks.keep(&["key"]))
            .with_watermark("event_ts", "2 minutes")
            .group_by(vec![window("event_ts", "1 minute"), col("key")])
            .agg(vec![count_star("views")])
            .write_stream()
            .output_mode(OutputMode::Update)
            .trigger(Trigger::processing_time("1 minute")?)
            .query_name(PageViews::NAME)
            .sink(ConsoleSink::new().truncate(false)),
    }
    .checkpoint_location(&checkpoint);
    if a.sink == SinkKind::Kafka {
        weir::source::KafkaAdmin::new(&a.bootstrap)?.create_topic(&a.out_topic, 1)?;
        let mut sink = KafkaSink::new(&a.bootstrap)
            .topic(&a.out_topic)
            .json_values()
            .key_columns(&[key_column]);
        if a.at_least_once {
            sink = sink.at_least_once();
        }
        writer = writer.sink(sink);
    }
    if a.available_now {
        writer = writer.trigger(Trigger::AvailableNow);
    } else if a.trigger.as_deref() == Some("default") {
        writer = writer.trigger(Trigger::Default);
    } else if let Some(t) = &a.trigger {
        writer = writer.trigger(Trigger::processing_time(t)?);
    }
    if let Some(g) = &a.scale_out {
        writer = writer.scale_out(g);
    }
    let started = Instant::now();
    let query = writer.start()?;
    println!(
        "page_views{}: {} -> {} (checkpoint {checkpoint})",
        a.scale_out
            .as_ref()
            .map(|g| format!(" (scale-out, group {g})"))
            .unwrap_or_default(),
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
