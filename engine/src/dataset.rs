//! The run-time builder: [`DataStream`] (Spark's streaming `DataFrame`),
//! [`GroupedStream`] and [`StreamWriter`] (Spark's `DataStreamWriter`);
//! [`Session::read_stream`] (Spark's `readStream`) starts one, here beside
//! what it makes, so the session does not import the builder.
//! Builder methods never fail; [`StreamWriter::start`] checks the whole query
//! with the same rules the `stream_query!` macro applies at compile time.

use std::collections::{BTreeMap, HashMap};

use arrow::record_batch::RecordBatch;
use weir_plan::{
    AggSpec, GroupKey, JoinType, Node, Op, OutputMode, SelectItem, SourceDecl, StreamPlan,
};

use crate::error::{Result, WeirError};
use crate::query::{QuerySpec, StreamingQuery, Trigger};
use crate::session::Session;
use crate::sink::{BoxSink, ForeachBatchSink};
use crate::source::BoxSource;
use crate::table::StaticTable;

impl Session {
    /// A stream reading `source` (Spark's `readStream`).
    pub fn read_stream(&self, source: impl Into<BoxSource>) -> DataStream {
        DataStream::new(self.clone(), source.into())
    }
}

/// A streaming table: sources and the operations on them.
pub struct DataStream {
    pub(crate) session: Session,
    pub(crate) plan: StreamPlan,
    pub(crate) sources: BTreeMap<String, BoxSource>,
    pub(crate) statics: BTreeMap<String, StaticTable>,
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
        let statics = statics
            .into_iter()
            .map(|(name, rows)| {
                let schema = plan
                    .statics
                    .get(&name)
                    .map(|s| crate::row::arrow_schema(&s.schema))
                    .or_else(|| rows.first().map(|b| b.schema()))
                    .unwrap_or_else(|| std::sync::Arc::new(arrow::datatypes::Schema::empty()));
                (name, StaticTable::from_batches(schema, rows))
            })
            .collect();
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

    /// Drops rows whose `columns` were seen before (Spark's `dropDuplicates`;
    /// no columns means all of them, as Spark's `dropDuplicates()`).
    pub fn drop_duplicates(self, columns: &[&str]) -> Self {
        let columns = self.columns_or_all(columns);
        self.push(Op::Dedup {
            columns,
            within_watermark: false,
        })
    }

    /// Spark's `dropDuplicatesWithinWatermark` (no columns means all of them).
    pub fn drop_duplicates_within_watermark(self, columns: &[&str]) -> Self {
        let columns = self.columns_or_all(columns);
        self.push(Op::Dedup {
            columns,
            within_watermark: true,
        })
    }

