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
//! (state partitions), `--workers N` (the worker pool's threads),
//! `--malloc-keeps-freed true|false` (glibc's malloc tuned as a pipeline
//! binary should tune it, the default, or left as it comes).

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
    /// glibc's malloc keeps what is freed for the next batch instead of
    /// handing its pages back to the system and faulting them in again
    /// (`true`: M_TRIM_THRESHOLD 256 MiB, M_MMAP_THRESHOLD 32 MiB), or runs
    /// with glibc's defaults (`false`). The JSON's `malloc_keeps_freed`
    /// says whether the settings took.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    malloc_keeps_freed: bool,
}

/// Sets glibc's malloc to keep freed memory: heaps are trimmed only past
/// 256 MiB free at their top (`M_TRIM_THRESHOLD`), and blocks below 32 MiB
/// come from the heaps, not from a mapping of their own (`M_MMAP_THRESHOLD`;
/// setting either turns off glibc's adjusting of both). With the defaults
/// the heap of each worker thread's arena is trimmed as batches free their
/// columns and faulted in again by the next: the lab at 2 workers took
/// 102-113k page faults in 600 batches, against ~5k so. The same as
/// `MALLOC_TRIM_THRESHOLD_=268435456 MALLOC_MMAP_THRESHOLD_=33554432` in
/// the environment. Whether both settings took (never off glibc). To be
/// called first thing in `main`, before any other thread starts.
fn keep_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets malloc's parameters, and `main` calls
        // this before it starts any other thread.
        let set = |param, value| unsafe { libc::mallopt(param, value) } == 1;
        // (32 MiB is glibc's largest mmap threshold on 64-bit targets.)
        set(libc::M_MMAP_THRESHOLD, 32 << 20) && set(libc::M_TRIM_THRESHOLD, 256 << 20)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    false
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
    let keeps_freed = cli.malloc_keeps_freed && keep_freed_memory();
    match scenarios::run(name, &cli.opts, started) {
        Ok(mut v) => {
            v["malloc_keeps_freed"] = keeps_freed.into();
            println!("{v}")
        }
        Err(e) => {
            eprintln!("weir-bench {name}: {e}");
            std::process::exit(1);
        }
    }
}
