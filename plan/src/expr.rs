//! Expressions as a tree: what a filter, a projection or a join condition
//! says, read once from SQL text (with sqlparser, the parser DataFusion
//! uses) and then asked questions as data — the columns it names, its
//! `AND` conjuncts, whether it is a comparison, a window function or reads
//! the current time — instead of scanning text.
//!
//! ```
//! use weir_plan::expr::{BinaryOp, Expr};
//! let e = Expr::parse("genre = 'rock and roll' AND plays > 10").unwrap();
//! assert_eq!(e.conjuncts().len(), 2);
//! assert_eq!(e.columns(), vec!["genre", "plays"]);
//! assert_eq!(e.to_string(), "genre = 'rock and roll' AND plays > 10");
//! let Expr::Binary { op, .. } = &e.conjuncts()[1] else { unreachable!() };
//! assert_eq!(*op, BinaryOp::Gt);
//! ```

use std::fmt;
use std::ops::ControlFlow;

use sqlparser::ast as sql;
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use crate::types::DataType;

/// An expression of a stream query.
#[derive(Clone, PartialEq)]
pub enum Expr {
    /// A column, optionally qualified (`c.user_id`).
    Column {
        /// The qualifier before the dot, if any.
        qualifier: Option<String>,
        /// The column's name as written (quotes removed).
        name: String,
    },
    /// A literal value.
    Literal(Literal),
    /// `INTERVAL '15 minutes'`: the duration text and its length.
    Interval {
        /// The duration as written (`15 minutes`).
        text: String,
        /// Its length in milliseconds, when weir's duration syntax reads it.
        ms: Option<i64>,
    },
    /// `NOT e`, `-e`, `+e`.
    Unary {
        /// The operator.
        op: UnaryOp,
        /// The operand.
        expr: Box<Expr>,
    },
    /// `left op right`.
    Binary {
        /// The left operand.
        left: Box<Expr>,
        /// The operator.
        op: BinaryOp,
        /// The right operand.
        right: Box<Expr>,
    },
    /// A function call, possibly a window function (`... OVER (...)`).
    Call(Call),
    /// `CAST(e AS type)`.
    Cast {
        /// The value cast.
        expr: Box<Expr>,
        /// The target type as written in SQL (`BIGINT`).
        to: String,
    },
    /// `e IS [NOT] NULL`.
    IsNull {
        /// The value tested.
        expr: Box<Expr>,
        /// `IS NOT NULL`.
        negated: bool,
    },
    /// `e [NOT] BETWEEN low AND high`.
    Between {
        /// The value tested.
        expr: Box<Expr>,
        /// `NOT BETWEEN`.
        negated: bool,
        /// The lower bound.
        low: Box<Expr>,
        /// The upper bound.
        high: Box<Expr>,
    },
    /// `e [NOT] IN (a, b, ...)`.
    InList {
        /// The value tested.
        expr: Box<Expr>,
        /// The candidates.
        list: Vec<Expr>,
        /// `NOT IN`.
        negated: bool,
    },
    /// `e [NOT] LIKE pattern` (`ILIKE` when case-insensitive).
    Like {
        /// The value tested.
        expr: Box<Expr>,
        /// The pattern.
        pattern: Box<Expr>,
        /// `NOT LIKE`.
        negated: bool,
        /// `ILIKE`.
        case_insensitive: bool,
    },
    /// `CASE [operand] WHEN .. THEN .. [ELSE ..] END`.
    Case {
        /// The operand of a simple `CASE x WHEN ...`.
        operand: Option<Box<Expr>>,
        /// The `WHEN` / `THEN` pairs.
        branches: Vec<(Expr, Expr)>,
        /// The `ELSE` value.
        otherwise: Option<Box<Expr>>,
    },
    /// `*` as a function argument (`count(*)`).
    Wildcard,
    /// SQL this tree does not model (a subquery, a typed string, ...): its
    /// text, kept verbatim, and the columns found in it.
    Other {
        /// The SQL text.
        sql: String,
        /// The columns it names.
        columns: Vec<String>,
    },
    /// Text that is not one SQL expression, kept so that a plan can still
    /// hold it and the plan's rules report it ([`Expr::read`]).
    Invalid {
        /// The text.
        sql: String,
        /// What the parser said.
        message: String,
    },
}

/// A literal value.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `NULL`.
    Null,
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// A number as written (`42`, `1.5`, `1e3`).
    Number(String),
    /// A string (quotes removed, doubled quotes undone).
    String(String),
}

/// A unary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `NOT`.
    Not,
    /// `-`.
    Minus,
    /// `+`.
    Plus,
}

