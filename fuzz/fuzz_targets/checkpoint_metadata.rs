//! The checkpoint's `metadata` file on arbitrary bytes:
//! `Checkpoint::load_or_init_metadata` returns the metadata or an error,
//! never panics.
//!
//! Input: the file's bytes.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use weir_engine::checkpoint::Checkpoint;
use weir_engine::plan::{DataType, Field, StreamPlan};
use weir_engine::source::MemoryStream;
use weir_engine::Session;

struct Fixture {
    _dir: tempfile::TempDir,
    chk: Checkpoint,
    plan: StreamPlan,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let chk = Checkpoint::open(dir.path(), false).unwrap();
        let stream = MemoryStream::new(&[Field::new("k", DataType::String)]);
        let plan = Session::new().read_stream(stream).plan().clone();
        Fixture {
            _dir: dir,
            chk,
            plan,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    std::fs::write(f.chk.root().join("metadata"), data).unwrap();
    if let Ok(meta) = f.chk.load_or_init_metadata(&f.plan, Some(1)) {
        assert_eq!(
            meta.state_partitions, 1,
            "a different partition count is refused"
        );
    }
    // Without a partition count (the checkpoint's own is taken).
    let _ = f.chk.load_or_init_metadata(&f.plan, None);
});
