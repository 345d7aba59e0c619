//! Durable writes to the local file system: a file appears whole or not at
//! all (temp file, fsync, rename, fsync of the directory), directories are
//! created with their names made durable, and the temp files a crash leaves
//! behind are recognised and removed. The checkpoint, the local storage
//! backend, the file sink and the RocksDB store all write this way.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, WeirError};

/// Writes `bytes` to `path` atomically: temp file, fsync (when `sync`), rename, fsync dir.
///
/// Missing directories on the way are created, each fsynced in its parent
/// (when `sync`). A crash can leave the temp file (`.<name>.<uuid>.tmp`)
/// behind; [`remove_temp_files`] removes it when the checkpoint opens again.
pub fn write_atomic(path: &Path, bytes: &[u8], sync: bool) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    create_dir_all_synced(dir, sync)?;
    let tmp = temp_path(path);
    {
        let mut f = fs::File::create(&tmp).map_err(|e| WeirError::io(&tmp, e))?;
        f.write_all(bytes).map_err(|e| WeirError::io(&tmp, e))?;
        if sync {
            f.sync_all().map_err(|e| WeirError::io(&tmp, e))?;
        }
    }
    crate::failpoint::failpoint_here("before_rename");
    fs::rename(&tmp, path).map_err(|e| WeirError::io(path, e))?;
    if sync {
        sync_dir(dir)?;
    }
    Ok(())
}

/// A fresh temp file name beside `path`: `.<name>.<uuid>.tmp` (what
/// [`is_temp_name`] recognises and [`remove_temp_files`] removes).
pub fn temp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file"),
        uuid::Uuid::new_v4().simple()
    ))
}

/// Fsyncs a directory, so the names created, renamed or removed in it are
/// durable. File systems that cannot fsync a directory are tolerated.
pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = fs::File::open(dir).map_err(|e| WeirError::io(dir, e))?;
    match d.sync_all() {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::Unsupported
            ) =>
        {
            Ok(())
        }
        Err(e) => Err(WeirError::io(dir, e)),
    }
}

/// `fs::create_dir_all` that, when `sync`, fsyncs the parent of every
/// directory it creates (a new directory's name is durable only once its
/// parent is fsynced), so that what is later written inside survives a power
/// cut together with its path.
pub fn create_dir_all_synced(dir: &Path, sync: bool) -> Result<()> {
    create_dirs_with(dir, &mut |parent| {
        if sync {
            sync_dir(parent)
        } else {
            Ok(())
        }
    })
}

/// Creates `dir` and its missing ancestors top-down, calling `synced` on the
/// parent of each directory it created, right after creating it.
fn create_dirs_with(dir: &Path, synced: &mut dyn FnMut(&Path) -> Result<()>) -> Result<()> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d);
        cur = d.parent();
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {
                let parent = match d.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
                synced(parent)?;
            }
            // Created meanwhile by someone else: theirs to sync.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && d.is_dir() => {}
            Err(e) => return Err(WeirError::io(d, e)),
        }
    }
    Ok(())
}

/// True for the name of a temp file [`write_atomic`] creates:
/// `.<name>.<32 hex digits>.tmp`.
pub fn is_temp_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.').and_then(|r| r.strip_suffix(".tmp")) else {
        return false;
    };
    match rest.rsplit_once('.') {
        Some((stem, id)) => {
            !stem.is_empty() && id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Removes, in `dir` and the directories below it, the temp files
/// [`write_atomic`] left behind when a process died before its rename
/// (never a complete file: a temp file is only ever renamed). Returns how
/// many were removed. Only for directories no running writer uses.
pub fn remove_temp_files(dir: &Path) -> Result<usize> {
    remove_files_below(dir, &|_| true, &is_temp_name)
}

/// [`remove_temp_files`] in `dir` alone, not below it.
pub(crate) fn remove_temp_files_in(dir: &Path) -> Result<usize> {
    remove_files_below(dir, &|_| false, &is_temp_name)
}

/// Removes the files in `dir` whose name `remove` accepts, and in the
/// directories below it whose name `descend` accepts; returns how many. A
/// missing `dir` has none; a file removed meanwhile by another is fine.
pub fn remove_files_below(
    dir: &Path,
    descend: &dyn Fn(&str) -> bool,
    remove: &dyn Fn(&str) -> bool,
) -> Result<usize> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(WeirError::io(dir, e)),
    };
    let mut removed = 0;
    for e in rd {
        let e = e.map_err(|e| WeirError::io(dir, e))?;
        let name = e.file_name().to_string_lossy().to_string();
        let ft = e.file_type().map_err(|er| WeirError::io(e.path(), er))?;
        if ft.is_dir() && descend(&name) {
            removed += remove_files_below(&e.path(), descend, remove)?;
        } else if ft.is_file() && remove(&name) {
            match fs::remove_file(e.path()) {
                Ok(()) => removed += 1,
                Err(er) if er.kind() == std::io::ErrorKind::NotFound => {}
                Err(er) => return Err(WeirError::io(e.path(), er)),
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_created_directory_is_synced_in_its_parent() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a").join("b").join("c");
        let mut synced = Vec::new();
        create_dirs_with(&deep, &mut |p| {
            assert!(p.is_dir(), "the parent exists when it is synced");
            synced.push(p.to_path_buf());
            Ok(())
        })
        .unwrap();
        assert!(deep.is_dir());
        assert_eq!(
            synced,
            vec![
                root.path().to_path_buf(),
                root.path().join("a"),
                root.path().join("a").join("b"),
            ],
            "one fsync per new directory, in its parent, top-down"
        );
        // Nothing new: nothing synced.
        synced.clear();
        create_dirs_with(&deep, &mut |p| {
            synced.push(p.to_path_buf());
            Ok(())
        })
        .unwrap();
        assert!(synced.is_empty());
        // An fsync failure is reported, not swallowed.
        let err = create_dirs_with(&root.path().join("x/y"), &mut |p| {
            Err(WeirError::io(p, std::io::Error::other("disk gone")))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk gone"), "{err}");
        // The real thing on a real file system.
        create_dir_all_synced(&root.path().join("s/t"), true).unwrap();
        assert!(root.path().join("s/t").is_dir());
    }

    #[test]
    fn temp_names_are_recognised_exactly() {
        let id = uuid::Uuid::new_v4().simple().to_string();
        assert!(is_temp_name(&format!(".7.{id}.tmp")));
        assert!(is_temp_name(&format!(".metadata.{id}.tmp")));
        for name in [
            "7".to_string(),
            format!("7.{id}.tmp"),
            format!(".7.{id}"),
            ".7.tmp".to_string(),
            format!(".7.{}.tmp", &id[1..]),
            format!("..{id}.tmp"),
            ".f01.tmp".to_string(),
        ] {
            assert!(!is_temp_name(&name), "{name}");
        }
    }
}