/// A binary operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `AND`.
    And,
    /// `OR`.
    Or,
    /// `=`.
    Eq,
    /// `<>`.
    NotEq,
    /// `<`.
    Lt,
    /// `<=`.
    LtEq,
    /// `>`.
    Gt,
    /// `>=`.
    GtEq,
    /// `+`.
    Plus,
    /// `-`.
    Minus,
    /// `*`.
    Multiply,
    /// `/`.
    Divide,
    /// `%`.
    Modulo,
    /// `||`.
    Concat,
}

/// A function call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The function's name as written.
    pub name: String,
    /// The arguments.
    pub args: Vec<Expr>,
    /// `f(DISTINCT ...)`.
    pub distinct: bool,
    /// Whether the call was written with parentheses (`CURRENT_TIMESTAMP`
    /// may be written without).
    pub parens: bool,
    /// The window of a window function (`OVER (...)`).
    pub over: Option<Over>,
}

/// The window specification of `f(...) OVER (...)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Over {
    /// `PARTITION BY` expressions.
    pub partition_by: Vec<Expr>,
    /// `ORDER BY` expressions, each with `true` for ascending.
    pub order_by: Vec<(Expr, bool)>,
    /// The whole specification as SQL text, when it has a frame or names a
    /// window (which the tree does not model).
    pub verbatim: Option<String>,
}

/// SQL text that is not one expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// The text.
    pub sql: String,
    /// What the parser said.
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is not a SQL expression: {}",
            self.sql, self.message
        )
    }
}

impl std::error::Error for ExprError {}

impl BinaryOp {
    /// True for `=`, `<>`, `<`, `<=`, `>`, `>=`.
    pub fn is_comparison(self) -> bool {
        use BinaryOp::*;
        matches!(self, Eq | NotEq | Lt | LtEq | Gt | GtEq)
    }

    /// The operator as SQL.
    pub fn sql(self) -> &'static str {
        use BinaryOp::*;
        match self {
            And => "AND",
            Or => "OR",
            Eq => "=",
            NotEq => "<>",
            Lt => "<",
            LtEq => "<=",
            Gt => ">",
            GtEq => ">=",
            Plus => "+",
            Minus => "-",
            Multiply => "*",
            Divide => "/",
            Modulo => "%",
            Concat => "||",
        }
    }

    /// How tightly it binds (higher binds tighter), as SQL parses it.
    fn precedence(self) -> u8 {
        use BinaryOp::*;
        match self {
            Or => 1,
            And => 2,
            Eq | NotEq | Lt | LtEq | Gt | GtEq => 4,
            Plus | Minus => 6,
            // sqlparser (DataFusion's parser) binds `||` as tightly as `*`.
            Multiply | Divide | Modulo | Concat => 7,
        }
    }
}

const ATOM: u8 = 10;

