//! Filter and select expressions: Rust syntax translated to the plan's
//! expression tree ([`weir_plan::expr::Expr`], whose `Display` is the SQL
//! text the plan carries), with every column reference (so errors can point
//! at it) and the result type inferred from the operands.
//!
//! | Rust                     | SQL                    |
//! |--------------------------|------------------------|
//! | `a && b`, `a \|\| b`, `!a` | `a AND b`, `a OR b`, `NOT a` |
//! | `a == b`, `a != b`       | `a = b`, `a <> b`      |
//! | `"it's"`                 | `'it''s'`              |
//! | `x as i64`               | `CAST(x AS BIGINT)`    |
//! | `is_null(x)`             | `x IS NULL`            |
//! | `like(x, "a%")`          | `x LIKE 'a%'`          |
//! | `lower(x)`               | `lower(x)`             |
//! | `ts + interval("15 minutes")` | `ts + INTERVAL '15 minutes'` |
//! | `row_number().over(partition_by(k), order_by(t))` | `row_number() OVER (PARTITION BY k ORDER BY t)` |
//!
//! (Window functions translate, so that the plan's rule can refuse them on a
//! stream as Spark does: only time windows, in `group_by:`, are supported.)

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{BinOp, Expr, Lit, UnOp};
use weir_plan::expr::{BinaryOp, Call, Expr as PlanExpr, Literal, Over, UnaryOp};
use weir_plan::DataType;

use crate::errors::Errors;
use crate::types::{lookup, parse_rust_type, rust_type_name, sql_type_name, Col, ColType};

/// A column named in an expression, with the tokens that name it.
#[derive(Debug, Clone)]
pub struct ColumnRef {
    /// The column name (raw identifiers unrawed).
    pub name: String,
    /// The identifier as written.
    pub tokens: TokenStream,
}

/// What translating one expression yields.
#[derive(Debug, Clone)]
pub struct Translated {
    /// The plan's tree, built from the syntax.
    pub expr: PlanExpr,
    /// The result type.
    pub ty: Inferred,
    /// The columns it names, in order of appearance.
    pub columns: Vec<ColumnRef>,
}

/// The inferred type of an expression.
#[derive(Debug, Clone)]
pub enum Inferred {
    /// Known.
    Known(ColType),
    /// Not inferable from the syntax; the tokens are the part that is not
    /// (e.g. a call of a function the macro does not know).
    Unknown(TokenStream),
    /// An error was already reported (or a column is unknown): no type, and
    /// no further message about it.
    Poisoned,
}

/// Translates `expr` over the columns `env`. Type errors are pushed to
/// `errs`; unknown columns are not (the plan check reports them, and the
/// references in [`Translated::columns`] let it point at them).
pub fn translate(expr: &Expr, env: &[Col], errs: &mut Errors) -> Translated {
    let mut t = Translator {
        env,
        errs,
        columns: Vec::new(),
    };
    let node = t.expr(expr);
    let ty = match node.ty {
        NodeType::Known(d) => Inferred::Known(ColType {
            dtype: d,
            nullable: node.nullable,
        }),
        NodeType::Unknown(tokens) => Inferred::Unknown(tokens),
        NodeType::Poisoned => Inferred::Poisoned,
    };
    Translated {
        expr: node.expr,
        ty,
        columns: t.columns,
    }
}

/// What the translator knows of a subexpression's type.
#[derive(Debug, Clone)]
enum NodeType {
    Known(DataType),
    Unknown(TokenStream),
    Poisoned,
}

/// A translated subexpression: its tree, type and nullability.
struct Node {
    expr: PlanExpr,
    ty: NodeType,
    nullable: bool,
}

impl Node {
    fn poisoned() -> Node {
        Node {
            expr: PlanExpr::Literal(Literal::Null),
            ty: NodeType::Poisoned,
            nullable: true,
        }
    }

    fn boxed(&self) -> Box<PlanExpr> {
        Box::new(self.expr.clone())
    }
}

