//! The socket source (Spark's `socket` format): UTF-8 lines from a TCP
//! server, one `value` column.
//!
//! Like Spark's, it is **for testing and experiments only: it is not
//! fault-tolerant.** Lines live only in memory until their batch commits;
//! nothing is replayable:
//!
//! - A restart (from a checkpoint) opens a new connection. Its lines are
//!   numbered after the last offset the checkpoint logged, so none of them
//!   is skipped; but a batch the previous run had logged and not committed
//!   cannot be replayed: it runs again empty, its lines are lost, and the
//!   count is reported in the source's metrics as `linesLostOnRestart` (with
//!   a warning). Lines the server sent to the previous run after its last
//!   logged batch are lost too.
//! - Memory is bounded: at most [`SocketSource::max_buffer_bytes`] (default
//!   64 MiB) of uncommitted lines are held; when full, the reader stops
//!   reading (TCP back-pressure on the server) until a batch commits. A
//!   single line longer than the bound fails the query.
//! - Bytes that are not UTF-8 are replaced by U+FFFD (as Spark's reader
//!   does), never a failure.
//! - A read error (a reset connection) fails the query, once the lines read
//!   before it have been processed. The server closing the connection is
//!   not an error: no more lines arrive.
//! - Stopping the query closes the connection and ends the reader thread.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use arrow::array::StringArray;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::Field;

use super::{Offset, Source, SourceContext};
use crate::error::{Result, WeirError};

/// The default bound on buffered, uncommitted line bytes (64 MiB).
pub const DEFAULT_MAX_BUFFER_BYTES: usize = 64 << 20;

#[derive(Default)]
struct Lines {
    /// Offset of `lines[0]`.
    base: i64,
    lines: VecDeque<String>,
    /// Bytes held in `lines`.
    bytes: usize,
    /// The reader's error (it reads no more).
    error: Option<String>,
    /// The query is stopping: the reader ends.
    stopping: bool,
    /// The numbering has been matched to the checkpoint (first call).
    synced: bool,
    /// Lines of a logged batch that a restart could not replay.
    lost_on_restart: i64,
}

#[derive(Default)]
struct Shared {
    lines: Mutex<Lines>,
    /// Signalled when a commit frees room or the query stops.
    room: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Lines from `host:port` (not fault-tolerant: see the module docs).
pub struct SocketSource {
    host: String,
    port: u16,
    max_buffer_bytes: usize,
    shared: Arc<Shared>,
    /// The connection (a clone, to close it on stop) and the reader thread.
    conn: Option<TcpStream>,
    reader: Option<JoinHandle<()>>,
    /// The first option the connector table refused (fails `open`).
    refused: Option<String>,
}

impl SocketSource {
    /// Reads lines from `host:port` (a host name, a port from 1).
    pub fn new(host: &str, port: u16) -> SocketSource {
        let refused = weir_plan::connectors::text("host", host)
            .and_then(|_| weir_plan::connectors::count("port", port.into(), 65535))
            .err()
            .map(|e| e.to_string());
        SocketSource {
            host: host.to_string(),
            port,
            max_buffer_bytes: DEFAULT_MAX_BUFFER_BYTES,
            shared: Arc::default(),
            conn: None,
            reader: None,
            refused,
        }
    }

    /// Bounds the uncommitted lines held in memory (default 64 MiB, at least
    /// 1 byte): when full, reading pauses until a batch commits; a longer
    /// single line fails the query.
    pub fn max_buffer_bytes(mut self, bytes: usize) -> SocketSource {
        self.max_buffer_bytes = bytes.max(1);
        self
    }

    /// The schema: `value: String`.
    pub fn fields() -> Vec<Field> {
        weir_plan::connectors::fields(weir_plan::connectors::SOCKET_SCHEMA)
    }

    fn error(&self, message: String) -> WeirError {
        WeirError::Source {
            source_name: self.description(),
            message,
        }
    }

