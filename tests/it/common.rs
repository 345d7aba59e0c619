//! Helpers shared by the integration tests.

use weir::arrow::array::{Array, AsArray};
use weir::arrow::datatypes::{DataType, TimeUnit};
use weir::arrow::record_batch::RecordBatch;

/// One cell as JSON, in the conformance files' conventions (timestamps as
/// ISO-8601 UTC with `Z`, windows as `{"start", "end"}`).
pub fn cell_json(a: &dyn Array, i: usize) -> serde_json::Value {
    use serde_json::Value;
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            let us = a
                .as_primitive::<weir::arrow::datatypes::TimestampMicrosecondType>()
                .value(i);
            Value::String(iso(us))
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let mut m = serde_json::Map::new();
            for (f, c) in fields.iter().zip(s.columns()) {
                m.insert(f.name().clone(), cell_json(c.as_ref(), i));
            }
            Value::Object(m)
        }
        DataType::Int64 => Value::from(
            a.as_primitive::<weir::arrow::datatypes::Int64Type>()
                .value(i),
        ),
        DataType::Int32 => Value::from(
            a.as_primitive::<weir::arrow::datatypes::Int32Type>()
                .value(i),
        ),
        DataType::Float64 => Value::from(
            a.as_primitive::<weir::arrow::datatypes::Float64Type>()
                .value(i),
        ),
        DataType::Boolean => Value::from(a.as_boolean().value(i)),
        DataType::Utf8 => Value::from(a.as_string::<i32>().value(i)),
        other => Value::String(format!("<{other}>")),
    }
}

/// Microseconds since the epoch as `2024-01-01T12:00:00Z`.
pub fn iso(us: i64) -> String {
    let t = chrono::DateTime::from_timestamp_micros(us).unwrap();
    if us % 1_000_000 == 0 {
        t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }
}

/// Rows of batches as JSON objects.
pub fn rows_json(batches: &[RecordBatch]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let mut m = serde_json::Map::new();
            for (f, c) in b.schema().fields().iter().zip(b.columns()) {
                m.insert(f.name().clone(), cell_json(c.as_ref(), i));
            }
            out.push(serde_json::Value::Object(m));
        }
    }
    out
}

/// Parses an ISO-8601 instant to epoch milliseconds.
pub fn iso_ms(s: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap()
        .timestamp_millis()
}

/// The events schema most tests use: `ts`, `key`, `value`.
pub fn fields() -> Vec<weir::plan::Field> {
    use weir::plan::{DataType, Field};
    vec![
        Field::new("ts", DataType::Timestamp),
        Field::new("key", DataType::String),
        Field::new("value", DataType::Int64),
    ]
}

/// A session whose checkpoint files are not fsync'd (tests need no durability).
pub fn session() -> weir::Session {
    weir::Session::with_config(weir::SessionConfig {
        fsync_checkpoint: false,
        ..weir::SessionConfig::default()
    })
}

/// A child process a test started, never left running behind the test:
/// [`TestChild::wait_within`] and [`TestChild::wait_or_kill`] wait with
/// `try_wait` until a deadline and kill it (SIGKILL) past it, and dropping
/// it (a failed assertion on the way) kills it too. Use it for every child
/// a test spawns: a hung child otherwise hangs the whole test run.
pub struct TestChild {
    child: std::process::Child,
    /// In a process group of its own, which is killed whole.
    group: bool,
}

impl TestChild {
    /// This test binary running only its test `name` (`--exact`, one
    /// thread), with `envs` set and its output discarded: the usual way a
    /// test runs part of itself in another process (to kill it, signal it,
    /// or give it other environment variables).
    pub fn of_test(name: &str, envs: &[(&str, String)]) -> TestChild {
        TestChild::spawn(
            TestChild::test_command(name, envs)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null()),
        )
    }

    /// [`TestChild::of_test`] with its output (stdout and stderr) kept in
    /// the file `log`, for the test to show when it fails.
    pub fn of_test_logged(name: &str, envs: &[(&str, String)], log: &std::path::Path) -> TestChild {
        let out = std::fs::File::create(log)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let err = out.try_clone().unwrap();
        TestChild::spawn(TestChild::test_command(name, envs).stdout(out).stderr(err))
    }

    /// This test binary, to run only its test `name`, with `envs` set.
    fn test_command(name: &str, envs: &[(&str, String)]) -> std::process::Command {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", name, "--nocapture", "--test-threads=1"])
            .envs(envs.iter().map(|(k, v)| (*k, v.as_str())));
        cmd
    }

    /// Starts `cmd`.
    pub fn spawn(cmd: &mut std::process::Command) -> TestChild {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        TestChild {
            child,
            group: false,
        }
    }

    /// Starts `cmd` in a process group of its own, killed whole at the
    /// deadline: for a program that starts processes of its own (Chromium),
    /// which would otherwise outlive it. An error if it cannot start.
    pub fn spawn_group(cmd: &mut std::process::Command) -> std::io::Result<TestChild> {
        use std::os::unix::process::CommandExt;
        let child = cmd.process_group(0).spawn()?;
        Ok(TestChild { child, group: true })
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends the child signal `signal` (a name, as `kill -s` takes it:
    /// "TERM", "INT").
    pub fn signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .args(["-s", signal, &self.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -s {signal} {}: {sent}", self.id());
    }

    /// The child, taken to read its output pipes (it stays owned here).
    pub fn child_mut(&mut self) -> &mut std::process::Child {
        &mut self.child
    }

    /// Waits up to `limit` for the child to end: `Ok(its status)`; or, when
    /// it still runs then, kills it and returns `Err(the status it ended
    /// with)` (SIGKILL).
    pub fn wait_or_kill(
        &mut self,
        limit: std::time::Duration,
    ) -> Result<std::process::ExitStatus, std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Ok(s);
            }
            if std::time::Instant::now() >= deadline {
                self.kill();
                return Err(self.child.wait().unwrap());
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Waits up to `limit` for the child to end, and fails the test,
    /// naming `what` the child is, when it does not (it is killed first).
    pub fn wait_within(
        &mut self,
        limit: std::time::Duration,
        what: &str,
    ) -> std::process::ExitStatus {
        self.wait_or_kill(limit).unwrap_or_else(|_| {
            panic!("{what}: the child process was still running after {limit:?}; it was killed")
        })
    }

    fn kill(&mut self) {
        if self.group {
            let _ = std::process::Command::new("kill")
                .args(["-s", "KILL", "--", &format!("-{}", self.id())])
                .status();
        }
        let _ = self.child.kill();
    }
}

impl Drop for TestChild {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            self.kill();
            let _ = self.child.wait();
        } else if self.group {
            // Processes the child started may outlive it.
            self.kill();
        }
    }
}

