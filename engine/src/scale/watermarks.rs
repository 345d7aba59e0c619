//! The watermark across the processes of a scale-out query, on a compacted
//! Kafka topic (`<group>-weir-watermarks`, one partition): each task
//! publishes (key `<query id>/<task>`, a JSON value) its watermark
//! operators' watermarks, whether it has caught up and to which input
//! offset, and the watermark its next batch runs with; a reader thread in
//! every process follows the topic. Which watermark a task may take, and
//! why no row is judged late that Spark would have kept: see
//! `query/shared_watermark.rs`. The topic is read asynchronously, so a task
//! may see another's progress late, which only keeps state longer and emits
//! a window a batch later; a report is trusted to say a task has caught up
//! only when the input's end offsets, read after it, agree.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::error::{Result, WeirError};
use crate::query::{Pending, WatermarkShare};
use crate::source::kafka::KafkaAdmin;
use crate::source::Offset as SourceOffset;
use crate::source::SharedInput;

/// What a task published.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Entry {
    /// Per watermark operator, its own watermark (ms).
    #[serde(rename = "w")]
    watermarks: Vec<Option<i64>>,
    /// It had no rows pending.
    #[serde(rename = "c")]
    caught_up: bool,
    /// The offset its input partition was read to (a task reading one).
    #[serde(rename = "p", default)]
    position: Option<i64>,
    /// The watermark its next batch runs with (ms).
    #[serde(rename = "b", default)]
    next_batch: Option<i64>,
}

/// Per task, what it published last.
type Published = BTreeMap<String, Entry>;

/// One process's view of the watermark topic.
pub(crate) struct WatermarkHub {
    topic: String,
    query_id: String,
    producer: ThreadedProducer<DefaultProducerContext>,
    published: Arc<Mutex<Published>>,
    stop: Arc<AtomicBool>,
    reader: Mutex<Option<JoinHandle<()>>>,
    /// Reads the input partitions' end offsets.
    offsets: BaseConsumer,
}

/// The name of a scale-out group's watermark topic (`<group>-weir-watermarks`).
pub fn topic_name(group: &str) -> String {
    format!("{group}-weir-watermarks")
}

impl WatermarkHub {
    /// Creates the topic when missing and starts following it.
    pub(crate) fn start(input: &SharedInput, group: &str, query_id: &str) -> Result<WatermarkHub> {
        let topic = topic_name(group);
        KafkaAdmin::new(&input.bootstrap)?.create_topic_with_config(
            &topic,
            1,
            &[("cleanup.policy", "compact")],
        )?;
        let config = |extra: &[(&str, &str)]| {
            let mut c = ClientConfig::new();
            c.set("bootstrap.servers", &input.bootstrap);
            for (k, v) in &input.kafka_conf {
                c.set(k, v);
            }
            for (k, v) in extra {
                c.set(*k, *v);
            }
            c
        };
        let kerr = |what: &str, e: rdkafka::error::KafkaError| {
            WeirError::Config(format!("scale-out watermark topic `{topic}`: {what}: {e}"))
        };
        let producer: ThreadedProducer<DefaultProducerContext> = config(&[("linger.ms", "0")])
            .create()
            .map_err(|e| kerr("cannot create its producer", e))?;
        let consumer: BaseConsumer = config(&[
            ("group.id", &format!("{group}-weir-watermarks-reader")),
            ("enable.auto.commit", "false"),
            ("enable.partition.eof", "false"),
            ("fetch.wait.max.ms", "100"),
        ])
        .create()
        .map_err(|e| kerr("cannot create its reader", e))?;
        let offsets: BaseConsumer = config(&[
            ("group.id", &format!("{group}-weir-watermarks-offsets")),
            ("enable.auto.commit", "false"),
        ])
        .create()
        .map_err(|e| kerr("cannot create its offset reader", e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .map_err(|e| kerr("cannot assign it", e))?;
        consumer
            .assign(&tpl)
            .map_err(|e| kerr("cannot assign it", e))?;
        let published = Arc::new(Mutex::new(Published::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let published = published.clone();
            let stop = stop.clone();
            let prefix = format!("{query_id}/");
            std::thread::Builder::new()
                .name("weir-watermarks".into())
                .spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else {
                            continue;
                        };
                        let task = m
                            .key()
                            .and_then(|k| std::str::from_utf8(k).ok())
                            .and_then(|k| k.strip_prefix(&prefix));
                        let value = m
                            .payload()
                            .and_then(|v| serde_json::from_slice::<Entry>(v).ok());
                        if let (Some(task), Some(value)) = (task, value) {
                            fold(&mut published.lock().unwrap(), task, &value);
                        }
                    }
                })
                .map_err(|e| WeirError::Config(format!("cannot start a thread: {e}")))?
        };
        Ok(WatermarkHub {
            topic,
            query_id: query_id.to_string(),
            producer,
            published,
            stop,
            reader: Mutex::new(Some(reader)),
            offsets,
        })
    }

