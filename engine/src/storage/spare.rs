//! Spare temp files: files kept ready in each local directory that receives
//! create-once writes (the offsets and commit logs, each state partition), so
//! that a micro-batch's checkpoint writes neither create nor free an inode.
//! Creating a file is the slowest step of a small durable write on some file
//! systems: on ext4 without a journal (this project's test machines) a
//! create scans the inodes freed in the last few seconds, so a query that
//! writes three files per batch and removes as many old ones spent ~0.3-0.4
//! ms per create, and ~20% of a fast query's CPU, in that scan.
//!
//! Two supplies, as databases recycle their log segments:
//! - an old file the retention would remove is renamed to a spare instead
//!   ([`recycle`]; at most [`MAX_SPARES`] per directory, the rest are
//!   removed), and the next write reuses it. A durable write (fsync on)
//!   writes over the old content and then cuts the file to what it wrote,
//!   before its fsync (a truncation to zero first would free the file's
//!   blocks, and on ext4 make its close start writing it back at once:
//!   `auto_da_alloc`; on a disk mounted with `discard`, freed blocks are
//!   also discarded while the write waits). A write without fsync needs
//!   an empty file: overwritten in place, the file could come back from a
//!   power loss holding an old entry's bytes under its new name, where an
//!   emptied one comes back empty (which a reader refuses as damaged). So
//!   a directory without fsync hands each recycled file to the background
//!   thread, which empties it (the blocks freed and discarded there, not
//!   in a batch's write) before it becomes a spare. A spare known to be
//!   empty is opened without truncating it again: on ext4 a truncation to
//!   zero makes the file's close start its writeback (`auto_da_alloc`).
//!   Without fsync a power loss may then bring the last entries back
//!   empty (refused as damaged, as a fresh file's would be), never holding
//!   another entry's bytes on a journaled file system (the truncation is
//!   logged before the rename);
//! - when a directory's last spare is taken and none is being emptied,
//!   one background thread makes another (the first batches, before any
//!   retention).
//!
//! The background thread takes its jobs together: it is woken when a
//! directory's last spare is taken (to make one, or to finish the files
//! being emptied there) or when [`WAKE_AT`] jobs are waiting, not for every
//! recycled file. Woken per file, it ran ~3 times per batch of a fast
//! query, a third thread taking a core from the query's workers each time.
//!
//! Spares are kept only in directories below a live [`SpareGuard`]'s roots
//! (an open local checkpoint's logs and state) and removed when the last
//! guard of a root is dropped. A spare carries a temp file's name: listings
//! skip it, and a crash's leftover is removed when the checkpoint is next
//! opened like any other temp file. If another opener removes it meanwhile,
//! the write that takes it finds its rename failing with `NotFound` and
//! writes again under a new name. A recycled file that some other program
//! still has open is rewritten by the write that reuses it (where a removed
//! one would keep its content for that reader): nothing in weir reads a
//! file past the retention.

