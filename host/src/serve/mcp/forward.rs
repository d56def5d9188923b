//! A call's log lines and progress, passed on to the client while the call
//! runs, as `notifications/message` and `notifications/progress`, before
//! its result.

use std::sync::Arc;

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::Value;

use crate::observe::{CallObserver, LogLevel, Progress};

/// Lines that wait to be sent to the client; more than a call's whole log
/// budget (100 lines), so none is lost to a slow client within one call.
const QUEUED_LINES: usize = 128;

/// What a running call sends its client before its result.
enum Note {
    Log(LoggingLevel, String),
    Progress(ProgressNotificationParam),
}

/// Passes a call's log lines on as `notifications/message` (at the level
/// the client asked for) and its progress as `notifications/progress`
/// (when the request carried a `progressToken`).
#[derive(Debug)]
pub(super) struct CallForwarder {
    minimum: Option<LoggingLevel>,
    progress_token: Option<ProgressToken>,
    tool: String,
    notes: tokio::sync::mpsc::Sender<Note>,
}

impl std::fmt::Debug for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Note")
    }
}

impl CallForwarder {
    /// The forwarder, and the task that sends what it queues to `peer`;
    /// the task ends once the forwarder is dropped and its queue is empty.
    pub(super) fn start(
        minimum: Option<LoggingLevel>,
        progress_token: Option<ProgressToken>,
        tool: &str,
        peer: Peer<RoleServer>,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let (notes, mut queued) = tokio::sync::mpsc::channel(QUEUED_LINES);
        let logger = tool.to_owned();
        let task = tokio::spawn(async move {
            while let Some(note) = queued.recv().await {
                let sent = match note {
                    Note::Log(level, line) => {
                        let message =
                            LoggingMessageNotificationParam::new(level, Value::String(line))
                                .with_logger(logger.clone());
                        peer.notify_logging_message(message).await
                    }
                    Note::Progress(progress) => peer.notify_progress(progress).await,
                };
                if sent.is_err() {
                    break;
                }
            }
        });
        let forwarder = Arc::new(Self {
            minimum,
            progress_token,
            tool: tool.to_owned(),
            notes,
        });
        (forwarder, task)
    }
}

fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Trace | LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warn => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// MCP's levels in order (rmcp's type has no order of its own).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl CallObserver for CallForwarder {
    fn wants(&self, level: LogLevel) -> bool {
        self.minimum
            .is_some_and(|minimum| rank(mcp_level(level)) >= rank(minimum))
    }

    fn log(&self, level: LogLevel, line: &str) {
        if self.wants(level)
            && self
                .notes
                .try_send(Note::Log(mcp_level(level), line.to_owned()))
                .is_err()
        {
            tracing::debug!(tool = %self.tool, "a log line for the MCP client was dropped: the client is not reading");
        }
    }

    fn progress(&self, progress: &Progress) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token.clone(), progress.done);
        param.total = progress.total;
        param.message.clone_from(&progress.message);
        // Progress is lossy by nature: a report the client is too slow for
        // is dropped, and a later one says more.
        let _ = self.notes.try_send(Note::Progress(param));
    }
}