    /// `columns`, or when there are none every column the stream has here
    /// (none when its plan does not resolve: `start()` reports why).
    fn columns_or_all(&self, columns: &[&str]) -> Vec<String> {
        if !columns.is_empty() {
            return columns.iter().map(|c| c.to_string()).collect();
        }
        let (schemas, _) = weir_plan::resolve::resolve(&self.plan);
        schemas
            .get(&self.plan.result)
            .map(|s| s.columns.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
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

    /// Joins with another stream (a stream-stream join, Spark's symmetric
    /// hash join) or, with [`DataStream::join_static`], a static table.
    /// This stream is the left side.
    ///
    /// ```no_run
    /// # use weir_engine::{dataset::JoinOn, plan::JoinType, source::MemoryStream, Session};
    /// # let (s, imps, clicks) = (Session::new(), MemoryStream::new(&[]), MemoryStream::new(&[]));
    /// let joined = s.read_stream(imps).with_watermark("imp_ts", "10 minutes").join(
    ///     s.read_stream(clicks).with_watermark("click_ts", "20 minutes"),
    ///     "click_ad_id = imp_ad_id AND click_ts >= imp_ts AND click_ts <= imp_ts + INTERVAL '15 minutes'",
    ///     JoinType::LeftOuter,
    /// );
    /// ```
    pub fn join(mut self, other: DataStream, on: impl Into<JoinOn>, how: JoinType) -> DataStream {
        let right = self.absorb(other);
        self.push_join(right, on.into(), how)
    }

    /// Joins with a static table (stream on the left): inner or left outer,
    /// the table re-read as its [`StaticTable::refresh_every`] says.
    pub fn join_static(
        mut self,
        name: &str,
        table: StaticTable,
        on: impl Into<JoinOn>,
        how: JoinType,
    ) -> DataStream {
        // The session's S3 settings, unless the table has its own.
        let table = table.or_s3_settings(&self.session.conf().s3);
        let name = self.fresh(name);
        self.plan.statics.insert(
            name.clone(),
            weir_plan::StaticDecl {
                schema: crate::row::plan_fields(&table.schema()),
                rows: vec![],
            },
        );
        self.statics.insert(name.clone(), table);
        self.push_join(name, on.into(), how)
    }

    /// Gives a stream built [`DataStream::from_plan`] the static table its
    /// plan joins as `name` (a table that reads files, refreshes and takes
    /// the session's S3 settings unless it has its own, as
    /// [`DataStream::join_static`] does).
    pub fn static_table(mut self, name: &str, table: StaticTable) -> Result<DataStream> {
        let Some(decl) = self.plan.statics.get_mut(name) else {
            return Err(WeirError::Config(format!(
                "the plan joins no static table `{name}`"
            )));
        };
        let table = table.or_s3_settings(&self.session.conf().s3);
        decl.schema = crate::row::plan_fields(&table.schema());
        self.statics.insert(name.to_string(), table);
        Ok(self)
    }

    fn taken(&self, name: &str) -> bool {
        self.plan.sources.contains_key(name)
            || self.plan.statics.contains_key(name)
            || self.plan.nodes.iter().any(|n| n.id == name)
    }

    fn fresh(&self, base: &str) -> String {
        if !self.taken(base) {
            return base.to_string();
        }
        (1..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| !self.taken(n))
            .expect("an unused name")
    }

    /// Moves another stream's sources, tables and nodes into this plan under
    /// fresh names; returns the name of its result node.
    fn absorb(&mut self, other: DataStream) -> String {
        let mut rename: HashMap<String, String> = HashMap::new();
        for (name, src) in other.sources {
            let new = self.fresh(&name);
            if let Some(d) = other.plan.sources.get(&name) {
                self.plan.sources.insert(new.clone(), d.clone());
            }
            self.sources.insert(new.clone(), src);
            rename.insert(name, new);
        }
        for (name, t) in other.statics {
            let new = self.fresh(&name);
            if let Some(d) = other.plan.statics.get(&name) {
                self.plan.statics.insert(new.clone(), d.clone());
            }
            self.statics.insert(new.clone(), t);
            rename.insert(name, new);
        }
        for node in &other.plan.nodes {
            let new = self.fresh(&format!("{}_right", node.id));
            rename.insert(node.id.clone(), new.clone());
            // Reserve the id now so the next node gets another.
            self.plan.nodes.push(Node {
                id: new,
                input: String::new(),
                ops: vec![],
            });
        }
        let at = self.plan.nodes.len() - other.plan.nodes.len();
        for (i, node) in other.plan.nodes.into_iter().enumerate() {
            let slot = &mut self.plan.nodes[at + i];
            slot.input = rename.get(&node.input).cloned().unwrap_or(node.input);
            slot.ops = node
                .ops
                .into_iter()
                .map(|op| match op {
                    Op::Join {
                        right,
                        how,
                        on,
                        using,
                    } => Op::Join {
                        right: rename.get(&right).cloned().unwrap_or(right),
                        how,
                        on,
                        using,
                    },
                    other => other,
                })
                .collect();
        }
        rename
            .get(&other.plan.result)
            .cloned()
            .unwrap_or(other.plan.result)
    }

    fn push_join(mut self, right: String, on: JoinOn, how: JoinType) -> DataStream {
        let id = self.fresh("joined");
        let (on, using) = match on {
            JoinOn::Expr(e) => (Some(weir_plan::expr::Expr::read(&e)), None),
            JoinOn::Using(u) => (None, Some(u)),
        };
        self.plan.nodes.push(Node {
            id: id.clone(),
            input: self.plan.result.clone(),
            ops: vec![Op::Join {
                right,
                how,
                on,
                using,
            }],
        });
        self.plan.result = id;
        self
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
            late_sink: None,
            #[cfg(feature = "kafka")]
            scale_out: None,
        }
    }
}

/// A join condition: a SQL expression over both sides' columns, or the
/// names of columns both sides have (`USING`).
#[derive(Debug, Clone, PartialEq)]
pub enum JoinOn {
    /// `ON <sql>`.
    Expr(String),
    /// `USING (cols)`: output has each key once, then the left's other
    /// columns, then the right's.
    Using(Vec<String>),
}

impl From<&str> for JoinOn {
    fn from(s: &str) -> JoinOn {
        JoinOn::Expr(s.to_string())
    }
}

impl<const N: usize> From<[&str; N]> for JoinOn {
    fn from(cols: [&str; N]) -> JoinOn {
        JoinOn::Using(cols.iter().map(|c| c.to_string()).collect())
    }
}

impl From<Vec<String>> for JoinOn {
    fn from(cols: Vec<String>) -> JoinOn {
        JoinOn::Using(cols)
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
    pub(crate) late_sink: Option<BoxSink>,
    /// Scale-out: the consumer group this process joins.
    #[cfg(feature = "kafka")]
    pub(crate) scale_out: Option<crate::scale::ScaleOut>,
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

    /// Beyond Spark: rows that stateful operators drop as late (behind the
    /// watermark) go to this second sink, with the batch id, instead of only
    /// being counted in `numRowsDroppedByWatermark`. Rows arrive in the schema
    /// of the operator's input; a stream-stream join sends both sides' rows
    /// as `side` (`left`/`right`; `_side` when a side has a `side` column)
    /// and both sides' columns. A query whose
    /// operators drop rows of different columns (a join and an aggregation
    /// after it) is refused at `start()`. For an aggregation, a row is sent
    /// here when every window it falls in had closed; for session windows,
    /// when its own session (its time plus the gap) ends at or before the
    /// watermark.
    pub fn late_rows_to(mut self, s: impl Into<BoxSink>) -> Self {
        self.late_sink = Some(s.into());
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
        let mut p =
            QuerySpec::running_plan(self.stream.session.conf(), &self.stream.plan, self.mode);
        p.sink = self.sink.as_ref().map(|s| weir_plan::SinkDecl {
            kind: s.kind(),
            checkpoint: self.checkpoint.is_some(),
        });
        #[cfg(feature = "kafka")]
        {
            p.scale_out = self.scale_out.as_ref().map(|s| s.group.clone());
        }
        p.trigger = Some(self.trigger.decl());
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

    /// Runs the query as this process's share of a query spread over many
    /// processes: each process started with the same `group` and the same
    /// checkpoint location joins Kafka consumer group `group` and runs the
    /// tasks of the input partitions the group assigns it (see
    /// [`crate::scale`]). The source must be Kafka (`subscribe`).
    #[cfg(feature = "kafka")]
    pub fn scale_out(mut self, group: &str) -> Self {
        self.scale_out = Some(crate::scale::ScaleOut {
            group: group.to_string(),
            instance_id: None,
        });
        self
    }

    /// Kafka's static membership for a scale-out query
    /// (`group.instance.id`, unique per process): a process restarted with
    /// the same id within the group's session timeout gets its partitions
    /// back without a rebalance. Call after [`StreamWriter::scale_out`].
    #[cfg(feature = "kafka")]
    pub fn scale_out_instance(mut self, id: &str) -> Self {
        if let Some(s) = self.scale_out.as_mut() {
            s.instance_id = Some(id.to_string());
        }
        self
    }

    /// Checks the query and starts it on its own thread.
    // `mut` for scale-out, which only the `kafka` feature builds.
    #[cfg_attr(not(feature = "kafka"), allow(unused_mut))]
    pub fn start(mut self) -> Result<StreamingQuery> {
        self.validate()?;
        #[cfg(feature = "kafka")]
        if let Some(scale) = self.scale_out.take() {
            return crate::scale::start(self.into_query_spec()?, scale);
        }
        crate::query::start(self.into_query_spec()?)
    }

    /// The query as the executor runs it: the plan with this writer's
    /// settings applied, its sources, sinks and checkpoint location.
    pub(crate) fn into_query_spec(self) -> Result<QuerySpec> {
        let StreamWriter {
            stream,
            mode,
            trigger,
            name,
            checkpoint,
            sink,
            late_sink,
            ..
        } = self;
        let sink = sink.ok_or_else(|| {
            WeirError::Config(
                "no sink: call .sink(...) or .foreach_batch(...) before start()".into(),
            )
        })?;
        Ok(QuerySpec {
            plan: QuerySpec::running_plan(stream.session.conf(), &stream.plan, mode),
            host: stream.session.inner,
            sources: stream.sources,
            statics: stream.statics,
            trigger,
            name,
            checkpoint,
            sink,
            late_sink,
            watermark_share: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use weir_plan::{DataType, Field, WatermarkPolicy};

    use super::*;
    use crate::sink::MemorySink;
    use crate::source::MemoryStream;

    fn session() -> Session {
        Session::builder()
            .config("spark.sql.streaming.weir.stopOnSignal", "false")
            .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
            .config("spark.sql.streaming.multipleWatermarkPolicy", "max")
            .build()
            .unwrap()
    }

    fn writer() -> StreamWriter {
        let events = MemoryStream::new(&[Field::new("n", DataType::Int64)]);
        session()
            .read_stream(events)
            .filter("n > 0")
            .write_stream()
            .output_mode(OutputMode::Update)
            .trigger(Trigger::AvailableNow)
            .query_name("positives")
            .checkpoint_location("/tmp/weir-spec-test")
    }

    #[test]
    fn the_spec_runs_the_plan_with_the_writers_and_sessions_settings() {
        let spec = writer()
            .sink(MemorySink::new(""))
            .into_query_spec()
            .unwrap();
        assert_eq!(spec.plan.output_mode, OutputMode::Update);
        assert!(!spec.plan.conf.no_data_batches);
        assert_eq!(spec.plan.conf.watermark_policy, WatermarkPolicy::Max);
        assert_eq!(spec.trigger, Trigger::AvailableNow);
        assert_eq!(spec.name.as_deref(), Some("positives"));
        assert_eq!(spec.checkpoint.as_deref(), Some("/tmp/weir-spec-test"));
        assert_eq!(spec.sources.keys().collect::<Vec<_>>(), ["stream"]);
        assert_eq!(spec.sink.kind(), weir_plan::SinkKind::Memory);
        assert!(spec.late_sink.is_none() && spec.watermark_share.is_none());
    }

    #[test]
    fn the_spec_runs_the_plan_that_validate_checks() {
        let writer = writer().sink(MemorySink::new(""));
        let checked = writer.plan();
        let spec = writer.into_query_spec().unwrap();
        // The same plan, but for the declarations only the checks read.
        let mut ran = spec.plan;
        ran.sink = checked.sink.clone();
        ran.trigger = checked.trigger;
        ran.scale_out = checked.scale_out.clone();
        assert_eq!(ran, checked);
    }

    #[test]
    fn a_query_without_a_sink_is_refused_at_start_saying_what_to_call() {
        let err = match writer().start() {
            Ok(_) => panic!("a query without a sink started"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("no sink"), "{err}");
        assert!(err.contains(".sink(...)"), "{err}");
    }
}
