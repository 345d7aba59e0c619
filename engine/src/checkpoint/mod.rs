//! The checkpoint directory, laid out like Spark's:
//!
//! ```text
//! <checkpoint>/metadata        {"id": ..., "fingerprint": ..., "plan": ...}
//! <checkpoint>/offsets/<N>     v1 / batch metadata / one line per source offset
//! <checkpoint>/commits/<N>     v1 / {"nextBatchWatermarkMs": ...}
//! <checkpoint>/state/<op>/<partition>/<version>.delta|.snapshot
//! <checkpoint>/sources/<i>/... what a source remembers (e.g. files seen)
//! ```
//!
//! Every file is written atomically: a temp file, fsync, rename, fsync of the
//! directory. `offsets/N` is written before batch N does any work and
//! `commits/N` after its sink and state have committed.

pub mod log;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};

pub use log::{BatchLog, CommitEntry, OffsetEntry};

/// Writes `bytes` to `path` atomically: temp file, fsync (when `sync`), rename, fsync dir.
pub fn write_atomic(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| WeirError::io(dir, e))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        uuid::Uuid::new_v4().simple()
    ));
    {
        let mut f = fs::File::create(&tmp).map_err(|e| WeirError::io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| WeirError::io(&tmp, e))?;
        if sync {
            f.sync_all().map_err(|e| WeirError::io(&tmp, e))?;
        }
    }
    fs::rename(&tmp, path).map_err(|e| WeirError::io(path, e))?;
    if sync {
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// The `metadata` file: the query's stable id and the shape it was started with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CheckpointMetadata {
    /// The query id, stable across restarts.
    pub id: String,
    /// Fingerprint of the query's plan.
    #[serde(default)]
    pub fingerprint: String,
    /// The plan the checkpoint was written by.
    #[serde(default)]
    pub plan: Option<weir_plan::StreamPlan>,
    /// State partitions (`shuffle_partitions` when the checkpoint was created).
    #[serde(default = "one")]
    pub state_partitions: usize,
}

fn one() -> usize {
    1
}

/// An open checkpoint directory.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    root: PathBuf,
    /// Whether files are fsync'd.
    pub sync: bool,
    /// The offsets log.
    pub offsets: BatchLog,
    /// The commit log.
    pub commits: BatchLog,
}

impl Checkpoint {
    /// Opens (creating when missing) a checkpoint directory.
    pub fn open(root: impl Into<PathBuf>, sync: bool) -> Result<Checkpoint> {
        let root = root.into();
        fs::create_dir_all(&root).map_err(|e| WeirError::io(&root, e))?;
        Ok(Checkpoint {
            offsets: BatchLog::new(root.join("offsets"), sync),
            commits: BatchLog::new(root.join("commits"), sync),
            root,
            sync,
        })
    }

    /// The checkpoint's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Directory for one state operator partition.
    pub fn state_dir(&self, operator: usize, partition: usize) -> PathBuf {
        self.root
            .join("state")
            .join(operator.to_string())
            .join(partition.to_string())
    }

    /// Directory for source `i`'s own metadata.
    pub fn source_dir(&self, i: usize) -> PathBuf {
        self.root.join("sources").join(i.to_string())
    }