/// Runs test `name` of this test binary in a child process with `envs` set
/// (one of them a `WEIR_FAILPOINT`), and asserts the child was killed by
/// SIGKILL at its failpoint (not a panic, not a normal end) within 120 s.
pub fn run_child_killed_at_failpoint(name: &str, envs: &[(&str, String)]) {
    let status = TestChild::of_test(name, envs).wait_within(
        std::time::Duration::from_secs(120),
        &format!("{name}, meant to be killed at its failpoint ({envs:?})"),
    );
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "{name}: the child was meant to be killed (SIGKILL) at its failpoint ({envs:?}): {status}"
    );
}

/// Puts a file into a directory a running query watches, whole: written
/// beside the directory, then renamed in (a file source may list a file
/// while it is being written, as Spark's does; users move files in too).
pub fn move_file_in(dir: &std::path::Path, name: &str, contents: &str) {
    let tmp = dir
        .parent()
        .expect("the watched directory has a parent")
        .join(format!(".{name}.partial"));
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, dir.join(name)).unwrap();
}

/// One event of the [`fields`] schema: minutes after 2024-01-01 12:00, a
/// key `k<key>`, a value.
pub fn event(minute: i64, key: u8, value: i64) -> serde_json::Value {
    serde_json::json!({
        "ts": iso((1_704_110_400 + minute * 60) * 1_000_000),
        "key": format!("k{key}"),
        "value": value,
    })
}

/// At least `min` (and fewer than 6) batches of [`event`]s moving forward
/// in time with disorder: each batch's events lie around its own time,
/// some far behind (late).
pub fn disordered_batches(
    min: usize,
) -> impl proptest::strategy::Strategy<Value = Vec<Vec<serde_json::Value>>> {
    use proptest::prelude::*;
    prop::collection::vec(
        prop::collection::vec((-30i64..15, 0u8..6, 0i64..4), 0..25),
        min..6,
    )
    .prop_map(|batches| {
        batches
            .into_iter()
            .enumerate()
            .map(|(b, evs)| {
                evs.into_iter()
                    .map(|(dt, k, v)| event(b as i64 * 12 + dt, k, v))
                    .collect()
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::TestChild;
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    #[test]
    fn a_child_past_its_deadline_is_killed_and_one_that_ends_is_waited_for() {
        let start = Instant::now();
        let mut c = TestChild::spawn(std::process::Command::new("sleep").arg("30"));
        let killed = c.wait_or_kill(Duration::from_millis(200)).unwrap_err();
        assert_eq!(killed.signal(), Some(9), "{killed}");
        assert!(start.elapsed() < Duration::from_secs(10));
        let mut c = TestChild::spawn(&mut std::process::Command::new("true"));
        assert!(c.wait_within(Duration::from_secs(30), "true").success());
    }

    #[test]
    #[should_panic(expected = "still running after")]
    fn a_child_past_wait_within_fails_the_test() {
        TestChild::spawn(std::process::Command::new("sleep").arg("30"))
            .wait_within(Duration::from_millis(100), "sleep 30");
    }

    #[test]
    fn a_dropped_child_and_its_group_do_not_outlive_the_test() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("grandchild");
        // A shell that starts a grandchild, then waits.
        let c = TestChild::spawn_group(std::process::Command::new("sh").args([
            "-c",
            &format!("sleep 30 & echo $! > {}; wait", pid_file.display()),
        ]))
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let grandchild = loop {
            if let Some(p) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
            {
                break p;
            }
            assert!(Instant::now() < deadline, "the shell did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        let child = c.id();
        drop(c);
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(grandchild) {
            assert!(
                Instant::now() < deadline,
                "the grandchild outlived the drop"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(child), "the child outlived the drop");
    }
}
