//! One storage layer for checkpoints, file sources and sinks and static
//! tables: a directory given as a plain local path, a `file:///` URL or an
//! `s3://bucket/prefix` URL, with a synchronous API the engine calls from
//! its own threads (object storage requests run on a runtime of their own,
//! see `runtime`).
//!
//! Names below the root are relative, `/`-separated paths (`offsets/7`).
//! Every write is atomic: a reader sees the whole object or none. A
//! create-once write ([`Storage::put_create`]) never replaces what is there:
//! on S3 it is a conditional PUT (`If-None-Match: *`), locally a temp file
//! published with a rename that does not replace (`renameat2`, or
//! `hard_link`); of two writers of one name exactly one
//! succeeds, and the other learns [`Created::Exists`].
//!
//! S3 settings come from the environment (`AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`,
//! `AWS_ALLOW_HTTP`, ...) overridden by session settings with Spark's S3A
//! names: see [`S3Settings`].

mod config;
pub mod durable;
mod local;
mod object;
mod runtime;
pub(crate) mod spare;
mod url;

use std::path::{Path, PathBuf};

pub use config::{S3Settings, S3_SETTINGS};
pub use url::Location;

use crate::error::{Result, WeirError};

/// What a create-once write found.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// The object was written.
    Created,
    /// An object of that name was already there; it was left as it was.
    Exists,
}

/// An object (file) in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name within the listed directory.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written, in ms since the epoch.
    pub modified_ms: i64,
}

/// Requests made to object stores (S3) by this process, by kind; see
/// [`object_requests`]. Local file system operations are not counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requests {
    /// Objects written (PUT, conditional or not).
    pub puts: u64,
    /// Objects read (GET).
    pub gets: u64,
    /// Listings (LIST, one per call; the client pages through large ones).
    pub lists: u64,
    /// Objects removed (DELETE).
    pub deletes: u64,
}

impl Requests {
    /// The requests made since `earlier` (an earlier [`object_requests`]).
    pub fn since(&self, earlier: &Requests) -> Requests {
        Requests {
            puts: self.puts - earlier.puts,
            gets: self.gets - earlier.gets,
            lists: self.lists - earlier.lists,
            deletes: self.deletes - earlier.deletes,
        }
    }
}

/// The requests this process has made to object stores so far: what a
/// checkpoint or a file source costs per batch on S3.
pub fn object_requests() -> Requests {
    object::requests()
}

#[derive(Debug, Clone)]
enum Backend {
    Local(local::LocalDir),
    Object(object::ObjectDir),
}

/// A directory on the local file system or in an object store. Cheap to
/// clone; clones share one client.
#[derive(Debug, Clone)]
pub struct Storage {
    location: Location,
    backend: Backend,
}

impl Storage {
    /// Opens the directory at `location` (see [`Location::parse`]). `s3` is
    /// the session's S3 settings (the environment fills what they leave
    /// unset); `sync`: local writes are fsync'd. An S3 location is checked
    /// with one listing request, so a missing bucket or a refused
    /// credential is reported here.
    pub fn open(location: &str, s3: &S3Settings, sync: bool) -> Result<Storage> {
        match Location::parse(location)? {
            Location::Local(root) => Ok(Storage::local(root, sync)),
            Location::S3 { bucket, prefix } => Ok(Storage {
                backend: Backend::Object(object::ObjectDir::open(&bucket, &prefix, s3)?),
                location: Location::S3 { bucket, prefix },
            }),
        }
    }

    /// A local directory (created when first written to).
    pub fn local(root: impl Into<PathBuf>, sync: bool) -> Storage {
        let root = root.into();
        Storage {
            location: Location::Local(root.clone()),
            backend: Backend::Local(local::LocalDir { root, sync }),
        }
    }

