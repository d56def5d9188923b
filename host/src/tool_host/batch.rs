//! Many calls at once: a batch answered in order whatever happens to any of
//! its calls, and a stream of calls through a bounded window.

use futures::FutureExt as _;

use super::env::CallOptions;
use super::{CallResult, ToolHost};
use crate::outcome::{CallError, ErrorType, Outcome, clip};
use crate::sandbox::spread::AbortOnDrop;
use crate::tool_call::ToolCall;

impl ToolHost {
    /// Run `calls` concurrently in `env`, shared by every call: one outcome
    /// per call, in the order of `calls`, whatever happens to any of them.
    /// The embedder's way in is [`ToolHost::call_batch`].
    pub(crate) async fn call_batch_in(
        &self,
        calls: Vec<ToolCall>,
        env: CallOptions,
    ) -> Vec<Outcome> {
        self.call_batch_resolved(calls, env)
            .await
            .into_iter()
            .map(|result| result.outcome)
            .collect()
    }

    /// [`ToolHost::call_batch_in`], each outcome with the tool its call
    /// resolved to: each name is looked up once, here.
    pub(crate) async fn call_batch_resolved(
        &self,
        calls: Vec<ToolCall>,
        env: CallOptions,
    ) -> Vec<CallResult> {
        let mut results: Vec<Option<CallResult>> = Vec::with_capacity(calls.len());
        let mut runnable = Vec::with_capacity(calls.len());
        // A repeated tool_call_id: the first call with it runs; each later
        // one is answered (under the same id, in its place) with an error
        // and never run, so a model that repeats itself cannot make a
        // destructive call twice, and the one answer that ran is the first.
        let mut seen = std::collections::HashSet::with_capacity(calls.len());
        for (i, call) in calls.into_iter().enumerate() {
            let found = self.resolve(&call.name);
            if seen.insert(call.id.clone()) {
                runnable.push((i, found, call));
                results.push(None);
            } else {
                results.push(Some(self.with_spec(found, repeated_id(&call))));
            }
        }
        // The last call runs on this task (unless a front thread already
        // runs one, `spread::claim_inline`), the others on the runtime's
        // workers (`spread`): a batch of one costs what a single call does, with no
        // hand-off between threads. Dropping this future (a client that
        // went away) aborts every call still running.
        let last = runnable.pop();
        let tasks: Vec<_> = runnable
            .into_iter()
            .map(|(i, found, call)| {
                let (id, name) = (call.id.clone(), call.name.clone());
                let host = self.clone();
                let env = env.clone();
                let task = crate::sandbox::spread::spawn(async move {
                    host.call_resolved(found, call, &env).await
                });
                (i, found, id, name, AbortOnDrop(task))
            })
            .collect();
        if let Some((i, found, call)) = last {
            let (id, name) = (call.id.clone(), call.name.clone());
            let result = match crate::sandbox::spread::claim_inline() {
                Some(_inline) => {
                    std::panic::AssertUnwindSafe(self.call_resolved(found, call, &env))
                        .catch_unwind()
                        .await
                        .map_err(|_| "panicked".to_owned())
                }
                // A front thread already running a call: this one goes to
                // the workers.
                None => {
                    let (host, env) = (self.clone(), env.clone());
                    crate::sandbox::spread::off_the_front(async move {
                        host.call_resolved(found, call, &env).await
                    })
                    .await
                    .map_err(|e| e.to_string())
                }
            };
            results[i] =
                Some(result.unwrap_or_else(|e| self.with_spec(found, task_failed(id, name, &e))));
        }
        for (i, found, id, name, mut task) in tasks {
            let result = (&mut task.0).await;
            results[i] =
                Some(result.unwrap_or_else(|e| {
                    self.with_spec(found, task_failed(id, name, &e.to_string()))
                }));
        }
        results
            .into_iter()
            .map(|result| result.expect("every call was answered above"))
            .collect()
    }

    /// Run `calls` as [`ToolHost::call_batch_resolved`] does, through a
    /// window of at most `window` calls in flight (see
    /// [`super::StreamRequest::run`]): each name is looked up once, here.
    pub(crate) fn stream_calls(
        &self,
        calls: impl futures::Stream<Item = ToolCall> + Send + 'static,
        env: CallOptions,
        window: usize,
    ) -> impl futures::Stream<Item = CallResult> + Send + 'static {
        use futures::StreamExt as _;
        let host = self.clone();
        let mut seen = crate::tool_call::IdSet::new();
        calls
            .map(move |call| {
                let found = host.resolve(&call.name);
                if !seen.insert(&call.id) {
                    let result = host.with_spec(found, repeated_id(&call));
                    return futures::future::ready(result).left_future();
                }
                let (id, name) = (call.id.clone(), call.name.clone());
                let (runner, env) = (host.clone(), env.clone());
                let mut task = AbortOnDrop(crate::sandbox::spread::spawn(async move {
                    runner.call_resolved(found, call, &env).await
                }));
                let host = host.clone();
                async move {
                    (&mut task.0).await.unwrap_or_else(|e| {
                        host.with_spec(found, task_failed(id, name, &e.to_string()))
                    })
                }
                .right_future()
            })
            .buffered(window.max(1))
    }

    /// A window for [`ToolHost::call_stream`] that keeps every instance
    /// this host may run busy: twice as many calls as instances, so the
    /// next call is queued when one ends.
    #[must_use]
    pub fn batch_window(&self) -> usize {
        self.inner.max_in_flight.saturating_mul(2).max(1)
    }
}

/// The answer to a call whose id an earlier call of its batch has: it is
/// not run, so a model that repeats itself cannot make a destructive call
/// twice.
fn repeated_id(call: &ToolCall) -> Outcome {
    let message = format!(
        "tool_call_id {:?} is used by an earlier call in this batch; this call was not run (give every call its own id)",
        clip(&call.id, 64)
    );
    Outcome::error(
        call.id.clone(),
        clip(&call.name, 64),
        CallError::new(ErrorType::InvalidArguments, message),
    )
}

/// The outcome for a call whose host task failed: never a crash of the batch.
fn task_failed(id: String, name: String, why: &str) -> Outcome {
    tracing::error!(call_id = %id, tool = %name, error = why, "tool call task failed");
    Outcome::error(
        id,
        name,
        CallError::new(ErrorType::Internal, "the host's task for this call failed"),
    )
}
