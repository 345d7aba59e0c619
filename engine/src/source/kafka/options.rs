//! The Kafka source's configuration: Spark's options, read and checked
//! through weir-plan's connector table ([`weir_plan::connectors`]), the
//! same rules `stream_query!` checks a declared `kafka(...)` source with, so
//! both refuse the same values with the same message. A refused option is
//! kept and reported when the query starts.

use std::collections::BTreeMap;
use std::time::Duration;

use weir_plan::connectors::{self, OptionError, SourceSpec};

use super::offsets::{self, PartitionOffsets, TopicPartition};
use super::StartingOffsets;

/// How the source chooses its topic-partitions (Spark's strategies).
#[derive(Debug, Clone)]
pub(super) enum Strategy {
    /// These topics, every partition.
    Subscribe(Vec<String>),
    /// Topics whose whole name matches (the pattern as written, compiled).
    Pattern(String, regex::Regex),
    /// Exactly these topic-partitions.
    Assign(Vec<TopicPartition>),
}

/// The strategy options, in Spark's spelling, in [`Strategy`]'s order.
const STRATEGIES: [&str; 3] = ["subscribe", "subscribePattern", "assign"];

/// The Kafka source's row of the connector table.
pub(super) fn spec() -> &'static SourceSpec {
    connectors::source("kafka").expect("the connector table has the kafka source")
}

/// Everything the Kafka source is configured with.
#[derive(Debug, Clone)]
pub(super) struct KafkaOptions {
    /// `kafka.bootstrap.servers`.
    pub(super) bootstrap: Option<String>,
    /// The last strategy set.
    pub(super) strategy: Option<Strategy>,
    /// Which of [`STRATEGIES`] were set.
    strategies_set: [bool; 3],
    /// `startingOffsets`.
    pub(super) starting: StartingOffsets,
    /// `startingTimestamp` (wins over `startingOffsets`).
    pub(super) starting_timestamp: Option<i64>,
    /// `startingOffsetsByTimestamp`.
    pub(super) starting_by_timestamp: Option<PartitionOffsets>,
    /// `startingOffsetsByTimestampStrategy=latest`.
    pub(super) by_timestamp_latest: bool,
    /// `maxOffsetsPerTrigger`.
    pub(super) max_offsets: Option<u64>,
    /// `minPartitions` (accepted, not used).
    pub(super) min_partitions: Option<usize>,
    /// `failOnDataLoss`.
    pub(super) fail_on_data_loss: bool,
    /// `includeHeaders`.
    pub(super) include_headers: bool,
    /// `group.id`.
    pub(super) group_id: Option<String>,
    /// `groupIdPrefix`.
    pub(super) group_prefix: String,
    /// `kafka.*`, without the prefix.
    pub(super) kafka_conf: BTreeMap<String, String>,
    /// `kafkaConsumer.pollTimeoutMs`.
    pub(super) poll_timeout: Duration,
    /// The first option refused.
    error: Option<OptionError>,
}

impl KafkaOptions {
    /// Spark's defaults, reading from `bootstrap` if given.
    pub(super) fn new(bootstrap: Option<&str>) -> KafkaOptions {
        KafkaOptions {
            bootstrap: bootstrap.map(str::to_string),
            strategy: None,
            strategies_set: [false; 3],
            starting: StartingOffsets::Latest,
            starting_timestamp: None,
            starting_by_timestamp: None,
            by_timestamp_latest: false,
            max_offsets: None,
            min_partitions: None,
            fail_on_data_loss: true,
            include_headers: false,
            group_id: None,
            group_prefix: "weir-kafka-source".into(),
            kafka_conf: BTreeMap::new(),
            poll_timeout: Duration::from_millis(120_000),
            error: None,
        }
    }

    /// Keeps the first refused option (reported when the query starts).
    pub(super) fn refuse(&mut self, e: OptionError) {
        self.error.get_or_insert(e);
    }

    /// Keeps `r`'s error, if any.
    pub(super) fn keep<T>(&mut self, r: Result<T, OptionError>) -> Option<T> {
        r.map_err(|e| self.refuse(e)).ok()
    }

