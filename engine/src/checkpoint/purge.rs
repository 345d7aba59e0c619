//! Removing the logs' old entries (`offsets/N`, `commits/N` more than
//! `spark.sql.streaming.minBatchesToRetain` batches old), every 10th batch.
//!
//! As in Spark (`spark.sql.streaming.asyncLogPurge.enabled`, default
//! true), a purge runs on a thread of the query's own, off the batches'
//! path: it lists both logs and removes their old entries, which on an
//! object store is a LIST and a DELETE per entry, round trips a batch
//! would otherwise wait for every 10th batch. One purge at a time: a purge
//! asked for while the last still runs is skipped (the next one removes
//! what it would have). When the query ends, its purge under way finishes
//! first, for up to [`GRACE`] (Spark's executor shutdown waits as long):
//! past that it stops before its next request, so a store that went away
//! holds the query's end for the one request under way at most. Disabled, the
//! batch that asks for a purge runs it itself.
//!
//! A purge is best effort either way: an entry that cannot be removed is
//! warned about and removed by a later purge. Only entries older than the
//! retained batches are removed, never one a restart reads, so a crash
//! during a purge (or while one waits) loses nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::log::BatchLog;
use crate::failpoint::failpoint;

/// Batches between two purges.
pub(crate) const INTERVAL: i64 = 10;

/// How long the end of a query waits for its purge under way.
pub(crate) const GRACE: Duration = Duration::from_secs(30);

/// The purge thread's queue (batch id, first entry kept) and its handle.
type PurgeThread = (SyncSender<(i64, i64)>, JoinHandle<()>);

/// A query's purges of its offsets and commit logs.
pub(crate) struct LogPurge {
    logs: Arc<[BatchLog; 2]>,
    /// Batches kept: `minBatchesToRetain`, at least 1 (Spark's rule).
    retain: i64,
    asynchronous: bool,
    /// Set while a purge is asked for or runs.
    running: Arc<AtomicBool>,
    /// When the purge under way stops (set when the query ends).
    stop_at: Arc<OnceLock<Instant>>,
    /// The purge thread and its queue, once a purge was asked for.
    thread: Option<PurgeThread>,
}

impl LogPurge {
    /// Purges `offsets` and `commits` of all but the last `retain`
    /// batches (`minBatchesToRetain`); on a thread of its own when
    /// `asynchronous` (`spark.sql.streaming.asyncLogPurge.enabled`).
    pub(crate) fn new(
        offsets: BatchLog,
        commits: BatchLog,
        retain: u64,
        asynchronous: bool,
    ) -> LogPurge {
        LogPurge {
            logs: Arc::new([offsets, commits]),
            // (At least 1: the batch just committed and the one before it
            // are kept.)
            retain: i64::try_from(retain).unwrap_or(i64::MAX).max(1),
            asynchronous,
            running: Arc::new(AtomicBool::new(false)),
            stop_at: Arc::default(),
            thread: None,
        }
    }

    /// After batch `batch_id` committed: every [`INTERVAL`]th batch, once
    /// more than the retained batches ran, removes the entries of the
    /// batches before them.
    pub(crate) fn after_batch(&mut self, batch_id: i64) {
        if batch_id < self.retain || batch_id % INTERVAL != 0 {
            return;
        }
        let keep_from = batch_id - self.retain;
        if !self.asynchronous {
            purge(&self.logs, batch_id, keep_from, &|| true);
            return;
        }
        if self.running.swap(true, Ordering::AcqRel) {
            tracing::debug!("batch {batch_id}: the last log purge still runs, this one is skipped");
            return;
        }
        if self.thread.is_none() {
            match self.spawn() {
                Ok(t) => self.thread = Some(t),
                Err(e) => {
                    tracing::warn!("cannot start the log purge thread ({e}); this batch purges the logs itself");
                    purge(&self.logs, batch_id, keep_from, &|| true);
                    self.running.store(false, Ordering::Release);
                    return;
                }
            }
        }
        if let Some((queue, _)) = &self.thread {
            // Never full (one purge at a time) nor closed (the thread
            // outlives its purges' panics).
            if let Err(e) = queue.try_send((batch_id, keep_from)) {
                tracing::warn!("batch {batch_id}: the log purge was not handed over ({e})");
                self.running.store(false, Ordering::Release);
            }
        }
    }

    fn spawn(&self) -> std::io::Result<PurgeThread> {
        let (tx, rx) = sync_channel::<(i64, i64)>(1);
        let (logs, running, stop_at) = (
            self.logs.clone(),
            self.running.clone(),
            self.stop_at.clone(),
        );
        let handle = std::thread::Builder::new()
            .name("weir-log-purge".into())
            .spawn(move || {
                let go_on = || stop_at.get().is_none_or(|t| Instant::now() < *t);
                for (batch_id, keep_from) in rx {
                    // A panic (a bug) costs this purge, not the later ones.
                    let purged = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        purge(&logs, batch_id, keep_from, &go_on)
                    }));
                    if let Err(p) = purged {
                        tracing::warn!(
                            "batch {batch_id}'s log purge panicked: {}",
                            crate::error::panic_message(p.as_ref())
                        );
                    }
                    running.store(false, Ordering::Release);
                }
            })?;
        Ok((tx, handle))
    }

    /// Waits for the purge under way, if any (for up to [`GRACE`]), and
    /// ends the thread.
    pub(crate) fn finish(&mut self) {
        self.finish_within(GRACE);
    }

    fn finish_within(&mut self, grace: Duration) {
        if let Some((queue, handle)) = self.thread.take() {
            // (The thread keeps this deadline; a later one gets its own.)
            let _ = std::mem::take(&mut self.stop_at).set(Instant::now() + grace);
            drop(queue);
            if handle.join().is_err() {
                tracing::warn!("the log purge thread panicked");
            }
        }
    }
}

