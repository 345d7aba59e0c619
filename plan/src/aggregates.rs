//! The aggregate-function catalogue: for each function its Spark name and
//! aliases, the column types it takes, its result type, its optional second
//! argument, whether a stream may use it and what its state holds. The
//! macro's parser and type checker, plan resolution, the streaming rules and
//! the state fingerprints read it; the engine's accumulators are registered
//! beside it (`engine/src/ops/aggregate/accumulators/`).
//!
//! Adding a function: a variant of [`AggFn`] named after the Spark name in
//! UpperCamelCase (`stream_query!` writes the plan's literal from the
//! name), its [`AggregateDef`] here (one `static`, its line in
//! [`AGGREGATES`] and its arm in [`AggFn::def`]), and its accumulator in the
//! engine (a file in `engine/src/ops/aggregate/accumulators/` and its
//! registration there). The macro's parser and type checker, resolution,
//! the streaming rules and the state fingerprints need no change; a new
//! kind of second argument is a [`Param`] and an [`Arg`] (and its parsing
//! in `macros/src/parse.rs` and its tokens in `macros/src/plan_tokens.rs`).
//!
//! ```
//! use weir_plan::aggregates::lookup;
//! use weir_plan::{AggFn, DataType};
//! let stddev = lookup("stddev").unwrap();
//! assert_eq!(stddev.name, "stddev_samp");
//! assert_eq!(AggFn::StddevSamp.result_type(Some(DataType::Int32)), Some(DataType::Float64));
//! assert_eq!(AggFn::StddevSamp.result_type(Some(DataType::String)), None);
//! ```

use crate::plan::{AggFn, Rsd};
use crate::types::DataType;

/// The column types an aggregate takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputRule {
    /// Any column.
    Any,
    /// `int32`, `int64` or `float64`.
    Numeric,
    /// Types with an order (not binary, not a window).
    Orderable,
    /// Any value but a window (a struct) or a list.
    Value,
    /// A scalar type that a list may hold (not a window, not a list):
    /// `collect_list`, `collect_set`.
    Element,
}

impl InputRule {
    /// True when the rule takes a column of type `t`.
    pub fn accepts(self, t: DataType) -> bool {
        match self {
            InputRule::Any => true,
            InputRule::Numeric => t.is_numeric(),
            InputRule::Orderable => t.is_orderable(),
            InputRule::Value => !matches!(t, DataType::Window | DataType::List(_)),
            InputRule::Element => t.element().is_some(),
        }
    }
}

/// How an aggregate's result type follows from its input's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultRule {
    /// Always this type.
    Fixed(DataType),
    /// Spark's sum: bigint for integers, double for doubles.
    Sum,
    /// The input's type.
    Input,
    /// A list of the input's type (`array<T>`).
    ListOfInput,
}

/// The optional second argument of an aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// None.
    None,
    /// `approx_count_distinct`'s relative standard deviation (a float literal).
    Rsd,
    /// `first`/`last`'s ignoreNulls (a bool literal).
    IgnoreNulls,
}

/// A second argument's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// None given, or none taken.
    None,
    /// An rsd.
    Rsd(Rsd),
    /// ignoreNulls.
    IgnoreNulls(bool),
}

/// One aggregate function.
#[derive(Debug)]
pub struct AggregateDef {
    /// Spark's name (the one plans, explains and messages print).
    pub name: &'static str,
    /// Spark's other names for it.
    pub aliases: &'static [&'static str],
    /// True when it takes `*` (or no column): only `count`.
    pub takes_star: bool,
    /// False when Spark refuses it on a stream (`count(DISTINCT ..)`).
    pub streaming: bool,
    /// The column types it takes.
    pub input: InputRule,
    /// What a type error's help says.
    pub input_help: &'static str,
    /// Its result type.
    pub result: ResultRule,
    /// Its optional second argument.
    pub param: Param,
    /// What its state holds, in words; `{of}` is the input (`` `n` `` or `rows`).
    pub stores: &'static str,
    /// Its state layout: functions with the same layout (and the same
    /// [`AggFn::state_arg`]) keep the same state, so a running query may
    /// switch between them (Spark's state-schema check sees no change).
    pub state: &'static str,
    /// The function with a second argument (or its default).
    pub make: fn(Arg) -> AggFn,
}

