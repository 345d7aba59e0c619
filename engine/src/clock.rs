//! The clock a session reads time from (Spark's `Clock`): the system clock,
//! or a [`ManualClock`] that moves only when a test advances it, so
//! processing-time triggers and the rate source can be tested without
//! waiting in real time (Spark's `StreamManualClock`).

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A source of the current time, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    /// The time now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
    /// A short name for debug output (`system`, `manual`).
    fn name(&self) -> &'static str;
    /// This clock as a [`ManualClock`], when it is one: time then moves
    /// only when it is advanced, so whoever waits for a time waits on it
    /// ([`ManualClock::wait_till`]) rather than sleeping in real time.
    fn as_manual(&self) -> Option<&ManualClock> {
        None
    }
}

/// The system's wall clock (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }

    fn name(&self) -> &'static str {
        "system"
    }
}

/// A clock that moves only when [`ManualClock::advance`]d, waking whoever
/// waits on it (Spark's `ManualClock`).
#[derive(Debug, Default)]
pub struct ManualClock {
    state: Mutex<ManualState>,
    cond: Condvar,
}

#[derive(Debug, Default)]
struct ManualState {
    now_ms: i64,
    /// The clock's time when the current waiter started waiting (or last
    /// woke and went on waiting); `None` when nobody waits.
    waiting_since: Option<i64>,
}

impl ManualClock {
    /// A clock reading `start_ms` (milliseconds since the Unix epoch).
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock {
            state: Mutex::new(ManualState {
                now_ms: start_ms,
                waiting_since: None,
            }),
            cond: Condvar::new(),
        }
    }

    /// Moves the clock forward by `d` and wakes whoever waits on it.
    pub fn advance(&self, d: Duration) {
        let mut st = self.state.lock().unwrap();
        st.now_ms = st
            .now_ms
            .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        self.cond.notify_all();
    }

    /// Waits until the clock reads at least `target_ms`, or `max` of real
    /// time passes, whichever comes first; returns the clock's time.
    pub fn wait_till(&self, target_ms: i64, max: Duration) -> i64 {
        let deadline = Instant::now() + max;
        let mut st = self.state.lock().unwrap();
        while st.now_ms < target_ms {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            st.waiting_since = Some(st.now_ms);
            st = self.cond.wait_timeout(st, deadline - now).unwrap().0;
        }
        st.waiting_since = None;
        st.now_ms
    }

    /// Whether someone waits on the clock, having started (or gone on)
    /// waiting when it read `time_ms` or later: after an advance to
    /// `time_ms`, the waiter has seen it (Spark's `isStreamWaitingAt`).
    pub fn is_waiting_at(&self, time_ms: i64) -> bool {
        self.state
            .lock()
            .unwrap()
            .waiting_since
            .is_some_and(|t| t >= time_ms)
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.state.lock().unwrap().now_ms
    }

    fn name(&self) -> &'static str {
        "manual"
    }

    fn as_manual(&self) -> Option<&ManualClock> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn manual_clock_moves_only_when_advanced() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(c.now_ms(), 1_000);
        c.advance(Duration::from_secs(10));
        assert_eq!(c.now_ms(), 11_000);
        c.advance(Duration::from_millis(5));
        assert_eq!(c.now_ms(), 11_005);
    }

    #[test]
    fn manual_clock_wakes_its_waiter() {
        let c = Arc::new(ManualClock::new(0));
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || c.wait_till(10_000, Duration::from_secs(60)))
        };
        // The waiter is waiting at time 0 and not past it.
        let start = Instant::now();
        while !c.is_waiting_at(0) {
            assert!(start.elapsed() < Duration::from_secs(10), "never waited");
            std::thread::sleep(Duration::from_millis(1));
        }
        c.advance(Duration::from_secs(5));
        // Not there yet: it goes on waiting, now at time 5000.
        while !c.is_waiting_at(5_000) {
            assert!(start.elapsed() < Duration::from_secs(10), "not woken");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!waiter.is_finished());
        c.advance(Duration::from_secs(5));
        assert_eq!(waiter.join().unwrap(), 10_000);
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(!c.is_waiting_at(0));
    }

    #[test]
    fn manual_clock_wait_gives_up_after_real_time() {
        let c = ManualClock::new(0);
        let start = Instant::now();
        assert_eq!(c.wait_till(1_000, Duration::from_millis(30)), 0);
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn system_clock_reads_wall_time() {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        assert!((SystemClock.now_ms() - wall).abs() < 5_000);
        assert!(SystemClock.as_manual().is_none());
    }
}