impl Drop for LogPurge {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Removes the entries before `keep_from` from both logs, for batch
/// `batch_id`, while `go_on` says so.
fn purge(logs: &[BatchLog; 2], batch_id: i64, keep_from: i64, go_on: &dyn Fn() -> bool) {
    let [offsets, commits] = logs;
    // (Best effort: each entry that cannot be removed is warned about.)
    let _ = offsets.purge_before_while(keep_from, go_on);
    failpoint("during_cleanup", batch_id);
    let _ = commits.purge_before_while(keep_from, go_on);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::log::CommitEntry;

    fn log(dir: &std::path::Path, name: &str) -> BatchLog {
        BatchLog::new(dir.join(name), false)
    }

    fn entry() -> CommitEntry {
        CommitEntry {
            next_batch_watermark_ms: 0,
            operator_watermarks_ms: vec![],
        }
    }

    fn ids(dir: &std::path::Path, name: &str) -> Vec<i64> {
        let mut v: Vec<i64> = std::fs::read_dir(dir.join(name))
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str()?.parse().ok())
            .collect();
        v.sort();
        v
    }

    /// Both logs with entries 0..n, and their purge.
    fn logs(dir: &std::path::Path, n: i64, retain: u64, asynchronous: bool) -> LogPurge {
        let (offsets, commits) = (log(dir, "offsets"), log(dir, "commits"));
        for b in 0..n {
            offsets.write_commit(b, &entry()).unwrap();
            commits.write_commit(b, &entry()).unwrap();
        }
        LogPurge::new(offsets, commits, retain, asynchronous)
    }

    #[test]
    fn every_tenth_batch_removes_both_logs_entries_before_the_retained_ones() {
        for asynchronous in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut purge = logs(dir.path(), 25, 5, asynchronous);
            // Not a tenth batch, or fewer batches than retained: nothing.
            purge.after_batch(24);
            purge.after_batch(0);
            purge.finish();
            assert_eq!(ids(dir.path(), "offsets").len(), 25);
            purge.after_batch(20);
            purge.finish();
            let kept: Vec<i64> = (15..25).collect();
            assert_eq!(ids(dir.path(), "offsets"), kept, "async {asynchronous}");
            assert_eq!(ids(dir.path(), "commits"), kept, "async {asynchronous}");
        }
    }

    #[test]
    fn a_query_ending_waits_for_its_purge_under_way() {
        // Enough entries that removing them takes a while: dropped right
        // after asking, the purge has finished all the same.
        let dir = tempfile::tempdir().unwrap();
        let mut purge = logs(dir.path(), 2000, 10, true);
        purge.after_batch(1990);
        drop(purge);
        assert_eq!(ids(dir.path(), "offsets"), (1980..2000).collect::<Vec<_>>());
        assert_eq!(ids(dir.path(), "commits"), (1980..2000).collect::<Vec<_>>());
    }

    /// Waits (10 s at most) until no purge runs.
    fn settled(purge: &LogPurge) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while purge.running.load(Ordering::Acquire) {
            assert!(Instant::now() < deadline, "the purge did not end");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn one_thread_runs_the_purges_one_after_the_other() {
        let dir = tempfile::tempdir().unwrap();
        let mut purge = logs(dir.path(), 40, 5, true);
        purge.after_batch(20);
        settled(&purge);
        assert_eq!(ids(dir.path(), "commits"), (15..40).collect::<Vec<_>>());
        purge.after_batch(30);
        settled(&purge);
        assert_eq!(ids(dir.path(), "offsets"), (25..40).collect::<Vec<_>>());
        assert_eq!(ids(dir.path(), "commits"), (25..40).collect::<Vec<_>>());
        purge.finish();
    }

    #[test]
    fn a_purge_past_the_end_of_its_grace_removes_nothing_more() {
        let dir = tempfile::tempdir().unwrap();
        let mut purge = logs(dir.path(), 2000, 10, true);
        // The query's end and its grace came and went before the purge started.
        purge.stop_at.set(Instant::now()).unwrap();
        purge.after_batch(1990);
        settled(&purge);
        purge.finish();
        assert_eq!(ids(dir.path(), "offsets").len(), 2000);
        assert_eq!(ids(dir.path(), "commits").len(), 2000);
    }

    #[test]
    fn retaining_no_batch_is_retaining_one() {
        let dir = tempfile::tempdir().unwrap();
        let mut purge = logs(dir.path(), 11, 0, false);
        purge.after_batch(10);
        assert_eq!(ids(dir.path(), "offsets"), vec![9, 10]);
    }

    #[test]
    fn a_purge_asked_for_while_one_runs_is_skipped_and_the_next_catches_up() {
        let dir = tempfile::tempdir().unwrap();
        let mut purge = logs(dir.path(), 100, 10, true);
        // As if a purge ran: the one asked for now is skipped.
        purge.running.store(true, Ordering::Release);
        purge.after_batch(50);
        assert!(purge.thread.is_none(), "no purge started");
        assert_eq!(ids(dir.path(), "offsets").len(), 100);
        purge.running.store(false, Ordering::Release);
        purge.after_batch(60);
        purge.finish();
        assert_eq!(ids(dir.path(), "offsets"), (50..100).collect::<Vec<_>>());
        assert_eq!(ids(dir.path(), "commits"), (50..100).collect::<Vec<_>>());
    }
}
