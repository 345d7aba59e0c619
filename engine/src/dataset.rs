//! The run-time builder: [`DataStream`] (Spark's streaming `DataFrame`),
//! [`GroupedStream`] and [`StreamWriter`] (Spark's `DataStreamWriter`).
//! Builder methods never fail; [`StreamWriter::start`] checks the whole query
//! with the same rules the `stream_query!` macro applies at compile time.

use std::collections::BTreeMap;

use arrow::record_batch::RecordBatch;
use weir_plan::{AggSpec, GroupKey, Node, Op, OutputMode, SelectItem, SourceDecl, StreamPlan};

use crate::error::{Result, WeirError};
use crate::query::{StreamingQuery, Trigger};
use crate::session::Session;
use crate::sink::{BoxSink, ForeachBatchSink};
use crate::source::BoxSource;

/// A streaming table: sources and the operations on them.
pub struct DataStream {
    pub(crate) session: Session,
    pub(crate) plan: StreamPlan,
    pub(crate) sources: BTreeMap<String, BoxSource>,
    pub(crate) statics: BTreeMap<String, Vec<RecordBatch>>,
}

impl DataStream {
    pub(crate) fn new(session: Session, source: BoxSource) -> DataStream {
        let fields = crate::row::plan_fields(&source.schema());
        let name = "stream".to_string();
        let mut plan = StreamPlan::single(name.clone(), fields, vec![], OutputMode::Append);
        plan.sources.insert(
            name.clone(),
            SourceDecl {
                schema: crate::row::plan_fields(&source.schema()),
            },
        );
        let mut sources = BTreeMap::new();
        sources.insert(name, source);
        DataStream {
            session,
            plan,
            sources,
            statics: BTreeMap::new(),
        }
    }

    /// A stream from a whole plan (e.g. a conformance scenario's): one source
    /// per `plan.sources` entry and the static tables' rows.
    pub fn from_plan(
        session: &Session,
        plan: StreamPlan,
        sources: BTreeMap<String, BoxSource>,
        statics: BTreeMap<String, Vec<RecordBatch>>,
    ) -> Result<DataStream> {
        for name in plan.sources.keys() {
            if !sources.contains_key(name) {
                return Err(WeirError::Config(format!("no source given for `{name}`")));
            }
        }
        Ok(DataStream {
            session: session.clone(),
            plan,
            sources,
            statics,
        })
    }

    fn push(mut self, op: Op) -> Self {
        let id = self.plan.result.clone();
        if let Some(n) = self.plan.nodes.iter_mut().find(|n| n.id == id) {
            n.ops.push(op);
        } else {
            self.plan.nodes.push(Node {
                id,
                input: self.plan.sources.keys().next().cloned().unwrap_or_default(),
                ops: vec![op],
            });
        }
        self
    }

    /// Keeps rows where the SQL `predicate` holds (`value % 2 = 1`).
    pub fn filter(self, predicate: &str) -> Self {
        self.push(Op::Filter {
            predicate: predicate.into(),
        })
    }

    /// Projects to `(sql expression, alias)` pairs.
    pub fn select(self, items: Vec<(&str, &str)>) -> Self {
        let columns = items
            .into_iter()
            .map(|(e, a)| SelectItem {
                expr: e.into(),
                alias: a.into(),
            })
            .collect();
        self.push(Op::Select { columns })
    }

    /// Adds or replaces column `name` with a SQL expression.
    pub fn with_column(self, name: &str, expr: &str) -> Self {
        self.push(Op::WithColumn {
            name: name.into(),
            expr: expr.into(),
        })
    }

    /// Declares `column` as event time, late by at most `delay` (`"10 minutes"`).
    pub fn with_watermark(self, column: &str, delay: &str) -> Self {
        self.push(Op::Watermark {
            column: column.into(),
            delay: delay.into(),
        })
    }

    /// Groups by keys ([`crate::functions::window`], [`crate::functions::col`]).
    pub fn group_by(self, keys: Vec<GroupKey>) -> GroupedStream {
        GroupedStream { stream: self, keys }
    }

    /// Drops rows whose `columns` were seen before (Spark's `dropDuplicates`).
    pub fn drop_duplicates(self, columns: &[&str]) -> Self {
        self.push(Op::Dedup {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            within_watermark: false,
        })
    }

    /// Spark's `dropDuplicatesWithinWatermark`.
    pub fn drop_duplicates_within_watermark(self, columns: &[&str]) -> Self {
        self.push(Op::Dedup {
            columns: columns.iter().map(|c| c.to_string()).collect(),
            within_watermark: true,
        })
    }

