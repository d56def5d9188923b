//! Instances made ahead of their calls.
//!
//! Making an instance of a Python or JavaScript tool (copying its memory
//! snapshot, see `engine_config`) costs more than running its call. A
//! component keeps up to `limits.ready` instances made ahead, each in a
//! store of its own built from the grants exactly as a call's store is, and
//! a background task makes another each time a call takes one, and drops
//! the stores of calls that are over. An instance made ahead is still used
//! for exactly one call and then dropped with its store, so nothing of one
//! call is visible to the next: only *when* the instance was made changes.
//! The call's own parts (its id, context, observer, asker, deadline) are
//! given to the store when the call takes it ([`super::state::State::bind`]),
//! and the fuel instantiating used is charged to the call, as it would be
//! had the instance been made when the call came.
//!
//! Before it has a call, an instance may do nothing that belongs to one:
//! opening a store and sending an HTTP request are refused (a component
//! granted directories is never made ahead, see `kept_ready`). One that
//! logged, reported progress, asked, used wasi:http or a store, was refused
//! anything or wrote output while being made is never given a call; nor is
//! one whose instantiation failed or outlived the tool's timeout. Then the
//! component's instances are made at call time from then on, as with
//! `ready = 0`, its calls report any failure as their own, and the log says
//! why once. Where instantiating is quick (most Rust and C tools) and
//! `ready = "auto"`, instances are made ahead only between calls, while
//! none of the component's runs ([`PAYS_FROM`]): timed on the instances
//! made to replace those calls took, not on the first ones, made while the
//! host starts and shares the cores with its loading.
//!
//! Calls come first in the instance pool ([`Pool`]): while one waits for
//! room, no instance is made ahead and those made give their slots up.
//! What it costs: each instance held ready, and each store waiting to be
//! dropped, keeps one slot of the pool (sized for them on top of the calls
//! it runs) and the memory its instance touched.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use wasmtime::Store;

use super::contract::Toolbox;
use super::state::State;

/// An instantiated component, in the store it was made in.
pub(super) struct Prepared {
    pub store: Store<State>,
    pub toolbox: Toolbox,
    /// Fuel instantiating it used: charged to its call, as it would be had
    /// the instance been made when the call came.
    pub fuel_spent: u64,
}

/// One component's instances made ahead, and the signal that makes more.
pub(super) struct Ready {
    /// How many to keep.
    want: usize,
    /// Whether to stop when instantiating is quick ([`PAYS_FROM`]).
    measured: bool,
    queue: Mutex<Vec<Prepared>>,
    /// Stores whose call is over, dropped by the task that makes instances:
    /// resetting a large instance's memory takes a while, and the caller
    /// need not wait for it.
    spent: Mutex<Vec<Store<State>>>,
    /// Woken when a call is over, or when the component is dropped.
    wake: Notify,
    /// Instances are made at call time only: this component's instances
    /// are unfit to be made ahead, too quick to make for it to pay, or the
    /// component is gone.
    stopped: AtomicBool,
    /// The quickest of the first [`TRIALS`] instantiations made to
    /// replace one a call took.
    trials: Mutex<(u32, Duration)>,
    /// Instantiating is quick (under [`PAYS_FROM`]): instances are made
    /// ahead only between calls, while none of the component's runs.
    between_calls: AtomicBool,
    /// The component's calls running now.
    running: AtomicUsize,
    /// When the component's last call ended, in µs since `born`.
    ended_at: AtomicU64,
    /// Whether the last call came at least [`GAP_PAYS`] after the one
    /// before ended: time enough to make an instance in between. Calls
    /// that follow each other at once (a program's loop) would find the
    /// next instance still being made, and share the cores with it.
    gaps_pay: AtomicBool,
    born: Instant,
    /// A call has taken an instance: those made since are timed. The first
    /// ones, made as the host starts, are not: they share the cores with
    /// the other components loading (a Python one takes the cores for a
    /// fifth of a second) and with first touches of the pool's memory, and
    /// would make instantiating a quick tool look slow, keeping it made
    /// ahead, where every call then wakes a task on another thread.
    warm: AtomicBool,
}