/// Translates Rust syntax to the plan's tree, typing as it goes.
struct Translator<'a, 'e> {
    env: &'a [Col],
    errs: &'e mut Errors,
    columns: Vec<ColumnRef>,
}

fn type_name(d: DataType) -> &'static str {
    d.name()
}

impl Translator<'_, '_> {
    fn expr(&mut self, e: &Expr) -> Node {
        match e {
            Expr::Lit(l) => self.lit(&l.lit),
            Expr::Path(p) => self.path(p),
            // The tree's Display puts back the parentheses SQL needs.
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Unary(u) => self.unary(u),
            Expr::Binary(b) => self.binary(b),
            Expr::Call(c) => self.call(c),
            Expr::Cast(c) => self.cast(c),
            Expr::MethodCall(m) if m.method == "over" => self.over(m),
            Expr::MethodCall(m) => {
                let name = &m.method;
                self.errs.spanned_help(
                    e,
                    "method calls are not supported in stream expressions",
                    format!("call the SQL function by name instead: `{name}(x, ...)`"),
                );
                Node::poisoned()
            }
            _ => {
                self.errs.spanned_help(
                    e,
                    "this expression is not supported in a stream query",
                    "use columns, literals, operators (&& || ! == != < <= > >= + - * / %), parentheses, `as` casts and calls like lower(page)",
                );
                Node::poisoned()
            }
        }
    }

    fn lit(&mut self, lit: &Lit) -> Node {
        let (value, d) = match lit {
            Lit::Str(s) => (Literal::String(s.value()), DataType::String),
            Lit::Int(i) => (
                Literal::Number(i.base10_digits().to_string()),
                DataType::Int64,
            ),
            Lit::Float(f) => (
                Literal::Number(f.base10_digits().to_string()),
                DataType::Float64,
            ),
            Lit::Bool(b) => (Literal::Bool(b.value), DataType::Bool),
            _ => {
                self.errs.spanned_help(
                    lit,
                    "this literal is not supported in a stream query",
                    "use a string (\"...\"), an integer, a float or true/false",
                );
                return Node::poisoned();
            }
        };
        Node {
            expr: PlanExpr::Literal(value),
            ty: NodeType::Known(d),
            nullable: false,
        }
    }

    fn path(&mut self, p: &syn::ExprPath) -> Node {
        let ident = match p.path.get_ident() {
            Some(i) if p.qself.is_none() => i,
            _ => {
                self.errs.spanned_help(
                    p,
                    "expected a column name",
                    "name a column of the schema; paths are not columns",
                );
                return Node::poisoned();
            }
        };
        let name = ident.unraw().to_string();
        self.columns.push(ColumnRef {
            name: name.clone(),
            tokens: ident.to_token_stream(),
        });
        let expr = PlanExpr::column(name.clone());
        match lookup(self.env, &name) {
            Some(c) => Node {
                expr,
                ty: NodeType::Known(c.ty.dtype),
                nullable: c.ty.nullable,
            },
            None => Node {
                expr,
                ..Node::poisoned()
            },
        }
    }