impl AggregateDef {
    /// The result type over an input of type `input` (None for `*` or an
    /// input whose type is not known), or `None` when the function does not
    /// take that type.
    pub fn result_type(&self, input: Option<DataType>) -> Option<DataType> {
        match (input, self.result) {
            (Some(t), _) if !self.input.accepts(t) => None,
            (_, ResultRule::Fixed(r)) => Some(r),
            (None, _) => None,
            (Some(t), ResultRule::Input) => Some(t),
            (Some(t), ResultRule::ListOfInput) => t.element().map(DataType::List),
            (Some(t), ResultRule::Sum) => match t {
                DataType::Int32 | DataType::Int64 => Some(DataType::Int64),
                DataType::Float64 => Some(DataType::Float64),
                _ => None,
            },
        }
    }

    /// True when a group's result may be null: not for counts (0 for no
    /// rows) nor collections (an empty array).
    pub fn result_may_be_null(&self) -> bool {
        !matches!(
            self.result,
            ResultRule::Fixed(DataType::Int64) | ResultRule::ListOfInput
        )
    }

    /// The function without a second argument (its default).
    pub fn default_fn(&self) -> AggFn {
        (self.make)(Arg::None)
    }

    /// Usage, for messages: `approx_count_distinct(column[, rsd])`.
    pub fn usage(&self) -> String {
        match self.param {
            Param::None if self.takes_star => format!("{}(*) or {}(column)", self.name, self.name),
            Param::None => format!("{}(column)", self.name),
            Param::Rsd => format!("{}(column[, rsd])", self.name),
            Param::IgnoreNulls => format!("{}(column[, ignore_nulls])", self.name),
        }
    }
}

const NUMERIC_HELP: &str = "sum and avg take int32, int64 or float64 columns";
const ORDER_HELP: &str = "min and max take numbers, strings, booleans and timestamps";
const MOMENT_HELP: &str = "stddev and variance (stddev_samp, stddev_pop, var_samp, var_pop) take int32, int64 or float64 columns";

/// `count`.
pub static COUNT: AggregateDef = AggregateDef {
    name: "count",
    aliases: &[],
    takes_star: true,
    streaming: true,
    input: InputRule::Any,
    input_help: "count takes any column, or none",
    result: ResultRule::Fixed(DataType::Int64),
    param: Param::None,
    stores: "a count of {of}",
    state: "count",
    make: |_| AggFn::Count,
};

/// `sum`.
pub static SUM: AggregateDef = AggregateDef {
    name: "sum",
    aliases: &[],
    takes_star: false,
    streaming: true,
    input: InputRule::Numeric,
    input_help: NUMERIC_HELP,
    result: ResultRule::Sum,
    param: Param::None,
    stores: "a sum of {of}",
    state: "sum",
    make: |_| AggFn::Sum,
};

/// `min`.
pub static MIN: AggregateDef = AggregateDef {
    name: "min",
    stores: "the minimum of {of}",
    state: "min",
    make: |_| AggFn::Min,
    ..ORDER_BODY
};

/// `max`.
pub static MAX: AggregateDef = AggregateDef {
    name: "max",
    stores: "the maximum of {of}",
    state: "max",
    make: |_| AggFn::Max,
    ..ORDER_BODY
};

/// What `min` and `max` share.
const ORDER_BODY: AggregateDef = AggregateDef {
    name: "min",
    aliases: &[],
    takes_star: false,
    streaming: true,
    input: InputRule::Orderable,
    input_help: ORDER_HELP,
    result: ResultRule::Input,
    param: Param::None,
    stores: "the minimum of {of}",
    state: "min",
    make: |_| AggFn::Min,
};

/// `avg` (`mean`).
pub static AVG: AggregateDef = AggregateDef {
    name: "avg",
    aliases: &["mean"],
    takes_star: false,
    streaming: true,
    input: InputRule::Numeric,
    input_help: NUMERIC_HELP,
    result: ResultRule::Fixed(DataType::Float64),
    param: Param::None,
    stores: "a sum and a count of {of}",
    state: "avg",
    make: |_| AggFn::Avg,
};

/// `count(DISTINCT ..)`: refused on streams.
pub static COUNT_DISTINCT: AggregateDef = AggregateDef {
    name: "count_distinct",
    aliases: &[],
    takes_star: false,
    streaming: false,
    input: InputRule::Any,
    input_help: "count_distinct takes any column",
    result: ResultRule::Fixed(DataType::Int64),
    param: Param::None,
    stores: "the distinct values of {of}",
    state: "distinct",
    make: |_| AggFn::CountDistinct,
};

