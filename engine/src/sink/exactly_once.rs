//! Exactly once for sinks that keep a *batch marker*: the last batch id
//! their query wrote, recorded atomically with the batch's rows (PostgreSQL:
//! a row of `weir_sink_commits`; Redis: a field of the marker hash; Kafka: an
//! offset committed in the query's consumer group). A batch at or below the
//! marker was written before — the engine re-runs a batch whose sink
//! committed but whose `commits/N` was never written — and is skipped. The
//! marker is keyed by the query id from the sink's context (the checkpoint's,
//! stable across restarts), so a new checkpoint is a new query that writes
//! from batch 0 again.
//!
//! Shared here: the skip rule ([`written_before`]) and its log line, the
//! retry-once driver of the sinks that write through one client connection
//! ([`write_batch`]: a connection lost mid-batch is retried once on a new
//! one, which is safe because the marker decides), and the checks of the
//! sinks that write rows by key ([`key_positions`],
//! [`require_keys_in_update_mode`], [`refuse_complete_per_task`]).

// Each sink uses what its promise needs; with only some of them built, the
// rest is unused.
#![cfg_attr(
    not(all(feature = "kafka", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::OutputMode;

use crate::error::{Result, WeirError};

/// Whether batch `batch_id` was written before, given the last batch id the
/// query's marker records (`None`: the query wrote no batch yet).
pub(crate) fn written_before(marker: Option<i64>, batch_id: i64) -> bool {
    marker.is_some_and(|last| last >= batch_id)
}

/// Logs that `sink` skipped batch `batch_id`, which its marker says was
/// written before.
pub(crate) fn log_skipped(sink: &str, batch_id: i64) {
    tracing::info!(
        sink,
        "batch {batch_id} was written before (its batch marker says so); skipped"
    );
}

/// What one attempt at a batch did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// The batch's rows and its marker were written now.
    Now,
    /// The marker already covered the batch: nothing was written.
    Before,
}

/// Why an attempt at a batch failed.
#[derive(Debug)]
pub(crate) enum AttemptError<E> {
    /// The client's error: a new connection may cure it (see
    /// [`MarkedWrite::is_connection_error`]).
    Client(E),
    /// Anything else (a value the sink cannot write, say): not retried.
    Other(WeirError),
}

/// One batch of sink `S`, with the sink's runtime `R` (its connection slot
/// and settings): what a sink implements [`MarkedWrite`] for.
pub(crate) struct Attempt<'a, S, R> {
    /// The sink.
    pub(crate) sink: &'a S,
    /// The sink's state while it runs.
    pub(crate) rt: &'a mut R,
    /// The batch's id.
    pub(crate) batch_id: i64,
    /// The batch's rows.
    pub(crate) batches: &'a [RecordBatch],
}

impl<'a, S, R> Attempt<'a, S, R> {
    /// Batch `batch_id` of `sink`, with its runtime `rt`.
    pub(crate) fn new(
        sink: &'a S,
        rt: &'a mut R,
        batch_id: i64,
        batches: &'a [RecordBatch],
    ) -> Self {
        Attempt {
            sink,
            rt,
            batch_id,
            batches,
        }
    }
}

/// One batch's write through a client connection, as [`write_batch`] runs it.
pub(crate) trait MarkedWrite {
    /// A connection to the sink's server.
    type Conn;
    /// The client's error.
    type Error: std::fmt::Display;
    /// The sink, for the log (its description).
    fn sink(&self) -> String;
    /// The slot the sink keeps its connection in between batches: taken
    /// for the attempt, and given back what connection is still good.
    fn conn(&mut self) -> &mut Option<Self::Conn>;
    /// A new connection; an error here fails the batch at once.
    fn connect(&mut self) -> Result<Self::Conn>;
    /// Whether a connection kept from the last batch may be used again
    /// (default: yes).
    fn reusable(&self, _conn: &Self::Conn) -> bool {
        true
    }
    /// Writes the batch and its marker at once, or nothing (checking the
    /// marker first).
    fn write(
        &mut self,
        conn: &mut Self::Conn,
    ) -> std::result::Result<Written, AttemptError<Self::Error>>;
    /// `e` as the log shows it (default: as the client prints it).
    fn describe(&self, e: &Self::Error) -> String {
        e.to_string()
    }
    /// Whether a new connection may cure `e` (the connection broke, the
    /// server ended the session), as opposed to an error about the request.
    fn is_connection_error(&self, e: &Self::Error) -> bool;
    /// Whether the connection is still good for the next batch after `e`.
    fn keeps_connection(&self, conn: &Self::Conn, e: &Self::Error) -> bool;
    /// The error that fails the query when the batch could not be written.
    fn failed(&self, e: Self::Error) -> WeirError;
}

