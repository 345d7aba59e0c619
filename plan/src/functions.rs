//! The scalar function catalogue: every function weir knows by name, how
//! many arguments it takes, of what type, and what it returns. The macro's
//! type checker reads it to type a call at compile time; the engine
//! registers the functions marked [`Provider::Weir`] under these names and
//! its tests prove every entry resolves at run time. A function not listed
//! here still runs (DataFusion has many more) but is untyped at compile time.
//!
//! ```
//! use weir_plan::functions::{lookup, Returns};
//! use weir_plan::DataType;
//! let hour = lookup("hour").unwrap();
//! assert_eq!(hour.returns, Returns::Type(DataType::Int32));
//! assert!(lookup("HOUR").is_some());
//! assert!(lookup("no_such_function").is_none());
//! ```

use crate::types::DataType;

/// A scalar function weir knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScalarFunction {
    /// Its SQL name (Spark's).
    pub name: &'static str,
    /// The fewest arguments it takes.
    pub min_args: usize,
    /// The most arguments it takes (`None`: any number).
    pub max_args: Option<usize>,
    /// What its arguments must be.
    pub args: ArgRule,
    /// What it returns.
    pub returns: Returns,
    /// When its result can be null.
    pub null: NullRule,
    /// Who implements it at run time.
    pub provider: Provider,
}

/// What a function's arguments must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgRule {
    /// Anything.
    Any,
    /// The first argument a string.
    FirstString,
    /// Every argument a number.
    Numeric,
    /// The first argument a timestamp.
    FirstTimestamp,
}

/// What a function returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returns {
    /// Always this type.
    Type(DataType),
    /// Its first argument's type.
    FirstArg,
}

/// When a function's result is null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullRule {
    /// When any argument is (SQL's usual rule).
    AnyArg,
    /// Only when every argument is (`coalesce`).
    AllArgs,
}

/// Who implements a function at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// DataFusion's built-in of the same name.
    DataFusion,
    /// weir registers it (a Spark name DataFusion lacks).
    Weir,
}

const fn f(
    name: &'static str,
    min_args: usize,
    max_args: Option<usize>,
    args: ArgRule,
    returns: Returns,
) -> ScalarFunction {
    ScalarFunction {
        name,
        min_args,
        max_args,
        args,
        returns,
        null: NullRule::AnyArg,
        provider: Provider::DataFusion,
    }
}

const STRING: Returns = Returns::Type(DataType::String);
const INT: Returns = Returns::Type(DataType::Int32);
const DOUBLE: Returns = Returns::Type(DataType::Float64);

const fn weir(name: &'static str) -> ScalarFunction {
    ScalarFunction {
        provider: Provider::Weir,
        ..f(name, 1, Some(1), ArgRule::FirstTimestamp, INT)
    }
}

