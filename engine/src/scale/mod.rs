//! Beyond one machine: one query over many processes, coordinated by Kafka
//! the way Kafka Streams is — no cluster manager of weir's own.
//!
//! Start the same query in several processes with the same group
//! ([`StreamWriter::scale_out`](crate::dataset::StreamWriter::scale_out))
//! and the same checkpoint location (an `s3://` prefix when the processes
//! run on several machines). The processes join a Kafka consumer group of
//! that name; the broker assigns the input topic's partitions among them
//! (cooperative-sticky). Each assigned partition is a *task*: an ordinary
//! micro-batch query reading only that partition, with its own offsets log,
//! commit log and state under `<checkpoint>/tasks/<topic>-<partition>/`, and
//! its own exactly-once sink (the Kafka sink's transactional id is the
//! task's). When a partition moves, its task stops in the old owner (the
//! running batch finishes first) and starts in the new one, which restores
//! its state from the checkpoint and resumes from its logged offsets; a
//! process killed outright loses its partitions at the group's session
//! timeout, and the new owner re-runs an uncommitted batch exactly as a
//! restarted query does (its Kafka transaction fences the dead owner's).
//!
//! The watermark is the whole source's (see `watermarks.rs`). A stateful
//! operator keyed by something other than the Kafka message key runs in a
//! second stage behind a repartition topic (see `stages.rs`).

mod group;
mod repartition;
mod stages;
mod watermarks;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_plan::StreamPlan;

use crate::checkpoint::Checkpoint;
use crate::error::{Result, WeirError};
use crate::progress::{QueryStatus, StreamingQueryProgress};
use crate::query::{QueryHost, QueryShared, QuerySpec, StreamingQuery, Trigger, SCALE_OUT_MARKER};
use crate::sink::BoxSink;
use crate::source::kafka::KafkaAdmin;
use crate::source::{BoxSource, SharedInput};
use crate::table::StaticTable;
use group::{GroupMember, Membership, Partition};
use watermarks::WatermarkHub;

pub use repartition::topic_name as repartition_topic;
pub use watermarks::topic_name as watermark_topic;

/// How a scale-out query runs in this process.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleOut {
    /// The consumer group (the same in every process of the query).
    pub group: String,
    /// Kafka's static membership (`group.instance.id`): a process restarted
    /// with the same id within the session timeout gets its partitions back
    /// without a rebalance. Unique per process.
    pub instance_id: Option<String>,
}

/// A task's name: its input partition.
fn task_name((topic, partition): &Partition) -> String {
    format!("{topic}-{partition}")
}

/// One stage's parts: each of its tasks is built from them.
struct Stage {
    plan: StreamPlan,
    /// Indexes into the template's sources and sinks.
    source: usize,
    sink: usize,
    late_sink: Option<usize>,
    mode: weir_plan::OutputMode,
    /// What the stage's tasks are.
    role: Role,
}

/// A stage's place in the query.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Role {
    /// The whole query, per input partition.
    Whole,
    /// The stateless part, per input partition, writing the repartition topic.
    First,
    /// The stateful part, per repartition partition.
    Second,
}

/// The parts every task is built from.
struct Template {
    host: Arc<QueryHost>,
    source_name: String,
    statics: BTreeMap<String, StaticTable>,
    trigger: Trigger,
    name: Option<String>,
    checkpoint: String,
    hub: Arc<WatermarkHub>,
    /// Per topic, the stage its partitions' tasks run.
    stages: BTreeMap<String, Stage>,
    sources: Vec<BoxSource>,
    sinks: Vec<BoxSink>,
    /// The input's partitions (the first stage's tasks).
    input_partitions: Vec<Partition>,
}