    /// The configuration is complete and every option was accepted: the
    /// bootstrap servers, or the message saying what is wrong.
    pub(super) fn validate(&self) -> Result<String, String> {
        if let Some(e) = &self.error {
            return Err(e.to_string());
        }
        let bootstrap = match &self.bootstrap {
            Some(b) if !b.trim().is_empty() => b.clone(),
            _ => return Err("kafka.bootstrap.servers is required: KafkaSource::new(\"host:port\") or .option(\"kafka.bootstrap.servers\", ...)".into()),
        };
        spec()
            .check_exactly_one(&STRATEGIES, &self.strategies_set)
            .map_err(|e| e.to_string())?;
        Ok(bootstrap)
    }

    fn set_strategy(&mut self, s: Strategy) {
        let i = match s {
            Strategy::Subscribe(_) => 0,
            Strategy::Pattern(..) => 1,
            Strategy::Assign(_) => 2,
        };
        self.strategies_set[i] = true;
        self.strategy = Some(s);
    }

    /// `subscribe`, spelled `name`.
    pub(super) fn subscribe(&mut self, name: &str, topics: &str) {
        if let Some(list) = self.keep(connectors::topics(name, topics)) {
            self.set_strategy(Strategy::Subscribe(list));
        } else {
            self.strategies_set[0] = true;
        }
    }

    /// `subscribePattern`, spelled `name`: the plan's rule, then the regex.
    pub(super) fn subscribe_pattern(&mut self, name: &str, pattern: &str) {
        self.strategies_set[1] = true;
        if self.keep(connectors::pattern(name, pattern)).is_none() {
            return;
        }
        match regex::Regex::new(&format!("^(?:{pattern})$")) {
            Ok(re) => self.set_strategy(Strategy::Pattern(pattern.to_string(), re)),
            Err(e) => self.refuse(OptionError {
                option: name.to_string(),
                message: format!("`{name}` `{pattern}` is not a regex: {e}"),
                help: String::new(),
            }),
        }
    }

    /// `assign` as JSON text, spelled `name`.
    pub(super) fn assign(&mut self, name: &str, json: &str) {
        self.strategies_set[2] = true;
        if let Some(v) = self.keep(connectors::assign(name, json)) {
            self.set_strategy(Strategy::Assign(v));
        }
    }

    /// `assign` from typed pairs: checked as the JSON option is.
    pub(super) fn assign_partitions(&mut self, partitions: &[(&str, i32)]) {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for (t, p) in partitions {
            topics.entry(t).or_default().push(*p);
        }
        let json = serde_json::to_string(&topics).unwrap_or_default();
        self.assign("assign", &json);
    }

    /// Typed starting offsets: per-partition ones are checked as the
    /// `startingOffsets` JSON is.
    pub(super) fn starting_offsets(&mut self, s: StartingOffsets) {
        if let StartingOffsets::Offsets(o) = &s {
            let json = offsets::to_json(o).to_string();
            if self
                .keep(connectors::starting_offsets("startingOffsets", &json))
                .is_none()
            {
                return;
            }
        }
        self.starting = s;
    }

    /// Sets an option by Spark's name (case-insensitive); `kafka.*` goes to
    /// librdkafka. A refused option is kept for [`KafkaOptions::validate`].
    pub(super) fn set(&mut self, key: &str, value: &str) {
        let r = self.apply(key, value);
        self.keep(r);
    }