    fn unary(&mut self, u: &syn::ExprUnary) -> Node {
        let operand = self.expr(&u.expr);
        match u.op {
            UnOp::Not(_) => {
                self.expect_bool(&u.expr, &operand, "`!`");
                Node {
                    expr: PlanExpr::Unary {
                        op: UnaryOp::Not,
                        expr: operand.boxed(),
                    },
                    ty: keep_poison(&operand.ty, DataType::Bool),
                    nullable: operand.nullable,
                }
            }
            UnOp::Neg(_) => {
                self.expect_number(&u.expr, &operand, "`-`");
                Node {
                    expr: PlanExpr::Unary {
                        op: UnaryOp::Minus,
                        expr: operand.boxed(),
                    },
                    ..operand
                }
            }
            _ => {
                self.errs
                    .spanned(u, "this operator is not supported in a stream query");
                Node::poisoned()
            }
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary) -> Node {
        enum Kind {
            Logic,
            Cmp,
            Arith,
        }
        let (op, kind) = match b.op {
            BinOp::And(_) => (BinaryOp::And, Kind::Logic),
            BinOp::Or(_) => (BinaryOp::Or, Kind::Logic),
            BinOp::Eq(_) => (BinaryOp::Eq, Kind::Cmp),
            BinOp::Ne(_) => (BinaryOp::NotEq, Kind::Cmp),
            BinOp::Lt(_) => (BinaryOp::Lt, Kind::Cmp),
            BinOp::Le(_) => (BinaryOp::LtEq, Kind::Cmp),
            BinOp::Gt(_) => (BinaryOp::Gt, Kind::Cmp),
            BinOp::Ge(_) => (BinaryOp::GtEq, Kind::Cmp),
            BinOp::Add(_) => (BinaryOp::Plus, Kind::Arith),
            BinOp::Sub(_) => (BinaryOp::Minus, Kind::Arith),
            BinOp::Mul(_) => (BinaryOp::Multiply, Kind::Arith),
            BinOp::Div(_) => (BinaryOp::Divide, Kind::Arith),
            BinOp::Rem(_) => (BinaryOp::Modulo, Kind::Arith),
            _ => {
                let op = &b.op;
                self.errs.spanned_help(
                    op,
                    format!(
                        "`{}` is not supported in a stream query",
                        op.to_token_stream()
                    ),
                    "use && || ! == != < <= > >= + - * / %",
                );
                return Node::poisoned();
            }
        };
        if let (BinOp::Add(_) | BinOp::Sub(_), Some(call)) = (b.op, interval_call(&b.right)) {
            return self.timestamp_plus_interval(b, op, call);
        }
        let l = self.expr(&b.left);
        let r = self.expr(&b.right);
        let nullable = l.nullable || r.nullable;
        let expr = PlanExpr::Binary {
            left: l.boxed(),
            op,
            right: r.boxed(),
        };
        let opname = format!("`{}`", b.op.to_token_stream());
        let ty = match kind {
            Kind::Logic => {
                let ok = self.expect_bool(&b.left, &l, &opname)
                    & self.expect_bool(&b.right, &r, &opname);
                match (&l.ty, &r.ty) {
                    (NodeType::Poisoned, _) | (_, NodeType::Poisoned) => NodeType::Poisoned,
                    _ if !ok => NodeType::Poisoned,
                    _ => NodeType::Known(DataType::Bool),
                }
            }
            Kind::Cmp => match (&l.ty, &r.ty) {
                (NodeType::Known(a), NodeType::Known(c)) if !comparable(*a, *c) => {
                    self.errs.spanned_help(
                        b,
                        format!("cannot compare {} with {}", type_name(*a), type_name(*c)),
                        "compare values of one type; convert one side with `as`, e.g. `x as i64`",
                    );
                    NodeType::Poisoned
                }
                (NodeType::Poisoned, _) | (_, NodeType::Poisoned) => NodeType::Poisoned,
                _ => NodeType::Known(DataType::Bool),
            },
            Kind::Arith => {
                let ok = self.expect_number(&b.left, &l, &opname)
                    & self.expect_number(&b.right, &r, &opname);
                match (&l.ty, &r.ty) {
                    _ if !ok => NodeType::Poisoned,
                    (NodeType::Poisoned, _) | (_, NodeType::Poisoned) => NodeType::Poisoned,
                    (NodeType::Unknown(t), _) | (_, NodeType::Unknown(t)) => {
                        NodeType::Unknown(t.clone())
                    }
                    (NodeType::Known(a), NodeType::Known(c)) => NodeType::Known(wider(*a, *c)),
                }
            }
        };
        Node { expr, ty, nullable }
    }

    /// `ts + interval("15 minutes")` (or `-`): a timestamp moved by a duration.
    fn timestamp_plus_interval(
        &mut self,
        b: &syn::ExprBinary,
        op: BinaryOp,
        call: &syn::ExprCall,
    ) -> Node {
        let l = self.expr(&b.left);
        let lit = match (call.args.len(), call.args.first()) {
            (
                1,
                Some(Expr::Lit(syn::ExprLit {
                    lit: Lit::Str(s), ..
                })),
            ) => s,
            _ => {
                self.errs.spanned_help(
                    call,
                    "`interval` takes one duration string",
                    "e.g. `interval(\"15 minutes\")`",
                );
                return Node::poisoned();
            }
        };
        let ms = match weir_plan::duration::parse_positive_duration_ms(&lit.value()) {
            Ok(ms) => ms,
            Err(e) => {
                self.errs.spanned(lit, e.to_string());
                return Node::poisoned();
            }
        };
        // SQL's INTERVAL takes one amount and unit here ("15 minutes").
        let words: Vec<String> = lit.value().split_whitespace().map(str::to_string).collect();
        if words.len() != 2 || words[0].parse::<u64>().is_err() {
            self.errs.spanned_help(
                lit,
                format!(
                    "an interval is one amount and unit, not \"{}\"",
                    lit.value()
                ),
                "e.g. interval(\"15 minutes\") or interval(\"90 seconds\")",
            );
            return Node::poisoned();
        }
        let ty =
            match l.ty.clone() {
                NodeType::Known(DataType::Timestamp) => NodeType::Known(DataType::Timestamp),
                NodeType::Known(d) => {
                    self.errs.spanned_help(
                    &b.left,
                    format!("an interval is added to timestamps, but this is {}", type_name(d)),
                    "add intervals to Timestamp columns, e.g. `ad_ts + interval(\"15 minutes\")`",
                );
                    NodeType::Poisoned
                }
                other => other,
            };
        Node {
            expr: PlanExpr::Binary {
                left: l.boxed(),
                op,
                right: Box::new(PlanExpr::Interval {
                    text: lit.value(),
                    ms: Some(ms),
                }),
            },
            ty,
            nullable: l.nullable,
        }
    }

    fn call(&mut self, c: &syn::ExprCall) -> Node {
        let name = match &*c.func {
            Expr::Path(p) if p.qself.is_none() && p.path.get_ident().is_some() => {
                p.path.get_ident().unwrap().unraw().to_string()
            }
            f => {
                self.errs.spanned_help(
                    f,
                    "expected a function name",
                    "call SQL functions by their plain name, e.g. lower(page)",
                );
                return Node::poisoned();
            }
        };
        if name == "interval" {
            self.errs.spanned_help(
                c,
                "an interval can only be added to or subtracted from a timestamp",
                "write `ts + interval(\"15 minutes\")` or `ts - interval(\"15 minutes\")`",
            );
            return Node::poisoned();
        }
        // The aggregate functions (the plan's catalogue) belong in
        // `aggregate:`, not in expressions.
        if weir_plan::aggregates::lookup(&name).is_some() {
            self.errs.spanned_help(
                &c.func,
                format!("`{name}` is an aggregate function; it cannot be used in a row expression"),
                format!(
                    "aggregate in `aggregate: {{ name: {name}(column) }}` with `group_by: [...]`"
                ),
            );
            return Node::poisoned();
        }
        let args: Vec<Node> = c.args.iter().map(|a| self.expr(a)).collect();
        let arity = |n: usize, errs: &mut Errors| {
            if args.len() != n {
                errs.spanned(
                    c,
                    format!(
                        "`{name}` takes {n} argument{}, but {} were given",
                        if n == 1 { "" } else { "s" },
                        args.len()
                    ),
                );
                false
            } else {
                true
            }
        };
        let any_null = args.iter().any(|a| a.nullable);
        let poisoned = args.iter().any(|a| matches!(a.ty, NodeType::Poisoned));
        match name.as_str() {
            "is_null" | "is_not_null" => {
                if !arity(1, self.errs) {
                    return Node::poisoned();
                }
                return Node {
                    expr: PlanExpr::IsNull {
                        expr: args[0].boxed(),
                        negated: name == "is_not_null",
                    },
                    ty: if poisoned {
                        NodeType::Poisoned
                    } else {
                        NodeType::Known(DataType::Bool)
                    },
                    nullable: false,
                };
            }
            "like" | "not_like" => {
                if !arity(2, self.errs) {
                    return Node::poisoned();
                }
                return Node {
                    expr: PlanExpr::Like {
                        expr: args[0].boxed(),
                        pattern: args[1].boxed(),
                        negated: name == "not_like",
                        case_insensitive: false,
                    },
                    ty: if poisoned {
                        NodeType::Poisoned
                    } else {
                        NodeType::Known(DataType::Bool)
                    },
                    nullable: any_null,
                };
            }
            _ => {}
        }
        let expr = PlanExpr::Call(Call {
            name: name.clone(),
            args: args.iter().map(|a| a.expr.clone()).collect(),
            distinct: false,
            parens: true,
            over: None,
        });
        let first = args.first().map(|a| a.ty.clone());
        let ty = if poisoned {
            NodeType::Poisoned
        } else if let Some(function) = weir_plan::functions::lookup(&name) {
            // The plan's catalogue: arity, argument types, result type.
            if let Some(msg) = function.arity_error(args.len()) {
                self.errs.spanned(c, msg);
                return Node::poisoned();
            }
            let mut ok = true;
            for (i, (arg, node)) in c.args.iter().zip(&args).enumerate() {
                if let NodeType::Known(d) = node.ty {
                    if let Some(msg) = function.argument_error(i, d) {
                        self.errs.spanned_help(
                            arg,
                            msg,
                            "convert it with `as`, or call a function that takes this type",
                        );
                        ok = false;
                    }
                }
            }
            let first_known = match &first {
                Some(NodeType::Known(d)) => Some(*d),
                _ => None,
            };
            match (ok, function.result_type(first_known)) {
                (false, _) => NodeType::Poisoned,
                (true, Some(d)) => NodeType::Known(d),
                (true, None) => match first {
                    Some(NodeType::Unknown(t)) => NodeType::Unknown(t),
                    _ => NodeType::Unknown(c.to_token_stream()),
                },
            }
        } else {
            match name.as_str() {
                // Window functions: typed only so that the streaming rule,
                // not a type error, reports them.
                "row_number" | "rank" | "dense_rank" | "ntile" => NodeType::Known(DataType::Int32),
                _ => NodeType::Unknown(c.to_token_stream()),
            }
        };
        let all_null = weir_plan::functions::lookup(&name)
            .is_some_and(|f| f.null == weir_plan::functions::NullRule::AllArgs);
        let nullable = if all_null {
            args.iter().all(|a| a.nullable)
        } else {
            any_null
        };
        Node { expr, ty, nullable }
    }

    /// `f(...).over(partition_by(a, ...), order_by(b, ...))`: a SQL window function.
    fn over(&mut self, m: &syn::ExprMethodCall) -> Node {
        let func = self.expr(&m.receiver);
        let mut over = Over {
            partition_by: vec![],
            order_by: vec![],
            verbatim: None,
        };
        for arg in &m.args {
            let clause = match arg {
                Expr::Call(c) => match &*c.func {
                    Expr::Path(p) if p.path.is_ident("partition_by") => Some(("PARTITION BY", c)),
                    Expr::Path(p) if p.path.is_ident("order_by") => Some(("ORDER BY", c)),
                    _ => None,
                },
                _ => None,
            };
            let Some((words, c)) = clause else {
                self.errs.spanned_help(
                    arg,
                    "`.over(...)` takes partition_by(columns) and order_by(columns)",
                    "e.g. `row_number().over(partition_by(user), order_by(ts))`",
                );
                return Node::poisoned();
            };
            let keys: Vec<PlanExpr> = c.args.iter().map(|a| self.expr(a).expr).collect();
            if words == "PARTITION BY" {
                over.partition_by.extend(keys);
            } else {
                over.order_by.extend(keys.into_iter().map(|k| (k, true)));
            }
        }
        match func.expr {
            PlanExpr::Call(call) => Node {
                expr: PlanExpr::Call(Call {
                    over: Some(over),
                    ..call
                }),
                ..func
            },
            _ => {
                self.errs.spanned_help(
                    &m.receiver,
                    "`.over(...)` follows a window function call",
                    "e.g. `row_number().over(partition_by(user), order_by(ts))`",
                );
                Node::poisoned()
            }
        }
    }

    fn cast(&mut self, c: &syn::ExprCast) -> Node {
        let inner = self.expr(&c.expr);
        let target = match parse_rust_type(&c.ty) {
            Ok(t) => t,
            Err(msg) => {
                self.errs.spanned(&c.ty, msg);
                return Node::poisoned();
            }
        };
        let Some(sql_ty) = sql_type_name(target.dtype) else {
            self.errs
                .spanned(&c.ty, format!("cannot cast to {}", rust_type_name(target)));
            return Node::poisoned();
        };
        Node {
            expr: PlanExpr::Cast {
                expr: inner.boxed(),
                to: sql_ty.to_string(),
            },
            ty: keep_poison(&inner.ty, target.dtype),
            nullable: inner.nullable || target.nullable,
        }
    }

    /// Reports an operand of a logical operator that is known not to be bool.
    fn expect_bool(&mut self, e: &Expr, n: &Node, op: &str) -> bool {
        match n.ty {
            NodeType::Known(d) if d != DataType::Bool => {
                self.errs.spanned_help(
                    e,
                    format!("{op} needs a boolean operand, but this is {}", type_name(d)),
                    "compare it to get a boolean, e.g. `x > 0` or `name == \"a\"`",
                );
                false
            }
            _ => true,
        }
    }

    /// Reports an operand of an arithmetic operator that is known not to be a number.
    fn expect_number(&mut self, e: &Expr, n: &Node, op: &str) -> bool {
        match n.ty {
            NodeType::Known(d) if !d.is_numeric() => {
                let help = if d == DataType::String {
                    "arithmetic takes i32, i64 or f64 values; to join text use concat(a, b)"
                } else {
                    "arithmetic takes i32, i64 or f64 values"
                };
                self.errs.spanned_help(
                    e,
                    format!("{op} needs a number, but this is {}", type_name(d)),
                    help,
                );
                false
            }
            _ => true,
        }
    }
}

/// The `interval(...)` call `e` is, if it is one.
fn interval_call(e: &Expr) -> Option<&syn::ExprCall> {
    match e {
        Expr::Call(c) => match &*c.func {
            Expr::Path(p) if p.path.is_ident("interval") => Some(c),
            _ => None,
        },
        Expr::Paren(p) => interval_call(&p.expr),
        Expr::Group(g) => interval_call(&g.expr),
        _ => None,
    }
}

/// `Known(d)` unless the operand's type is poisoned.
fn keep_poison(operand: &NodeType, d: DataType) -> NodeType {
    match operand {
        NodeType::Poisoned => NodeType::Poisoned,
        _ => NodeType::Known(d),
    }
}

/// Whether SQL compares the two types (text compares with timestamps, as
/// `ts > '2024-01-01'` does).
fn comparable(a: DataType, b: DataType) -> bool {
    use DataType::*;
    a == b
        || (a.is_numeric() && b.is_numeric())
        || matches!((a, b), (Timestamp, String) | (String, Timestamp))
}

/// The wider of two numeric types (DataFusion's coercion: i32 < i64 < f64).
fn wider(a: DataType, b: DataType) -> DataType {
    use DataType::*;
    match (a, b) {
        (Float64, _) | (_, Float64) => Float64,
        (Int64, _) | (_, Int64) => Int64,
        _ => Int32,
    }
}

#[cfg(test)]
mod tests {
    use weir_plan::expr::sql_ident;

