//! Where the calls a task starts beside its own run: on the workers of the
//! runtime that spreads work over the cores.
//!
//! Usually that is the runtime the task runs on. `serve --listen` serves
//! each HTTP connection on a front thread of its own, a current-thread
//! runtime (`serve::http::fronts`): there, a batch's other calls and the
//! calls a program makes go to the workers of the runtime `serve` was
//! started on, so a batch still uses every core while a single call is
//! answered where its request was read.

use std::cell::RefCell;
use std::future::Future;

use tokio::runtime::Handle;
use tokio::task::JoinHandle;

thread_local! {
    /// Set on a front thread: the runtime its tasks spread their calls to.
    static WORKERS: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// From now on, calls started on this thread are spread to `workers`.
/// Called once, as a front thread starts.
pub(crate) fn spread_to(workers: Handle) {
    WORKERS.with(|slot| *slot.borrow_mut() = Some(workers));
}

/// The runtime calls started here run on: the one this thread spreads to,
/// else the current one.
///
/// # Panics
/// Outside a tokio runtime on a thread that spreads nowhere, as
/// `tokio::spawn` does.
pub(crate) fn workers() -> Handle {
    WORKERS
        .with(|slot| slot.borrow().clone())
        .unwrap_or_else(Handle::current)
}

/// `future` on a task of its own, on [`workers`].
pub(crate) fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    workers().spawn(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread that spreads to a runtime starts its calls there, whatever
    /// runtime it runs itself.
    #[test]
    fn calls_started_on_a_front_thread_run_on_the_workers() {
        let workers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("spread-workers")
            .build()
            .unwrap();
        let handle = workers.handle().clone();
        let front = std::thread::spawn(move || {
            spread_to(handle);
            let front = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            front.block_on(async {
                spawn(async { std::thread::current().name().map(str::to_owned) })
                    .await
                    .unwrap()
            })
        });
        assert_eq!(
            front.join().unwrap().as_deref(),
            Some("spread-workers"),
            "the call ran on the front thread, not on the workers"
        );
        let here = workers.block_on(async {
            spawn(async { std::thread::current().name().map(str::to_owned) })
                .await
                .unwrap()
        });
        assert_eq!(here.as_deref(), Some("spread-workers"));
    }
}
