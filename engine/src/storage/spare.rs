//! Spare temp files: an empty temp file made ahead of time in each local
//! directory that receives create-once writes (the offsets and commit logs,
//! each state partition), so that a micro-batch's checkpoint writes do not
//! wait for file creation. Creating a file is the slowest step of a small
//! durable write on some file systems (on ext4 without a journal it scans
//! recently freed inodes: ~0.3-0.4 ms of a ~0.8 ms write measured here), and
//! a batch makes three of them.
//!
//! A spare is kept only in directories below a live [`SpareGuard`]'s root
//! (an open local checkpoint): it is made on one background thread right
//! after the previous one was used, and removed when the last guard of its
//! root is dropped. A spare carries a temp file's name, so a crash's
//! leftover is removed when the checkpoint is next opened, like any other
//! temp file; if another opener removes it meanwhile, the write that takes
//! it finds its rename failing with `NotFound` and writes again under a new
//! name.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, MutexGuard, OnceLock};

use crate::storage::durable::temp_path;

/// A spare taken for a write: the empty temp file, opened for writing.
#[derive(Debug)]
pub(crate) struct Spare {
    /// The open file.
    pub(crate) file: fs::File,
    /// Its temp name.
    pub(crate) path: PathBuf,
}

#[derive(Debug)]
enum Slot {
    /// Requested from the background thread.
    Making,
    /// Made (and closed: a checkpoint of many state partitions must not
    /// hold a descriptor per directory) and not yet taken.
    Ready(PathBuf),
}

#[derive(Debug, Default)]
struct Registry {
    /// Roots of live guards (a root guarded twice is listed twice).
    roots: Vec<PathBuf>,
    /// The spare of each directory that has one (or has one coming).
    slots: HashMap<PathBuf, Slot>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The background thread making spares, started at first use (`None` when
/// the system refused a thread: writes then create their files themselves).
fn maker() -> Option<&'static Mutex<Sender<PathBuf>>> {
    static MAKER: OnceLock<Option<Mutex<Sender<PathBuf>>>> = OnceLock::new();
    MAKER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<PathBuf>();
            std::thread::Builder::new()
                .name("weir-spare-files".into())
                .spawn(move || {
                    for dir in rx {
                        make(dir);
                    }
                })
                .ok()
                .map(|_| Mutex::new(tx))
        })
        .as_ref()
}

/// Makes `dir`'s spare, unless its request was withdrawn meanwhile (its
/// root's guard dropped): then nothing is left behind.
fn make(dir: PathBuf) {
    let path = temp_path(&dir.join("spare"));
    let made = fs::File::create(&path);
    let mut reg = registry();
    match (made, reg.slots.get(&dir)) {
        (Ok(_), Some(Slot::Making)) => {
            reg.slots.insert(dir, Slot::Ready(path));
        }
        (Ok(_), _) => {
            drop(reg);
            let _ = fs::remove_file(&path);
        }
        // The directory went away, or is not writable: no spare there.
        (Err(_), _) => {
            reg.slots.remove(&dir);
        }
    }
}

/// Takes `dir`'s spare if one is ready (opening an existing file costs a
/// fraction of creating one), and asks for the next one when `dir` is below
/// a live guard's root.
pub(crate) fn take(dir: &Path) -> Option<Spare> {
    let mut reg = registry();
    if !reg.roots.iter().any(|r| dir.starts_with(r)) {
        return None;
    }
    let taken = match reg.slots.remove(dir) {
        Some(Slot::Ready(path)) => Some(path),
        // Still being made: let it arrive for the next write.
        Some(Slot::Making) => {
            reg.slots.insert(dir.to_path_buf(), Slot::Making);
            return None;
        }
        None => None,
    };
    if let Some(tx) = maker() {
        let sent = tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(dir.to_path_buf());
        if sent.is_ok() {
            reg.slots.insert(dir.to_path_buf(), Slot::Making);
        }
    }
    drop(reg);
    // Gone when another opener of the checkpoint removed it as a leftover.
    let path = taken?;
    let file = fs::OpenOptions::new().write(true).open(&path).ok()?;
    Some(Spare { file, path })
}

/// Keeps spare files in the directories below `root` while it lives; the
/// last guard of a root removes the spares below it.
#[derive(Debug)]
pub(crate) struct SpareGuard {
    root: PathBuf,
}

impl SpareGuard {
    /// Starts keeping spares below `root`.
    pub(crate) fn new(root: &Path) -> SpareGuard {
        registry().roots.push(root.to_path_buf());
        SpareGuard {
            root: root.to_path_buf(),
        }
    }
}

impl Drop for SpareGuard {
    fn drop(&mut self) {
        let mut reg = registry();
        if let Some(i) = reg.roots.iter().position(|r| *r == self.root) {
            reg.roots.swap_remove(i);
        }
        let live = reg.roots.clone();
        let gone: Vec<PathBuf> = reg
            .slots
            .keys()
            .filter(|d| !live.iter().any(|r| d.starts_with(r)))
            .cloned()
            .collect();
        let mut remove = Vec::new();
        for dir in gone {
            if let Some(Slot::Ready(path)) = reg.slots.remove(&dir) {
                remove.push(path);
            }
        }
        drop(reg);
        for path in remove {
            let _ = fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Waits for `dir`'s spare to be ready (the background thread).
    fn ready(dir: &Path) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if matches!(registry().slots.get(dir), Some(Slot::Ready(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    #[test]
    fn spares_are_kept_below_a_guarded_root_and_removed_with_its_last_guard() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("offsets");
        fs::create_dir_all(&dir).unwrap();
        // No guard: no spare, and none requested.
        assert!(take(&dir).is_none());
        assert!(files(&dir).is_empty());

        let guard = SpareGuard::new(root.path());
        let second = SpareGuard::new(root.path());
        assert!(take(&dir).is_none(), "the first write makes its own file");
        assert!(ready(&dir));
        let names = files(&dir);
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(crate::storage::durable::is_temp_name(&names[0]));

        let spare = take(&dir).expect("a spare is ready");
        assert!(spare.path.starts_with(&dir));
        assert!(ready(&dir), "the next one is made after one is taken");
        fs::remove_file(&spare.path).unwrap();

        drop(second);
        assert_eq!(files(&dir).len(), 1, "another guard keeps the root live");
        drop(guard);
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
        assert!(take(&dir).is_none());
        assert!(!registry().slots.contains_key(&dir));
    }
}
