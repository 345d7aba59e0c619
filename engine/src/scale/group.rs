//! Membership of a scale-out query's consumer group: the broker decides
//! which process owns which input partitions (cooperative-sticky
//! assignment, so a rebalance moves only the partitions that change
//! owner). This consumer reads no records (its partitions are paused as
//! soon as they are assigned; each task reads its own with the Kafka
//! source); it heartbeats, hears of assignments and revocations, and
//! commits each task's processed offsets to the group, so standard Kafka
//! tooling (`kafka-consumer-groups.sh --describe`) shows the lag.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};

use crate::error::{Result, WeirError};
use crate::source::SharedInput;

/// A topic-partition.
pub(crate) type Partition = (String, i32);

/// What the group told this process, for the coordinator's loop.
pub(crate) trait Membership: Send + Sync {
    /// `partitions` are being taken from this process: stop their tasks
    /// before returning (their batches finish or are abandoned cleanly).
    /// (Their next owner commits where they ended to the group, from the
    /// checkpoint, as soon as its tasks start.)
    fn revoked(&self, partitions: &[Partition]);
    /// `partitions` were given to this process.
    fn assigned(&self, partitions: &[Partition]);
}

/// The group consumer's callbacks: rebalances reach the [`Membership`].
pub(crate) struct GroupContext {
    membership: Arc<dyn Membership>,
}

impl ClientContext for GroupContext {}

fn partitions(tpl: &TopicPartitionList) -> Vec<Partition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_string(), e.partition()))
        .collect()
}

impl ConsumerContext for GroupContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            self.membership.revoked(&partitions(tpl));
        }
    }

    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, _: &TopicPartitionList) {
        // Refused during a rebalance (a stale generation): the next commit,
        // every few seconds, carries the same positions.
        if let Err(e) = result {
            tracing::debug!("scale-out group: a commit of offsets failed: {e}");
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            // Only membership: the tasks read the records.
            if let Err(e) = consumer.pause(tpl) {
                tracing::warn!("cannot pause the group consumer's partitions: {e}");
            }
            self.membership.assigned(&partitions(tpl));
        }
    }
}

/// The process's member of the group.
pub(crate) struct GroupMember {
    consumer: BaseConsumer<GroupContext>,
    /// The topics it subscribes to.
    topics: Vec<String>,
    /// Serialises commits with rebalances.
    lock: Mutex<()>,
}

impl GroupMember {
    /// Joins `group`, subscribed to the input's topics. Defaults suited to
    /// a streaming group (a 10 s session timeout); the source's `kafka.*`
    /// settings override them.
    pub(crate) fn join(
        input: &SharedInput,
        group: &str,
        instance: Option<&str>,
        membership: Arc<dyn Membership>,
    ) -> Result<GroupMember> {
        let mut conf = ClientConfig::new();
        // Defaults the source's `kafka.*` settings may change ...
        conf.set("session.timeout.ms", "10000")
            .set("heartbeat.interval.ms", "1000")
            // A revocation waits for the task's running batch.
            .set("max.poll.interval.ms", "300000");
        for (k, v) in &input.kafka_conf {
            conf.set(k, v);
        }
        // ... and what scale-out needs, which they may not.
        conf.set("bootstrap.servers", &input.bootstrap)
            .set("group.id", group)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false");
        if let Some(id) = instance {
            // Static membership: a restart with the same id gets its
            // partitions back without a rebalance (within the session timeout).
            conf.set("group.instance.id", id);
        }
        let consumer: BaseConsumer<GroupContext> = conf
            .create_with_context(GroupContext { membership })
            .map_err(|e| {
                WeirError::Config(format!(
                    "cannot join consumer group `{group}` at {}: {e}",
                    input.bootstrap
                ))
            })?;
        let topics: Vec<&str> = input.topics.iter().map(|t| t.as_str()).collect();
        consumer.subscribe(&topics).map_err(|e| {
            WeirError::Config(format!(
                "cannot subscribe group `{group}` to {topics:?}: {e}"
            ))
        })?;
        Ok(GroupMember {
            consumer,
            topics: input.topics.clone(),
            lock: Mutex::new(()),
        })
    }

    /// Serves the group protocol (heartbeats, rebalance callbacks) for up
    /// to `d`. Records are never returned: the partitions are paused.
    pub(crate) fn poll(&self, d: Duration) {
        let _g = self.lock.lock().unwrap();
        if let Some(Err(e)) = self.consumer.poll(d) {
            tracing::debug!("scale-out group: {e}");
        }
    }

    /// Commits `offsets` (the next offset to read, per partition) to the
    /// group, for lag monitoring only: the tasks' checkpoints hold the
    /// offsets that matter.
    pub(crate) fn commit(&self, offsets: &[(Partition, i64)]) {
        let mut tpl = TopicPartitionList::new();
        for ((t, p), o) in offsets.iter().filter(|((t, _), _)| self.topics.contains(t)) {
            let _ = tpl.add_partition_offset(t, *p, Offset::Offset(*o));
        }
        if tpl.count() == 0 {
            return;
        }
        let _g = self.lock.lock().unwrap();
        // Its answer comes to `GroupContext::commit_callback`.
        if let Err(e) = self.consumer.commit(&tpl, CommitMode::Async) {
            tracing::debug!("scale-out group: cannot commit offsets: {e}");
        }
    }

    /// Leaves the group: the revocation callback stops this process's tasks.
    pub(crate) fn leave(&self) {
        let _g = self.lock.lock().unwrap();
        self.consumer.unsubscribe();
        // Serve the revocation the unsubscribe starts.
        let _ = self.consumer.poll(Duration::from_millis(100));
    }
}