impl Template {
    /// The query of the task reading `partition`, to start
    /// ([`crate::query::start`]).
    fn spec(&self, partition: &Partition) -> Result<QuerySpec> {
        let task = task_name(partition);
        let stage = self.stages.get(&partition.0).ok_or_else(|| {
            WeirError::Config(format!(
                "the group assigned partition {task}, of a topic this query does not read; another query shares the consumer group: give each query its own group"
            ))
        })?;
        let upstream = match stage.role {
            Role::Second => self.input_partitions.clone(),
            Role::Whole | Role::First => vec![],
        };
        let marks = self.hub.for_task(partition.clone(), upstream);
        let mut source =
            self.sources[stage.source].for_partitions(std::slice::from_ref(partition))?;
        let mut sink = self.sinks[stage.sink].for_task(&task, stage.mode)?;
        match stage.role {
            Role::First => sink = Box::new(repartition::StampedSink::new(sink, marks.clone())),
            Role::Second => {
                source = Box::new(repartition::StampedSource::new(source, marks.clone()))
            }
            Role::Whole => {}
        }
        let mut sources = BTreeMap::new();
        sources.insert(self.source_name.clone(), source);
        let late_sink = match stage.late_sink {
            Some(l) => Some(self.sinks[l].for_task(&task, weir_plan::OutputMode::Append)?),
            None => None,
        };
        Ok(QuerySpec {
            host: self.host.clone(),
            plan: QuerySpec::running_plan(self.host.conf(), &stage.plan, stage.mode),
            sources,
            statics: self.statics.clone(),
            trigger: self.trigger,
            name: Some(format!(
                "{}[{task}]",
                self.name.as_deref().unwrap_or("scale-out")
            )),
            checkpoint: Some(format!(
                "{}/tasks/{task}",
                self.checkpoint.trim_end_matches('/')
            )),
            sink,
            late_sink,
            watermark_share: Some(marks),
        })
    }
}

/// How many tasks start at once (a large assignment starts in waves: each
/// start opens consumers and fences a transactional producer).
const STARTS_AT_ONCE: usize = 16;

/// Starts the tasks' queries at once, each on its own thread (in waves of
/// [`STARTS_AT_ONCE`]): starting one opens its source and sink (consumers,
/// a transactional producer's fencing), about 0.6 s against a local
/// broker, so the tasks of a new assignment started one after another kept
/// the last waiting for seconds. Every query that started is returned
/// beside the first error (a thread that cannot be created or a start that
/// panics is that partition's error).
fn start_all(
    mut specs: Vec<(Partition, QuerySpec)>,
) -> (Vec<(Partition, StreamingQuery)>, Option<WeirError>) {
    let mut results: Vec<(Partition, Result<StreamingQuery>)> = Vec::new();
    while !specs.is_empty() {
        let rest = specs.split_off(specs.len().min(STARTS_AT_ONCE));
        let wave = std::mem::replace(&mut specs, rest);
        std::thread::scope(|s| {
            let mut running = Vec::new();
            for (p, spec) in wave {
                let spawned = std::thread::Builder::new()
                    .name(format!("weir-start-{}", p.1))
                    .spawn_scoped(s, move || crate::query::start(spec));
                match spawned {
                    Ok(h) => running.push((p, h)),
                    Err(e) => {
                        let why = format!(
                            "scale-out: cannot start a thread for the task of partition {}: {e}",
                            task_name(&p)
                        );
                        results.push((p, Err(WeirError::Config(why))));
                    }
                }
            }
            for (p, h) in running {
                let r = h.join().unwrap_or_else(|panic| {
                    let why = crate::error::panic_message(panic.as_ref());
                    Err(WeirError::Config(format!(
                        "scale-out: starting the task of partition {} panicked: {why}",
                        task_name(&p)
                    )))
                });
                results.push((p, r));
            }
        });
    }
    let mut started = Vec::new();
    let mut error = None;
    for (p, r) in results {
        match r {
            Ok(q) => started.push((p, q)),
            Err(e) => {
                error.get_or_insert(e);
            }
        }
    }
    (started, error)
}

/// A running task.
struct Task {
    query: StreamingQuery,
    /// The last batch whose progress was forwarded.
    seen: i64,
    /// The next input offset after its last batch (committed to the group).
    position: Option<i64>,
}

/// The tasks this process owns, shared by the coordinator's loop and the
/// group's rebalance callbacks.
#[derive(Default)]
struct Tasks {
    running: Mutex<BTreeMap<Partition, Task>>,
    /// Assigned, not started yet (the loop starts them).
    to_start: Mutex<Vec<Partition>>,
    /// How many of the process's group members have had an assignment
    /// (until each has, the process cannot say it has processed what is
    /// available).
    assignments: std::sync::atomic::AtomicUsize,
}

