//! Which topic-partitions the Kafka source reads now (its strategy against
//! the cluster's metadata) and where a new query starts in each of them
//! (`startingOffsets`, `startingTimestamp`, `startingOffsetsByTimestamp`
//! resolved to absolute offsets).

use std::collections::BTreeSet;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset as KafkaOffset, TopicPartitionList};

use super::offsets::{self, PartitionOffsets, TopicPartition};
use super::options::Strategy;
use super::{KafkaSource, StartingOffsets, META_TIMEOUT};
use crate::error::Result;

impl KafkaSource {
    /// The topic-partitions the strategy selects now.
    pub(super) fn discover(&self) -> Result<BTreeSet<TopicPartition>> {
        let strategy = self
            .options
            .strategy
            .as_ref()
            .ok_or_else(|| self.err("no topics"))?;
        if let Strategy::Assign(v) = strategy {
            return Ok(v.iter().cloned().collect());
        }
        let c = self.consumer()?;
        let md = c
            .fetch_metadata(None, META_TIMEOUT)
            .map_err(|e| self.kerr("cannot read the cluster's metadata", e))?;
        let mut out = BTreeSet::new();
        for t in md.topics() {
            if t.error().is_some() || t.name().starts_with("__") {
                continue;
            }
            let wanted = match strategy {
                Strategy::Subscribe(list) => list.iter().any(|n| n == t.name()),
                Strategy::Pattern(_, re) => re.is_match(t.name()),
                Strategy::Assign(_) => false,
            };
            if wanted {
                for p in t.partitions() {
                    out.insert((t.name().to_string(), p.id()));
                }
            }
        }
        Ok(out)
    }

    /// Resolves the starting offsets of a new query to absolute offsets.
    pub(super) fn resolve_initial(&mut self) -> Result<PartitionOffsets> {
        let parts = self.discover()?;
        let mut out = PartitionOffsets::new();
        let by_ts: Option<PartitionOffsets> = match (
            &self.options.starting_timestamp,
            &self.options.starting_by_timestamp,
        ) {
            (Some(ts), _) => Some(parts.iter().map(|tp| (tp.clone(), *ts)).collect()),
            (None, Some(m)) => Some(m.clone()),
            _ => None,
        };
        if let Some(ts) = by_ts {
            self.require_all(&parts, &ts, "startingOffsetsByTimestamp")?;
            let mut tpl = TopicPartitionList::new();
            for (tp, t) in &ts {
                tpl.add_partition_offset(&tp.0, tp.1, KafkaOffset::Offset(*t))
                    .map_err(|e| self.kerr("startingTimestamp", e))?;
            }
            let got = self
                .consumer()?
                .offsets_for_times(tpl, META_TIMEOUT)
                .map_err(|e| self.kerr("cannot look offsets up by timestamp", e))?;
            for e in got.elements() {
                let tp = (e.topic().to_string(), e.partition());
                let o = match e.offset() {
                    KafkaOffset::Offset(o) => o,
                    _ if self.options.by_timestamp_latest => self.latest(&tp)?,
                    _ => {
                        return Err(self.err(format!(
                            "no record in {}-{} has a timestamp at or after {} (set startingOffsetsByTimestampStrategy=latest to start at the end instead)",
                            tp.0, tp.1, ts[&tp]
                        )))
                    }
                };
                out.insert(tp, o);
            }
            return Ok(out);
        }
        match self.options.starting.clone() {
            StartingOffsets::Earliest => {
                out = self.list_offsets(&parts, KafkaOffset::Beginning)?;
            }
            StartingOffsets::Latest => {
                out = self.list_offsets(&parts, KafkaOffset::End)?;
            }
            StartingOffsets::Offsets(m) => {
                self.require_all(&parts, &m, "startingOffsets")?;
                let named: BTreeSet<TopicPartition> = m.keys().cloned().collect();
                let los = self.list_offsets(&named, KafkaOffset::Beginning)?;
                let his = self.list_offsets(&named, KafkaOffset::End)?;
                for (tp, o) in m {
                    let (lo, hi) = (los[&tp], his[&tp]);
                    let v = match o {
                        offsets::EARLIEST => lo,
                        offsets::LATEST => hi,
                        o if o < lo => {
                            self.data_loss(
                                &tp,
                                o,
                                lo,
                                "startingOffsets is before the earliest available offset",
                            )?;
                            lo
                        }
                        o if o > hi => {
                            return Err(self.err(format!(
                                "startingOffsets for {}-{} is {o}, past its latest offset {hi}",
                                tp.0, tp.1
                            )))
                        }
                        o => o,
                    };
                    out.insert(tp, v);
                }
            }
            StartingOffsets::Timestamp(_) | StartingOffsets::ByTimestamp(_) => {
                unreachable!("timestamps are handled above")
            }
        }
        Ok(out)
    }

    fn require_all(
        &self,
        parts: &BTreeSet<TopicPartition>,
        given: &PartitionOffsets,
        what: &str,
    ) -> Result<()> {
        let given_keys: BTreeSet<TopicPartition> = given.keys().cloned().collect();
        // Spark: specific offsets name every partition read, assigned ones too.
        if &given_keys == parts {
            return Ok(());
        }
        let show = |s: &BTreeSet<TopicPartition>| {
            s.iter()
                .map(|(t, p)| format!("{t}-{p}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        Err(self.err(format!(
            "{what} must name every partition of the subscribed topics (use -1 for latest, -2 for earliest); given: [{}], subscribed: [{}]",
            show(&given_keys),
            show(parts)
        )))
    }
}