/// `approx_count_distinct`: HyperLogLog++.
pub static APPROX_COUNT_DISTINCT: AggregateDef = AggregateDef {
    name: "approx_count_distinct",
    aliases: &[],
    takes_star: false,
    streaming: true,
    input: InputRule::Value,
    input_help: "approx_count_distinct takes a value column (not a window)",
    result: ResultRule::Fixed(DataType::Int64),
    param: Param::Rsd,
    stores: "a HyperLogLog++ sketch of {of}",
    state: "hll",
    make: |a| AggFn::ApproxCountDistinct {
        rsd: match a {
            Arg::Rsd(r) => r,
            _ => Rsd::DEFAULT,
        },
    },
};

/// `first` (`first_value`).
pub static FIRST: AggregateDef = AggregateDef {
    name: "first",
    aliases: &["first_value"],
    stores: "the first value of {of} seen",
    state: "first",
    make: |a| AggFn::First {
        ignore_nulls: matches!(a, Arg::IgnoreNulls(true)),
    },
    ..FIRST_LAST_BODY
};

/// `last` (`last_value`).
pub static LAST: AggregateDef = AggregateDef {
    name: "last",
    aliases: &["last_value"],
    stores: "the last value of {of} seen",
    state: "last",
    make: |a| AggFn::Last {
        ignore_nulls: matches!(a, Arg::IgnoreNulls(true)),
    },
    ..FIRST_LAST_BODY
};

/// What `first` and `last` share.
const FIRST_LAST_BODY: AggregateDef = AggregateDef {
    name: "first",
    aliases: &["first_value"],
    takes_star: false,
    streaming: true,
    input: InputRule::Value,
    input_help: "first and last take a value column (not a window)",
    result: ResultRule::Input,
    param: Param::IgnoreNulls,
    stores: "the first value of {of} seen",
    state: "first",
    make: |a| AggFn::First {
        ignore_nulls: matches!(a, Arg::IgnoreNulls(true)),
    },
};

const MOMENTS_STORE: &str = "the count, mean and sum of squared deviations of {of}";

/// `stddev_samp` (`stddev`, `std`).
pub static STDDEV_SAMP: AggregateDef = AggregateDef {
    name: "stddev_samp",
    aliases: &["stddev", "std"],
    make: |_| AggFn::StddevSamp,
    ..MOMENTS_BODY
};

/// `stddev_pop`.
pub static STDDEV_POP: AggregateDef = AggregateDef {
    name: "stddev_pop",
    aliases: &[],
    make: |_| AggFn::StddevPop,
    ..MOMENTS_BODY
};

/// `var_samp` (`variance`).
pub static VAR_SAMP: AggregateDef = AggregateDef {
    name: "var_samp",
    aliases: &["variance"],
    make: |_| AggFn::VarSamp,
    ..MOMENTS_BODY
};

/// `var_pop`.
pub static VAR_POP: AggregateDef = AggregateDef {
    name: "var_pop",
    aliases: &[],
    make: |_| AggFn::VarPop,
    ..MOMENTS_BODY
};

/// What the variance family shares.
const MOMENTS_BODY: AggregateDef = AggregateDef {
    name: "stddev_samp",
    aliases: &[],
    takes_star: false,
    streaming: true,
    input: InputRule::Numeric,
    input_help: MOMENT_HELP,
    result: ResultRule::Fixed(DataType::Float64),
    param: Param::None,
    stores: MOMENTS_STORE,
    state: "moments",
    make: |_| AggFn::StddevSamp,
};

const COLLECT_HELP: &str =
    "collect_list and collect_set take a column of a scalar type (not a window, not an array)";

/// `collect_list` (`array_agg`): the group's non-null values in arrival
/// order, at most `spark.sql.streaming.weir.collectMaxValues` of them.
pub static COLLECT_LIST: AggregateDef = AggregateDef {
    name: "collect_list",
    aliases: &["array_agg"],
    takes_star: false,
    streaming: true,
    input: InputRule::Element,
    input_help: COLLECT_HELP,
    result: ResultRule::ListOfInput,
    param: Param::None,
    stores: "the non-null values of {of} (at most spark.sql.streaming.weir.collectMaxValues)",
    state: "list",
    make: |_| AggFn::CollectList,
};

