//! A windowed count written to JSON files in append mode, with its
//! checkpoint: the valid neighbour of `file_sink_update_mode`,
//! `file_sink_complete_mode` and `file_sink_without_checkpoint`. A sliding
//! window and a zero watermark delay (allowed; `bad_durations`), grouped by
//! a window and a column once each (`duplicate_group_keys`).

weir::stream_query! {
    /// Rows per 10-second window sliding every 5 seconds, per value parity.
    query LabFiles {
        source: rate(rows_per_second = 5),
        select: { timestamp, odd: value % 2 == 1 },
        watermark: timestamp delay "0 seconds",
        group_by: [window(timestamp, "10 seconds", "5 seconds"), odd],
        aggregate: { n: count() },
        output_mode: append,
        trigger: processing_time("5 seconds"),
        sink: files(path = "out/lab", format = json),
        checkpoint: "chk/lab_files",
    }
}

#[test]
fn lab_files_appends_with_a_checkpoint() {
    let plan = LabFiles::plan();
    assert!(weir::plan::check(&plan).is_empty());
    assert_eq!(
        plan.sink,
        Some(weir::plan::SinkDecl {
            kind: weir::plan::SinkKind::File,
            checkpoint: true
        })
    );
    assert_eq!(
        plan.trigger,
        Some(weir::plan::TriggerDecl::ProcessingTime(5000))
    );
    let fields: Vec<String> = <LabFilesRow as weir::Row>::fields()
        .into_iter()
        .map(|f| f.name)
        .collect();
    assert_eq!(fields, ["window", "odd", "n"]);
}
