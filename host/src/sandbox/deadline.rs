//! A call's wall-clock deadline, which stands still while the call waits
//! for a person: the timeout bounds what the tool does, not how long
//! someone takes to answer its question.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The deadline of one call. Clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Deadline {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug)]
struct State {
    at: Instant,
    /// Since when the clock has stood still, while someone is asked.
    paused_since: Option<Instant>,
}

impl Deadline {
    /// `limit` from now.
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    at: Instant::now() + limit,
                    paused_since: None,
                }),
                changed: Notify::new(),
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Stop the clock until the guard is dropped, then move the deadline
    /// on by the time it stood still; `None` once the deadline has passed,
    /// so that a call whose time is up cannot stop its clock and live on.
    /// Questions are asked one at a time per call (the guest waits on
    /// each), so pauses never overlap.
    pub(crate) fn pause(&self) -> Option<Paused<'_>> {
        let now = Instant::now();
        {
            let mut state = self.state();
            if state.paused_since.is_none() && now >= state.at {
                return None;
            }
            state.paused_since = Some(now);
        }
        self.inner.changed.notify_waiters();
        Some(Paused(self))
    }

    /// Resolves when the deadline has passed with the clock running.
    pub(crate) async fn expired(&self) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let at = {
                let state = self.state();
                if state.paused_since.is_some() {
                    None
                } else {
                    Some(state.at)
                }
            };
            match at {
                Some(at) if Instant::now() >= at => return,
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = &mut changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// The clock stands still while this lives.
pub(crate) struct Paused<'a>(&'a Deadline);

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state();
        if let Some(since) = state.paused_since.take() {
            state.at += since.elapsed();
        }
        drop(state);
        self.0.inner.changed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pause_moves_the_deadline_on() {
        let deadline = Deadline::new(Duration::from_millis(100));
        let waiter = tokio::spawn({
            let deadline = deadline.clone();
            async move { deadline.expired().await }
        });
        {
            let _paused = deadline.pause().expect("the clock is running");
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(!waiter.is_finished(), "no timeout while someone is asked");
        }
        // The clock runs again: the rest of the 100 ms, then it expires.
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the deadline expires once the clock runs again")
            .unwrap();
        assert!(
            deadline.pause().is_none(),
            "a deadline that passed stays passed"
        );
    }
}
