//! The offsets WAL and the commit log: one file per batch id, Spark's layout
//! (`v1` then JSON lines).

use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};

/// The batch id a log file's name stands for: only the canonical decimal
/// form `i64::to_string` writes for a non-negative id (`7`, never `07`, `+7`,
/// `-1`, `7.tmp`). Other names are not log entries (a copy left by an editor
/// or a tool, a temp file) and are ignored, so they can neither shadow nor
/// invent a batch.
pub fn parse_batch_id(name: &str) -> Option<i64> {
    let canonical = !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_digit())
        && (name == "0" || !name.starts_with('0'));
    if !canonical {
        return None;
    }
    name.parse::<i64>().ok()
}

/// A directory of per-batch files named by batch id.
#[derive(Debug, Clone)]
pub struct BatchLog {
    dir: PathBuf,
    sync: bool,
}

/// What `offsets/N` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffsetEntry {
    /// The watermark batch N runs with (ms since epoch).
    #[serde(rename = "batchWatermarkMs")]
    pub batch_watermark_ms: i64,
    /// When batch N was planned (ms since epoch).
    #[serde(rename = "batchTimestampMs")]
    pub batch_timestamp_ms: i64,
    /// Each watermark operator's own watermark, for the multiple-watermark policy.
    #[serde(rename = "operatorWatermarksMs", default)]
    pub operator_watermarks_ms: Vec<Option<i64>>,
    /// The end offset of each source for this batch (null: no data yet).
    #[serde(skip)]
    pub sources: Vec<Option<serde_json::Value>>,
}

/// What `commits/N` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommitEntry {
    /// The watermark the next batch will run with.
    #[serde(rename = "nextBatchWatermarkMs")]
    pub next_batch_watermark_ms: i64,
    /// Each watermark operator's watermark after this batch.
    #[serde(rename = "operatorWatermarksMs", default)]
    pub operator_watermarks_ms: Vec<Option<i64>>,
}

impl BatchLog {
    /// A log in `dir`.
    pub fn new(dir: PathBuf, sync: bool) -> BatchLog {
        BatchLog { dir, sync }
    }

    fn path(&self, batch: i64) -> PathBuf {
        self.dir.join(batch.to_string())
    }

    /// The highest batch id present (names that are not canonical batch ids
    /// are ignored, with a warning for those that look like one).
    pub fn latest(&self) -> Result<Option<i64>> {
        let rd = match fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(WeirError::io(&self.dir, e)),
        };
        let mut best = None;
        for e in rd {
            let e = e.map_err(|e| WeirError::io(&self.dir, e))?;
            let name = e.file_name();
            let name = name.to_string_lossy();
            match parse_batch_id(&name) {
                Some(n) => best = best.max(Some(n)),
                None if name.trim().parse::<i64>().is_ok() => {
                    tracing::warn!(
                        file = %e.path().display(),
                        "ignoring a stray file whose name is not a canonical batch id (e.g. `7`); remove it"
                    );
                }
                None => {}
            }
        }
        Ok(best)
    }

    fn read_lines(&self, batch: i64) -> Result<Option<Vec<String>>> {
        let p = self.path(batch);
        match fs::read_to_string(&p) {
            Ok(t) => {
                let lines: Vec<String> = t.lines().map(str::to_string).collect();
                if lines.first().map(String::as_str) != Some("v1") {
                    return Err(WeirError::checkpoint(&p, "not a weir/Spark v1 log file (damaged or from an unsupported version); delete the checkpoint location to start over"));
                }
                Ok(Some(lines))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(WeirError::io(&p, e)),
        }
    }

    /// Writes `offsets/N`.
    pub fn write_offsets(&self, batch: i64, e: &OffsetEntry) -> Result<()> {
        let mut text = String::from("v1\n");
        text.push_str(&serde_json::to_string(e)?);
        for s in &e.sources {
            text.push('\n');
            text.push_str(&match s {
                Some(v) => serde_json::to_string(v)?,
                None => "-".to_string(),
            });
        }
        super::write_atomic(&self.path(batch), text.as_bytes(), self.sync)
    }

    /// Reads `offsets/N`.
    pub fn read_offsets(&self, batch: i64) -> Result<Option<OffsetEntry>> {
        let Some(lines) = self.read_lines(batch)? else {
            return Ok(None);
        };
        let p = self.path(batch);
        let bad = |e: String| {
            WeirError::checkpoint(&p, format!("damaged offsets entry ({e}); restore it or start with a new checkpoint location"))
        };
        let mut entry: OffsetEntry =
            serde_json::from_str(lines.get(1).ok_or_else(|| bad("no metadata line".into()))?)
                .map_err(|e| bad(e.to_string()))?;
        entry.sources = lines[2..]
            .iter()
            .map(|l| {
                if l == "-" {
                    Ok(None)
                } else {
                    serde_json::from_str(l)
                        .map(Some)
                        .map_err(|e| bad(e.to_string()))
                }
            })
            .collect::<Result<_>>()?;
        Ok(Some(entry))
    }

    /// Writes `commits/N`.
    pub fn write_commit(&self, batch: i64, e: &CommitEntry) -> Result<()> {
        let text = format!("v1\n{}", serde_json::to_string(e)?);
        super::write_atomic(&self.path(batch), text.as_bytes(), self.sync)
    }

    /// Reads `commits/N`.
    pub fn read_commit(&self, batch: i64) -> Result<Option<CommitEntry>> {
        let Some(lines) = self.read_lines(batch)? else {
            return Ok(None);
        };
        let p = self.path(batch);
        let e = serde_json::from_str(lines.get(1).map(String::as_str).unwrap_or(""))
            .map_err(|e| WeirError::checkpoint(&p, format!("damaged commit entry ({e}); restore it or start with a new checkpoint location")))?;
        Ok(Some(e))
    }

    /// Removes entries below `keep_from` (old batches past the retention).
    pub fn purge_before(&self, keep_from: i64) -> Result<()> {
        if let Ok(rd) = fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                if let Some(n) = e.file_name().to_str().and_then(parse_batch_id) {
                    if n < keep_from {
                        let _ = fs::remove_file(e.path());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_names_are_batch_ids() {
        for (name, id) in [("0", Some(0)), ("7", Some(7)), ("120", Some(120))] {
            assert_eq!(parse_batch_id(name), id, "{name}");
        }
        for name in [
            "07", "+7", "-1", "7.tmp", " 7", "7 ", "", "00", "x", "7e0", "-0",
        ] {
            assert_eq!(parse_batch_id(name), None, "{name:?}");
        }
        assert_eq!(parse_batch_id(&i64::MAX.to_string()), Some(i64::MAX));
        assert_eq!(parse_batch_id("9223372036854775808"), None);
    }

    #[test]
    fn stray_names_neither_shadow_nor_invent_a_batch() {
        let dir = tempfile::tempdir().unwrap();
        let log = BatchLog::new(dir.path().to_path_buf(), false);
        let e = CommitEntry {
            next_batch_watermark_ms: 0,
            operator_watermarks_ms: vec![],
        };
        log.write_commit(3, &e).unwrap();
        for stray in ["07", "+7", "-1", "7.tmp", "0009"] {
            std::fs::write(dir.path().join(stray), "junk").unwrap();
        }
        assert_eq!(log.latest().unwrap(), Some(3));
        assert_eq!(log.read_commit(3).unwrap(), Some(e));
        log.purge_before(100).unwrap();
        assert_eq!(log.latest().unwrap(), None);
        assert!(
            dir.path().join("07").exists(),
            "purge leaves stray names alone"
        );
    }
}