/// Writes batch `batch_id` with `attempt`, on the connection in its slot
/// ([`MarkedWrite::conn`]) or a new one, retrying once on a new connection
/// when the connection was lost; what connection is still good is left in
/// the slot for the next batch.
pub(crate) fn write_batch<W: MarkedWrite>(attempt: &mut W, batch_id: i64) -> Result<()> {
    let mut retried = false;
    loop {
        let mut c = match attempt.conn().take() {
            Some(c) if attempt.reusable(&c) => c,
            _ => attempt.connect()?,
        };
        match attempt.write(&mut c) {
            Ok(written) => {
                if written == Written::Before {
                    log_skipped(&attempt.sink(), batch_id);
                }
                *attempt.conn() = Some(c);
                return Ok(());
            }
            Err(AttemptError::Client(e)) if !retried && attempt.is_connection_error(&e) => {
                tracing::warn!(
                    sink = %attempt.sink(),
                    "batch {batch_id}: {}; retrying on a new connection",
                    attempt.describe(&e)
                );
                retried = true;
            }
            Err(AttemptError::Client(e)) => {
                if attempt.keeps_connection(&c, &e) {
                    *attempt.conn() = Some(c);
                }
                return Err(attempt.failed(e));
            }
            Err(AttemptError::Other(e)) => {
                *attempt.conn() = Some(c);
                return Err(e);
            }
        }
    }
}

/// The positions of `key_columns` in `schema`, in the order given; the
/// error names a key column the output lacks, and the output's columns.
pub(crate) fn key_positions(
    schema: &SchemaRef,
    key_columns: &[String],
) -> std::result::Result<Vec<usize>, String> {
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    key_columns
        .iter()
        .map(|k| {
            names.iter().position(|n| n == k).ok_or_else(|| {
                format!(
                    "key column `{k}` is not in the query's output (its columns: {})",
                    names.join(", ")
                )
            })
        })
        .collect()
}

/// Update mode writes each row over the one with its key: without key
/// columns it is refused. `writes` says how the sink does it
/// (`upserts rows by key`).
pub(crate) fn require_keys_in_update_mode(
    mode: OutputMode,
    key_columns: &[String],
    writes: &str,
) -> std::result::Result<(), String> {
    if mode == OutputMode::Update && key_columns.is_empty() {
        return Err(format!(
            "update output mode {writes}: call .key_columns(vec![...]) with the query's \
             group-by columns, e.g. [\"window\", \"page\"]"
        ));
    }
    Ok(())
}

