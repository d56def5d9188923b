//! How a tool call ended: one typed [`Outcome`] per call, which
//! [`crate::wire::results`] maps to each wire format.
//!
//! Every call ends in exactly one [`Outcome`]: success, or an [`ErrorType`]
//! from the taxonomy below.
//!
//! | `error.type` | retryable | when |
//! |---|---|---|
//! | `tool_error` | as the tool says | the tool returned `err` |
//! | `invalid_arguments` | yes | arguments not JSON, or not valid against the input schema |
//! | `unknown_tool` | yes | no loaded tool has that name |
//! | `capability_denied` | no | the host refused a request the tool made, and the call failed |
//! | `timeout` | yes | the wall-clock limit was hit, also while waiting on I/O |
//! | `fuel_exhausted` | no | the fuel limit was hit |
//! | `memory_exhausted` | no | the memory limit refused growth, and the call failed |
//! | `trap` | no | panic, `unreachable`, stack overflow, other wasm trap |
//! | `denied_by_user` | no | a person or policy refused the call |
//! | `internal` | yes | a host fault; never a crash of the batch |

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use serde::Serialize;

/// The typed reason a call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorType {
    /// The tool returned an error of its own.
    ToolError,
    /// The arguments are not JSON or do not fit the input schema.
    InvalidArguments,
    /// No loaded tool has the name.
    UnknownTool,
    /// The host refused something the tool asked for, and the call failed.
    CapabilityDenied,
    /// The wall-clock limit was reached.
    Timeout,
    /// The fuel limit was reached.
    FuelExhausted,
    /// The memory limit refused growth and the call failed.
    MemoryExhausted,
    /// The tool trapped: panic, `unreachable`, stack overflow and the like.
    Trap,
    /// A person or policy refused the call.
    DeniedByUser,
    /// A fault in the host.
    Internal,
}

impl ErrorType {
    /// The `error.type` string on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolError => "tool_error",
            Self::InvalidArguments => "invalid_arguments",
            Self::UnknownTool => "unknown_tool",
            Self::CapabilityDenied => "capability_denied",
            Self::Timeout => "timeout",
            Self::FuelExhausted => "fuel_exhausted",
            Self::MemoryExhausted => "memory_exhausted",
            Self::Trap => "trap",
            Self::DeniedByUser => "denied_by_user",
            Self::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call, as the model will be told.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallError {
    /// The typed reason.
    #[serde(rename = "type")]
    pub kind: ErrorType,
    /// Short and actionable, e.g. `timed out after 2s`. Never contains
    /// secrets or host paths beyond what the tool was granted.
    pub message: String,
    /// Whether calling again can help.
    pub retryable: bool,
    /// For `tool_error`: the tool's own class, e.g. `not_found`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_kind: Option<String>,
}

impl CallError {
    /// An error of `kind` with its default retry hint.
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        let retryable = matches!(
            kind,
            ErrorType::InvalidArguments
                | ErrorType::UnknownTool
                | ErrorType::Timeout
                | ErrorType::Internal
        );
        Self {
            kind,
            message: message.into(),
            retryable,
            tool_kind: None,
        }
    }
}

/// The `tool_kind` of a `tool_error` whose structured output does not fit
/// the tool's output schema: the host checked it, and the tool must be
/// fixed (not retryable).
pub const INVALID_OUTPUT: &str = "invalid_output";

/// One part of a result: what the tool returned, in order.
///
/// Binary data is [`Bytes`], so cloning an outcome (into a transcript, to
/// several front ends) never copies an image.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContentBlock {
    /// Text for the model.
    Text(String),
    /// An image.
    Image(Media),
    /// A sound.
    Audio(Media),
    /// A link to a resource the client can fetch; its contents are not sent.
    ResourceLink(ResourceLink),
    /// A resource sent whole.
    Resource(EmbeddedResource),
}

/// Binary content and its media type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    /// e.g. `image/png`.
    pub mime_type: String,
    /// The bytes.
    pub data: Bytes,
}

/// A link to a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLink {
    /// Where it is.
    pub uri: String,
    /// What it is called.
    pub name: String,
    /// Its media type, when known.
    pub mime_type: Option<String>,
    /// What it is, for the model.
    pub description: Option<String>,
}

/// A resource sent with the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedResource {
    /// Its URI.
    pub uri: String,
    /// Its media type, when known.
    pub mime_type: Option<String>,
    /// Text or bytes.
    pub contents: ResourceContents,
}

/// What an embedded resource holds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceContents {
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Bytes),
}

impl ContentBlock {
    /// This block as text, for formats that carry only text: text as it
    /// is, anything else as a one-line description of what was returned.
    pub fn as_text(&self) -> std::borrow::Cow<'_, str> {
        use std::borrow::Cow;
        let size = |data: &Bytes| {
            bytesize::ByteSize::b(data.len() as u64)
                .display()
                .iec()
                .to_string()
        };
        match self {
            Self::Text(text) => Cow::Borrowed(text),
            Self::Image(media) => Cow::Owned(format!(
                "[image: {}, {}]",
                media.mime_type,
                size(&media.data)
            )),
            Self::Audio(media) => Cow::Owned(format!(
                "[audio: {}, {}]",
                media.mime_type,
                size(&media.data)
            )),
            Self::ResourceLink(link) => Cow::Owned(match &link.description {
                Some(description) => {
                    format!("[resource {}: {} ({description})]", link.name, link.uri)
                }
                None => format!("[resource {}: {}]", link.name, link.uri),
            }),
            Self::Resource(resource) => match &resource.contents {
                ResourceContents::Text(text) => {
                    Cow::Owned(format!("[resource {}]\n{text}", resource.uri))
                }
                ResourceContents::Blob(data) => Cow::Owned(format!(
                    "[resource {}: {}, {}]",
                    resource.uri,
                    resource
                        .mime_type
                        .as_deref()
                        .unwrap_or("application/octet-stream"),
                    size(data)
                )),
            },
        }
    }

    /// Whether this is a text block.
    pub fn is_text(&self) -> bool {
        matches!(self, Self::Text(_))
    }
}

