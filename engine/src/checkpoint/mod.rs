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
//! Every file appears whole or not at all. `metadata`, `offsets/N` and
//! `commits/N` are written once each, with the storage layer's create-once
//! write: locally a temp file, fsync, a rename to the entry's name that
//! does not replace (or a hard link; either fails if the name exists), fsync of the directory; on S3 a conditional
//! PUT (`If-None-Match: *`). Other local files (such as a source's
//! metadata) are replaced with a temp file, fsync, rename, fsync of the
//! directory. `offsets/N` is durable before batch N writes its state, its
//! sink output or its commit (its read and computation run while it is
//! written: `logged`; a file source logs the files it lists for the batch
//! before) and
//! `commits/N` after its sink and state have committed.
//!
//! Since the log entries are created once, the logs also live on object
//! storage (`s3://bucket/prefix`), which has no rename, and a second run of
//! the query on the same checkpoint is refused when it tries to write an
//! entry the first wrote. State files are on the storage layer too (see
//! `state::files`: a batch's state version is written once, except the one
//! a restart runs again). Source metadata and sinks that keep files under
//! the checkpoint still need a local checkpoint
//! ([`Checkpoint::check_supported`]).

pub mod log;
pub mod logged;
pub(crate) mod purge;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use crate::error::{Result, WeirError};
use crate::sink::BoxSink;
use crate::source::BoxSource;
use crate::storage::spare::SpareGuard;
use crate::storage::{Created, Location, S3Settings, Storage};

pub use log::{parse_batch_id, BatchLog, CommitEntry, OffsetEntry};

// Durable local writes live in the storage layer; their old paths stay.
use crate::storage::durable::remove_temp_files_in;
pub use crate::storage::durable::{
    create_dir_all_synced, is_temp_name, remove_files_below, remove_temp_files, sync_dir,
    temp_path, write_atomic,
};

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

/// The directories of a local checkpoint that opening it cleans of temp
/// files (a crashed run's, spare files included).
const CLEANED: [&str; 4] = ["offsets", "commits", "sources", "state"];

/// An open checkpoint: a local directory or an object store prefix
/// (`s3://bucket/prefix`). Its logs, `metadata` and state live on the
/// storage layer, and so does the file source's log; the logs of other
/// sources (Kafka, rate, socket) still need a local directory.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The local directory, or (object storage) the URL, for messages.
    root: PathBuf,
    storage: Storage,
    /// The query id, once `metadata` is read or written.
    query_id: Arc<OnceLock<String>>,
    /// Whether files are fsync'd.
    pub sync: bool,
    /// The offsets log.
    pub offsets: BatchLog,
    /// The commit log.
    pub commits: BatchLog,
    /// Keeps spare temp files in a local checkpoint's directories while
    /// the checkpoint is open (see `storage::spare`).
    spares: Option<Arc<SpareGuard>>,
}

impl Checkpoint {
    /// Opens (creating when missing, each new directory fsynced in its
    /// parent when `sync`) a checkpoint directory, and removes the temp
    /// files a crashed run left in it.
    pub fn open(root: impl Into<PathBuf>, sync: bool) -> Result<Checkpoint> {
        let root = root.into();
        create_dir_all_synced(&root, sync)?;
        // Only weir's own directories: the root may hold anything else.
        remove_temp_files_in(&root)?;
        for sub in CLEANED {
            remove_temp_files(&root.join(sub))?;
        }
        let mut checkpoint = Checkpoint::on(Storage::local(root.clone(), sync), root, sync)?;
        checkpoint.spares = Some(Arc::new(SpareGuard::new(
            CLEANED.iter().map(|d| checkpoint.root.join(d)).collect(),
        )));
        Ok(checkpoint)
    }

