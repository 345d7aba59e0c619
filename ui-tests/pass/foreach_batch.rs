//! Two `foreach_batch` sinks: a function path that reads typed rows, and a
//! closure; plus the socket source and the once / available-now triggers.
//! Each has its checkpoint (`foreach_batch_without_checkpoint` is refused).

weir::stream_query! {
    /// Even values of the rate source with derived columns, per micro-batch.
    query EvenValues {
        source: rate(rows_per_second = 10, ramp_up_time = "0 seconds", num_partitions = 2),
        filter: value % 2 == 0,
        select: { timestamp, value, half: value / 2, big: value > 100, ratio: value as f64 / 3.0 },
        trigger: once,
        sink: foreach_batch(print_batch),
        checkpoint: "chk/even_values",
    }
}

/// Prints the typed rows of one micro-batch.
pub fn print_batch(
    batch_id: i64,
    batches: &[weir::arrow::record_batch::RecordBatch],
) -> weir::Result<()> {
    for row in EvenValues::rows(batches)? {
        let EvenValuesRow {
            timestamp,
            value,
            half,
            big,
            ratio,
        } = row;
        println!("{batch_id}: {timestamp:?} {value} {half} {big} {ratio}");
    }
    Ok(())
}

weir::stream_query! {
    /// Word counts of lines read from a socket.
    query Words {
        source: socket(host = "localhost", port = 9999),
        filter: value != "",
        select: { word: lower(trim(value)) },
        group_by: [word],
        aggregate: { n: count() },
        output_mode: complete,
        trigger: available_now,
        sink: foreach_batch(|batch_id, batches| {
            for w in Words::rows(batches)? {
                println!("{batch_id}: {} {}", w.word, w.n);
            }
            Ok(())
        }),
        checkpoint: "chk/words",
    }
}

/// Starts both queries.
pub fn start_both(
    session: &weir::Session,
) -> weir::Result<(weir::StreamingQuery, weir::StreamingQuery)> {
    Ok((EvenValues::start(session)?, Words::start(session)?))
}

#[test]
fn derived_columns_have_inferred_types() {
    let row = EvenValuesRow {
        timestamp: weir::Timestamp(0),
        value: 4,
        half: 2,
        big: false,
        ratio: 4.0 / 3.0,
    };
    let batch = <EvenValuesRow as weir::Row>::to_batch(std::slice::from_ref(&row)).unwrap();
    assert_eq!(
        <EvenValuesRow as weir::Row>::from_batch(&batch).unwrap(),
        vec![row]
    );
    let w = WordsRow {
        word: "a".into(),
        n: 1,
    };
    assert_eq!(w.n, 1);
    assert_eq!(Words::NAME, "words");
    assert!(weir::plan::check(&Words::plan()).is_empty());
}
