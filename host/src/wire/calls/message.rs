//! Assistant messages, OpenAI's and Anthropic's, read into the places in
//! the batch where a call is expected; and the one list of content blocks
//! that are no call for this host.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::json::{describe, parse_object, present, reason};
use super::{BatchError, Element, at_most};

/// Whether an object has a `role` key: messages do, calls never do.
pub(super) fn has_key_role(raw: &str) -> bool {
    #[derive(Deserialize)]
    struct Role {
        #[serde(default, deserialize_with = "present")]
        role: bool,
    }
    // A `role` key that cannot be read (given twice) still marks a message.
    parse_object::<Role>(raw).map_or(true, |r| r.role)
}

/// An assistant message, OpenAI's or Anthropic's. Its other fields (text,
/// refusal, usage, model, ...) differ between APIs and versions and are
/// never calls, so they are skipped rather than refused.
#[derive(Deserialize)]
struct AssistantMessage<'a> {
    #[serde(rename = "role")]
    _role: AssistantRole,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
enum AssistantRole {
    #[serde(rename = "assistant")]
    Assistant,
}

/// An Anthropic content block: only its type is read here.
#[derive(Deserialize)]
pub(super) struct Block {
    #[serde(rename = "type")]
    pub(super) kind: String,
}

/// The calls of an assistant message: its `tool_calls` (when there are
/// any), or else the `tool_use` blocks of its `content`. A message that
/// cannot be read is one malformed call, so that the batch is still
/// answered; one with more than `max` calls or blocks is refused whole.
pub(super) fn message_elements(raw: &str, max: usize) -> Result<Vec<Element<'_>>, BatchError> {
    let refused = |why: String| {
        Ok(vec![Element::Refused(format!(
            r#"the assistant message cannot be read ({why}); send {{"role":"assistant","tool_calls":[...]}} or {{"role":"assistant","content":[...]}}"#
        ))])
    };
    let message: AssistantMessage<'_> = match parse_object(raw) {
        Ok(message) => message,
        Err(e) => return refused(reason(e)),
    };
    if let Some(calls) = message.tool_calls
        && !calls.is_empty()
    {
        at_most(calls.len(), max)?;
        return Ok(calls
            .into_iter()
            .enumerate()
            .map(|(i, raw)| Element::call(format!("tool call #{}", i + 1), raw))
            .collect());
    }
    let Some(content) = message.content else {
        return Ok(Vec::new());
    };
    let blocks = match content.get().as_bytes().first() {
        // Text only: the model called no tool.
        Some(b'"') | Some(b'n') => return Ok(Vec::new()),
        Some(b'[') => match serde_json::from_str::<Vec<&RawValue>>(content.get()) {
            Ok(blocks) => blocks,
            Err(e) => return refused(reason(e)),
        },
        _ => {
            return refused(format!(
                "its content is {}, not text or an array of blocks",
                describe(content.get())
            ));
        }
    };
    let elements: Vec<Element<'_>> = blocks
        .into_iter()
        .enumerate()
        .filter_map(|(i, raw)| {
            let label = format!("content block #{}", i + 1);
            match parse_object::<Block>(raw.get()) {
                Ok(block) if not_for_the_host(&block.kind) => None,
                Ok(block) if block.kind == "tool_use" => Some(Element::call(label, raw)),
                Ok(block) => Some(Element::Refused(format!(
                    "{label} is not a tool call: its type is {:?}; only tool_use blocks are calls (text, thinking and server tool blocks are skipped)",
                    crate::outcome::clip(&block.kind, 64)
                ))),
                Err(e) => Some(Element::Refused(format!(
                    r#"{label} cannot be read ({}); send calls as {{"type":"tool_use","id","name","input"}} blocks"#,
                    reason(e)
                ))),
            }
        })
        .collect();
    // Only the blocks that are answered count: text and thinking are free.
    at_most(elements.len(), max)?;
    Ok(elements)
}

/// Content blocks that are no call for this host, skipped wherever they
/// appear (a message's `content`, or a batch array): the model's text and
/// thinking, and the tools Anthropic's servers run themselves
/// (`server_tool_use`, `mcp_tool_use`, and their `*_tool_result` blocks),
/// which are answered already. Answering them here would invent
/// `tool_result`s for ids the API never asked about. The one list: every
/// reader asks here.
pub(super) fn not_for_the_host(kind: &str) -> bool {
    matches!(
        kind,
        "text"
            | "thinking"
            | "redacted_thinking"
            | "server_tool_use"
            | "mcp_tool_use"
            | "container_upload"
    ) || kind.ends_with("tool_result")
}
