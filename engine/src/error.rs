//! weir's typed errors. Each says what went wrong and, where it can, what to do.

use std::path::PathBuf;

/// Everything that can go wrong building or running a streaming query.
#[derive(Debug, thiserror::Error)]
pub enum WeirError {
    /// The query breaks a streaming rule (the same rules the macro checks at compile time).
    #[error("invalid streaming query: {}", .0.iter().map(|v| v.to_string()).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<weir_plan::Violation>),
    /// A builder argument that cannot work (a bad duration, a missing option).
    #[error("{0}")]
    Config(String),
    /// A SQL expression DataFusion could not plan.
    #[error("in expression `{expr}`: {message}")]
    Expr {
        /// The expression text.
        expr: String,
        /// DataFusion's explanation.
        message: String,
    },
    /// The checkpoint was written by a different query, or is damaged.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The checkpoint file or directory.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// A source failed to read.
    #[error("source {source_name}: {message}")]
    Source {
        /// The source's description.
        source_name: String,
        /// What went wrong.
        message: String,
    },
    /// A sink failed to write.
    #[error("sink {sink}: {message}")]
    Sink {
        /// The sink's description.
        sink: String,
        /// What went wrong.
        message: String,
    },
    /// Converting rows to or from Arrow failed.
    #[error("row conversion: {0}")]
    Row(String),
    /// The query failed with this error.
    #[error("the streaming query failed: {0}")]
    QueryFailed(std::sync::Arc<WeirError>),
    /// The query was stopped.
    #[error("the query was stopped")]
    Stopped,
    /// `stop()` waited `spark.sql.streaming.stopTimeout` and the query had
    /// not ended (Spark's `TimeoutException`): its running batch goes on.
    #[error("the query did not stop within {0:?} (spark.sql.streaming.stopTimeout): its running batch goes on; call stop() again, or end the process")]
    StopTimeout(std::time::Duration),
    /// An I/O error, with the path it concerns.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An Arrow error.
    #[error(transparent)]
    Arrow(#[from] arrow::error::ArrowError),
    /// A DataFusion error.
    #[error(transparent)]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// A JSON (de)serialization error.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// `Result` with [`WeirError`].
pub type Result<T, E = WeirError> = std::result::Result<T, E>;

/// The message a panic carried (`panic!("...")` or a formatted one), for
/// the error that reports it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

impl WeirError {
    /// An I/O error at `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> WeirError {
        WeirError::Io {
            path: path.into(),
            source,
        }
    }

    /// A checkpoint error at `path`.
    pub fn checkpoint(path: impl Into<PathBuf>, message: impl Into<String>) -> WeirError {
        WeirError::Checkpoint {
            path: path.into(),
            message: message.into(),
        }
    }
}
