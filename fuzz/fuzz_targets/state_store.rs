//! The in-memory state store's files (`<v>.delta`, `<v>.snapshot`) on
//! arbitrary bytes: `MemoryStateStore::open` returns the state or an error,
//! never panics; state that opens commits and reopens unchanged.
//!
//! Input: byte 0: the version to open (1 + b % 4), its bit 7 set wraps
//! versions in the current format (`WEIRST02`, XXH64) rather than the first
//! (`WEIRST01`, FNV-1a; both are read); byte 1: bit v-1 set makes
//! version v a snapshot (else a delta), bit v+3 set keeps version v's bytes
//! as they are (else they are wrapped in a valid header and checksum, so the
//! fuzzer reaches the entry decoding); then each version's bytes, 1..=4, as
//! a little-endian u16 length and that many bytes (the last takes the rest).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weir_engine::state::{MemoryStateStore, StateStore};

fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
}

/// The checksum of the store's first file format (`WEIRST01`: FNV-1a 64 over
/// header and entries), which it still reads.
fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in data {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// `body` with a valid header and checksum: the current format (`WEIRST02`,
/// XXH64 with seed 0) or the first (`WEIRST01`, FNV-1a).
fn wrap(body: &[u8], current: bool) -> Vec<u8> {
    let mut out = if current { b"WEIRST02" } else { b"WEIRST01" }.to_vec();
    out.extend_from_slice(body);
    let sum = if current {
        twox_hash::XxHash64::oneshot(0, &out)
    } else {
        fnv(&out)
    };
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let version = 1 + (data[0] % 4) as u64;
    let current = data[0] & 0x80 != 0;
    let flags = data[1];
    let mut rest = &data[2..];
    let path = dir().path();
    for e in std::fs::read_dir(path).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    for v in 1..=4u64 {
        let bytes = if v == 4 || rest.len() < 2 {
            std::mem::take(&mut rest)
        } else {
            let n = (u16::from_le_bytes([rest[0], rest[1]]) as usize).min(rest.len() - 2);
            let (b, r) = rest[2..].split_at(n);
            rest = r;
            b
        };
        let snapshot = flags & (1 << (v - 1)) != 0;
        let raw = flags & (1 << (v + 3)) != 0;
        let name = format!("{v}.{}", if snapshot { "snapshot" } else { "delta" });
        let content = if raw {
            bytes.to_vec()
        } else {
            wrap(bytes, current)
        };
        std::fs::write(path.join(name), content).unwrap();
    }
    let Ok(mut store) = MemoryStateStore::open(path, version, 100, false) else {
        return;
    };
    let before: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = store
        .iter()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    assert_eq!(store.len(), before.len());
    // Commit one change and reopen: the state round-trips. (Files of later
    // versions are what a crashed run left; a re-run rewrites them.)
    for v in version + 1..=4 {
        let _ = std::fs::remove_file(path.join(format!("{v}.snapshot")));
        let _ = std::fs::remove_file(path.join(format!("{v}.delta")));
    }
    let mut want = before.clone();
    if let Some(k) = before.keys().next().cloned() {
        store.remove(&k);
        want.remove(&k);
    }
    store.put(b"fuzz".to_vec(), vec![7]);
    want.insert(b"fuzz".to_vec(), vec![7]);
    store.commit(version + 1).unwrap();
    let back = MemoryStateStore::open(path, version + 1, 100, false).unwrap();
    let got: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = back
        .iter()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    assert_eq!(got, want, "committed state reopens unchanged");
});