    /// Where this directory is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The local directory, when this is one.
    pub fn local_root(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Local(l) => Some(&l.root),
            Backend::Object(_) => None,
        }
    }

    /// The location for messages: the path or URL, and for S3 a non-default
    /// endpoint. Never a credential.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Object(o) => match o.endpoint() {
                Some(e) => format!("{} (endpoint {e})", self.location),
                None => self.location.to_string(),
            },
            Backend::Local(_) => self.location.to_string(),
        }
    }

    /// The directory `rel` below this one (`rel` need not exist yet).
    pub fn child(&self, rel: &str) -> Result<Storage> {
        check_rel(rel, false)?;
        Ok(match (&self.backend, &self.location) {
            (Backend::Local(l), _) => Storage::local(l.path(rel), l.sync),
            (Backend::Object(o), Location::S3 { bucket, .. }) => {
                let child = o.child(rel);
                Storage {
                    location: Location::S3 {
                        bucket: bucket.clone(),
                        prefix: child.prefix.clone(),
                    },
                    backend: Backend::Object(child),
                }
            }
            (Backend::Object(_), Location::Local(_)) => {
                unreachable!("an object store at a local path")
            }
        })
    }

    /// The path or URL of `rel`, for messages.
    pub fn display_path(&self, rel: &str) -> PathBuf {
        match &self.backend {
            Backend::Local(l) => l.path(rel),
            Backend::Object(o) => o.display_path(rel),
        }
    }

    /// Writes `rel` only if nothing has that name: [`Created::Exists`] (and
    /// nothing written) when something does. Atomic: a reader never sees
    /// part of it.
    pub fn put_create(&self, rel: &str, bytes: &[u8]) -> Result<Created> {
        check_rel(rel, false)?;
        match &self.backend {
            Backend::Local(l) => l.put_create(rel, bytes),
            Backend::Object(o) => o.put_create(rel, bytes),
        }
    }

    /// Writes `rel`, replacing what is there. Atomic.
    pub fn put(&self, rel: &str, bytes: &[u8]) -> Result<()> {
        check_rel(rel, false)?;
        match &self.backend {
            Backend::Local(l) => l.put(rel, bytes),
            Backend::Object(o) => o.put(rel, bytes),
        }
    }

    /// Reads `rel`; `None` when it does not exist.
    pub fn get(&self, rel: &str) -> Result<Option<Vec<u8>>> {
        check_rel(rel, false)?;
        match &self.backend {
            Backend::Local(l) => l.get(rel),
            Backend::Object(o) => o.get(rel),
        }
    }

    /// The names of the objects (files) directly in directory `rel_dir`
    /// (`""`: this one), sorted; none when it does not exist. Not
    /// subdirectories, and not the temp files of local writes in progress.
    pub fn list(&self, rel_dir: &str) -> Result<Vec<String>> {
        check_rel(rel_dir, true)?;
        match &self.backend {
            // Names alone: no `stat` per file.
            Backend::Local(l) => l.list_names(rel_dir),
            Backend::Object(o) => Ok(o
                .list_entries(rel_dir)?
                .into_iter()
                .map(|e| e.name)
                .collect()),
        }
    }

    /// [`Storage::list`] with each object's size and modification time.
    pub fn list_entries(&self, rel_dir: &str) -> Result<Vec<Entry>> {
        check_rel(rel_dir, true)?;
        match &self.backend {
            Backend::Local(l) => l.list_entries(rel_dir),
            Backend::Object(o) => o.list_entries(rel_dir),
        }
    }

    /// Every object below `rel_dir`, in its subdirectories too, each named
    /// by its path from `rel_dir` (`a=1/part-0.json`); a file or directory
    /// whose name `skip` refuses is left out, with all below it. On object
    /// storage one LIST per directory visited (a directory without
    /// subdirectories costs what [`Storage::list_entries`] costs).
    pub fn list_tree(&self, rel_dir: &str, skip: &dyn Fn(&str) -> bool) -> Result<Vec<Entry>> {
        check_rel(rel_dir, true)?;
        let mut out = Vec::new();
        // (directory, its path from `rel_dir`)
        let mut todo = vec![(rel_dir.to_string(), String::new())];
        while let Some((dir, below)) = todo.pop() {
            let (entries, dirs) = match &self.backend {
                Backend::Local(l) => (l.list_entries(&dir)?, l.list_dirs(&dir)?),
                Backend::Object(o) => o.list_level(&dir)?,
            };
            let name_of = |n: &str| {
                if below.is_empty() {
                    n.to_string()
                } else {
                    format!("{below}/{n}")
                }
            };
            for e in entries.into_iter().filter(|e| !skip(&e.name)) {
                out.push(Entry {
                    name: name_of(&e.name),
                    ..e
                });
            }
            for d in dirs.into_iter().filter(|d| !skip(d)) {
                let sub = if dir.is_empty() {
                    d.clone()
                } else {
                    format!("{dir}/{d}")
                };
                todo.push((sub, name_of(&d)));
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Removes `rel`; nothing to do when it does not exist.
    pub fn delete(&self, rel: &str) -> Result<()> {
        check_rel(rel, false)?;
        match &self.backend {
            Backend::Local(l) => l.delete(rel),
            Backend::Object(o) => o.delete(rel),
        }
    }
}

/// A relative name: `/`-separated segments, none empty, `.` or `..`
/// (`""` only where `empty_ok`: the directory itself).
fn check_rel(rel: &str, empty_ok: bool) -> Result<()> {
    if rel.is_empty() && empty_ok {
        return Ok(());
    }
    if rel.is_empty()
        || rel
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == ".." || s.contains('\\'))
    {
        return Err(WeirError::Config(format!(
            "invalid storage name `{rel}`: a relative, `/`-separated name without empty, `.` or `..` segments"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_lists_every_object_below_but_the_skipped_names() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::local(dir.path(), false);
        for name in [
            "a.json",
            "sub/b.json",
            "sub/deeper/c.json",
            "_hidden/d.json",
            "sub/_e",
        ] {
            s.put(name, b"x").unwrap();
        }
        let names: Vec<String> = s
            .list_tree("", &|n| n.starts_with('_'))
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(names, ["a.json", "sub/b.json", "sub/deeper/c.json"]);
        let below: Vec<String> = s
            .list_tree("sub", &|_| false)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(below, ["_e", "b.json", "deeper/c.json"]);
    }

    #[test]
    fn local_create_once_refuses_an_existing_name_and_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        for sync in [false, true] {
            let s = Storage::open(
                dir.path().join(format!("s{sync}")).to_str().unwrap(),
                &S3Settings::default(),
                sync,
            )
            .unwrap();
            assert_eq!(
                s.put_create("offsets/0", b"first").unwrap(),
                Created::Created
            );
            assert_eq!(
                s.put_create("offsets/0", b"second").unwrap(),
                Created::Exists
            );
            assert_eq!(s.get("offsets/0").unwrap().as_deref(), Some(&b"first"[..]));
            // No temp file is left beside it, whichever way it went.
            let names: Vec<String> = std::fs::read_dir(s.display_path("offsets"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
                .collect();
            assert_eq!(names, vec!["0".to_string()]);
            // put replaces; delete removes; a missing name reads as None.
            s.put("offsets/0", b"third").unwrap();
            assert_eq!(s.get("offsets/0").unwrap().as_deref(), Some(&b"third"[..]));
            s.delete("offsets/0").unwrap();
            s.delete("offsets/0").unwrap();
            assert_eq!(s.get("offsets/0").unwrap(), None);
            assert_eq!(
                s.put_create("offsets/0", b"again").unwrap(),
                Created::Created
            );
        }
    }

    #[test]
    fn of_many_local_writers_of_one_name_exactly_one_creates_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::local(dir.path(), false);
        for round in 0..20 {
            let name = format!("commits/{round}");
            let outcomes: Vec<Created> = std::thread::scope(|sc| {
                let hs: Vec<_> = (0..8)
                    .map(|w| {
                        let s = s.clone();
                        let name = name.clone();
                        sc.spawn(move || {
                            s.put_create(&name, format!("writer {w}").as_bytes())
                                .unwrap()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let winners = outcomes.iter().filter(|o| **o == Created::Created).count();
            assert_eq!(winners, 1, "round {round}: {outcomes:?}");
            let text = String::from_utf8(s.get(&name).unwrap().unwrap()).unwrap();
            assert!(text.starts_with("writer "), "{text}");
        }
    }

    #[test]
    fn local_listing_shows_files_only_without_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::open(
            &format!("file://{}", dir.path().display()),
            &S3Settings::default(),
            false,
        )
        .unwrap();
        assert_eq!(s.list("").unwrap(), Vec::<String>::new());
        assert_eq!(s.list("missing").unwrap(), Vec::<String>::new());
        s.put("d/b", b"12").unwrap();
        s.put("d/a", b"1").unwrap();
        s.put("d/sub/c", b"1").unwrap();
        std::fs::write(
            dir.path()
                .join(format!("d/.a.{}.tmp", uuid::Uuid::new_v4().simple())),
            "half",
        )
        .unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.path().join("d/a"), dir.path().join("d/link")).unwrap();
        assert_eq!(s.list("d").unwrap(), vec!["a", "b"]);
        let e = s.list_entries("d").unwrap();
        assert_eq!(
            e.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"],
            "the same files, with their sizes"
        );
        assert_eq!((e[1].name.as_str(), e[1].size), ("b", 2));
        assert!(e[1].modified_ms > 0);
        let child = s.child("d").unwrap();
        assert_eq!(child.list("sub").unwrap(), vec!["c"]);
        assert_eq!(child.location(), &Location::Local(dir.path().join("d")));
        assert_eq!(child.local_root(), Some(dir.path().join("d").as_path()));
    }

    #[test]
    fn bad_names_and_locations_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::local(dir.path(), false);
        for bad in ["", "/abs", "a//b", "../x", "a/./b", "a/", "a\\b"] {
            let err = s.put(bad, b"x").unwrap_err().to_string();
            assert!(err.contains("invalid storage name"), "{bad:?}: {err}");
        }
        assert!(s.child("..").is_err());
        let err = Storage::open("gs://b/x", &S3Settings::default(), false).unwrap_err();
        assert!(err.to_string().contains("not supported"), "{err}");
        let err = Storage::open("s3://", &S3Settings::default(), false).unwrap_err();
        assert!(err.to_string().contains("no bucket"), "{err}");
    }
}
