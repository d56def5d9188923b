//! What a running call says to the application before it ends: the lines
//! the tool logs and the progress it reports ([`CallObserver`]), and the
//! questions it asks the person ([`Asker`]). Front ends pass them on while
//! the call runs, as MCP's `notifications/message`, `notifications/progress`
//! and elicitation do.

use std::fmt;

use futures::future::BoxFuture;

/// The level of a line a tool logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum LogLevel {
    /// `trace`.
    Trace,
    /// `debug`.
    Debug,
    /// `info`.
    Info,
    /// `warn`.
    Warn,
    /// `error`.
    Error,
}

/// A progress report from a running tool.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// The tool reporting.
    pub tool: String,
    /// The call it reports on.
    pub call_id: String,
    /// How much is done; grows from one report to the next.
    pub done: f64,
    /// How much there is, when the tool knows.
    pub total: Option<f64>,
    /// A short message from the tool: masked, cut, printable and on one
    /// line (see [`crate::printable::one_line`]).
    pub message: Option<String>,
}

/// Hears what one call reports while it runs.
///
/// Called on the call's own thread, from inside the sandbox's host
/// functions: implementations must return at once (queue, never wait).
/// Lines arrive masked and cut, within the call's log budget (100 lines,
/// 64 KiB), so an observer never sees more than the operator's log would;
/// progress within its own budget (see `wit/tool.wit`).
pub trait CallObserver: Send + Sync + fmt::Debug {
    /// Whether lines at `level` are wanted at all.
    fn wants(&self, level: LogLevel) -> bool;
    /// One line the tool logged.
    fn log(&self, level: LogLevel, line: &str);
    /// One progress report. Ignored unless implemented.
    fn progress(&self, progress: &Progress) {
        let _ = progress;
    }
    /// A call this call made ended: a tool granted `call_tools` (the code
    /// tool's `run_code`) calls other tools through the host, and each of
    /// those calls' outcomes comes here, its id the caller's with `/1`,
    /// `/2`, … after it. Transcripts and metrics count them here. Ignored
    /// unless implemented.
    fn called(&self, outcome: &crate::outcome::Outcome) {
        let _ = outcome;
    }
    /// A call this call made was refused (over its budget, not granted, its
    /// arguments too large …) after the first 32 refusals of the call,
    /// which [`called`](Self::called) heard: counted here (metrics), never
    /// shown, since a program refused in a loop would flood a transcript.
    /// Ignored unless implemented.
    fn refused_unreported(&self, outcome: &crate::outcome::Outcome) {
        let _ = outcome;
    }
}

/// A question a tool asks the person mid-call.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The tool asking.
    pub tool: String,
    /// The call it asks from.
    pub call_id: String,
    /// The question's name within the call: the one the tool gave it
    /// (contract 0.2.1's `ask-with-key`: 1 to 64 of `A-Z a-z 0-9 _ -`), or
    /// `q<n>` for the call's n-th question. No two of a call's questions
    /// share one; an MCP client sees it as the `inputRequests` key.
    pub key: String,
    /// The question, as the tool wrote it: masked, cut, and printable (no
    /// controls but newlines and tabs, no bidirectional or invisible
    /// characters: see [`crate::printable`]). Show it as the tool's words,
    /// never as the host's; where it could pose as a prompt of the host's,
    /// show it as one line ([`crate::printable::one_line`]).
    pub message: String,
    /// The JSON Schema of the answer, as the person is to be shown it: MCP's
    /// elicitation schema, an object of string, number, integer and boolean
    /// properties and multi-selects, with only the keywords such a form has.
    /// The host made it from the tool's schema: every title, description,
    /// choice title and default is masked and printable; every property
    /// name, `enum` value and `const` is printable on one line as written,
    /// and no two fields or two choices of a field look alike.
    pub schema: serde_json::Value,
}

/// What became of a question.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Answer {
    /// The person answered; the host checks this against the schema.
    Accepted(serde_json::Value),
    /// The person said no.
    Declined,
    /// The person dismissed it without deciding.
    Cancelled,
    /// Nobody could be asked; the text says why, for the tool's log.
    Unavailable(String),
}

/// Asks the person the questions tools ask. An answer is data for the tool
/// and never a grant: nothing an asker returns changes what a tool may do.
pub trait Asker: Send + Sync {
    /// Ask `question` and wait for the answer. The host bounds the wait
    /// (all of a call's questions together wait at most
    /// [`crate::sandbox::ASK_WAIT`]) and drops the future past it, or when
    /// the call ends: an asker that showed the question should then say it
    /// was withdrawn, and must never pass a later answer on as this one's.
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer>;
}

/// The asker when nobody can be asked: every question is refused at once,
/// so a tool never hangs waiting.
#[derive(Debug, Clone, Copy, Default)]
pub struct NobodyToAsk;

impl Asker for NobodyToAsk {
    fn ask<'a>(&'a self, _: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async {
            Answer::Unavailable(
                "nobody can be asked here (no terminal, and no client that answers questions)"
                    .into(),
            )
        })
    }
}