impl Expr {
    /// Reads SQL expression text (DataFusion's dialect).
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let error = |e: sqlparser::parser::ParserError| ExprError {
            sql: text.to_string(),
            message: e.to_string(),
        };
        let dialect = GenericDialect {};
        let mut parser = Parser::new(&dialect).try_with_sql(text).map_err(error)?;
        let parsed = parser.parse_expr().map_err(error)?;
        if parser.peek_token().token != sqlparser::tokenizer::Token::EOF {
            return Err(ExprError {
                sql: text.to_string(),
                message: format!("unexpected `{}` after the expression", parser.peek_token()),
            });
        }
        Ok(from_sql(&parsed))
    }

    /// Reads SQL text into a tree, keeping text that does not parse as
    /// [`Expr::Invalid`] (the plan holds what it was given; `resolve`
    /// reports it).
    pub fn read(text: &str) -> Expr {
        Expr::parse(text).unwrap_or_else(|e| Expr::Invalid {
            sql: e.sql,
            message: e.message,
        })
    }

    /// The parser's complaint when it is [`Expr::Invalid`].
    pub fn invalid(&self) -> Option<ExprError> {
        match self {
            Expr::Invalid { sql, message } => Some(ExprError {
                sql: sql.clone(),
                message: message.clone(),
            }),
            _ => None,
        }
    }

    /// A column reference.
    pub fn column(name: impl Into<String>) -> Expr {
        Expr::Column {
            qualifier: None,
            name: name.into(),
        }
    }

    /// The names of the columns it reads, in order of first use (a
    /// qualified reference yields its column part).
    pub fn columns(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        self.walk(&mut |e| {
            let names: &[String] = match e {
                Expr::Column { name, .. } => std::slice::from_ref(name),
                Expr::Other { columns, .. } => columns,
                _ => &[],
            };
            for n in names {
                if !out.contains(n) {
                    out.push(n.clone());
                }
            }
        });
        out
    }

    /// The column it is, when it is one bare column.
    pub fn as_column(&self) -> Option<&str> {
        match self {
            Expr::Column { name, .. } => Some(name),
            _ => None,
        }
    }

    /// Its top-level `AND` conjuncts (itself when it is not a conjunction).
    pub fn conjuncts(&self) -> Vec<Expr> {
        match self {
            Expr::Binary {
                left,
                op: BinaryOp::And,
                right,
            } => {
                let mut out = left.conjuncts();
                out.extend(right.conjuncts());
                out
            }
            other => vec![other.clone()],
        }
    }

    /// `(left, op, right)` when it is a comparison.
    pub fn comparison(&self) -> Option<(&Expr, BinaryOp, &Expr)> {
        match self {
            Expr::Binary { left, op, right } if op.is_comparison() => Some((left, *op, right)),
            _ => None,
        }
    }

    /// True for a comparison `<`, `<=`, `>`, `>=` or a `BETWEEN`: a range.
    pub fn is_range(&self) -> bool {
        match self {
            Expr::Between { negated, .. } => !negated,
            _ => self
                .comparison()
                .is_some_and(|(_, op, _)| !matches!(op, BinaryOp::Eq | BinaryOp::NotEq)),
        }
    }

    /// True for an equality `a = b`.
    pub fn is_equality(&self) -> bool {
        self.comparison()
            .is_some_and(|(_, op, _)| op == BinaryOp::Eq)
    }

    /// The first window function call (`f(...) OVER (...)`) in it.
    pub fn window_function(&self) -> Option<&Call> {
        if let Expr::Call(c) = self {
            if c.over.is_some() {
                return Some(c);
            }
        }
        self.children().into_iter().find_map(Expr::window_function)
    }

    /// True when it reads the current time (`current_timestamp()`, `now()`,
    /// `current_date()`, `localtimestamp`).
    pub fn uses_current_time(&self) -> bool {
        let mut found = false;
        self.walk(&mut |e| {
            if let Expr::Call(c) = e {
                let name = c.name.to_ascii_lowercase();
                if matches!(
                    name.as_str(),
                    "current_timestamp" | "current_date" | "localtimestamp" | "now"
                ) {
                    found = true;
                }
            }
            if let Expr::Other { sql, .. } = e {
                let lower = sql.to_ascii_lowercase();
                if lower.contains("current_timestamp") || lower.contains("localtimestamp") {
                    found = true;
                }
            }
        });
        found
    }

    /// The type a `CAST(... AS T)` gives, when the whole expression is one.
    pub fn cast_type(&self) -> Option<DataType> {
        let Expr::Cast { to, .. } = self else {
            return None;
        };
        sql_type(to)
    }

    /// `column`, `column + INTERVAL '..'` or `column - INTERVAL '..'` as
    /// (column, offset in ms).
    pub fn time_term(&self) -> Option<(&str, i64)> {
        match self {
            Expr::Column { name, .. } => Some((name, 0)),
            Expr::Binary { left, op, right } => {
                let (Some(c), Expr::Interval { ms: Some(ms), .. }) = (left.as_column(), &**right)
                else {
                    return None;
                };
                match op {
                    BinaryOp::Plus => Some((c, *ms)),
                    BinaryOp::Minus => Some((c, -*ms)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// Calls `f` on this expression and every expression inside it.
    pub fn walk(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        for c in self.children() {
            c.walk(f);
        }
    }

    /// The expressions directly inside this one.
    pub fn children(&self) -> Vec<&Expr> {
        match self {
            Expr::Column { .. }
            | Expr::Literal(_)
            | Expr::Interval { .. }
            | Expr::Wildcard
            | Expr::Other { .. }
            | Expr::Invalid { .. } => vec![],
            Expr::Unary { expr, .. } | Expr::Cast { expr, .. } | Expr::IsNull { expr, .. } => {
                vec![expr]
            }
            Expr::Binary { left, right, .. } => vec![left, right],
            Expr::Call(c) => {
                let mut out: Vec<&Expr> = c.args.iter().collect();
                if let Some(o) = &c.over {
                    out.extend(o.partition_by.iter());
                    out.extend(o.order_by.iter().map(|(e, _)| e));
                }
                out
            }
            Expr::Between {
                expr, low, high, ..
            } => vec![expr, low, high],
            Expr::InList { expr, list, .. } => {
                let mut out: Vec<&Expr> = vec![expr];
                out.extend(list.iter());
                out
            }
            Expr::Like { expr, pattern, .. } => vec![expr, pattern],
            Expr::Case {
                operand,
                branches,
                otherwise,
            } => {
                let mut out: Vec<&Expr> = operand.iter().map(|e| &**e).collect();
                for (w, t) in branches {
                    out.push(w);
                    out.push(t);
                }
                out.extend(otherwise.iter().map(|e| &**e));
                out
            }
        }
    }

    fn precedence(&self) -> u8 {
        match self {
            Expr::Binary { op, .. } => op.precedence(),
            Expr::Unary {
                op: UnaryOp::Not, ..
            } => 3,
            Expr::IsNull { .. }
            | Expr::Between { .. }
            | Expr::InList { .. }
            | Expr::Like { .. } => 4,
            Expr::Unary { .. } => 8,
            Expr::Other { .. } | Expr::Invalid { .. } => 0,
            _ => ATOM,
        }
    }
}

impl Call {
    /// The call without its window, in upper case (`ROW_NUMBER()`), as
    /// Spark names a window function in its messages.
    pub fn signature(&self) -> String {
        let plain = Call {
            over: None,
            ..self.clone()
        };
        Expr::Call(plain).to_string().to_ascii_uppercase()
    }
}

/// The DataType a SQL type name stands for (`BIGINT`, `VARCHAR`, ...).
pub fn sql_type(name: &str) -> Option<DataType> {
    let lower = name.trim().to_ascii_lowercase();
    let base = lower.split('(').next().unwrap_or("").trim();
    match base {
        "varchar" | "text" | "char" | "character varying" => Some(DataType::String),
        "bytea" => Some(DataType::Binary),
        other => DataType::parse(other),
    }
}

/// A column name as SQL: bare when it is a plain lower-case identifier that
/// is not a keyword, else double-quoted (DataFusion folds unquoted names to
/// lower case).
pub fn sql_ident(name: &str) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain && !SQL_KEYWORDS.contains(&name) {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// A string literal as SQL: single-quoted, quotes doubled.
pub fn sql_string(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Words a column name must be quoted to be read as one.
const SQL_KEYWORDS: &[&str] = &[
    "all",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "between",
    "by",
    "case",
    "cast",
    "current",
    "current_date",
    "current_time",
    "current_timestamp",
    "date",
    "default",
    "desc",
    "distinct",
    "else",
    "end",
    "escape",
    "except",
    "exists",
    "false",
    "filter",
    "first",
    "following",
    "for",
    "from",
    "full",
    "group",
    "having",
    "ilike",
    "in",
    "inner",
    "intersect",
    "interval",
    "is",
    "join",
    "last",
    "left",
    "like",
    "limit",
    "localtimestamp",
    "not",
    "null",
    "nulls",
    "offset",
    "on",
    "or",
    "order",
    "outer",
    "over",
    "partition",
    "preceding",
    "range",
    "right",
    "row",
    "rows",
    "select",
    "similar",
    "some",
    "table",
    "then",
    "time",
    "timestamp",
    "to",
    "true",
    "unbounded",
    "union",
    "user",
    "using",
    "values",
    "when",
    "where",
    "window",
    "with",
];

fn write_at(f: &mut fmt::Formatter<'_>, e: &Expr, min: u8) -> fmt::Result {
    if e.precedence() < min {
        write!(f, "({e})")
    } else {
        write!(f, "{e}")
    }
}

fn write_list(f: &mut fmt::Formatter<'_>, items: &[Expr]) -> fmt::Result {
    for (i, e) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{e}")?;
    }
    Ok(())
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Column { qualifier, name } => {
                if let Some(q) = qualifier {
                    write!(f, "{}.", sql_ident(q))?;
                }
                f.write_str(&sql_ident(name))
            }
            Expr::Literal(l) => write!(f, "{l}"),
            Expr::Interval { text, .. } => write!(f, "INTERVAL {}", sql_string(text)),
            Expr::Unary { op, expr } => {
                let p = self.precedence();
                match op {
                    UnaryOp::Not => f.write_str("NOT ")?,
                    UnaryOp::Minus => f.write_str("-")?,
                    UnaryOp::Plus => f.write_str("+")?,
                }
                // `--` would start a SQL comment: `-(-n)`.
                let signed = matches!(
                    **expr,
                    Expr::Unary {
                        op: UnaryOp::Minus | UnaryOp::Plus,
                        ..
                    }
                ) || matches!(&**expr, Expr::Literal(Literal::Number(n)) if n.starts_with('-'));
                match op {
                    // `NOT (n > 1)`, as Spark prints it, though SQL would
                    // not need the parentheses.
                    UnaryOp::Not => write_at(f, expr, ATOM),
                    _ if signed => write!(f, "({expr})"),
                    _ => write_at(f, expr, p),
                }
            }
            Expr::Binary { left, op, right } => {
                let p = op.precedence();
                // Comparisons do not chain: `(a = b) = c` keeps its parentheses.
                write_at(f, left, if op.is_comparison() { p + 1 } else { p })?;
                write!(f, " {} ", op.sql())?;
                // `a - -b` would start a SQL comment: `a - (-b)`.
                if *op == BinaryOp::Minus && right.to_string().starts_with('-') {
                    return write!(f, "({right})");
                }
                // Left-associative: a right operand of equal precedence
                // needs parentheses (`a - (b - c)`).
                write_at(f, right, p + 1)
            }
            Expr::Call(c) => {
                f.write_str(&c.name)?;
                if c.parens || !c.args.is_empty() || c.distinct {
                    f.write_str("(")?;
                    if c.distinct {
                        f.write_str("DISTINCT ")?;
                    }
                    write_list(f, &c.args)?;
                    f.write_str(")")?;
                }
                if let Some(o) = &c.over {
                    write!(f, " OVER ({o})")?;
                }
                Ok(())
            }
            Expr::Cast { expr, to } => write!(f, "CAST({expr} AS {to})"),
            Expr::IsNull { expr, negated } => {
                write_at(f, expr, 5)?;
                f.write_str(if *negated { " IS NOT NULL" } else { " IS NULL" })
            }
            Expr::Between {
                expr,
                negated,
                low,
                high,
            } => {
                write_at(f, expr, 5)?;
                f.write_str(if *negated {
                    " NOT BETWEEN "
                } else {
                    " BETWEEN "
                })?;
                write_at(f, low, 5)?;
                f.write_str(" AND ")?;
                write_at(f, high, 5)
            }
            Expr::InList {
                expr,
                list,
                negated,
            } => {
                write_at(f, expr, 5)?;
                f.write_str(if *negated { " NOT IN (" } else { " IN (" })?;
                write_list(f, list)?;
                f.write_str(")")
            }
            Expr::Like {
                expr,
                pattern,
                negated,
                case_insensitive,
            } => {
                write_at(f, expr, 5)?;
                let not = if *negated { " NOT" } else { "" };
                let like = if *case_insensitive { "ILIKE" } else { "LIKE" };
                write!(f, "{not} {like} ")?;
                write_at(f, pattern, 5)
            }
            Expr::Case {
                operand,
                branches,
                otherwise,
            } => {
                f.write_str("CASE")?;
                if let Some(o) = operand {
                    write!(f, " {o}")?;
                }
                for (w, t) in branches {
                    write!(f, " WHEN {w} THEN {t}")?;
                }
                if let Some(e) = otherwise {
                    write!(f, " ELSE {e}")?;
                }
                f.write_str(" END")
            }
            Expr::Wildcard => f.write_str("*"),
            Expr::Other { sql, .. } | Expr::Invalid { sql, .. } => f.write_str(sql),
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Null => f.write_str("NULL"),
            Literal::Bool(true) => f.write_str("TRUE"),
            Literal::Bool(false) => f.write_str("FALSE"),
            Literal::Number(n) => f.write_str(n),
            Literal::String(s) => f.write_str(&sql_string(s)),
        }
    }
}

impl fmt::Display for Over {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if !self.partition_by.is_empty() {
            let keys: Vec<String> = self.partition_by.iter().map(|e| e.to_string()).collect();
            parts.push(format!("PARTITION BY {}", keys.join(", ")));
        }
        if !self.order_by.is_empty() {
            let keys: Vec<String> = self
                .order_by
                .iter()
                .map(|(e, asc)| {
                    if *asc {
                        e.to_string()
                    } else {
                        format!("{e} DESC")
                    }
                })
                .collect();
            parts.push(format!("ORDER BY {}", keys.join(", ")));
        }
        match &self.verbatim {
            Some(v) => f.write_str(v),
            None => f.write_str(&parts.join(" ")),
        }
    }
}

/// Debug-printed as its SQL text in quotes, as the plan's `String`
/// expressions were, so a plan's fingerprint (`StreamPlan::fingerprint`,
/// which hashes the ops' Debug text) is unchanged for text already in the
/// tree's spelling (everything `stream_query!` writes). Builder text spelled
/// otherwise (`value>10`) hashes as its canonical form; only checkpoints
/// without a stored plan compare fingerprints, and every weir checkpoint
/// stores its plan.
impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string(), f)
    }
}

