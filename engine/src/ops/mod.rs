//! The physical pipeline: a [`weir_plan::StreamPlan`] compiled once per query
//! into operators over Arrow batches, run once per micro-batch.

pub mod aggregate;
pub mod ahead;
pub mod dedup;
pub mod functions;
pub mod join;
pub mod lower;
pub mod morsels;
pub mod narrow;
pub mod operator;
pub mod session_window;
pub mod stateless;
pub mod tasks;
pub mod watermark;
pub mod window;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{
    concat_batches, lexsort_to_indices, take_record_batch, SortColumn, SortOptions,
};
use arrow::datatypes::SchemaRef;
use weir_plan::{GroupKey, Op, OutputMode, StreamPlan};

use crate::error::{Result, WeirError};
use crate::progress::held::WatermarkOperator;
use crate::progress::StateOperatorProgress;
use crate::state::{InTaskCommit, PartitionedStore};

use aggregate::{AggExec, AggregateOp, KeyExec, Watermarks};
use ahead::{Prepared, Preparer};
use dedup::DedupOp;
use join::JoinOp;
use narrow::Narrow;
use operator::StatefulOperator;
use session_window::SessionAggregateOp;
use stateless::{ExprPlanner, FilterOp, ProjectOp};
use watermark::{EventTimeStats, WatermarkOp};
use window::{TimeSource, WindowAssigner};

/// One compiled operator.
pub enum OpExec {
    /// Filter rows.
    Filter(FilterOp),
    /// Compute columns.
    Project(ProjectOp),
    /// Observe event time.
    Watermark(WatermarkOp),
    /// A stateful operator (aggregation, session windows, deduplication, a
    /// stream-stream join with the index of the node its right side reads).
    Stateful(Box<dyn StatefulOperator>, Option<usize>),
    /// A stream-static join (the table's rows live in the operator).
    StaticJoin(Box<JoinOp>),
    /// Sort (aggregations in complete mode).
    Sort(Vec<(usize, bool)>),
    /// Keep the first n rows (complete mode).
    Limit(usize),
}

/// Where a node reads from.
pub enum Input {
    /// The i-th source of the query.
    Source(usize),
    /// An earlier node.
    Node(usize),
    /// A static table.
    Static(Vec<RecordBatch>),
}

struct NodeExec {
    input: Input,
    ops: Vec<OpExec>,
}

/// What one micro-batch needs to know and reports back.
#[derive(Debug, Clone, Default)]
pub struct BatchContext {
    /// The watermarks in force.
    pub watermarks: Watermarks,
    /// A no-data batch (run only because the watermark moved).
    pub no_data: bool,
    /// Event-time statistics per watermark operator.
    pub event_time: Vec<EventTimeStats>,
    /// Collect the rows stateful operators drop as late (a side output is set).
    pub collect_late: bool,
    /// The rows dropped as late in this batch (when collected).
    pub late_rows: Vec<RecordBatch>,
    /// The state version this batch commits, when its state partitions may
    /// commit it in their own tasks, right after the operator's last
    /// change to them and once `offsets/N` is durable (see
    /// `PartitionedStore::map_parts`); `None`: every partition commits
    /// after the sink (as a scale-out task's must, so a zombie's fenced
    /// sink write stops it before it writes state).
    pub state_commit: Option<InTaskCommit>,
}

impl BatchContext {
    /// When late rows are collected (a side output is set): puts the rows
    /// `late` finds into [`BatchContext::late_rows`] and returns how many,
    /// for the operator's `numLateRowsToSideOutput`.
    pub fn collect_late(
        &mut self,
        late: impl FnOnce() -> Result<Vec<RecordBatch>>,
    ) -> Result<Option<usize>> {
        if !self.collect_late {
            return Ok(None);
        }
        let rows = late()?;
        let n = rows.iter().map(RecordBatch::num_rows).sum();
        self.late_rows.extend(rows);
        Ok(Some(n))
    }
}