/// A successful result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOutput {
    /// What the model reads and sees, in order; text already cut to the
    /// output limit. Contract 0.1 tools give one text block.
    pub content: Vec<ContentBlock>,
    /// Structured JSON, if the tool gave one and it fit the limit.
    pub structured: Option<serde_json::Value>,
    /// For the application only.
    pub artifact: Option<String>,
}

impl ToolOutput {
    /// A result of one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![ContentBlock::Text(text.into())],
            ..Self::default()
        }
    }

    /// The whole result as text: the text blocks as they are, each other
    /// block described on a line of its own (see [`ContentBlock::as_text`]).
    pub fn to_text(&self) -> String {
        match self.content.as_slice() {
            [] => String::new(),
            [one] => one.as_text().into_owned(),
            blocks => blocks
                .iter()
                .map(|block| block.as_text())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// Whether every block is text.
    pub fn is_text_only(&self) -> bool {
        self.content.iter().all(ContentBlock::is_text)
    }
}

/// Measurements of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Wall-clock time from dispatch to outcome, queueing included, waiting
    /// for approval not.
    pub duration: Duration,
    /// Time spent waiting for a person's approval.
    pub approval_wait: Duration,
    /// Time spent waiting for a free instance (the tool's or the host's
    /// concurrency limit), part of `duration`.
    pub queue_wait: Duration,
    /// Fuel the tool used (0 when it never ran).
    pub fuel_used: u64,
    /// Answered from the result cache: the tool did not run.
    pub cached: bool,
    /// Questions the tool asked a person, answered or not (a result with
    /// any is never cached).
    pub questions: u32,
    /// Ran in an instance made ahead of the call (see
    /// [`crate::limits::ReadyInstances`]), not one made when it arrived.
    pub made_ahead: bool,
}

/// How one tool call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The `tool_call_id` this answers.
    pub call_id: String,
    /// The tool's name as the model wrote it.
    pub tool: String,
    /// Success or the typed failure.
    pub result: Result<ToolOutput, CallError>,
    /// Time and fuel.
    pub stats: CallStats,
}

impl Outcome {
    /// A failed outcome.
    pub fn error(call_id: impl Into<String>, tool: impl Into<String>, error: CallError) -> Self {
        Self {
            call_id: call_id.into(),
            tool: tool.into(),
            result: Err(error),
            stats: CallStats::default(),
        }
    }

    /// Whether the call failed.
    pub fn is_error(&self) -> bool {
        self.result.is_err()
    }

    /// The text the model reads: the tool's content, or `Error: tool 'x' …`.
    pub fn content(&self) -> String {
        match &self.result {
            Ok(output) => output.to_text(),
            Err(error) => format!("Error: tool '{}' {}", self.tool, error_phrase(error)),
        }
    }
}

/// How an error reads after "tool 'x' ".
fn error_phrase(error: &CallError) -> String {
    let m = &error.message;
    match error.kind {
        ErrorType::ToolError => match &error.tool_kind {
            Some(kind) => format!("failed ({kind}): {m}"),
            None => format!("failed: {m}"),
        },
        ErrorType::InvalidArguments => {
            format!("got invalid arguments: {m}. Fix them and call again")
        }
        ErrorType::UnknownTool => format!("does not exist: {m}"),
        ErrorType::CapabilityDenied => format!("was refused: {m}"),
        ErrorType::Timeout | ErrorType::FuelExhausted | ErrorType::MemoryExhausted => m.clone(),
        ErrorType::Trap => format!("crashed: {m}"),
        ErrorType::DeniedByUser => format!("was not run: {m}"),
        ErrorType::Internal => format!("could not run because of a host error: {m}"),
    }
}

/// At most `max` characters of `text`, with `…` when cut: for text from a
/// tool or a model that the host echoes or logs.
pub(crate) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// Cut `text` to at most `limit` bytes on a character boundary, with a marker
/// saying how much was cut. Returns the text unchanged when it fits.
pub(crate) fn truncate(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let total = text.len();
    let marker = format!("\n[output truncated: {total} bytes, limit {limit}]");
    let mut cut = limit.saturating_sub(marker.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = text;
    out.truncate(cut);
    out + &marker
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_hints_follow_the_taxonomy() {
        assert!(CallError::new(ErrorType::InvalidArguments, "").retryable);
        assert!(CallError::new(ErrorType::Timeout, "").retryable);
        assert!(!CallError::new(ErrorType::FuelExhausted, "").retryable);
        assert!(!CallError::new(ErrorType::CapabilityDenied, "").retryable);
        assert!(!CallError::new(ErrorType::Trap, "").retryable);
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip("hi", 2), "hi");
    }

    #[test]
    fn truncation_is_visible_and_respects_char_boundaries() {
        assert_eq!(truncate("short".into(), 300), "short");
        let long = "é".repeat(1000);
        let cut = truncate(long, 300);
        assert!(cut.len() <= 300, "{}", cut.len());
        assert!(
            cut.ends_with("[output truncated: 2000 bytes, limit 300]"),
            "{cut}"
        );
    }
}
