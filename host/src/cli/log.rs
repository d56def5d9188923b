//! Logs on stderr: written for people, and safe against hostile text.
//!
//! Tools are untrusted and log through the host (target `toolhost::guest`),
//! and the model chooses call ids and tool names, so any field of any event
//! may hold text an attacker wrote. In the text format, [`EscapedFields`]
//! writes every event as exactly one line that cannot move the cursor, change
//! colours, reorder what a viewer shows, or pass for another field:
//!
//! - Characters that drive a terminal or a viewer are escaped the way Rust
//!   spells them: `\n`, `\r`, `\t`, and `\u{..}` in lowercase hex for the
//!   rest. These are the C0 and C1 controls and DEL (so ESC is `\u{1b}` and
//!   the one-byte CSI is `\u{9b}`), the bidirectional embeddings, overrides,
//!   isolates and marks (U+061C, U+200E, U+200F, U+202A..=U+202E,
//!   U+2066..=U+2069), and the line and paragraph separators U+2028 and
//!   U+2029.
//! - A field value is written bare when it is not empty and holds no
//!   whitespace, `=`, `"`, `\` or character from the list above: `tool=calc`.
//!   Otherwise it is quoted, with `\"` and `\\` inside as well:
//!   `call_id="a b=c"`. The message follows the same rule except that spaces
//!   leave it bare, so `tool call finished` reads as it should and a message
//!   holding `=` is quoted rather than read as a field.
//!
//! The JSON format is left to serde_json, which escapes quotes, backslashes
//! and C0 controls, so a JSON event is one line too; DEL, C1 controls and
//! bidirectional marks stay as they are, for whatever reads the JSON.
//!
//! Lines reach stderr through a lossy queue on a thread of its own (see
//! [`init`]): a stderr that does not keep up, such as a full pipe, costs log
//! lines, never a stalled tool call. While a prompt waits for a person's
//! answer the thread holds its lines back (`cli/terminal.rs`), so no line
//! lands inside the prompt; a prompt left open long enough to fill the queue
//! costs lines the same way, counted and reported at exit.

use std::error::Error;
use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::io::IsTerminal as _;

use tracing::Dispatch;
use tracing::field::{Field, Visit};
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FormatFields, MakeWriter};
use tracing_subscriber::util::{SubscriberInitExt as _, TryInitError};

/// How many lines may wait for a slow stderr before new ones are dropped.
///
/// The queue holds whole lines, so this bounds the memory a stalled stderr
/// can pin (tens of megabytes at the few kilobytes a tool's line may take),
/// while leaving room for a burst of debug logging on a terminal that is
/// merely slow. The crate's default, 128,000 lines, would allow gigabytes.
const QUEUED_LINES: usize = 4096;

/// The shape of log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event for people to read, with hostile text escaped.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Builds the stderr logger and installs it as the process's global
/// subscriber, for the `toolhost` binary.
///
/// Levels come from `RUST_LOG` (`default`, an `EnvFilter` directive such as
/// `warn,toolhost::guest=trace`, when it is unset or does not parse).
/// Colours are used only in the text format, only when stderr is a terminal,
/// and never when `NO_COLOR` is set to a non-empty value
/// (<https://no-color.org>). Records from the `log` crate are logged too.
///
/// Lines are written by a thread of their own through a lossy queue of a few
/// thousand lines: when stderr does not keep up, new lines are dropped and
/// counted instead of blocking the caller. Keep the returned [`Guard`] until
/// the program ends, and call [`Guard::finish`] to flush the queue and learn
/// how many lines were dropped. This function prints nothing itself: telling
/// the operator is the binary's job.
///
/// # Errors
///
/// Fails when a global subscriber is already installed, which means this was
/// called twice.
pub(crate) fn init_with(format: LogFormat, default: &str) -> Result<Guard, TryInitError> {
    let stderr = std::io::stderr();
    let colour = colour(stderr.is_terminal(), std::env::var_os("NO_COLOR"));
    let (writer, worker) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("toolhost-log")
        .finish(super::terminal::TERMINAL.held_while_prompting(stderr));
    let dropped = writer.error_counter();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    dispatch(format, writer, colour, filter).try_init()?;
    Ok(Guard {
        worker: Some(worker),
        dropped,
    })
}

/// Keeps the thread that writes log lines to stderr running.
///
/// Dropping it flushes the lines still queued, waiting for stderr for about a
/// second at most. Prefer [`Guard::finish`], which also says how many lines
/// were lost and does not wait on a stderr that is already losing them.
#[derive(Debug)]
#[must_use = "dropping the guard stops writing log lines"]
pub struct Guard {
    worker: Option<WorkerGuard>,
    dropped: ErrorCounter,
}