/// A compiled query.
pub struct Pipeline {
    nodes: Vec<NodeExec>,
    result: usize,
    schema: SchemaRef,
    mode: OutputMode,
    /// Delay (ms) of each watermark operator, by id.
    pub watermark_delays: Vec<i64>,
    /// Each watermark operator's column and source, by id.
    watermark_ops: Vec<WatermarkOperator>,
    partitions: usize,
    late_schemas: Vec<SchemaRef>,
}

/// Compile-time bookkeeping of one node's output.
#[derive(Clone)]
struct NodeInfo {
    schema: SchemaRef,
    /// Columns carrying a watermark, with its delay (ms).
    watermarked: HashMap<String, i64>,
    streaming: bool,
    /// The source its rows come from (a join's: its left side's).
    source: Option<usize>,
}

impl NodeInfo {
    /// The first watermarked column in schema order.
    fn event_time(&self) -> Option<(String, i64)> {
        self.schema.fields().iter().find_map(|f| {
            self.watermarked
                .get(f.name())
                .map(|d| (f.name().clone(), *d))
        })
    }
}

impl Pipeline {
    /// Compiles `plan` for sources with `source_schemas` (in `plan.sources` order)
    /// and static tables.
    pub fn compile(
        plan: &StreamPlan,
        source_schemas: &[SchemaRef],
        statics: &BTreeMap<String, crate::table::StaticTable>,
    ) -> Result<Pipeline> {
        let planner = ExprPlanner::new();
        let source_names: Vec<&String> = plan.sources.keys().collect();
        let mut infos: Vec<NodeInfo> = Vec::new();
        let mut nodes = Vec::new();
        let mut delays = Vec::new();
        let mut watermark_ops = Vec::new();
        let mut stateful = 0usize;
        // The input schema of every operator that drops late rows.
        let mut late_schemas: Vec<SchemaRef> = Vec::new();
        for node in &plan.nodes {
            let (input, mut info) =
                if let Some(i) = source_names.iter().position(|n| **n == node.input) {
                    (
                        Input::Source(i),
                        NodeInfo {
                            schema: source_schemas[i].clone(),
                            watermarked: HashMap::new(),
                            streaming: true,
                            source: Some(i),
                        },
                    )
                } else if let Some(i) = plan.nodes.iter().position(|n| n.id == node.input) {
                    let info = infos.get(i).cloned().ok_or_else(|| {
                        WeirError::Config(format!(
                            "node `{}` reads `{}` before it is defined",
                            node.id, node.input
                        ))
                    })?;
                    (Input::Node(i), info)
                } else if let Some(table) = statics.get(&node.input) {
                    let schema = table.schema();
                    (
                        Input::Static(table.load()?),
                        NodeInfo {
                            schema,
                            watermarked: HashMap::new(),
                            streaming: false,
                            source: None,
                        },
                    )
                } else {
                    return Err(WeirError::Config(format!(
                        "node `{}` reads `{}`, which is not a source, static table or earlier node",
                        node.id, node.input
                    )));
                };
            let mut ops = Vec::new();
            for op in &node.ops {
                let schema = info.schema.clone();
                if op.is_stateful() {
                    late_schemas.push(schema.clone());
                }
                let idx = |c: &str| -> Result<usize> {
                    schema.index_of(c).map_err(|_| {
                        WeirError::Config(format!(
                            "unknown column `{c}` (available: {})",
                            schema
                                .fields()
                                .iter()
                                .map(|f| f.name().as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ))
                    })
                };
                match op {
                    Op::Filter { predicate } => {
                        let f = FilterOp::new(&planner, predicate, schema.clone())?;
                        ops.push(OpExec::Filter(f));
                    }
                    Op::Select { columns } => {
                        let items: Vec<(weir_plan::expr::Expr, String)> = columns
                            .iter()
                            .map(|c| (c.expr.clone(), c.alias.clone()))
                            .collect();
                        let p = ProjectOp::select(&planner, &items, schema.clone())?;
                        let mut wm = HashMap::new();
                        for c in columns {
                            if let Some(d) =
                                c.expr.as_column().and_then(|n| info.watermarked.get(n))
                            {
                                wm.insert(c.alias.clone(), *d);
                            }
                        }
                        info = NodeInfo {
                            schema: p.schema(),
                            watermarked: wm,
                            streaming: info.streaming,
                            source: info.source,
                        };
                        ops.push(OpExec::Project(p));
                    }
                    Op::WithColumn { name, expr } => {
                        let p = ProjectOp::with_column(&planner, name, expr, schema.clone())?;
                        match expr
                            .as_column()
                            .and_then(|n| info.watermarked.get(n))
                            .copied()
                        {
                            Some(d) => {
                                info.watermarked.insert(name.clone(), d);
                            }
                            None => {
                                info.watermarked.remove(name);
                            }
                        }
                        info.schema = p.schema();
                        ops.push(OpExec::Project(p));
                    }
                    Op::Watermark { column, delay } => {
                        let d = delay.ms().map_err(|e| {
                            WeirError::Config(format!("watermark delay \"{delay}\": {e}"))
                        })?;
                        let w = WatermarkOp::new(delays.len(), idx(column)?, d);
                        delays.push(d);
                        watermark_ops.push(WatermarkOperator {
                            column: column.clone(),
                            source: info.source,
                            delay_ms: d,
                        });
                        info.watermarked.insert(column.clone(), d);
                        ops.push(OpExec::Watermark(w));
                    }
                    Op::Aggregate { keys, aggs }
                        if keys.iter().any(
                            |k| matches!(k, GroupKey::Window { window, .. } if window.is_session()),
                        ) =>
                    {
                        let mut others = Vec::new();
                        let mut session = None;
                        for (i, k) in keys.iter().enumerate() {
                            match k {
                                GroupKey::Window { window, alias } if window.is_session() => {
                                    if session.is_some() {
                                        return Err(WeirError::Config("Multiple time window expressions would result in a cartesian product of rows, therefore they are currently not supported.".into()));
                                    }
                                    let tc = window.time_column().ok_or_else(|| WeirError::Config("a session window needs a time column".into()))?;
                                    let gap = window.gap.clone().unwrap_or_default();
                                    let gap_ms = gap.positive_ms().map_err(|e| WeirError::Config(format!("session gap \"{gap}\": {e}")))?;
                                    session = Some((i, idx(&tc)?, gap_ms, alias.clone(), info.watermarked.get(&tc).copied()));
                                }
                                GroupKey::Column { column } => others.push((idx(column)?, column.clone())),
                                GroupKey::Window { .. } => {
                                    return Err(WeirError::Config("Multiple time window expressions would result in a cartesian product of rows, therefore they are currently not supported.".into()))
                                }
                            }
                        }
                        let (pos, tcol, gap_ms, alias, wm) = session.expect("a session key");
                        let ax = agg_execs(aggs, &schema)?;
                        let op = SessionAggregateOp::new(
                            stateful,
                            tcol,
                            gap_ms,
                            pos,
                            &alias,
                            others,
                            ax,
                            wm.is_some(),
                            &schema,
                        )?;
                        stateful += 1;
                        let mut out_wm = HashMap::new();
                        if let Some(d) = wm {
                            out_wm.insert(alias.clone(), d);
                        }
                        info = NodeInfo {
                            schema: op.schema(),
                            watermarked: out_wm,
                            streaming: info.streaming,
                            source: info.source,
                        };
                        ops.push(OpExec::Stateful(Box::new(op), None));
                    }
                    Op::Aggregate { keys, aggs } => {
                        let mut kx = Vec::new();
                        let mut out_wm = HashMap::new();
                        let mut windows = 0;
                        for k in keys {
                            match k {
                                GroupKey::Column { column } => {
                                    let wm = info.watermarked.get(column).copied();
                                    if let Some(d) = wm {
                                        out_wm.insert(column.clone(), d);
                                    }
                                    let wm = wm.is_some();
                                    kx.push(KeyExec::Column {
                                        index: idx(column)?,
                                        name: column.clone(),
                                        watermarked: wm,
                                    });
                                }
                                GroupKey::Window { window, alias } => {
                                    windows += 1;
                                    let tc = window.time_column().ok_or_else(|| {
                                        WeirError::Config("a window needs a time column".into())
                                    })?;
                                    let source = if window.is_window_time() {
                                        TimeSource::WindowTime(idx(&tc)?)
                                    } else {
                                        TimeSource::Column(idx(&tc)?)
                                    };
                                    let size = window.size.positive_ms().map_err(|e| {
                                        WeirError::Config(format!(
                                            "window size \"{}\": {e}",
                                            window.size
                                        ))
                                    })?;
                                    let slide = match &window.slide {
                                        Some(s) => s.positive_ms().map_err(|e| {
                                            WeirError::Config(format!("window slide \"{s}\": {e}"))
                                        })?,
                                        None => size,
                                    };
                                    let wm = info.watermarked.get(&tc).copied();
                                    if let Some(d) = wm {
                                        out_wm.insert(alias.clone(), d);
                                    }
                                    let wm = wm.is_some();
                                    kx.push(KeyExec::Window {
                                        assigner: WindowAssigner::from_ms(source, size, slide)?,
                                        name: alias.clone(),
                                        watermarked: wm,
                                    });
                                }
                            }
                        }
                        if windows > 1 {
                            return Err(WeirError::Config("Multiple time window expressions would result in a cartesian product of rows, therefore they are currently not supported.".into()));
                        }
                        let ax = agg_execs(aggs, &schema)?;
                        let agg = AggregateOp::new(stateful, kx, ax, &schema)?;
                        stateful += 1;
                        info = NodeInfo {
                            schema: agg.schema(),
                            watermarked: out_wm,
                            streaming: info.streaming,
                            source: info.source,
                        };
                        ops.push(OpExec::Stateful(Box::new(agg), None));
                    }
                    Op::Sort { by } => {
                        let keys = by
                            .iter()
                            .map(|k| Ok((idx(&k.column)?, k.desc)))
                            .collect::<Result<Vec<_>>>()?;
                        ops.push(OpExec::Sort(keys));
                    }
                    // Complete mode only (`check`: Spark's rule for update
                    // mode, weir's for append).
                    Op::Limit { n } => ops.push(OpExec::Limit(*n as usize)),
                    Op::Dedup {
                        columns,
                        within_watermark,
                    } => {
                        if columns.is_empty() {
                            return Err(WeirError::Config(
                                "a dedup needs the columns that identify a row (the builder's `drop_duplicates(&[])` names every column)".into(),
                            ));
                        }
                        let keys = columns.iter().map(|c| idx(c)).collect::<Result<Vec<_>>>()?;
                        let et = info
                            .event_time()
                            .map(|(c, d)| Ok::<_, WeirError>((idx(&c)?, d)))
                            .transpose()?;
                        let op =
                            DedupOp::new(stateful, keys, et, *within_watermark, schema.clone())?;
                        stateful += 1;
                        ops.push(OpExec::Stateful(Box::new(op), None));
                    }
                    Op::Join {
                        right,
                        how,
                        on,
                        using,
                    } => {
                        let (rinfo, rin, static_rows) =
                            if let Some(j) = plan.nodes.iter().position(|n| n.id == *right) {
                                let ri = infos.get(j).cloned().ok_or_else(|| {
                                    WeirError::Config(format!(
                                        "join with `{right}` before it is defined"
                                    ))
                                })?;
                                (ri, Some(j), None)
                            } else if let Some(table) = statics.get(right) {
                                let schema = table.schema();
                                let all = (table.clone(), concat_batches(&schema, &table.load()?)?);
                                (
                                    NodeInfo {
                                        schema,
                                        watermarked: HashMap::new(),
                                        streaming: false,
                                        source: None,
                                    },
                                    None,
                                    Some(all),
                                )
                            } else {
                                return Err(WeirError::Config(format!(
                                    "join with `{right}`, which is not a node or static table"
                                )));
                            };
                        if !info.streaming && rinfo.streaming {
                            return Err(WeirError::Config("a join with the static table on the left and the stream on the right: put the stream on the left".into()));
                        }
                        let is_static = static_rows.is_some();
                        let op = JoinOp::new(
                            if is_static { usize::MAX } else { stateful },
                            &planner,
                            *how,
                            schema.clone(),
                            rinfo.schema.clone(),
                            on.as_ref(),
                            using.as_deref(),
                            info.event_time().map(|c| c.0).as_deref(),
                            rinfo.event_time().map(|c| c.0).as_deref(),
                            static_rows,
                        )?;
                        if !is_static {
                            stateful += 1;
                            // Both sides' late rows, in one schema.
                            late_schemas.push(op.late_schema());
                        }
                        let mut wm = info.watermarked.clone();
                        wm.extend(rinfo.watermarked.clone());
                        info = NodeInfo {
                            schema: op.schema(),
                            watermarked: wm,
                            streaming: true,
                            source: info.source.or(rinfo.source),
                        };
                        ops.push(match rin {
                            Some(j) => OpExec::Stateful(Box::new(op), Some(j)),
                            None => OpExec::StaticJoin(Box::new(op)),
                        });
                    }
                }
            }
            infos.push(info);
            nodes.push(NodeExec { input, ops });
        }
        let result = plan
            .nodes
            .iter()
            .position(|n| n.id == plan.result)
            .ok_or_else(|| {
                WeirError::Config(format!("the result node `{}` does not exist", plan.result))
            })?;
        Ok(Pipeline {
            nodes,
            result,
            schema: infos[result].schema.clone(),
            mode: plan.output_mode,
            watermark_delays: delays,
            watermark_ops,
            partitions: 1,
            late_schemas,
        })
    }

    /// The schema of the rows the sink receives.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// Number of watermark operators.
    pub fn watermark_count(&self) -> usize {
        self.watermark_delays.len()
    }

    /// Each watermark operator's column, source and delay, by id.
    pub fn watermark_operators(&self) -> &[WatermarkOperator] {
        &self.watermark_ops
    }

    /// Bounds what one group may collect in every stateful operator
    /// (`spark.sql.streaming.weir.collectMaxValues`).
    pub fn set_collect_max_values(&mut self, n: usize) {
        for op in self.stateful_mut() {
            op.set_collect_max_values(n);
        }
    }

    fn stateful_mut(&mut self) -> impl Iterator<Item = &mut Box<dyn StatefulOperator>> {
        self.nodes
            .iter_mut()
            .flat_map(|n| n.ops.iter_mut())
            .filter_map(|o| match o {
                OpExec::Stateful(op, _) => Some(op),
                _ => None,
            })
    }

    fn stateful(&self) -> impl Iterator<Item = &dyn StatefulOperator> {
        self.nodes
            .iter()
            .flat_map(|n| n.ops.iter())
            .filter_map(|o| match o {
                OpExec::Stateful(op, _) => Some(op.as_ref()),
                _ => None,
            })
    }

    /// Number of stateful operators.
    pub fn stateful_count(&self) -> usize {
        self.stateful().count()
    }

    /// Opens each stateful operator's stores with `open(operator id, store name)`
    /// (name "" for single-store operators, "left"/"right" for joins).
    pub fn open_state(
        &mut self,
        mut open: impl FnMut(usize, &str) -> Result<PartitionedStore>,
    ) -> Result<()> {
        for op in self.stateful_mut() {
            let stores = op
                .store_names()
                .iter()
                .map(|name| open(op.id(), name))
                .collect::<Result<Vec<_>>>()?;
            op.open_state(stores)?;
        }
        Ok(())
    }

    /// Runs one micro-batch over each source's rows.
    pub fn run(
        &mut self,
        sources: &[Vec<RecordBatch>],
        ctx: &mut BatchContext,
    ) -> Result<Vec<RecordBatch>> {
        self.run_prepared(sources, ctx, None)
    }

    /// The first stage of the pipeline's first stateful operator, for
    /// reading ahead ([`ahead`]), when it can prepare its input
    /// ([`StatefulOperator::preparer`]) and reads the source's rows as they
    /// come: one node, reading the one source, whose first operator after
    /// its narrow steps is stateful without a right side. Called once the
    /// state is open.
    pub fn preparer(&self) -> Option<Preparer> {
        let op = self.first_stateful()?;
        op.preparer(narrow::NarrowSteps::of(&self.nodes[0].ops))
    }

    /// The stateful operator that takes the source's rows after narrow
    /// steps only: with one node, reading the one source, whose first
    /// operator after its narrow steps is stateful, without a right side.
    fn first_stateful(&self) -> Option<&dyn StatefulOperator> {
        let [node] = self.nodes.as_slice() else {
            return None;
        };
        match (&node.input, node.ops.get(Narrow::count(&node.ops))) {
            (Input::Source(0), Some(OpExec::Stateful(op, None))) => Some(op.as_ref()),
            _ => None,
        }
    }

    /// Runs one micro-batch as [`Pipeline::run`] does, with the input of
    /// the first stateful operator `prepared` by [`Pipeline::preparer`]
    /// from `sources` (dropped if the pipeline has none).
    pub fn run_prepared(
        &mut self,
        sources: &[Vec<RecordBatch>],
        ctx: &mut BatchContext,
        prepared: Option<Prepared>,
    ) -> Result<Vec<RecordBatch>> {
        let mut prepared = prepared.filter(|_| self.first_stateful().is_some());
        ctx.event_time = vec![EventTimeStats::default(); self.watermark_delays.len()];
        let mut outputs: Vec<Option<Vec<RecordBatch>>> =
            (0..self.nodes.len()).map(|_| None).collect();
        let mode = self.mode;
        for ni in 0..self.nodes.len() {
            let mut batches: Vec<RecordBatch> = match &self.nodes[ni].input {
                Input::Source(i) => sources.get(*i).cloned().unwrap_or_default(),
                Input::Node(j) => outputs[*j].clone().unwrap_or_default(),
                Input::Static(b) => b.clone(),
            };
            let ops = &mut self.nodes[ni].ops;
            let mut at = 0;
            while at < ops.len() {
                // A run of narrow steps goes into the tasks of the stateful
                // operator after it, or else runs as one task per slice.
                let steps = Narrow::count(&ops[at..]);
                let (before, rest) = ops.split_at_mut(at + steps);
                let narrow = Narrow::of(&before[at..]);
                at += steps + 1;
                let Some(op) = rest.first_mut() else {
                    batches = narrow.run(batches, ctx)?;
                    break;
                };
                // A stateful operator takes the steps; before any other they run.
                if !matches!(op, OpExec::Stateful(..)) {
                    batches = narrow.run(batches, ctx)?;
                }
                batches = match op {
                    OpExec::Stateful(op, right) => {
                        let r = match right {
                            Some(k) => outputs[*k].clone().unwrap_or_default(),
                            None => vec![],
                        };
                        match prepared.take() {
                            Some(p) => op.process_prepared(&narrow, &batches, &r, ctx, mode, p)?,
                            None => op.process(&narrow, &batches, &r, ctx, mode)?,
                        }
                    }
                    // (Not met: `Narrow::count` takes a run whole.)
                    OpExec::Filter(_) | OpExec::Project(_) | OpExec::Watermark(_) => {
                        Narrow::of(std::slice::from_ref(op)).run(batches, ctx)?
                    }
                    OpExec::StaticJoin(j) => j.process(&batches, &[], ctx.watermarks)?,
                    OpExec::Sort(keys) => {
                        if batches.is_empty() {
                            batches
                        } else {
                            let all = concat_batches(&batches[0].schema(), &batches)?;
                            let cols: Vec<SortColumn> = keys
                                .iter()
                                .map(|(i, desc)| SortColumn {
                                    values: all.column(*i).clone(),
                                    options: Some(SortOptions {
                                        descending: *desc,
                                        nulls_first: !*desc,
                                    }),
                                })
                                .collect();
                            let idx = lexsort_to_indices(&cols, None)?;
                            vec![take_record_batch(&all, &idx)?]
                        }
                    }
                    OpExec::Limit(n) => {
                        let mut left = *n;
                        let mut out = Vec::new();
                        for b in batches {
                            if left == 0 {
                                break;
                            }
                            let k = left.min(b.num_rows());
                            out.push(b.slice(0, k));
                            left -= k;
                        }
                        out
                    }
                };
            }
            outputs[ni] = Some(batches);
        }
        Ok(outputs[self.result].take().unwrap_or_default())
    }

    /// True when some stateful operator has state partitions still to
    /// commit at `version` (not committed in their tasks): `commit_state`
    /// then runs tasks, so it is called on the worker pool.
    pub fn commit_pending(&mut self, version: u64) -> bool {
        self.stateful_mut().any(|op| op.commit_pending(version))
    }

    /// Commits every stateful operator's state as `version`.
    pub fn commit_state(&mut self, version: u64) -> Result<()> {
        for op in self.stateful_mut() {
            op.commit(version)?;
        }
        Ok(())
    }

    /// Undoes every stateful operator's uncommitted changes.
    pub fn abort_state(&mut self) -> Result<()> {
        for op in self.stateful_mut() {
            op.abort()?;
        }
        Ok(())
    }

    /// The schema of the rows stateful operators drop as late (one late
    /// sink takes one schema: an error when they drop rows of several, as a
    /// stream-stream join and an aggregation after it do).
    pub fn late_schema(&self) -> Result<SchemaRef> {
        let Some(first) = self.late_schemas.first() else {
            return Ok(Arc::new(arrow::datatypes::Schema::empty()));
        };
        if self
            .late_schemas
            .iter()
            .all(|s| s.fields() == first.fields())
        {
            return Ok(first.clone());
        }
        let shown: Vec<String> = self
            .late_schemas
            .iter()
            .map(|s| {
                let cols: Vec<&str> = s.fields().iter().map(|f| f.name().as_str()).collect();
                format!("({})", cols.join(", "))
            })
            .collect();
        Err(WeirError::Config(format!(
            "late rows of this query come in several schemas ({}), and one late-rows sink takes \
             rows of one schema (its stateful operators see different columns): late rows of \
             such a query cannot be sent aside yet",
            shown.join(", ")
        )))
    }

    /// Sets the number of state partitions (reported in metrics).
    pub fn set_partitions(&mut self, n: usize) {
        self.partitions = n;
    }

    /// State metrics, downstream operator first (the order Spark reports).
    pub fn state_metrics(&self) -> Vec<StateOperatorProgress> {
        let mut v: Vec<_> = self
            .stateful()
            .map(|op| {
                let mut m = op.metrics();
                m.num_shuffle_partitions = self.partitions as i64;
                m.num_state_store_instances = (self.partitions * op.store_names().len()) as i64;
                m
            })
            .collect();
        v.reverse();
        v
    }

    /// True when moving the watermark from `current` to `new_wm` makes a
    /// stateful operator evict or emit (Spark's `shouldRunAnotherBatch`).
    pub fn needs_no_data_batch(&self, current: Option<i64>, new_wm: i64) -> bool {
        let moved = current.is_none_or(|c| new_wm > c);
        moved && self.stateful().any(|op| op.needs_no_data_batch(self.mode))
    }
}

/// The aggregates of an `aggregate` op, bound to the input columns.
fn agg_execs(aggs: &[weir_plan::AggSpec], schema: &SchemaRef) -> Result<Vec<AggExec>> {
    aggs.iter()
        .map(|a| {
            let (input, input_type) = if a.column == "*" {
                (None, None)
            } else {
                let i = schema
                    .index_of(&a.column)
                    .map_err(|_| WeirError::Config(format!("unknown column `{}`", a.column)))?;
                (Some(i), Some(schema.field(i).data_type().clone()))
            };
            Ok(AggExec {
                func: a.func,
                input,
                input_type,
                name: a.alias.clone(),
            })
        })
        .collect()
}
