//! A state partition's versioned files on the storage layer (a local
//! directory or an object store prefix, `state/<op>/<partition>/` of the
//! checkpoint): `<version>.delta` for each committed version and a full
//! `<version>.snapshot` every [`SNAPSHOT_INTERVAL`] versions, in the format
//! of [`encode`]. Both state stores keep their durable state here.
//!
//! Each file is one whole-object write. A version that was already there
//! when the store opened replaces what is there, as Spark's state stores
//! do: it is the leftover of a batch that never reached the commit log (a
//! crash between the state commit and `commits/N`, or commit log entries a
//! user removed to run batches again), which this run runs again. Every
//! other version is written create-once, so a run that fell behind another
//! run of the query on the same checkpoint cannot overwrite that run's
//! state: it is refused, as the logs refuse it.
//!
//! Requests per version: one write (two every [`SNAPSHOT_INTERVAL`]
//! versions); restoring lists the directory once and reads the snapshot and
//! the deltas after it; purging lists it once per [`SNAPSHOT_INTERVAL`]
//! versions and removes what the retention no longer needs.

use crate::error::{Result, WeirError};
use crate::storage::{Created, Storage};

use std::path::Path;

/// A full snapshot is written every this many versions.
pub const SNAPSHOT_INTERVAL: u64 = 10;

/// The header of files written now: their checksum is XXH64 (seed 0).
const MAGIC: &[u8; 8] = b"WEIRST02";
/// The header of files written before: their checksum is FNV-1a 64, which
/// runs a byte at a time (read still, never written).
const MAGIC_FNV: &[u8; 8] = b"WEIRST01";

/// The checksum a file with header `magic` carries over its `body`.
fn checksum(magic: &[u8], body: &[u8]) -> Option<u64> {
    if magic == MAGIC {
        Some(crate::hash::xxh64(body, 0))
    } else if magic == MAGIC_FNV {
        Some(super::fnv64(body))
    } else {
        None
    }
}

/// Encodes entries (value None: a deletion) with a header and checksum;
/// `size_hint`: the bytes to reserve (the last such file's size).
pub(crate) fn encode<'a>(
    entries: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    size_hint: usize,
) -> Vec<u8> {
    let mut e = Encoder::new(size_hint);
    for (k, v) in entries {
        e.entry(k, v);
    }
    e.finish()
}

/// Writes a state file's bytes entry by entry (what [`encode`] does for
/// an iterator), for a caller that visits its entries mutably.
pub(crate) struct Encoder {
    out: Vec<u8>,
}

impl Encoder {
    /// A file with room for `size_hint` bytes before it grows.
    pub(crate) fn new(size_hint: usize) -> Encoder {
        let mut out = Vec::with_capacity(size_hint.max(16));
        out.extend_from_slice(MAGIC);
        Encoder { out }
    }

    /// Appends a key and its value (`None`: removed).
    #[inline]
    pub(crate) fn entry(&mut self, k: &[u8], v: Option<&[u8]>) {
        let out = &mut self.out;
        out.extend_from_slice(&(k.len() as u32).to_le_bytes());
        out.extend_from_slice(k);
        match v {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_le_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend_from_slice(&(-1i32).to_le_bytes()),
        }
    }

    /// The file: the entries and their checksum.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let sum = crate::hash::xxh64(&self.out, 0);
        self.out.extend_from_slice(&sum.to_le_bytes());
        self.out
    }
}

/// A key and its value (`None`: removed), as a state file holds it.
pub(crate) type Entry = (Vec<u8>, Option<Vec<u8>>);

/// Decodes what [`encode`] wrote; a damaged file is an error naming it.
pub(crate) fn decode(path: &Path, data: &[u8]) -> Result<Vec<Entry>> {
    let bad = |why: &str| {
        WeirError::checkpoint(path, format!("damaged state file ({why}); restore it from a backup or start with a new checkpoint location"))
    };
    if data.len() < 16 {
        return Err(bad("bad header"));
    }
    let (body, sum) = data.split_at(data.len() - 8);
    let Some(expected) = checksum(&data[..8], body) else {
        // `WEIRST` and a two-digit version this build does not know: a
        // newer weir's file, not a damaged one.
        if data.starts_with(b"WEIRST") && data[6..8].iter().all(u8::is_ascii_digit) {
            return Err(WeirError::checkpoint(
                path,
                format!(
                    "state file format {}, which this weir does not read (it writes {} and reads WEIRST01 too): written by a newer weir? Run that version rather than starting a new checkpoint location",
                    data[..8].escape_ascii(),
                    MAGIC.escape_ascii(),
                ),
            ));
        }
        return Err(bad("bad header"));
    };
    if expected.to_le_bytes() != sum {
        return Err(bad("checksum mismatch"));
    }
    let mut out = Vec::new();
    let mut i = 8;
    let take = |i: &mut usize, n: usize| -> Result<&[u8]> {
        let s = body.get(*i..*i + n).ok_or_else(|| bad("truncated"))?;
        *i += n;
        Ok(s)
    };
    while i < body.len() {
        let kl = u32::from_le_bytes(take(&mut i, 4)?.try_into().unwrap()) as usize;
        let k = take(&mut i, kl)?.to_vec();
        let vl = i32::from_le_bytes(take(&mut i, 4)?.try_into().unwrap());
        let v = if vl < 0 {
            None
        } else {
            Some(take(&mut i, vl as usize)?.to_vec())
        };
        out.push((k, v));
    }
    Ok(out)
}