/// Complete mode replaces the sink's whole output each batch, but under
/// scale-out task `task` has only its own keys: refused. `replaces` says
/// what the sink replaces (`the whole table`), `instead` what to use in
/// update mode.
pub(crate) fn refuse_complete_per_task(
    mode: OutputMode,
    task: &str,
    replaces: &str,
    instead: &str,
) -> std::result::Result<(), String> {
    if mode == OutputMode::Complete {
        return Err(format!(
            "complete output mode replaces {replaces} each batch, but under scale-out task \
             {task} has only its own keys: use update mode{instead}, or run the query in one \
             process"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// A client whose attempts fail as scripted.
    struct Scripted {
        /// What each attempt returns, in order: `Ok`, or the error's text
        /// (`lost`: a connection error).
        attempts: Vec<std::result::Result<Written, &'static str>>,
        connects: usize,
        writes: usize,
        /// Connections numbered as made; the one each write used.
        used: Vec<usize>,
        /// The connection kept between batches.
        conn: Option<usize>,
    }

    impl Scripted {
        fn new(attempts: Vec<std::result::Result<Written, &'static str>>) -> Scripted {
            Scripted {
                attempts,
                connects: 0,
                writes: 0,
                used: vec![],
                conn: None,
            }
        }
    }

    impl MarkedWrite for Scripted {
        type Conn = usize;
        type Error = &'static str;
        fn sink(&self) -> String {
            "ScriptedSink".into()
        }
        fn conn(&mut self) -> &mut Option<usize> {
            &mut self.conn
        }
        fn connect(&mut self) -> Result<usize> {
            self.connects += 1;
            Ok(self.connects)
        }
        fn write(
            &mut self,
            conn: &mut usize,
        ) -> std::result::Result<Written, AttemptError<&'static str>> {
            self.used.push(*conn);
            let r = self.attempts[self.writes];
            self.writes += 1;
            match r {
                Ok(w) => Ok(w),
                Err("bad value") => Err(AttemptError::Other(WeirError::Config("bad value".into()))),
                Err(e) => Err(AttemptError::Client(e)),
            }
        }
        fn is_connection_error(&self, e: &&'static str) -> bool {
            *e == "lost"
        }
        fn keeps_connection(&self, _conn: &usize, e: &&'static str) -> bool {
            *e != "lost"
        }
        fn failed(&self, e: &'static str) -> WeirError {
            WeirError::Config(format!("writing failed: {e}"))
        }
    }

    #[test]
    fn a_lost_connection_is_retried_once_on_a_new_one() {
        let mut w = Scripted::new(vec![Err("lost"), Ok(Written::Now)]);
        write_batch(&mut w, 7).unwrap();
        assert_eq!(w.used, [1, 2]);
        assert_eq!(
            w.conn,
            Some(2),
            "the new connection is kept for the next batch"
        );
    }

    #[test]
    fn a_connection_lost_twice_fails_the_batch_with_the_sinks_error() {
        let mut w = Scripted::new(vec![Err("lost"), Err("lost")]);
        let e = write_batch(&mut w, 7).unwrap_err();
        assert_eq!(
            e.to_string(),
            WeirError::Config("writing failed: lost".into()).to_string()
        );
        assert_eq!(w.writes, 2);
        assert_eq!(w.conn, None, "a lost connection is not kept");
    }

    #[test]
    fn an_error_about_the_request_is_not_retried_and_keeps_the_connection() {
        let mut w = Scripted::new(vec![Err("syntax error")]);
        let e = write_batch(&mut w, 7).unwrap_err();
        assert!(e.to_string().contains("syntax error"), "{e}");
        assert_eq!(w.writes, 1);
        assert_eq!(w.conn, Some(1));
    }

    #[test]
    fn an_error_of_the_sinks_own_is_returned_as_it_is() {
        let mut w = Scripted::new(vec![Err("bad value")]);
        w.conn = Some(5);
        let e = write_batch(&mut w, 7).unwrap_err();
        assert_eq!(
            e.to_string(),
            WeirError::Config("bad value".into()).to_string()
        );
        assert_eq!(w.conn, Some(5));
    }

    #[test]
    fn the_connection_is_reused_across_batches_and_a_skipped_batch_succeeds() {
        let mut w = Scripted::new(vec![Ok(Written::Now), Ok(Written::Before)]);
        write_batch(&mut w, 1).unwrap();
        write_batch(&mut w, 1).unwrap();
        assert_eq!(w.connects, 1);
        assert_eq!(w.used, [1, 1]);
    }

    #[test]
    fn a_batch_at_or_below_the_marker_was_written_before() {
        assert!(!written_before(None, 0));
        assert!(!written_before(Some(4), 5));
        assert!(written_before(Some(5), 5));
        assert!(written_before(Some(6), 5));
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("window", DataType::Utf8, true),
            Field::new("page", DataType::Utf8, true),
            Field::new("views", DataType::Int64, false),
        ]))
    }

    #[test]
    fn key_columns_are_found_in_the_order_given() {
        let keys = ["page".to_string(), "window".to_string()];
        assert_eq!(key_positions(&schema(), &keys), Ok(vec![1, 0]));
    }

    #[test]
    fn a_key_column_the_output_lacks_is_named_with_the_outputs_columns() {
        let e = key_positions(&schema(), &["pgae".to_string()]).unwrap_err();
        assert_eq!(
            e,
            "key column `pgae` is not in the query's output (its columns: window, page, views)"
        );
    }

    #[test]
    fn update_mode_wants_key_columns() {
        let e = require_keys_in_update_mode(OutputMode::Update, &[], "upserts rows by key")
            .unwrap_err();
        assert!(
            e.starts_with("update output mode upserts rows by key: call .key_columns"),
            "{e}"
        );
        assert!(require_keys_in_update_mode(OutputMode::Update, &["page".into()], "x").is_ok());
        assert!(require_keys_in_update_mode(OutputMode::Append, &[], "x").is_ok());
    }

    #[test]
    fn complete_mode_is_refused_per_task_saying_what_to_use() {
        let e = refuse_complete_per_task(
            OutputMode::Complete,
            "t-0",
            "the whole table",
            " (an upsert by key)",
        )
        .unwrap_err();
        assert!(e.contains("task t-0 has only its own keys"), "{e}");
        assert!(e.contains("use update mode (an upsert by key)"), "{e}");
        assert!(refuse_complete_per_task(OutputMode::Update, "t-0", "x", "").is_ok());
    }
}
