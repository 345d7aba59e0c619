//! weir's benchmarks. Each run prints one JSON object: rows, seconds,
//! rows/s, rows per CPU-second, batches, per-batch latency p50/p99 (ms),
//! peak RSS (MB) and scenario-specific figures. Speed is measured here,
//! never asserted by tests.
//!
//! ```text
//! cargo run --release -p weir-bench -- lab
//! cargo run --release -p weir-bench -- page_views [--mode update|append] [--state memory|rocksdb]
//! cargo run --release -p weir-bench -- sliding
//! cargo run --release -p weir-bench -- join
//! cargo run --release -p weir-bench -- tiny [--fsync true|false]
//! cargo run --release -p weir-bench -- startup
//! cargo run --release -p weir-bench -- baseline
//! ```
//! Common flags: `--batches N`, `--rows-per-batch N`, `--partitions N`
//! (state partitions), `--workers N` (the worker pool's threads).

mod scenarios;

use std::time::Instant;

use clap::Parser;

/// A scenario to run.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Scenario {
    /// Rate-micro-batch, 200k rows/batch, a 10 s window count, update mode.
    Lab,
    /// 1000 pages, disorder, 1-minute windows, a 2-minute watermark.
    #[value(name = "page_views")]
    PageViews,
    /// 30-minute windows sliding by 5 minutes over 1000 keys.
    Sliding,
    /// A stream-stream inner join: impressions x clicks within 2 minutes.
    Join,
    /// 5 rows per batch: the per-batch floor.
    Tiny,
    /// Process start to the first committed batch.
    Startup,
    /// A hand-written hash aggregation of the page views: the ceiling.
    Baseline,
    /// How long a sleeping pool worker takes to start a job handed to it.
    Wakeup,
}

/// weir's benchmarks: each run prints one JSON object.
#[derive(Parser, Debug)]
#[command(name = "weir-bench")]
struct Cli {
    /// The scenario.
    #[arg(value_enum)]
    scenario: Scenario,
    #[command(flatten)]
    opts: scenarios::Opts,
}

fn main() {
    let started = Instant::now();
    let cli = Cli::parse();
    let name = match cli.scenario {
        Scenario::Lab => "lab",
        Scenario::PageViews => "page_views",
        Scenario::Sliding => "sliding",
        Scenario::Join => "join",
        Scenario::Tiny => "tiny",
        Scenario::Startup => "startup",
        Scenario::Baseline => "baseline",
        Scenario::Wakeup => "wakeup",
    };
    match scenarios::run(name, &cli.opts, started) {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("weir-bench {name}: {e}");
            std::process::exit(1);
        }
    }
}
