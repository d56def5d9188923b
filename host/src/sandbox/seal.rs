//! The sealing half of a loaded component: what turns what happened in a
//! call (the guest's result, a trap, a refusal, the deadline) into the
//! typed outcome that leaves the sandbox, masked and cut to its limits.
//!
//! [`Sealer::seal`] is the choke point every result passes on its way out;
//! the failures are classified here too, with their details (the wasm trap,
//! the stderr tail) logged for the operator, redacted.

use std::sync::Arc;

use wasmtime::component::ResourceTableError;
use wasmtime::{Store, Trap};

use super::bindings::v0_2::toolhost::tool::types as wit;
use super::secrets::Secrets;
use super::state::{self, State};
use crate::limits::Limits;
use crate::outcome::{
    CallError, ContentBlock, EmbeddedResource, ErrorType, Media, ResourceContents, ResourceLink,
    ToolOutput, clip, truncate,
};

/// The largest artifact kept: artifacts are for the application, not the
/// model, so they may be larger than `max_output`, but not unbounded.
pub(crate) const MAX_ARTIFACT: usize = 1 << 20;

/// The most bytes of images, audio and embedded blobs one result keeps
/// (text counts against `max_output`). A block past it is replaced by a
/// line saying so: models take images of a few MiB at most.
pub const MAX_MEDIA: usize = 8 << 20;

/// The most content blocks one result keeps; the rest are dropped with a
/// note. Every block also counts against `max_output`.
pub const MAX_BLOCKS: usize = 256;

/// The longest name, URI or media type of a content block kept, in
/// characters: they are labels, not content.
const MAX_LABEL_CHARS: usize = 1024;

/// What StarlingMonkey prints before it aborts a call whose promise can no
/// longer settle.
const STUCK_JS: &str = "event loop error, but no exception is pending";

/// Whether a JavaScript component's `stderr` ends with StarlingMonkey's
/// complaint that its event loop ran dry (its last line that is not blank).
fn stuck_js(stderr: &str) -> bool {
    stderr
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .is_some_and(|line| line.contains(STUCK_JS))
}

/// The longest error chain logged for a failed call, in characters: the
/// wasm backtrace of a deep recursion can be long.
const MAX_LOGGED_ERROR_CHARS: usize = 8192;

/// Setting up a call's store failed: a host fault, not the tool's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct SetupFailed(pub(super) String);

/// Seals the outcomes of one component's calls: its label (for the log),
/// its secrets and its limits.
#[derive(Clone)]
pub(super) struct Sealer {
    pub(super) label: Arc<str>,
    pub(super) secrets: Arc<Secrets>,
    pub(super) limits: Limits,
}

/// What a result may still hold while its blocks are sealed.
struct Room {
    /// Bytes of text, against `max_output`.
    text: usize,
    /// Bytes of media, against [`MAX_MEDIA`].
    media: usize,
    /// Bytes of the current block's labels (names, URIs, media types),
    /// charged to `text` once the block is sealed.
    labels: usize,
}

impl Sealer {
    /// The host could not set up the call: logged, and told as a host
    /// fault.
    pub(super) fn setup_failed(&self, error: &dyn std::fmt::Display) -> CallError {
        tracing::error!(component = &*self.label, error = %self.secrets.redact(format_args!("{error:#}")), "cannot set up the call");
        CallError::new(
            ErrorType::Internal,
            "the host could not set up the tool's sandbox (its granted files or the host's descriptors); retry shortly",
        )
    }

    /// The call's deadline passed.
    pub(super) fn timed_out(&self) -> CallError {
        CallError::new(
            ErrorType::Timeout,
            format!(
                "timed out after {}",
                humantime::format_duration(self.limits.timeout)
            ),
        )
    }

    fn memory_exhausted(&self) -> CallError {
        CallError::new(
            ErrorType::MemoryExhausted,
            format!(
                "ran out of memory (limit {})",
                bytesize::ByteSize::b(self.limits.memory).display().iec()
            ),
        )
    }