impl Membership for Tasks {
    fn revoked(&self, partitions: &[Partition]) {
        let stopping: Vec<(Partition, Task)> = {
            let mut running = self.running.lock().unwrap();
            partitions
                .iter()
                .filter_map(|p| running.remove(p).map(|t| (p.clone(), t)))
                .collect()
        };
        self.to_start
            .lock()
            .unwrap()
            .retain(|p| !partitions.contains(p));
        // Every revoked task finishes its running batch at once: the
        // rebalance waits for the slowest, not for their sum.
        for (p, t) in &stopping {
            tracing::info!(
                "scale-out: partition {} revoked; stopping its task",
                task_name(p)
            );
            t.query.request_stop();
        }
        for (_, t) in stopping {
            t.query.stop_and_wait();
        }
    }

    fn assigned(&self, partitions: &[Partition]) {
        self.assignments.fetch_add(1, Ordering::SeqCst);
        self.to_start
            .lock()
            .unwrap()
            .extend(partitions.iter().cloned());
    }
}

/// Starts `spec` as this process's share of a scale-out query.
pub(crate) fn start(spec: QuerySpec, scale: ScaleOut) -> Result<StreamingQuery> {
    // What a scale-out query cannot divide (a join of two streams, a sort,
    // an ending trigger, a one-writer sink, no checkpoint) was refused by
    // the plan's rules in `StreamWriter::validate`.
    let QuerySpec {
        host,
        plan,
        sources,
        statics,
        trigger,
        name,
        checkpoint,
        sink,
        late_sink,
        watermark_share: _,
    } = spec;
    let checkpoint = checkpoint
        .ok_or_else(|| WeirError::Config("a scale-out query needs a checkpoint location".into()))?;
    let mode = plan.output_mode;
    let mut sources = sources.into_iter();
    let (Some((source_name, source)), None) = (sources.next(), sources.next()) else {
        return Err(WeirError::Config(
            "a scale-out query reads one Kafka source".into(),
        ));
    };
    let input = source.shared_input()?;
    let split = stages::split(&plan)?;
    // Every sink of the query must keep its promise per task: refused
    // before anything is written.
    sink.for_task("check", mode)?;
    if let Some(l) = &late_sink {
        l.for_task("check", weir_plan::OutputMode::Append)?;
    }
    // The query's id, shared by every process (the first creates it).
    // (`plan` is the running plan: the mode and the session's settings applied.)
    let conf = host.conf().clone();
    let chk = Checkpoint::open_location(&checkpoint, &conf.s3, conf.fsync_checkpoint)?;
    let meta = chk.load_or_init_metadata(&plan, conf.shuffle_partitions)?;
    // A scale-out checkpoint keeps its batches per task: one a single
    // process wrote would be started over (and its output written again).
    if let Some(b) = chk.offsets.latest()? {
        return Err(WeirError::checkpoint(
            chk.root(),
            format!("this checkpoint was written by the query running in one process (it has offsets/{b}); scale-out keeps its batches per task under tasks/ and would read the input again: use a new checkpoint location for the scale-out query"),
        ));
    }
    if chk
        .storage()
        .put_create(SCALE_OUT_MARKER, scale.group.as_bytes())?
        == crate::storage::Created::Exists
    {
        let owner = chk.storage().get(SCALE_OUT_MARKER)?.unwrap_or_default();
        let owner = String::from_utf8_lossy(&owner);
        if owner != scale.group {
            return Err(WeirError::checkpoint(
                chk.root(),
                format!("this checkpoint belongs to the scale-out query of consumer group `{owner}`, not `{}`: two groups would run the same tasks; start with .scale_out(\"{owner}\"), or use a new checkpoint location", scale.group),
            ));
        }
    }
    let hub = Arc::new(WatermarkHub::start(&input, &scale.group, &meta.id)?);
    let admin = KafkaAdmin::new(&input.bootstrap)?;
    let mut input_partitions = Vec::new();
    for t in &input.topics {
        for p in 0..admin.partitions(t)? {
            input_partitions.push((t.clone(), p as i32));
        }
    }
    // Sources and sinks by index: 0 the query's own.
    let mut sources = vec![source];
    let mut sinks = vec![sink];
    let late = late_sink.map(|l| {
        sinks.push(l);
        sinks.len() - 1
    });
    let mut stages = BTreeMap::new();
    let mut repartition_topic = None;
    match split {
        None => {
            for t in &input.topics {
                stages.insert(
                    t.clone(),
                    Stage {
                        plan: plan.clone(),
                        source: 0,
                        sink: 0,
                        late_sink: late,
                        mode,
                        role: Role::Whole,
                    },
                );
            }
        }
        Some(split) => {
            let rep = repartition::create(
                &admin,
                name.as_deref().unwrap_or(&scale.group),
                &meta.id,
                &split,
                conf.shuffle_partitions.unwrap_or(input_partitions.len()),
            )?;
            let first = stages::with_ops(&plan, split.first.clone());
            let fields = {
                let schema = sources[0].schema();
                let pipeline =
                    crate::ops::Pipeline::compile(&first, std::slice::from_ref(&schema), &statics)?;
                crate::row::plan_fields(&pipeline.schema())
            };
            sinks.push(repartition::sink(&input, &rep, &split));
            let first_sink = sinks.len() - 1;
            for t in &input.topics {
                stages.insert(
                    t.clone(),
                    Stage {
                        plan: first.clone(),
                        source: 0,
                        sink: first_sink,
                        late_sink: None,
                        mode: weir_plan::OutputMode::Append,
                        role: Role::First,
                    },
                );
            }
            let mut second = stages::with_ops(&plan, split.second.clone());
            if let Some(decl) = second.sources.get_mut(&source_name) {
                decl.schema = fields.clone();
            }
            sources.push(repartition::source(&input, &rep, fields));
            stages.insert(
                rep.clone(),
                Stage {
                    plan: second,
                    source: sources.len() - 1,
                    sink: 0,
                    late_sink: late,
                    mode,
                    role: Role::Second,
                },
            );
            repartition_topic = Some(rep);
        }
    }
    let subscription = input.clone();
    let template = Template {
        host: host.clone(),
        source_name,
        statics,
        trigger,
        name: name.clone(),
        checkpoint,
        hub: hub.clone(),
        stages,
        sources,
        sinks,
        input_partitions,
    };
    let tasks = Arc::new(Tasks::default());
    // One member per stage: the broker balances each topic's partitions on
    // its own (one group over both would balance their total, and could
    // give one process every first-stage task).
    let mut members = vec![GroupMember::join(
        &subscription,
        &scale.group,
        scale.instance_id.as_deref(),
        tasks.clone(),
    )?];
    if let Some(rep) = &repartition_topic {
        members.push(GroupMember::join(
            &SharedInput {
                topics: vec![rep.clone()],
                ..input.clone()
            },
            &format!("{}-repartition", scale.group),
            scale.instance_id.as_deref(),
            tasks.clone(),
        )?);
    }
    let explain = explain(
        &plan,
        &template.sources[0],
        &template.sinks[0],
        trigger,
        &scale.group,
        &input,
        &template.checkpoint,
    );
    let shared = Arc::new(
        QueryShared::new(
            meta.id.clone(),
            name.clone(),
            explain,
            mode,
            format!("Joining consumer group {}", scale.group),
        )
        .with_stop_timeout(conf.stop_timeout),
    );
    let coordinator = Coordinator {
        shared: shared.clone(),
        host: host.clone(),
        template,
        tasks,
        members,
        hub,
        last_commit: Mutex::new(None),
        started: Instant::now(),
        admin,
        purged: Mutex::new((BTreeMap::new(), Instant::now())),
    };
    let handle = std::thread::Builder::new()
        .name(format!("weir-scale-out-{}", scale.group))
        .spawn(move || coordinator.run())
        .map_err(|e| WeirError::Config(format!("cannot start the query thread: {e}")))?;
    shared.started(handle);
    let q = StreamingQuery { shared };
    host.register(q.clone());
    Ok(q)
}

