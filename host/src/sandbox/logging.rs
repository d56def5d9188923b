//! The tool's log lines (`host.log`): the per-call budget and the target.
//!
//! A tool's lines go to the host's log under the target `toolhost::guest`,
//! with the component, tool and call id, so operators can filter them
//! (`RUST_LOG=warn,toolhost::guest=off`). Their text is the tool's, so it is
//! masked, cut to [`MAX_LINE_BYTES`] and, per call, bounded to
//! [`MAX_LINES`] lines and [`MAX_BYTES`] bytes: a tool logging in a loop
//! cannot fill the operator's disk or hold its call up on a slow log writer.
//! Lines past the budget are dropped and counted; the count is logged once
//! when the call ends. (Control characters are escaped by the log format,
//! not here.)

use std::sync::Arc;

use super::bindings::v0_2::toolhost::tool::host::Level;
use super::secrets::Secrets;
use super::state::CallInfo;
use crate::observe::LogLevel;
use crate::outcome::truncate;

/// Lines one call may log.
pub(crate) const MAX_LINES: u32 = 100;
/// Bytes one call may log, all lines together.
pub(crate) const MAX_BYTES: usize = 64 * 1024;
/// The longest line kept; longer ones are cut with a marker.
pub(crate) const MAX_LINE_BYTES: usize = 4096;

/// One call's log: where its lines go and how much of its budget is left.
pub(crate) struct GuestLog {
    info: CallInfo,
    secrets: Arc<Secrets>,
    lines: u32,
    bytes: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl GuestLog {
    pub(crate) fn new(info: CallInfo, secrets: Arc<Secrets>) -> Self {
        Self {
            info,
            secrets,
            lines: 0,
            bytes: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// Log `message` at `level` if the budget allows, else count it.
    pub(crate) fn write(&mut self, level: Level, message: &str) {
        let observed = self
            .info
            .observer
            .as_ref()
            .is_some_and(|o| o.wants(observed_level(level)));
        let logged = match level {
            Level::Trace => tracing::enabled!(target: "toolhost::guest", tracing::Level::TRACE),
            Level::Debug => tracing::enabled!(target: "toolhost::guest", tracing::Level::DEBUG),
            Level::Info => tracing::enabled!(target: "toolhost::guest", tracing::Level::INFO),
            Level::Warn => tracing::enabled!(target: "toolhost::guest", tracing::Level::WARN),
            Level::Error => tracing::enabled!(target: "toolhost::guest", tracing::Level::ERROR),
        };
        if !logged && !observed {
            return;
        }
        if self.lines >= MAX_LINES || self.bytes + message.len().min(MAX_LINE_BYTES) > MAX_BYTES {
            self.dropped_lines += 1;
            self.dropped_bytes += message.len() as u64;
            return;
        }
        // Masked whole, then cut: a cut never leaves half a secret behind.
        let text = truncate(self.secrets.redact(message).to_string(), MAX_LINE_BYTES);
        self.lines += 1;
        self.bytes += text.len();
        if observed && let Some(observer) = &self.info.observer {
            observer.log(observed_level(level), &text);
        }
        if !logged {
            return;
        }
        let CallInfo {
            component,
            tool,
            call_id,
            ..
        } = &self.info;
        let component = &**component;
        // One macro call per level: tracing's level must be a constant.
        match level {
            Level::Trace => {
                tracing::trace!(target: "toolhost::guest", component, tool, call_id, "{text}")
            }
            Level::Debug => {
                tracing::debug!(target: "toolhost::guest", component, tool, call_id, "{text}")
            }
            Level::Info => {
                tracing::info!(target: "toolhost::guest", component, tool, call_id, "{text}")
            }
            Level::Warn => {
                tracing::warn!(target: "toolhost::guest", component, tool, call_id, "{text}")
            }
            Level::Error => {
                tracing::error!(target: "toolhost::guest", component, tool, call_id, "{text}")
            }
        }
    }
}

fn observed_level(level: Level) -> LogLevel {
    match level {
        Level::Trace => LogLevel::Trace,
        Level::Debug => LogLevel::Debug,
        Level::Info => LogLevel::Info,
        Level::Warn => LogLevel::Warn,
        Level::Error => LogLevel::Error,
    }
}

impl Drop for GuestLog {
    fn drop(&mut self) {
        if self.dropped_lines > 0 {
            tracing::warn!(
                target: "toolhost::guest",
                component = &*self.info.component,
                tool = %self.info.tool,
                call_id = %self.info.call_id,
                dropped_lines = self.dropped_lines,
                dropped_bytes = self.dropped_bytes,
                "the tool logged past its budget of {MAX_LINES} lines / {MAX_BYTES} bytes per call; the rest was dropped"
            );
        }
    }
}
