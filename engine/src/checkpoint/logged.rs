//! [`OffsetsLogged`]: what a batch's first durable write waits for.
//!
//! A batch reads its sources and computes while one of the pool's workers
//! writes `offsets/N` (a temp file, fsync, rename and directory fsync
//! locally; a PUT on S3): the read and the computation only fill memory.
//! What the batch writes (a state partition's version, committed in its
//! task) waits until `offsets/N` is durable, so the checkpoint sees the
//! lifecycle's order (`offsets/N`, state N+1, the sink, `commits/N`)
//! whatever the timing. When the write fails (another run logged batch N
//! first, the store went away) no state of the batch is written and the
//! query fails with that write's error.
//!
//! The write must never use the worker pool (no `par_iter`, `join` or
//! `install` on the path to storage): a worker waiting in it could pick up
//! a state partition's task, which would wait for the write below it.

use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Result, WeirError};

/// Whether batch N's `offsets/N` is durable: pending while it is written,
/// then logged or failed for good.
#[derive(Debug)]
pub struct OffsetsLogged {
    batch: i64,
    /// `None` while pending; then whether the entry was written.
    outcome: Mutex<Option<bool>>,
    written: Condvar,
}

/// Held by the thread writing `offsets/N`: [`Logging::logged`] says it is
/// durable; dropped without that (the write failed, or the thread is
/// unwinding), it says the entry was not written, so no task waits forever.
#[must_use = "dropping it says offsets/N was not written"]
pub struct Logging(Arc<OffsetsLogged>);

impl OffsetsLogged {
    /// Batch `batch`'s entry, about to be written: the gate and the writer's
    /// handle.
    pub fn pending(batch: i64) -> (Arc<OffsetsLogged>, Logging) {
        let gate = Arc::new(OffsetsLogged {
            batch,
            outcome: Mutex::new(None),
            written: Condvar::new(),
        });
        (gate.clone(), Logging(gate))
    }

    /// Batch `batch`'s entry, already durable (a batch run again as it was
    /// logged).
    pub fn already(batch: i64) -> Arc<OffsetsLogged> {
        Arc::new(OffsetsLogged {
            batch,
            outcome: Mutex::new(Some(true)),
            written: Condvar::new(),
        })
    }

    /// Waits until the entry is written (`Ok`) or its write failed (an
    /// error: the batch must write nothing).
    pub fn wait(&self) -> Result<()> {
        let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *outcome {
                Some(true) => return Ok(()),
                Some(false) => {
                    return Err(WeirError::Config(format!(
                        "batch {} was not logged (offsets/{} was not written: its write failed or stopped): it writes no state",
                        self.batch, self.batch
                    )))
                }
                None => {
                    outcome = self
                        .written
                        .wait(outcome)
                        .unwrap_or_else(|p| p.into_inner())
                }
            }
        }
    }

    fn settle(&self, written: bool) {
        let mut outcome = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        if outcome.is_none() {
            *outcome = Some(written);
            self.written.notify_all();
        }
    }
}

impl Logging {
    /// `offsets/N` is durable: the batch's writes may go ahead.
    pub fn logged(self) {
        self.0.settle(true);
    }
}

impl Drop for Logging {
    fn drop(&mut self) {
        // After `logged` this changes nothing.
        self.0.settle(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[test]
    fn a_waiter_goes_on_only_once_the_entry_is_logged() {
        let (gate, logging) = OffsetsLogged::pending(7);
        let through = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (gate, through) = (gate.clone(), through.clone());
            std::thread::spawn(move || {
                let r = gate.wait();
                through.store(true, Ordering::SeqCst);
                r
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!through.load(Ordering::SeqCst), "went on before the log");
        logging.logged();
        waiter.join().unwrap().unwrap();
        // Later waiters pass at once.
        gate.wait().unwrap();
    }

    #[test]
    fn a_failed_or_abandoned_write_stops_every_waiter() {
        let (gate, logging) = OffsetsLogged::pending(3);
        let waiter = {
            let gate = gate.clone();
            std::thread::spawn(move || gate.wait())
        };
        // The writer's handle dropped without `logged`: a failed write or a
        // panic on the writing thread.
        drop(logging);
        let err = waiter.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("batch 3 was not logged"), "{err}");
        assert!(gate.wait().is_err());
        OffsetsLogged::already(3).wait().unwrap();
    }
}