/// The coordinator's `explain()`: the plan tree weir-plan prints (as
/// [`StreamingQuery::explain`] and `stream_query!`'s `EXPLAIN` do), its
/// sink, trigger and group filled in, then how the query is spread: the
/// group, the input, the source and sink, where the tasks keep their
/// checkpoints.
fn explain(
    plan: &StreamPlan,
    source: &BoxSource,
    sink: &BoxSink,
    trigger: Trigger,
    group: &str,
    input: &SharedInput,
    checkpoint: &str,
) -> String {
    let mut plan = plan.clone();
    plan.sink.get_or_insert(weir_plan::SinkDecl {
        kind: sink.kind(),
        checkpoint: true,
    });
    plan.trigger.get_or_insert(trigger.decl());
    plan.scale_out.get_or_insert_with(|| group.to_string());
    format!(
        "== Physical Plan ==\n{plan}\n== Scale-out query ==\nGroup: {group}\nInput: {} at {}\nSource: {}\nSink: {}\nTasks: one per input partition, under {}/tasks/\n",
        input.topics.join(", "),
        input.bootstrap,
        source.description(),
        sink.description(),
        checkpoint.trim_end_matches('/')
    )
}

/// The process's side of the query: keeps the group membership, starts and
/// stops tasks, forwards their progress and commits their offsets to the
/// group.
struct Coordinator {
    shared: Arc<QueryShared>,
    host: Arc<QueryHost>,
    template: Template,
    tasks: Arc<Tasks>,
    /// The process's members of the query's groups (one per stage).
    members: Vec<GroupMember>,
    hub: Arc<WatermarkHub>,
    /// When the tasks' positions were last committed to the group (`None`:
    /// commit at the loop's next turn, as after a task started).
    last_commit: Mutex<Option<Instant>>,
    /// When the process joined.
    started: Instant,
    /// Purges the repartition topic's consumed records.
    admin: KafkaAdmin,
    /// Per second-stage task, the offset its partition was last purged to,
    /// and when the purges last ran.
    purged: Mutex<(BTreeMap<Partition, i64>, Instant)>,
}

