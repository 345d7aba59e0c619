//! The offsets and commit logs (`offsets/N`, `commits/N`) on arbitrary
//! bytes: `BatchLog::read_offsets` / `read_commit` return an entry or an
//! error, never panic; an entry read back is written and read again unchanged.
//!
//! Input: one byte (even: an offsets file, odd: a commit file), then the
//! file's bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weir_engine::checkpoint::BatchLog;

fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    let log = BatchLog::new(dir().path().to_path_buf(), false);
    let _ = std::fs::remove_file(dir().path().join("1"));
    std::fs::write(dir().path().join("0"), bytes).unwrap();
    assert_eq!(log.latest().unwrap(), Some(0));
    if which % 2 == 0 {
        if let Ok(Some(e)) = log.read_offsets(0) {
            log.write_offsets(1, &e).unwrap();
            let back = log.read_offsets(1).unwrap().unwrap();
            assert_eq!(back.batch_watermark_ms, e.batch_watermark_ms);
            assert_eq!(back.batch_timestamp_ms, e.batch_timestamp_ms);
            assert_eq!(back.operator_watermarks_ms, e.operator_watermarks_ms);
            assert_eq!(back.sources.len(), e.sources.len(), "one line per source");
        }
    } else if let Ok(Some(e)) = log.read_commit(0) {
        log.write_commit(1, &e).unwrap();
        assert_eq!(log.read_commit(1).unwrap().unwrap(), e);
    }
});
