//! Builders for grouping keys and aggregates, named as in Spark's
//! `org.apache.spark.sql.functions`.
//!
//! ```
//! use weir_engine::functions::{window, col, count_star, sum};
//! let keys = vec![window("event_ts", "1 minute"), col("page")];
//! let aggs = vec![count_star("views"), sum("bytes", "total_bytes")];
//! assert_eq!(keys[1].output_name(), "page");
//! assert_eq!(aggs[0].alias, "views");
//! ```

use weir_plan::{AggFn, AggSpec, GroupKey, Rsd, WindowSpec};

use crate::error::{Result, WeirError};

/// A tumbling window of `size` over timestamp column `column`, named `window`.
pub fn window(column: &str, size: &str) -> GroupKey {
    GroupKey::Window {
        window: WindowSpec {
            column: Some(column.into()),
            expr: None,
            size: size.into(),
            slide: None,
            gap: None,
        },
        alias: "window".into(),
    }
}

/// A sliding window of `size` every `slide` over `column`, named `window`.
pub fn sliding_window(column: &str, size: &str, slide: &str) -> GroupKey {
    GroupKey::Window {
        window: WindowSpec {
            column: Some(column.into()),
            expr: None,
            size: size.into(),
            slide: Some(slide.into()),
            gap: None,
        },
        alias: "window".into(),
    }
}

/// A window over `window_time(<window column>)` of an earlier aggregation (chained windows).
pub fn window_of_window(window_column: &str, size: &str) -> GroupKey {
    GroupKey::Window {
        window: WindowSpec {
            column: None,
            expr: Some(format!("window_time({window_column})")),
            size: size.into(),
            slide: None,
            gap: None,
        },
        alias: "window".into(),
    }
}

/// A session window over `column` closing after `gap` without events
/// (Spark's `session_window`), named `session_window`.
pub fn session_window(column: &str, gap: &str) -> GroupKey {
    GroupKey::Window {
        window: WindowSpec {
            column: Some(column.into()),
            expr: None,
            size: Default::default(),
            slide: None,
            gap: Some(gap.into()),
        },
        alias: "session_window".into(),
    }
}

/// Renames a window key (`window(...).alias(name)`).
pub fn named(key: GroupKey, name: &str) -> GroupKey {
    match key {
        GroupKey::Window { window, .. } => GroupKey::Window {
            window,
            alias: name.into(),
        },
        other => other,
    }
}

/// A grouping column.
pub fn col(name: &str) -> GroupKey {
    GroupKey::Column {
        column: name.into(),
    }
}

/// `func(column) AS alias`: any aggregate of the catalogue
/// (`weir::plan::aggregates`), e.g.
/// `aggregate(AggFn::First { ignore_nulls: true }, "user", "first_user")`.
pub fn aggregate(func: AggFn, column: &str, alias: &str) -> AggSpec {
    AggSpec {
        func,
        column: column.into(),
        alias: alias.into(),
    }
}

/// `count(*) AS alias`.
pub fn count_star(alias: &str) -> AggSpec {
    aggregate(AggFn::Count, "*", alias)
}

/// `count(column) AS alias`: non-null values.
pub fn count(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::Count, column, alias)
}

/// `sum(column) AS alias`.
pub fn sum(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::Sum, column, alias)
}

/// `min(column) AS alias`.
pub fn min(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::Min, column, alias)
}

/// `max(column) AS alias`.
pub fn max(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::Max, column, alias)
}

/// `avg(column) AS alias`.
pub fn avg(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::Avg, column, alias)
}

/// `count(DISTINCT column)`: refused on streams, as by Spark.
pub fn count_distinct(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::CountDistinct, column, alias)
}

/// `approx_count_distinct(column) AS alias`: the distinct non-null values,
/// estimated with HyperLogLog++ at Spark's default relative standard
/// deviation 0.05 (512 registers per group). Allowed on streams: the
/// sketch is the state, merged across tasks, partitions and batches.
pub fn approx_count_distinct(column: &str, alias: &str) -> AggSpec {
    aggregate(
        AggFn::ApproxCountDistinct { rsd: Rsd::DEFAULT },
        column,
        alias,
    )
}

/// `approx_count_distinct(column, rsd) AS alias`; `rsd` between 0.01 and
/// 0.39 (a smaller rsd keeps a larger sketch: 0.01 is 16 KiB per group).
pub fn approx_count_distinct_rsd(column: &str, rsd: f64, alias: &str) -> Result<AggSpec> {
    let rsd = Rsd::new(rsd).map_err(WeirError::Config)?;
    Ok(aggregate(AggFn::ApproxCountDistinct { rsd }, column, alias))
}

/// `first(column) AS alias`: the group's first value in arrival order, a
/// null included (Spark's default, `ignoreNulls = false`).
pub fn first(column: &str, alias: &str) -> AggSpec {
    aggregate(
        AggFn::First {
            ignore_nulls: false,
        },
        column,
        alias,
    )
}

/// `first(column, true) AS alias`: the group's first non-null value.
pub fn first_ignore_nulls(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::First { ignore_nulls: true }, column, alias)
}

/// `last(column) AS alias`: the group's last value in arrival order, a
/// null included (Spark's default).
pub fn last(column: &str, alias: &str) -> AggSpec {
    aggregate(
        AggFn::Last {
            ignore_nulls: false,
        },
        column,
        alias,
    )
}

/// `last(column, true) AS alias`: the group's last non-null value.
pub fn last_ignore_nulls(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::Last { ignore_nulls: true }, column, alias)
}

/// `stddev(column) AS alias`: Spark's `stddev_samp`.
pub fn stddev(column: &str, alias: &str) -> AggSpec {
    stddev_samp(column, alias)
}

/// `stddev_samp(column) AS alias`: the sample standard deviation (null
/// for fewer than two values).
pub fn stddev_samp(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::StddevSamp, column, alias)
}

/// `stddev_pop(column) AS alias`: the population standard deviation.
pub fn stddev_pop(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::StddevPop, column, alias)
}

/// `variance(column) AS alias`: Spark's `var_samp`.
pub fn variance(column: &str, alias: &str) -> AggSpec {
    var_samp(column, alias)
}

/// `var_samp(column) AS alias`: the sample variance (null for fewer than
/// two values).
pub fn var_samp(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::VarSamp, column, alias)
}

/// `var_pop(column) AS alias`: the population variance.
pub fn var_pop(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::VarPop, column, alias)
}

/// `collect_list(column) AS alias`: the group's non-null values as an
/// array, in arrival order (an empty array for none); at most
/// `spark.sql.streaming.weir.collectMaxValues` per group, past which the
/// query fails naming the group.
pub fn collect_list(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::CollectList, column, alias)
}

/// `collect_set(column) AS alias`: the group's distinct non-null values as
/// an array, in the order they first arrived; at most
/// `spark.sql.streaming.weir.collectMaxValues` per group.
pub fn collect_set(column: &str, alias: &str) -> AggSpec {
    aggregate(AggFn::CollectSet, column, alias)
}