/// How often the repartition topic's consumed records are purged.
const PURGE: Duration = Duration::from_secs(30);

/// How long `process_all_available` waits for the group's first assignment.
const ASSIGNMENT_WAIT: Duration = Duration::from_secs(15);

/// How often the tasks' positions are committed to the group again (a
/// commit can fail during a rebalance).
const RECOMMIT: Duration = Duration::from_secs(2);

impl Coordinator {
    fn run(self) {
        let result = self.run_loop();
        // Leaving the group revokes (stops) every task.
        for m in &self.members {
            m.leave();
        }
        let left: Vec<Task> = std::mem::take(&mut *self.tasks.running.lock().unwrap())
            .into_values()
            .collect();
        for t in left {
            t.query.stop_and_wait();
        }
        self.hub.close();
        let error = match result {
            Ok(()) | Err(WeirError::Stopped) => None,
            Err(e) => {
                tracing::error!(query = %self.shared.id, "scale-out query failed: {e}");
                Some(Arc::new(e))
            }
        };
        {
            let mut st = self.shared.state.lock().unwrap();
            st.active = false;
            st.error = error;
            st.status = QueryStatus {
                message: "Stopped".into(),
                is_data_available: false,
                is_trigger_active: false,
            };
        }
        self.shared.cond.notify_all();
        self.host.notify_terminated();
    }

