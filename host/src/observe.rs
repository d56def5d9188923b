//! What a running call reports before it ends: the lines the tool logs (and,
//! with contract 0.2, its progress), for front ends that pass them on while
//! the call runs, as MCP's `notifications/message` does.

use std::fmt;

/// The level of a line a tool logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
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

/// Hears what one call reports while it runs.
///
/// Called on the call's own thread, from inside the sandbox's host
/// functions: implementations must return at once (queue, never wait).
/// Lines arrive masked and cut, within the call's log budget (100 lines,
/// 64 KiB), so an observer never sees more than the operator's log would.
pub trait CallObserver: Send + Sync + fmt::Debug {
    /// Whether lines at `level` are wanted at all.
    fn wants(&self, level: LogLevel) -> bool;
    /// One line the tool logged.
    fn log(&self, level: LogLevel, line: &str);
}
