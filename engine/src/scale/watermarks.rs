//! The watermark across the processes of a scale-out query, on a compacted
//! Kafka topic (`<group>-weir-watermarks`, one partition): each task
//! publishes its watermark operators' watermarks (key `<query id>/<task>`,
//! value a JSON array of ms or null) when they move, and a reader thread in
//! every process follows the topic. Before a batch a task reads the largest
//! watermark each operator has reached in any task.
//!
//! Which tasks take the shared watermark, and why the results stay correct:
//! see `query/shared_watermark.rs`. A published watermark is the largest
//! event time minus the delay over rows a task has committed; the topic is read
//! asynchronously, so a task may see it late, which only keeps state longer
//! and emits a window a batch later.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::error::{Result, WeirError};
use crate::query::WatermarkShare;
use crate::source::kafka::KafkaAdmin;
use crate::source::SharedInput;

/// What a task published: per watermark operator the largest watermark,
/// and whether it had caught up with its input.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Entry {
    #[serde(rename = "w")]
    watermarks: Vec<Option<i64>>,
    #[serde(rename = "c")]
    caught_up: bool,
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
        })
    }

    /// Task `task`'s handle on the hub. `upstream`: the tasks whose output
    /// this task reads (a second stage's: every first-stage task); it takes
    /// the shared watermark only when they have all caught up too.
    pub(crate) fn for_task(
        self: &Arc<Self>,
        task: &str,
        upstream: Vec<String>,
    ) -> Arc<dyn WatermarkShare> {
        Arc::new(TaskWatermarks {
            hub: self.clone(),
            task: task.to_string(),
            upstream,
        })
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

/// Folds what a task published in: watermarks never move backwards.
fn fold(published: &mut Published, task: &str, value: &Entry) {
    let entry = published.entry(task.to_string()).or_default();
    if entry.watermarks.len() < value.watermarks.len() {
        entry.watermarks.resize(value.watermarks.len(), None);
    }
    crate::query::merge_watermarks(&mut entry.watermarks, &value.watermarks);
    entry.caught_up = value.caught_up;
}

/// Per operator, the largest watermark of any task.
fn largest(published: &Published, n: usize) -> Vec<Option<i64>> {
    let mut out = vec![None; n];
    for e in published.values() {
        crate::query::merge_watermarks(&mut out, &e.watermarks);
    }
    out
}

struct TaskWatermarks {
    hub: Arc<WatermarkHub>,
    task: String,
    upstream: Vec<String>,
}

impl WatermarkShare for TaskWatermarks {
    fn whole_source(&self, operators: usize) -> Option<Vec<Option<i64>>> {
        let published = self.hub.published.lock().unwrap();
        let fed = self
            .upstream
            .iter()
            .all(|t| published.get(t).is_some_and(|e| e.caught_up));
        fed.then(|| largest(&published, operators))
    }

    fn publish(&self, own: &[Option<i64>], caught_up: bool) {
        let mut published = self.hub.published.lock().unwrap();
        let before = published.get(&self.task).cloned();
        fold(
            &mut published,
            &self.task,
            &Entry {
                watermarks: own.to_vec(),
                caught_up,
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

    fn follows_own_rows(&self) -> bool {
        self.upstream.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_per_operator_over_tasks_and_never_backwards() {
        let e = |w: Vec<Option<i64>>, c: bool| Entry {
            watermarks: w,
            caught_up: c,
        };
        let mut p = Published::new();
        fold(&mut p, "a-0", &e(vec![Some(10), None], false));
        fold(&mut p, "a-1", &e(vec![Some(4), Some(7)], true));
        fold(&mut p, "a-0", &e(vec![Some(3), None], true));
        assert_eq!(p["a-0"], e(vec![Some(10), None], true));
        assert_eq!(largest(&p, 2), vec![Some(10), Some(7)]);
        assert_eq!(largest(&Published::new(), 2), vec![None, None]);
    }
}