    fn run_loop(&self) -> Result<()> {
        while !self.shared.stop.load(Ordering::SeqCst) {
            for m in &self.members {
                m.poll(Duration::from_millis(100 / self.members.len() as u64));
            }
            let to_start: Vec<Partition> =
                std::mem::take(&mut *self.tasks.to_start.lock().unwrap());
            let mut specs = Vec::new();
            for p in to_start {
                // An assignment of a partition whose task runs here already
                // (not revoked in between) keeps that task: a second run of
                // it beside the first would share its checkpoint and
                // transactional id.
                if self.tasks.running.lock().unwrap().contains_key(&p)
                    || specs.iter().any(|(q, _)| *q == p)
                {
                    tracing::warn!(
                        "scale-out: partition {} assigned again while its task runs; keeping that task",
                        task_name(&p)
                    );
                    continue;
                }
                tracing::info!(
                    "scale-out: partition {} assigned; starting its task",
                    task_name(&p)
                );
                let spec = self.template.spec(&p)?;
                specs.push((p, spec));
            }
            let (started, error) = start_all(specs);
            if !started.is_empty() {
                // Their checkpoints' positions, committed at once.
                *self.last_commit.lock().unwrap() = None;
            }
            {
                let mut running = self.tasks.running.lock().unwrap();
                for (p, query) in started {
                    // Where its checkpoint's last batch ended: committed to
                    // the group with the next commit, new input or not.
                    let position = query
                        .shared
                        .resumed_from
                        .lock()
                        .unwrap()
                        .first()
                        .cloned()
                        .flatten()
                        .and_then(|o| offset_in(&o, &p));
                    running.insert(
                        p,
                        Task {
                            query,
                            seen: -1,
                            position,
                        },
                    );
                }
            }
            // The tasks that started run until `run` stops them with the rest.
            if let Some(e) = error {
                return Err(e);
            }
            self.follow_tasks()?;
            self.purge_repartition();
            self.serve_process_all_available()?;
        }
        Ok(())
    }

    /// Forwards new task progress, commits the tasks' offsets to the group,
    /// and fails when a task failed.
    fn follow_tasks(&self) -> Result<()> {
        let mut commits = Vec::new();
        let mut moved = false;
        let mut forwarded = Vec::new();
        let names: Vec<String>;
        {
            let mut running = self.tasks.running.lock().unwrap();
            for (p, t) in running.iter_mut() {
                if let Some(e) = t.query.exception() {
                    return Err(WeirError::Config(format!(
                        "task {} failed: {e}",
                        task_name(p)
                    )));
                }
                // Every loop turn: look at the newest batch before copying
                // the task's recent progress.
                let newest = t
                    .query
                    .shared
                    .state
                    .lock()
                    .unwrap()
                    .progress
                    .back()
                    .map(|p| p.batch_id);
                if newest.is_none_or(|b| b <= t.seen) {
                    continue;
                }
                for prog in t.query.recent_progress() {
                    if prog.batch_id > t.seen {
                        t.seen = prog.batch_id;
                        if let Some(o) = next_offset(&prog, p) {
                            moved |= t.position != Some(o);
                            t.position = Some(o);
                        }
                        forwarded.push(prog);
                    }
                }
            }
            names = running.keys().map(task_name).collect();
            let mut last = self.last_commit.lock().unwrap();
            if moved || last.is_none_or(|l| l.elapsed() >= RECOMMIT) {
                *last = Some(Instant::now());
                commits = running
                    .iter()
                    .filter_map(|(p, t)| t.position.map(|o| (p.clone(), o)))
                    .collect();
            }
        }
        for m in &self.members {
            m.commit(&commits);
        }
        let keep = self.host.conf().num_recent_progress_updates.max(1);
        let mut st = self.shared.state.lock().unwrap();
        for p in forwarded {
            st.progress.push_back(p);
        }
        while st.progress.len() > keep {
            st.progress.pop_front();
        }
        st.status = QueryStatus {
            message: if names.is_empty() {
                "Waiting for the group to assign partitions".into()
            } else {
                format!("Running tasks [{}]", names.join(", "))
            },
            is_data_available: false,
            is_trigger_active: !names.is_empty(),
        };
        Ok(())
    }