/// `collect_set`: the group's distinct non-null values in the order they
/// first arrived, at most `spark.sql.streaming.weir.collectMaxValues`.
pub static COLLECT_SET: AggregateDef = AggregateDef {
    name: "collect_set",
    aliases: &[],
    takes_star: false,
    streaming: true,
    input: InputRule::Element,
    input_help: COLLECT_HELP,
    result: ResultRule::ListOfInput,
    param: Param::None,
    stores:
        "the distinct non-null values of {of} (at most spark.sql.streaming.weir.collectMaxValues)",
    state: "set",
    make: |_| AggFn::CollectSet,
};

/// Every aggregate function, in the order messages list them.
pub static AGGREGATES: &[&AggregateDef] = &[
    &COUNT,
    &SUM,
    &MIN,
    &MAX,
    &AVG,
    &COUNT_DISTINCT,
    &APPROX_COUNT_DISTINCT,
    &FIRST,
    &LAST,
    &STDDEV_SAMP,
    &STDDEV_POP,
    &VAR_SAMP,
    &VAR_POP,
    &COLLECT_LIST,
    &COLLECT_SET,
];

/// The function named `name` (Spark's name or an alias, any case).
pub fn lookup(name: &str) -> Option<&'static AggregateDef> {
    let name = name.to_ascii_lowercase();
    AGGREGATES
        .iter()
        .copied()
        .find(|d| d.name == name || d.aliases.contains(&name.as_str()))
}

/// Every name and alias (for suggestions).
pub fn names() -> Vec<&'static str> {
    AGGREGATES
        .iter()
        .flat_map(|d| std::iter::once(d.name).chain(d.aliases.iter().copied()))
        .collect()
}

