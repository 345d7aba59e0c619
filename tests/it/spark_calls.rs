//! The builder's calls do what their Spark namesakes do, where a user
//! translating a Spark pipeline call for call would rely on it.

use serde_json::json;
use weir::plan::{DataType, Field};
use weir::sink::MemorySink;
use weir::source::MemoryStream;

use crate::common::{rows_json, session};

/// Every row the sink received, in order.
fn received(table: &weir::sink::MemoryTable) -> Vec<serde_json::Value> {
    table
        .batches()
        .iter()
        .flat_map(|(_, b)| rows_json(b))
        .collect()
}

#[test]
fn drop_duplicates_of_no_columns_drops_rows_equal_in_every_column() {
    let events = MemoryStream::new(&[
        Field::new("key", DataType::String),
        Field::new("value", DataType::Int64),
    ]);
    let sink = MemorySink::new("");
    let table = sink.table();
    // Spark's `dropDuplicates()`: all columns identify a row.
    let q = session()
        .read_stream(events.clone())
        .drop_duplicates(&[])
        .write_stream()
        .sink(sink)
        .start()
        .unwrap();
    events
        .add_json(&[
            json!({"key": "a", "value": 1}),
            json!({"key": "a", "value": 1}),
            json!({"key": "a", "value": 2}),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    // Seen in the batch before: dropped; a new value of a seen key: kept.
    events
        .add_json(&[
            json!({"key": "a", "value": 2}),
            json!({"key": "b", "value": 1}),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    assert_eq!(
        received(&table),
        vec![
            json!({"key": "a", "value": 1}),
            json!({"key": "a", "value": 2}),
            json!({"key": "b", "value": 1}),
        ]
    );
}

#[test]
fn a_plan_with_a_dedup_of_no_columns_is_refused_at_start() {
    // A plan written by hand (not through the builder, which names every
    // column): refused with a reason, not a panic of the query thread.
    let events = MemoryStream::new(&[Field::new("key", DataType::String)]);
    let s = session();
    let mut plan = s.read_stream(events.clone()).plan().clone();
    let result = plan.result.clone();
    let node = plan.nodes.iter_mut().find(|n| n.id == result).unwrap();
    node.ops.push(weir::plan::Op::Dedup {
        columns: vec![],
        within_watermark: false,
    });
    let name = plan.sources.keys().next().unwrap().clone();
    let source: weir::source::BoxSource = Box::new(events);
    let sources = [(name, source)].into_iter().collect();
    let err = weir::DataStream::from_plan(&s, plan, sources, Default::default())
        .unwrap()
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .expect_err("refused")
        .to_string();
    assert!(err.contains("a dedup needs the columns"), "{err}");
}

#[test]
fn a_file_source_on_a_missing_directory_is_refused_at_start() {
    // Spark: "Path does not exist". A mistyped path must not run forever
    // with no input.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("incomming");
    let err = session()
        .read_stream(weir::source::FileSource::new(
            &missing,
            weir::source::FileFormat::Json,
            vec![Field::new("key", DataType::String)],
        ))
        .write_stream()
        .sink(MemorySink::new(""))
        .start()
        .expect_err("refused")
        .to_string();
    assert!(err.contains("Path does not exist"), "{err}");
    assert!(err.contains("incomming"), "{err}");
}
