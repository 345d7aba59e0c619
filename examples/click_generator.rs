//! Produces realistic click events to a Kafka topic for the `page_views`
//! example: 1000 pages (a few popular, a long tail), users, event times a
//! little out of order, and a small share of events so late that a 2-minute
//! watermark drops them.
//!
//! ```text
//! bash scripts/kafka.sh start                                     # a local broker: 127.0.0.1:39092
//! cargo run --features kafka --example click_generator            # 1000 clicks/s until Ctrl+C
//! cargo run --features kafka --example click_generator -- --rate 5000 --seconds 30
//! cargo run --features kafka --example click_generator -- --rate 0 --count 1000000  # as fast as possible
//! ```
//!
//! Each record: key = the user, value = `{"page":"/page/17","event_ts":"2024-..Z","user":"u42"}`.
//! Event time advances by `1 / --event-rate` seconds per click from the
//! start (so with the default pacing it follows the wall clock), minus a
//! random disorder of up to `--disorder` seconds; `--late` of the clicks are
//! 3 to 6 minutes late. Options: `--bootstrap` (default `$KAFKA_BOOTSTRAP`
//! or 127.0.0.1:39092), `--topic clicks`, `--partitions 4`, `--pages 1000`,
//! `--rate 1000` (0: unpaced), `--event-rate` (default: `--rate`, or 1000),
//! `--count N`, `--seconds N`, `--disorder 20`, `--late 0.005`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::source::kafka::rdkafka;
use weir::source::KafkaAdmin;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::ClientConfig;

/// Click events into a Kafka topic.
#[derive(clap::Parser, Debug)]
struct Args {
    /// The Kafka brokers.
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:39092")]
    bootstrap: String,
    /// The topic (created when missing).
    #[arg(long, default_value = "clicks")]
    topic: String,
    /// The topic's partitions when it is created.
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    /// Distinct pages.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pages: u64,
    /// Clicks per second (0: as fast as possible).
    #[arg(long, default_value_t = 1000.0)]
    rate: f64,
    /// Event-time clicks per second (default: `--rate`, or 1000 when unpaced).
    #[arg(long, default_value_t = 0.0)]
    event_rate: f64,
    /// Stop after this many clicks.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
    /// Event-time disorder, up to this many seconds.
    #[arg(long = "disorder", default_value_t = 20.0)]
    disorder_s: f64,
    /// The share of clicks 3 to 6 minutes late.
    #[arg(long, default_value_t = 0.005)]
    late: f64,
}

fn args() -> Args {
    let mut a = <Args as clap::Parser>::parse();
    if a.event_rate <= 0.0 {
        a.event_rate = if a.rate > 0.0 { a.rate } else { 1000.0 };
    }
    a
}

/// xorshift64*: a small, fast, deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("valid time")
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

fn main() -> weir::Result<()> {
    let a = args();
    KafkaAdmin::new(&a.bootstrap)?.create_topic(&a.topic, a.partitions)?;
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &a.bootstrap)
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("compression.type", "lz4")
        .create()
        .map_err(|e| weir::WeirError::Config(format!("producer: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    ctrlc::set_handler(move || s.store(true, Ordering::SeqCst))
        .map_err(|e| weir::WeirError::Config(format!("Ctrl+C handler: {e}")))?;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let start = Instant::now();
    let base_ms = chrono::Utc::now().timestamp_millis();
    let (mut sent, mut late) = (0u64, 0u64);
    let mut last_report = Instant::now();
    println!(
        "producing to {} ({} partitions) at {}: {} pages, rate {}",
        a.topic,
        a.partitions,
        a.bootstrap,
        a.pages,
        if a.rate > 0.0 {
            format!("{}/s", a.rate)
        } else {
            "unpaced".into()
        }
    );
    loop {
        if stop.load(Ordering::SeqCst)
            || a.count.is_some_and(|c| sent >= c)
            || a.seconds
                .is_some_and(|s| start.elapsed().as_secs_f64() >= s)
        {
            break;
        }
        if a.rate > 0.0 {
            let due = start + Duration::from_secs_f64(sent as f64 / a.rate);
            let now = Instant::now();
            if due > now {
                producer.poll(Duration::ZERO);
                std::thread::sleep((due - now).min(Duration::from_millis(50)));
                continue;
            }
        }
        // Popular pages first: page = pages * u^3 (a heavy head, a long tail).
        let page = ((rng.unit().powi(3)) * a.pages as f64) as u64 % a.pages;
        let user = rng.next() % 100_000;
        let mut ts = base_ms + (sent as f64 * 1000.0 / a.event_rate) as i64;
        ts -= (rng.unit() * a.disorder_s * 1000.0) as i64;
        if rng.unit() < a.late {
            ts -= 180_000 + (rng.unit() * 180_000.0) as i64;
            late += 1;
        }
        let key = format!("u{user}");
        let value = format!(
            r#"{{"page":"/page/{page}","event_ts":"{}","user":"{key}"}}"#,
            iso(ts)
        );
        let mut rec: BaseRecord<'_, str, str> = BaseRecord::to(&a.topic)
            .key(key.as_str())
            .payload(value.as_str());
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    producer.poll(Duration::from_millis(10));
                    rec = r;
                }
                Err((e, _)) => return Err(weir::WeirError::Config(format!("send: {e}"))),
            }
        }
        sent += 1;
        if sent % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
        if last_report.elapsed() >= Duration::from_secs(5) {
            last_report = Instant::now();
            println!(
                "{sent} clicks ({:.0}/s), {late} late",
                sent as f64 / start.elapsed().as_secs_f64()
            );
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .map_err(|e| weir::WeirError::Config(format!("flush: {e}")))?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "produced {sent} clicks to `{}` in {secs:.1} s ({:.0}/s), {late} of them late (3-6 min)",
        a.topic,
        sent as f64 / secs
    );
    Ok(())
}