    /// The host refused something during the call and the call then failed:
    /// the refusal is what the model is told.
    fn refused(&self, state: &State) -> Option<CallError> {
        if let Some(what) = state.refusals.exhaustion() {
            return Some(CallError::new(
                ErrorType::MemoryExhausted,
                format!("ran out of host memory: {what}"),
            ));
        }
        if let Some(denial) = state.refusals.denial() {
            return Some(CallError::new(ErrorType::CapabilityDenied, denial));
        }
        if state.limiter.refused {
            return Some(self.memory_exhausted());
        }
        None
    }

    /// Turn a trap or instantiation failure into the outcome the model sees;
    /// the details go to the log (the wasm trap and backtrace, never the
    /// host's Rust backtrace).
    pub(super) fn classify(&self, error: wasmtime::Error, store: &Store<State>) -> CallError {
        let state = store.data();
        let trap = error.downcast_ref::<Trap>().copied();
        let (stderr, cut) = state.stderr.contents();
        let table_full = error.chain().any(|cause| {
            matches!(
                cause.downcast_ref::<ResourceTableError>(),
                Some(ResourceTableError::Full)
            )
        });
        let call_error = if trap == Some(Trap::OutOfFuel) {
            CallError::new(
                ErrorType::FuelExhausted,
                format!("ran out of fuel (limit {} units)", self.limits.fuel),
            )
        } else if table_full {
            CallError::new(
                ErrorType::MemoryExhausted,
                format!(
                    "ran out of host memory: held more than {} host handles (streams, files, requests, header fields) at once",
                    state::MAX_HANDLES
                ),
            )
        } else if let Some(refused) = self.refused(state) {
            refused
        } else if let Some(trap) = trap {
            let what = match trap {
                Trap::StackOverflow => "stack overflow".to_owned(),
                // StarlingMonkey (JavaScript components) aborts when its
                // event loop runs dry with the call's promise unsettled,
                // its complaint the last line written (a line the program
                // wrote earlier does not count). Checked first: what the
                // engine printed before may say "panicked".
                Trap::UnreachableCodeReached if stuck_js(&stderr) => {
                    "the JavaScript call awaited a promise that never settles (nothing was left to settle it: a component has no timers or events of its own)".to_owned()
                }
                Trap::UnreachableCodeReached if stderr.contains("panicked") => {
                    "panicked".to_owned()
                }
                other => format!("wasm trap: {other}"),
            };
            CallError::new(ErrorType::Trap, what)
        } else if let Some(setup) = error.downcast_ref::<SetupFailed>() {
            self.setup_failed(setup)
        } else {
            CallError::new(
                ErrorType::Trap,
                format!("failed to run: {}", error.root_cause()),
            )
        };
        let stderr_tail = if cut {
            self.secrets.redact_tail(stderr).into_string()
        } else {
            self.secrets.redact(stderr).into_string()
        };
        // The wasm backtrace names guest functions, which the guest chose.
        let error = clip(
            &self.secrets.redact(format_args!("{error:#}")).to_string(),
            MAX_LOGGED_ERROR_CHARS,
        );
        tracing::warn!(
            component = &*self.label,
            outcome = %call_error.kind,
            error = %error,
            stderr_tail = %stderr_tail,
            "tool failed"
        );
        call_error
    }

    /// The tool returned an error: what it says, unless the host refused it
    /// something first (then the refusal is the real reason).
    pub(super) fn tool_error(&self, error: wit::ToolError, store: &Store<State>) -> CallError {
        if let Some(refused) = self.refused(store.data()) {
            return refused;
        }
        CallError {
            kind: ErrorType::ToolError,
            message: error.message,
            retryable: error.retryable,
            tool_kind: Some(error.kind),
        }
    }