    /// Matches this connection's numbering to the checkpoint on the first
    /// call that names an offset: lines continue after `after`.
    fn sync(b: &mut Lines, after: Option<i64>) {
        if !b.synced {
            b.synced = true;
            if let Some(a) = after {
                b.base = b.base.max(a.saturating_add(1));
            }
        }
    }
}

/// Reads lines into `shared` until the end of the stream, an error, or stop.
fn read_lines(stream: TcpStream, shared: Arc<Shared>, cap: usize, who: String) {
    let mut r = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut r).take(cap as u64 + 1).read_until(b'\n', &mut line);
        let fail = |msg: String| {
            let mut b = shared.lock();
            if !b.stopping {
                b.error = Some(msg);
            }
        };
        match read {
            Ok(0) => return, // the server closed the connection
            Ok(_) => {
                if line.last() == Some(&b'\n') {
                    line.pop();
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                } else if line.len() > cap {
                    return fail(format!(
                        "a line is longer than the buffer bound ({cap} bytes); raise max_buffer_bytes"
                    ));
                }
                let text = String::from_utf8_lossy(&line).into_owned();
                let mut b = shared.lock();
                // Back-pressure: wait for a commit to free room.
                while !b.stopping && !b.lines.is_empty() && b.bytes + text.len() > cap {
                    b = shared.room.wait(b).unwrap_or_else(|p| p.into_inner());
                }
                if b.stopping {
                    return;
                }
                b.bytes += text.len();
                b.lines.push_back(text);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(source = %who, "socket read failed: {e}");
                return fail(format!("reading failed: {e}"));
            }
        }
    }
}

impl Source for SocketSource {
    /// Yes: it keeps no log (and, as in Spark, is not fault-tolerant).
    fn log_on_storage(&self) -> bool {
        true
    }
    fn schema(&self) -> SchemaRef {
        crate::row::arrow_schema(&Self::fields())
    }

    fn description(&self) -> String {
        format!("TextSocketV2[host: {}, port: {}]", self.host, self.port)
    }

    fn open(&mut self, _ctx: &SourceContext) -> Result<()> {
        if let Some(e) = &self.refused {
            return Err(self.error(e.clone()));
        }
        let stream = TcpStream::connect((self.host.as_str(), self.port)).map_err(|e| {
            self.error(format!(
                "cannot connect: {e} (is a server listening, e.g. `nc -lk {}`?)",
                self.port
            ))
        })?;
        let conn = stream
            .try_clone()
            .map_err(|e| self.error(format!("cannot use the connection: {e}")))?;
        let (shared, cap, who) = (
            self.shared.clone(),
            self.max_buffer_bytes,
            self.description(),
        );
        let reader = std::thread::Builder::new()
            .name("weir-socket-source".into())
            .spawn(move || read_lines(stream, shared, cap, who))
            .map_err(|e| WeirError::Config(format!("cannot start the socket reader: {e}")))?;
        self.conn = Some(conn);
        self.reader = Some(reader);
        Ok(())
    }

    fn latest_offset(&mut self, start: Option<&Offset>) -> Result<Option<Offset>> {
        let mut b = self.shared.lock();
        Self::sync(&mut b, start.and_then(|o| o.as_i64()));
        let n = b.base + b.lines.len() as i64;
        if let Some(e) = &b.error {
            // Lines read before the failure are processed first.
            let next = start.and_then(|o| o.as_i64()).map_or(0, |s| s + 1);
            if next >= n {
                let e = e.clone();
                drop(b);
                return Err(self.error(format!(
                    "{e}; the socket source cannot reconnect or replay (it is for testing only): restart the query"
                )));
            }
        }
        Ok((n > 0).then(|| Offset::from(n - 1)))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let mut b = self.shared.lock();
        let from = start.and_then(|o| o.as_i64()).map(|s| s + 1).unwrap_or(0);
        let to = end.as_i64().unwrap_or(-1);
        if !b.synced {
            // The first call of this run replays a batch the previous run
            // logged: its lines were read by that run and are gone.
            Self::sync(&mut b, Some(to));
            let lost = (to - from + 1).max(0);
            b.lost_on_restart += lost;
            tracing::warn!(
                source = %self.description(),
                "{lost} lines of a batch logged before the restart cannot be replayed (the socket source is not fault-tolerant); the batch runs empty"
            );
            drop(b);
            return Ok(vec![RecordBatch::new_empty(self.schema())]);
        }
        if from < b.base {
            return Err(self.error(
                "lines before the restart are gone: the socket source cannot replay (use a file or Kafka source for recovery)".into(),
            ));
        }
        let lines: Vec<&str> = (from..=to)
            .filter_map(|i| b.lines.get((i - b.base) as usize).map(String::as_str))
            .collect();
        Ok(vec![RecordBatch::try_new(
            self.schema(),
            vec![Arc::new(StringArray::from(lines))],
        )?])
    }