    /// The handle of the task reading `input` (its topic and partition),
    /// fed by the first-stage tasks reading `upstream` (a second-stage
    /// task's: every input partition; none for a task reading the input).
    pub(crate) fn for_task(
        self: &Arc<Self>,
        input: (String, i32),
        upstream: Vec<(String, i32)>,
    ) -> Arc<TaskWatermarks> {
        Arc::new(TaskWatermarks {
            hub: self.clone(),
            task: super::task_name(&input),
            input,
            upstream,
            announced: Mutex::new(BTreeMap::new()),
            read: Mutex::new(BTreeMap::new()),
            batches: Mutex::new(BTreeMap::new()),
            verified: Mutex::new((None, None)),
        })
    }

    /// Whether partition `p` of `topic` ends at or before `position`
    /// (everything in it was read by then); false when it cannot be told.
    fn ends_by(&self, topic: &str, p: i32, position: i64) -> bool {
        match self
            .offsets
            .fetch_watermarks(topic, p, Duration::from_secs(5))
        {
            Ok((_, high)) => high <= position,
            Err(e) => {
                tracing::debug!("scale-out: end offset of {topic}-{p}: {e}");
                false
            }
        }
    }

    /// Stops following the topic, after sending what was published.
    pub(crate) fn close(&self) {
        let _ = self.producer.flush(Duration::from_secs(5));
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.reader.lock().unwrap().take() {
            let _ = h.join();
        }
    }
}

impl Drop for WatermarkHub {
    fn drop(&mut self) {
        self.close();
    }
}

/// Folds what a task published in: watermarks and positions never move
/// backwards (an older echo of a task's report changes nothing; a stale
/// "caught up" is checked against the input's end offsets before use).
fn fold(published: &mut Published, task: &str, value: &Entry) {
    let entry = published.entry(task.to_string()).or_default();
    if entry.watermarks.len() < value.watermarks.len() {
        entry.watermarks.resize(value.watermarks.len(), None);
    }
    crate::query::merge_watermarks(&mut entry.watermarks, &value.watermarks);
    entry.caught_up = value.caught_up;
    entry.position = entry.position.max(value.position);
    entry.next_batch = entry.next_batch.max(value.next_batch);
}

/// Per operator, the largest watermark of any task.
fn largest(published: &Published, n: usize) -> Vec<Option<i64>> {
    let mut out = vec![None; n];
    for e in published.values() {
        crate::query::merge_watermarks(&mut out, &e.watermarks);
    }
    out
}

/// One task's side of the hub.
pub(crate) struct TaskWatermarks {
    hub: Arc<WatermarkHub>,
    task: String,
    /// The partition the task reads.
    input: (String, i32),
    /// The input partitions whose first-stage tasks feed this one.
    upstream: Vec<(String, i32)>,
    /// Per feeding task, the watermark it announced for its next batch, as
    /// seen before this task last read its latest offsets.
    announced: Mutex<BTreeMap<String, i64>>,
    /// Per feeding task, the largest batch watermark of its rows read.
    read: Mutex<BTreeMap<String, i64>>,
    /// The watermark of each recent batch of this task.
    batches: Mutex<BTreeMap<i64, i64>>,
    /// The whole source's watermarks last checked against the input's end
    /// offsets and found fed, and when a check last ran.
    verified: Mutex<(Option<Watermarks>, Option<Instant>)>,
}

/// Per watermark operator, a watermark (ms).
type Watermarks = Vec<Option<i64>>;

/// How often a task may check the input's end offsets.
const VERIFY: Duration = Duration::from_millis(250);

impl TaskWatermarks {
    /// The watermark batch `batch_id` runs with (for the repartition sink).
    pub(crate) fn batch_watermark(&self, batch_id: i64) -> Option<i64> {
        self.batches.lock().unwrap().get(&batch_id).copied()
    }

    /// Rows written by the first-stage task `task` in a batch with
    /// watermark `watermark_ms` were read.
    pub(crate) fn read_from(&self, task: &str, watermark_ms: i64) {
        let mut read = self.read.lock().unwrap();
        let e = read.entry(task.to_string()).or_insert(watermark_ms);
        *e = (*e).max(watermark_ms);
    }

    /// The name of this task.
    pub(crate) fn task(&self) -> &str {
        &self.task
    }
}