    /// The choke point every result passes on its way out of the sandbox:
    /// secrets masked (structured output after decoding), then each part
    /// cut to its limit.
    pub(super) fn seal(
        &self,
        result: Result<wit::ToolOutput, CallError>,
    ) -> Result<ToolOutput, CallError> {
        match result {
            Ok(output) => Ok(self.seal_output(output)),
            Err(error) => Err(self.seal_error(error)),
        }
    }

    /// An error as it leaves the sandbox: its message masked and cut, its
    /// kind a short identifier.
    pub(super) fn seal_error(&self, error: CallError) -> CallError {
        CallError {
            message: truncate(
                self.secrets.redact(error.message).into_string(),
                self.limits.max_output,
            ),
            tool_kind: error
                .tool_kind
                .map(|kind| error_kind(&self.secrets.redact(kind).into_string())),
            ..error
        }
    }

    fn seal_output(&self, output: wit::ToolOutput) -> ToolOutput {
        let limit = self.limits.max_output;
        let mut notes = Vec::new();
        let structured = output
            .structured
            .and_then(|text| self.seal_structured(text, &mut notes));
        let blocks = output.content.len();
        let mut content = Vec::with_capacity(blocks.min(MAX_BLOCKS));
        let mut room = Room {
            text: limit,
            media: MAX_MEDIA,
            labels: 0,
        };
        for block in output.content.into_iter().take(MAX_BLOCKS) {
            if room.text == 0 {
                break;
            }
            content.push(self.seal_block(block, &mut room));
        }
        if content.len() < blocks {
            notes.push(format!(
                "[{} more content blocks dropped: at most {MAX_BLOCKS} blocks and max_output bytes of text]",
                blocks - content.len()
            ));
        }
        for note in notes {
            content.push(ContentBlock::Text(note));
        }
        // Adjacent text blocks are one text to the model: merged, the
        // one-text result of most tools stays one block.
        content.dedup_by(|next, first| match (first, next) {
            (ContentBlock::Text(first), ContentBlock::Text(next)) => {
                first.push('\n');
                first.push_str(next);
                true
            }
            _ => false,
        });
        // Masked again once merged: a secret split across blocks is whole
        // only now.
        for block in &mut content {
            if let ContentBlock::Text(text) = block {
                *text = self.secrets.redact(std::mem::take(text)).into_string();
            }
        }
        ToolOutput {
            content,
            structured,
            artifact: output.artifact.map(|artifact| {
                truncate(self.secrets.redact(artifact).into_string(), MAX_ARTIFACT)
            }),
        }
    }

    /// Structured output, decoded and masked; dropped with a note in
    /// `notes` when it is past `max_output`, and dropped when it is not
    /// JSON.
    fn seal_structured(&self, text: String, notes: &mut Vec<String>) -> Option<serde_json::Value> {
        let limit = self.limits.max_output;
        if text.len() > limit {
            notes.push(format!(
                "[structured output dropped: {} bytes, limit {limit}]",
                text.len()
            ));
            return None;
        }
        match serde_json::from_str(&text) {
            Ok(mut value) => {
                self.secrets.mask_json(&mut value);
                Some(value)
            }
            Err(e) => {
                tracing::warn!(component = &*self.label, error = %e, "tool returned structured output that is not JSON; dropped");
                None
            }
        }
    }

