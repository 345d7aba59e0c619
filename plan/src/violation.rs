//! What a broken rule is, as data: the [`Rule`], where it is
//! ([`Location`], down to the [`Part`] of an op), the name it is about
//! ([`Violation::subject`]) and the words for the user. Schema resolution
//! ([`mod@crate::resolve`]) and the streaming rules ([`mod@crate::check`]) produce
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
    /// Limit in append mode (Spark runs it; weir does not yet).
    LimitInAppendMode,
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
    /// A left anti join whose right side is a stream.
    LeftAntiWithStreamingRight,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::check;
    use crate::check::tests::events;
    use crate::plan::*;
    use crate::resolve::check_column;
    use crate::types::{DataType, Field};

    /// `(rule, subject)` of every violation of a plan.
    fn subjects_of(p: &StreamPlan) -> Vec<(Rule, Option<String>)> {
        check(p).into_iter().map(|v| (v.rule, v.subject)).collect()
    }

    /// `(rule, subject)` of every violation of a one-source plan.
    fn subjects(ops: Vec<Op>, mode: OutputMode) -> Vec<(Rule, Option<String>)> {
        subjects_of(&StreamPlan::single("events", events(), ops, mode))
    }

    fn item(expr: &str, alias: &str) -> SelectItem {
        SelectItem {
            expr: expr.into(),
            alias: alias.into(),
        }
    }

    fn key(column: &str) -> GroupKey {
        GroupKey::Column {
            column: column.into(),
        }
    }

    fn about(rule: Rule, name: &str) -> (Rule, Option<String>) {
        (rule, Some(name.to_string()))
    }

    fn agg(func: AggFn, column: &str, alias: &str) -> AggSpec {
        AggSpec {
            func,
            column: column.into(),
            alias: alias.into(),
        }
    }

    #[test]
    fn an_unknown_column_is_the_subject_wherever_it_is_named() {
        let got = subjects(
            vec![
                Op::Filter {
                    predicate: "vaule > 1 AND key <> 'rock and roll'".into(),
                },
                Op::Dedup {
                    columns: vec!["kee".into()],
                    within_watermark: false,
                },
                Op::Aggregate {
                    keys: vec![key("page")],
                    aggs: vec![agg(AggFn::Sum, "n", "total")],
                },
                Op::Sort {
                    by: vec![SortKey {
                        column: "totl".into(),
                        desc: false,
                    }],
                },
            ],
            OutputMode::Update,
        );
        assert_eq!(
            got[..5],
            [
                about(Rule::UnknownColumn, "vaule"),
                about(Rule::UnknownColumn, "kee"),
                about(Rule::UnknownColumn, "page"),
                about(Rule::UnknownColumn, "n"),
                about(Rule::UnknownColumn, "totl"),
            ]
        );
    }

    #[test]
    fn duplicate_and_mistyped_columns_are_the_subject() {
        let got = subjects(
            vec![
                Op::Select {
                    columns: vec![item("ts", "ts"), item("key", "k"), item("value", "k")],
                },
                Op::Watermark {
                    column: "k".into(),
                    delay: "1 minute".into(),
                },
                Op::Aggregate {
                    keys: vec![key("ts"), key("ts")],
                    aggs: vec![agg(AggFn::Sum, "k", "s"), agg(AggFn::Count, "*", "s")],
                },
            ],
            OutputMode::Update,
        );
        assert_eq!(
            got,
            [
                about(Rule::DuplicateColumn, "k"),
                about(Rule::TypeMismatch, "k"),
                about(Rule::DuplicateColumn, "ts"),
                about(Rule::TypeMismatch, "k"),
                about(Rule::DuplicateColumn, "s"),
            ]
        );
    }

    #[test]
    fn a_window_over_a_non_timestamp_names_its_column() {
        let got = subjects(
            vec![Op::Aggregate {
                keys: vec![GroupKey::Window {
                    window: WindowSpec {
                        column: Some("key".into()),
                        expr: None,
                        size: "10 minutes".into(),
                        slide: None,
                        gap: None,
                    },
                    alias: "window".into(),
                }],
                aggs: vec![],
            }],
            OutputMode::Update,
        );
        assert_eq!(got, [about(Rule::TypeMismatch, "key")]);
    }

    #[test]
    fn joins_name_their_keys_and_the_joined_input() {
        let mut p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Join {
                right: "pages".into(),
                how: JoinType::LeftOuter,
                on: None,
                using: Some(vec!["page".into()]),
            }],
            OutputMode::Append,
        );
        let pages = StaticDecl {
            schema: vec![Field::new("key", DataType::String)],
            rows: vec![],
        };
        p.statics.insert("pages".into(), pages);
        let got = subjects_of(&p);
        assert_eq!(
            got,
            [
                about(Rule::UnknownColumn, "page"),
                about(Rule::UnknownColumn, "page"),
            ]
        );
        // The static side of a left outer join on the left: the joined input.
        p.nodes[0].input = "pages".into();
        p.sources.clear();
        p.statics.insert(
            "events".into(),
            StaticDecl {
                schema: vec![],
                rows: vec![],
            },
        );
        p.sources
            .insert("clicks".into(), SourceDecl { schema: events() });
        p.nodes[0].ops = vec![Op::Join {
            right: "clicks".into(),
            how: JoinType::LeftOuter,
            on: None,
            using: Some(vec!["key".into()]),
        }];
        let got = subjects_of(&p);
        assert_eq!(got, [about(Rule::StreamStaticOuterJoin, "clicks")]);
        // A left anti join with the stream on the right: refused as such.
        if let Op::Join { how, .. } = &mut p.nodes[0].ops[0] {
            *how = JoinType::LeftAnti;
        }
        let got = subjects_of(&p);
        assert_eq!(got, [about(Rule::LeftAntiWithStreamingRight, "clicks")]);
        // An input that does not exist.
        p.nodes[0].ops = vec![Op::Join {
            right: "nowhere".into(),
            how: JoinType::Inner,
            on: None,
            using: None,
        }];
        let got = subjects_of(&p);
        assert_eq!(got[0], about(Rule::UnknownInput, "nowhere"));
    }

    #[test]
    fn the_kafka_sink_names_the_column_it_needs() {
        let mut p = StreamPlan::single("events", events(), vec![], OutputMode::Append);
        p.sink = Some(SinkDecl {
            kind: SinkKind::Kafka,
            checkpoint: true,
        });
        let got = subjects_of(&p);
        // `value` is a bigint here.
        assert_eq!(got, [about(Rule::KafkaSinkColumns, "value")]);
    }

    #[test]
    fn rules_about_the_whole_query_have_no_subject() {
        let got = subjects(vec![], OutputMode::Complete);
        assert_eq!(got, [(Rule::CompleteWithoutAggregation, None)]);
    }

    #[test]
    fn check_column_is_the_rule_resolution_applies() {
        let at = Location::Op {
            node: 0,
            op: 0,
            part: Part::Whole,
        };
        assert_eq!(check_column("key", &["ts", "key"], at.clone()), None);
        let v = check_column("kye", &["ts", "key"], at.clone()).unwrap();
        assert_eq!(v.rule, Rule::UnknownColumn);
        assert_eq!(v.subject.as_deref(), Some("kye"));
        assert_eq!(v.at, at);
        assert_eq!(v.message, "unknown column `kye`");
        assert_eq!(
            v.help.as_deref(),
            Some("did you mean `key`? (available: ts, key)")
        );
        // The same words as resolution gives a plan that names the column.
        let p = StreamPlan::single(
            "events",
            events(),
            vec![Op::Filter {
                predicate: "kye = 'a'".into(),
            }],
            OutputMode::Append,
        );
        let (_, errs) = crate::resolve::resolve(&p);
        let expected = check_column("kye", &["ts", "key", "value"], at).unwrap();
        assert_eq!(errs, [expected]);
    }
}
