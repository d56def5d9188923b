//! The embedder's three ways to run calls — one call, a batch, a stream —
//! each a request that takes its [`CallOptions`] by builder and runs when
//! awaited (or, for a stream, when [`StreamRequest::run`] is polled).
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolhost::{ApproveAll, CallOptions, ToolCall, ToolHost};
//!
//! # async fn run(host: ToolHost) {
//! let calc = |id: &str| ToolCall::new(id, "calc", serde_json::json!({"expression": "6*7"}));
//! // One call, with the defaults: calls that need approval are refused.
//! let outcome = host.call(calc("1")).await;
//! // One call, approved and with injected context.
//! let outcome = host
//!     .call(calc("2"))
//!     .approver(Arc::new(ApproveAll))
//!     .context(serde_json::json!({"user": "ada"}))
//!     .await;
//! // A batch sharing options made once.
//! let options = CallOptions::default().approver(Arc::new(ApproveAll));
//! let outcomes = host.call_batch(vec![calc("3"), calc("4")]).options(&options).await;
//! # }
//! ```

use std::borrow::Cow;
use std::future::IntoFuture;
use std::num::NonZeroUsize;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::env::{Approver, CallOptions};
use super::{CallResult, ToolHost};
use crate::observe::{Asker, CallObserver};
use crate::outcome::Outcome;
use crate::tool_call::ToolCall;

impl ToolHost {
    /// One call. Await the request to run it; before that, set its options
    /// (by default a call that needs approval is refused, see
    /// [`CallOptions`]).
    ///
    /// ```no_run
    /// # async fn run(host: toolhost::ToolHost) {
    /// let call = toolhost::ToolCall::new("1", "calc", serde_json::json!({"expression": "6*7"}));
    /// let outcome = host.call(call).await;
    /// println!("{}", outcome.content());
    /// # }
    /// ```
    pub fn call(&self, call: ToolCall) -> CallRequest<'_> {
        CallRequest {
            host: self,
            call,
            options: Cow::Owned(CallOptions::default()),
        }
    }

    /// Many calls at once. Awaited, it gives one outcome per call, in the
    /// order of `calls`, whatever happens to any of them; a call whose id
    /// an earlier one has is answered with an error and never run.
    ///
    /// ```no_run
    /// # async fn run(host: toolhost::ToolHost) {
    /// use toolhost::ToolCall;
    /// let outcomes = host
    ///     .call_batch(vec![
    ///         ToolCall::new("1", "calc", serde_json::json!({"expression": "6*7"})),
    ///         ToolCall::with_raw_arguments("2", "calc", "{not json"),
    ///     ])
    ///     .await;
    /// assert!(outcomes[1].is_error()); // invalid_arguments: the tool never ran
    /// # }
    /// ```
    pub fn call_batch(&self, calls: Vec<ToolCall>) -> BatchRequest<'_> {
        BatchRequest {
            host: self,
            calls,
            options: Cow::Owned(CallOptions::default()),
        }
    }

    /// Calls read from a stream as they are needed, answered as a stream
    /// in their order, through a bounded window of calls in flight: made for
    /// batches too long to hold (see [`StreamRequest::run`]).
    ///
    /// ```no_run
    /// # async fn run(host: toolhost::ToolHost) {
    /// use futures::StreamExt as _;
    /// let calls = futures::stream::iter((0..10_000).map(|i| {
    ///     toolhost::ToolCall::new(i.to_string(), "calc", serde_json::json!({"expression": "1+1"}))
    /// }));
    /// let mut results = host.call_stream(calls).run();
    /// while let Some(result) = results.next().await {
    ///     println!("{}", result.outcome.content());
    /// }
    /// # }
    /// ```
    pub fn call_stream<S>(&self, calls: S) -> StreamRequest<'_, S>
    where
        S: futures::Stream<Item = ToolCall> + Send + 'static,
    {
        StreamRequest {
            host: self,
            calls,
            options: Cow::Owned(CallOptions::default()),
            window: None,
        }
    }
}

