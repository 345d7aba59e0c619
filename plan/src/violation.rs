//! What a broken rule is, as data: the [`Rule`], where it is
//! ([`Location`], down to the [`Part`] of an op), the name it is about
//! ([`Violation::subject`]) and the words for the user. Schema resolution
//! ([`crate::resolve`]) and the streaming rules ([`crate::check`]) produce
//! violations; the macro places each at its tokens by these fields, the
//! engine prints them.

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// A node reads something that does not exist.
    UnknownInput,
    /// A column that does not exist.
    UnknownColumn,
    /// A column of the wrong type for the operation.
    TypeMismatch,
    /// A duration that does not parse, or is zero where it must be positive.
    BadDuration,
    /// Two output columns with one name.
    DuplicateColumn,
    /// A sliding window whose slide exceeds its size.
    WindowSlideLargerThanSize,
    /// Append mode on an aggregation without a watermarked grouping column.
    AppendAggregationWithoutWatermark,
    /// Complete mode without an aggregation.
    CompleteWithoutAggregation,
    /// `count(DISTINCT ...)` on a stream.
    DistinctAggregation,
    /// A stateful operator after an aggregation in update or complete mode.
    ChainedStatefulAfterAggregation,
    /// Sorting outside an aggregation in complete mode.
    SortWithoutCompleteAggregation,
    /// Limit in update mode.
    LimitInUpdateMode,
    /// A non-time window function (`row_number() OVER ...`).
    NonTimeWindowFunction,
    /// `dropDuplicatesWithinWatermark` without a watermark.
    DedupWithinWatermarkWithoutWatermark,
    /// A stream-stream join in a mode other than append.
    StreamStreamJoinNotAppend,
    /// A stream-stream outer/semi join without the watermark it needs.
    StreamStreamOuterJoinWithoutWatermark,
    /// A session window in update mode.
    SessionWindowInUpdateMode,
    /// A session window as the only grouping key.
    SessionWindowWithoutKey,
    /// An outer join whose streaming side is the one that would be null-padded.
    StreamStaticOuterJoin,
    /// A file sink in a mode other than append.
    FileSinkNotAppend,
    /// A Kafka sink without a string or binary `value` column (or with a
    /// `key` or `topic` column of the wrong type).
    KafkaSinkColumns,
    /// A sink that needs a checkpoint location, without one.
    CheckpointRequired,
    /// An operation other than filter and projection under a continuous trigger.
    ContinuousUnsupportedOperation,
    /// `current_timestamp()` and friends under a continuous trigger.
    ContinuousCurrentTime,
    /// A sink that cannot run under a continuous trigger (`foreach_batch`).
    ContinuousUnsupportedSink,
    /// Something a query spread over many processes (`scale_out`) cannot
    /// divide among its tasks.
    ScaleOutCannotDivide,
    /// Expression text that is not one SQL expression.
    InvalidExpression,
}

/// Which part of an op a violation points at, so the macro can find the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Part {
    /// The whole op.
    Whole,
    /// The i-th grouping key.
    Key(usize),
    /// The size of the i-th grouping key's window.
    KeySize(usize),
    /// The slide of the i-th grouping key's window.
    KeySlide(usize),
    /// The i-th aggregate.
    Agg(usize),
    /// The i-th select item.
    Item(usize),
    /// The i-th named column (watermark, dedup, sort, join keys).
    Column(usize),
    /// The watermark delay.
    Delay,
}

/// Where a violation is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    /// The plan as a whole.
    Plan,
    /// The output mode.
    OutputMode,
    /// One op of one node (indexes into `plan.nodes` and `node.ops`).
    Op {
        /// Node index.
        node: usize,
        /// Op index within the node.
        op: usize,
        /// The part of the op.
        part: Part,
    },
    /// A node's input.
    Node(usize),
    /// The sink (and its checkpoint location).
    Sink,
    /// The trigger.
    Trigger,
}

impl Location {
    /// A node's input.
    pub fn node(i: usize) -> Location {
        Location::Node(i)
    }
}

/// One broken rule: what is wrong, how to fix it, where.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// Where it is.
    pub at: Location,
    /// What is wrong, in the user's terms (Spark's wording where Spark has a rule).
    pub message: String,
    /// How to fix it.
    pub help: Option<String>,
    /// The name the violation is about, as the plan spells it, when the
    /// rule has one: the unknown, duplicate or mistyped column, the
    /// watermark or window column, the joined input, the sink's column.
    /// Read this, not the message, to find the name (the message is prose).
    pub subject: Option<String>,
}

impl Violation {
    /// A violation, about no name in particular (see [`Violation::about`]).
    pub fn new(rule: Rule, at: Location, message: String, help: Option<String>) -> Violation {
        Violation {
            rule,
            at,
            message,
            help,
            subject: None,
        }
    }

    /// The same violation, about the column (or input) `name`.
    pub fn about(mut self, name: impl Into<String>) -> Violation {
        self.subject = Some(name.into());
        self
    }
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)?;
        if let Some(h) = &self.help {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}
