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

use weir_plan::{AggFn, AggSpec, GroupKey, WindowSpec};

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
            size: String::new(),
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

fn agg(func: AggFn, column: &str, alias: &str) -> AggSpec {
    AggSpec {
        func,
        column: column.into(),
        alias: alias.into(),
    }
}

/// `count(*) AS alias`.
pub fn count_star(alias: &str) -> AggSpec {
    agg(AggFn::Count, "*", alias)
}

/// `count(column) AS alias`: non-null values.
pub fn count(column: &str, alias: &str) -> AggSpec {
    agg(AggFn::Count, column, alias)
}

/// `sum(column) AS alias`.
pub fn sum(column: &str, alias: &str) -> AggSpec {
    agg(AggFn::Sum, column, alias)
}

/// `min(column) AS alias`.
pub fn min(column: &str, alias: &str) -> AggSpec {
    agg(AggFn::Min, column, alias)
}

/// `max(column) AS alias`.
pub fn max(column: &str, alias: &str) -> AggSpec {
    agg(AggFn::Max, column, alias)
}

/// `avg(column) AS alias`.
pub fn avg(column: &str, alias: &str) -> AggSpec {
    agg(AggFn::Avg, column, alias)
}

/// `count(DISTINCT column)`: refused on streams, as by Spark.
pub fn count_distinct(column: &str, alias: &str) -> AggSpec {
    agg(AggFn::CountDistinct, column, alias)
}
