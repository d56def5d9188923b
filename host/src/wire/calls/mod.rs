//! Tool calls as models and frameworks write them, read into [`ToolCall`]s.
//!
//! A batch is a JSON array of calls, one call object, or one assistant
//! message. Accepted call shapes, mixed freely in one batch:
//! - OpenAI: `{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"x\":1}"}}`;
//!   `arguments` is JSON text or an object, absent or `null` for none;
//!   `type` may be left out, and `index` (sent in streamed calls) is allowed.
//! - LangChain: `{"id":"call_1","name":"calc","args":{"x":1}}`, with an
//!   optional `"type":"tool_call"`; `args` absent or `null` for none.
//! - Anthropic: `{"type":"tool_use","id":"toolu_1","name":"calc","input":{"x":1}}`,
//!   with an optional `cache_control`.
//! - MCP: `{"name":"calc","arguments":{"x":1}}`, the `params` of `tools/call`
//!   (with an optional `_meta`).
//!
//! Accepted messages:
//! - OpenAI (or LangChain) `{"role":"assistant","tool_calls":[...]}`: its
//!   calls; `content` is the model's text and is not read.
//! - Anthropic `{"role":"assistant","content":[...]}`: its `tool_use` blocks;
//!   `text`, `thinking` and `redacted_thinking` blocks, and the blocks of
//!   tools Anthropic runs itself, are skipped.
//!
//! The same blocks are skipped in a batch array, so that an Anthropic
//! `response.content` array given as it is gets answers for its `tool_use`
//! blocks only. Any other element is a call, or is refused as one.
//!
//! Each call shape is a typed serde struct that refuses unknown fields. The
//! shape is read from `type` when the call has one, otherwise from the key
//! only that shape has (`function`, `args` or `arguments`). A wrong pick can
//! therefore only end in a refusal, never in a call read as another shape
//! (an Anthropic block once passed as a LangChain call with no arguments).
//!
//! Every element is parsed on its own, so one bad element never costs the
//! others their answers: an element that fits no shape still becomes a
//! [`ToolCall`], carrying [`Arguments::Malformed`], which the dispatcher
//! answers with `invalid_arguments` without running anything. A call without
//! an id gets `call_N` from its position, made unique within the batch, so
//! that every call can still be answered.
//!
//! No input makes the parser recurse without bound: whole elements and
//! skipped values are scanned by serde_json's iterative `ignore_value`, and
//! what is parsed into a [`serde_json::Value`] is bounded by serde_json's recursion limit
//! (128), past which the element is refused.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::tool_call::{Arguments, IdSet, ToolCall};

mod json;
mod message;
mod shapes;

use json::{describe, parse_object};
use message::{Block, has_key_role, message_elements, not_for_the_host};
use shapes::read_call;

