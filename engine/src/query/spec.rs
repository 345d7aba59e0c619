//! [`QuerySpec`]: everything the executor needs to start a query, built by
//! the user-facing builder (`StreamWriter::start`) so that the executor
//! never sees the builder.

use std::collections::BTreeMap;
use std::sync::Arc;

use weir_plan::StreamPlan;

use super::{QueryHost, Trigger, WatermarkShare};
use crate::config::SessionConfig;
use crate::sink::BoxSink;
use crate::source::BoxSource;
use crate::table::StaticTable;

/// A query ready to start: its plan with the writer's settings applied, its
/// sources, sinks and where it keeps its checkpoint.
pub(crate) struct QuerySpec {
    /// What the query runs on and reports to: its session's settings,
    /// worker pool, memory tables, listeners and registry of queries.
    pub(crate) host: Arc<QueryHost>,
    /// The plan as it runs: the writer's output mode and the session's
    /// no-data-batch and watermark settings applied.
    pub(crate) plan: StreamPlan,
    /// The streaming sources by their plan name.
    pub(crate) sources: BTreeMap<String, BoxSource>,
    /// The static tables streams join with, by their plan name.
    pub(crate) statics: BTreeMap<String, StaticTable>,
    /// When batches run.
    pub(crate) trigger: Trigger,
    /// The query's name.
    pub(crate) name: Option<String>,
    /// The checkpoint location (a path or URL); `None`: a temporary one,
    /// which only the console, memory and noop sinks accept.
    pub(crate) checkpoint: Option<String>,
    /// Where the result rows go.
    pub(crate) sink: BoxSink,
    /// Where rows dropped as late go, if anywhere.
    pub(crate) late_sink: Option<BoxSink>,
    /// Scale-out: how this task learns the other tasks' watermarks (`None`:
    /// an ordinary query, one of the session's).
    pub(crate) watermark_share: Option<Arc<dyn WatermarkShare>>,
}

impl QuerySpec {
    /// The plan `plan` as a query of a session with settings `conf` runs it
    /// in `mode`: the session's no-data-batch and watermark settings applied.
    pub(crate) fn running_plan(
        conf: &SessionConfig,
        plan: &StreamPlan,
        mode: weir_plan::OutputMode,
    ) -> StreamPlan {
        let mut plan = plan.clone();
        plan.output_mode = mode;
        plan.conf.no_data_batches = conf.no_data_batches;
        plan.conf.watermark_policy = conf.watermark_policy;
        plan
    }
}