use std::collections::{HashMap, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

use crate::storage::durable::temp_path;

/// The most spares one directory keeps (a purge of old log entries or state
/// versions removes about ten files at a time).
pub(crate) const MAX_SPARES: usize = 16;

/// How many waiting jobs wake the background thread when none is urgent.
const WAKE_AT: usize = 8;

/// A spare taken for a write: a temp file opened for writing at its start,
/// empty or holding old content the write must cut off ([`Spare::finish`]).
#[derive(Debug)]
pub(crate) struct Spare {
    /// The open file.
    pub(crate) file: fs::File,
    /// Its temp name.
    pub(crate) path: PathBuf,
    /// Whether it may still hold old content (taken for a durable write, not
    /// known to be empty), which the write must cut off with [`Spare::finish`].
    pub(crate) kept: bool,
}

impl Spare {
    /// Cuts the file to the `len` bytes just written over its start
    /// (frees blocks only when the old content was longer).
    pub(crate) fn finish(file: &fs::File, len: usize) -> std::io::Result<()> {
        file.set_len(len as u64)
    }
}

/// One directory's spares.
#[derive(Debug, Default)]
struct Slot {
    /// Spare files, closed (a checkpoint of many state partitions must not
    /// hold descriptors per directory), oldest first.
    /// With each: whether it is known to be empty (made, or emptied by the
    /// background thread), so that a write opens it without truncating
    /// (on ext4 a truncation to zero makes the file's close start its
    /// writeback at once: `auto_da_alloc`).
    ready: VecDeque<(PathBuf, bool)>,
    /// Whether the background thread is making one.
    making: bool,
    /// Recycled files the background thread is to empty before they are
    /// ready (queued or being emptied).
    emptying: usize,
}

#[derive(Debug, Default)]
struct Registry {
    /// Roots of live guards (a root guarded twice is listed twice).
    roots: Vec<PathBuf>,
    /// The directories that have spares or one coming.
    slots: HashMap<PathBuf, Slot>,
    /// The directory the background thread is making a spare in now (a
    /// dropped guard waits for it, so that no file appears after).
    creating: Option<PathBuf>,
    /// Jobs waiting for the background thread, in order.
    queue: Vec<Job>,
    /// Whether the background thread is to take the queue now.
    wake: bool,
}

impl Registry {
    fn live(&self, dir: &Path) -> bool {
        self.roots.iter().any(|r| dir.starts_with(r))
    }

    /// Whether the background thread still has work below a root no
    /// longer guarded (a dropped guard waits for it to end).
    fn busy_outside_roots(&self) -> bool {
        self.creating.as_ref().is_some_and(|d| !self.live(d))
            || self
                .slots
                .iter()
                .any(|(d, s)| s.emptying > 0 && !self.live(d))
    }

    /// Queues `job` for the background thread, waking it when `urgent` or
    /// when [`WAKE_AT`] jobs wait; false when there is no such thread.
    fn send(&mut self, job: Job, urgent: bool) -> bool {
        if !started() {
            return false;
        }
        self.queue.push(job);
        if urgent || self.queue.len() >= WAKE_AT {
            self.wake();
        }
        true
    }

    /// Wakes the background thread to take the jobs waiting.
    fn wake(&mut self) {
        if !self.wake {
            self.wake = true;
            shared().work.notify_one();
        }
    }
}

/// What the background thread is asked to do.
#[derive(Debug)]
enum Job {
    /// Make a new spare in this directory.
    Make(PathBuf),
    /// Empty this recycled file of the directory, then keep it as a spare.
    Empty { dir: PathBuf, path: PathBuf },
}

/// The registry, the signal that the background thread ended a job (a
/// spare made or emptied), and the one that wakes it.
#[derive(Debug, Default)]
struct Shared {
    registry: Mutex<Registry>,
    made: Condvar,
    work: Condvar,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(Shared::default)
}

fn registry() -> MutexGuard<'static, Registry> {
    shared().registry.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether the background thread making and emptying spares runs, started
/// at first use (false when the system refused a thread: writes then create
/// their files themselves, and files that would need emptying are removed
/// instead of recycled).
fn started() -> bool {
    static STARTED: OnceLock<bool> = OnceLock::new();
    *STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("weir-spare-files".into())
            .spawn(work)
            .is_ok()
    })
}

/// The background thread: takes the waiting jobs whenever woken.
fn work() {
    loop {
        let jobs = {
            let mut reg = registry();
            while !reg.wake {
                reg = shared().work.wait(reg).unwrap_or_else(|e| e.into_inner());
            }
            reg.wake = false;
            let mut jobs = std::mem::take(&mut reg.queue);
            // A spare to make is wanted by a write now: before the files
            // waiting to be emptied.
            jobs.sort_by_key(|j| !matches!(j, Job::Make(_)));
            jobs
        };
        for job in jobs {
            #[cfg(test)]
            drop(PAUSE.lock().unwrap_or_else(|e| e.into_inner()));
            // Neither job panics once it has marked its work in the
            // registry (a dropped guard waits for that mark to clear); a
            // panic before it must not end the thread, which later jobs
            // wait for.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job {
                Job::Make(dir) => make(dir),
                Job::Empty { dir, path } => empty(dir, path),
            }));
        }
    }
}

/// Held by a test to keep the background thread from starting its next job.
#[cfg(test)]
static PAUSE: Mutex<()> = Mutex::new(());

