//! The local file system backend: every write is atomic (temp file, fsync,
//! then rename or hard link, fsync of the directory), and a create-once
//! write publishes its temp file with a rename that refuses to replace
//! (`renameat2(RENAME_NOREPLACE)`, or `hard_link` where the file system
//! has no such rename), which fails when the name exists, so two writers
//! of one name cannot both succeed.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{spare, Created, Entry};
use crate::error::{Result, WeirError};
use crate::storage::durable::{
    create_dir_all_synced, is_temp_name, sync_dir, temp_path, write_atomic,
};

/// A directory on the local file system.
#[derive(Debug, Clone)]
pub(crate) struct LocalDir {
    pub(crate) root: PathBuf,
    pub(crate) sync: bool,
}

impl LocalDir {
    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        rel.split('/')
            .filter(|s| !s.is_empty())
            .fold(self.root.clone(), |p, s| p.join(s))
    }

    pub(crate) fn put_create(&self, rel: &str, bytes: &[u8]) -> Result<Created> {
        let path = self.path(rel);
        let dir = path.parent().unwrap_or(Path::new("."));
        create_dir_all_synced(dir, self.sync)?;
        let mut attempts = 0;
        let linked = loop {
            // A spare made ahead of time, else a file made now; a retry
            // (its temp file was removed) makes its own.
            let spare = if attempts == 0 {
                // Kept content is overwritten in place: only before an fsync
                // (see `spare`).
                spare::take(dir, self.sync)
            } else {
                None
            };
            let (tmp, file, kept) = match spare {
                Some(s) => (s.path, Some(s.file), s.kept),
                None => (temp_path(&path), None, false),
            };
            let written = (|| {
                let mut f = match file {
                    Some(f) => f,
                    None => fs::File::create(&tmp)?,
                };
                f.write_all(bytes)?;
                if kept {
                    spare::Spare::finish(&f, bytes.len())?;
                }
                if self.sync {
                    f.sync_all()?;
                }
                Ok(())
            })();
            if let Err(e) = written {
                let _ = fs::remove_file(&tmp);
                return Err(WeirError::io(&tmp, e));
            }
            crate::failpoint::failpoint_here("before_rename");
            let linked = publish_once(&tmp, &path);
            match linked {
                // The temp file was removed before it was linked: another
                // run opening the checkpoint took it for a crash's leftover.
                // Written again under a new name (the outcome is then the
                // same as if this write had come a moment later).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts < 3 => {
                    attempts += 1;
                }
                other => break other,
            }
        };
        match linked {
            Ok(()) => {
                if self.sync {
                    sync_dir(dir)?;
                }
                Ok(Created::Created)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(Created::Exists),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Unsupported | std::io::ErrorKind::PermissionDenied
                ) || e.raw_os_error() == Some(libc::EPERM) =>
            {
                Err(WeirError::io(
                    &path,
                    std::io::Error::new(
                        e.kind(),
                        format!("{e}: this file system refuses a rename that does not replace and a hard link, one of which weir's create-once checkpoint writes need; put the checkpoint on a local file system such as ext4, xfs or apfs, or on s3://"),
                    ),
                ))
            }
            Err(e) => Err(WeirError::io(&path, e)),
        }
    }

    pub(crate) fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.path(rel), bytes, self.sync)
    }

    pub(crate) fn get(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(rel);
        match fs::read(&path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(WeirError::io(&path, e)),
        }
    }

    /// The regular files directly in `rel_dir` that are not temp files
    /// (writes in progress, spares), unsorted: each entry's type from the
    /// directory itself, without a `stat` per file where the file system
    /// records it (ext4, xfs, tmpfs).
    fn files(&self, rel_dir: &str) -> Result<Vec<(fs::DirEntry, String)>> {
        let mut out = Vec::new();
        for e in self.entries(rel_dir)? {
            let name = e.file_name().to_string_lossy().to_string();
            if is_temp_name(&name) {
                continue;
            }
            match e.file_type() {
                Ok(t) if t.is_file() => out.push((e, name)),
                Ok(_) => {}
                // Removed meanwhile.
                Err(er) if er.kind() == std::io::ErrorKind::NotFound => {}
                Err(er) => return Err(WeirError::io(e.path(), er)),
            }
        }
        Ok(out)
    }

    /// The names of the directories directly under `rel_dir`, sorted.
    pub(crate) fn list_dirs(&self, rel_dir: &str) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .entries(rel_dir)?
            .into_iter()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().to_string())
            .collect();
        out.sort();
        Ok(out)
    }

    /// Everything directly in `rel_dir` (none when it does not exist).
    fn entries(&self, rel_dir: &str) -> Result<Vec<fs::DirEntry>> {
        let dir = self.path(rel_dir);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(WeirError::io(&dir, e)),
        };
        rd.map(|e| e.map_err(|e| WeirError::io(&dir, e))).collect()
    }

    /// The names of [`LocalDir::files`], sorted.
    pub(crate) fn list_names(&self, rel_dir: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = self.files(rel_dir)?.into_iter().map(|(_, n)| n).collect();
        names.sort();
        Ok(names)
    }

    pub(crate) fn list_entries(&self, rel_dir: &str) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        for (e, name) in self.files(rel_dir)? {
            let md = match e.metadata() {
                Ok(m) => m,
                // Removed meanwhile.
                Err(er) if er.kind() == std::io::ErrorKind::NotFound => continue,
                Err(er) => return Err(WeirError::io(e.path(), er)),
            };
            let modified_ms = md
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            out.push(Entry {
                name,
                size: md.len(),
                modified_ms,
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    pub(crate) fn delete(&self, rel: &str) -> Result<()> {
        let path = self.path(rel);
        // An old log entry or state file becomes the directory's next spare
        // rather than a freed inode (see `spare`).
        if let Some(dir) = path.parent() {
            if spare::recycle(dir, &path, self.sync) {
                return Ok(());
            }
        }
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(WeirError::io(&path, e)),
        }
    }
}

/// Gives the complete file `tmp` the name `path` unless `path` exists
/// (`AlreadyExists` then); `tmp` is gone afterwards either way. One
/// rename where the file system refuses to replace on rename (no inode
/// freed per write: creating files on ext4 scans recently freed inodes),
/// else a hard link and a removal.
fn publish_once(tmp: &Path, path: &Path) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes());
        if let (Ok(from), Ok(to)) = (c(tmp), c(path)) {
            // SAFETY: both are NUL-terminated paths that outlive the call.
            let r = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    from.as_ptr(),
                    libc::AT_FDCWD,
                    to.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            };
            if r == 0 {
                return Ok(());
            }
            let e = std::io::Error::last_os_error();
            if !matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
            ) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    let _ = fs::remove_file(tmp);
                }
                return Err(e);
            }
        }
    }
    let linked = fs::hard_link(tmp, path);
    let _ = fs::remove_file(tmp);
    linked
}
