//! SIGTERM and SIGINT stop every active query gracefully (the seed's "kill
//! gracefully"): each query's running batch finishes and commits, then the
//! query ends as with [`StreamingQuery::stop`], so a restart from its
//! checkpoint resumes after the last committed batch and runs none twice.
//!
//! - On for every session with `spark.sql.streaming.weir.stopOnSignal=true`
//!   (the default); the handling is installed once per process, on a thread
//!   of its own (`weir-signals`), when the first such session is built.
//! - The queries stopped are those of such sessions; each ended query's
//!   [`await_termination`](StreamingQuery::await_termination) returns
//!   `Ok(true)` (a stop, not a failure) and the program's own code carries
//!   on: `main` returning after it ends the process with status 0.
//! - `spark.sql.streaming.stopTimeout` (milliseconds; default 0: wait as long
//!   as it takes, as Spark) bounds the wait; a query still running after it
//!   is left as it is and the process ends as the signal would have ended it
//!   (status 143 for SIGTERM, 130 for SIGINT): its uncommitted batch runs
//!   again on restart. Orchestrators kill after their own grace period
//!   (Kubernetes: 30 s), so set the timeout below it.
//! - A signal while the queries are stopping, or when no such query is
//!   active, has its default effect: the process ends at once. So a second
//!   Ctrl-C ends a program whatever it is doing.
//!
//! A program that handles these signals itself sets `stopOnSignal=false`
//! on its sessions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::query::{QueryHost, StreamingQuery};

/// The sessions whose queries a signal stops (each by its query host).
static SESSIONS: Mutex<Vec<Weak<QueryHost>>> = Mutex::new(Vec::new());
/// Whether the signal thread runs (set once per process).
static INSTALLED: OnceLock<bool> = OnceLock::new();
/// A graceful stop is under way.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Has SIGTERM and SIGINT stop the queries of the session whose query host
/// is `host` (installs the handling on first use).
pub(crate) fn watch(host: &Arc<QueryHost>) {
    {
        let mut list = SESSIONS.lock().unwrap_or_else(|p| p.into_inner());
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(host));
    }
    INSTALLED.get_or_init(install);
}

/// Whether SIGTERM and SIGINT are handled by weir in this process.
pub fn installed() -> bool {
    INSTALLED.get().copied().unwrap_or(false)
}

fn install() -> bool {
    let mut signals = match Signals::new([SIGTERM, SIGINT]) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(
                "cannot handle SIGTERM/SIGINT ({e}): queries will not stop gracefully on them"
            );
            return false;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                on_signal(sig);
            }
        });
    match spawned {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!("cannot start the signal thread ({e}): queries will not stop gracefully on SIGTERM/SIGINT");
            false
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGTERM => "SIGTERM",
        SIGINT => "SIGINT",
        _ => "signal",
    }
}

/// The active queries of the watched sessions, each with its session's
/// stop timeout (None: no limit).
fn active_queries() -> Vec<(StreamingQuery, Option<Duration>)> {
    let sessions: Vec<Arc<QueryHost>> = SESSIONS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    sessions
        .iter()
        .filter(|s| s.conf().stop_on_signal)
        .flat_map(|s| {
            let t = s.conf().stop_timeout;
            let limit = (!t.is_zero()).then_some(t);
            s.active().into_iter().map(move |q| (q, limit))
        })
        .collect()
}

/// Ends the process as `sig` would have without weir's handling.
fn default_effect(sig: i32) {
    if let Err(e) = signal_hook::low_level::emulate_default_handler(sig) {
        tracing::warn!("cannot re-raise {}: {e}", signal_name(sig));
    }
    std::process::exit(128 + sig);
}

fn on_signal(sig: i32) {
    if STOPPING.load(Ordering::SeqCst) {
        tracing::warn!(
            "{} while stopping the queries: ending now",
            signal_name(sig)
        );
        default_effect(sig);
    }
    let queries = active_queries();
    if queries.is_empty() {
        default_effect(sig);
    }
    STOPPING.store(true, Ordering::SeqCst);
    tracing::info!(
        "{}: stopping {} streaming queries gracefully (the running batches finish and commit)",
        signal_name(sig),
        queries.len()
    );
    // The stop runs on its own thread, so a second signal is seen meanwhile.
    let stopper = std::thread::Builder::new()
        .name("weir-signal-stop".into())
        .spawn(move || stop_all(sig, queries));
    if let Err(e) = stopper {
        tracing::warn!("cannot start the stopping thread ({e})");
        default_effect(sig);
    }
}

fn stop_all(sig: i32, queries: Vec<(StreamingQuery, Option<Duration>)>) {
    let start = Instant::now();
    let mut running = Vec::new();
    for (q, limit) in queries {
        let q2 = q.clone();
        match std::thread::Builder::new()
            .name("weir-stop".into())
            .spawn(move || q2.stop())
        {
            Ok(h) => running.push((q, limit, h)),
            Err(e) => {
                tracing::warn!(query = %q.id(), "cannot start a thread to stop the query: {e}")
            }
        }
    }
    loop {
        // Late: still stopping past the limit, or `stop()` gave up at the
        // limit (`WeirError::StopTimeout`) with the query still running.
        let late: Vec<&StreamingQuery> = running
            .iter()
            .filter(|(q, limit, h)| {
                if h.is_finished() {
                    q.is_active()
                } else {
                    limit.is_some_and(|l| start.elapsed() >= l)
                }
            })
            .map(|(q, _, _)| q)
            .collect();
        if !late.is_empty() {
            tracing::error!(
                "{}: queries {:?} did not stop within spark.sql.streaming.stopTimeout: ending the process (their running batch runs again on restart)",
                signal_name(sig),
                late.iter().map(|q| q.name().unwrap_or(q.id())).collect::<Vec<_>>()
            );
            default_effect(sig);
        }
        if running.iter().all(|(_, _, h)| h.is_finished()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::info!(
        "{}: {} streaming queries stopped gracefully",
        signal_name(sig),
        running.len()
    );
    STOPPING.store(false, Ordering::SeqCst);
}
