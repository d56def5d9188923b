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
    /// How many pauses hold the clock: a call's own questions come one at
    /// a time, but the tools it calls (`call_tools`) may each wait for a
    /// person at once.
    pauses: usize,
    /// How long the clock has stood still in all, and may: past it, no
    /// pause is granted, so a call and the calls it makes wait for people
    /// at most this long together, however many they ask.
    paused: Duration,
    most_paused: Duration,
}

impl State {
    /// How much longer the clock may stand still.
    fn budget_left(&self) -> Duration {
        self.most_paused.saturating_sub(self.paused)
    }

    /// When the deadline passes if nothing changes: while paused, the
    /// clock runs again once the pause budget is spent, however long the
    /// pauses last (a person who never answers, an approver with no
    /// timeout of its own).
    fn passes_at(&self) -> Instant {
        match self.paused_since {
            None => self.at,
            Some(_) => self.at + self.budget_left(),
        }
    }
}

impl Deadline {
    /// `limit` from now.
    pub(crate) fn new(limit: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    at: Instant::now() + limit,
                    paused_since: None,
                    pauses: 0,
                    paused: Duration::ZERO,
                    most_paused: super::interact::ASK_WAIT,
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
    /// Pauses may overlap (the tools a call calls may wait for a person
    /// together): the clock stands still while any of them lives.
    pub(crate) fn pause(&self) -> Option<Paused> {
        let now = Instant::now();
        {
            let mut state = self.state();
            if state.paused_since.is_none() && now >= state.at {
                return None;
            }
            let standing = state
                .paused_since
                .map_or(Duration::ZERO, |since| now - since);
            if state.paused + standing >= state.most_paused {
                return None;
            }
            state.paused_since.get_or_insert(now);
            state.pauses += 1;
        }
        self.inner.changed.notify_waiters();
        Some(Paused(self.clone()))
    }

    /// What is left of the time: the clock's time to the deadline, not
    /// counting the time it stood still.
    pub(crate) fn left(&self) -> Duration {
        let state = self.state();
        let now = Instant::now();
        // While paused, the clock's time is where it stopped, until the
        // pause budget runs out.
        let clock = match state.paused_since {
            None => now,
            Some(since) => now.max(since + state.budget_left()),
        };
        state.passes_at().saturating_duration_since(clock)
    }

    /// Resolves when the deadline has passed with the clock running.
    pub(crate) async fn expired(&self) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let at = self.state().passes_at();
            if Instant::now() >= at {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = &mut changed => {}
            }
        }
    }
}

/// The clock stands still while this (or another pause) lives.
pub(crate) struct Paused(Deadline);

impl Drop for Paused {
    fn drop(&mut self) {
        let mut state = self.0.state();
        state.pauses -= 1;
        if state.pauses == 0
            && let Some(since) = state.paused_since.take()
        {
            // Never more than the budget: past it the clock ran anyway.
            let stood = since.elapsed().min(state.budget_left());
            state.at += stood;
            state.paused += stood;
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
        // Long enough that no stall between here and the pause spends it.
        let deadline = Deadline::new(Duration::from_secs(1));
        let waiter = tokio::spawn({
            let deadline = deadline.clone();
            async move { deadline.expired().await }
        });
        {
            let _paused = deadline.pause().expect("the clock is running");
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(!waiter.is_finished(), "no timeout while someone is asked");
        }
        // The clock runs again: the rest of the second, then it expires.
        // The bound only ends a test that would otherwise never end.
        tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the deadline expires once the clock runs again")
            .unwrap();
        assert!(
            deadline.pause().is_none(),
            "a deadline that passed stays passed"
        );
    }

    #[tokio::test]
    async fn the_clock_stands_still_for_at_most_its_budget_in_all() {
        let deadline = Deadline::new(Duration::from_secs(10));
        deadline.state().most_paused = Duration::from_millis(200);
        {
            let _paused = deadline.pause().expect("within the budget");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(
            deadline.pause().is_none(),
            "the budget is spent: no more pauses, the clock runs"
        );
    }

    #[tokio::test]
    async fn a_pause_past_the_budget_lets_the_clock_run_while_it_lasts() {
        let deadline = Deadline::new(Duration::from_secs(1));
        deadline.state().most_paused = Duration::from_millis(200);
        let waiter = tokio::spawn({
            let deadline = deadline.clone();
            async move { deadline.expired().await }
        });
        // A pause that never ends (an approver with no timeout): the clock
        // stands still for the 200 ms budget, then runs its second.
        let _held = deadline.pause().expect("the clock is running");
        tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the deadline passes while the pause still lives")
            .unwrap();
        assert_eq!(deadline.left(), Duration::ZERO);
    }

    #[tokio::test]
    async fn overlapping_pauses_hold_the_clock_until_the_last_ends() {
        // Never reached: the test reads how far the pauses moved it.
        let deadline = Deadline::new(Duration::from_secs(60));
        let at_first = deadline.state().at;
        let first = deadline.pause().expect("the clock is running");
        let second = deadline.pause().expect("a second pause joins the first");
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(first);
        {
            let state = deadline.state();
            assert_eq!(state.pauses, 1);
            assert!(state.paused_since.is_some(), "still paused by the second");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(second);
        let state = deadline.state();
        assert!(state.paused_since.is_none());
        // Moved on by the whole time either pause held it (at least the
        // 500 ms slept), not by the first pause's 300 ms alone.
        assert!(
            state.at - at_first >= Duration::from_millis(500),
            "the deadline moved on by the time the clock stood still"
        );
    }
}