    use super::*;
    use syn::parse_quote;

    fn env() -> Vec<Col> {
        vec![
            Col::new("page", ColType::new(DataType::String)),
            Col::new("n", ColType::new(DataType::Int64)),
            Col::new("k", ColType::new(DataType::Int32)),
            Col::new("x", ColType::new(DataType::Float64)),
            Col::new("ts", ColType::new(DataType::Timestamp)),
            Col::new("user", ColType::nullable(DataType::String)),
            Col::new("ok", ColType::new(DataType::Bool)),
            Col::new("eventTs", ColType::new(DataType::Timestamp)),
        ]
    }

    fn tr(e: Expr) -> (Translated, Errors) {
        let mut errs = Errors::new();
        let t = translate(&e, &env(), &mut errs);
        (t, errs)
    }

    fn sql(e: Expr) -> String {
        let (t, errs) = tr(e);
        assert!(errs.is_empty(), "{errs:?}");
        t.expr.to_string()
    }

    fn ty(e: Expr) -> Option<ColType> {
        match tr(e).0.ty {
            Inferred::Known(t) => Some(t),
            _ => None,
        }
    }

    #[test]
    fn translates_operators_to_sql() {
        assert_eq!(
            sql(parse_quote!(n > 0 && page != "x")),
            "n > 0 AND page <> 'x'"
        );
        assert_eq!(sql(parse_quote!(n % 2 == 1 || !ok)), "n % 2 = 1 OR NOT ok");
        assert_eq!(sql(parse_quote!((n + 1) * 2)), "(n + 1) * 2");
        assert_eq!(sql(parse_quote!(page == "it's")), "page = 'it''s'");
        assert_eq!(sql(parse_quote!(-n <= -(x - 1.5))), "-n <= -(x - 1.5)");
        assert_eq!(sql(parse_quote!(hour(ts) >= 9)), "hour(ts) >= 9");
        assert_eq!(
            sql(parse_quote!(lower(page) == "home")),
            "lower(page) = 'home'"
        );
        assert_eq!(
            sql(parse_quote!(is_null(user) || like(page, "a%"))),
            "user IS NULL OR page LIKE 'a%'".replace("user", "\"user\"")
        );
        assert_eq!(sql(parse_quote!(n as f64 / 2.0)), "CAST(n AS DOUBLE) / 2.0");
        assert_eq!(sql(parse_quote!(1_000 < n)), "1000 < n");
    }

