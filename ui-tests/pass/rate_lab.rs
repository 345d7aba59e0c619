//! The lab: the rate source counted per 10-second event-time window, printed
//! to the console every 5 seconds (Spark's classic first streaming job).

weir::stream_query! {
    /// Counts the rate source's rows per 10-second window.
    query RateLab {
        source: rate(rows_per_second = 5),
        watermark: timestamp delay "10 seconds",
        group_by: [window(timestamp, "10 seconds")],
        aggregate: { n: count() },
        output_mode: update,
        trigger: processing_time("5 seconds"),
        sink: console(truncate = false),
        checkpoint: "chk/rate_lab",
    }
}

/// Starts the lab as declared.
pub fn start(session: &weir::Session) -> weir::Result<weir::StreamingQuery> {
    RateLab::start(session)
}

/// The lab's writer with its checkpoint in `dir` (for tests).
pub fn writer_in(session: &weir::Session, dir: &str) -> weir::Result<weir::StreamWriter> {
    Ok(RateLab::writer(session)?.checkpoint_location(dir))
}

#[test]
fn rate_lab_declares_what_it_says() {
    assert_eq!(RateLab::NAME, "rate_lab");
    let plan = RateLab::plan();
    assert!(weir::plan::check(&plan).is_empty());
    assert_eq!(plan.output_mode, weir::plan::OutputMode::Update);
    assert_eq!(
        plan.sources["stream"].schema,
        vec![
            weir::plan::Field::new("timestamp", weir::plan::DataType::Timestamp),
            weir::plan::Field::new("value", weir::plan::DataType::Int64),
        ]
    );
    assert!(RateLab::EXPLAIN.contains("window(timestamp, \"10 seconds\") AS window"));
    let fields: Vec<String> = <RateLabRow as weir::Row>::fields()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(fields, ["window", "n"]);
}

#[test]
fn rate_lab_rows_round_trip() {
    use weir::{Row, Timestamp, Window};
    let rows = vec![
        RateLabRow {
            window: Window {
                start: Timestamp(0),
                end: Timestamp(10_000_000),
            },
            n: 50,
        },
        RateLabRow {
            window: Window {
                start: Timestamp(10_000_000),
                end: Timestamp(20_000_000),
            },
            n: 7,
        },
    ];
    let batch = RateLabRow::to_batch(&rows).unwrap();
    assert_eq!(RateLabRow::from_batch(&batch).unwrap(), rows);
    assert_eq!(RateLab::rows(&[batch.clone(), batch]).unwrap().len(), 4);
}
