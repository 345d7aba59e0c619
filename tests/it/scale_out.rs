//! One query over many processes, coordinated by a Kafka consumer group
//! (#14): the same query started in several processes with one group and
//! one S3 checkpoint divides the input partitions among them, survives the
//! loss of a process and counts every event once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use weir::functions::{col, count_star, window};
use weir::plan::{DataType, Field, OutputMode};
use weir::sink::{FileFormat, FileSink, KafkaSink};
use weir::source::kafka::rdkafka;
use weir::source::{DecodeExt, KafkaSource, StartingOffsets};
use weir::{Session, SessionConfig, StreamingQuery};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::common::TestChild;
use crate::kafka::{bootstrap, new_topic, read_topic};

/// Event times start here (2026-01-01T00:00:00Z), 5 s apart.
const T0: i64 = 1_767_225_600_000;
const PAGES: usize = 12;

fn click_fields() -> Vec<Field> {
    vec![
        Field::new("page", DataType::String),
        Field::new("event_ts", DataType::Timestamp),
    ]
}

/// Clicks `from..to`, 5 s apart, on pages `p0`..`p11` in turn, each keyed
/// by its page (so one page's clicks are in one partition), or by the
/// click's number (a page's clicks in every partition).
fn produce_clicks(topic: &str, from: usize, to: usize, by: Keyed) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "5")
        .create()
        .unwrap();
    for i in from..to {
        let page = format!("p{}", i % PAGES);
        let ts = chrono::DateTime::from_timestamp_millis(T0 + i as i64 * 5_000)
            .unwrap()
            .format("%Y-%m-%dT%H:%M:%S%.3fZ");
        let value = format!(r#"{{"page":"{page}","event_ts":"{ts}"}}"#);
        let key = match by {
            Keyed::ByPage => page.clone(),
            Keyed::ByClick => i.to_string(),
        };
        loop {
            match p.send(BaseRecord::to(topic).key(&key).payload(&value)) {
                Ok(()) => break,
                Err((_, _)) => {
                    p.poll(Duration::from_millis(10));
                }
            }
        }
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(30)).unwrap();
}

/// Clicks per step of [`produce_clicks_in_steps`]: 5 minutes of event time,
/// a quarter of the watermark's delay keyed by page.
const STEP: usize = 60;

/// Produces clicks `from..to` a step of [`STEP`] at a time, 250 ms apart,
/// when keyed by page (at once when keyed by click). The watermark is
/// global, as in one query reading every partition, but each partition's
/// task plans its batches on its own: with a whole round (50 minutes of
/// event time) produced at once, a task that planned before its rows came
/// read them after another task had read the round's last rows, and they
/// were late (CI lost p4, p5 and p7's windows 00:50-01:18 so), which the
/// reference, one run over the finished input, never sees. In steps, a
/// task would have to fall four steps (a second) behind another for that.
fn produce_clicks_in_steps(topic: &str, from: usize, to: usize, by: Keyed) {
    if by == Keyed::ByClick {
        return produce_clicks(topic, from, to, by);
    }
    for step in (from..to).step_by(STEP) {
        if step > from {
            std::thread::sleep(Duration::from_millis(250));
        }
        produce_clicks(topic, step, (step + STEP).min(to), by);
    }
}

/// The S3 settings, as session settings. In a child process (one of the
/// group), every batch's progress is printed, one JSON line each (its
/// task, offsets, watermark and rows dropped as late), to the log the test
/// shows when it fails.
fn session() -> Session {
    let mut conf = SessionConfig {
        s3: crate::s3::settings(),
        ..SessionConfig::default()
    };
    conf.set("spark.sql.shuffle.partitions", "2").unwrap();
    let s = Session::with_config(conf);
    if std::env::var_os("WEIR_SCALE_CHILD").is_some() {
        s.add_listener(std::sync::Arc::new(PrintProgress));
    }
    s
}

/// Prints each batch's progress on stdout (a child's log).
struct PrintProgress;