    fn apply(&mut self, key: &str, value: &str) -> Result<(), OptionError> {
        let Some(option) = spec().check(key, value)? else {
            // A `kafka.*` option for librdkafka.
            self.kafka_conf
                .insert(key["kafka.".len()..].to_string(), value.to_string());
            return Ok(());
        };
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        match option.name {
            "kafka.bootstrap.servers" => self.bootstrap = Some(value.to_string()),
            "group.id" | "kafka.group.id" => self.group_id = Some(value.to_string()),
            "groupIdPrefix" => self.group_prefix = value.to_string(),
            "subscribe" => self.subscribe(key, value),
            "subscribePattern" => self.subscribe_pattern(key, value),
            "assign" => self.assign(key, value),
            "startingOffsets" => {
                self.starting = match connectors::starting_offsets(key, value)? {
                    connectors::StartingOffsets::Earliest => StartingOffsets::Earliest,
                    connectors::StartingOffsets::Latest => StartingOffsets::Latest,
                    connectors::StartingOffsets::Offsets(o) => {
                        StartingOffsets::Offsets(o.into_iter().collect())
                    }
                }
            }
            "startingTimestamp" => {
                self.starting_timestamp =
                    Some(int(connectors::parse_whole(key, value, i64::MAX as u64)?))
            }
            "startingOffsetsByTimestamp" => {
                self.starting_by_timestamp = Some(
                    connectors::offsets_by_timestamp(key, value)?
                        .into_iter()
                        .collect(),
                )
            }
            "startingOffsetsByTimestampStrategy" => {
                self.by_timestamp_latest = value.trim().eq_ignore_ascii_case("latest")
            }
            "maxOffsetsPerTrigger" => {
                self.max_offsets = Some(connectors::parse_count(key, value, i64::MAX as u64)?)
            }
            "minPartitions" => {
                let n = connectors::parse_count(key, value, u32::MAX as u64)?;
                self.min_partitions = Some(usize::try_from(n).unwrap_or(usize::MAX));
            }
            "failOnDataLoss" => self.fail_on_data_loss = connectors::boolean(key, value)?,
            "includeHeaders" => self.include_headers = connectors::boolean(key, value)?,
            "kafkaConsumer.pollTimeoutMs" => {
                self.poll_timeout =
                    Duration::from_millis(connectors::parse_whole(key, value, u64::MAX)?)
            }
            // stream_query!'s value decoding; the builder decodes with
            // DecodeExt instead.
            other => {
                return Err(OptionError {
                    option: key.to_string(),
                    message: format!("`{other}` is not an option of KafkaSource"),
                    help: "decode the value column with DecodeExt::from_json or from_csv".into(),
                })
            }
        }
        Ok(())
    }

