//! A tool's stdout and stderr: kept as a bounded tail for the trap log.
//!
//! Tools report through their return value and `log`; their stdio matters only
//! when they crash (a Rust panic message, a Python traceback). Only the last
//! [`TAIL_BYTES`] are kept so a chatty tool cannot grow the host's memory, and
//! writes never fail, so a guest never traps because its output is full.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

/// How much of a tool's stdout or stderr is kept.
pub(crate) const TAIL_BYTES: usize = 4096;

/// The last [`TAIL_BYTES`] written to a stream.
#[derive(Clone, Default)]
pub(crate) struct Tail(Arc<Mutex<Kept>>);

#[derive(Default)]
struct Kept {
    bytes: VecDeque<u8>,
    /// Whether anything before the kept bytes was dropped: the tail may
    /// then begin partway through a secret.
    cut: bool,
}

impl Tail {
    /// What was kept, lossily decoded, and whether earlier output was cut.
    pub(crate) fn contents(&self) -> (String, bool) {
        let kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (a, b) = kept.bytes.as_slices();
        (
            String::from_utf8_lossy(&[a, b].concat()).into_owned(),
            kept.cut,
        )
    }

    fn push(&self, bytes: &[u8]) {
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if bytes.len() > TAIL_BYTES {
            kept.cut = true;
        }
        let bytes = &bytes[bytes.len().saturating_sub(TAIL_BYTES)..];
        let overflow = (kept.bytes.len() + bytes.len()).saturating_sub(TAIL_BYTES);
        if overflow > 0 {
            kept.cut = true;
        }
        kept.bytes.drain(..overflow);
        kept.bytes.extend(bytes);
    }
}

impl IsTerminal for Tail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Tail {
    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl AsyncWrite for Tail {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_tail() {
        let tail = Tail::default();
        tail.push(&[b'a'; TAIL_BYTES]);
        tail.push(b"end");
        let (kept, cut) = tail.contents();
        assert_eq!(kept.len(), TAIL_BYTES);
        assert!(kept.ends_with("aend") && cut);
        tail.push(&vec![b'z'; TAIL_BYTES * 2]);
        assert_eq!(tail.contents().0, "z".repeat(TAIL_BYTES));
        let short = Tail::default();
        short.push(b"all of it");
        assert_eq!(short.contents(), ("all of it".to_owned(), false));
    }
}