    /// Opens the checkpoint at `location`: a local path, a `file:///` URL
    /// or an `s3://bucket/prefix` URL (S3 settings from `s3` and the
    /// environment). Nothing needs creating on S3; a missing bucket is an
    /// error here.
    pub fn open_location(location: &str, s3: &S3Settings, sync: bool) -> Result<Checkpoint> {
        match Location::parse(location)? {
            Location::Local(root) => Checkpoint::open(root, sync),
            Location::S3 { .. } => {
                let storage = Storage::open(location, s3, sync)?;
                let root = PathBuf::from(storage.location().to_string());
                Checkpoint::on(storage, root, sync)
            }
        }
    }

    fn on(storage: Storage, root: PathBuf, sync: bool) -> Result<Checkpoint> {
        let query_id: Arc<OnceLock<String>> = Arc::default();
        let at = storage.location().to_string();
        let log = |dir: &str| -> Result<BatchLog> {
            Ok(BatchLog::on(
                storage.child(dir)?,
                at.clone(),
                query_id.clone(),
            ))
        };
        Ok(Checkpoint {
            offsets: log("offsets")?,
            commits: log("commits")?,
            root,
            storage,
            query_id,
            sync,
            spares: None,
        })
    }

    /// The checkpoint's root directory (for a checkpoint on object storage,
    /// its URL, only for messages: use [`Checkpoint::local_root`] for files).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The checkpoint's storage (its root directory).
    pub fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The local root directory, when the checkpoint is local.
    pub fn local_root(&self) -> Option<&Path> {
        self.storage.local_root()
    }

    /// The local root directory for `what`, or a clear error for a
    /// checkpoint on object storage, where `what` is not supported yet
    /// (rather than writing it somewhere local).
    pub fn require_local(&self, what: &str) -> Result<&Path> {
        self.local_root().ok_or_else(|| {
            WeirError::checkpoint(
                &self.root,
                format!("not yet supported on object storage: {what}. Use a local checkpoint location for this query"),
            )
        })
    }

