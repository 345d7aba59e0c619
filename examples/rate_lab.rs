//! The seed's hands-on lab, in weir: a rate source (5 rows/s) -> 10 s
//! watermark -> 10 s tumbling window count -> update mode -> console, every
//! 5 seconds, checkpointed under the system temp dir.
//!
//! ```text
//! cargo run --example rate_lab                 # runs ~60 s, then stops
//! cargo run --example rate_lab -- --seconds 20 # or WEIR_LAB_SECONDS=20
//! ```
//! Open the printed Streaming UI address (http://127.0.0.1:4040/StreamingQuery/)
//! for the charts. Ctrl+C stops it gracefully (the running batch finishes, the checkpoint
//! stays consistent); running it again resumes from the checkpoint.

use std::time::Duration;

use weir::functions::{count_star, window};
use weir::plan::OutputMode;
use weir::sink::ConsoleSink;
use weir::source::RateSource;
use weir::{Session, Trigger};

/// The seed's rate-source lab.
#[derive(clap::Parser, Debug)]
struct Args {
    /// Stop after this many seconds.
    #[arg(long, env = "WEIR_LAB_SECONDS", default_value_t = 60)]
    seconds: u64,
}

fn seconds() -> u64 {
    <Args as clap::Parser>::parse().seconds
}

fn main() -> weir::Result<()> {
    let checkpoint = std::env::temp_dir().join("weir-lab-chk");
    let session = Session::new();
    // The Streaming tab: input rate, process rate, batch duration, watermark.
    #[cfg(feature = "ui")]
    let _ui = match weir::ui::UiServer::start_if_enabled(&session) {
        Ok(Some(ui)) => {
            println!("Streaming UI: {}", ui.url());
            Some(ui)
        }
        Ok(None) => None,
        Err(e) => {
            eprintln!("no Streaming UI: {e}");
            None
        }
    };
    let query = session
        .read_stream(RateSource::new().rows_per_second(5))
        .with_watermark("timestamp", "10 seconds")
        .group_by(vec![window("timestamp", "10 seconds")])
        .agg(vec![count_star("n")])
        .write_stream()
        .output_mode(OutputMode::Update)
        .sink(ConsoleSink::new().truncate(false))
        .trigger(Trigger::processing_time("5 seconds")?)
        .checkpoint_location(checkpoint.to_str().expect("temp dir path is UTF-8"))
        .query_name("ss-lab")
        .start()?;
    println!("{}", query.status());
    let q = query.clone();
    ctrlc::set_handler(move || {
        eprintln!("stopping (Ctrl+C)...");
        let _ = q.stop();
    })
    .map_err(|e| weir::WeirError::Config(format!("cannot install the Ctrl+C handler: {e}")))?;
    let secs = seconds();
    if !query.await_termination(Some(Duration::from_secs(secs)))? {
        query.stop()?;
    }
    if let Some(p) = query.last_progress() {
        println!("last progress:\n{}", p.json());
    }
    println!("checkpoint: {}", checkpoint.display());
    Ok(())
}