/// One partition's `<version>.delta` and `<version>.snapshot` files.
#[derive(Debug, Clone)]
pub(crate) struct VersionFiles {
    storage: Storage,
    /// The version the store opened at: the next one may replace a
    /// leftover of an uncommitted batch.
    opened: u64,
    /// The newest version whose files may be replaced: the newest there
    /// when the store opened (listed once, by [`VersionFiles::restore`] or
    /// at the first write), at least `opened + 1`.
    leftovers_until: std::sync::OnceLock<u64>,
    /// Versions kept restorable (at least 1).
    retain: u64,
}

/// A file's name for `version`: `7.delta`, `10.snapshot`.
fn name(version: u64, kind: &str) -> String {
    format!("{version}.{kind}")
}

impl VersionFiles {
    /// The files in `storage`, for a store opened at version `opened`.
    pub(crate) fn new(storage: Storage, opened: u64, retain: u64) -> VersionFiles {
        VersionFiles {
            storage,
            opened,
            leftovers_until: std::sync::OnceLock::new(),
            retain: retain.max(1),
        }
    }

    /// Records the newest version among `names` (a listing of the
    /// directory) as the newest leftover, once.
    fn note_leftovers<'a>(&self, names: impl Iterator<Item = &'a String>) -> u64 {
        let newest = names
            .filter_map(|n| n.split('.').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        *self
            .leftovers_until
            .get_or_init(|| newest.max(self.opened + 1))
    }

    /// The newest version this store may replace (listing the directory the
    /// first time, when [`VersionFiles::restore`] has not).
    fn leftovers_until(&self) -> Result<u64> {
        match self.leftovers_until.get() {
            Some(v) => Ok(*v),
            None => Ok(self.note_leftovers(self.storage.list("")?.iter())),
        }
    }

    /// Replays version `version` (0: nothing): the entries of the newest
    /// snapshot at or below it (values only), then those of each delta
    /// after it in order (a `None` value: the key was removed). A missing
    /// delta or a damaged file is an error naming it.
    pub(crate) fn restore(
        &self,
        version: u64,
        mut apply: impl FnMut(Vec<u8>, Option<Vec<u8>>) -> Result<()>,
    ) -> Result<()> {
        if version == 0 {
            return Ok(());
        }
        let names = self.storage.list("")?;
        if version == self.opened {
            self.note_leftovers(names.iter());
        }
        let base = names
            .iter()
            .filter_map(|n| n.strip_suffix(".snapshot")?.parse::<u64>().ok())
            .filter(|v| (1..=version).contains(v))
            .max();
        if let Some(b) = base {
            for (k, v) in self.read(b, "snapshot", version)? {
                if let Some(v) = v {
                    apply(k, Some(v))?;
                }
            }
        }
        for v in base.unwrap_or(0) + 1..=version {
            for (k, val) in self.read(v, "delta", version)? {
                apply(k, val)?;
            }
        }
        Ok(())
    }

    /// The bytes of version `version`'s delta, if it is there.
    #[cfg(feature = "rocksdb")]
    pub(crate) fn delta_bytes(&self, version: u64) -> Result<Option<Vec<u8>>> {
        self.storage.get(&name(version, "delta"))
    }

    /// The entries of version `version`'s `kind` file (`delta`,
    /// `snapshot`), read to restore version `restoring`.
    fn read(&self, version: u64, kind: &str, restoring: u64) -> Result<Vec<Entry>> {
        let n = name(version, kind);
        let path = self.storage.display_path(&n);
        match self.storage.get(&n)? {
            Some(data) => decode(&path, &data),
            None => Err(WeirError::checkpoint(
                &path,
                format!("state version {version} is missing (its {kind}, needed to restore version {restoring}); the checkpoint is incomplete, or another process is changing it: restore it or start with a new checkpoint location"),
            )),
        }
    }

    /// Writes version `version`'s delta.
    pub(crate) fn write_delta(&self, version: u64, bytes: &[u8]) -> Result<()> {
        self.write(version, "delta", bytes)
    }

    /// Writes version `version`'s snapshot.
    pub(crate) fn write_snapshot(&self, version: u64, bytes: &[u8]) -> Result<()> {
        self.write(version, "snapshot", bytes)
    }

    fn write(&self, version: u64, kind: &str, bytes: &[u8]) -> Result<()> {
        let n = name(version, kind);
        if version <= self.leftovers_until()? {
            // A leftover of a batch this run runs again (or a version no
            // one wrote yet).
            return self.storage.put(&n, bytes);
        }
        match self.storage.put_create(&n, bytes)? {
            Created::Created => Ok(()),
            // This write's own, when a lost answer made the client retry it.
            Created::Exists if self.storage.get(&n)?.as_deref() == Some(bytes) => Ok(()),
            Created::Exists => Err(WeirError::checkpoint(
                self.storage.display_path(&n),
                format!(
                    "another run of this query wrote state version {version} first; only one run may use a checkpoint. Stop the other run before starting this one, or give a copy of the query its own checkpoint location"
                ),
            )),
        }
    }

    /// Keeps `retain` versions restorable after committing `version`:
    /// removes the files below the newest snapshot that is at least
    /// `retain` versions old. That snapshot moves only every
    /// [`SNAPSHOT_INTERVAL`] versions, so the directory is listed only then
    /// (not at every commit); files a crash left are removed the next time.
    /// A failure is logged, never fatal: the files are removed next time.
    pub(crate) fn purge(&self, version: u64) {
        let retain = self.retain;
        if version <= retain || (version - retain) % SNAPSHOT_INTERVAL != 0 {
            return;
        }
        let keep_snap = ((version - retain) / SNAPSHOT_INTERVAL) * SNAPSHOT_INTERVAL;
        if keep_snap == 0 {
            return;
        }
        let names = match self.storage.list("") {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(dir = %self.storage.describe(), "cannot list old state files to remove ({e}); trying again later");
                return;
            }
        };
        for n in names {
            let v: Option<u64> = n.split('.').next().and_then(|v| v.parse().ok());
            if matches!(v, Some(v) if v < keep_snap)
                && (n.ends_with(".delta") || n.ends_with(".snapshot"))
            {
                if let Err(e) = self.storage.delete(&n) {
                    tracing::warn!(file = %self.storage.display_path(&n).display(), "cannot remove an old state file ({e}); trying again later");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(k: &[u8], v: &[u8]) -> Vec<u8> {
        encode(std::iter::once((k, Some(v))), 0)
    }

    #[test]
    fn the_first_version_after_opening_replaces_a_leftover_later_ones_are_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::local(dir.path(), false);
        // A crashed run left version 3 (its batch never reached commits/).
        VersionFiles::new(s.clone(), 2, 10)
            .write_delta(3, &delta(b"k", b"crashed"))
            .unwrap();
        // The restart opens at 2 and writes 3 again, with what it computed.
        let f = VersionFiles::new(s.clone(), 2, 10);
        f.write_delta(3, &delta(b"k", b"rerun")).unwrap();
        assert_eq!(s.get("3.delta").unwrap(), Some(delta(b"k", b"rerun")));
        // Version 4 is created once: the same bytes again are accepted (a
        // retried write), other bytes mean another run wrote it first.
        f.write_delta(4, &delta(b"k", b"4")).unwrap();
        f.write_delta(4, &delta(b"k", b"4")).unwrap();
        let err = f.write_delta(4, &delta(b"k", b"other")).unwrap_err();
        assert!(
            err.to_string()
                .contains("another run of this query wrote state version 4 first"),
            "{err}"
        );
        assert_eq!(s.get("4.delta").unwrap(), Some(delta(b"k", b"4")));
        let err = f
            .write_snapshot(10, b"x")
            .and_then(|_| f.write_snapshot(10, b"y"));
        assert!(err.is_err());
    }

    /// Commit log entries removed to run batches again (or a crash) leave
    /// several versions above the one a store reopens at: all of them are
    /// rewritten by the re-run, and a version that appears after the open
    /// (another run's) is still refused.
    #[test]
    fn every_version_there_at_open_is_replaced_by_the_rerun() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::local(dir.path(), false);
        let old = VersionFiles::new(s.clone(), 0, 10);
        for v in 1..=6 {
            old.write_delta(v, &delta(b"k", format!("old {v}").as_bytes()))
                .unwrap();
        }
        let f = VersionFiles::new(s.clone(), 2, 10);
        f.restore(2, |_, _| Ok(())).unwrap();
        // Another run writes version 8 after this store opened.
        VersionFiles::new(s.clone(), 7, 10)
            .write_delta(8, &delta(b"k", b"theirs"))
            .unwrap();
        for v in 3..=7 {
            f.write_delta(v, &delta(b"k", format!("new {v}").as_bytes()))
                .unwrap();
            assert_eq!(
                s.get(&format!("{v}.delta")).unwrap(),
                Some(delta(b"k", format!("new {v}").as_bytes()))
            );
        }
        let err = f.write_delta(8, &delta(b"k", b"mine")).unwrap_err();
        assert!(err.to_string().contains("another run"), "{err}");
        assert_eq!(s.get("8.delta").unwrap(), Some(delta(b"k", b"theirs")));
    }

    #[test]
    fn restore_reads_the_newest_snapshot_at_or_below_then_the_deltas() {
        let dir = tempfile::tempdir().unwrap();
        let s = Storage::local(dir.path(), false);
        let f = VersionFiles::new(s.clone(), 0, 100);
        f.write_delta(1, &delta(b"a", b"1")).unwrap();
        f.write_snapshot(1, &delta(b"a", b"1")).unwrap();
        f.write_delta(2, &delta(b"b", b"2")).unwrap();
        f.write_delta(3, &encode(std::iter::once((&b"a"[..], None)), 0))
            .unwrap();
        // A snapshot above the version restored is ignored.
        f.write_snapshot(3, &delta(b"z", b"wrong")).unwrap();
        let mut seen = Vec::new();
        f.restore(2, |k, v| {
            seen.push((k, v));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            seen,
            vec![
                (b"a".to_vec(), Some(b"1".to_vec())),
                (b"b".to_vec(), Some(b"2".to_vec()))
            ]
        );
        s.delete("3.snapshot").unwrap();
        s.delete("2.delta").unwrap();
        let err = f.restore(3, |_, _| Ok(())).unwrap_err().to_string();
        assert!(
            err.contains("state version 2 is missing (its delta, needed to restore version 3)"),
            "{err}"
        );
        f.restore(0, |_, _| panic!("version 0 is empty")).unwrap();
    }

    #[test]
    fn files_of_either_format_decode_and_a_damaged_one_is_an_error() {
        let path = Path::new("state/0/0/7.delta");
        let entries = vec![
            (b"k1".to_vec(), Some(b"v1".to_vec())),
            (b"k2".to_vec(), None),
        ];
        // Written now: XXH64.
        let mut e = Encoder::new(0);
        for (k, v) in &entries {
            e.entry(k, v.as_deref());
        }
        let new = e.finish();
        assert_eq!(&new[..8], MAGIC);
        assert_eq!(decode(path, &new).unwrap(), entries);
        // Written by earlier versions: the same body under FNV-1a.
        let mut old = MAGIC_FNV.to_vec();
        old.extend_from_slice(&new[8..new.len() - 8]);
        let sum = crate::state::fnv64(&old);
        old.extend_from_slice(&sum.to_le_bytes());
        assert_eq!(decode(path, &old).unwrap(), entries);
        // One flipped bit in either, an unknown header, a truncated file.
        for (file, why) in [(&new, "checksum mismatch"), (&old, "checksum mismatch")] {
            let mut bad = file.clone();
            bad[12] ^= 1;
            let err = decode(path, &bad).unwrap_err().to_string();
            assert!(err.contains(why) && err.contains("7.delta"), "{err}");
        }
        let mut other = new.clone();
        other[..8].copy_from_slice(b"WEIRST99");
        let err = decode(path, &other).unwrap_err().to_string();
        assert!(err.contains("written by a newer weir?"), "{err}");
        for header in [b"GARBAGE!", b"WEIRST\xff\n"] {
            other[..8].copy_from_slice(header);
            let err = decode(path, &other).unwrap_err().to_string();
            assert!(err.contains("bad header"), "{err}");
        }
        // The checksum is XXH64 (seed 0) of header and entries, pinned.
        let sum = u64::from_le_bytes(new[new.len() - 8..].try_into().unwrap());
        assert_eq!(sum, crate::hash::xxh64(&new[..new.len() - 8], 0));
        assert!(decode(path, &new[..10]).is_err());
    }
}
