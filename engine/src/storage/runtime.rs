//! The tokio runtime object_store's async calls run on, for a synchronous
//! engine: one current-thread runtime driven by its own thread
//! (`weir-object-store`), started on first use. Callers hand it a future and
//! wait on a channel, so a call works from any thread (a rayon worker, a
//! query thread, even a thread inside someone else's tokio runtime, where
//! `Runtime::block_on` would panic) and concurrent calls share one
//! connection pool.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::Handle;

/// The runtime's handle, starting its thread on first use.
fn handle() -> Result<&'static Handle, String> {
    static RT: OnceLock<Result<Handle, String>> = OnceLock::new();
    RT.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the object storage runtime: {e}"))?;
        let handle = rt.handle().clone();
        std::thread::Builder::new()
            .name("weir-object-store".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .map_err(|e| format!("cannot start the object storage thread: {e}"))?;
        Ok(handle)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Runs `f` on the runtime and waits for its result. `Err`: the runtime
/// could not start, or the task ended without a result (it panicked).
pub(crate) fn run<F>(f: F) -> Result<F::Output, String>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle()?.spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .map_err(|_| "an object storage request ended without a result (it panicked)".to_string())
}

/// Runs `f` (which builds a client) with the runtime entered, for code that
/// needs a runtime context while building.
pub(crate) fn entered<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    let _g = handle()?.enter();
    Ok(f())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_from_many_threads_and_from_inside_a_runtime_complete() {
        let threads: Vec<_> = (0..8)
            .map(|i| {
                std::thread::spawn(move || {
                    run(async move {
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        i * 2
                    })
                    .unwrap()
                })
            })
            .collect();
        let got: Vec<i32> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(got, (0..8).map(|i| i * 2).collect::<Vec<_>>());
        // From a thread inside another runtime (where Runtime::block_on panics).
        let other = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let v = other.block_on(async { run(async { 7 }).unwrap() });
        assert_eq!(v, 7);
        // A panicking task is an error, not a hang.
        let err = run(async { panic!("boom") }).map(|_: ()| ()).unwrap_err();
        assert!(err.contains("panicked"), "{err}");
    }
}
