//! Prints a query's state from its checkpoint (Spark's state data source):
//!
//! ```text
//! cargo run --example state_read -- <checkpoint> [--operator N] [--batch N]
//!     [--store left|right] [--sql "SELECT ... FROM state"]
//! ```
//!
//! Without `--operator` it lists the checkpoint's stateful operators, their
//! stores and key/value schemas, then prints operator 0. `<checkpoint>` is a
//! local path, `file://...` or `s3://bucket/prefix` (S3 settings from the
//! `AWS_*` environment variables). With `--sql` the state is the table
//! `state` (a join read whole: `state_left` and `state_right`).

use weir::arrow::util::pretty::pretty_format_batches;
use weir::state::read::StateReader;

fn usage() -> ! {
    eprintln!(
        "usage: state_read <checkpoint> [--operator N] [--batch N] [--store NAME] [--sql QUERY]"
    );
    std::process::exit(2)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> weir::Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(checkpoint) = args.next() else {
        usage()
    };
    let mut reader = StateReader::new(&checkpoint);
    let mut operator = None;
    let mut sql = None;
    while let Some(flag) = args.next() {
        let value = args.next().unwrap_or_else(|| usage());
        let number = || value.parse::<i64>().unwrap_or_else(|_| usage());
        match flag.as_str() {
            "--operator" => operator = Some(number() as usize),
            "--batch" => reader = reader.batch_id(number()),
            "--store" => reader = reader.store_name(value.clone()),
            "--sql" => sql = Some(value.clone()),
            _ => usage(),
        }
    }
    if operator.is_none() {
        let meta = reader.metadata()?;
        println!(
            "query {}: {} state partition(s), latest committed batch {:?}",
            meta.query_id, meta.partitions, meta.latest_batch_id
        );
        for op in &meta.operators {
            println!(
                "operator {} ({}), batches {:?}..={:?}",
                op.id, op.name, op.min_batch_id, op.max_batch_id
            );
            for s in &op.stores {
                println!(
                    "  store {}: key {:?}, value {:?}",
                    s.name,
                    s.key_schema
                        .fields()
                        .iter()
                        .map(|f| format!("{}: {}", f.name(), f.data_type()))
                        .collect::<Vec<_>>(),
                    s.value_schema
                        .fields()
                        .iter()
                        .map(|f| format!("{}: {}", f.name(), f.data_type()))
                        .collect::<Vec<_>>(),
                );
            }
        }
        if meta.operators.is_empty() {
            return Ok(());
        }
    }
    let snapshot = reader.operator(operator.unwrap_or(0)).read()?;
    println!(
        "operator {} ({}) after batch {}: {} row(s)",
        snapshot.operator.id,
        snapshot.operator.name,
        snapshot.batch_id,
        snapshot.num_rows()
    );
    match sql {
        Some(q) => println!("{}", pretty_format_batches(&snapshot.sql(&q)?)?),
        None => {
            for s in &snapshot.stores {
                println!("store {}:", s.name);
                println!("{}", pretty_format_batches(&s.batches)?);
            }
        }
    }
    Ok(())
}
