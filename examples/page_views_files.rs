//! The seed's page-views pipeline over files: click events land as JSON files,
//! are counted per page and 1-minute window with a 2-minute watermark, and
//! each closed window is written once to Parquet (append mode, partitioned by
//! page). Kafka in place of files is the `page_views` example's job.
//!
//! ```text
//! cargo run --example page_views_files            # generates clicks, processes them, prints a summary
//! cargo run --example page_views_files -- DIR     # reads clicks from DIR/in, writes DIR/out
//! ```

use std::path::PathBuf;

use weir::{Row, Session, Trigger};

weir::stream_query! {
    /// Page views per page and minute, to Parquet.
    query PageViews {
        source: files(path = "clicks", format = json, max_files_per_trigger = 10),
        schema: Click { page: String, event_ts: Timestamp },
        watermark: event_ts delay "2 minutes",
        group_by: [window(event_ts, "1 minute"), page],
        aggregate: { views: count() },
        output_mode: append,
        trigger: available_now,
        sink: files(path = "page_views", format = parquet, partition_by = [page]),
        checkpoint: "chk/page_views_files",
        name: "page_views_files",
    }
}

/// Writes `files` JSON files of clicks on 20 pages, 5 minutes of event time
/// each, with some events a little out of order.
fn generate(dir: &PathBuf, files: usize) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    let base = weir::Timestamp::parse("2024-01-01T12:00:00Z")
        .expect("valid")
        .0;
    let mut n = 0;
    for f in 0..files {
        let mut text = String::new();
        for i in 0..500u64 {
            let jitter = ((i * 7919) % 90) as i64 * 1_000_000; // up to 90 s out of order
            let ts = base + (f as i64 * 300 + (i as i64 * 300 / 500)) * 1_000_000 - jitter;
            let page = format!("/page/{}", (i * 31 + f as u64) % 20);
            let click = Click {
                page,
                event_ts: weir::Timestamp(ts),
            };
            let batch = Click::to_batch(std::slice::from_ref(&click)).expect("one row");
            let mut w = weir::arrow::json::LineDelimitedWriter::new(Vec::new());
            w.write(&batch).expect("json");
            w.finish().expect("json");
            text.push_str(&String::from_utf8(w.into_inner()).expect("utf-8"));
            n += 1;
        }
        let tmp = dir.join(format!(".clicks-{f:03}.tmp"));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, dir.join(format!("clicks-{f:03}.json")))?;
    }
    Ok(n)
}

fn main() -> weir::Result<()> {
    let root = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("weir-page-views"));
    let (input, output, chk) = (root.join("in"), root.join("out"), root.join("chk"));
    if !input.exists() {
        let n = generate(&input, 6).map_err(|e| weir::WeirError::io(&input, e))?;
        println!("generated {n} clicks in {}", input.display());
    }
    let session = Session::new();
    let source =
        weir::source::FileSource::new(&input, weir::source::FileFormat::Json, Click::fields())
            .max_files_per_trigger(2);
    let query = PageViews::writer_from(&session, source.into())?
        .sink(
            weir::sink::FileSink::new(&output, weir::sink::FileFormat::Parquet)
                .partition_by(vec!["page".into()]),
        )
        .checkpoint_location(chk.to_str().expect("UTF-8 path"))
        .trigger(Trigger::AvailableNow)
        .start()?;
    query.await_termination(None)?;
    for p in query.recent_progress() {
        println!(
            "batch {}: {} clicks in, {} window rows out, watermark {}",
            p.batch_id,
            p.num_input_rows,
            p.sink.num_output_rows,
            p.event_time
                .get("watermark")
                .map(String::as_str)
                .unwrap_or("-")
        );
    }
    let files = weir::sink::file::committed_files(&output)?;
    println!(
        "{} Parquet files committed under {}",
        files.len(),
        output.display()
    );
    Ok(())
}