    /// For a checkpoint on object storage, refuses a query whose sources or
    /// sinks keep files under the checkpoint directory, which only a local
    /// checkpoint has so far: sources that keep no log or keep it on the
    /// checkpoint's storage ([`crate::source::Source::log_on_storage`]: every
    /// built-in source) and every sink but those that say they need a local
    /// checkpoint ([`crate::sink::Sink::needs_local_checkpoint`]: no built-in
    /// sink) run with such a checkpoint; stateful operators do, their state
    /// on the object store. A local checkpoint supports everything.
    pub fn check_supported<'a>(
        &self,
        sources: impl IntoIterator<Item = (&'a str, &'a BoxSource)>,
        sinks: impl IntoIterator<Item = &'a BoxSink>,
    ) -> Result<()> {
        if self.local_root().is_some() {
            return Ok(());
        }
        for (name, s) in sources {
            if !s.log_on_storage() {
                self.require_local(&format!(
                    "source `{name}` ({}), which keeps its own log under the checkpoint",
                    s.description()
                ))?;
            }
        }
        for s in sinks {
            if s.needs_local_checkpoint() {
                self.require_local(&format!(
                    "the sink {}, which reads or writes files under the checkpoint",
                    s.description()
                ))?;
            }
        }
        Ok(())
    }

    /// The directory of one state operator partition,
    /// `state/<operator>/<partition>/`, on the checkpoint's storage.
    pub fn state_dir(&self, operator: usize, partition: usize) -> Result<Storage> {
        self.storage.child(&format!("state/{operator}/{partition}"))
    }

    /// Directory for source `i`'s own metadata.
    pub fn source_dir(&self, i: usize) -> PathBuf {
        self.root.join("sources").join(i.to_string())
    }

    /// Reads `metadata`, or writes it for a new checkpoint. A checkpoint made by
    /// a query of another shape is refused with what changed. `state_partitions`
    /// is the session's setting: unset, an existing checkpoint keeps its count
    /// and a new one takes the available cores.
    pub fn load_or_init_metadata(
        &self,
        plan: &weir_plan::StreamPlan,
        state_partitions: Option<usize>,
    ) -> Result<CheckpointMetadata> {
        let path = self.storage.display_path("metadata");
        if let Some(bytes) = self.storage.get("metadata")? {
            return self.check_metadata(&path, &bytes, plan, state_partitions);
        }
        // Batches were logged but the query id is gone: a new id would not
        // match the markers the idempotent sinks keep, and the pending batch
        // would be written twice.
        let logged = match self.offsets.latest()? {
            Some(b) => Some(("offsets", b)),
            None => self.commits.latest()?.map(|b| ("commits", b)),
        };
        if let Some((log, b)) = logged {
            return Err(WeirError::checkpoint(
                &path,
                format!(
                    "the checkpoint has batches ({log}/{b}) but no metadata file, which holds the query id the sinks' exactly-once markers are keyed by; a new id would write the pending batch twice. Restore {} from a backup of this checkpoint, or start with a new, empty checkpoint location",
                    path.display()
                ),
            ));
        }
        let meta = CheckpointMetadata {
            id: uuid::Uuid::new_v4().to_string(),
            fingerprint: plan.fingerprint(),
            plan: Some(plan.clone()),
            state_partitions: state_partitions.unwrap_or_else(crate::cores::available_cores),
        };
        let text = serde_json::to_string_pretty(&meta)?;
        match self.storage.put_create("metadata", text.as_bytes())? {
            Created::Created => {
                let _ = self.query_id.set(meta.id.clone());
                Ok(meta)
            }
            // Another run created it meanwhile: its id is the query's.
            Created::Exists => match self.storage.get("metadata")? {
                Some(bytes) => self.check_metadata(&path, &bytes, plan, state_partitions),
                None => Err(WeirError::checkpoint(
                    &path,
                    "the metadata file appeared and vanished while the query started; another process is changing this checkpoint",
                )),
            },
        }
    }

    /// Checks a checkpoint's `metadata` against the query starting on it.
    fn check_metadata(
        &self,
        path: &Path,
        bytes: &[u8],
        plan: &weir_plan::StreamPlan,
        state_partitions: Option<usize>,
    ) -> Result<CheckpointMetadata> {
        let meta: CheckpointMetadata = serde_json::from_slice(bytes).map_err(|e| {
            WeirError::checkpoint(path, format!("the metadata file is damaged ({e}); restore it from a backup or start with a new checkpoint location"))
        })?;
        // The stored plan is the reference: its state fingerprint is
        // compared with the new query's by Spark's recovery rules
        // (`weir_plan::state_schema::classify`, the same rules the
        // `stream_query!` lock files apply at compile time). Changes that
        // keep the offsets and state usable start; the others are refused,
        // each named. A checkpoint without a plan compares fingerprints.
        let refused = match &meta.plan {
            Some(old) => refused_changes(old, plan),
            None if meta.fingerprint.is_empty() || meta.fingerprint == plan.fingerprint() => None,
            None => Some("the query's shape changed".to_string()),
        };
        if let Some(what) = refused {
            return Err(WeirError::checkpoint(
                &self.root,
                format!("this checkpoint was written by a different query: {what}. Use a new checkpoint location for the changed query, or restore the original query"),
            ));
        }
        if state_partitions.is_some_and(|n| n != meta.state_partitions) {
            let state_partitions = state_partitions.unwrap_or_default();
            return Err(WeirError::checkpoint(
                &self.root,
                format!(
                    "the checkpoint's state has {} partitions but the session asks for {state_partitions} (shuffle_partitions); state partitioning cannot change on restart: set shuffle_partitions back to {}",
                    meta.state_partitions, meta.state_partitions
                ),
            ));
        }
        let _ = self.query_id.set(meta.id.clone());
        Ok(meta)
    }
}