/// Instantiations timed before deciding whether making ahead pays.
const TRIALS: u32 = 3;

/// Below this, instances are made ahead only between calls. Making one
/// ahead takes instantiating, the store's setup and the spent store's
/// reset off the call's path: for `calc` served over MCP, 30–50 µs of a
/// call's latency on two cores (issue 29). But each call then wakes the
/// task that makes them, on another thread: when calls run side by side,
/// that costs each more CPU than instantiating a small Rust or C tool
/// (3.5 µs for `calc`; a Python tool takes about 1 ms, a JavaScript one
/// 0.25 ms), and 16 clients got 15% fewer calls through. So a quick
/// component's instances are made ahead while its calls come one at a
/// time with a gap between them (a client's round trip), and at call time
/// while they overlap or follow each other at once.
const PAYS_FROM: Duration = Duration::from_micros(50);

/// A gap between a quick component's calls long enough to make its next
/// instance in (on another core: instantiating `calc` takes 3.5 µs, and
/// dropping the spent store a few more). A client's round trip over
/// loopback leaves 30–100 µs; calls a program makes in a loop, about 1.
const GAP_PAYS: Duration = Duration::from_micros(20);

impl Ready {
    /// Keep `want` instances ready; when `measured`, only if making one
    /// takes long enough for making it ahead to pay.
    pub(super) fn new(want: usize, measured: bool) -> Self {
        Self {
            want,
            measured,
            queue: Mutex::new(Vec::with_capacity(want)),
            spent: Mutex::new(Vec::with_capacity(want)),
            wake: Notify::new(),
            stopped: AtomicBool::new(want == 0),
            trials: Mutex::new((0, Duration::MAX)),
            between_calls: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            ended_at: AtomicU64::new(0),
            gaps_pay: AtomicBool::new(false),
            born: Instant::now(),
            warm: AtomicBool::new(false),
        }
    }

