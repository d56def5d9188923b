//! Graceful shutdown: on SIGINT or SIGTERM the server takes no new work,
//! answers every call in flight, and only then stops.
//!
//! 1. **Draining.** New requests are refused with a clear error (HTTP 503
//!    with `Retry-After`; over MCP a JSON-RPC error), while what lets
//!    running calls finish still passes: cancellations, answers to the
//!    server's questions, the responses being written. `/healthz` says
//!    `draining`, so a load balancer stops sending work.
//! 2. **The drain time** (`--drain`, 10 s by default): calls still running
//!    when it is up are stopped and answered, each with an `internal`
//!    error that says the server shut down and a retry may help. No call
//!    is cut off without an answer.
//! 3. Then the connections close and the process exits 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long calls in flight may take to finish once the server is told to
/// stop, unless `--drain` says otherwise.
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(10);

/// How long calls stopped at the end of the drain get to have their answers
/// written.
pub(super) const ANSWER_STOPPED: Duration = Duration::from_secs(2);

/// One server's shutdown state. Clones share it.
#[derive(Debug, Clone)]
pub struct Drain {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    time: Duration,
    draining: CancellationToken,
    /// Stops the calls still running when the drain time is up.
    stop_calls: CancellationToken,
    in_flight: AtomicUsize,
    ended: Notify,
}

impl Drain {
    /// A server that lets calls in flight take up to `time` to finish.
    pub fn new(time: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                time,
                draining: CancellationToken::new(),
                stop_calls: CancellationToken::new(),
                in_flight: AtomicUsize::new(0),
                ended: Notify::new(),
            }),
        }
    }

    /// How long calls in flight may take to finish.
    pub fn time(&self) -> Duration {
        self.inner.time
    }

    /// Start shutting down: take no new work.
    pub fn start(&self) {
        self.inner.draining.cancel();
    }

    /// Stop every call still running, now.
    pub(super) fn stop_now(&self) {
        self.inner.stop_calls.cancel();
    }

    /// Whether the server is shutting down.
    pub fn is_draining(&self) -> bool {
        self.inner.draining.is_cancelled()
    }

    /// Resolves once the server starts shutting down.
    pub fn draining(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.inner.draining.cancelled()
    }

    /// What stops every call still running when the drain time is up.
    pub(crate) fn stop_calls(&self) -> CancellationToken {
        self.inner.stop_calls.clone()
    }

    /// Count one request in flight until the guard is dropped (with its
    /// answer's last byte).
    pub(super) fn track(&self) -> InFlight {
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.inner.clone())
    }

    /// Requests in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Start shutting down, and return once every request in flight is
    /// answered: when they end by themselves within the drain time, or
    /// when the calls left at its end are stopped and answered. Returns
    /// how many requests had to be stopped.
    pub(super) async fn finish(&self) -> usize {
        self.start();
        if tokio::time::timeout(self.inner.time, self.all_answered())
            .await
            .is_ok()
        {
            return 0;
        }
        let left = self.in_flight();
        tracing::warn!(
            left,
            "the drain time ({}) is up; stopping the calls still running",
            humantime::format_duration(self.inner.time)
        );
        self.stop_now();
        if tokio::time::timeout(ANSWER_STOPPED, self.all_answered())
            .await
            .is_err()
        {
            tracing::warn!(
                left = self.in_flight(),
                "some answers could not be written in time"
            );
        }
        left
    }

    async fn all_answered(&self) {
        loop {
            let ended = self.inner.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            ended.await;
        }
    }
}

/// One request in flight; it ends when this is dropped.
#[derive(Debug)]
pub(super) struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finishing_waits_for_requests_in_flight() {
        let drain = Drain::new(Duration::from_secs(30));
        let request = drain.track();
        let finishing = tokio::spawn({
            let drain = drain.clone();
            async move { drain.finish().await }
        });
        drain.draining().await;
        assert!(!finishing.is_finished());
        drop(request);
        assert_eq!(finishing.await.unwrap(), 0, "nothing had to be stopped");
    }

    #[tokio::test]
    async fn calls_left_at_the_end_of_the_drain_are_stopped() {
        let drain = Drain::new(Duration::from_millis(50));
        let stop = drain.stop_calls();
        let request = drain.track();
        // The call answers as soon as it is told to stop.
        tokio::spawn(async move {
            stop.cancelled().await;
            drop(request);
        });
        assert_eq!(drain.finish().await, 1);
        assert_eq!(drain.in_flight(), 0);
    }
}