    /// One block, masked and counted against what the result may still
    /// hold: text against `max_output`, bytes against [`MAX_MEDIA`].
    fn seal_block(&self, block: wit::ContentBlock, room: &mut Room) -> ContentBlock {
        room.labels = 0;
        let sealed = match block {
            wit::ContentBlock::Text(t) => ContentBlock::Text(self.text(t, room)),
            wit::ContentBlock::Image(m) => match self.media("image", m.data, room) {
                Ok(data) => ContentBlock::Image(Media {
                    mime_type: self.label(m.mime_type, room),
                    data,
                }),
                Err(note) => note,
            },
            wit::ContentBlock::Audio(m) => match self.media("audio", m.data, room) {
                Ok(data) => ContentBlock::Audio(Media {
                    mime_type: self.label(m.mime_type, room),
                    data,
                }),
                Err(note) => note,
            },
            wit::ContentBlock::ResourceLink(link) => ContentBlock::ResourceLink(ResourceLink {
                uri: self.label(link.uri, room),
                name: self.label(link.name, room),
                mime_type: link.mime_type.map(|m| self.label(m, room)),
                description: link.description.map(|d| self.text(d, room)),
            }),
            wit::ContentBlock::Embedded(resource) => {
                let contents = match resource.contents {
                    wit::ResourceContents::Text(t) => ResourceContents::Text(self.text(t, room)),
                    wit::ResourceContents::Blob(data) => match self.media("resource", data, room) {
                        Ok(data) => ResourceContents::Blob(data),
                        Err(note) => return note,
                    },
                };
                ContentBlock::Resource(EmbeddedResource {
                    uri: self.label(resource.uri, room),
                    mime_type: resource.mime_type.map(|m| self.label(m, room)),
                    contents,
                })
            }
        };
        room.text = room.text.saturating_sub(room.labels);
        sealed
    }

    /// A block's text, masked, cut to the room left (at least a line's
    /// worth), and charged.
    fn text(&self, text: String, room: &mut Room) -> String {
        let text = truncate(self.secrets.redact(text).into_string(), room.text.max(64));
        room.text = room.text.saturating_sub(text.len() + 1);
        text
    }

    /// A name, URI or media type, masked and clipped; charged to the text
    /// once its block is sealed.
    fn label(&self, text: String, room: &mut Room) -> String {
        let text = clip(&self.secrets.redact(text).into_string(), MAX_LABEL_CHARS);
        room.labels += text.len();
        text
    }

    /// Media bytes, if they fit the room left and hold no secret; else the
    /// note that replaces them.
    fn media(
        &self,
        kind: &str,
        data: Vec<u8>,
        room: &mut Room,
    ) -> Result<bytes::Bytes, ContentBlock> {
        if data.len() > room.media {
            return Err(ContentBlock::Text(format!(
                "[{kind} dropped: {} bytes, over the {MAX_MEDIA}-byte limit on a result's media]",
                data.len()
            )));
        }
        // Bytes cannot be masked without breaking them: a blob holding a
        // secret is withheld whole.
        if self.secrets.occurs_in(&data) {
            tracing::warn!(
                component = &*self.label,
                "a tool returned {kind} data containing a secret; withheld"
            );
            return Err(ContentBlock::Text(format!(
                "[{kind} withheld: it contained a secret]"
            )));
        }
        room.media -= data.len();
        Ok(bytes::Bytes::from(data))
    }
}

/// A tool's error kind as the model sees it: a short identifier. Anything
/// else (long text, a secret, control characters) becomes `error`.
fn error_kind(kind: &str) -> String {
    let plain = !kind.is_empty()
        && kind.len() <= 64
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        kind.to_owned()
    } else {
        "error".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::{STUCK_JS, error_kind, stuck_js};

    #[test]
    fn a_javascript_call_is_stuck_only_when_the_engine_says_so_last() {
        assert!(stuck_js(&format!("Error: {STUCK_JS}\n\n")));
        assert!(stuck_js(&format!("a line\n{STUCK_JS}")));
        // A line written earlier (by a program) is not the engine's.
        assert!(!stuck_js(&format!("{STUCK_JS}\nError: boom\n")));
        assert!(!stuck_js(""));
    }

    #[test]
    fn error_kinds_are_short_identifiers_or_error() {
        assert_eq!(error_kind("not_found"), "not_found");
        assert_eq!(error_kind("rate-limited"), "rate-limited");
        assert_eq!(error_kind(""), "error");
        assert_eq!(error_kind("sk-live-123 leaked here"), "error");
        assert_eq!(error_kind(&"x".repeat(65)), "error");
        assert_eq!(error_kind("\u{1b}[2J"), "error");
    }
}