    /// A call of the component starts: counted until the guard is given
    /// back ([`Ready::retire`]) or dropped.
    pub(super) fn call_starts(self: &Arc<Self>) -> Running {
        if self.running.fetch_add(1, Ordering::AcqRel) == 0 {
            let gap = self
                .now_us()
                .saturating_sub(self.ended_at.load(Ordering::Relaxed));
            let pays = u128::from(gap) >= GAP_PAYS.as_micros();
            self.gaps_pay.store(pays, Ordering::Relaxed);
        }
        Running(Some(self.clone()))
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.born.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Make instances ahead only between calls from now on (instantiating
    /// is quick).
    pub(super) fn between_calls_only(&self) {
        self.between_calls.store(true, Ordering::Relaxed);
    }

    /// Whether a component made ahead only between calls should make none
    /// now: another of its calls runs, or its calls follow each other too
    /// closely for an instance to be made in between (`false` for any
    /// other component).
    fn calls_overlap(&self) -> bool {
        self.between_calls.load(Ordering::Relaxed)
            && (self.running.load(Ordering::Acquire) > 0 || !self.gaps_pay.load(Ordering::Relaxed))
    }

    /// An instance made ahead, if one is ready. Another is made once the
    /// call is over ([`Ready::retire`]): made while the call runs, it
    /// would compete with the call for the cores and the memory bus.
    pub(super) fn take(&self) -> Option<Prepared> {
        if self.stopped.load(Ordering::Relaxed) {
            return None;
        }
        let taken = self.lock().pop();
        if taken.is_some() {
            self.warm.store(true, Ordering::Relaxed);
        }
        taken
    }

    /// Drop `store`, whose call is over, in the background, and make the
    /// instances that calls took again; drop it inline when as many are
    /// already waiting as instances are kept ready, so the stores waiting
    /// never hold more of the pool than that (the pool has room for them,
    /// see `kept_ready`). A component that makes its instances at call
    /// time drops it inline, with nothing else to do.
    ///
    /// A component made ahead only between calls whose other calls still
    /// run drops it inline and wakes nothing: the task that makes
    /// instances is woken by the last of them to end ([`Running`]).
    pub(super) fn retire(&self, mut store: Store<State>, running: Running) {
        // Ended here without a wake: the one below comes once the store is
        // among the spent ones the task drops.
        running.end(false);
        if self.stopped() || self.calls_overlap() {
            drop(store);
            return;
        }
        // What the call brought goes now, not when the store does.
        store.data_mut().release_call();
        let mut spent = locked(&self.spent);
        // (Checked under the lock `stop` drains the spent stores under.)
        if spent.len() >= self.want || self.stopped() {
            drop(spent);
            drop(store);
        } else {
            spent.push(store);
            drop(spent);
        }
        self.wake.notify_one();
    }

    /// Drop the stores whose calls are over.
    pub(super) fn drop_spent(&self) {
        let spent = std::mem::take(&mut *locked(&self.spent));
        drop(spent);
    }

    /// Keep `prepared` for a call, unless the component stopped meanwhile.
    pub(super) fn put(&self, prepared: Prepared) {
        let mut queue = self.lock();
        if !self.stopped.load(Ordering::Relaxed) {
            queue.push(prepared);
        }
    }

    /// Note that making an instance took `took` (counted once a call has
    /// taken one). Returns the quickest of the trials once they are done,
    /// when making ahead does not pay.
    pub(super) fn timed(&self, took: Duration) -> Option<Duration> {
        let mut trials = locked(&self.trials);
        if !self.measured || !self.warm.load(Ordering::Relaxed) || trials.0 >= TRIALS {
            return None;
        }
        trials.0 += 1;
        trials.1 = trials.1.min(took);
        (trials.0 == TRIALS && trials.1 < PAYS_FROM).then_some(trials.1)
    }

    /// Whether another instance should be made now: not while a quick
    /// component's calls run or follow each other at once.
    pub(super) fn wants_more(&self) -> bool {
        !self.stopped() && !self.calls_overlap() && self.lock().len() < self.want
    }

    pub(super) fn stopped(&self) -> bool {
        self.stopped.load(Ordering::Relaxed)
    }

    /// Drop the instances made ahead and the spent stores now, to free
    /// their pool slots for calls that wait; more are made later.
    pub(super) fn give_way(&self) {
        let dropped = std::mem::take(&mut *self.lock());
        drop(dropped);
        self.drop_spent();
    }

    /// Make instances at call time from now on, and drop those made ahead.
    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        self.give_way();
        self.wake.notify_one();
    }

    /// How many instances are ready now.
    pub(super) fn count(&self) -> usize {
        if self.stopped() { 0 } else { self.lock().len() }
    }

    /// Wait until a call takes an instance or the component stops.
    pub(super) async fn woken(&self) {
        self.wake.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Prepared>> {
        locked(&self.queue)
    }
}

/// One call of a component, counted while it runs.
pub(super) struct Running(Option<Arc<Ready>>);

impl Running {
    /// The call is over: note when, and, when `wake` and it is the last of
    /// a quick component's calls, wake the task that makes instances
    /// between calls.
    fn end(mut self, wake: bool) {
        if let Some(ready) = self.0.take() {
            ready.ended_at.store(ready.now_us(), Ordering::Relaxed);
            if ready.running.fetch_sub(1, Ordering::AcqRel) == 1
                && wake
                && ready.between_calls.load(Ordering::Relaxed)
                && ready.gaps_pay.load(Ordering::Relaxed)
            {
                ready.wake.notify_one();
            }
        }
    }
}

impl Drop for Running {
    /// A call that ends without retiring its store (cancelled, failed to
    /// set up, or its store dropped for a call waiting for room) ends here,
    /// and wakes the task itself.
    fn drop(&mut self) {
        if let Some(ready) = self.0.take() {
            Self(Some(ready)).end(true);
        }
    }
}

/// `mutex`, locked; a panic while it was held left its value as it was.
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Stops a component's instances made ahead when the task making them
/// ends, however it ends.
pub(super) struct StopOnExit(pub std::sync::Arc<Ready>);

impl Drop for StopOnExit {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The instance pool as calls and instances made ahead share it: calls
/// come first. While a call waits for room, no component makes an instance
/// ahead, and every instance made ahead gives its slot up, so a pool
/// filled with them (a Python tool's instance takes several memories, more
/// than its share) never keeps a call waiting.
#[derive(Default)]
pub(super) struct Pool {
    /// Calls that found the pool full wait here, and retry one at a time:
    /// retrying together, they could each take part of the pool and all
    /// fail again.
    queue: tokio::sync::Mutex<()>,
    /// Calls waiting for room now.
    waiting: std::sync::atomic::AtomicUsize,
    /// Every component's instances made ahead.
    readies: Mutex<Vec<std::sync::Weak<Ready>>>,
}

impl Pool {
    /// Count `ready` among those that give way to calls.
    pub(super) fn register(&self, ready: &std::sync::Arc<Ready>) {
        let mut readies = locked(&self.readies);
        readies.retain(|r| r.strong_count() > 0);
        readies.push(std::sync::Arc::downgrade(ready));
    }

    /// A call found the pool full: until the returned guard is dropped, no
    /// instance is made ahead, and those made are dropped now.
    pub(super) fn wait_for_room(&self) -> Waiting<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let readies: Vec<_> = locked(&self.readies)
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .collect();
        for ready in readies {
            ready.give_way();
        }
        Waiting(self)
    }

    /// Whether a call is waiting for room in the pool.
    pub(super) fn calls_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// Wait for this call's turn to retry.
    pub(super) async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.queue.lock().await
    }
}

/// A call waiting for room in the pool.
pub(super) struct Waiting<'a>(&'a Pool);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_instances_made_after_a_call_took_one_are_timed() {
        let quick = Duration::from_micros(4);
        let ready = Ready::new(2, true);
        // The first fill, as the host starts: never decides.
        for _ in 0..TRIALS * 2 {
            assert_eq!(ready.timed(Duration::from_millis(1)), None);
        }
        ready.warm.store(true, Ordering::Relaxed);
        for _ in 1..TRIALS {
            assert_eq!(ready.timed(quick), None);
        }
        assert_eq!(ready.timed(quick), Some(quick), "quick: made between calls");
        // Slow to make: kept ahead.
        let slow = Ready::new(2, true);
        slow.warm.store(true, Ordering::Relaxed);
        for _ in 0..TRIALS {
            assert_eq!(slow.timed(PAYS_FROM * 2), None);
        }
        // Not measured (`ready` set): never decides.
        let set = Ready::new(2, false);
        set.warm.store(true, Ordering::Relaxed);
        assert_eq!(set.timed(quick), None);
    }

    /// A quick component's instances are made ahead while it has one call
    /// at a time, and not while its calls overlap; any other component's
    /// whatever its calls do.
    #[test]
    fn a_quick_component_is_made_ahead_only_between_calls() {
        let ready = Arc::new(Ready::new(2, true));
        ready.between_calls_only();
        // The first call comes long after the component was made.
        std::thread::sleep(GAP_PAYS * 2);
        let first = ready.call_starts();
        assert!(!ready.wants_more(), "a call runs: nothing is made");
        let second = ready.call_starts();
        drop(first);
        assert!(ready.calls_overlap(), "the second call still runs");
        drop(second);
        assert!(!ready.calls_overlap());
        assert!(ready.wants_more(), "between calls that came apart");
        assert!(
            futures::FutureExt::now_or_never(ready.woken()).is_some(),
            "the last call to end, retired or not, woke the task that makes instances"
        );
        // A call right after the last one ended: none is made between.
        // (An end in the future: no gap, however late this thread runs.)
        ready
            .ended_at
            .store(ready.now_us() + 1_000_000, Ordering::Relaxed);
        drop(ready.call_starts());
        assert!(!ready.wants_more(), "calls follow each other at once");
        ready.ended_at.store(ready.now_us(), Ordering::Relaxed);
        std::thread::sleep(GAP_PAYS * 2);
        drop(ready.call_starts());
        assert!(ready.wants_more(), "apart again");

        let slow = Arc::new(Ready::new(2, true));
        let _running = (slow.call_starts(), slow.call_starts());
        assert!(!slow.calls_overlap());
        assert!(
            slow.wants_more(),
            "a slow component is made ahead whatever runs"
        );
    }
}