    #[test]
    fn translates_window_functions() {
        let (t, errs) = tr(parse_quote!(
            row_number().over(partition_by(page), order_by(ts))
        ));
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(
            t.expr.to_string(),
            "row_number() OVER (PARTITION BY page ORDER BY ts)"
        );
        assert!(matches!(t.ty, Inferred::Known(c) if c == ColType::new(DataType::Int32)));
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["page", "ts"]);
        let (_, errs) = tr(parse_quote!(rank().over(rows(1))));
        assert_eq!(errs.diagnostics()[0].at, "rows (1)");
    }

    #[test]
    fn sql_precedence_differs_from_rust_for_not() {
        // Rust's `!` binds tighter than `==`; SQL's NOT binds looser than `=`.
        assert_eq!(sql(parse_quote!(!ok == false)), "(NOT ok) = FALSE");
        assert_eq!(sql(parse_quote!(!(n > 1))), "NOT (n > 1)");
        assert_eq!(sql(parse_quote!(n - (k - 1))), "n - (k - 1)");
    }

    #[test]
    fn quotes_names_sql_would_misread() {
        assert_eq!(sql_ident("page"), "page");
        assert_eq!(sql_ident("timestamp"), "\"timestamp\"");
        assert_eq!(sql_ident("eventTs"), "\"eventTs\"");
        assert_eq!(sql(parse_quote!(eventTs > ts)), "\"eventTs\" > ts");
    }