/// Parse a batch of tool calls: a JSON array of calls, one call object, or
/// one assistant message (the shapes are under "Shapes" below).
///
/// Returns one call per element of an array (per entry of `tool_calls`),
/// in order; content blocks that are no call for this host (`text`,
/// `thinking`, `redacted_thinking`, and the tools Anthropic runs itself
/// and their results: `server_tool_use`, `mcp_tool_use`, `container_upload`,
/// `*_tool_result`)
/// are skipped, in an array as in a message's `content`, and get no answer. An element that fits no accepted shape
/// becomes a call with [`Arguments::Malformed`], keeping its own id and
/// name when they can be read from it; its message names the element by
/// its place in the input (`tool call #3`, `content block #3`). Calls
/// without an id get `call_N`, N the call's position among the calls
/// answered (from 1, skipped blocks not counted: the position of its
/// answer), or `call_N_K` when that is taken: a generated id never equals
/// an id given in the batch, nor another generated one. Given ids are kept
/// as they are, duplicates included; the dispatcher deals with those.
///
/// Nesting is never a reason to fail the batch: the batch and each element
/// are first scanned without recursion, at any depth. An element nested
/// deeper than serde_json's recursion limit (128) where a value must be
/// built (its arguments) is one malformed call; deep JSON-text arguments are
/// refused when parsed. No input panics or overflows the stack.
///
/// # Errors
///
/// Only when the input as a whole is not JSON, or is JSON but neither an
/// array nor an object.
///
/// # Shapes
///
/// Tool calls as models and frameworks write them, read into [`ToolCall`]s.
///
/// A batch is a JSON array of calls, one call object, or one assistant
/// message. Accepted call shapes, mixed freely in one batch:
/// - OpenAI: `{"id":"call_1","type":"function","function":{"name":"calc","arguments":"{\"x\":1}"}}`;
///   `arguments` is JSON text or an object, absent or `null` for none;
///   `type` may be left out, and `index` (sent in streamed calls) is allowed.
/// - LangChain: `{"id":"call_1","name":"calc","args":{"x":1}}`, with an
///   optional `"type":"tool_call"`; `args` absent or `null` for none.
/// - Anthropic: `{"type":"tool_use","id":"toolu_1","name":"calc","input":{"x":1}}`,
///   with an optional `cache_control`.
/// - MCP: `{"name":"calc","arguments":{"x":1}}`, the `params` of `tools/call`
///   (with an optional `_meta`).
///
/// Accepted messages:
/// - OpenAI (or LangChain) `{"role":"assistant","tool_calls":[...]}`: its
///   calls; `content` is the model's text and is not read.
/// - Anthropic `{"role":"assistant","content":[...]}`: its `tool_use` blocks;
///   `text`, `thinking` and `redacted_thinking` blocks, and the blocks of
///   tools Anthropic runs itself, are skipped.
///
/// The same blocks are skipped in a batch array, so that an Anthropic
/// `response.content` array given as it is gets answers for its `tool_use`
/// blocks only. Any other element is a call, or is refused as one.
///
/// Each call shape is a typed serde struct that refuses unknown fields. The
/// shape is read from `type` when the call has one, otherwise from the key
/// only that shape has (`function`, `args` or `arguments`). A wrong pick can
/// therefore only end in a refusal, never in a call read as another shape
/// (an Anthropic block once passed as a LangChain call with no arguments).
///
/// Every element is parsed on its own, so one bad element never costs the
/// others their answers: an element that fits no shape still becomes a
/// [`ToolCall`], carrying [`Arguments::Malformed`], which the dispatcher
/// answers with `invalid_arguments` without running anything. A call without
/// an id gets `call_N` from its position, made unique within the batch, so
/// that every call can still be answered.
///
/// No input makes the parser recurse without bound: whole elements and
/// skipped values are scanned by serde_json's iterative `ignore_value`, and
/// what is parsed into a [`serde_json::Value`] is bounded by serde_json's recursion limit
/// (128), past which the element is refused.
pub fn parse_batch(json: &str) -> Result<Vec<ToolCall>, BatchError> {
    parse_batch_at_most(json, usize::MAX)
}

/// Why a batch could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Not JSON, or neither an array nor an object; the message says which.
    #[error("{0}")]
    Unreadable(String),
    /// More calls (array elements, `tool_calls` entries or content blocks)
    /// than the caller takes at once.
    #[error("the batch has {count} tool calls; at most {max} are taken at once")]
    TooMany {
        /// How many the batch has.
        count: usize,
        /// The most taken.
        max: usize,
    },
}

/// [`parse_batch`], refusing a batch of more than `max` calls before any
/// of them is read: a server's limit, checked at the cost of one scan.
///
/// # Errors
///
/// [`BatchError::TooMany`] over `max`, [`BatchError::Unreadable`] when
/// [`parse_batch`] would fail.
pub fn parse_batch_at_most(json: &str, max: usize) -> Result<Vec<ToolCall>, BatchError> {
    // Scanning into a `RawValue` checks the syntax without recursion and
    // without building anything, so a deep element costs no stack here.
    let batch: &RawValue = serde_json::from_str(json)
        .map_err(|e| BatchError::Unreadable(format!("the batch is not JSON: {e}")))?;
    let elements = match batch.get().as_bytes().first() {
        Some(b'[') => {
            let raws = serde_json::from_str::<Vec<&RawValue>>(batch.get())
                .map_err(|e| BatchError::Unreadable(format!("the batch is not JSON: {e}")))?;
            let elements: Vec<Element<'_>> = raws
                .into_iter()
                .enumerate()
                .filter_map(|(i, raw)| array_element(i + 1, raw))
                .collect();
            // Only the elements that are answered count, as in a message.
            at_most(elements.len(), max)?;
            elements
        }
        Some(b'{') if has_key_role(batch.get()) => message_elements(batch.get(), max)?,
        // One block that is no call is answered as it would be in an array:
        // with nothing.
        Some(b'{') => array_element(1, batch).into_iter().collect(),
        _ => {
            return Err(BatchError::Unreadable(format!(
                "the batch must be a JSON array of tool calls, one tool call object, or an assistant message, not {}",
                describe(batch.get())
            )));
        }
    };
    let read: Vec<ReadCall> = elements.into_iter().map(Element::read).collect();
    Ok(assign_ids(read))
}