/// Every scalar function weir knows.
pub const SCALAR_FUNCTIONS: &[ScalarFunction] = &[
    // Strings.
    f("lower", 1, Some(1), ArgRule::FirstString, STRING),
    f("upper", 1, Some(1), ArgRule::FirstString, STRING),
    f("trim", 1, Some(1), ArgRule::FirstString, STRING),
    f("ltrim", 1, Some(2), ArgRule::FirstString, STRING),
    f("rtrim", 1, Some(2), ArgRule::FirstString, STRING),
    f("btrim", 1, Some(2), ArgRule::FirstString, STRING),
    f("initcap", 1, Some(1), ArgRule::FirstString, STRING),
    f("reverse", 1, Some(1), ArgRule::FirstString, STRING),
    f("lpad", 2, Some(3), ArgRule::FirstString, STRING),
    f("rpad", 2, Some(3), ArgRule::FirstString, STRING),
    f("substr", 2, Some(3), ArgRule::FirstString, STRING),
    f("substring", 2, Some(3), ArgRule::FirstString, STRING),
    f("replace", 3, Some(3), ArgRule::FirstString, STRING),
    f("concat", 1, None, ArgRule::Any, STRING),
    f("concat_ws", 2, None, ArgRule::FirstString, STRING),
    f("length", 1, Some(1), ArgRule::FirstString, INT),
    f("char_length", 1, Some(1), ArgRule::FirstString, INT),
    f("character_length", 1, Some(1), ArgRule::FirstString, INT),
    // Numbers.
    f("sqrt", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("ln", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("log10", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("log2", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("exp", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("power", 2, Some(2), ArgRule::Numeric, DOUBLE),
    f("pow", 2, Some(2), ArgRule::Numeric, DOUBLE),
    f("round", 1, Some(2), ArgRule::Numeric, DOUBLE),
    f("floor", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("ceil", 1, Some(1), ArgRule::Numeric, DOUBLE),
    f("abs", 1, Some(1), ArgRule::Numeric, Returns::FirstArg),
    // Any type.
    ScalarFunction {
        null: NullRule::AllArgs,
        ..f("coalesce", 1, None, ArgRule::Any, Returns::FirstArg)
    },
    // Timestamps: Spark's names, which return `int`.
    weir("hour"),
    weir("minute"),
    weir("second"),
    weir("year"),
    weir("month"),
    weir("dayofmonth"),
];

/// The function of this name (case-insensitive), if weir knows it.
pub fn lookup(name: &str) -> Option<&'static ScalarFunction> {
    SCALAR_FUNCTIONS
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case(name))
}

impl ScalarFunction {
    /// The message when it is called with `given` arguments and that is
    /// not a number it takes.
    pub fn arity_error(&self, given: usize) -> Option<String> {
        let ok = given >= self.min_args && self.max_args.is_none_or(|m| given <= m);
        if ok {
            return None;
        }
        let takes = match self.max_args {
            Some(m) if m == self.min_args => format!("{m}"),
            Some(m) => format!("{} to {m}", self.min_args),
            None => format!("at least {}", self.min_args),
        };
        let plural = if takes == "1" { "" } else { "s" };
        Some(format!(
            "`{}` takes {takes} argument{plural}, but {given} were given",
            self.name
        ))
    }

    /// The message when argument `index` (0-based) has type `given` and the
    /// function does not take it.
    pub fn argument_error(&self, index: usize, given: DataType) -> Option<String> {
        let wanted = match (self.args, index) {
            (ArgRule::FirstString, 0) if given != DataType::String => "a string",
            (ArgRule::FirstTimestamp, 0) if given != DataType::Timestamp => "a timestamp",
            (ArgRule::Numeric, _) if !given.is_numeric() => "a number",
            _ => return None,
        };
        Some(format!(
            "`{}` takes {wanted}, but this is {}",
            self.name,
            given.name()
        ))
    }

    /// Its result type, given its first argument's type when known.
    pub fn result_type(&self, first: Option<DataType>) -> Option<DataType> {
        match self.returns {
            Returns::Type(t) => Some(t),
            Returns::FirstArg => first,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lower_case() {
        for (i, a) in SCALAR_FUNCTIONS.iter().enumerate() {
            assert_eq!(a.name, a.name.to_ascii_lowercase());
            assert!(
                SCALAR_FUNCTIONS[..i].iter().all(|b| b.name != a.name),
                "{} twice",
                a.name
            );
        }
    }

    #[test]
    fn arity_and_argument_errors_say_what_it_takes() {
        let hour = lookup("hour").unwrap();
        assert_eq!(hour.arity_error(1), None);
        assert_eq!(
            hour.arity_error(2).unwrap(),
            "`hour` takes 1 argument, but 2 were given"
        );
        assert_eq!(
            lookup("lpad").unwrap().arity_error(1).unwrap(),
            "`lpad` takes 2 to 3 arguments, but 1 were given"
        );
        assert_eq!(
            lookup("concat_ws").unwrap().arity_error(1).unwrap(),
            "`concat_ws` takes at least 2 arguments, but 1 were given"
        );
        assert_eq!(lookup("concat").unwrap().arity_error(9), None);
        assert_eq!(
            hour.argument_error(0, DataType::String).unwrap(),
            "`hour` takes a timestamp, but this is string"
        );
        assert_eq!(hour.argument_error(0, DataType::Timestamp), None);
        assert_eq!(
            lookup("sqrt")
                .unwrap()
                .argument_error(0, DataType::Bool)
                .unwrap(),
            "`sqrt` takes a number, but this is bool"
        );
        assert_eq!(
            lookup("abs").unwrap().result_type(Some(DataType::Int64)),
            Some(DataType::Int64)
        );
    }
}
