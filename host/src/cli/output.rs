//! What the commands write on stdout: JSON, whole or an array element by
//! element, taking turns with the prompts at the terminal.

use futures::{FutureExt as _, StreamExt as _};

use super::terminal::TERMINAL;

/// Write formatted text on stdout. A reader that went away (`| head`) is
/// not an error, and no reason to stop what the command is doing (a run's
/// calls, a check): the rest of the output is dropped. Any other failure to
/// write stdout is reported once on stderr.
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    static REPORTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    if let Err(e) = written
        && e.kind() != std::io::ErrorKind::BrokenPipe
        && !REPORTED.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        eprintln!("error: cannot write to stdout: {e}");
    }
}

/// `println!` that survives a closed stdout ([`write_out`]).
macro_rules! out {
    () => {
        $crate::cli::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use out;

/// `print!` that survives a closed stdout ([`write_out`]).
macro_rules! out_inline {
    ($($arg:tt)*) => {
        $crate::cli::output::write_out(format_args!($($arg)*))
    };
}
pub(crate) use out_inline;

/// Print `value` as pretty JSON on stdout. A reader that went away (`| head`)
/// is not an error: there is nobody left to tell.
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

/// A JSON array written element by element as `elements` yields them,
/// each element as [`print_json`] writes a value, and what is ready out as
/// soon as the next is not: a reader sees each answer as it comes. Writes
/// go between prompts on the terminal, never into one. When stdout fails (a
/// reader that went away), the stream is still read to its end, so every
/// call of the batch runs as it would have; only the answers are dropped.
pub(crate) async fn print_json_array(
    elements: impl futures::Stream<Item = impl serde::Serialize>,
) -> anyhow::Result<()> {
    let mut elements = std::pin::pin!(elements);
    let mut pending = b"[".to_vec();
    let mut failure: Option<std::io::Error> = None;
    let mut written = 0usize;
    loop {
        let element = match elements.next().now_or_never() {
            Some(element) => element,
            None => {
                emit(&mut pending, &mut failure).await;
                elements.next().await
            }
        };
        let Some(element) = element else { break };
        if failure.is_some() {
            continue;
        }
        let text = serde_json::to_string_pretty(&element)?;
        pending.extend_from_slice(if written == 0 { b"\n" } else { b",\n" });
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                pending.push(b'\n');
            }
            pending.extend_from_slice(b"  ");
            pending.extend_from_slice(line.as_bytes());
        }
        written += 1;
        if pending.len() >= 64 << 10 {
            emit(&mut pending, &mut failure).await;
        }
    }
    pending.extend_from_slice(if written == 0 { b"]\n" } else { b"\n]\n" });
    emit(&mut pending, &mut failure).await;
    match failure {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing the answers to stdout"))
        }
        _ => Ok(()),
    }
}

/// Write `pending` to stdout between prompts on the terminal, and empty it;
/// after stdout failed, only empty it.
pub(crate) async fn emit(pending: &mut Vec<u8>, failure: &mut Option<std::io::Error>) {
    use std::io::Write as _;
    if failure.is_none() && !pending.is_empty() {
        let _turn = TERMINAL.turn().await;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_all(pending).and_then(|()| stdout.flush()) {
            *failure = Some(e);
        }
    }
    pending.clear();
}