impl WatermarkShare for TaskWatermarks {
    fn whole_source(&self, operators: usize) -> Option<Vec<Option<i64>>> {
        let (snapshot, all) = {
            let published = self.hub.published.lock().unwrap();
            let mut announced = BTreeMap::new();
            let mut positions = Vec::new();
            for p in &self.upstream {
                let t = super::task_name(p);
                if let Some(e) = published.get(&t) {
                    if let Some(b) = e.next_batch {
                        announced.insert(t.clone(), b);
                    }
                    positions.push((p, e.caught_up.then_some(e.position).flatten()));
                } else {
                    positions.push((p, None));
                }
            }
            *self.announced.lock().unwrap() = announced;
            (positions, largest(&published, operators))
        };
        if snapshot.is_empty() {
            // No feeding tasks: nothing to check.
            return Some(all);
        }
        if snapshot.iter().any(|(_, position)| position.is_none()) {
            return None;
        }
        // Checking the input's end offsets costs a broker round trip per
        // feeding partition, and an idle task plans every polling delay:
        // a watermark already checked needs no new check (it only moves
        // forward), and a new one is checked at most every VERIFY.
        let mut verified = self.verified.lock().unwrap();
        if verified.0.as_ref() == Some(&all) {
            return Some(all);
        }
        if verified.1.is_some_and(|t| t.elapsed() < VERIFY) {
            return None;
        }
        verified.1 = Some(Instant::now());
        // Every feeding task caught up, and its input has not grown since.
        let fed = snapshot.iter().all(|((topic, p), position)| {
            position.is_some_and(|pos| self.hub.ends_by(topic, *p, pos))
        });
        if fed {
            verified.0 = Some(all.clone());
        }
        fed.then_some(all)
    }

    fn pending(&self, caught_up: bool) -> Pending {
        if self.upstream.is_empty() {
            return Pending::OwnRows;
        }
        let read = self.read.lock().unwrap();
        let announced = self.announced.lock().unwrap();
        let mut bound: Option<i64> = None;
        for p in &self.upstream {
            let t = super::task_name(p);
            let from_rows = read.get(&t).copied();
            // Caught up: every row the feeding task wrote before its
            // announcement (seen before this task read its latest offsets)
            // has been read; its later rows carry at least what it announced.
            let announced = caught_up.then(|| announced.get(&t).copied()).flatten();
            let Some(b) = from_rows.max(announced) else {
                return Pending::Bound(None);
            };
            bound = Some(bound.map_or(b, |x| x.min(b)));
        }
        Pending::Bound(bound)
    }

    fn publish(
        &self,
        own: &[Option<i64>],
        caught_up: bool,
        position: Option<&SourceOffset>,
        next_batch_watermark_ms: i64,
    ) {
        let (topic, p) = &self.input;
        let position = position
            .and_then(|o| o.get(topic))
            .and_then(|t| t.get(p.to_string()))
            .and_then(|v| v.as_i64());
        let mut published = self.hub.published.lock().unwrap();
        let before = published.get(&self.task).cloned();
        fold(
            &mut published,
            &self.task,
            &Entry {
                watermarks: own.to_vec(),
                caught_up,
                position,
                next_batch: Some(next_batch_watermark_ms),
            },
        );
        let now = &published[&self.task];
        if before.as_ref() == Some(now) {
            return;
        }
        let key = format!("{}/{}", self.hub.query_id, self.task);
        let value = serde_json::to_vec(now).unwrap_or_default();
        // Best effort: a lost update only delays other tasks' watermark
        // until this task's next one.
        if let Err((e, _)) = self
            .hub
            .producer
            .send(BaseRecord::to(&self.hub.topic).key(&key).payload(&value))
        {
            tracing::warn!("cannot publish task {}'s watermark: {e}", self.task);
        }
    }

    fn batch(&self, batch_id: i64, watermark_ms: i64) {
        let mut b = self.batches.lock().unwrap();
        b.insert(batch_id, watermark_ms);
        b.retain(|id, _| *id > batch_id - 16);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_per_operator_over_tasks_and_never_backwards() {
        let e = |w: Vec<Option<i64>>, c: bool, p: Option<i64>| Entry {
            watermarks: w,
            caught_up: c,
            position: p,
            next_batch: None,
        };
        let mut p = Published::new();
        fold(&mut p, "a-0", &e(vec![Some(10), None], false, Some(5)));
        fold(&mut p, "a-1", &e(vec![Some(4), Some(7)], true, None));
        // An older echo: nothing moves back.
        fold(&mut p, "a-0", &e(vec![Some(3), None], true, Some(2)));
        assert_eq!(p["a-0"], e(vec![Some(10), None], true, Some(5)));
        assert_eq!(largest(&p, 2), vec![Some(10), Some(7)]);
        assert_eq!(largest(&Published::new(), 2), vec![None, None]);
    }
}
