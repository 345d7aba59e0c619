//! Spark's `foreach` sink: a `ForeachWriter` of the result rows, typed,
//! with `open(partition, epoch)`, `process(row)` and `close(error)`.

use std::sync::Mutex;

/// What the writer was called with, in order.
static CALLS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records its calls; fails on a total of 13 (to show `close(error)`).
pub struct Recorder;

impl weir::sink::ForeachWriter<TotalsPerShopRow> for Recorder {
    fn open(&mut self, partition: i64, epoch: i64) -> weir::Result<bool> {
        CALLS
            .lock()
            .unwrap()
            .push(format!("open {partition} {epoch}"));
        Ok(true)
    }

    fn process(&mut self, row: TotalsPerShopRow) -> weir::Result<()> {
        if row.total == Some(13) {
            return Err(weir::WeirError::Config("13 is unlucky".into()));
        }
        CALLS
            .lock()
            .unwrap()
            .push(format!("{} {:?}", row.shop, row.total));
        Ok(())
    }

    fn close(&mut self, error: Option<&weir::WeirError>) {
        CALLS
            .lock()
            .unwrap()
            .push(format!("close {:?}", error.map(|e| e.to_string())));
    }
}

weir::stream_query! {
    /// Totals per shop, each changed row handed to a writer.
    query TotalsPerShop {
        source: memory,
        schema: ShopSale { shop: String, amount: i64 },
        group_by: [shop],
        aggregate: { total: sum(amount) },
        output_mode: update,
        sink: foreach(Recorder),
        checkpoint: "target/weir-foreach-chk",
    }
}

#[test]
fn foreach_hands_each_row_to_the_writer() {
    use weir::source::MemoryStream;
    let session = weir::Session::new();
    let sales = MemoryStream::new(&<ShopSale as weir::Row>::fields());
    let dir = tempfile::tempdir().unwrap();
    let q = TotalsPerShop::writer_from(&session, Box::new(sales.clone()))
        .unwrap()
        .checkpoint_location(dir.path().to_str().unwrap())
        .start()
        .unwrap();
    let sale = |shop: &str, amount| ShopSale {
        shop: shop.into(),
        amount,
    };
    sales
        .add_rows(&[sale("north", 3), sale("north", 4)])
        .unwrap();
    q.process_all_available().unwrap();
    sales.add_rows(&[sale("north", 6)]).unwrap();
    // The writer fails on this batch's row: close gets the error, and so
    // does the query.
    let err = q.process_all_available().unwrap_err().to_string();
    assert!(err.contains("13 is unlucky"), "{err}");
    assert_eq!(
        *CALLS.lock().unwrap(),
        [
            "open 0 0",
            "north Some(7)",
            "close None",
            "open 0 1",
            "close Some(\"13 is unlucky\")"
        ]
    );
    assert!(TotalsPerShop::EXPLAIN.contains("  sink       foreach(<writer>)"));
}
