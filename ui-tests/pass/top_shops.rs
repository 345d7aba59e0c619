//! Sorting and limiting an aggregation in complete mode: the valid
//! neighbour of `sort_without_aggregation`, `sort_in_update_mode` and
//! `limit_in_update_mode` (Spark sorts and limits only the whole result
//! table), with aggregates over the types they take (`aggregate_type_errors`).

weir::stream_query! {
    /// The three shops with the highest totals, and their average sale.
    query TopShops {
        source: memory,
        schema: Sale { shop: String, amount: i64, paid: bool },
        filter: paid,
        group_by: [shop],
        aggregate: { total: sum(amount), mean: avg(amount), sales: count() },
        order_by: [total desc, shop],
        limit: 3,
        output_mode: complete,
        sink: memory(name = "top_shops"),
    }
}

/// Starts the query over rows handed in at run time (a memory stream).
pub fn start(
    session: &weir::Session,
    source: weir::source::BoxSource,
) -> weir::Result<weir::StreamingQuery> {
    TopShops::writer_from(session, source)?.start()
}

#[test]
fn top_shops_sorts_and_limits_the_complete_result() {
    let plan = TopShops::plan();
    assert!(weir::plan::check(&plan).is_empty());
    assert_eq!(
        plan.nodes[0].ops.last(),
        Some(&weir::plan::Op::Limit { n: 3 })
    );
    assert!(TopShops::EXPLAIN.contains("+- Limit 3\n   +- Sort [total DESC, shop ASC]\n"));
    let row = TopShopsRow {
        shop: "north".into(),
        total: Some(5),
        mean: Some(2.5),
        sales: 2,
    };
    assert_eq!(row.clone(), row);
}