/// The changes from the plan a checkpoint was written by, `old`, to `new`
/// that would break the checkpoint, in words, or `None` when it stays usable
/// (allowed changes are logged). One definition with the compile-time check:
/// [`weir_plan::state_schema::classify`].
fn refused_changes(old: &weir_plan::StreamPlan, new: &weir_plan::StreamPlan) -> Option<String> {
    use weir_plan::state_schema::{classify, refusals, StateFingerprint};
    let changes = classify(&StateFingerprint::of(old), &StateFingerprint::of(new));
    for c in changes.iter().filter(|c| c.allowed) {
        tracing::info!(
            "the query changed since its checkpoint was written, keeping it usable: {c}"
        );
    }
    refusals(&changes)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn leftover_temp_files_are_removed_when_the_checkpoint_opens() {
        let root = tempfile::tempdir().unwrap();
        let chk = Checkpoint::open(root.path(), false).unwrap();
        chk.commits
            .write_commit(
                0,
                &CommitEntry {
                    next_batch_watermark_ms: 0,
                    operator_watermarks_ms: vec![],
                },
            )
            .unwrap();
        let id = || uuid::Uuid::new_v4().simple().to_string();
        let leftovers = [
            root.path().join(format!(".metadata.{}.tmp", id())),
            root.path().join(format!("offsets/.1.{}.tmp", id())),
            root.path().join(format!("commits/.1.{}.tmp", id())),
            root.path().join(format!("state/0/1/.2.delta.{}.tmp", id())),
            root.path().join(format!("sources/0/.3.{}.tmp", id())),
        ];
        for p in &leftovers {
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, "half").unwrap();
        }
        let mine = root.path().join("notes.tmp");
        fs::write(&mine, "keep").unwrap();
        let chk = Checkpoint::open(root.path(), true).unwrap();
        for p in &leftovers {
            assert!(!p.exists(), "{} is left", p.display());
        }
        assert!(mine.exists(), "a file weir did not write is kept");
        assert_eq!(chk.commits.latest().unwrap(), Some(0));
    }

    fn plan() -> weir_plan::StreamPlan {
        let stream = crate::source::MemoryStream::new(&[weir_plan::Field::new(
            "k",
            weir_plan::DataType::String,
        )]);
        crate::Session::new().read_stream(stream).plan().clone()
    }

    #[test]
    fn runs_starting_at_once_on_a_new_checkpoint_agree_on_the_query_id() {
        let plan = plan();
        for _ in 0..10 {
            let root = tempfile::tempdir().unwrap();
            let url = format!("file://{}", root.path().display());
            let ids: Vec<String> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..4)
                    .map(|_| {
                        let (url, plan) = (url.clone(), plan.clone());
                        sc.spawn(move || {
                            let chk =
                                Checkpoint::open_location(&url, &S3Settings::default(), false)
                                    .unwrap();
                            chk.load_or_init_metadata(&plan, Some(1)).unwrap().id
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
            let text = fs::read_to_string(root.path().join("metadata")).unwrap();
            assert!(text.contains(&ids[0]), "{text}");
        }
    }

    #[test]
    fn a_file_url_checkpoint_is_the_local_directory() {
        let root = tempfile::tempdir().unwrap();
        let url = format!("file://{}/chk", root.path().display());
        let chk = Checkpoint::open_location(&url, &S3Settings::default(), false).unwrap();
        assert_eq!(chk.local_root(), Some(root.path().join("chk").as_path()));
        assert_eq!(chk.root(), root.path().join("chk"));
        chk.commits
            .write_commit(
                4,
                &CommitEntry {
                    next_batch_watermark_ms: 0,
                    operator_watermarks_ms: vec![],
                },
            )
            .unwrap();
        assert!(root.path().join("chk/commits/4").is_file());
        assert!(chk.require_local("state").is_ok());
        let err = Checkpoint::open_location("gs://b/chk", &S3Settings::default(), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not supported"), "{err}");
    }
}
