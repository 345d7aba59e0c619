//! Spark-named SQL functions DataFusion lacks: `hour(ts)`, `minute(ts)`,
//! `second(ts)`, `year(ts)`, `month(ts)`, `dayofmonth(ts)` (Spark returns `int`).
//! Their names and types come from the plan's catalogue
//! ([`weir_plan::functions`]), the one the macro types calls with.

use std::sync::Arc;

use arrow::compute::kernels::temporal::{date_part, DatePart};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
use datafusion::prelude::SessionContext;

use weir_plan::functions::Provider;

use crate::row::timestamp_type;

/// The part of a timestamp a catalogue function of weir's reads.
fn date_part_of(name: &str) -> Option<DatePart> {
    Some(match name {
        "hour" => DatePart::Hour,
        "minute" => DatePart::Minute,
        "second" => DatePart::Second,
        "year" => DatePart::Year,
        "month" => DatePart::Month,
        "dayofmonth" => DatePart::Day,
        _ => return None,
    })
}

/// Registers the catalogue's functions weir provides on a DataFusion context.
pub fn register(ctx: &SessionContext) {
    for function in weir_plan::functions::SCALAR_FUNCTIONS {
        if function.provider != Provider::Weir {
            continue;
        }
        let name = function.name;
        let Some(part) = date_part_of(name) else {
            debug_assert!(false, "the catalogue's `{name}` has no implementation");
            continue;
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every function the macro types a call of must exist at run time,
    /// under that name, with the type the catalogue promises.
    #[test]
    fn every_catalogue_function_runs_in_the_engine() {
        let ctx = SessionContext::new();
        register(&ctx);
        let state = ctx.state();
        for function in weir_plan::functions::SCALAR_FUNCTIONS {
            assert!(
                state.scalar_functions().contains_key(function.name),
                "`{}` is in the catalogue but not in the engine",
                function.name
            );
            if function.provider == Provider::Weir {
                assert!(date_part_of(function.name).is_some(), "{}", function.name);
            }
        }
    }

    #[test]
    fn spark_time_parts_return_int() {
        let ctx = SessionContext::new();
        register(&ctx);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let df = rt
            .block_on(ctx.sql(
                "SELECT hour(to_timestamp_micros(3723000000)) AS h, minute(to_timestamp_micros(3723000000)) AS m",
            ))
            .unwrap();
        let batches = rt.block_on(df.collect()).unwrap();
        let b = &batches[0];
        assert_eq!(b.schema().field(0).data_type(), &DataType::Int32);
        let h = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int32Array>()
            .unwrap();
        let m = b
            .column(1)
            .as_any()
            .downcast_ref::<arrow::array::Int32Array>()
            .unwrap();
        assert_eq!((h.value(0), m.value(0)), (1, 2));
    }
}
