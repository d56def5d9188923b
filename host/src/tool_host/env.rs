//! What the application gives a call beside the call itself: who approves
//! it, who answers its questions, who hears what it reports, its injected
//! context, and what stops it.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::observe::{Asker, CallObserver, NobodyToAsk};
use crate::sandbox::CallSide;
use crate::spec::ToolSpec;
use crate::tool_call::ToolCall;

/// Decides whether a call that needs approval may run.
pub trait Approver: Send + Sync {
    /// `Ok(())` to run the call, `Err(reason)` to refuse it with
    /// `denied_by_user`.
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// Refuses every call that needs approval: the safe default when nobody can
/// be asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAll;

impl Approver for RefuseAll {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Err("it needs a person's approval and none could be asked".to_owned()) })
    }
}

/// Refuses every call that needs approval, as [`RefuseAll`] does, and tells
/// the reader how such calls can be allowed. The front end that refuses
/// knows its own switch and spells it: `toolhost call` says "the operator
/// can pass --yes", the server names `ServeConfig::approve_all` or the
/// flag that sets it.
///
/// ```
/// let refuse = toolhost::RefuseWithFix::new("ask an administrator to approve it");
/// # let _: std::sync::Arc<dyn toolhost::Approver> = std::sync::Arc::new(refuse);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefuseWithFix {
    fix: std::borrow::Cow<'static, str>,
}

impl RefuseWithFix {
    /// Refuse, ending each refusal with `fix` (a clause, e.g. "the operator
    /// can pass --yes").
    pub fn new(fix: impl Into<std::borrow::Cow<'static, str>>) -> Self {
        Self { fix: fix.into() }
    }
}

impl Approver for RefuseWithFix {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        let reason = format!(
            "tool '{}' needs a person's approval and nobody could be asked; {}",
            crate::outcome::clip(&spec.name, 64),
            self.fix
        );
        Box::pin(std::future::ready(Err(reason)))
    }
}

/// Approves every call: for operators who said so (`--yes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// What the application supplies with calls, beside the calls themselves;
/// never anything the model wrote.
///
/// ```
/// use std::sync::Arc;
/// use toolhost::CallOptions;
///
/// let env = CallOptions::default()
///     .approver(Arc::new(toolhost::ApproveAll))
///     .context(serde_json::json!({"user": "ada"}));
/// ```
#[derive(Clone)]
pub struct CallOptions {
    /// Decides calls that need approval (default [`RefuseAll`]).
    pub approver: Arc<dyn Approver>,
    /// Answers the questions tools ask (default [`NobodyToAsk`]: every
    /// question is refused at once).
    pub asker: Arc<dyn Asker>,
    /// Hears each call's log lines and progress while it runs.
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Injected context: JSON the tool reads as `call-context.context`,
    /// and which picks the namespace of scoped stores. The model never
    /// writes it and never sees it.
    pub context: Option<Arc<Value>>,
    /// When cancelled, every call still running stops and is answered with
    /// an `internal` error that says so (a server shutting down answers
    /// its calls in flight this way rather than cutting them off).
    pub stop: Option<tokio_util::sync::CancellationToken>,
}

impl Default for CallOptions {
    fn default() -> Self {
        Self {
            approver: Arc::new(RefuseAll),
            asker: Arc::new(NobodyToAsk),
            observer: None,
            context: None,
            stop: None,
        }
    }
}

impl fmt::Debug for CallOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallOptions")
            .field("observer", &self.observer)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl CallOptions {
    /// Replace the approver.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// Replace the asker.
    pub fn asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = asker;
        self
    }

    /// Set the observer.
    pub fn observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Set the injected context.
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(Arc::new(context));
        self
    }

    /// Stop the calls still running when `stop` is cancelled.
    pub fn stop_on(mut self, stop: tokio_util::sync::CancellationToken) -> Self {
        self.stop = Some(stop);
        self
    }

    pub(super) fn side(&self) -> CallSide {
        CallSide {
            observer: self.observer.clone(),
            asker: self.asker.clone(),
            context: self.context.clone(),
            caller: None,
            secrets: None,
        }
    }
}