/// Makes a spare for `dir`, unless the request was withdrawn meanwhile (its
/// root's last guard dropped): then nothing is left behind.
fn make(dir: PathBuf) {
    // Named before `creating` is set: nothing between setting and clearing
    // it can panic (a dropped guard waits for it to clear).
    let path = temp_path(&dir.join("spare"));
    {
        let mut reg = registry();
        if !reg.live(&dir) || !reg.slots.get(&dir).is_some_and(|s| s.making) {
            return;
        }
        reg.creating = Some(dir.clone());
    }
    let made = fs::File::create(&path).is_ok();
    let mut reg = registry();
    let live = reg.live(&dir);
    let keep = match reg.slots.get_mut(&dir) {
        Some(slot) => {
            slot.making = false;
            let keep = made && live && slot.ready.len() < MAX_SPARES;
            if keep {
                slot.ready.push_back((path.clone(), true));
            }
            keep
        }
        None => false,
    };
    if made && !keep {
        let _ = fs::remove_file(&path);
    }
    reg.creating = None;
    drop(reg);
    shared().made.notify_all();
}

/// Empties the recycled file `path` of `dir` and keeps it as a spare, or
/// removes it when `dir` is no longer below a live guard's root (or has its
/// spares already, or the file cannot be emptied).
fn empty(dir: PathBuf, path: PathBuf) {
    let live = registry().live(&dir);
    let emptied = live
        && fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(&path)
            .is_ok();
    let mut reg = registry();
    let live = reg.live(&dir);
    let keep = match reg.slots.get_mut(&dir) {
        Some(slot) => {
            slot.emptying = slot.emptying.saturating_sub(1);
            let keep = emptied && live && slot.ready.len() < MAX_SPARES;
            if keep {
                slot.ready.push_back((path.clone(), true));
            }
            keep
        }
        None => false,
    };
    if !keep {
        // Removed while the registry is held: a dropped guard waiting for
        // this directory finds the file gone.
        let _ = fs::remove_file(&path);
    }
    drop(reg);
    shared().made.notify_all();
}

/// Takes a spare of `dir` if one is ready, opened for writing at its start,
/// and asks for another when that was the last one and `dir` is below a
/// live guard's root. `durable`: the directory's writes fsync, so a spare's
/// old content is kept for the write to overwrite and cut
/// ([`Spare::finish`]); otherwise the spare is empty (one known to be empty
/// is not truncated again). Opening an existing file costs a fraction of
/// creating one.
pub(crate) fn take(dir: &Path, durable: bool) -> Option<Spare> {
    let mut reg = registry();
    if !reg.live(dir) {
        return None;
    }
    let slot = reg.slots.entry(dir.to_path_buf()).or_default();
    let taken = slot.ready.pop_front();
    let last = slot.ready.is_empty();
    // Recycled files being emptied are spares soon: none made then, but
    // the background thread woken to finish them.
    let finish = last && slot.emptying > 0;
    let make = last && slot.emptying == 0 && !slot.making;
    if finish {
        reg.wake();
    }
    if make {
        let making = reg.send(Job::Make(dir.to_path_buf()), true);
        if let Some(slot) = reg.slots.get_mut(dir) {
            slot.making = making;
        }
    }
    drop(reg);
    // Gone when another opener of the checkpoint removed it as a leftover.
    let (path, empty) = taken?;
    let file = fs::OpenOptions::new()
        .write(true)
        .truncate(!durable && !empty)
        .open(&path)
        .ok()?;
    Some(Spare {
        file,
        path,
        kept: durable && !empty,
    })
}

/// Keeps the file at `path` in `dir` as a spare instead of removing it, when
/// `dir` is below a live guard's root and has fewer than [`MAX_SPARES`]:
/// renamed to a temp name (which listings skip) in the same directory.
/// Unless `durable` (the directory's writes fsync and overwrite old
/// content; without fsync they need empty spares), the background thread
/// empties it first. False when the caller should remove the file.
pub(crate) fn recycle(dir: &Path, path: &Path, durable: bool) -> bool {
    let emptied = !durable;
    let mut reg = registry();
    if !reg.live(dir) {
        return false;
    }
    let slot = reg.slots.entry(dir.to_path_buf()).or_default();
    // Only a regular file with no other name (not a directory, nor a link
    // whose target a later write would truncate, nor a file hard-linked
    // elsewhere, as by a backup, whose copy a later write would change).
    if slot.ready.len() + slot.emptying >= MAX_SPARES
        || (emptied && !started())
        || !fs::symlink_metadata(path).is_ok_and(|m| sole_regular_file(&m))
    {
        return false;
    }
    let spare = temp_path(&dir.join("spare"));
    if fs::rename(path, &spare).is_err() {
        return false;
    }
    if !emptied {
        slot.ready.push_back((spare, false));
        return true;
    }
    slot.emptying += 1;
    let dir = dir.to_path_buf();
    let job = Job::Empty {
        dir: dir.clone(),
        path: spare.clone(),
    };
    if !reg.send(job, false) {
        if let Some(slot) = reg.slots.get_mut(&dir) {
            slot.emptying -= 1;
        }
        let _ = fs::remove_file(&spare);
    }
    true
}

