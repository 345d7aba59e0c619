//! From plan positions back to the user's tokens: the side table every
//! violation the plan check finds is located with.

use proc_macro2::TokenStream;

use crate::expr::ColumnRef;

/// From plan positions to the user's tokens.
pub struct SpanTable {
    /// The query ident (errors about the whole query).
    pub query: TokenStream,
    /// The `output_mode:` value, when given.
    pub output_mode: Option<TokenStream>,
    /// Where an output-mode error points when the mode is the default:
    /// the `aggregate:` (or `group_by:`) key.
    pub mode_fallback: Option<TokenStream>,
    /// The sink's kind as written (sink and checkpoint errors point here).
    pub sink: Option<TokenStream>,
    /// The `trigger:` value, when given.
    pub trigger: Option<TokenStream>,
    /// One entry per op of the result node, in op order.
    pub ops: Vec<OpSpans>,
}

/// The tokens of one op.
pub enum OpSpans {
    /// `filter:`.
    Filter {
        /// The expression.
        expr: TokenStream,
        /// Its column references.
        columns: Vec<ColumnRef>,
    },
    /// `select:`.
    Select {
        /// The `select` key.
        key: TokenStream,
        /// One per item.
        items: Vec<ItemSpans>,
    },
    /// One entry of `with_column:`.
    WithColumn {
        /// The expression.
        expr: TokenStream,
        /// Its column references.
        columns: Vec<ColumnRef>,
        /// The names of the columns it can see.
        visible: Vec<String>,
    },
    /// `watermark:`.
    Watermark {
        /// The `watermark` key.
        key: TokenStream,
        /// The column.
        column: TokenStream,
        /// The delay literal.
        delay: TokenStream,
    },
    /// `drop_duplicates:` or `drop_duplicates_within_watermark:`.
    Dedup {
        /// The key as written.
        key: TokenStream,
        /// One per column.
        columns: Vec<TokenStream>,
    },
    /// `order_by:`.
    Sort {
        /// The `order_by` key.
        key: TokenStream,
        /// One per sort key (its column).
        columns: Vec<TokenStream>,
    },
    /// `limit:`.
    Limit {
        /// The `limit` key.
        key: TokenStream,
    },
    /// `join:`.
    Join {
        /// The `join` key.
        key: TokenStream,
        /// The `how:` value (the `join` key when not given).
        how: TokenStream,
        /// The `on:` expression.
        on: Option<TokenStream>,
        /// Its column references.
        columns: Vec<ColumnRef>,
        /// The `using:` columns.
        using: Vec<TokenStream>,
        /// The names the condition can see (both sides').
        visible: Vec<String>,
    },
    /// `group_by:` + `aggregate:`.
    Aggregate {
        /// The `aggregate` (or `group_by`) key.
        key: TokenStream,
        /// One per grouping key.
        keys: Vec<KeySpans>,
        /// One per aggregate.
        aggs: Vec<AggSpans>,
    },
}

/// The tokens of one select item.
pub struct ItemSpans {
    /// The output name.
    pub alias: TokenStream,
    /// The expression (the alias for a bare column).
    pub expr: TokenStream,
    /// Its column references.
    pub columns: Vec<ColumnRef>,
}

/// The tokens of one grouping key.
pub struct KeySpans {
    /// The column (a window's time column).
    pub column: TokenStream,
    /// A window's size literal; a session window's gap (the plan reports
    /// a bad gap at the key's size, `Part::KeySize`).
    pub size: Option<TokenStream>,
    /// A window's slide literal.
    pub slide: Option<TokenStream>,
    /// The whole key.
    pub whole: TokenStream,
}

/// The tokens of one aggregate.
pub struct AggSpans {
    /// The output name.
    pub alias: TokenStream,
    /// The call (`sum(n)`).
    pub call: TokenStream,
    /// The column argument.
    pub arg: Option<TokenStream>,
}
