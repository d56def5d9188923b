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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::runtime::Handle;
use tokio::task::{JoinError, JoinHandle};

/// What a front thread knows of where its work goes.
#[derive(Clone)]
struct Front {
    /// The runtime its tasks spread their calls to.
    workers: Handle,
    /// Whether a call runs on the front thread itself now.
    inline: Arc<AtomicBool>,
}

thread_local! {
    /// Set on a front thread.
    static FRONT: RefCell<Option<Front>> = const { RefCell::new(None) };
}

/// From now on, calls started on this thread are spread to `workers`.
/// Called once, as a front thread starts.
pub(crate) fn spread_to(workers: Handle) {
    let front = Front {
        workers,
        inline: Arc::new(AtomicBool::new(false)),
    };
    FRONT.with(|slot| *slot.borrow_mut() = Some(front));
}

fn front() -> Option<Front> {
    FRONT.with(|slot| slot.borrow().clone())
}

/// The runtime calls started here run on: the one this thread spreads to,
/// else the current one.
///
/// # Panics
/// Outside a tokio runtime on a thread that spreads nowhere, as
/// `tokio::spawn` does.
pub(crate) fn workers() -> Handle {
    front().map_or_else(Handle::current, |front| front.workers)
}

/// Leave to run a call on this thread, held while it runs: always given
/// off a front thread; on one, only while no other call runs there, so
/// one heavy call (or one client) never holds up the other connections a
/// front thread serves. `None`: run the call on [`workers`].
pub(crate) fn claim_inline() -> Option<Inline> {
    // On every call's path: the flag is looked at in place, and its `Arc`
    // cloned only when the leave is given.
    FRONT.with(|slot| {
        let Some(front) = &*slot.borrow() else {
            return Some(Inline(None));
        };
        front
            .inline
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
            .then(|| Inline(Some(front.inline.clone())))
    })
}

/// A call running on a front thread, until dropped.
pub(crate) struct Inline(Option<Arc<AtomicBool>>);

impl Drop for Inline {
    fn drop(&mut self) {
        if let Some(inline) = &self.0 {
            inline.store(false, Ordering::Release);
        }
    }
}

/// `future` run on [`workers`] when this is a front thread (and stopped
/// if this future is dropped first), else here: for work that must not
/// land on a front thread, such as rmcp's, which spawns tasks of its own,
/// or a batch's call while another call runs there.
pub(crate) async fn off_the_front<F>(future: F) -> Result<F::Output, JoinError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let Some(front) = front() else {
        return Ok(future.await);
    };
    let mut task = AbortOnDrop(front.workers.spawn(future));
    (&mut task.0).await
}

/// A task aborted if whoever waits for it goes away first.
pub(crate) struct AbortOnDrop<T>(pub(crate) JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
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

    /// Off a front thread every call may run inline; on one, one call at a
    /// time, and the leave comes back when the call ends.
    #[test]
    fn a_front_thread_runs_one_call_itself_at_a_time() {
        assert!(claim_inline().is_some() && claim_inline().is_some());
        let workers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        let handle = workers.handle().clone();
        std::thread::spawn(move || {
            spread_to(handle);
            let first = claim_inline().expect("nothing runs here yet");
            assert!(
                claim_inline().is_none(),
                "a second call goes to the workers"
            );
            drop(first);
            assert!(claim_inline().is_some(), "the leave came back");
        })
        .join()
        .unwrap();
    }

    /// Work sent off a front thread runs on the workers, and stops when
    /// whoever waits for it goes away.
    #[test]
    fn work_sent_off_the_front_stops_with_its_waiter() {
        let workers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("spread-workers")
            .enable_all()
            .build()
            .unwrap();
        let handle = workers.handle().clone();
        let (dropped, was_dropped) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            spread_to(handle);
            let front = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            front.block_on(async {
                let name =
                    off_the_front(async { std::thread::current().name().map(str::to_owned) })
                        .await
                        .unwrap();
                assert_eq!(name.as_deref(), Some("spread-workers"));
                struct Tell(std::sync::mpsc::Sender<()>);
                impl Drop for Tell {
                    fn drop(&mut self) {
                        let _ = self.0.send(());
                    }
                }
                let tell = Tell(dropped);
                let waiting = off_the_front(async move {
                    let _tell = tell;
                    std::future::pending::<()>().await;
                });
                let _ = tokio::time::timeout(std::time::Duration::from_millis(50), waiting).await;
            });
        })
        .join()
        .unwrap();
        was_dropped
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the work stopped once its waiter went away");
    }
}