/// Whether `m` is a regular file that has no other name (link count 1).
fn sole_regular_file(m: &fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        m.file_type().is_file() && m.nlink() == 1
    }
    #[cfg(not(unix))]
    {
        m.file_type().is_file()
    }
}

/// Keeps spare files in the directories below its roots while it lives;
/// the last guard of a root removes the spares below it (waiting for the
/// ones being made or emptied there), so none is left after.
#[derive(Debug)]
pub(crate) struct SpareGuard {
    roots: Vec<PathBuf>,
}

impl SpareGuard {
    /// Starts keeping spares below each of `roots` (directories that
    /// opening the checkpoint cleans of temp files, so that a crash's
    /// spares do not stay).
    pub(crate) fn new(roots: Vec<PathBuf>) -> SpareGuard {
        registry().roots.extend(roots.iter().cloned());
        SpareGuard { roots }
    }
}

impl Drop for SpareGuard {
    fn drop(&mut self) {
        let mut reg = registry();
        for root in &self.roots {
            if let Some(i) = reg.roots.iter().position(|r| r == root) {
                reg.roots.swap_remove(i);
            }
        }
        if reg.busy_outside_roots() {
            // Its files may wait in the queue.
            reg.wake();
        }
        while reg.busy_outside_roots() {
            reg = shared().made.wait(reg).unwrap_or_else(|e| e.into_inner());
        }
        let gone: Vec<PathBuf> = reg.slots.keys().filter(|d| !reg.live(d)).cloned().collect();
        let mut remove = Vec::new();
        for dir in gone {
            if let Some(slot) = reg.slots.remove(&dir) {
                remove.extend(slot.ready.into_iter().map(|(p, _)| p));
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
    use std::io::Write;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A new directory `name` in a temp root, and a guard over it.
    fn guarded(name: &str) -> (tempfile::TempDir, PathBuf, SpareGuard) {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(name);
        fs::create_dir_all(&dir).unwrap();
        let guard = SpareGuard::new(vec![dir.clone()]);
        (root, dir, guard)
    }

    /// Writes a new file `name` of `len` bytes in `dir` and recycles it
    /// for writes without fsync: whether it was kept.
    fn recycle_new(dir: &Path, name: &str, len: usize) -> bool {
        let old = dir.join(name);
        fs::write(&old, vec![b'o'; len]).unwrap();
        recycle(dir, &old, false)
    }

    /// Spares ready in `dir`, once the background thread has taken the
    /// jobs waiting (woken for them) and is done with it.
    fn ready(dir: &Path) -> usize {
        registry().wake();
        settled(dir)
    }

    /// Spares ready in `dir` once nothing is being made or emptied there
    /// (or after 10 s), without waking the background thread.
    fn settled(dir: &Path) -> usize {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            let reg = registry();
            let slot = reg.slots.get(dir);
            if slot.is_none_or(|s| !s.making && s.emptying == 0) || Instant::now() > until {
                return slot.map_or(0, |s| s.ready.len());
            }
            drop(reg);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn spares_are_kept_below_a_guarded_root_and_removed_with_its_last_guard() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("offsets");
        fs::create_dir_all(&dir).unwrap();
        // No guard: no spare, none requested, nothing recycled.
        fs::write(dir.join("0"), b"old").unwrap();
        assert!(!recycle(&dir, &dir.join("0"), true));
        fs::remove_file(dir.join("0")).unwrap();
        assert!(take(&dir, true).is_none());
        assert!(files(&dir).is_empty());

        let guard = SpareGuard::new(vec![root.path().to_path_buf()]);
        let second = SpareGuard::new(vec![root.path().to_path_buf()]);
        assert!(
            take(&dir, true).is_none(),
            "the first write makes its own file"
        );
        assert_eq!(ready(&dir), 1);
        let names = files(&dir);
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(crate::storage::durable::is_temp_name(&names[0]));

        let spare = take(&dir, true).expect("a spare is ready");
        assert!(spare.path.starts_with(&dir));
        assert_eq!(ready(&dir), 1, "the last one taken, another is made");
        fs::remove_file(&spare.path).unwrap();

        drop(second);
        assert_eq!(files(&dir).len(), 1, "another guard keeps the root live");
        drop(guard);
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
        assert!(take(&dir, true).is_none());
        assert!(!registry().slots.contains_key(&dir));
    }

    #[test]
    fn a_write_that_reuses_a_longer_recycled_file_holds_exactly_its_bytes() {
        for sync in [true, false] {
            reuse_a_longer_recycled_file(sync);
        }
    }

    fn reuse_a_longer_recycled_file(sync: bool) {
        use crate::storage::local::LocalDir;
        use crate::storage::Created;
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("commits");
        let local = LocalDir {
            root: root.path().to_path_buf(),
            sync,
        };
        let _guard = SpareGuard::new(vec![root.path().to_path_buf()]);
        let long = vec![b'x'; 10_000];
        // The first write makes its own file and asks for a spare, which
        // the second takes (asking for another).
        assert_eq!(
            local.put_create("commits/0", &long).unwrap(),
            Created::Created
        );
        assert_eq!(ready(&dir), 1);
        assert_eq!(
            local.put_create("commits/1", &long).unwrap(),
            Created::Created
        );
        assert_eq!(ready(&dir), 1);
        // Retention: entry 0 becomes the spare after the made one.
        local.delete("commits/0").unwrap();
        assert_eq!(ready(&dir), 2);
        assert_eq!(
            local.put_create("commits/2", b"two").unwrap(),
            Created::Created
        );
        assert_eq!(
            local.put_create("commits/3", b"v1\n{}").unwrap(),
            Created::Created
        );
        assert_eq!(local.get("commits/2").unwrap().unwrap(), b"two");
        assert_eq!(local.get("commits/3").unwrap().unwrap(), b"v1\n{}");
        assert_eq!(local.get("commits/1").unwrap().unwrap(), long);
        let names: Vec<String> = local
            .list_entries("commits")
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["1", "2", "3"]);
    }

    #[test]
    fn a_removed_file_is_recycled_up_to_the_limit_and_cut_to_its_new_content() {
        let (_root, dir, guard) = guarded("commits");
        for i in 0..MAX_SPARES + 2 {
            let old = dir.join(i.to_string());
            fs::write(&old, b"an old entry").unwrap();
            let kept = recycle(&dir, &old, true);
            assert_eq!(kept, i < MAX_SPARES, "{i}");
            if kept {
                assert!(!old.exists());
            } else {
                fs::remove_file(&old).unwrap();
            }
        }
        assert_eq!(files(&dir).len(), MAX_SPARES);
        assert!(files(&dir)
            .iter()
            .all(|n| crate::storage::durable::is_temp_name(n)));

        let mut spare = take(&dir, true).expect("a recycled file");
        assert_eq!(
            fs::read(&spare.path).unwrap(),
            b"an old entry",
            "kept when taken for a durable write"
        );
        spare.file.write_all(b"new").unwrap();
        Spare::finish(&spare.file, 3).unwrap();
        assert_eq!(fs::read(&spare.path).unwrap(), b"new");
        fs::remove_file(&spare.path).unwrap();
        let spare = take(&dir, false).expect("a recycled file");
        assert_eq!(
            fs::metadata(&spare.path).unwrap().len(),
            0,
            "truncated when taken for a write without fsync"
        );
        fs::remove_file(&spare.path).unwrap();
        assert_eq!(ready(&dir), MAX_SPARES - 2, "none made while some are left");

        drop(guard);
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
    }

    #[test]
    fn a_file_with_another_name_is_removed_not_recycled() {
        let (root, dir, _guard) = guarded("commits");
        // A backup hard-linked the entry (`cp -al`): reusing the file
        // would change the backup's copy.
        fs::write(dir.join("7"), b"entry 7").unwrap();
        fs::hard_link(dir.join("7"), root.path().join("backup-7")).unwrap();
        for durable in [false, true] {
            assert!(!recycle(&dir, &dir.join("7"), durable));
        }
        assert_eq!(fs::read(root.path().join("backup-7")).unwrap(), b"entry 7");
    }

    #[test]
    fn a_file_recycled_for_writes_without_fsync_is_emptied_before_it_is_a_spare() {
        let (_root, dir, guard) = guarded("offsets");
        for i in 0..MAX_SPARES + 2 {
            let old = dir.join(i.to_string());
            fs::write(&old, vec![b'x'; 50_000]).unwrap();
            let kept = recycle(&dir, &old, false);
            assert_eq!(
                kept,
                i < MAX_SPARES,
                "{i}: the limit counts files being emptied"
            );
            if !kept {
                fs::remove_file(&old).unwrap();
            }
        }
        assert_eq!(ready(&dir), MAX_SPARES);
        let names = files(&dir);
        assert_eq!(names.len(), MAX_SPARES, "{names:?}");
        for n in &names {
            assert!(crate::storage::durable::is_temp_name(n), "{n}");
            assert_eq!(fs::metadata(dir.join(n)).unwrap().len(), 0, "{n} emptied");
        }
        for _ in 0..4 {
            let spare = take(&dir, false).expect("an emptied spare");
            assert!(!spare.kept);
            fs::remove_file(&spare.path).unwrap();
        }

        // Recycled just before the last guard goes: nothing is left after
        // it, emptied or not.
        for i in 0..4 {
            let name = format!("late{i}");
            assert!(recycle_new(&dir, &name, 50_000), "room for {i}");
            assert!(!dir.join(name).exists());
        }
        drop(guard);
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
        assert!(!registry().slots.contains_key(&dir));
    }

    #[test]
    fn a_dropped_guard_waits_for_the_files_being_emptied_below_it() {
        let (_root, dir, guard) = guarded("commits");
        // The guard is dropped on another thread when told (started before
        // the pause: a thread that failed to start drops it here).
        let (go, wait) = mpsc::channel::<()>();
        let dropping = std::thread::spawn(move || {
            let _ = wait.recv();
            drop(guard);
        });
        // The background thread held before its next job: the recycled
        // files wait to be emptied.
        let pause = PAUSE.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..3 {
            assert!(recycle_new(&dir, &i.to_string(), 10_000), "room for {i}");
        }
        assert_eq!(registry().slots.get(&dir).map(|s| s.emptying), Some(3));
        go.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !dropping.is_finished(),
            "the last guard returned while files below it were still to be emptied"
        );
        assert_eq!(files(&dir).len(), 3, "{:?}", files(&dir));
        drop(pause);
        let until = Instant::now() + Duration::from_secs(10);
        while !dropping.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            dropping.is_finished(),
            "the last guard still waits: the background thread was not woken"
        );
        dropping.join().unwrap();
        assert!(files(&dir).is_empty(), "{:?}", files(&dir));
        assert!(!registry().slots.contains_key(&dir));
    }

    #[test]
    fn recycled_files_are_emptied_when_enough_wait_or_when_a_write_needs_one() {
        let (_root, dir, _guard) = guarded("state");
        let recycle_n = |from: usize, n: usize| {
            for i in from..from + n {
                assert!(recycle_new(&dir, &i.to_string(), 10_000), "room for {i}");
            }
        };
        // A few waiting are left for later; a write that finds none ready
        // wakes the thread to finish them (it makes its own file meanwhile).
        recycle_n(0, 2);
        assert!(take(&dir, false).is_none(), "none emptied yet");
        assert_eq!(settled(&dir), 2, "the take woke the thread for them");
        for _ in 0..2 {
            let spare = take(&dir, false).expect("an emptied spare");
            fs::remove_file(&spare.path).unwrap();
        }
        assert_eq!(settled(&dir), 1, "the last one taken, another is made");
        // As many as wake the thread: emptied without a write asking.
        recycle_n(2, WAKE_AT);
        assert_eq!(settled(&dir), WAKE_AT + 1);
        for n in files(&dir) {
            assert_eq!(fs::metadata(dir.join(&n)).unwrap().len(), 0, "{n} emptied");
        }
    }
}