    #[test]
    fn records_column_references() {
        let (t, _) = tr(parse_quote!(n > 0 && pgae == "x"));
        let names: Vec<&str> = t.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["n", "pgae"]);
        assert_eq!(t.columns[1].tokens.to_string(), "pgae");
        assert!(matches!(t.ty, Inferred::Poisoned));
    }

    #[test]
    fn infers_types() {
        assert_eq!(ty(parse_quote!(n * 2)), Some(ColType::new(DataType::Int64)));
        assert_eq!(ty(parse_quote!(k + k)), Some(ColType::new(DataType::Int32)));
        assert_eq!(ty(parse_quote!(k + 1)), Some(ColType::new(DataType::Int64)));
        assert_eq!(
            ty(parse_quote!(n + x)),
            Some(ColType::new(DataType::Float64))
        );
        assert_eq!(ty(parse_quote!(n > 1)), Some(ColType::new(DataType::Bool)));
        assert_eq!(ty(parse_quote!("a")), Some(ColType::new(DataType::String)));
        assert_eq!(
            ty(parse_quote!(upper(user))),
            Some(ColType::nullable(DataType::String))
        );
        assert_eq!(
            ty(parse_quote!(coalesce(user, "anon"))),
            Some(ColType::new(DataType::String))
        );
        assert_eq!(
            ty(parse_quote!(is_null(user))),
            Some(ColType::new(DataType::Bool))
        );
        assert_eq!(
            ty(parse_quote!(hour(ts) as i32)),
            Some(ColType::new(DataType::Int32))
        );
        assert_eq!(
            ty(parse_quote!(hour(ts) > 3)),
            Some(ColType::new(DataType::Bool))
        );
        assert_eq!(
            ty(parse_quote!(hour(ts) + 1)),
            Some(ColType::new(DataType::Int64))
        );
        match tr(parse_quote!(date_trunc("hour", ts) + 1)).0.ty {
            Inferred::Unknown(t) => assert_eq!(t.to_string(), r#"date_trunc ("hour" , ts)"#),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reports_type_errors_at_the_operand() {
        let (_, errs) = tr(parse_quote!(page + 1 > 2));
        let d = &errs.diagnostics()[0];
        assert_eq!(d.at, "page");
        assert!(d
            .message
            .starts_with("`+` needs a number, but this is string"));
        assert!(d.message.contains("concat(a, b)"));
        let (_, errs) = tr(parse_quote!(n && ok));
        assert_eq!(errs.diagnostics()[0].at, "n");
        let (_, errs) = tr(parse_quote!(page == 1));
        assert_eq!(
            errs.diagnostics()[0].message.lines().next(),
            Some("cannot compare string with int64")
        );
        let (_, errs) = tr(parse_quote!(page.len() > 1));
        assert!(errs.diagnostics()[0].message.contains("`len(x, ...)`"));
        let (_, errs) = tr(parse_quote!(sum(n) > 1));
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("`sum` is an aggregate function"));
        let (_, errs) = tr(parse_quote!(n & 1 == 1));
        assert_eq!(errs.diagnostics()[0].at, "&");
        // timestamps compare with text
        assert_eq!(
            sql(parse_quote!(ts > "2024-01-01 00:00:00")),
            "ts > '2024-01-01 00:00:00'"
        );
    }

    #[test]
    fn types_calls_from_the_plans_function_catalogue() {
        // The engine's own functions (Spark's names) are typed too.
        assert_eq!(
            ty(parse_quote!(hour(ts))).map(|t| t.dtype),
            Some(DataType::Int32)
        );
        assert_eq!(
            ty(parse_quote!(dayofmonth(eventTs) + 1)).map(|t| t.dtype),
            Some(DataType::Int64)
        );
        assert_eq!(
            ty(parse_quote!(abs(k))).map(|t| t.dtype),
            Some(DataType::Int32)
        );
        let (_, errs) = tr(parse_quote!(hour(page) > 9));
        let d = &errs.diagnostics()[0];
        assert_eq!(d.at, "page");
        assert!(d
            .message
            .starts_with("`hour` takes a timestamp, but this is string"));
        let (_, errs) = tr(parse_quote!(lpad(page)));
        assert!(errs.diagnostics()[0]
            .message
            .starts_with("`lpad` takes 2 to 3 arguments, but 1 were given"));
        let (_, errs) = tr(parse_quote!(sqrt(ok)));
        assert_eq!(errs.diagnostics()[0].at, "ok");
        // A function the catalogue does not know still translates, untyped.
        let (t, errs) = tr(parse_quote!(md5(page)));
        assert!(errs.is_empty());
        assert!(matches!(t.ty, Inferred::Unknown(_)));
    }
}