impl Guard {
    /// How many log lines have been dropped so far because stderr did not
    /// keep up.
    pub fn dropped_lines(&self) -> usize {
        self.dropped.dropped_lines()
    }

    /// Flushes the queued lines and returns how many lines were dropped in
    /// all.
    ///
    /// When lines were already dropped, stderr is likely still stalled, so
    /// the queue is abandoned instead of flushed: waiting would delay the
    /// exit, and tracing-appender reports a stuck flush on stdout, which
    /// carries the tool output.
    pub fn finish(mut self) -> usize {
        let dropped = self.dropped_lines();
        if dropped > 0 {
            std::mem::forget(self.worker.take());
        }
        dropped
    }
}

/// Whether the text format may use ANSI colours.
fn colour(stderr_is_terminal: bool, no_color: Option<OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

/// The subscriber [`init`] installs, writing to `writer` instead of stderr so
/// that tests can read what it writes.
fn dispatch<W>(format: LogFormat, writer: W, colour: bool, filter: EnvFilter) -> Dispatch
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => {
            Dispatch::new(builder.with_ansi(colour).fmt_fields(EscapedFields).finish())
        }
        LogFormat::Json => Dispatch::new(builder.with_ansi(false).json().finish()),
    }
}

/// Formats an event's or a span's fields as `message name=value ...` on one
/// line, escaping and quoting hostile text as the [module docs](self)
/// describe.
///
/// Use it in place of tracing-subscriber's default field formatter, which
/// writes messages and `%display` values as they are, line breaks included.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            scratch: String::new(),
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes each field through [`write_text`] as it is visited.
struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    /// No field has been written yet, so none needs a separating space.
    first: bool,
    /// Where a value is formatted before it is escaped, reused across fields.
    scratch: String,
    result: fmt::Result,
}

