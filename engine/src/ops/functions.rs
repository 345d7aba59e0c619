//! Spark-named SQL functions DataFusion lacks: `hour(ts)`, `minute(ts)`,
//! `second(ts)`, `year(ts)`, `month(ts)`, `dayofmonth(ts)` (Spark returns `int`).

use std::sync::Arc;

use arrow::compute::kernels::temporal::{date_part, DatePart};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::prelude::SessionContext;

use crate::row::timestamp_type;

/// Registers the functions on a DataFusion context.
pub fn register(ctx: &SessionContext) {
    for (name, part) in [
        ("hour", DatePart::Hour),
        ("minute", DatePart::Minute),
        ("second", DatePart::Second),
        ("year", DatePart::Year),
        ("month", DatePart::Month),
        ("dayofmonth", DatePart::Day),
    ] {
        let f = Arc::new(
            move |args: &[ColumnarValue]| -> datafusion::error::Result<ColumnarValue> {
                let arrays = ColumnarValue::values_to_arrays(args)?;
                let out = date_part(arrays[0].as_ref(), part)?;
                Ok(ColumnarValue::Array(out))
            },
        );
        ctx.register_udf(create_udf(
            name,
            vec![timestamp_type()],
            DataType::Int32,
            Volatility::Immutable,
            f,
        ));
    }
}
