//! The physical pipeline: a [`weir_plan::StreamPlan`] compiled once per query
//! into operators over Arrow batches, run once per micro-batch.

pub mod aggregate;
pub mod functions;
pub mod stateless;
pub mod watermark;
pub mod window;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{
    concat_batches, lexsort_to_indices, take_record_batch, SortColumn, SortOptions,
};
use arrow::datatypes::SchemaRef;
use weir_plan::{parse_duration_ms, GroupKey, Op, OutputMode, StreamPlan};

use crate::error::{Result, WeirError};
use crate::progress::StateOperatorProgress;
use crate::state::StateStore;

use aggregate::{AggExec, AggregateOp, KeyExec, Watermarks};
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
    /// Stateful aggregation.
    Aggregate(Box<AggregateOp>),
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
}

/// A compiled query.
pub struct Pipeline {
    nodes: Vec<NodeExec>,
    result: usize,
    schema: SchemaRef,
    mode: OutputMode,
    /// Delay (ms) of each watermark operator, by id.
    pub watermark_delays: Vec<i64>,
}

/// Compile-time bookkeeping of one node's output.
#[derive(Clone)]
struct NodeInfo {
    schema: SchemaRef,
    watermarked: HashSet<String>,
}

impl Pipeline {
    /// Compiles `plan` for sources with `source_schemas` (in `plan.sources` order)
    /// and static tables.
    pub fn compile(
        plan: &StreamPlan,
        source_schemas: &[SchemaRef],
        statics: &BTreeMap<String, Vec<RecordBatch>>,
    ) -> Result<Pipeline> {
        let planner = ExprPlanner::new();
        let source_names: Vec<&String> = plan.sources.keys().collect();
        let mut infos: Vec<NodeInfo> = Vec::new();
        let mut nodes = Vec::new();
        let mut delays = Vec::new();
        let mut stateful = 0usize;
        for node in &plan.nodes {
            let (input, mut info) =
                if let Some(i) = source_names.iter().position(|n| **n == node.input) {
                    (
                        Input::Source(i),
                        NodeInfo {
                            schema: source_schemas[i].clone(),
                            watermarked: HashSet::new(),
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
                } else if let Some(rows) = statics.get(&node.input) {
                    let schema = rows.first().map(|b| b.schema()).unwrap_or_else(|| {
                        plan.statics
                            .get(&node.input)
                            .map(|s| crate::row::arrow_schema(&s.schema))
                            .unwrap_or_else(|| Arc::new(arrow::datatypes::Schema::empty()))
                    });
                    (
                        Input::Static(rows.clone()),
                        NodeInfo {
                            schema,
                            watermarked: HashSet::new(),
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
                        let items: Vec<(String, String)> = columns
                            .iter()
                            .map(|c| (c.expr.clone(), c.alias.clone()))
                            .collect();
                        let p = ProjectOp::select(&planner, &items, schema.clone())?;
                        let mut wm = HashSet::new();
                        for c in columns {
                            if info.watermarked.contains(c.expr.trim()) {
                                wm.insert(c.alias.clone());
                            }
                        }
                        info = NodeInfo {
                            schema: p.schema(),
                            watermarked: wm,
                        };
                        ops.push(OpExec::Project(p));
                    }
                    Op::WithColumn { name, expr } => {
                        let p = ProjectOp::with_column(&planner, name, expr, schema.clone())?;
                        if info.watermarked.contains(expr.trim()) {
                            info.watermarked.insert(name.clone());
                        } else {
                            info.watermarked.remove(name);
                        }
                        info.schema = p.schema();
                        ops.push(OpExec::Project(p));
                    }
                    Op::Watermark { column, delay } => {
                        let d = parse_duration_ms(delay).map_err(|e| {
                            WeirError::Config(format!("watermark delay \"{delay}\": {e}"))
                        })?;
                        let w = WatermarkOp::new(delays.len(), idx(column)?, d);
                        delays.push(d);
                        info.watermarked.insert(column.clone());
                        ops.push(OpExec::Watermark(w));
                    }
                    Op::Aggregate { keys, aggs } => {
                        let mut kx = Vec::new();
                        let mut out_wm = HashSet::new();
                        let mut windows = 0;
                        for k in keys {
                            match k {
                                GroupKey::Column { column } => {
                                    let wm = info.watermarked.contains(column);
                                    if wm {
                                        out_wm.insert(column.clone());
                                    }
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
                                    let size = weir_plan::duration::parse_positive_duration_ms(
                                        &window.size,
                                    )
                                    .map_err(|e| {
                                        WeirError::Config(format!(
                                            "window size \"{}\": {e}",
                                            window.size
                                        ))
                                    })?;
                                    let slide = match &window.slide {
                                        Some(s) => {
                                            weir_plan::duration::parse_positive_duration_ms(s)
                                                .map_err(|e| {
                                                    WeirError::Config(format!(
                                                        "window slide \"{s}\": {e}"
                                                    ))
                                                })?
                                        }
                                        None => size,
                                    };
                                    let wm = info.watermarked.contains(&tc);
                                    if wm {
                                        out_wm.insert(alias.clone());
                                    }
                                    kx.push(KeyExec::Window {
                                        assigner: WindowAssigner {
                                            source,
                                            size_us: size * 1000,
                                            slide_us: slide * 1000,
                                        },
                                        name: alias.clone(),
                                        watermarked: wm,
                                    });
                                }
                            }
                        }
                        if windows > 1 {
                            return Err(WeirError::Config("Multiple time window expressions would result in a cartesian product of rows, therefore they are currently not supported.".into()));
                        }
                        let mut ax = Vec::new();
                        for a in aggs {
                            let (input, input_type) = if a.column == "*" {
                                (None, None)
                            } else {
                                let i = idx(&a.column)?;
                                (Some(i), Some(schema.field(i).data_type().clone()))
                            };
                            ax.push(AggExec {
                                func: a.func,
                                input,
                                input_type,
                                name: a.alias.clone(),
                            });
                        }
                        let agg = AggregateOp::new(stateful, kx, ax, &schema)?;
                        stateful += 1;
                        info = NodeInfo {
                            schema: agg.schema(),
                            watermarked: out_wm,
                        };
                        ops.push(OpExec::Aggregate(Box::new(agg)));
                    }
                    Op::Sort { by } => {
                        let keys = by
                            .iter()
                            .map(|k| Ok((idx(&k.column)?, k.desc)))
                            .collect::<Result<Vec<_>>>()?;
                        ops.push(OpExec::Sort(keys));
                    }
                    Op::Limit { n } => {
                        if plan.output_mode != OutputMode::Complete {
                            return Err(WeirError::Config("limit is supported in complete output mode only (a streaming limit in append mode is not implemented yet)".into()));
                        }
                        ops.push(OpExec::Limit(*n as usize));
                    }
                    Op::Dedup { .. } | Op::Join { .. } => {
                        return Err(WeirError::Config(format!(
                            "the `{}` operation is not implemented yet in this version of weir",
                            op.name()
                        )));
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

    fn aggregates_mut(&mut self) -> impl Iterator<Item = &mut AggregateOp> {
        self.nodes
            .iter_mut()
            .flat_map(|n| n.ops.iter_mut())
            .filter_map(|o| match o {
                OpExec::Aggregate(a) => Some(a.as_mut()),
                _ => None,
            })
    }

    fn aggregates(&self) -> impl Iterator<Item = &AggregateOp> {
        self.nodes
            .iter()
            .flat_map(|n| n.ops.iter())
            .filter_map(|o| match o {
                OpExec::Aggregate(a) => Some(a.as_ref()),
                _ => None,
            })
    }

    /// Number of stateful operators.
    pub fn stateful_count(&self) -> usize {
        self.aggregates().count()
    }

    /// Opens each stateful operator's store with `open(operator id)`.
    pub fn open_state(
        &mut self,
        mut open: impl FnMut(usize) -> Result<Box<dyn StateStore>>,
    ) -> Result<()> {
        for a in self.aggregates_mut() {
            let s = open(a.id)?;
            a.set_store(s);
        }
        Ok(())
    }

    /// Runs one micro-batch over each source's rows.
    pub fn run(
        &mut self,
        sources: &[Vec<RecordBatch>],
        ctx: &mut BatchContext,
    ) -> Result<Vec<RecordBatch>> {
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
            for op in self.nodes[ni].ops.iter_mut() {
                batches = match op {
                    OpExec::Filter(f) => batches
                        .iter()
                        .map(|b| f.apply(b))
                        .filter(|b| !matches!(b, Ok(b) if b.num_rows() == 0))
                        .collect::<Result<_>>()?,
                    OpExec::Project(p) => {
                        batches.iter().map(|b| p.apply(b)).collect::<Result<_>>()?
                    }
                    OpExec::Watermark(w) => {
                        for b in &batches {
                            w.observe(b, &mut ctx.event_time[w.id])?;
                        }
                        batches
                    }
                    OpExec::Aggregate(a) => {
                        a.process(&batches, ctx.watermarks, mode, ctx.no_data)?
                    }
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

    /// Commits every stateful operator's state as `version`.
    pub fn commit_state(&mut self, version: u64) -> Result<()> {
        for a in self.aggregates_mut() {
            a.commit(version)?;
        }
        Ok(())
    }

    /// Undoes every stateful operator's uncommitted changes.
    pub fn abort_state(&mut self) {
        for a in self.aggregates_mut() {
            a.abort();
        }
    }

    /// State metrics, downstream operator first (the order Spark reports).
    pub fn state_metrics(&self) -> Vec<StateOperatorProgress> {
        let mut v: Vec<_> = self.aggregates().map(|a| a.metrics()).collect();
        v.reverse();
        v
    }

    /// True when moving the watermark from `current` to `new_wm` makes a
    /// stateful operator evict or emit (a no-data batch is then due).
    pub fn needs_no_data_batch(&self, current: Option<i64>, new_wm: i64) -> bool {
        self.aggregates()
            .any(|a| a.needs_no_data_batch(self.mode, current, new_wm))
    }
}
