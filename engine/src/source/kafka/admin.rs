//! A small blocking Kafka admin client for setting topics up (tests,
//! examples, tooling): create and delete topics, add partitions, delete
//! records, read a consumer group's committed offsets. Built on rdkafka's
//! `AdminClient`, whose futures are driven here on the calling thread.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::retry::retry_transient_within;
use crate::error::{Result, WeirError};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs a future to completion on this thread (rdkafka's admin futures are
/// completed by librdkafka's own thread, so no async runtime is needed).
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => std::thread::park_timeout(Duration::from_millis(50)),
        }
    }
}

fn err(what: String) -> WeirError {
    WeirError::Config(format!("kafka admin: {what}"))
}

/// Blocking admin operations against one cluster.
pub struct KafkaAdmin {
    bootstrap: String,
    admin: AdminClient<DefaultClientContext>,
    opts: AdminOptions,
}

impl KafkaAdmin {
    /// An admin client for the cluster at `bootstrap` (`host:port,...`).
    pub fn new(bootstrap: &str) -> Result<KafkaAdmin> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .map_err(|e| err(format!("cannot create a client for {bootstrap}: {e}")))?;
        Ok(KafkaAdmin {
            bootstrap: bootstrap.to_string(),
            admin,
            opts: AdminOptions::new().operation_timeout(Some(TIMEOUT)),
        })
    }

    /// Creates `topic` with `partitions` partitions (replication factor 1);
    /// an existing topic is left as it is.
    pub fn create_topic(&self, topic: &str, partitions: i32) -> Result<()> {
        self.create_topic_with_config(topic, partitions, &[])
    }

    /// [`KafkaAdmin::create_topic`] with topic configs (`("retention.ms",
    /// "60000")`, ...); an existing topic is left as it is.
    pub fn create_topic_with_config(
        &self,
        topic: &str,
        partitions: i32,
        config: &[(&str, &str)],
    ) -> Result<()> {
        let mut t = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
        for (k, v) in config {
            t = t.set(k, v);
        }
        let res = block_on(self.admin.create_topics([&t], &self.opts))
            .map_err(|e| err(format!("create topic `{topic}`: {e}")))?;
        for r in res {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => return Err(err(format!("create topic `{t}`: {code}"))),
            }
        }
        self.wait_for_partitions(topic, partitions as usize)
    }

    /// Deletes `topic`.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        let res = block_on(self.admin.delete_topics(&[topic], &self.opts))
            .map_err(|e| err(format!("delete topic `{topic}`: {e}")))?;
        for r in res {
            if let Err((t, code)) = r {
                return Err(err(format!("delete topic `{t}`: {code}")));
            }
        }
        Ok(())
    }

    /// Grows `topic` to `total` partitions.
    pub fn add_partitions(&self, topic: &str, total: usize) -> Result<()> {
        let p = NewPartitions::new(topic, total);
        let res = block_on(self.admin.create_partitions([&p], &self.opts))
            .map_err(|e| err(format!("add partitions to `{topic}`: {e}")))?;
        for r in res {
            if let Err((t, code)) = r {
                return Err(err(format!("add partitions to `{t}`: {code}")));
            }
        }
        self.wait_for_partitions(topic, total)
    }

    /// Deletes the records of `topic`-`partition` before `offset` (Kafka's
    /// DeleteRecords: the partition's log start moves to `offset`).
    pub fn delete_records_before(&self, topic: &str, partition: i32, offset: i64) -> Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .map_err(|e| err(e.to_string()))?;
        let res = block_on(self.admin.delete_records(&tpl, &self.opts))
            .map_err(|e| err(format!("delete records of {topic}-{partition}: {e}")))?;
        for e in res.elements() {
            e.error()
                .map_err(|x| err(format!("delete records of {topic}-{partition}: {x}")))?;
        }
        Ok(())
    }

    /// The number of partitions of `topic` (0 when it does not exist).
    pub fn partitions(&self, topic: &str) -> Result<usize> {
        let c = self.consumer(None)?;
        let md = c
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| err(format!("metadata of `{topic}`: {e}")))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map(|t| t.partitions().len())
            .unwrap_or(0))
    }

    /// The earliest and next offset (low and high watermark) of a partition.
    pub fn watermarks(&self, topic: &str, partition: i32) -> Result<(i64, i64)> {
        let c = self.consumer(None)?;
        let one = |which: Offset| -> Result<i64> {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(topic, partition, which)
                .map_err(|e| err(e.to_string()))?;
            let got = c
                .offsets_for_times(tpl, TIMEOUT)
                .map_err(|e| err(format!("offsets of {topic}-{partition}: {e}")))?;
            let e = got.elements();
            match e.first().map(|e| (e.error(), e.offset())) {
                Some((Ok(()), Offset::Offset(o))) => Ok(o),
                other => Err(err(format!(
                    "offsets of {topic}-{partition}: unexpected answer {other:?}"
                ))),
            }
        };
        Ok((one(Offset::Beginning)?, one(Offset::End)?))
    }

    /// The offsets consumer group `group` has committed for `topic`, by
    /// partition (partitions without a commit are left out).
    pub fn committed_offsets(&self, group: &str, topic: &str) -> Result<BTreeMap<i32, i64>> {
        let n = self.partitions(topic)?;
        let c = self.consumer(Some(group))?;
        let mut tpl = TopicPartitionList::new();
        for p in 0..n as i32 {
            tpl.add_partition(topic, p);
        }
        let got = retry_transient_within(TIMEOUT, |left| c.committed_offsets(tpl.clone(), left))
            .map_err(|e| err(format!("committed offsets of group `{group}`: {e}")))?;
        Ok(got
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect())
    }

    fn consumer(&self, group: Option<&str>) -> Result<BaseConsumer> {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("enable.auto.commit", "false");
        if let Some(g) = group {
            c.set("group.id", g);
        }
        c.create()
            .map_err(|e| err(format!("cannot create a consumer: {e}")))
    }

    fn wait_for_partitions(&self, topic: &str, n: usize) -> Result<()> {
        // Metadata propagates asynchronously: wait until every partition is visible.
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            if self.partitions(topic)? >= n {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(err(format!(
                    "topic `{topic}` did not show {n} partitions within {TIMEOUT:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
