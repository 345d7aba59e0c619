//! The offsets WAL and the commit log: one file (object) per batch id,
//! Spark's layout (`v1` then JSON lines), on the storage layer (a local
//! directory or an object store prefix).
//!
//! Each entry is written once, with a create-once write: a batch's entry is
//! there whole or not at all, and never replaced. A restart re-runs an
//! uncommitted batch with its logged `offsets/N` (it does not write it
//! again), so finding an entry already there when writing means another
//! run of the query is using the checkpoint: that run is refused (Spark's
//! concurrent-run check), instead of both writing.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};
use crate::storage::{Created, Storage};

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
    store: Storage,
    /// The query id, once the checkpoint's metadata is read (for the
    /// concurrent-run error), and the checkpoint's location.
    owner: Arc<OnceLock<String>>,
    checkpoint: String,
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
    /// A log in the local directory `dir`.
    pub fn new(dir: PathBuf, sync: bool) -> BatchLog {
        let checkpoint = dir
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        BatchLog::on(Storage::local(dir, sync), checkpoint, Arc::default())
    }

    /// A log in `store`'s directory, part of the checkpoint at `checkpoint`
    /// (for messages), whose query id `owner` holds once known.
    pub fn on(store: Storage, checkpoint: String, owner: Arc<OnceLock<String>>) -> BatchLog {
        BatchLog {
            store,
            owner,
            checkpoint,
        }
    }

    fn path(&self, batch: i64) -> PathBuf {
        self.store.display_path(&batch.to_string())
    }

    /// The highest batch id present (names that are not canonical batch ids
    /// are ignored, with a warning for those that look like one).
    pub fn latest(&self) -> Result<Option<i64>> {
        let mut best = None;
        for name in self.store.list("")? {
            match parse_batch_id(&name) {
                Some(n) => best = best.max(Some(n)),
                None if name.trim().parse::<i64>().is_ok() => {
                    tracing::warn!(
                        file = %self.store.display_path(&name).display(),
                        "ignoring a stray file whose name is not a canonical batch id (e.g. `7`); remove it"
                    );
                }
                None => {}
            }
        }
        Ok(best)
    }

    /// Writes batch `batch`'s entry once. An entry already there with other
    /// content was written by another run of the query: refused. The same
    /// content is accepted: it is this write's own when a lost answer made
    /// the store's client retry it (S3 then answers 412), and otherwise
    /// another run logged the very same batch (same offsets, planned in the
    /// same millisecond), which this run then runs identically.
    fn create(&self, batch: i64, text: &str) -> Result<()> {
        let name = batch.to_string();
        match self.store.put_create(&name, text.as_bytes())? {
            Created::Created => Ok(()),
            Created::Exists if self.store.get(&name)?.as_deref() == Some(text.as_bytes()) => Ok(()),
            Created::Exists => {
                let query = match self.owner.get() {
                    Some(id) => format!("query {id}"),
                    None => "this query".to_string(),
                };
                Err(WeirError::checkpoint(
                    self.path(batch),
                    format!(
                        "another run of {query} is writing to checkpoint {}; only one run may use a checkpoint (it wrote batch {batch}'s entry first). Stop the other run before starting this one, or give a copy of the query its own checkpoint location",
                        self.checkpoint
                    ),
                ))
            }
        }
    }

    fn read_lines(&self, batch: i64) -> Result<Option<Vec<String>>> {
        let Some(bytes) = self.store.get(&batch.to_string())? else {
            return Ok(None);
        };
        let p = self.path(batch);
        let damaged = || {
            WeirError::checkpoint(&p, "not a weir/Spark v1 log file (damaged or from an unsupported version); delete the checkpoint location to start over")
        };
        let t = String::from_utf8(bytes).map_err(|_| damaged())?;
        let lines: Vec<String> = t.lines().map(str::to_string).collect();
        if lines.first().map(String::as_str) != Some("v1") {
            return Err(damaged());
        }
        Ok(Some(lines))
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
        self.create(batch, &text)
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
        self.create(batch, &text)
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
    /// Best effort: what cannot be removed now is warned about and removed
    /// by a later purge.
    pub fn purge_before(&self, keep_from: i64) -> Result<()> {
        self.purge_before_while(keep_from, || true)
    }

    /// [`BatchLog::purge_before`], stopping before the next entry once
    /// `go_on` says no (what is left is removed by a later purge).
    pub(crate) fn purge_before_while(
        &self,
        keep_from: i64,
        go_on: impl Fn() -> bool,
    ) -> Result<()> {
        if !go_on() {
            return Ok(());
        }
        let names = match self.store.list("") {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!("cannot list old log entries to remove: {e}");
                return Ok(());
            }
        };
        for name in names {
            if parse_batch_id(&name).is_some_and(|n| n < keep_from) {
                if !go_on() {
                    break;
                }
                if let Err(e) = self.store.delete(&name) {
                    tracing::warn!("cannot remove an old log entry: {e}");
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

    #[test]
    fn an_entry_is_written_once_and_another_runs_entry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let owner: Arc<OnceLock<String>> = Arc::default();
        owner.set("q-1".into()).unwrap();
        let store = Storage::local(dir.path().join("offsets"), false);
        let mine = BatchLog::on(store.clone(), "chk".into(), owner.clone());
        let theirs = BatchLog::on(store, "chk".into(), owner);
        let entry = |ts| OffsetEntry {
            batch_watermark_ms: 0,
            batch_timestamp_ms: ts,
            operator_watermarks_ms: vec![],
            sources: vec![Some(serde_json::json!(5))],
        };
        mine.write_offsets(3, &entry(100)).unwrap();
        let err = theirs
            .write_offsets(3, &entry(200))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("another run of query q-1 is writing to checkpoint chk; only one run may use a checkpoint"),
            "{err}"
        );
        assert_eq!(
            mine.read_offsets(3).unwrap(),
            Some(entry(100)),
            "the first entry is kept"
        );
        // The same entry again (a retried write that had succeeded) is fine.
        theirs.write_offsets(3, &entry(100)).unwrap();
        let c = CommitEntry {
            next_batch_watermark_ms: 1,
            operator_watermarks_ms: vec![],
        };
        let commits = BatchLog::new(dir.path().join("commits"), true);
        commits.write_commit(3, &c).unwrap();
        let other = CommitEntry {
            next_batch_watermark_ms: 2,
            ..c.clone()
        };
        let err = commits.write_commit(3, &other).unwrap_err().to_string();
        assert!(err.contains("another run of this query"), "{err}");
        assert_eq!(commits.read_commit(3).unwrap(), Some(c));
    }
}