impl weir::QueryListener for PrintProgress {
    fn on_query_progress(&self, p: &weir::StreamingQueryProgress) {
        println!("{}", serde_json::to_string(p).unwrap_or_default());
    }
}

/// The children's log files, shown (their last lines) when the test fails.
struct ChildLogs {
    dir: tempfile::TempDir,
    names: Vec<String>,
}

impl ChildLogs {
    fn new() -> ChildLogs {
        ChildLogs {
            dir: tempfile::tempdir().unwrap(),
            names: Vec::new(),
        }
    }

    /// A new log file for the child `name`.
    fn file(&mut self, name: &str) -> std::path::PathBuf {
        self.names.push(name.to_string());
        self.dir.path().join(format!("{name}.log"))
    }
}

impl Drop for ChildLogs {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        for name in &self.names {
            let text = std::fs::read(self.dir.path().join(format!("{name}.log")))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_else(|e| format!("(no log: {e})"));
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(300)..];
            eprintln!(
                "---- process {name}: last {} of {} log lines\n{}",
                tail.len(),
                lines.len(),
                tail.join("\n")
            );
        }
    }
}

/// How the input's messages are keyed.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Keyed {
    /// By page: the query groups by the message key (no repartition).
    ByPage,
    /// By click: the query groups by `page` (through a repartition topic).
    ByClick,
}

/// The seed's page views (1-minute windows, append mode) to Kafka exactly
/// once, grouped by the message key (the page) or by the `page` column;
/// scale-out when `group` is given.
fn page_views(
    input: &str,
    output: &str,
    chk: &str,
    group: Option<&str>,
    by: Keyed,
) -> StreamingQuery {
    let w = page_views_writer(input, output, chk, by);
    match group {
        Some(g) => w.scale_out(g).start().unwrap(),
        None => w.start().unwrap(),
    }
}

/// [`page_views`], not started.
fn page_views_writer(input: &str, output: &str, chk: &str, by: Keyed) -> weir::StreamWriter {
    let page = match by {
        Keyed::ByPage => "key",
        Keyed::ByClick => "page",
    };
    // Keyed by page, longer than any arrival skew between partitions within
    // a few production steps (`produce_clicks_in_steps`): rows reaching the
    // broker after the other partitions' later rows are late by Spark's
    // rules (as in one query reading every partition), which the
    // reference, one run over the finished input, never sees. Keyed by click, the children run the
    // declared query (`ui-tests/pass/page_views_scaled.rs`), whose delay
    // this must equal.
    let delay = match by {
        Keyed::ByPage => "20 minutes",
        Keyed::ByClick => "2 minutes",
    };
    session()
        .read_stream(
            KafkaSource::new(&bootstrap())
                .subscribe(input)
                .starting_offsets(StartingOffsets::Earliest)
                .from_json("value", click_fields())
                .keep(&["key"]),
        )
        .with_watermark("event_ts", delay)
        .filter("page <> ''")
        .group_by(vec![window("event_ts", "1 minute"), col(page)])
        .agg(vec![count_star("views")])
        .write_stream()
        .output_mode(OutputMode::Append)
        .checkpoint_location(chk)
        .sink(
            KafkaSink::new(&bootstrap())
                .topic(output)
                .json_values()
                .key_columns(&[page]),
        )
}

/// (window start, page) -> every count written for it (append mode: one).
fn windows(topic: &str) -> BTreeMap<(String, String), Vec<i64>> {
    let mut m: BTreeMap<(String, String), Vec<i64>> = BTreeMap::new();
    for (key, value) in read_topic(topic, "read_committed") {
        let v: serde_json::Value = serde_json::from_str(&value).unwrap();
        let start = v["window"]["start"].as_str().unwrap().to_string();
        m.entry((start, key.unwrap_or_default()))
            .or_default()
            .push(v["views"].as_i64().unwrap());
    }
    m
}

