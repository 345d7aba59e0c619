//! Queries declared with `stream_query!` (the `ui-tests/pass` cases) run end
//! to end through the engine, with typed rows in and out.

use weir::source::MemoryStream;
use weir::{Row, Session, SessionConfig, Trigger};

use crate::pass_page_views::{writer_in, Click};
use crate::pass_shop_totals::{start, Sale, ShopTotalsRow};

#[test]
fn typed_rows_in_typed_rows_out() {
    let session = Session::new();
    let stream = MemoryStream::of::<Sale>();
    let q = start(&session, Box::new(stream.clone())).unwrap();
    let sale = |shop: &str, amount, price| Sale {
        shop: shop.into(),
        amount,
        price,
    };
    stream
        .add_rows(&[
            sale("north", 3, 2.5),
            sale("south", 1, 1.0),
            sale("north", 2, 0.5),
        ])
        .unwrap();
    q.process_all_available().unwrap();
    stream.add_rows(&[sale("south", 4, 4.0)]).unwrap();
    q.process_all_available().unwrap();
    let table = session
        .memory_table("shop_totals")
        .expect("the declared memory table");
    q.stop().unwrap();
    let mut rows: Vec<ShopTotalsRow> = table
        .rows()
        .iter()
        .flat_map(|b| ShopTotalsRow::from_batch(b).unwrap())
        .collect();
    rows.sort_by(|a, b| a.shop.cmp(&b.shop));
    assert_eq!(
        rows,
        vec![
            ShopTotalsRow {
                shop: "north".into(),
                total: Some(5),
                revenue: Some(3.0),
                sales: 2
            },
            ShopTotalsRow {
                shop: "south".into(),
                total: Some(5),
                revenue: Some(5.0),
                sales: 2
            },
        ]
    );
}

#[test]
fn declared_page_views_write_parquet_once_windows_close() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, chk) = (
        dir.path().join("in"),
        dir.path().join("out"),
        dir.path().join("chk"),
    );
    std::fs::create_dir_all(&input).unwrap();
    let session = Session::with_config(SessionConfig {
        fsync_checkpoint: false,
        ..SessionConfig::default()
    });
    let q = writer_in(
        &session,
        input.to_str().unwrap(),
        output.to_str().unwrap(),
        chk.to_str().unwrap(),
    )
    .unwrap()
    .trigger(Trigger::Default)
    .start()
    .unwrap();
    let clicks = |rows: &[(&str, &str, i64)]| -> String {
        rows.iter()
            .map(|(page, ts, n)| {
                format!("{{\"page\":\"{page}\",\"event_ts\":\"{ts}\",\"user\":null,\"n\":{n}}}\n")
            })
            .collect()
    };
    crate::common::move_file_in(
        &input,
        "1.json",
        &clicks(&[
            ("/a", "2024-01-01T12:00:10Z", 1),
            ("/a", "2024-01-01T12:00:40Z", 2),
            ("/health", "2024-01-01T12:00:50Z", 1),
        ]),
    );
    q.process_all_available().unwrap();
    assert!(
        weir::sink::file::committed_files(&output)
            .unwrap()
            .is_empty(),
        "the window is still open"
    );
    crate::common::move_file_in(
        &input,
        "2.json",
        &clicks(&[("/b", "2024-01-01T12:05:00Z", 1)]),
    );
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let files = weir::sink::file::committed_files(&output).unwrap();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(
        files[0].to_string_lossy().contains("page=/a")
            || files[0].to_string_lossy().contains("page=%2Fa"),
        "{files:?}"
    );
    let f = std::fs::File::open(&files[0]).unwrap();
    let batches: Vec<_> = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap()
        .map(|b| b.unwrap())
        .collect();
    let rows = crate::common::rows_json(&batches);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["views"], 2);
    assert_eq!(
        rows[0]["total"], 6,
        "n doubled by the select, /health filtered out"
    );
    let _ = Click::fields();
}

weir::stream_query! {
    /// Readings per value: a float grouping key.
    query ReadingsPerValue {
        source: memory,
        schema: Reading { v: f64 },
        group_by: [v],
        aggregate: { n: count() },
        output_mode: complete,
        sink: memory(name = "readings_per_value"),
    }
}