fn at_most(count: usize, max: usize) -> Result<(), BatchError> {
    if count > max {
        return Err(BatchError::TooMany { count, max });
    }
    Ok(())
}

/// The call shapes the host reads, for messages that say what to send.
const CALL_SHAPES: &str = r#"send it as OpenAI {"id","type":"function","function":{"name","arguments"}}, LangChain {"id","name","args"}, Anthropic {"type":"tool_use","id","name","input"} or MCP {"name","arguments"}"#;

/// The element at `position` (from 1) of a batch array: a call to read, or
/// `None` for a content block that is no call for this host (see
/// [`not_for_the_host`]), which gets no answer. An Anthropic
/// `response.content` array given as it is holds the model's text and
/// thinking beside its `tool_use` blocks; answering those would invent
/// `tool_result`s for ids the API never asked about. Everything else is a
/// call, or is refused as one.
pub(super) fn array_element(position: usize, raw: &RawValue) -> Option<Element<'_>> {
    match parse_object::<Block>(raw.get()) {
        Ok(block) if not_for_the_host(&block.kind) => None,
        _ => Some(Element::call(format!("tool call #{position}"), raw)),
    }
}

/// One place in the batch where a call is expected.
pub(super) enum Element<'a> {
    /// A call object as written; `label` names it in messages
    /// (`tool call #3`, `content block #2`).
    Call { label: String, raw: &'a RawValue },
    /// No call can be read here; the message says which element, why, and
    /// what to send instead.
    Refused(String),
}

impl<'a> Element<'a> {
    pub(super) fn call(label: String, raw: &'a RawValue) -> Self {
        Self::Call { label, raw }
    }

    /// Read the element as a call, or as a malformed call that says why.
    pub(super) fn read(self) -> ReadCall {
        match self {
            Self::Call { label, raw } => read_call(raw.get()).unwrap_or_else(|why| {
                ReadCall::malformed(
                    Some(raw.get()),
                    format!("{label} is not a tool call this host reads ({why}); {CALL_SHAPES}"),
                )
            }),
            Self::Refused(message) => ReadCall::malformed(None, message),
        }
    }
}

/// A call as read, before ids are assigned.
pub(super) struct ReadCall {
    id: Option<String>,
    name: String,
    arguments: Arguments,
}

impl ReadCall {
    /// The call, with its own id or, without one, a fresh id for its
    /// `position` (from 1) that no id in `given` equals.
    pub(super) fn with_id(self, position: usize, given: &IdSet) -> ToolCall {
        ToolCall {
            id: self.id.unwrap_or_else(|| fresh_id(position, given)),
            name: self.name,
            arguments: self.arguments,
        }
    }

    /// A call that cannot run, keeping whatever id and name `raw` has so
    /// that the answer can still be matched with what the model sent.
    fn malformed(raw: Option<&str>, message: String) -> Self {
        let salvaged = raw
            .and_then(|raw| parse_object::<Salvage<'_>>(raw).ok())
            .unwrap_or_default();
        Self {
            id: salvaged.id.and_then(string),
            name: salvaged
                .name
                .and_then(string)
                .or_else(|| {
                    let function = parse_object::<Salvage<'_>>(salvaged.function?.get()).ok()?;
                    function.name.and_then(string)
                })
                .unwrap_or_default(),
            arguments: Arguments::Malformed(message),
        }
    }
}

/// The `id` and name of an element that fits no shape, when they are
/// strings; everything else is skipped unread.
#[derive(Default, Deserialize)]
struct Salvage<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    function: Option<&'a RawValue>,
}

/// The id that [`Element::read`] finds in `raw`, read without reading the
/// rest of the call: every shape's id is its `id` key, when that is a
/// string, and a call that fits no shape keeps the same key.
pub(super) fn given_id(raw: &RawValue) -> Option<String> {
    parse_object::<Salvage<'_>>(raw.get())
        .ok()?
        .id
        .and_then(string)
}

fn string(raw: &RawValue) -> Option<String> {
    serde_json::from_str(raw.get()).ok()
}

/// Give every call without an id one that no other call in the batch has.
fn assign_ids(read: Vec<ReadCall>) -> Vec<ToolCall> {
    let mut given = IdSet::new();
    for id in read.iter().filter_map(|c| c.id.as_deref()) {
        given.insert(id);
    }
    read.into_iter()
        .enumerate()
        .map(|(i, call)| call.with_id(i + 1, &given))
        .collect()
}