    /// Reads `metadata`, or writes it for a new checkpoint. A checkpoint made by
    /// a query of another shape is refused with what changed.
    pub fn load_or_init_metadata(
        &self,
        plan: &weir_plan::StreamPlan,
        state_partitions: usize,
    ) -> Result<CheckpointMetadata> {
        let path = self.root.join("metadata");
        if path.exists() {
            let text = fs::read_to_string(&path).map_err(|e| WeirError::io(&path, e))?;
            let meta: CheckpointMetadata = serde_json::from_str(&text).map_err(|e| {
                WeirError::checkpoint(&path, format!("the metadata file is damaged ({e}); restore it from a backup or start with a new checkpoint location"))
            })?;
            // The stored plan is the reference: the same query shape is
            // accepted even if the fingerprint's encoding changed between
            // weir versions; a different shape is refused with what changed.
            let same = match &meta.plan {
                Some(old) => same_shape(old, plan),
                None => meta.fingerprint.is_empty() || meta.fingerprint == plan.fingerprint(),
            };
            if !same {
                let what = meta
                    .plan
                    .as_ref()
                    .map(|old| describe_change(old, plan))
                    .unwrap_or_else(|| "the query's shape".into());
                return Err(WeirError::checkpoint(
                    &self.root,
                    format!("this checkpoint was written by a different query: {what}. Use a new checkpoint location for the changed query, or restore the original query"),
                ));
            }
            if meta.state_partitions != state_partitions {
                return Err(WeirError::checkpoint(
                    &self.root,
                    format!(
                        "the checkpoint's state has {} partitions but the session asks for {state_partitions} (shuffle_partitions); state partitioning cannot change on restart: set shuffle_partitions back to {}",
                        meta.state_partitions, meta.state_partitions
                    ),
                ));
            }
            return Ok(meta);
        }
        let meta = CheckpointMetadata {
            id: uuid::Uuid::new_v4().to_string(),
            fingerprint: plan.fingerprint(),
            plan: Some(plan.clone()),
            state_partitions,
        };
        write_atomic(
            &path,
            serde_json::to_string_pretty(&meta)?.as_bytes(),
            self.sync,
        )?;
        Ok(meta)
    }
}

/// True when two plans have the same sources, operations, result and output
/// mode (what the checkpoint's offsets and state depend on; the sink and
/// trigger may change between runs, as in Spark).
fn same_shape(a: &weir_plan::StreamPlan, b: &weir_plan::StreamPlan) -> bool {
    a.sources == b.sources
        && a.nodes == b.nodes
        && a.result == b.result
        && a.output_mode == b.output_mode
        && a.statics.keys().eq(b.statics.keys())
}

/// Names what differs between two plans, for the changed-query error.
fn describe_change(old: &weir_plan::StreamPlan, new: &weir_plan::StreamPlan) -> String {
    let mut diffs = Vec::new();
    if old.sources != new.sources {
        diffs.push(format!(
            "the sources changed (was {:?}, now {:?})",
            old.sources.keys().collect::<Vec<_>>(),
            new.sources.keys().collect::<Vec<_>>()
        ));
        for (name, s) in &new.sources {
            if let Some(o) = old.sources.get(name) {
                if o.schema != s.schema {
                    let cols = |f: &[weir_plan::Field]| {
                        f.iter()
                            .map(|f| format!("{}: {}", f.name, f.dtype))
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    diffs.push(format!(
                        "source `{name}`'s schema changed from [{}] to [{}]",
                        cols(&o.schema),
                        cols(&s.schema)
                    ));
                }
            }
        }
    }
    if old.output_mode != new.output_mode {
        diffs.push(format!(
            "the output mode changed from {} to {}",
            old.output_mode.spark_name(),
            new.output_mode.spark_name()
        ));
    }
    for (o, n) in old.nodes.iter().zip(&new.nodes) {
        let on: Vec<&str> = o.ops.iter().map(|x| x.name()).collect();
        let nn: Vec<&str> = n.ops.iter().map(|x| x.name()).collect();
        if on != nn {
            diffs.push(format!(
                "node `{}`'s operations changed from [{}] to [{}]",
                n.id,
                on.join(", "),
                nn.join(", ")
            ));
        } else {
            for (i, (a, b)) in o.ops.iter().zip(&n.ops).enumerate() {
                if a != b {
                    diffs.push(format!(
                        "operation {} ({}) of node `{}` changed",
                        i + 1,
                        b.name(),
                        n.id
                    ));
                }
            }
        }
    }
    if old.nodes.len() != new.nodes.len() {
        diffs.push(format!(
            "the number of plan nodes changed from {} to {}",
            old.nodes.len(),
            new.nodes.len()
        ));
    }
    if diffs.is_empty() {
        "the query's shape changed".into()
    } else {
        diffs.join("; ")
    }
}
