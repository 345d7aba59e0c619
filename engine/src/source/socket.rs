//! The socket source (Spark's `socket` format): UTF-8 lines from a TCP
//! server, one `value` column. Like Spark's, it is for experiments: lines
//! are held in memory until committed and are not replayable after a restart.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};

use arrow::array::StringArray;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use weir_plan::{DataType, Field};

use super::{Offset, Source, SourceContext};
use crate::error::{Result, WeirError};

#[derive(Default)]
struct Lines {
    /// Offset of `lines[0]`.
    base: i64,
    lines: Vec<String>,
    error: Option<String>,
}

/// Lines from `host:port`.
pub struct SocketSource {
    host: String,
    port: u16,
    buf: Arc<Mutex<Lines>>,
}

impl SocketSource {
    /// Reads lines from `host:port`.
    pub fn new(host: &str, port: u16) -> SocketSource {
        SocketSource {
            host: host.to_string(),
            port,
            buf: Arc::default(),
        }
    }

    /// The schema: `value: String`.
    pub fn fields() -> Vec<Field> {
        vec![Field::new("value", DataType::String)]
    }
}

impl Source for SocketSource {
    fn schema(&self) -> SchemaRef {
        crate::row::arrow_schema(&Self::fields())
    }

    fn description(&self) -> String {
        format!("TextSocketV2[host: {}, port: {}]", self.host, self.port)
    }

    fn open(&mut self, _ctx: &SourceContext) -> Result<()> {
        let stream =
            TcpStream::connect((self.host.as_str(), self.port)).map_err(|e| WeirError::Source {
                source_name: self.description(),
                message: format!(
                    "cannot connect: {e} (is a server listening, e.g. `nc -lk {}`?)",
                    self.port
                ),
            })?;
        let buf = self.buf.clone();
        std::thread::Builder::new()
            .name("weir-socket-source".into())
            .spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let mut b = buf.lock().unwrap();
                    match line {
                        Ok(l) => b.lines.push(l),
                        Err(e) => {
                            b.error = Some(e.to_string());
                            break;
                        }
                    }
                }
            })
            .map_err(|e| WeirError::Config(format!("cannot start the socket reader: {e}")))?;
        Ok(())
    }

    fn latest_offset(&mut self, _start: Option<&Offset>) -> Result<Option<Offset>> {
        let b = self.buf.lock().unwrap();
        let n = b.base + b.lines.len() as i64;
        Ok((n > 0).then(|| Offset::from(n - 1)))
    }

    fn get_batch(&mut self, start: Option<&Offset>, end: &Offset) -> Result<Vec<RecordBatch>> {
        let b = self.buf.lock().unwrap();
        let from = start.and_then(|o| o.as_i64()).map(|s| s + 1).unwrap_or(0);
        let to = end.as_i64().unwrap_or(-1);
        if from < b.base {
            return Err(WeirError::Source {
                source_name: self.description(),
                message: "lines before the restart are gone: the socket source cannot replay (use a file or Kafka source for recovery)".into(),
            });
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
        let mut b = self.buf.lock().unwrap();
        let upto = end.as_i64().unwrap_or(-1) + 1;
        let drop = (upto - b.base).clamp(0, b.lines.len() as i64) as usize;
        b.lines.drain(..drop);
        b.base += drop as i64;
        Ok(())
    }
}
