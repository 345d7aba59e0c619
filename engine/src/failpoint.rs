//! Crash-injection points for the kill tests and the crash matrix
//! (`scripts/crash_matrix.sh`).
//!
//! With `WEIR_FAILPOINT=<point>:<batch id>[:<nth>]` in the environment the
//! process kills itself with SIGKILL (no unwinding, no destructors, no
//! buffered writes flushed: exactly what `kill -9` does) the `nth` time
//! (default 1) that batch `<batch id>` reaches `<point>`; `*` for the batch
//! id counts every batch (a process running several queries or scale-out
//! tasks, whose batch ids are their own). A point reached
//! outside a batch (a sink's open, a cleanup) passes the batch it works for.
//! Unset, a failpoint costs one environment lookup, cached after the first.
//! The hook is compiled into every build (the crash matrix kills the real
//! binary), so never set `WEIR_FAILPOINT` in a production environment.
//!
//! The points, in the order a batch meets them (see its note on the state
//! partitions), are listed in [`POINTS`].

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;

/// Every failpoint name, in the order a batch reaches them (state
/// partitions that commit in their tasks reach `between_state_partitions`
/// before the sink's points; a stream-stream join's and a scale-out
/// task's, after them).
pub const POINTS: &[&str] = &[
    // a source's own log (files seen, rate start) written, offsets/N not yet
    "after_source_log",
    // between a checkpoint temp file's write and its rename
    "before_rename",
    // offsets/N written, nothing of the batch written (its read and
    // computation run meanwhile, see `checkpoint::logged`)
    "after_offsets",
    // the batch's rows read from the sources (offsets/N may still be
    // being written)
    "after_read",
    // file sink: a data file written, the manifest not yet
    "file_sink_after_data",
    // file sink: the manifest written
    "file_sink_after_manifest",
    // Kafka sink: the rows sent, the transaction not committed
    "kafka_after_send",
    // Kafka sink: the transaction committed
    "kafka_after_commit",
    // PostgreSQL sink: rows and marker written, COMMIT not sent
    "postgres_before_commit",
    // Redis sink: before the batch's script runs
    "redis_before_script",
    // Redis sink: after the batch's script ran
    "redis_after_script",
    // the sink committed batch N, state committed after the sink not yet
    "after_sink",
    // one state partition committed, the next not yet
    "between_state_partitions",
    // every state partition committed, commits/N not yet
    "after_state_commit",
    // commits/N written
    "after_commit_log",
    // old versions being removed
    "during_cleanup",
];

struct Armed {
    point: String,
    /// `None`: any batch (`*`).
    batch: Option<i64>,
    nth: u64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let v = std::env::var("WEIR_FAILPOINT").ok()?;
            let mut it = v.split(':');
            let point = it.next()?.to_string();
            let batch = match it.next()? {
                "*" => None,
                b => Some(b.parse().ok()?),
            };
            let nth = match it.next() {
                Some(n) => n.parse().ok()?,
                None => 1,
            };
            Some(Armed { point, batch, nth })
        })
        .as_ref()
}

static CURRENT_BATCH: AtomicI64 = AtomicI64::new(-1);

/// Records the batch the query is working on, for [`failpoint_here`] (code
/// that does not know the batch id, such as a checkpoint file write).
pub fn set_current_batch(batch_id: i64) {
    CURRENT_BATCH.store(batch_id, Ordering::Relaxed);
}

/// [`failpoint`] for the batch last given to [`set_current_batch`].
pub fn failpoint_here(point: &str) {
    if armed().is_some() {
        failpoint(point, CURRENT_BATCH.load(Ordering::Relaxed));
    }
}

/// Kills the process (SIGKILL) when `WEIR_FAILPOINT` names this point and
/// batch and this is the `nth` time it is reached; otherwise does nothing.
pub fn failpoint(point: &str, batch_id: i64) {
    static HITS: AtomicU64 = AtomicU64::new(0);
    let Some(a) = armed() else { return };
    if a.point != point || a.batch.is_some_and(|b| b != batch_id) {
        return;
    }
    if HITS.fetch_add(1, Ordering::SeqCst) + 1 == a.nth {
        eprintln!("weir: failpoint {point} at batch {batch_id}: SIGKILL");
        kill_self();
    }
}

#[cfg(unix)]
fn kill_self() -> ! {
    // SAFETY: kill(2) on our own pid with SIGKILL; it does not return.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    std::process::abort()
}

#[cfg(not(unix))]
fn kill_self() -> ! {
    std::process::abort()
}