impl AggFn {
    /// The function's catalogue entry.
    pub fn def(self) -> &'static AggregateDef {
        match self {
            AggFn::Count => &COUNT,
            AggFn::Sum => &SUM,
            AggFn::Min => &MIN,
            AggFn::Max => &MAX,
            AggFn::Avg => &AVG,
            AggFn::CountDistinct => &COUNT_DISTINCT,
            AggFn::ApproxCountDistinct { .. } => &APPROX_COUNT_DISTINCT,
            AggFn::First { .. } => &FIRST,
            AggFn::Last { .. } => &LAST,
            AggFn::StddevSamp => &STDDEV_SAMP,
            AggFn::StddevPop => &STDDEV_POP,
            AggFn::VarSamp => &VAR_SAMP,
            AggFn::VarPop => &VAR_POP,
            AggFn::CollectList => &COLLECT_LIST,
            AggFn::CollectSet => &COLLECT_SET,
        }
    }

    /// Its second argument.
    pub fn arg(self) -> Arg {
        match self {
            AggFn::ApproxCountDistinct { rsd } => Arg::Rsd(rsd),
            AggFn::First { ignore_nulls } | AggFn::Last { ignore_nulls } => {
                Arg::IgnoreNulls(ignore_nulls)
            }
            _ => Arg::None,
        }
    }

    /// What of its second argument its state depends on: a sketch's
    /// precision (two rsds of one precision keep the same sketch), whether
    /// nulls were skipped.
    pub fn state_arg(self) -> Option<u8> {
        match self.arg() {
            Arg::None => None,
            Arg::Rsd(r) => Some(r.precision()),
            Arg::IgnoreNulls(b) => Some(b as u8),
        }
    }

    /// True when a state kept for `self` means the same for `other`.
    pub fn same_state(self, other: AggFn) -> bool {
        self == other
            || (self.def().state == other.def().state && self.state_arg() == other.state_arg())
    }

    /// The call as written: `count()` for `count(*)`, `sum(n)`,
    /// `approx_count_distinct(user, 0.01)`, `first(x, true)` (a default
    /// second argument left out).
    pub fn call(self, column: &str) -> String {
        let col = if column == "*" { "" } else { column };
        match self.arg() {
            Arg::Rsd(r) if r != Rsd::DEFAULT => format!("{}({col}, {})", self.name(), r.value()),
            Arg::IgnoreNulls(true) => format!("{}({col}, true)", self.name()),
            _ => format!("{}({col})", self.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_makes_its_own_function() {
        for d in AGGREGATES {
            assert!(std::ptr::eq(d.default_fn().def(), *d), "{}", d.name);
            assert_eq!(lookup(d.name).map(|l| l.name), Some(d.name));
            for a in d.aliases {
                assert_eq!(lookup(a).map(|l| l.name), Some(d.name));
            }
        }
    }

    /// `stream_query!` names the variant after the Spark name.
    #[test]
    fn every_variant_is_named_after_its_spark_name() {
        for d in AGGREGATES {
            let camel: String = d
                .name
                .split('_')
                .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
                .collect();
            let debug = format!("{:?}", d.default_fn());
            let variant = debug.split([' ', '{']).next().unwrap_or_default();
            assert_eq!(variant, camel, "{}", d.name);
        }
    }

    #[test]
    fn result_types_follow_spark() {
        use DataType::*;
        let acd = APPROX_COUNT_DISTINCT.default_fn();
        assert_eq!(acd.result_type(Some(String)), Some(Int64));
        assert_eq!(acd.result_type(Some(Window)), None);
        let first = FIRST.default_fn();
        assert_eq!(first.result_type(Some(Timestamp)), Some(Timestamp));
        assert_eq!(first.result_type(Some(Bool)), Some(Bool));
        for f in [
            AggFn::StddevSamp,
            AggFn::StddevPop,
            AggFn::VarSamp,
            AggFn::VarPop,
        ] {
            assert_eq!(f.result_type(Some(Int32)), Some(Float64));
            assert_eq!(f.result_type(Some(String)), None);
        }
        assert_eq!(AggFn::Sum.result_type(Some(Int32)), Some(Int64));
        assert_eq!(AggFn::Count.result_type(None), Some(Int64));
        assert_eq!(AggFn::Sum.result_type(None), None);
        for f in [AggFn::CollectList, AggFn::CollectSet] {
            assert_eq!(
                f.result_type(Some(String)),
                Some(List(crate::types::ElementType::String))
            );
            assert_eq!(
                f.result_type(Some(Timestamp)),
                Some(List(crate::types::ElementType::Timestamp))
            );
            assert_eq!(f.result_type(Some(Window)), None);
            assert_eq!(
                f.result_type(Some(List(crate::types::ElementType::Int64))),
                None
            );
            assert!(!f.def().result_may_be_null());
        }
        assert_eq!(lookup("array_agg").map(|d| d.name), Some("collect_list"));
        assert!(!AggFn::CollectList.same_state(AggFn::CollectSet));
        assert!(FIRST.result_may_be_null());
        assert!(!COUNT.result_may_be_null());
        // A list is not a value first, last or min take.
        let list = Some(List(crate::types::ElementType::Int64));
        assert_eq!(FIRST.default_fn().result_type(list), None);
        assert_eq!(AggFn::Min.result_type(list), None);
    }

    #[test]
    fn rsd_uses_sparks_precision_and_bounds() {
        assert_eq!(Rsd::DEFAULT.precision(), 9);
        assert_eq!(Rsd::new(0.01).unwrap().precision(), 14);
        assert_eq!(Rsd::new(0.39).unwrap().precision(), 4);
        assert!(Rsd::new(0.4).is_err());
        assert!(Rsd::new(0.001).is_err());
        assert!(Rsd::new(f64::NAN).is_err());
    }

    #[test]
    fn the_variance_family_shares_its_state_and_a_sketch_its_precision() {
        assert!(AggFn::StddevSamp.same_state(AggFn::VarPop));
        assert!(!AggFn::Sum.same_state(AggFn::Count));
        let acd = |r| AggFn::ApproxCountDistinct {
            rsd: Rsd::new(r).unwrap(),
        };
        assert!(acd(0.05).same_state(acd(0.049)));
        assert!(!acd(0.05).same_state(acd(0.01)));
        assert!(!AggFn::First {
            ignore_nulls: false
        }
        .same_state(AggFn::First { ignore_nulls: true }));
        assert!(!AggFn::First {
            ignore_nulls: false
        }
        .same_state(AggFn::Last {
            ignore_nulls: false
        }));
    }

    #[test]
    fn calls_print_spark_style() {
        assert_eq!(AggFn::Count.call("*"), "count()");
        assert_eq!(
            APPROX_COUNT_DISTINCT.default_fn().call("u"),
            "approx_count_distinct(u)"
        );
        let r = AggFn::ApproxCountDistinct {
            rsd: Rsd::new(0.01).unwrap(),
        };
        assert_eq!(r.call("u"), "approx_count_distinct(u, 0.01)");
        assert_eq!(
            AggFn::Last { ignore_nulls: true }.call("x"),
            "last(x, true)"
        );
    }
}