/// Run as a child process by the tests below: one process of the group.
#[test]
fn child_scale_out_process() {
    let Ok(spec) = std::env::var("WEIR_SCALE_CHILD") else {
        return;
    };
    let [input, output, chk, group, by]: [&str; 5] = spec
        .split('|')
        .collect::<Vec<_>>()
        .try_into()
        .expect("input|output|checkpoint|group|keyed");
    let by = if by == "page" {
        Keyed::ByPage
    } else {
        Keyed::ByClick
    };
    // Grouped by page: the query declared with `stream_query!` (its
    // `scale_out:` key), on this test's topics, checkpoint and group.
    let q = match by {
        Keyed::ByPage => page_views(input, output, chk, Some(group), by),
        Keyed::ByClick => crate::pass_page_views_scaled::writer_in(
            &session(),
            &bootstrap(),
            input,
            output,
            chk,
            group,
        )
        .and_then(|w| w.start())
        .unwrap(),
    };
    // Runs until the test kills it (a failure ends the process with it),
    // noting the tasks it runs in WEIR_SCALE_STATUS's file.
    let status = std::env::var("WEIR_SCALE_STATUS").ok();
    let end = Instant::now() + Duration::from_secs(600);
    while Instant::now() < end {
        match q.await_termination(Some(Duration::from_millis(200))) {
            Ok(false) => {}
            Ok(true) => return,
            Err(e) => panic!("scale-out process failed: {e}"),
        }
        let message = q.status().message;
        if let (Some(path), true) = (&status, message.starts_with("Running tasks")) {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            writeln!(f, "{message}").unwrap();
        }
    }
}

/// One process of the group, its output in `log`; `extra`: more
/// environment (a failpoint, the status file).
fn spawn(
    input: &str,
    output: &str,
    chk: &str,
    group: &str,
    by: Keyed,
    extra: &[(&str, String)],
    log: &std::path::Path,
) -> TestChild {
    let by = if by == Keyed::ByPage { "page" } else { "click" };
    let mut env = vec![(
        "WEIR_SCALE_CHILD",
        format!("{input}|{output}|{chk}|{group}|{by}"),
    )];
    env.extend(extra.iter().cloned());
    TestChild::of_test_logged("scale_out::child_scale_out_process", &env, log)
}