/// The setters every request has, each changing one of its
/// [`CallOptions`]: written once here rather than three times.
macro_rules! option_setters {
    () => {
        /// Use `options` (made once, shared by many requests) instead of the
        /// defaults. Setters called after this change a copy.
        pub fn options(mut self, options: &'h CallOptions) -> Self {
            self.options = Cow::Borrowed(options);
            self
        }

        /// Decide calls that need approval with `approver`.
        pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
            self.options.to_mut().approver = approver;
            self
        }

        /// Answer the questions tools ask with `asker`.
        pub fn asker(mut self, asker: Arc<dyn Asker>) -> Self {
            self.options.to_mut().asker = asker;
            self
        }

        /// Tell `observer` what each call reports while it runs.
        pub fn observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
            self.options.to_mut().observer = Some(observer);
            self
        }

        /// Give the tools `context` (see [`CallOptions::context`]).
        pub fn context(mut self, context: Value) -> Self {
            self.options.to_mut().context = Some(Arc::new(context));
            self
        }

        /// Stop the calls still running when `stop` is cancelled.
        pub fn stop_on(mut self, stop: tokio_util::sync::CancellationToken) -> Self {
            self.options.to_mut().stop = Some(stop);
            self
        }
    };
}

/// One call and its options, from [`ToolHost::call`]; runs when awaited.
#[must_use = "a call runs only when it is awaited"]
#[derive(Debug)]
pub struct CallRequest<'h> {
    host: &'h ToolHost,
    call: ToolCall,
    options: Cow<'h, CallOptions>,
}

impl<'h> CallRequest<'h> {
    option_setters!();
}

impl<'h> IntoFuture for CallRequest<'h> {
    type Output = Outcome;
    type IntoFuture = BoxFuture<'h, Outcome>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move { self.host.call_in(self.call, &self.options).await })
    }
}

/// Calls and their options, from [`ToolHost::call_batch`]; runs when
/// awaited.
#[must_use = "a batch runs only when it is awaited"]
#[derive(Debug)]
pub struct BatchRequest<'h> {
    host: &'h ToolHost,
    calls: Vec<ToolCall>,
    options: Cow<'h, CallOptions>,
}

impl<'h> BatchRequest<'h> {
    option_setters!();
}

impl<'h> IntoFuture for BatchRequest<'h> {
    type Output = Vec<Outcome>;
    type IntoFuture = BoxFuture<'h, Vec<Outcome>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(
            self.host
                .call_batch_in(self.calls, self.options.into_owned()),
        )
    }
}

/// A stream of calls and their options, from [`ToolHost::call_stream`].
#[must_use = "the calls run only when the stream from `run` is polled"]
pub struct StreamRequest<'h, S> {
    host: &'h ToolHost,
    calls: S,
    options: Cow<'h, CallOptions>,
    window: Option<NonZeroUsize>,
}

impl<S> std::fmt::Debug for StreamRequest<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRequest")
            .field("options", &self.options)
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

impl<'h, S> StreamRequest<'h, S>
where
    S: futures::Stream<Item = ToolCall> + Send + 'static,
{
    option_setters!();

    /// At most `window` calls in flight (default
    /// [`ToolHost::batch_window`]: enough to keep every instance the host
    /// may run busy).
    pub fn window(mut self, window: NonZeroUsize) -> Self {
        self.window = Some(window);
        self
    }

    /// The results, one per call in the calls' order, each given as soon
    /// as it and every call before it are done. Each carries the spec of
    /// the tool its call named, for a front end that renders answers as
    /// they come (the stream is the path of front ends; a single call or a
    /// batch gives the outcomes alone). What the stream holds is
    /// bounded by the window, not by the number of calls (past the window,
    /// a 128-bit hash per id, to find repeated ones). The window counts in
    /// the calls' order, so a slow call holds back the start of calls a
    /// whole window behind it. Dropping the stream aborts the calls in
    /// flight and starts no other.
    pub fn run(self) -> impl futures::Stream<Item = CallResult> + Send + 'static {
        let window = self
            .window
            .map_or_else(|| self.host.batch_window(), NonZeroUsize::get);
        self.host
            .stream_calls(self.calls, self.options.into_owned(), window)
    }
}
