//! Late rows to a side output (beyond Spark, which only counts them): the
//! valid neighbour of `late_rows_without_state`.

weir::stream_query! {
    /// Orders per 10-minute window; orders behind the watermark go to the
    /// `late_orders` memory table instead of vanishing.
    query OrdersPerWindow {
        source: memory,
        schema: Order { id: String, ts: Timestamp },
        watermark: ts delay "10 minutes",
        group_by: [window(ts, "10 minutes")],
        aggregate: { orders: count() },
        sink: memory,
        late_rows: memory(name = "late_orders"),
    }
}

#[test]
fn late_orders_are_kept() {
    use weir::Timestamp;
    let session = weir::Session::new();
    let orders = weir::source::MemoryStream::new(&<Order as weir::Row>::fields());
    let dir = tempfile::tempdir().unwrap();
    let q = OrdersPerWindow::writer_from(&session, Box::new(orders.clone()))
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    let order = |id: &str, at: &str| Order {
        id: id.into(),
        ts: Timestamp::parse(&format!("2024-01-01T{at}Z")).unwrap(),
    };
    orders.add_rows(&[order("a", "12:30:00")]).unwrap();
    q.process_all_available().unwrap();
    // The watermark is 12:20 now: the window of a 12:05 order has closed.
    orders
        .add_rows(&[order("late", "12:05:00"), order("b", "12:25:00")])
        .unwrap();
    q.process_all_available().unwrap();
    q.stop().unwrap();
    let late = session.memory_table("late_orders").unwrap();
    let late: Vec<Order> = late
        .rows()
        .iter()
        .flat_map(|b| <Order as weir::Row>::from_batch(b).unwrap())
        .collect();
    assert_eq!(late, [order("late", "12:05:00")]);
    assert!(OrdersPerWindow::EXPLAIN.contains("  late rows  memory(name = \"late_orders\")"));
}