/// Float keys group as Spark's NormalizeFloatingNumbers has them: -0.0 with
/// 0.0 and every NaN with every other, in one batch and across batches
/// (through the state store).
#[test]
fn float_keys_group_minus_zero_with_zero_and_nan_with_nan() {
    let session = Session::new();
    let stream = MemoryStream::of::<Reading>();
    let dir = tempfile::tempdir().unwrap();
    let q = ReadingsPerValue::writer_from(&session, Box::new(stream.clone()))
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    let other_nan = f64::from_bits(f64::NAN.to_bits() ^ 1);
    assert!(other_nan.is_nan() && other_nan.to_bits() != f64::NAN.to_bits());
    let r = |v| Reading { v };
    stream
        .add_rows(&[r(0.0), r(-0.0), r(f64::NAN), r(1.5)])
        .unwrap();
    q.process_all_available().unwrap();
    stream.add_rows(&[r(-0.0), r(other_nan)]).unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let table = session.memory_table("readings_per_value").unwrap();
    let last = table.batches().last().unwrap().1.clone();
    let mut got: Vec<(String, i64)> = ReadingsPerValue::rows(&last)
        .unwrap()
        .into_iter()
        .map(|r| (format!("{:?}", r.v), r.n))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("0.0".to_string(), 3),
            ("1.5".to_string(), 1),
            ("NaN".to_string(), 2)
        ]
    );
}

weir::stream_query! {
    /// Spark's rate-micro-batch source, declared: 10 rows per micro-batch
    /// generated in 3 partitions, event time 500 ms further each batch,
    /// one batch per run.
    query MicroBatchCount {
        source: rate_micro_batch(rows_per_batch = 10, num_partitions = 3, start_timestamp = 1704110400000, advance_millis_per_batch = 500),
        aggregate: { n: count(), first: min(value), last: max(value), from: min(timestamp), to: max(timestamp) },
        output_mode: complete,
        trigger: once,
        sink: memory(name = "micro_batch_count"),
    }
}

weir::stream_query! {
    /// The same source under the available-now trigger: the batch that is
    /// next when the query starts, then the query stops.
    query MicroBatchNow {
        source: rate_micro_batch(rows_per_batch = 10),
        aggregate: { n: count() },
        output_mode: complete,
        trigger: available_now,
        sink: memory(name = "micro_batch_now"),
    }
}

/// `source: rate_micro_batch(...)` gives exactly `rows_per_batch` rows per
/// batch, timestamps from `start_timestamp` advancing per batch; under
/// `available_now` the query runs one batch and stops.
#[test]
fn a_declared_rate_micro_batch_source_gives_its_rows_per_batch() {
    let session = Session::new();
    let dir = tempfile::tempdir().unwrap();
    // Two runs of one batch each, on one checkpoint: batches 0 and 1.
    for _ in 0..2 {
        let q = MicroBatchCount::writer(&session)
            .unwrap()
            .checkpoint_location(dir.path().to_str().unwrap())
            .start()
            .unwrap();
        assert!(q
            .await_termination(Some(std::time::Duration::from_secs(30)))
            .unwrap());
    }
    let table = session.memory_table("micro_batch_count").unwrap();
    let last = table.batches().last().unwrap().1.clone();
    let rows = MicroBatchCount::rows(&last).unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let t = |s: &str| Some(weir::Timestamp::parse(s).unwrap());
    assert_eq!(rows[0].n, 20);
    assert_eq!((rows[0].first, rows[0].last), (Some(0), Some(19)));
    assert_eq!(rows[0].from, t("2024-01-01T12:00:00Z"));
    assert_eq!(rows[0].to, t("2024-01-01T12:00:00.500Z"));

    let dir = tempfile::tempdir().unwrap();
    let q = MicroBatchNow::writer(&session)
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    assert!(q
        .await_termination(Some(std::time::Duration::from_secs(30)))
        .unwrap());
    let table = session.memory_table("micro_batch_now").unwrap();
    assert_eq!(MicroBatchNow::rows(&table.rows()).unwrap()[0].n, 10);
}