impl From<&str> for Expr {
    fn from(text: &str) -> Expr {
        Expr::read(text)
    }
}

impl From<String> for Expr {
    fn from(text: String) -> Expr {
        Expr::read(&text)
    }
}

impl From<&String> for Expr {
    fn from(text: &String) -> Expr {
        Expr::read(text)
    }
}

/// In the plan format an expression is its SQL text.
impl serde::Serialize for Expr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Expr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Expr, D::Error> {
        let text = String::deserialize(d)?;
        Ok(Expr::read(&text))
    }
}

// ---- from sqlparser's tree ----

fn other(e: &sql::Expr) -> Expr {
    let mut columns: Vec<String> = Vec::new();
    let _ = sql::visit_expressions(e, |x| {
        let name = match x {
            sql::Expr::Identifier(i) => Some(ident_name(i)),
            sql::Expr::CompoundIdentifier(parts) => parts.last().map(ident_name),
            _ => None,
        };
        if let Some(n) = name {
            if !columns.contains(&n) {
                columns.push(n);
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Expr::Other {
        sql: e.to_string(),
        columns,
    }
}

/// A name as DataFusion reads it: unquoted names fold to lower case,
/// quoted ones are kept as written.
fn ident_name(i: &sql::Ident) -> String {
    match i.quote_style {
        // DataFusion folds ASCII letters only (`normalize_ident`).
        None => i.value.to_ascii_lowercase(),
        Some(_) => i.value.clone(),
    }
}

fn boxed(e: &sql::Expr) -> Box<Expr> {
    Box::new(from_sql(e))
}

fn from_sql(e: &sql::Expr) -> Expr {
    use sql::Expr as S;
    match e {
        S::Identifier(i) => Expr::Column {
            qualifier: None,
            name: ident_name(i),
        },
        S::CompoundIdentifier(parts) if parts.len() >= 2 => Expr::Column {
            qualifier: Some(
                parts[..parts.len() - 1]
                    .iter()
                    .map(ident_name)
                    .collect::<Vec<_>>()
                    .join("."),
            ),
            name: ident_name(&parts[parts.len() - 1]),
        },
        S::Value(v) => match &v.value {
            sql::Value::Null => Expr::Literal(Literal::Null),
            sql::Value::Boolean(b) => Expr::Literal(Literal::Bool(*b)),
            sql::Value::Number(n, _) => Expr::Literal(Literal::Number(n.to_string())),
            sql::Value::SingleQuotedString(s) => Expr::Literal(Literal::String(s.clone())),
            _ => other(e),
        },
        S::Nested(inner) => from_sql(inner),
        S::UnaryOp { op, expr } => {
            let op = match op {
                sql::UnaryOperator::Not => UnaryOp::Not,
                sql::UnaryOperator::Minus => UnaryOp::Minus,
                sql::UnaryOperator::Plus => UnaryOp::Plus,
                _ => return other(e),
            };
            Expr::Unary {
                op,
                expr: boxed(expr),
            }
        }
        S::BinaryOp { left, op, right } => {
            use sql::BinaryOperator as B;
            let op = match op {
                B::And => BinaryOp::And,
                B::Or => BinaryOp::Or,
                B::Eq => BinaryOp::Eq,
                B::NotEq => BinaryOp::NotEq,
                B::Lt => BinaryOp::Lt,
                B::LtEq => BinaryOp::LtEq,
                B::Gt => BinaryOp::Gt,
                B::GtEq => BinaryOp::GtEq,
                B::Plus => BinaryOp::Plus,
                B::Minus => BinaryOp::Minus,
                B::Multiply => BinaryOp::Multiply,
                B::Divide => BinaryOp::Divide,
                B::Modulo => BinaryOp::Modulo,
                B::StringConcat => BinaryOp::Concat,
                _ => return other(e),
            };
            Expr::Binary {
                left: boxed(left),
                op,
                right: boxed(right),
            }
        }
        S::Function(func) => call(e, func),
        // Functions SQL gives a syntax of their own, in their plain call form.
        S::Trim {
            trim_where: None,
            trim_what: None,
            expr,
            trim_characters: None,
        } => plain_call("trim", vec![from_sql(expr)]),
        S::Substring {
            expr,
            substring_from: Some(from),
            substring_for,
            // `substring(x, 1, 3)`; the `FROM ... FOR` form stays SQL text.
            special: true,
            shorthand: false,
        } => {
            let mut args = vec![from_sql(expr), from_sql(from)];
            args.extend(substring_for.as_deref().map(from_sql));
            plain_call("substring", args)
        }
        S::Ceil {
            expr,
            field: sql::CeilFloorKind::DateTimeField(sql::DateTimeField::NoDateTime),
        } => plain_call("ceil", vec![from_sql(expr)]),
        S::Floor {
            expr,
            field: sql::CeilFloorKind::DateTimeField(sql::DateTimeField::NoDateTime),
        } => plain_call("floor", vec![from_sql(expr)]),
        S::Cast {
            kind: sql::CastKind::Cast,
            expr,
            data_type,
            format: None,
            ..
        } => Expr::Cast {
            expr: boxed(expr),
            to: data_type.to_string(),
        },
        S::IsNull(x) => Expr::IsNull {
            expr: boxed(x),
            negated: false,
        },
        S::IsNotNull(x) => Expr::IsNull {
            expr: boxed(x),
            negated: true,
        },
        S::Between {
            expr,
            negated,
            low,
            high,
        } => Expr::Between {
            expr: boxed(expr),
            negated: *negated,
            low: boxed(low),
            high: boxed(high),
        },
        S::InList {
            expr,
            list,
            negated,
        } => Expr::InList {
            expr: boxed(expr),
            list: list.iter().map(from_sql).collect(),
            negated: *negated,
        },
        S::Like {
            negated,
            any: false,
            expr,
            pattern,
            escape_char: None,
        }
        | S::ILike {
            negated,
            any: false,
            expr,
            pattern,
            escape_char: None,
        } => Expr::Like {
            expr: boxed(expr),
            pattern: boxed(pattern),
            negated: *negated,
            case_insensitive: matches!(e, S::ILike { .. }),
        },
        S::Case {
            operand,
            conditions,
            else_result,
            ..
        } => Expr::Case {
            operand: operand.as_deref().map(boxed),
            branches: conditions
                .iter()
                .map(|w| (from_sql(&w.condition), from_sql(&w.result)))
                .collect(),
            otherwise: else_result.as_deref().map(boxed),
        },
        S::Interval(i) if i.leading_precision.is_none() && i.last_field.is_none() => {
            let text = match (&*i.value, &i.leading_field) {
                (S::Value(v), None) => match &v.value {
                    sql::Value::SingleQuotedString(s) => s.clone(),
                    _ => return other(e),
                },
                (S::Value(v), Some(unit)) => match &v.value {
                    sql::Value::SingleQuotedString(s) | sql::Value::Number(s, _) => {
                        format!("{s} {}", unit.to_string().to_ascii_lowercase())
                    }
                    _ => return other(e),
                },
                _ => return other(e),
            };
            let ms = crate::duration::parse_duration_ms(&text).ok();
            Expr::Interval { text, ms }
        }
        _ => other(e),
    }
}

fn plain_call(name: &str, args: Vec<Expr>) -> Expr {
    Expr::Call(Call {
        name: name.to_string(),
        args,
        distinct: false,
        parens: true,
        over: None,
    })
}

fn call(e: &sql::Expr, func: &sql::Function) -> Expr {
    if func.filter.is_some()
        || func.null_treatment.is_some()
        || !func.within_group.is_empty()
        || !matches!(func.parameters, sql::FunctionArguments::None)
    {
        return other(e);
    }
    let name = func.name.to_string();
    let (args, distinct, parens) = match &func.args {
        sql::FunctionArguments::None => (vec![], false, false),
        sql::FunctionArguments::Subquery(_) => return other(e),
        sql::FunctionArguments::List(list) => {
            if !list.clauses.is_empty() {
                return other(e);
            }
            let mut args = Vec::new();
            for a in &list.args {
                match a {
                    sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Expr(x)) => {
                        args.push(from_sql(x))
                    }
                    sql::FunctionArg::Unnamed(sql::FunctionArgExpr::Wildcard) => {
                        args.push(Expr::Wildcard)
                    }
                    _ => return other(e),
                }
            }
            let distinct = matches!(
                list.duplicate_treatment,
                Some(sql::DuplicateTreatment::Distinct)
            );
            (args, distinct, true)
        }
    };
    let over = match &func.over {
        None => None,
        Some(sql::WindowType::WindowSpec(spec)) => Some(Over {
            partition_by: spec.partition_by.iter().map(from_sql).collect(),
            order_by: spec
                .order_by
                .iter()
                .map(|o| (from_sql(&o.expr), o.options.asc != Some(false)))
                .collect(),
            verbatim: (spec.window_name.is_some()
                || spec.window_frame.is_some()
                || spec
                    .order_by
                    .iter()
                    .any(|o| o.options.nulls_first.is_some()))
            .then(|| spec.to_string()),
        }),
        Some(sql::WindowType::NamedWindow(n)) => Some(Over {
            partition_by: vec![],
            order_by: vec![],
            verbatim: Some(n.to_string()),
        }),
    };
    Expr::Call(Call {
        name,
        args,
        distinct,
        parens,
        over,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Expr {
        Expr::parse(s).unwrap()
    }

    #[test]
    fn finds_columns_but_not_functions_keywords_or_types() {
        assert_eq!(p("value % 2 = 1").columns(), vec!["value"]);
        assert_eq!(p("hour(ts)").columns(), vec!["ts"]);
        assert_eq!(
            p("click_ts <= imp_ts + INTERVAL '15 minutes'").columns(),
            vec!["click_ts", "imp_ts"]
        );
        assert_eq!(p("CAST(v AS BIGINT) > 0").columns(), vec!["v"]);
        assert_eq!(p("side = 'imp'").columns(), vec!["side"]);
        assert_eq!(p("c.user_id = p.user_id").columns(), vec!["user_id"]);
        assert_eq!(p("\"Page\" IS NOT NULL").columns(), vec!["Page"]);
        // Unquoted names fold to lower case, as DataFusion reads them.
        assert_eq!(p("Page IS NOT NULL").columns(), vec!["page"]);
        assert_eq!(
            p("CASE WHEN a > 1 THEN b ELSE c END").columns(),
            vec!["a", "b", "c"]
        );
        // A construct the tree does not model still reports its columns.
        let typed = p("ts > TIMESTAMP '2024-01-01 00:00:00' AND x = 1");
        assert_eq!(typed.columns(), vec!["ts", "x"]);
    }

    #[test]
    fn conjuncts_respect_quotes_and_parentheses() {
        let c = p("genre = 'rock and roll' AND (x > 1 AND y < 2) and c >= d").conjuncts();
        let text: Vec<String> = c.iter().map(|e| e.to_string()).collect();
        // AND is associative: a nested conjunction's terms are conjuncts too.
        assert_eq!(
            text,
            ["genre = 'rock and roll'", "x > 1", "y < 2", "c >= d"]
        );
        assert!(c[0].is_equality());
        assert!(c[3].is_range());
        assert_eq!(p("(a OR b) AND c").conjuncts().len(), 2);
        assert!(p("t BETWEEN a AND b").is_range());
        assert!(!p("a <> b").is_range());
    }

    #[test]
    fn detects_window_functions() {
        let e = p("row_number() OVER (PARTITION BY key ORDER BY ts)");
        let call = e.window_function().unwrap();
        assert_eq!(call.signature(), "ROW_NUMBER()");
        assert_eq!(
            call.over.as_ref().unwrap().to_string(),
            "PARTITION BY key ORDER BY ts"
        );
        assert!(p("value + 1").window_function().is_none());
        assert!(p("overflow + 1").window_function().is_none());
        assert!(p("1 + sum(v) OVER (ORDER BY t DESC)")
            .window_function()
            .is_some());
    }

    #[test]
    fn detects_current_time() {
        assert!(p("ts > now() - INTERVAL '1 minute'").uses_current_time());
        assert!(p("CURRENT_TIMESTAMP").uses_current_time());
        assert!(p("current_date() = d").uses_current_time());
        assert!(!p("\"now\" > 1").uses_current_time());
        assert!(!p("'now()' = s").uses_current_time());
    }

    #[test]
    fn casts_have_their_target_type() {
        let t = |e: &str| p(e).cast_type();
        assert_eq!(t("CAST(n * 2 AS BIGINT)"), Some(DataType::Int64));
        assert_eq!(t("CAST(hour(ts) AS INT)"), Some(DataType::Int32));
        assert_eq!(t("cast(x as varchar)"), Some(DataType::String));
        assert_eq!(t("CAST(a AS INT) + CAST(b AS INT)"), None);
        assert_eq!(t("n * 2"), None);
    }

    #[test]
    fn time_terms_read_intervals() {
        assert_eq!(p("imp_ts").time_term(), Some(("imp_ts", 0)));
        assert_eq!(
            p("imp_ts + INTERVAL '15 minutes'").time_term(),
            Some(("imp_ts", 900_000))
        );
        assert_eq!(
            p("imp_ts - INTERVAL 1 HOUR").time_term(),
            Some(("imp_ts", -3_600_000))
        );
        assert_eq!(p("imp_ts * 2").time_term(), None);
    }

    #[test]
    fn prints_sql_that_reads_back_the_same() {
        for s in [
            "a AND (b OR c)",
            "NOT (a AND b)",
            "a - (b - c)",
            "(a + b) * c",
            "x IN (1, 2, 3)",
            "lower(page) LIKE 'a%'",
            "page NOT ILIKE 'a%'",
            "\"Order\" = 'it''s'",
            "CASE x WHEN 1 THEN 'one' ELSE 'many' END",
            "count(DISTINCT u)",
            "ts + INTERVAL '15 minutes'",
            "-v > 0",
            "-(-v)",
            "(a = b) = c",
            "lower(trim(value))",
            "a - (-b)",
            "a + -1",
            "(a + b) || c",
            "a || (b * c)",
            "a || b || c",
            "substring(page, 1, 3)",
            "ceil(x) + floor(y)",
        ] {
            let e = p(s);
            assert_eq!(e.to_string(), s);
            assert_eq!(p(&e.to_string()), e, "{s}");
        }
    }

    #[test]
    fn the_plan_format_holds_expressions_as_text() {
        let e = p("genre = 'rock and roll' AND plays > 10");
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(json, "\"genre = 'rock and roll' AND plays > 10\"");
        assert_eq!(serde_json::from_str::<Expr>(&json).unwrap(), e);
        // Text that does not parse is kept and reported, not lost.
        let bad: Expr = serde_json::from_str("\"a = \"").unwrap();
        assert_eq!(bad.to_string(), "a = ");
        assert!(bad.invalid().is_some());
        assert!(p("a = 1").invalid().is_none());
    }

    #[test]
    fn refuses_what_is_not_one_expression() {
        let e = Expr::parse("a = ").unwrap_err();
        assert!(e.to_string().starts_with("`a = ` is not a SQL expression"));
        assert!(Expr::parse("a b").is_err());
    }
}