    /// The same configuration reading exactly `partitions` (one scale-out
    /// task's share); starting offsets given per partition keep those of
    /// `partitions`.
    pub(super) fn for_partitions(&self, partitions: &[(String, i32)]) -> KafkaOptions {
        let keep = |m: &PartitionOffsets| -> PartitionOffsets {
            m.iter()
                .filter(|(tp, _)| partitions.contains(tp))
                .map(|(tp, o)| (tp.clone(), *o))
                .collect()
        };
        let mut tps = partitions.to_vec();
        tps.sort();
        tps.dedup();
        let mut o = self.clone();
        o.strategy = Some(Strategy::Assign(tps));
        o.strategies_set = [false, false, true];
        o.starting = match &self.starting {
            StartingOffsets::Offsets(m) => StartingOffsets::Offsets(keep(m)),
            StartingOffsets::ByTimestamp(m) => StartingOffsets::ByTimestamp(keep(m)),
            other => other.clone(),
        };
        o.starting_by_timestamp = self.starting_by_timestamp.as_ref().map(keep);
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(o: &KafkaOptions) -> String {
        o.validate().unwrap_err()
    }

    #[test]
    fn options_use_sparks_names_case_insensitively() {
        let mut o = KafkaOptions::new(None);
        for (k, v) in [
            ("KAFKA.BOOTSTRAP.SERVERS", "h:1"),
            ("subscribepattern", "a.*"),
            ("startingOffsetsByTimestamp", r#"{"a":{"0":5}}"#),
            ("startingOffsetsByTimestampStrategy", "LATEST"),
            ("minPartitions", "4"),
            ("kafkaConsumer.pollTimeoutMs", "500"),
            ("groupIdPrefix", "mine"),
            ("kafka.group.id", "g"),
        ] {
            o.set(k, v);
        }
        assert_eq!(o.validate().unwrap(), "h:1");
        assert!(matches!(&o.strategy, Some(Strategy::Pattern(p, _)) if p == "a.*"));
        assert!(o.by_timestamp_latest);
        assert_eq!(o.min_partitions, Some(4));
        assert_eq!(o.poll_timeout, Duration::from_millis(500));
        assert_eq!(o.group_id.as_deref(), Some("g"));
        assert_eq!(o.group_prefix, "mine");
    }

    /// Each refusal is the plan rule's message for the same value.
    #[test]
    fn refusals_are_the_connector_tables() {
        let cases: &[(&str, &str, OptionError)] = &[
            (
                "assign",
                "{}",
                connectors::assign("assign", "{}").unwrap_err(),
            ),
            (
                "assign",
                r#"{"t":[]}"#,
                connectors::assign("assign", r#"{"t":[]}"#).unwrap_err(),
            ),
            (
                "startingOffsets",
                r#"{"t":{"0":-5}}"#,
                connectors::starting_offsets("startingOffsets", r#"{"t":{"0":-5}}"#).unwrap_err(),
            ),
            (
                "maxOffsetsPerTrigger",
                "0",
                connectors::parse_count("maxOffsetsPerTrigger", "0", i64::MAX as u64).unwrap_err(),
            ),
            (
                "failOnDataLoss",
                "maybe",
                connectors::boolean("failOnDataLoss", "maybe").unwrap_err(),
            ),
            (
                "minOffsetsPerTrigger",
                "5",
                spec().check("minOffsetsPerTrigger", "5").unwrap_err(),
            ),
            // Spark's refusals: the query, not the consumer, decides offsets.
            (
                "kafka.auto.offset.reset",
                "earliest",
                spec()
                    .check("kafka.auto.offset.reset", "earliest")
                    .unwrap_err(),
            ),
            (
                "KAFKA.ENABLE.AUTO.COMMIT",
                "true",
                spec()
                    .check("KAFKA.ENABLE.AUTO.COMMIT", "true")
                    .unwrap_err(),
            ),
        ];
        for (k, v, rule) in cases {
            let mut o = KafkaOptions::new(Some("h:1"));
            o.subscribe("subscribe", "t");
            o.set(k, v);
            assert_eq!(refused(&o), rule.to_string(), "{k}={v}");
        }
        let mut o = KafkaOptions::new(Some("h:1"));
        o.set("format", "json");
        assert_eq!(refused(&o), "`format` is not an option of KafkaSource (decode the value column with DecodeExt::from_json or from_csv)");
    }

    #[test]
    fn typed_values_go_through_the_same_rules() {
        let mut o = KafkaOptions::new(Some("h:1"));
        o.assign_partitions(&[]);
        assert_eq!(
            refused(&o),
            connectors::assign("assign", "{}").unwrap_err().to_string()
        );
        let mut o = KafkaOptions::new(Some("h:1"));
        o.assign_partitions(&[("t", -1)]);
        assert_eq!(
            refused(&o),
            connectors::assign("assign", r#"{"t":[-1]}"#)
                .unwrap_err()
                .to_string()
        );
        let mut o = KafkaOptions::new(Some("h:1"));
        o.assign_partitions(&[("t", 1), ("t", 0), ("t", 1)]);
        assert!(o.validate().is_ok());
        assert!(matches!(&o.strategy, Some(Strategy::Assign(v)) if v.len() == 2));
        let mut o = KafkaOptions::new(Some("h:1"));
        o.subscribe("subscribe", "t");
        o.starting_offsets(StartingOffsets::Offsets(
            [(("t".to_string(), 0), -7)].into_iter().collect(),
        ));
        assert_eq!(
            refused(&o),
            connectors::starting_offsets("startingOffsets", r#"{"t":{"0":-7}}"#)
                .unwrap_err()
                .to_string()
        );
    }

    #[test]
    fn exactly_one_strategy_is_sparks_rule() {
        let both = connectors::exactly_one("kafka", &STRATEGIES, &[true, true, false]).unwrap_err();
        let mut o = KafkaOptions::new(Some("h:1"));
        o.subscribe("subscribe", "a");
        o.subscribe_pattern("subscribePattern", "b.*");
        assert_eq!(refused(&o), both.to_string());
        assert_eq!(refused(&KafkaOptions::new(Some("h:1"))), both.to_string());
        let mut o = KafkaOptions::new(Some("h:1"));
        o.subscribe_pattern("subscribePattern", "(");
        assert!(
            refused(&o).starts_with("`subscribePattern` `(` is not a regex"),
            "{}",
            refused(&o)
        );
        assert!(KafkaOptions::new(None)
            .validate()
            .unwrap_err()
            .contains("kafka.bootstrap.servers is required"));
    }
}
