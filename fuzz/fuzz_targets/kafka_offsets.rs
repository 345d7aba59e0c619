//! The Kafka source's offset options and offsets-log entries on arbitrary
//! text: `startingOffsets`, `startingOffsetsByTimestamp` and `assign` (and
//! any other option) through `KafkaSource::option` / `from_options`, the
//! `{"topic":{"partition":offset}}` parser, and the per-trigger limit applied
//! to offsets read back from a (possibly damaged) offsets log: an error,
//! never a panic. No broker is contacted (the source is never opened).
//!
//! Input: one byte choosing the case, then UTF-8 text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_engine::source::kafka::offsets;
use weir_engine::source::{KafkaSource, Source};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 4 {
        // One option by Spark's name: `key=value` (the key chosen from the
        // options that parse JSON or numbers when the text has no `=`).
        0 => {
            let (key, value) = text.split_once('=').unwrap_or(("startingOffsets", text));
            let s = KafkaSource::new("127.0.0.1:1").option(key, value);
            let _ = s.description();
            let _ = s.schema();
        }
        // Several options, one `key=value` per line.
        1 => {
            let opts: Vec<(&str, &str)> = text
                .lines()
                .map(|l| l.split_once('=').unwrap_or((l, "")))
                .collect();
            let s = KafkaSource::from_options(opts);
            let _ = s.description();
        }
        // `assign` and the offsets JSON parsers directly; what parses
        // round-trips through Spark's JSON shape.
        2 => {
            let _ = offsets::parse_assign(text);
            let _ = KafkaSource::new("127.0.0.1:1").option("assign", text);
            let _ = KafkaSource::new("127.0.0.1:1").option("startingOffsetsByTimestamp", text);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
                if let Ok(o) = offsets::from_json(&v) {
                    assert_eq!(offsets::from_json(&offsets::to_json(&o)).unwrap(), o);
                }
            }
        }
        // maxOffsetsPerTrigger over offsets from an offsets-log line (the
        // batch's start) and the broker's ends (non-negative).
        _ => {
            let (limit, json) = text.split_once(' ').unwrap_or(("1000", text));
            let Ok(limit) = limit.parse::<u64>() else {
                return;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
                return;
            };
            let Ok(from) = offsets::from_json(&v) else {
                return;
            };
            let until: offsets::PartitionOffsets = from
                .iter()
                .enumerate()
                .map(|(i, (tp, o))| {
                    (
                        tp.clone(),
                        (o.unsigned_abs() as i64).wrapping_add(i as i64).max(0),
                    )
                })
                .collect();
            // As `latest_offset` passes them: each start at most its end.
            let starts: offsets::PartitionOffsets = from
                .iter()
                .map(|(tp, o)| (tp.clone(), (*o).min(until[tp])))
                .collect();
            let out = offsets::rate_limit(limit, &starts, &until);
            for (tp, o) in &out {
                assert!(*o <= until[tp], "never past the end");
            }
        }
    }
});