    fn commit(&mut self, end: &Offset) -> Result<()> {
        let mut b = self.shared.lock();
        let upto = end.as_i64().unwrap_or(-1) + 1;
        let drop = (upto - b.base).clamp(0, b.lines.len() as i64) as usize;
        let freed: usize = b.lines.drain(..drop).map(|l| l.len()).sum();
        b.bytes -= freed;
        b.base += drop as i64;
        self.shared.room.notify_all();
        Ok(())
    }

    fn metrics(&self) -> std::collections::BTreeMap<String, String> {
        let b = self.shared.lock();
        let mut m = std::collections::BTreeMap::new();
        if b.lost_on_restart > 0 {
            m.insert("linesLostOnRestart".into(), b.lost_on_restart.to_string());
        }
        m
    }

    fn stop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.room.notify_all();
        if let Some(c) = self.conn.take() {
            let _ = c.shutdown(Shutdown::Both);
        }
        if let Some(t) = self.reader.take() {
            let _ = t.join();
        }
    }
}

impl Drop for SocketSource {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The socket source from its options, checked by the connector table
/// ([`super::from_options`]).
pub(super) fn from_options(
    o: &super::SourceOptions,
) -> std::result::Result<super::BoxSource, weir_plan::connectors::OptionError> {
    let port = o.number("port")?.unwrap_or(0);
    let host = o.get("host").unwrap_or("localhost");
    Ok(Box::new(SocketSource::new(
        host,
        u16::try_from(port).unwrap_or(0),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    fn ctx() -> SourceContext {
        SourceContext {
            metadata_dir: std::env::temp_dir(),
            sync: false,
            default_parallelism: 1,
        }
    }

    /// Host and port are checked by the connector table's rules, as
    /// `stream_query!`'s `socket(host, port)` is.
    #[test]
    fn host_and_port_are_checked_by_the_connector_table() {
        let e = SocketSource::new("localhost", 0).open(&ctx()).unwrap_err();
        let rule = weir_plan::connectors::count("port", 0, 65535).unwrap_err();
        assert!(e.to_string().ends_with(&rule.to_string()), "{e}");
        let e = SocketSource::new("", 9).open(&ctx()).unwrap_err();
        assert!(e.to_string().ends_with("`host` must not be empty"), "{e}");
    }

    /// A source connected to a fresh server; the server side of the connection.
    fn connected(cap: usize) -> (SocketSource, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let mut s = SocketSource::new("127.0.0.1", port).max_buffer_bytes(cap);
        s.open(&ctx()).unwrap();
        let (conn, _) = l.accept().unwrap();
        (s, conn)
    }

    /// Polls `latest_offset` until `f` holds (or 10 s pass).
    fn wait_for(
        s: &mut SocketSource,
        start: Option<&Offset>,
        f: impl Fn(&Result<Option<Offset>>) -> bool,
    ) -> Result<Option<Offset>> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = s.latest_offset(start);
            if f(&r) || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn values(batches: &[RecordBatch]) -> Vec<String> {
        batches
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
                a.iter().map(|v| v.unwrap().to_string()).collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn the_buffer_is_bounded_and_the_server_is_held_back() {
        // 10-byte lines, a 100-byte bound: at most 10 lines held.
        let (mut s, mut conn) = connected(100);
        let writer = std::thread::spawn(move || {
            for i in 0..1000 {
                if conn.write_all(format!("line {i:05}\n").as_bytes()).is_err() {
                    return;
                }
            }
        });
        let end = wait_for(
            &mut s,
            None,
            |r| matches!(r, Ok(Some(o)) if o.as_i64() == Some(9)),
        )
        .unwrap()
        .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // Still 10: the reader waits for room.
        assert_eq!(s.latest_offset(None).unwrap(), Some(end.clone()));
        assert!(s.shared.lock().bytes <= 100);
        let got = values(&s.get_batch(None, &end).unwrap());
        assert_eq!(got.len(), 10);
        assert_eq!(got[0], "line 00000");
        // A commit frees room: the next lines arrive, none skipped.
        s.commit(&end).unwrap();
        let next = wait_for(
            &mut s,
            Some(&end),
            |r| matches!(r, Ok(Some(o)) if o.as_i64() == Some(19)),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            values(&s.get_batch(Some(&end), &next).unwrap())[0],
            "line 00010"
        );
        s.stop();
        writer.join().unwrap();
    }

    #[test]
    fn a_line_longer_than_the_bound_fails_the_query() {
        let (mut s, mut conn) = connected(16);
        conn.write_all(b"short\nthis line is far too long\n")
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.shared.lock().error.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let end = s.latest_offset(None).unwrap().unwrap();
        assert_eq!(values(&s.get_batch(None, &end).unwrap()), ["short"]);
        s.commit(&end).unwrap();
        let err = s.latest_offset(Some(&end)).unwrap_err().to_string();
        assert!(err.contains("longer than the buffer bound"), "{err}");
    }

    #[test]
    fn stop_closes_the_connection_and_ends_the_reader() {
        let (mut s, mut conn) = connected(1 << 20);
        conn.write_all(b"a\n").unwrap();
        wait_for(&mut s, None, |r| matches!(r, Ok(Some(_))))
            .unwrap()
            .unwrap();
        s.stop();
        // The server sees the connection closed (before: held open forever
        // by a reader blocked in read).
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(conn.read(&mut buf).unwrap(), 0);
        assert!(s.reader.is_none());
    }

    #[test]
    fn a_read_error_fails_the_query_after_the_lines_before_it() {
        use std::os::fd::AsRawFd;
        let (mut s, mut conn) = connected(1 << 20);
        conn.write_all(b"before\n").unwrap();
        let end = wait_for(&mut s, None, |r| matches!(r, Ok(Some(_))))
            .unwrap()
            .unwrap();
        // Close with a reset (SO_LINGER 0), as a crashed peer or a
        // middlebox does: the reader's next read fails.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid socket and a correctly sized option value.
        let rc = unsafe {
            libc::setsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const libc::linger as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        drop(conn);
        // Wait for the reader to see the reset.
        let deadline = Instant::now() + Duration::from_secs(10);
        while s.shared.lock().error.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        // The line read before the failure is still delivered...
        assert_eq!(s.latest_offset(None).unwrap(), Some(end.clone()));
        assert_eq!(values(&s.get_batch(None, &end).unwrap()), ["before"]);
        s.commit(&end).unwrap();
        // ...then the failure reaches the query.
        let err = s.latest_offset(Some(&end)).unwrap_err().to_string();
        assert!(err.contains("reading failed"), "{err}");
        assert!(err.contains("TextSocketV2"), "{err}");
    }

    #[test]
    fn after_a_restart_no_new_line_is_skipped_and_lost_lines_are_counted() {
        // The checkpoint says batches ended at offset 41 and a batch (42..=44]
        // was logged, not committed.
        let (mut s, mut conn) = connected(1 << 20);
        conn.write_all(b"new 1\nnew 2\n\xffbad\n").unwrap();
        let committed = Offset::from(41);
        let logged = Offset::from(44);
        // The replay: its lines are gone, the batch runs empty.
        let replay = s.get_batch(Some(&committed), &logged).unwrap();
        assert_eq!(values(&replay), Vec::<String>::new());
        assert_eq!(s.metrics()["linesLostOnRestart"], "3");
        // Every line of the new connection follows, numbered after 44.
        let end = wait_for(
            &mut s,
            Some(&logged),
            |r| matches!(r, Ok(Some(o)) if o.as_i64() == Some(47)),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            values(&s.get_batch(Some(&logged), &end).unwrap()),
            ["new 1", "new 2", "\u{fffd}bad"]
        );
    }

    #[test]
    fn a_restart_without_a_pending_batch_continues_the_numbering() {
        let (mut s, mut conn) = connected(1 << 20);
        conn.write_all(b"x\ny\n").unwrap();
        let committed = Offset::from(6);
        let end = wait_for(
            &mut s,
            Some(&committed),
            |r| matches!(r, Ok(Some(o)) if o.as_i64() == Some(8)),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            values(&s.get_batch(Some(&committed), &end).unwrap()),
            ["x", "y"]
        );
        assert!(s.metrics().is_empty());
    }
}