/// `call_N`, or `call_N_2`, `call_N_3`… when an id the batch gives
/// (`given`) is that. Two generated ids never meet: the digits after `call_`,
/// up to the next `_` or the end, are the position, each call's own.
fn fresh_id(position: usize, given: &IdSet) -> String {
    let mut id = format!("call_{position}");
    let mut suffix = 1;
    while given.contains(&id) {
        suffix += 1;
        id = format!("call_{position}_{suffix}");
    }
    id
}

#[cfg(test)]
pub(super) mod tests {
    use std::collections::HashSet;

    use super::*;
    use serde_json::Value;
    use serde_json::json;

    /// The message of a malformed call, or a panic naming what it got.
    fn malformed(call: &ToolCall) -> &str {
        match &call.arguments {
            Arguments::Malformed(message) => message,
            other => panic!("expected a malformed call, got {other:?}"),
        }
    }

    /// `depth` nested objects around `1`: `{"a":{"a":...1...}}`.
    fn nested_object(depth: usize) -> String {
        format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
    }

    #[test]
    fn both_shapes_parse_in_one_batch() {
        let calls = parse_batch(
            r#"[{"id":"a","type":"function","function":{"name":"calc","arguments":"{\"expression\":\"1+1\"}"}},
                {"id":"b","name":"calc","args":{"expression":"2"}},
                {"name":"calc"}]"#,
        )
        .unwrap();
        assert_eq!(
            calls[0].arguments.parse().unwrap(),
            json!({"expression":"1+1"})
        );
        assert_eq!(
            calls[1].arguments,
            Arguments::Json(json!({"expression":"2"}))
        );
        assert_eq!(calls[2].id, "call_3");
        assert_eq!(calls[2].arguments.parse().unwrap(), json!({}));
    }

    #[test]
    fn every_accepted_call_shape_parses() {
        let calls = parse_batch(
            r#"[{"id":"o1","type":"function","function":{"name":"calc","arguments":"{\"x\":1}"},"index":0},
                {"id":"o2","function":{"name":"calc","arguments":{"x":2}}},
                {"id":"o3","type":"function","function":{"name":"calc","arguments":null}},
                {"id":"o4","type":"function","function":{"name":"calc"}},
                {"id":"l1","name":"calc","args":{"x":3},"type":"tool_call"},
                {"id":"l2","name":"calc","args":null},
                {"type":"tool_use","id":"a1","name":"calc","input":{"x":4},"cache_control":{"type":"ephemeral"}},
                {"name":"calc","arguments":{"x":5},"_meta":{"progressToken":1}},
                {"name":"calc","arguments":null}]"#,
        )
        .unwrap();
        let args: Vec<_> = calls.iter().map(|c| c.arguments.parse().unwrap()).collect();
        assert_eq!(
            args,
            [
                json!({"x":1}),
                json!({"x":2}),
                json!({}),
                json!({}),
                json!({"x":3}),
                json!({}),
                json!({"x":4}),
                json!({"x":5}),
                json!({}),
            ]
        );
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            ["o1", "o2", "o3", "o4", "l1", "l2", "a1", "call_8", "call_9"]
        );
        assert!(calls.iter().all(|c| c.name == "calc"));
    }

    #[test]
    fn an_anthropic_block_is_never_read_as_a_langchain_call() {
        let calls = parse_batch(
            r#"[{"type":"tool_use","id":"t1","name":"calc","input":{"x":1}},
                {"id":"t2","name":"calc","input":{"x":1}}]"#,
        )
        .unwrap();
        assert_eq!(calls[0].arguments, Arguments::Json(json!({"x":1})));
        // Without its type it is no shape at all: refused, not guessed.
        assert!(malformed(&calls[1]).contains("unknown field `input`"));
        assert_eq!(calls[1].id, "t2");
    }

    #[test]
    fn calls_that_fit_no_shape_exactly_are_refused() {
        let refused = [
            // Unknown keys, at the top and inside `function`.
            r#"{"id":"a","name":"calc","args":{},"extra":1}"#,
            r#"{"id":"a","type":"function","function":{"name":"calc","arguments":"{}","strict":true}}"#,
            // Keys of two shapes.
            r#"{"id":"a","name":"calc","args":{},"arguments":{}}"#,
            r#"{"id":"a","function":{"name":"calc"},"args":{}}"#,
            // MCP calls have no id.
            r#"{"id":"a","name":"calc","arguments":{}}"#,
            // Types this host does not know.
            r#"{"type":"function_call","call_id":"a","name":"calc","arguments":"{}"}"#,
            r#"{"type":7,"name":"calc"}"#,
            // Arguments that are not an object (or, for OpenAI, text).
            r#"{"id":"a","name":"calc","args":[1]}"#,
            r#"{"id":"a","type":"function","function":{"name":"calc","arguments":5}}"#,
            r#"{"type":"tool_use","id":"a","name":"calc","input":"{}"}"#,
            // Anthropic always sends id and input.
            r#"{"type":"tool_use","name":"calc","input":{}}"#,
            // A struct written as an array, field by field.
            r#"["a","calc",{}]"#,
            r#"{"id":"a","type":"function","function":["calc","{}"]}"#,
            // Not an object, or no name.
            r#"1"#,
            r#"{"id":"a"}"#,
            r#"{"id":"a","name":"calc","name":"calc"}"#,
        ];
        for element in refused {
            let calls = parse_batch(&format!("[{element}]")).unwrap();
            assert_eq!(calls.len(), 1, "{element}");
            let message = malformed(&calls[0]);
            assert!(message.contains("tool call #1"), "{element}: {message}");
            assert!(message.contains("LangChain"), "{element}: {message}");
        }
    }

    #[test]
    fn one_bad_element_leaves_the_others_alone() {
        let calls = parse_batch(
            r#"[{"id":"a","name":"calc","args":{}},
                1,
                {"id":"keep","name":5},
                {"id":"b","type":"function","function":{"name":"calc","arguments":"{}"}}]"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 4);
        assert_eq!(calls[0].arguments, Arguments::Json(json!({})));
        assert!(malformed(&calls[1]).starts_with("tool call #2 "));
        assert!(malformed(&calls[1]).contains("expected a JSON object"));
        assert_eq!(calls[1].id, "call_2");
        assert!(malformed(&calls[2]).starts_with("tool call #3 "));
        assert_eq!(calls[2].id, "keep");
        assert_eq!(calls[3].id, "b");
        assert!(
            calls[1]
                .arguments
                .parse()
                .unwrap_err()
                .to_string()
                .contains("#2")
        );
    }

    #[test]
    fn a_malformed_call_keeps_its_readable_name() {
        let calls = parse_batch(
            r#"[{"id":"a","type":"function","function":{"name":"calc","arguments":5}},
                {"id":"b","name":"calc","args":"x"}]"#,
        )
        .unwrap();
        assert_eq!(calls[0].name, "calc");
        assert_eq!(calls[1].name, "calc");
    }

    #[test]
    fn an_assistant_message_yields_its_tool_calls() {
        let calls =
            parse_batch(r#"{"role":"assistant","tool_calls":[{"id":"x","name":"t","args":{}}]}"#)
                .unwrap();
        assert_eq!(calls.len(), 1);
        let calls = parse_batch(
            r#"{"role":"assistant","content":"let me check","refusal":null,
                "tool_calls":[{"id":"x","type":"function","function":{"name":"t","arguments":"{}"}}, 2]}"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].id, "x");
        assert!(malformed(&calls[1]).starts_with("tool call #2 "));
        assert!(
            parse_batch(r#"{"role":"assistant","content":"no tools today"}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn an_anthropic_message_yields_its_tool_use_blocks() {
        let calls = parse_batch(
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude","stop_reason":"tool_use",
                "content":[{"type":"thinking","thinking":"hm","signature":"s"},
                           {"type":"text","text":"Let me add."},
                           {"type":"tool_use","id":"toolu_1","name":"calc","input":{"x":1}},
                           {"type":"image","source":{}},
                           {"type":"tool_use","id":"toolu_2","name":"calc","input":{"x":2}}]}"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].id, "toolu_1");
        assert_eq!(calls[0].arguments, Arguments::Json(json!({"x":1})));
        assert!(malformed(&calls[1]).starts_with("content block #4 "));
        assert!(malformed(&calls[1]).contains("\"image\""));
        assert_eq!(calls[2].id, "toolu_2");
    }

    #[test]
    fn a_message_that_cannot_be_read_is_one_malformed_call() {
        for message in [
            r#"{"role":"user","content":"hi"}"#,
            r#"{"role":"assistant","tool_calls":5}"#,
            r#"{"role":"assistant","content":5}"#,
            r#"{"role":"assistant","role":"assistant","tool_calls":[]}"#,
        ] {
            let calls = parse_batch(message).unwrap();
            assert_eq!(calls.len(), 1, "{message}");
            assert!(
                malformed(&calls[0]).starts_with("the assistant message "),
                "{message}"
            );
            assert_eq!(calls[0].id, "call_1");
        }
    }

    #[test]
    fn generated_ids_never_collide_with_given_ones() {
        let calls = parse_batch(
            r#"[{"name":"a"},{"id":"call_1","name":"b"},{"name":"c"},{"id":"call_3","name":"d"},
                {"id":"call_1_2","name":"e"},{"name":"f"},1]"#,
        )
        .unwrap();
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "call_1_3", "call_1", "call_3_2", "call_3", "call_1_2", "call_6", "call_7"
            ]
        );
    }

    #[test]
    fn only_input_that_is_no_array_or_object_fails_the_batch() {
        for input in [
            "nope",
            "",
            "5",
            "\"x\"",
            "null",
            "[1,",
            "[{\"name\":\"a\"}] x",
        ] {
            assert!(parse_batch(input).is_err(), "{input}");
        }
        assert!(
            parse_batch("5")
                .unwrap_err()
                .to_string()
                .contains("not a number")
        );
        assert!(parse_batch("[]").unwrap().is_empty());
        assert!(parse_batch(" {\"name\":\"calc\"} ").unwrap().len() == 1);
    }

    #[test]
    fn bad_json_arguments_are_reported_when_parsed() {
        let call = ToolCall::with_raw_arguments("a", "calc", "{not json");
        assert!(
            call.arguments
                .parse()
                .unwrap_err()
                .to_string()
                .contains("not valid JSON")
        );
    }

    #[test]
    fn deep_arguments_in_one_call_cost_only_that_call() {
        let deep = nested_object(100_000);
        let batch = format!(
            r#"[{{"id":"deep","name":"calc","args":{deep}}},
                {{"type":"tool_use","id":"deep2","name":"calc","input":{{"x":{deep}}}}},
                {{"id":"text","type":"function","function":{{"name":"calc","arguments":{text}}}}},
                {{"id":"ok","name":"calc","args":{{"x":1}}}},
                {deep}]"#,
            text = serde_json::to_string(&deep).unwrap(),
        );
        let calls = parse_batch(&batch).unwrap();
        assert_eq!(calls.len(), 5);
        assert_eq!(calls[0].id, "deep");
        assert!(malformed(&calls[0]).contains("recursion limit"));
        assert_eq!(calls[1].id, "deep2");
        assert!(malformed(&calls[1]).contains("recursion limit"));
        // JSON text is kept as text and refused when parsed.
        assert_eq!(calls[2].id, "text");
        assert!(
            calls[2]
                .arguments
                .parse()
                .unwrap_err()
                .to_string()
                .contains("recursion limit")
        );
        assert_eq!(calls[3].arguments, Arguments::Json(json!({"x":1})));
        assert!(malformed(&calls[4]).starts_with("tool call #5 "));
    }

    #[test]
    fn a_deep_batch_is_refused_or_answered_without_overflowing() {
        // Deep but whole: the outer array has one element, which is no call.
        let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let calls = parse_batch(&deep_array).unwrap();
        assert_eq!(calls.len(), 1);
        assert!(malformed(&calls[0]).contains("expected a JSON object"));
        let calls = parse_batch(&nested_object(100_000)).unwrap();
        assert_eq!(calls.len(), 1);
        // Deep and cut short: not JSON.
        assert!(parse_batch(&"[".repeat(100_000)).is_err());
        // Deep inside a message's content blocks.
        let message = format!(
            r#"{{"role":"assistant","content":[{{"type":"tool_use","id":"t","name":"calc","input":{deep}}}]}}"#,
            deep = nested_object(100_000)
        );
        let calls = parse_batch(&message).unwrap();
        assert_eq!(calls[0].id, "t");
        assert!(malformed(&calls[0]).contains("recursion limit"));
    }

    /// The dispatcher's half of the contract: a malformed call is answered
    /// `invalid_arguments` before its name is looked up (here no tool is
    /// loaded at all), and the other calls as usual, in order.
    #[tokio::test]
    async fn a_malformed_element_is_answered_invalid_arguments_in_order() {
        use crate::ErrorType::{InvalidArguments, UnknownTool};

        let options = crate::SandboxOptions::default()
            .with_cache_dir(None)
            .with_max_instances(std::num::NonZeroU32::MIN);
        let host = crate::ToolHost::load_components(Vec::new(), options)
            .await
            .unwrap();
        let calls = parse_batch(
            r#"[{"id":"a","name":"calc","args":[1]}, 7, {"id":"c","name":"nope","args":{}}]"#,
        )
        .unwrap();
        let outcomes = host.call_batch(calls).await;
        let answers: Vec<_> = outcomes
            .iter()
            .map(|o| (o.call_id.as_str(), o.result.as_ref().err().map(|e| e.kind)))
            .collect();
        assert_eq!(
            answers,
            [
                ("a", Some(InvalidArguments)),
                ("call_2", Some(InvalidArguments)),
                ("c", Some(UnknownTool)),
            ]
        );
        assert!(
            outcomes[1]
                .to_message()
                .content
                .to_text()
                .contains("tool call #2")
        );
    }

    #[test]
    fn a_batch_over_its_limit_is_refused_before_it_is_read() {
        let many = format!("[{}]", vec!["{}"; 300].join(","));
        assert_eq!(
            parse_batch_at_most(&many, 256),
            Err(BatchError::TooMany {
                count: 300,
                max: 256
            })
        );
        let message = format!(r#"{{"role":"assistant","tool_calls":{many}}}"#);
        assert!(matches!(
            parse_batch_at_most(&message, 256),
            Err(BatchError::TooMany { count: 300, .. })
        ));
        assert_eq!(parse_batch_at_most(&many, 300).unwrap().len(), 300);
    }

    #[test]
    fn an_empty_tool_calls_list_falls_back_to_the_content_blocks() {
        let calls = parse_batch(
            r#"{"role":"assistant","tool_calls":[],"content":[{"type":"tool_use","id":"t1","name":"calc","input":{}}]}"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "t1");
    }

    #[test]
    fn blocks_anthropic_runs_itself_are_not_answered_again() {
        let calls = parse_batch(
            r#"{"role":"assistant","content":[
                {"type":"server_tool_use","id":"srv_1","name":"web_search","input":{}},
                {"type":"web_search_tool_result","tool_use_id":"srv_1","content":[]},
                {"type":"tool_use","id":"t1","name":"calc","input":{}}]}"#,
        )
        .unwrap();
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0].id, "t1");
    }

    /// Issue 24: an Anthropic `response.content` array sent as the batch
    /// once had each text or thinking block answered under an invented id
    /// (`call_1`), which the API would refuse on the next request.
    #[test]
    fn an_anthropic_content_array_yields_answers_for_its_tool_use_blocks_only() {
        let calls = parse_batch(
            r#"[{"type":"thinking","thinking":"hm","signature":"s"},
                {"type":"redacted_thinking","data":"x"},
                {"type":"text","text":"Let me add."},
                {"type":"tool_use","id":"toolu_1","name":"calc","input":{"x":1}},
                {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}},
                {"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]},
                {"type":"mcp_tool_use","id":"mcptoolu_1","name":"x","server_name":"s","input":{}},
                {"type":"mcp_tool_result","tool_use_id":"mcptoolu_1","content":[]},
                {"name":"calc","arguments":{"x":2}},
                {"type":"image","source":{}}]"#,
        )
        .unwrap();
        let ids: Vec<_> = calls.iter().map(|c| c.id.as_str()).collect();
        // Generated ids count the calls, not the skipped blocks: the second
        // call is `call_2`, the third `call_3`, whatever stood between.
        assert_eq!(ids, ["toolu_1", "call_2", "call_3"]);
        assert_eq!(calls[0].arguments, Arguments::Json(json!({"x":1})));
        assert_eq!(calls[1].arguments, Arguments::Json(json!({"x":2})));
        // A block of a type this host does not know is refused, named by
        // its place in the input.
        let refused = malformed(&calls[2]);
        assert!(refused.starts_with("tool call #10 "), "{refused}");
        assert!(refused.contains("\"image\""), "{refused}");
        // One block alone, as the whole batch: no call at all.
        assert!(
            parse_batch(r#"{"type":"text","text":"just text"}"#)
                .unwrap()
                .is_empty()
        );
        // Only the calls count against a limit on the batch.
        let chatty = format!(
            "[{}{{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"calc\",\"input\":{{}}}}]",
            r#"{"type":"text","text":"a"},"#.repeat(10)
        );
        assert_eq!(parse_batch_at_most(&chatty, 1).unwrap().len(), 1);
    }

    /// Whether `item` is a block [`parse_batch`] skips in an array.
    pub(in crate::wire) fn skipped(item: &Value) -> bool {
        item.get("type")
            .and_then(Value::as_str)
            .is_some_and(not_for_the_host)
    }

    pub(in crate::wire) mod properties {
        use super::*;
        use proptest::prelude::*;

        /// Keys the accepted shapes use, so that random objects come close.
        const KEYS: &[&str] = &[
            "id",
            "type",
            "function",
            "name",
            "arguments",
            "args",
            "input",
            "role",
            "tool_calls",
            "content",
            "index",
            "_meta",
            "cache_control",
            "text",
        ];
        /// Values the accepted shapes look for, ids that collide with
        /// generated ones among them.
        const WORDS: &[&str] = &[
            "function",
            "tool_call",
            "tool_use",
            "assistant",
            "text",
            "thinking",
            "calc",
            "call_1",
            "call_2",
            "call_1_2",
            "call_3",
            "{}",
            "{\"x\":1}",
            "",
        ];

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                3 => prop::sample::select(KEYS).prop_map(str::to_owned),
                1 => "[a-z_]{0,6}",
            ]
        }

        fn leaf() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                (-1e9..1e9f64).prop_map(Value::from),
                prop::sample::select(WORDS).prop_map(Value::from),
                ".{0,8}".prop_map(Value::String),
            ]
        }

        /// Any JSON value, a few levels deep.
        fn json() -> impl Strategy<Value = Value> {
            leaf().prop_recursive(4, 48, 6, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                    prop::collection::btree_map(key(), inner, 0..6)
                        .prop_map(|map| Value::Object(map.into_iter().collect())),
                ]
            })
        }

        /// A call in one of the accepted shapes, with or without an id.
        fn call() -> impl Strategy<Value = Value> {
            let id = prop::option::of(prop::sample::select(WORDS));
            let args = prop::collection::btree_map(key(), leaf(), 0..3)
                .prop_map(|map| Value::Object(map.into_iter().collect()));
            (0..4u8, id, args).prop_map(|(shape, id, args)| {
                let mut call = match shape {
                    0 => json!({"type":"function","function":{"name":"calc","arguments":args.to_string()}}),
                    1 => json!({"name":"calc","args":args}),
                    2 => json!({"type":"tool_use","name":"calc","input":args}),
                    _ => return json!({"name":"calc","arguments":args}),
                };
                if let Some(id) = id {
                    call["id"] = json!(id);
                }
                call
            })
        }

        /// A content block that is no call, with or without an id.
        fn not_a_call() -> impl Strategy<Value = Value> {
            let kind = prop::sample::select(vec![
                "text",
                "thinking",
                "redacted_thinking",
                "server_tool_use",
                "web_search_tool_result",
                "mcp_tool_result",
            ]);
            (kind, prop::option::of(prop::sample::select(WORDS))).prop_map(|(kind, id)| {
                let mut block = json!({"type": kind, "text": "t"});
                if let Some(id) = id {
                    block["id"] = json!(id);
                }
                block
            })
        }

        pub(in crate::wire) fn element() -> impl Strategy<Value = Value> {
            prop_oneof![
                2 => call(),
                1 => not_a_call(),
                1 => prop::collection::btree_map(key(), json(), 0..5)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
                1 => json(),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn never_panics_on_arbitrary_text(text in any::<String>()) {
                let _ = parse_batch(&text);
            }

            #[test]
            fn never_panics_on_json_like_text(text in r#"[\[\]{}",:0-9a-z_ \\]{0,64}"#) {
                let _ = parse_batch(&text);
            }

            #[test]
            fn any_array_or_object_is_answered(value in json()) {
                match parse_batch(&value.to_string()) {
                    Ok(calls) => {
                        if let Value::Array(items) = &value {
                            let answered = items.iter().filter(|item| !skipped(item)).count();
                            prop_assert_eq!(calls.len(), answered);
                        }
                    }
                    Err(_) => prop_assert!(!value.is_array() && !value.is_object()),
                }
            }

            #[test]
            fn arrays_get_one_call_per_element_and_unique_generated_ids(
                items in prop::collection::vec(element(), 0..10)
            ) {
                let calls = parse_batch(&Value::Array(items.clone()).to_string()).unwrap();
                let items: Vec<Value> = items.into_iter().filter(|item| !skipped(item)).collect();
                prop_assert_eq!(calls.len(), items.len());
                let given: HashSet<&str> = items
                    .iter()
                    .filter_map(|item| item.get("id")?.as_str())
                    .collect();
                let mut generated = HashSet::new();
                for (position, (item, call)) in items.iter().zip(&calls).enumerate() {
                    match item.get("id").and_then(Value::as_str) {
                        Some(id) => prop_assert_eq!(&call.id, id),
                        None => {
                            // The position of its answer, skipped blocks not counted.
                            let own = format!("call_{}", position + 1);
                            prop_assert!(
                                call.id == own || call.id.starts_with(&format!("{own}_")),
                                "{} at {}", call.id, position + 1
                            );
                            prop_assert!(!given.contains(call.id.as_str()), "{} is given", call.id);
                            prop_assert!(generated.insert(call.id.clone()), "{} twice", call.id);
                        }
                    }
                }
            }
        }
    }
}