/// Waits until `topic` holds `want` exactly (and fails with the difference
/// after `limit`), checking that no window is ever written twice.
fn await_windows(topic: &str, want: &BTreeMap<(String, String), Vec<i64>>, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let got = windows(topic);
        for (k, v) in &got {
            assert_eq!(v.len(), 1, "window {k:?} written more than once: {v:?}");
        }
        if &got == want {
            return;
        }
        if Instant::now() > deadline {
            let missing: Vec<_> = want.keys().filter(|k| !got.contains_key(*k)).collect();
            let extra: Vec<_> = got.keys().filter(|k| !want.contains_key(*k)).collect();
            let wrong: Vec<_> = want
                .iter()
                .filter_map(|(k, v)| got.get(k).filter(|g| *g != v).map(|g| (k, v, g)))
                .collect();
            panic!(
                "after {limit:?}: {} windows of {}; missing {missing:?}; unexpected {extra:?}; wrong counts (want, got) {wrong:?}",
                got.len(),
                want.len()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits (30 s at most) until `group` has committed `ends` for `input`'s
/// partitions: what lag monitoring reads.
fn await_group_committed(group: &str, input: &str, ends: &BTreeMap<i32, i64>) {
    let admin = crate::kafka::admin();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed = admin.committed_offsets(group, input).unwrap();
        if committed == *ends {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} committed {committed:?}, its tasks ended at {ends:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Three processes of one group over a 6-partition topic, one joining
/// late and one killed -9 mid-run: the output equals one process's run
/// over the same input, each window once.
fn three_processes_one_joining_late_one_killed(by: Keyed) {
    let input = new_topic("scale-clicks", 6);
    let out_scaled = new_topic("scale-views", 1);
    let out_single = new_topic("scale-views-single", 1);
    let bucket = crate::s3::new_bucket();
    let chk = format!("s3://{bucket}/page-views");
    let group = format!("weir-it-scale-{}", crate::s3::unique());
    // Declared before the children: dropped after them (killed), it shows
    // their logs when an assertion fails.
    let mut logs = ChildLogs::new();

    produce_clicks(&input, 0, 600, by);
    // Process A kills itself (SIGKILL) in the middle of its second Kafka
    // transaction (any task's): the rows sent, not committed (with a
    // repartition, the first stage's writes come first).
    let mut a = spawn(
        &input,
        &out_scaled,
        &chk,
        &group,
        by,
        &[("WEIR_FAILPOINT", "kafka_after_send:*:2".into())],
        &logs.file("A"),
    );
    let mut b = spawn(&input, &out_scaled, &chk, &group, by, &[], &logs.file("B"));
    // Wait for output (A may have killed itself already).
    let deadline = Instant::now() + Duration::from_secs(90);
    while windows(&out_scaled).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no output from the first two processes"
        );
        assert!(
            b.child_mut().try_wait().unwrap().is_none(),
            "process B ended"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // A third process joins: partitions move to it.
    let status = tempfile::tempdir().unwrap();
    let c_status = status.path().join("c");
    let mut c = spawn(
        &input,
        &out_scaled,
        &chk,
        &group,
        by,
        &[("WEIR_SCALE_STATUS", c_status.display().to_string())],
        &logs.file("C"),
    );
    // More input: A dies in its second batch; its partitions move after
    // the group's session timeout, their state restored from S3.
    produce_clicks_in_steps(&input, 600, 1200, by);
    std::thread::sleep(Duration::from_secs(4));
    produce_clicks_in_steps(&input, 1200, 2000, by);

    // The reference: one process over the same input.
    let single = page_views(
        &input,
        &out_single,
        &format!("s3://{bucket}/single"),
        None,
        by,
    );
    single.process_all_available().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    single.process_all_available().unwrap();
    single.stop().unwrap();
    let want = windows(&out_single);
    assert!(
        want.len() > 100,
        "the reference emitted {} windows",
        want.len()
    );
    let total: i64 = want.values().flatten().sum();
    assert!(total > 1500, "the reference counted {total} clicks");

    await_windows(&out_scaled, &want, Duration::from_secs(120));
    assert!(
        b.child_mut().try_wait().unwrap().is_none() && c.child_mut().try_wait().unwrap().is_none(),
        "the surviving processes kept running"
    );
    {
        use std::os::unix::process::ExitStatusExt;
        let a_end = a.wait_within(Duration::from_secs(5), "process A");
        assert_eq!(
            a_end.signal(),
            Some(9),
            "A killed itself at its failpoint: {a_end:?}"
        );
    }
    let c_ran = std::fs::read_to_string(&c_status).unwrap_or_default();
    assert!(
        c_ran.lines().any(|l| l.starts_with("Running tasks [")),
        "the process that joined late ran no task"
    );
    // Each task's progress is committed to the group: standard Kafka
    // tooling shows the lag (none, once everything is processed).
    let admin = crate::kafka::admin();
    let ends: BTreeMap<i32, i64> = (0..6)
        .map(|p| (p, admin.watermarks(&input, p).unwrap().1))
        .collect();
    await_group_committed(&group, &input, &ends);
    // Behind a repartition topic: the rows the second stage has committed
    // are purged (the topic keeps rows until read, with no time limit).
    if by == Keyed::ByClick {
        let rep = repartition_topic_of(&chk, "page_views_scaled");
        let deadline = Instant::now() + Duration::from_secs(60);
        // (spark.sql.shuffle.partitions partitions)
        let n = admin.partitions(&rep).unwrap() as i32;
        while (0..n).all(|p| admin.watermarks(&rep, p).unwrap().0 == 0) {
            assert!(Instant::now() < deadline, "{rep}: nothing purged");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    // The scale-out checkpoint cannot be run by one process (its batches
    // are per task), nor a one-process checkpoint scaled out.
    let e = page_views_writer(&input, &out_single, &chk, by)
        .start()
        .map(|q| q.stop())
        .expect_err("one process on a scale-out checkpoint")
        .to_string();
    assert!(
        e.contains("belongs to a query running over many processes"),
        "{e}"
    );
    let e = page_views_writer(&input, &out_single, &format!("s3://{bucket}/single"), by)
        .scale_out(&group)
        .start()
        .map(|q| q.stop())
        .expect_err("scale-out on a one-process checkpoint")
        .to_string();
    assert!(
        e.contains("written by the query running in one process"),
        "{e}"
    );
    // Every input partition had a task, its checkpoint on S3.
    for p in 0..6 {
        let task = format!("{chk}/tasks/{input}-{p}");
        let files = weir::storage::Storage::open(&task, &crate::s3::settings(), false)
            .unwrap()
            .list("")
            .unwrap();
        assert!(files.contains(&"metadata".to_string()), "{task}: {files:?}");
    }
}

#[test]
fn keyed_by_the_message_key_three_processes_count_each_click_once() {
    three_processes_one_joining_late_one_killed(Keyed::ByPage);
}

#[test]
fn keyed_by_another_column_through_a_repartition_topic_count_each_click_once() {
    three_processes_one_joining_late_one_killed(Keyed::ByClick);
}

/// A task that resumes from its checkpoint commits where that checkpoint
/// ended to the group at once, new input or not: lag monitoring
/// (`kafka-consumer-groups.sh --describe`) shows none for what earlier
/// runs processed, even when their own last commit to the group never
/// came (a process killed or its partitions revoked right after a batch,
/// or the group's offsets expired while the query was stopped).
#[test]
fn a_resumed_task_commits_its_checkpoints_position_to_the_group_without_new_input() {
    resumed_tasks_commit_their_positions(Keyed::ByPage);
}

/// The same behind a repartition topic: the first stage's tasks read the
/// input partitions and commit their positions to the query's group, the
/// second stage's read the repartition topic and commit theirs to
/// `<group>-repartition`.
#[test]
fn behind_a_repartition_topic_resumed_tasks_of_both_stages_commit_their_positions_without_new_input(
) {
    resumed_tasks_commit_their_positions(Keyed::ByClick);
}

fn resumed_tasks_commit_their_positions(by: Keyed) {
    let input = new_topic("scale-resume", 2);
    let out = new_topic("scale-resume-views", 1);
    let bucket = crate::s3::new_bucket();
    let chk = format!("s3://{bucket}/page-views");
    let group = format!("weir-it-scale-resume-{}", crate::s3::unique());
    produce_clicks(&input, 0, 120, by);
    let admin = crate::kafka::admin();
    let ends: BTreeMap<i32, i64> = (0..2)
        .map(|p| (p, admin.watermarks(&input, p).unwrap().1))
        .collect();
    assert!(ends.values().all(|e| *e > 0), "{ends:?}");

    let q = page_views(&input, &out, &chk, Some(&group), by);
    q.process_all_available().unwrap();
    q.stop().unwrap();
    // Behind a repartition topic, its own group too: (group, topic, ends).
    let mut groups = vec![(group.clone(), input.clone(), ends)];
    if by == Keyed::ByClick {
        let rep = repartition_topic_of(&chk, &group);
        let n = admin.partitions(&rep).unwrap() as i32;
        let rep_ends: BTreeMap<i32, i64> = (0..n)
            .map(|p| (p, admin.watermarks(&rep, p).unwrap().1))
            .collect();
        assert!(rep_ends.values().sum::<i64>() > 0, "{rep}: {rep_ends:?}");
        groups.push((format!("{group}-repartition"), rep, rep_ends));
    }
    // The groups' offsets reset (as by `kafka-consumer-groups.sh
    // --reset-offsets --to-earliest` on the stopped query's empty groups).
    for (g, topic, ends) in &groups {
        reset_group(g, topic, ends.len() as i32);
    }

    // Started again, nothing new to read: its tasks commit where the
    // checkpoint ended (the checkpoint, not the group, says where to read).
    let q = page_views(&input, &out, &chk, Some(&group), by);
    for (g, topic, ends) in &groups {
        await_group_committed(g, topic, ends);
    }
    let progress = q.recent_progress();
    assert!(
        progress.iter().all(|p| p.num_input_rows == 0),
        "the restarted query read input again: {progress:?}"
    );
    q.stop().unwrap();
}

/// Commits offset 0 for `group` on `topic`'s `partitions` partitions (the
/// group's members stopped) and checks it.
fn reset_group(group: &str, topic: &str, partitions: i32) {
    let reset: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Offset(0))
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = reset.commit(&tpl, CommitMode::Sync) {
        // The stopped member may take a moment to leave.
        assert!(
            Instant::now() < deadline,
            "cannot reset the offsets of group {group}: {e}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let zero: BTreeMap<i32, i64> = (0..partitions).map(|p| (p, 0)).collect();
    assert_eq!(
        crate::kafka::admin()
            .committed_offsets(group, topic)
            .unwrap(),
        zero
    );
}

/// The repartition topic of the page views query checkpointed at `chk`;
/// `prefix`: the query's name, or its group when it has none.
fn repartition_topic_of(chk: &str, prefix: &str) -> String {
    let meta = weir::storage::Storage::open(chk, &crate::s3::settings(), false)
        .unwrap()
        .get("metadata")
        .unwrap()
        .unwrap();
    let id = serde_json::from_slice::<serde_json::Value>(&meta).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The aggregation is the plan's third operator (watermark, filter).
    weir::scale::repartition_topic(prefix, &id, 2)
}

/// What scale-out cannot run is refused at `start()`, before anything is
/// written, with the reason.
#[test]
fn what_scale_out_cannot_divide_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let chk = dir.path().join("chk");
    let kafka = || {
        KafkaSource::new("127.0.0.1:1")
            .subscribe("clicks")
            .from_json("value", click_fields())
            .keep(&["key"])
    };
    let err = |q: weir::Result<StreamingQuery>| match q {
        Ok(q) => {
            q.stop().unwrap();
            panic!("started")
        }
        Err(e) => e.to_string(),
    };
    // A stream-stream join needs both inputs in one task.
    let e = err(Session::new()
        .read_stream(kafka())
        .join(
            Session::new().read_stream(kafka()),
            "page",
            weir::plan::JoinType::Inner,
        )
        .write_stream()
        .checkpoint_location(chk.to_str().unwrap())
        .sink(weir::sink::ConsoleSink::new())
        .scale_out("g")
        .start());
    assert!(e.contains("needs both inputs in one task"), "{e}");
    // A sink that cannot keep its promise per task.
    let e = err(Session::new()
        .read_stream(kafka())
        .write_stream()
        .checkpoint_location(chk.to_str().unwrap())
        .sink(FileSink::new(dir.path().join("out"), FileFormat::Json))
        .scale_out("g")
        .start());
    assert!(e.contains("cannot be divided among the tasks"), "{e}");
    // No checkpoint every process reaches (the console sink runs without
    // one in a single process).
    let e = err(Session::new()
        .read_stream(kafka())
        .write_stream()
        .sink(weir::sink::ConsoleSink::new())
        .scale_out("g")
        .start());
    assert!(e.contains("needs a checkpoint location"), "{e}");
    // Not a Kafka subscription.
    let e = err(Session::new()
        .read_stream(
            KafkaSource::new("127.0.0.1:1")
                .assign(&[("clicks", 0)])
                .from_json("value", click_fields()),
        )
        .write_stream()
        .checkpoint_location(chk.to_str().unwrap())
        .sink(KafkaSink::new("127.0.0.1:1").topic("out").json_values())
        .scale_out("g")
        .start());
    assert!(e.contains("use subscribe instead of assign"), "{e}");
    assert!(!chk.exists(), "nothing written to the checkpoint");
}