    /// Sorts (only valid on an aggregation in complete mode, as in Spark).
    pub fn order_by(self, by: Vec<(&str, bool)>) -> Self {
        let by = by
            .into_iter()
            .map(|(c, desc)| weir_plan::SortKey {
                column: c.into(),
                desc,
            })
            .collect();
        self.push(Op::Sort { by })
    }

    /// Keeps the first `n` rows (complete mode).
    pub fn limit(self, n: u64) -> Self {
        self.push(Op::Limit { n })
    }

    /// The plan built so far.
    pub fn plan(&self) -> &StreamPlan {
        &self.plan
    }

    /// How to write the stream out (Spark's `writeStream`).
    pub fn write_stream(self) -> StreamWriter {
        StreamWriter {
            stream: self,
            mode: OutputMode::Append,
            trigger: Trigger::Default,
            name: None,
            checkpoint: None,
            sink: None,
        }
    }
}

/// A grouped stream waiting for its aggregates.
pub struct GroupedStream {
    stream: DataStream,
    keys: Vec<GroupKey>,
}

impl GroupedStream {
    /// Aggregates each group ([`crate::functions::count_star`], `sum`, ...).
    pub fn agg(self, aggs: Vec<AggSpec>) -> DataStream {
        self.stream.push(Op::Aggregate {
            keys: self.keys,
            aggs,
        })
    }

    /// `count(*) AS count`, Spark's `groupBy(...).count()`.
    pub fn count(self) -> DataStream {
        self.agg(vec![crate::functions::count_star("count")])
    }
}

/// Configures and starts a streaming query.
pub struct StreamWriter {
    pub(crate) stream: DataStream,
    pub(crate) mode: OutputMode,
    pub(crate) trigger: Trigger,
    pub(crate) name: Option<String>,
    pub(crate) checkpoint: Option<String>,
    pub(crate) sink: Option<BoxSink>,
}

impl StreamWriter {
    /// The output mode (default append, as in Spark).
    pub fn output_mode(mut self, m: OutputMode) -> Self {
        self.mode = m;
        self
    }

    /// When batches run (default: as soon as the previous one finished).
    pub fn trigger(mut self, t: Trigger) -> Self {
        self.trigger = t;
        self
    }

    /// The query's name (also the memory sink's table name).
    pub fn query_name(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Where offsets, commits and state are kept (Spark's `checkpointLocation`).
    pub fn checkpoint_location(mut self, path: &str) -> Self {
        self.checkpoint = Some(path.into());
        self
    }

    /// The sink.
    pub fn sink(mut self, s: impl Into<BoxSink>) -> Self {
        self.sink = Some(s.into());
        self
    }

    /// A closure per batch (Spark's `foreachBatch`).
    pub fn foreach_batch<F>(self, f: F) -> Self
    where
        F: FnMut(i64, &[RecordBatch]) -> Result<()> + Send + 'static,
    {
        self.sink(ForeachBatchSink::new(f))
    }

    /// The query plan that `start` would run, with settings applied.
    pub fn plan(&self) -> StreamPlan {
        let mut p = self.stream.plan.clone();
        p.output_mode = self.mode;
        let c = self.stream.session.conf();
        p.conf.no_data_batches = c.no_data_batches;
        p.conf.watermark_policy = c.watermark_policy;
        p.sink = self.sink.as_ref().map(|s| weir_plan::SinkDecl {
            kind: s.kind(),
            checkpoint: self.checkpoint.is_some(),
        });
        p.trigger = Some(match self.trigger {
            Trigger::Default => weir_plan::TriggerDecl::Default,
            Trigger::ProcessingTime(d) => {
                weir_plan::TriggerDecl::ProcessingTime(d.as_millis() as u64)
            }
            Trigger::AvailableNow => weir_plan::TriggerDecl::AvailableNow,
            Trigger::Once => weir_plan::TriggerDecl::Once,
        });
        p
    }

    /// Checks the query against the streaming rules without starting it.
    pub fn validate(&self) -> Result<()> {
        let v = weir_plan::check(&self.plan());
        if v.is_empty() {
            Ok(())
        } else {
            Err(WeirError::Invalid(v))
        }
    }

    /// Checks the query and starts it on its own thread.
    pub fn start(self) -> Result<StreamingQuery> {
        self.validate()?;
        crate::query::start(self)
    }
}
