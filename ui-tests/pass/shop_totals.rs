//! A keyed sum over a memory source in complete mode: the whole result
//! table goes to the memory sink every trigger.

weir::stream_query! {
    /// Sales totals per shop.
    query ShopTotals {
        source: memory,
        schema: Sale { shop: String, amount: i64, price: f64 },
        group_by: [shop],
        aggregate: { total: sum(amount), revenue: sum(price), sales: count() },
        output_mode: complete,
        sink: memory(name = "shop_totals"),
    }
}

/// Starts the query over rows handed in at run time (a memory stream).
pub fn start(
    session: &weir::Session,
    source: weir::source::BoxSource,
) -> weir::Result<weir::StreamingQuery> {
    ShopTotals::writer_from(session, source)?.start()
}

#[test]
fn shop_totals_shapes() {
    assert!(weir::plan::check(&ShopTotals::plan()).is_empty());
    let sale = Sale {
        shop: "north".into(),
        amount: 3,
        price: 2.5,
    };
    let batch = <Sale as weir::Row>::to_batch(std::slice::from_ref(&sale)).unwrap();
    assert_eq!(<Sale as weir::Row>::from_batch(&batch).unwrap(), vec![sale]);
    let total = ShopTotalsRow {
        shop: "north".into(),
        total: Some(3),
        revenue: Some(2.5),
        sales: 1,
    };
    assert_eq!(total.clone(), total);
}