impl EscapingVisitor<'_> {
    /// Formats a value with `format` into the scratch buffer, then writes it
    /// as the field's value.
    fn record_with(&mut self, field: &Field, format: impl FnOnce(&mut String) -> fmt::Result) {
        if self.result.is_err() {
            return;
        }
        self.scratch.clear();
        self.result = format(&mut self.scratch).and_then(|()| {
            write_field(
                &mut self.writer,
                &mut self.first,
                field.name(),
                &self.scratch,
            )
        });
    }
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        self.result = write_field(&mut self.writer, &mut self.first, field.name(), value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn Error + 'static)) {
        // The whole chain, as anyhow's `{:#}` shows it: the operator needs
        // the cause, not only the outermost context.
        self.record_with(field, |out| {
            write!(out, "{value}")?;
            let mut source = value.source();
            while let Some(error) = source {
                write!(out, ": {error}")?;
                source = error.source();
            }
            Ok(())
        });
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%display` values and the message arrive here too.
        self.record_with(field, |out| write!(out, "{value:?}"));
    }
}

/// Writes one field, preceded by a space unless it is the first.
fn write_field(out: &mut Writer<'_>, first: &mut bool, name: &str, value: &str) -> fmt::Result {
    // The `log` crate's target, module and file come through as `log.*`
    // fields; the event formatter already shows them as the event's own.
    if name.starts_with("log.") {
        return Ok(());
    }
    if !std::mem::replace(first, false) {
        out.write_char(' ')?;
    }
    if name == "message" {
        return write_text(out, value, Role::Message);
    }
    let name = name.strip_prefix("r#").unwrap_or(name);
    write_text(out, name, Role::Value)?;
    out.write_char('=')?;
    write_text(out, value, Role::Value)
}

/// Where a piece of text goes, which decides when it may be written bare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The free-text message: spaces are fine.
    Message,
    /// A field's name or value, which ends at the first space.
    Value,
}

/// Writes `text` bare when that is unambiguous, and otherwise quoted and
/// escaped, so that it can neither break the line nor pass for more fields.
fn write_text(out: &mut impl fmt::Write, text: &str, role: Role) -> fmt::Result {
    let bare = (role == Role::Message || !text.is_empty())
        && !text.chars().any(|c| {
            needs_escape(c)
                || matches!(c, '=' | '"' | '\\')
                || (role == Role::Value && c.is_whitespace())
        });
    if bare {
        return out.write_str(text);
    }
    out.write_char('"')?;
    for c in text.chars() {
        match c {
            '"' => out.write_str("\\\"")?,
            '\\' => out.write_str("\\\\")?,
            '\n' => out.write_str("\\n")?,
            '\r' => out.write_str("\\r")?,
            '\t' => out.write_str("\\t")?,
            c if needs_escape(c) => write!(out, "\\u{{{:x}}}", u32::from(c))?,
            c => out.write_char(c)?,
        }
    }
    out.write_char('"')
}

/// Whether `c` could break a log line, drive a terminal, reorder what a
/// viewer shows or hide in it, and so must never be written as itself: the
/// characters [`toolhost::printable`] keeps from a person, written here as
/// escapes so the log keeps them.
fn needs_escape(c: char) -> bool {
    // `is_control` is exactly C0, DEL and C1: newlines, ESC and the
    // one-byte CSI among them.
    c.is_control()
        || toolhost::printable::is_hidden(c)
        // Line and paragraph separators, which some viewers break on.
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Installs the stderr logger; keep what it returns until `main` returns.
pub(crate) fn init_logging(
    format: LogFormat,
    default: &str,
) -> Result<Logging, tracing_subscriber::util::TryInitError> {
    init_with(format, default).map(|guard| Logging(Some(guard)))
}

/// Flushes the log when `main` returns, whichever way it does, and tells the
/// operator if a slow stderr cost log lines.
pub(crate) struct Logging(Option<Guard>);

impl Drop for Logging {
    fn drop(&mut self) {
        let Some(guard) = self.0.take() else { return };
        let dropped = guard.finish();
        if dropped == 0 {
            return;
        }
        // stderr is what did not keep up, and the log thread may still hold
        // it, so the notice gets a second to get through rather than holding
        // up the exit for as long as stderr stays stuck.
        let (written, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            eprintln!(
                "warning: {dropped} log lines were dropped because stderr did not keep up; \
                 send stderr to a file, or log less with RUST_LOG"
            );
            let _ = written.send(());
        });
        let _ = wait.recv_timeout(std::time::Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use proptest::prelude::*;

    use super::*;

    /// A log writer that keeps everything written to it, for tests to read.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// Runs `log` under the subscriber [`init`] would install, writing to a
    /// buffer at every level, and returns what it wrote.
    fn render(format: LogFormat, colour: bool, log: impl FnOnce()) -> String {
        let buffer = Buffer::default();
        let dispatch = dispatch(format, buffer.clone(), colour, EnvFilter::new("trace"));
        tracing::dispatcher::with_default(&dispatch, log);
        buffer.text()
    }

    const HOSTILE_MESSAGE: &str = "done\n2025-01-01T00:00:00Z ERROR toolhost: forged\r\x1b[2J\x1b]0;pwned\x07\u{9b}31m \u{202e}txt.exe";
    const HOSTILE_TOOL: &str = "calc\nWARN";
    const HOSTILE_CALL_ID: &str = "id\r\x1b[1A\u{2066}x";

    fn log_hostile_guest_event() {
        tracing::warn!(
            target: "toolhost::guest",
            component = "calc.wasm",
            tool = HOSTILE_TOOL,
            call_id = %HOSTILE_CALL_ID,
            "{HOSTILE_MESSAGE}"
        );
    }

    #[test]
    fn hostile_guest_text_renders_as_one_escaped_line() {
        let out = render(LogFormat::Text, false, log_hostile_guest_event);
        assert_eq!(out.matches('\n').count(), 1, "{out}");
        assert!(out.ends_with('\n'), "{out}");
        assert!(
            !out.trim_end_matches('\n').chars().any(needs_escape),
            "{out:?}"
        );
        assert!(
            out.contains(
                r#" "done\n2025-01-01T00:00:00Z ERROR toolhost: forged\r\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m \u{202e}txt.exe" component=calc.wasm tool="calc\nWARN" call_id="id\r\u{1b}[1A\u{2066}x""#
            ),
            "{out}"
        );
    }

    #[test]
    fn colours_never_let_hostile_escapes_through() {
        let out = render(LogFormat::Text, true, log_hostile_guest_event);
        // The level is coloured, but the guest's own sequences stay text.
        assert!(out.contains('\x1b'), "{out:?}");
        assert!(
            !out.contains("\x1b[2J") && !out.contains("\x1b[1A"),
            "{out:?}"
        );
        assert_eq!(out.matches('\n').count(), 1, "{out:?}");
    }

    #[test]
    fn no_ansi_codes_when_colour_is_off() {
        let out = render(LogFormat::Text, false, || {
            tracing::error!(step = 1, "model call failed");
        });
        assert!(!out.contains('\x1b'), "{out:?}");
        assert!(out.contains("ERROR"), "{out}");
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(!colour(false, None));
        assert!(!colour(false, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(
            colour(true, Some("".into())),
            "an empty NO_COLOR means unset"
        );
        assert!(colour(true, None));
    }

    #[test]
    fn json_stays_valid_json() {
        let out = render(LogFormat::Json, false, log_hostile_guest_event);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let event: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(event["target"], "toolhost::guest");
        assert_eq!(event["fields"]["message"], HOSTILE_MESSAGE);
        assert_eq!(event["fields"]["tool"], HOSTILE_TOOL);
        assert_eq!(event["fields"]["call_id"], HOSTILE_CALL_ID);
        assert!(!out.contains('\x1b'), "{out:?}");
    }

    #[test]
    fn plain_text_stays_bare_and_the_rest_is_quoted() {
        let out = render(LogFormat::Text, false, || {
            tracing::info!(
                component = "calc",
                empty = "",
                spaced = "a b",
                forged = "x level=ERROR",
                path = r"C:\tools",
                quote = "say \"hi\"",
                ms = 12_u64,
                ok = true,
                r#type = "tool",
                "tool call finished"
            );
            tracing::info!("result=42");
        });
        assert!(
            out.contains(
                r#": tool call finished component=calc empty="" spaced="a b" forged="x level=ERROR" path="C:\\tools" quote="say \"hi\"" ms=12 ok=true type=tool"#
            ),
            "{out}"
        );
        assert!(out.contains(r#": "result=42""#), "{out}");
    }

    #[test]
    fn errors_show_their_whole_chain_on_one_line() {
        let error =
            anyhow::anyhow!("disk full\nretry later").context("cannot write the compile cache");
        let error: &(dyn Error + 'static) = error.as_ref();
        let out = render(LogFormat::Text, false, || {
            tracing::warn!(error, "continuing")
        });
        assert!(
            out.contains(
                r#"continuing error="cannot write the compile cache: disk full\nretry later""#
            ),
            "{out}"
        );
    }

    #[test]
    fn span_fields_are_escaped_too() {
        let out = render(LogFormat::Text, false, || {
            let span = tracing::info_span!("call", call_id = %"a\nb");
            let _entered = span.enter();
            tracing::info!("started");
        });
        assert!(out.contains(r#"call{call_id="a\nb"}"#), "{out}");
        assert_eq!(out.matches('\n').count(), 1, "{out}");
    }

    /// Text that leans on the characters that matter.
    fn hostile_text() -> impl Strategy<Value = String> {
        let c = prop_oneof![
            any::<char>(),
            prop::sample::select(
                "\n\r\t\x1b\x07\x7f\u{85}\u{9b}\u{202e}\u{2067}\u{2028}\u{200b}\u{feff}\u{e0041}\u{fe0f}\"\\= [m"
                    .chars()
                    .collect::<Vec<_>>()
            ),
        ];
        prop::collection::vec(c, 0..40).prop_map(|chars| chars.into_iter().collect())
    }

    /// Reads back what [`write_text`] wrote, or `None` when it is not
    /// exactly one bare or quoted token.
    fn read_back(written: &str, role: Role) -> Option<String> {
        let Some(quoted) = written.strip_prefix('"') else {
            let one_token = role == Role::Message
                || !(written.is_empty() || written.contains(char::is_whitespace));
            let plain = !written.contains(['"', '\\', '=']) && !written.chars().any(needs_escape);
            return (one_token && plain).then(|| written.to_owned());
        };
        let mut text = String::new();
        let mut chars = quoted.chars();
        loop {
            match chars.next()? {
                '"' => return chars.as_str().is_empty().then_some(text),
                '\\' => text.push(match chars.next()? {
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    '"' => '"',
                    '\\' => '\\',
                    'u' => {
                        let rest = chars.as_str().strip_prefix('{')?;
                        let (hex, rest) = rest.split_once('}')?;
                        chars = rest.chars();
                        char::from_u32(u32::from_str_radix(hex, 16).ok()?)?
                    }
                    _ => return None,
                }),
                c => text.push(c),
            }
        }
    }

    fn written(text: &str, role: Role) -> String {
        let mut out = String::new();
        write_text(&mut out, text, role).unwrap();
        out
    }

    proptest! {
        #[test]
        fn any_text_renders_as_one_safe_line(message in hostile_text(), value in hostile_text()) {
            let out = render(LogFormat::Text, false, || {
                tracing::info!(target: "toolhost::guest", tool = %value, "{message}");
            });
            prop_assert_eq!(out.matches('\n').count(), 1, "{:?}", out);
            let line = out.trim_end_matches('\n');
            prop_assert!(!line.chars().any(needs_escape), "{:?}", line);
            let fields = format!(
                "toolhost::guest: {} tool={}",
                written(&message, Role::Message),
                written(&value, Role::Value)
            );
            prop_assert!(line.ends_with(&fields), "{:?}", line);
        }

        #[test]
        fn written_text_is_one_token_that_reads_back(text in hostile_text()) {
            for role in [Role::Message, Role::Value] {
                let written = written(&text, role);
                let read = read_back(&written, role);
                prop_assert_eq!(read.as_deref(), Some(&*text), "{:?}", written);
            }
        }
    }
}