    /// Deletes the repartition records this process's second-stage tasks
    /// have committed (Kafka's DeleteRecords), every [`PURGE`].
    fn purge_repartition(&self) {
        let mut purged = self.purged.lock().unwrap();
        if purged.1.elapsed() < PURGE {
            return;
        }
        purged.1 = Instant::now();
        let positions: Vec<(Partition, i64)> = self
            .tasks
            .running
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| {
                self.template
                    .stages
                    .get(&p.0)
                    .is_some_and(|s| s.role == Role::Second)
            })
            .filter_map(|(p, t)| t.position.map(|o| (p.clone(), o)))
            .collect();
        for ((topic, p), o) in positions {
            if purged
                .0
                .get(&(topic.clone(), p))
                .is_some_and(|done| *done >= o)
            {
                continue;
            }
            match self.admin.delete_records_before(&topic, p, o) {
                Ok(()) => {
                    purged.0.insert((topic, p), o);
                }
                Err(e) => tracing::debug!("scale-out: purging {topic}-{p}: {e}"),
            }
        }
    }

    /// `process_all_available` on the query: every task of this process
    /// processes what is available.
    fn serve_process_all_available(&self) -> Result<()> {
        let epoch = self.shared.request_epoch.load(Ordering::SeqCst);
        // Until the group has assigned this process its share (or for at
        // most a session timeout, for a process the group gives nothing),
        // nothing it runs says the input is processed.
        let unassigned = self.tasks.assignments.load(Ordering::SeqCst) < self.members.len()
            && self.started.elapsed() < ASSIGNMENT_WAIT;
        if self.shared.state.lock().unwrap().idle_epoch >= epoch || unassigned {
            return Ok(());
        }
        let queries: Vec<StreamingQuery> = self
            .tasks
            .running
            .lock()
            .unwrap()
            .values()
            .map(|t| t.query.clone())
            .collect();
        for q in queries {
            match q.process_all_available() {
                Ok(()) | Err(WeirError::Stopped) => {}
                Err(e) => return Err(e),
            }
        }
        let mut st = self.shared.state.lock().unwrap();
        st.idle_epoch = st.idle_epoch.max(epoch);
        self.shared.cond.notify_all();
        Ok(())
    }
}

/// The next offset a task will read, from its progress (Spark's offsets
/// JSON, `{"topic": {"partition": offset}}`).
fn next_offset(p: &StreamingQueryProgress, partition: &Partition) -> Option<i64> {
    offset_in(p.sources.first()?.end_offset.as_ref()?, partition)
}

/// `partition`'s offset in a Kafka source's offset (`{topic: {partition: n}}`).
fn offset_in(offset: &crate::source::Offset, (topic, partition): &Partition) -> Option<i64> {
    offset.get(topic)?.get(partition.to_string())?.as_i64()
}

#[cfg(test)]
mod tests {
    use weir_plan::{DataType, Field, Op, OutputMode};

    use super::*;
    use crate::sink::MemorySink;
    use crate::source::MemoryStream;

    #[test]
    fn the_coordinators_explain_prints_the_plan_tree_then_how_the_query_is_spread() {
        let fields = [Field::new("n", DataType::Int64)];
        let plan = StreamPlan::single(
            "views",
            fields.to_vec(),
            vec![Op::Filter {
                predicate: "n > 0".into(),
            }],
            OutputMode::Update,
        );
        let source: BoxSource = MemoryStream::new(&fields).into();
        let sink: BoxSink = MemorySink::new("out").into();
        let input = SharedInput {
            bootstrap: "broker:9092".into(),
            topics: vec!["views".into()],
            kafka_conf: BTreeMap::new(),
            max_offsets_per_trigger: None,
        };
        let text = explain(
            &plan,
            &source,
            &sink,
            Trigger::AvailableNow,
            "views-group",
            &input,
            "s3://bucket/chk/",
        );
        // The same tree the plan prints (EXPLAIN's), its declarations filled in.
        let mut tree = plan.clone();
        tree.sink = Some(weir_plan::SinkDecl {
            kind: weir_plan::SinkKind::Memory,
            checkpoint: true,
        });
        tree.trigger = Some(weir_plan::TriggerDecl::AvailableNow);
        tree.scale_out = Some("views-group".into());
        let tree = tree.to_string();
        assert!(
            text.starts_with(&format!(
                "== Physical Plan ==\n{tree}\n== Scale-out query ==\n"
            )),
            "{text}"
        );
        assert!(tree.contains("scaleOut=views-group"), "{tree}");
        assert!(tree.contains("Filter n > 0"), "{tree}");
        assert!(text.contains("\nGroup: views-group\n"), "{text}");
        assert!(text.contains("\nInput: views at broker:9092\n"), "{text}");
        assert!(text.contains("under s3://bucket/chk/tasks/\n"), "{text}");
    }
}
