//! The record of what the host refused a tool during one call.
//!
//! A refusal never traps: the tool sees an ordinary error (a failed open, a
//! denied request) and may carry on. Only when the call then fails does the
//! refusal become its outcome, so the model is told the real reason (the
//! capability or budget that was refused) rather than whatever the tool made
//! of the error.

use std::sync::{Arc, Mutex};

use super::secrets::Secrets;

/// The refusals of one call; cheap to clone into the objects that refuse
/// (streams, the HTTP gate), which outlive a borrow of the store.
#[derive(Clone)]
pub(crate) struct Refusals {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    /// What refusals are masked with: the component's secrets, or the
    /// call's own (its caller's too) once the state has a call.
    secrets: Arc<Secrets>,
    denied: Option<String>,
    exhausted: Option<String>,
    /// Refusals logged so far, and those past [`MAX_LOGGED`] not logged.
    logged: u32,
    unlogged: u64,
}

/// Refusals logged per call: a tool retrying a refused request in a loop
/// must not fill the log. The rest are counted and reported once.
const MAX_LOGGED: u32 = 10;

impl Refusals {
    pub(crate) fn new(secrets: Arc<Secrets>) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                secrets,
                denied: None,
                exhausted: None,
                logged: 0,
                unlogged: 0,
            })),
        }
    }

    /// Mask what is refused from now on with `secrets`: the call's.
    pub(crate) fn mask_with(&self, secrets: Arc<Secrets>) {
        self.lock().secrets = secrets;
    }

    /// The host refused a capability (`capability_denied` if the call
    /// fails): a request to an origin, a file, a write past a quota, a
    /// handle past the call's budget. The first refusal is what the call is
    /// reported as; each is logged, masked.
    pub(crate) fn deny(&self, what: impl Into<String>) {
        let mut inner = self.lock();
        let what = inner.secrets.redact(what.into()).into_string();
        if inner.log() {
            tracing::info!(target: "toolhost::grants", denied = %what, "capability refused");
        }
        inner.denied.get_or_insert(what);
    }

    /// Host memory held for the call reached its budget (`memory_exhausted`
    /// if the call fails).
    pub(crate) fn exhaust(&self, what: impl Into<String>) {
        let mut inner = self.lock();
        let what = inner.secrets.redact(what.into()).into_string();
        if inner.log() {
            tracing::info!(target: "toolhost::limits", exhausted = %what, "host budget refused");
        }
        inner.exhausted.get_or_insert(what);
    }

    /// The first capability refused, if any.
    pub(crate) fn denial(&self) -> Option<String> {
        self.lock().denied.clone()
    }

    /// The first host budget exhausted, if any.
    pub(crate) fn exhaustion(&self) -> Option<String> {
        self.lock().exhausted.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Inner {
    /// Whether this refusal may be logged; counts it otherwise.
    fn log(&mut self) -> bool {
        if self.logged < MAX_LOGGED {
            self.logged += 1;
            true
        } else {
            self.unlogged += 1;
            false
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.unlogged > 0 {
            tracing::info!(
                target: "toolhost::grants",
                unlogged = self.unlogged,
                "more refusals in this call than logged ({MAX_LOGGED})"
            );
        }
    }
}
