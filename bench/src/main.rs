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

fn main() {
    let started = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    const USAGE: &str = "usage: weir-bench <lab|page_views|sliding|join|tiny|startup|baseline> [--batches N] [--rows-per-batch N] [--mode update|append] [--state memory|rocksdb] [--fsync true|false] [--partitions N] [--workers N]";
    let Some(scenario) = args.first().cloned() else {
        eprintln!("{USAGE}");
        std::process::exit(2);
    };
    if scenario == "--help" || scenario == "-h" {
        println!("{USAGE}");
        return;
    }
    let opts = scenarios::Opts::parse(&args[1..]).unwrap_or_else(|e| {
        eprintln!("weir-bench: {e}");
        std::process::exit(2);
    });
    match scenarios::run(&scenario, &opts, started) {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("weir-bench {scenario}: {e}");
            std::process::exit(1);
        }
    }
}
