//! OpenAI's Responses API (`POST {base_url}/responses`).
//!
//! The conversation goes out as input items: user and assistant messages,
//! `function_call` items for the model's tool calls and
//! `function_call_output` items for their answers (images included, as
//! `input_image` parts), with system messages as `instructions`. The items
//! an answer returned (reasoning, message, `function_call`) go back
//! verbatim and in their order, ids included, as the API requires: a
//! reasoning item must be followed by the items it led to. Responses are
//! stored as the API does by default, so those items can be referred to by
//! id; requesting `reasoning.encrypted_content` instead is refused by
//! models without reasoning.

use std::collections::{HashMap, HashSet};

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{
    AssistantToolCall, ClientSettings, EventSink, Message, ModelError, ModelErrorKind, ModelEvent,
    ModelRequest, ModelResponse, ToolChoice, Usage, Wire, sse,
};
use crate::outcome::ContentBlock;
use crate::wire::providers::{self, Vendor};

/// The Responses API wire format.
#[derive(Debug)]
pub struct OpenAIResponses;

impl Wire for OpenAIResponses {
    const NAME: &'static str = "openai-responses";
    const PATH: &'static str = "/responses";
    /// The fewest the API accepts in `max_output_tokens`.
    const MIN_OUTPUT_TOKENS: u32 = 16;

    fn body(settings: &ClientSettings, request: &ModelRequest<'_>) -> Value {
        let instructions: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let mut body = json!({
            "model": settings.model,
            "input": input(request.messages),
            "max_output_tokens": request.max_tokens,
            "stream": settings.stream,
        });
        if !instructions.is_empty() {
            body["instructions"] = json!(instructions.join("\n\n"));
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| {
                    json!({
                        "type": "function",
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                        "strict": false,
                    })
                })
                .collect();
            match request.tool_choice {
                ToolChoice::Auto => {}
                ToolChoice::Required => body["tool_choice"] = json!("required"),
                ToolChoice::None => body["tool_choice"] = json!("none"),
                ToolChoice::Tool(name) => {
                    body["tool_choice"] = json!({"type": "function", "name": name});
                }
            }
            if !request.parallel_tool_calls {
                body["parallel_tool_calls"] = json!(false);
            }
        }
        // The API takes neither a seed nor stop sequences.
        if let Some(temperature) = request.sampling.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(top_p) = request.sampling.top_p {
            body["top_p"] = json!(top_p);
        }
        if let Some(format) = request.response_format {
            body["text"] = json!({"format": {
                "type": "json_schema",
                "name": format.name,
                "schema": format.schema,
                "strict": format.strict,
            }});
        }
        body
    }

    fn parse_response(body: Value) -> Result<ModelResponse, ModelError> {
        parse_response(body)
    }

    fn read_stream(
        response: reqwest::Response,
        events: EventSink<'_>,
    ) -> impl Future<Output = Result<ModelResponse, ModelError>> + Send + '_ {
        read_stream(response, events)
    }
}

/// The conversation as input items.
fn input(conversation: &[Message]) -> Vec<Value> {
    let mut fitted = super::fitted_tool_results(conversation, Vendor::OpenAI);
    let mut items = Vec::with_capacity(conversation.len());
    for message in conversation.iter().filter(|m| !m.is_empty_turn()) {
        match message {
            Message::System { .. } => {}
            Message::User { content } => items.push(json!({"role": "user", "content": content})),
            Message::Assistant {
                content,
                tool_calls,
                provider_items,
            } => assistant_items(&mut items, content, tool_calls, provider_items),
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => {
                let blocks = fitted.next().unwrap_or_default();
                items.push(call_output(tool_call_id, content, &blocks));
            }
        }
    }
    items
}

/// One assistant turn as input items: the items the API returned, verbatim
/// and in their order (reasoning, message and `function_call` items keep
/// their ids, which the API pairs up), then whatever they do not carry — a
/// turn an embedder built by hand has no items at all.
fn assistant_items(
    items: &mut Vec<Value>,
    content: &str,
    tool_calls: &[AssistantToolCall],
    provider_items: &[Value],
) {
    items.extend(provider_items.iter().cloned());
    let has_message = provider_items.iter().any(|i| i["type"] == "message");
    if !has_message && !content.is_empty() {
        items.push(json!({"role": "assistant", "content": content}));
    }
    let carried: HashSet<&str> = provider_items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .filter_map(|i| i["call_id"].as_str())
        .collect();
    for call in tool_calls {
        if !carried.contains(call.id.as_str()) {
            items.push(json!({
                "type": "function_call",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments,
            }));
        }
    }
}

/// The answer to one call, images included as `input_image` parts.
/// `blocks` are the result's, fitted for OpenAI (empty for a text-only
/// result, whose text is `content`).
fn call_output(call_id: &str, content: &str, blocks: &[ContentBlock]) -> Value {
    let images: Vec<Value> = blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image(media) => Some(json!({
                "type": "input_image",
                "image_url": providers::data_url(media),
            })),
            _ => None,
        })
        .collect();
    let output = if blocks.is_empty() {
        json!(content)
    } else if images.is_empty() {
        json!(providers::as_text(blocks))
    } else {
        let mut parts = vec![json!({"type": "input_text", "text": providers::as_text(blocks)})];
        parts.extend(images);
        Value::Array(parts)
    };
    json!({
        "type": "function_call_output",
        "call_id": call_id,
        "output": output,
    })
}

fn usage(value: &Value) -> Usage {
    Usage {
        input_tokens: value["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: value["output_tokens"].as_u64().unwrap_or(0),
    }
}

/// The failure a `failed` response or an `error` event reports.
fn failure(error: &Value) -> ModelError {
    let kind = match error["code"].as_str() {
        Some("server_error" | "rate_limit_exceeded" | "server_is_overloaded") => {
            ModelErrorKind::Overloaded
        }
        _ => ModelErrorKind::Protocol,
    };
    ModelError::new(
        kind,
        format!(
            "the model endpoint failed: {}",
            super::excerpt(&error.to_string())
        ),
    )
}

/// Why generation stopped: the incomplete reason, or the status.
fn stop_reason(response: &Value) -> Option<String> {
    response["incomplete_details"]["reason"]
        .as_str()
        .or_else(|| response["status"].as_str())
        .map(str::to_owned)
}

/// The most output items one answer may have: far more than a turn uses
/// (the loop runs a few calls a turn). With the 32 MiB bound on the answer,
/// it bounds what one answer can add to the conversation, item by item.
const MAX_OUTPUT_ITEMS: usize = 1024;

/// Whether `item` is one the loop keeps and sends back: the kinds a model
/// with function tools answers with. Anything else (an unknown kind, a
/// value that is not an item) is nothing the next request could use.
fn kept(item: &Value) -> bool {
    matches!(
        item["type"].as_str(),
        Some("reasoning" | "message" | "function_call")
    )
}

/// A call's `call_id`, if it has a usable one.
fn call_id(item: &Value) -> Option<&str> {
    item["call_id"].as_str().filter(|id| !id.is_empty())
}

/// Read the output items, in order, into `answer`: the text (from
/// message items when `with_text`: a stream's text came as deltas), the
/// function calls, and every item verbatim to go back with the turn.
///
/// An item repeated (same id, or a call with the same `call_id`) keeps
/// its first place, so whatever came before it (its reasoning) still
/// does, and its last version (a stream's `done` after its `added`). A call
/// without a `call_id` gets a random one, written into its item too, so its
/// output pairs with it in this turn and is unlike any other turn's.
///
/// # Errors
///
/// More than [`MAX_OUTPUT_ITEMS`] items, or two calls left with one
/// `call_id` (items that contradict each other): each call must get exactly
/// one answer.
fn take_items(
    answer: &mut ModelResponse,
    items: Vec<Value>,
    with_text: bool,
) -> Result<(), ModelError> {
    if items.len() > MAX_OUTPUT_ITEMS {
        return Err(ModelError::new(
            ModelErrorKind::Protocol,
            format!(
                "the answer has {} output items, more than the {MAX_OUTPUT_ITEMS} a turn may have",
                items.len()
            ),
        ));
    }
    let mut call_ids: HashSet<String> = items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .filter_map(|i| call_id(i).map(str::to_owned))
        .collect();
    let mut kept_items: Vec<Value> = Vec::with_capacity(items.len());
    // Where an item id, or a call's call id, already has its place.
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let mut by_call: HashMap<String, usize> = HashMap::new();
    for mut item in items.into_iter().filter(kept) {
        let is_call = item["type"] == "function_call";
        if is_call && call_id(&item).is_none() {
            item["call_id"] = json!(unused_call_id(&mut call_ids));
        }
        let id = item["id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .map(str::to_owned);
        let call = call_id(&item).filter(|_| is_call).map(str::to_owned);
        let known = id.as_ref().and_then(|id| by_id.get(id));
        let place = match known.or_else(|| call.as_ref().and_then(|c| by_call.get(c))) {
            Some(&place) => {
                kept_items[place] = item;
                place
            }
            None => {
                kept_items.push(item);
                kept_items.len() - 1
            }
        };
        if let Some(id) = id {
            by_id.insert(id, place);
        }
        if let Some(call) = call {
            by_call.insert(call, place);
        }
    }
    let mut answered = HashSet::new();
    for item in &kept_items {
        match item["type"].as_str() {
            Some("message") if with_text => {
                for part in item["content"].as_array().into_iter().flatten() {
                    let text = match part["type"].as_str() {
                        Some("output_text") => part["text"].as_str(),
                        Some("refusal") => part["refusal"].as_str(),
                        _ => None,
                    };
                    answer.content.push_str(text.unwrap_or_default());
                }
            }
            Some("function_call") => {
                let id = call_id(item).unwrap_or_default();
                if !answered.insert(id) {
                    return Err(ModelError::new(
                        ModelErrorKind::Protocol,
                        format!(
                            "the answer's output items contradict each other: two calls have the call_id {}",
                            super::excerpt(id)
                        ),
                    ));
                }
                answer.tool_calls.push(AssistantToolCall {
                    id: id.to_owned(),
                    name: item["name"].as_str().unwrap_or_default().to_owned(),
                    arguments: match &item["arguments"] {
                        Value::String(text) => text.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    },
                });
            }
            _ => {}
        }
    }
    answer.provider_items = kept_items;
    Ok(())
}

/// A `call_id` for a call the server gave none, unlike any in `taken`.
/// Random, not made from the item id: servers that leave out call ids
/// often number their items afresh each turn, and a call id must be unlike
/// every earlier turn's too.
fn unused_call_id(taken: &mut HashSet<String>) -> String {
    loop {
        let id = format!("call_toolhost_{:016x}", fastrand::u64(..));
        if taken.insert(id.clone()) {
            return id;
        }
    }
}

fn parse_response(mut body: Value) -> Result<ModelResponse, ModelError> {
    if body["status"] == "failed" {
        return Err(failure(&body["error"]));
    }
    let output = match body.get_mut("output") {
        Some(Value::Array(output)) => std::mem::take(output),
        _ => {
            return Err(ModelError::new(
                ModelErrorKind::Protocol,
                format!(
                    "the answer has no output items: {}",
                    super::excerpt(&body.to_string())
                ),
            ));
        }
    };
    let mut answer = ModelResponse {
        stop_reason: stop_reason(&body),
        usage: usage(&body["usage"]),
        ..ModelResponse::default()
    };
    take_items(&mut answer, output, true)?;
    Ok(answer)
}

/// One output item as it streams in.
struct Slot {
    /// Its position in the output, when the server said.
    index: Option<u64>,
    /// The item: as added, then as done.
    item: Value,
    /// A function call's arguments so far.
    arguments: String,
    /// A message's text and refusal so far, from their deltas: what the
    /// message holds if its `done` never comes.
    text: String,
    refusal: String,
}

impl Slot {
    /// The item, with what its deltas brought when its last version does
    /// not hold it.
    fn into_item(self) -> Value {
        let mut item = self.item;
        match item["type"].as_str() {
            Some("function_call") => item["arguments"] = Value::String(self.arguments),
            Some("message") => {
                let has_text = item["content"].as_array().is_some_and(|parts| {
                    parts
                        .iter()
                        .any(|p| p["type"] == "output_text" || p["type"] == "refusal")
                });
                let streamed = !self.text.is_empty() || !self.refusal.is_empty();
                if streamed && !has_text {
                    let mut parts = Vec::new();
                    if !self.text.is_empty() {
                        parts.push(
                            json!({"type": "output_text", "text": self.text, "annotations": []}),
                        );
                    }
                    if !self.refusal.is_empty() {
                        parts.push(json!({"type": "refusal", "refusal": self.refusal}));
                    }
                    item["content"] = Value::Array(parts);
                }
            }
            _ => {}
        }
        item
    }
}

/// The output items of a stream, found by item id or by position.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    by_id: HashMap<String, usize>,
    by_index: HashMap<u64, usize>,
}

impl Slots {
    /// Where the item an event is about is: by its item id, else by its
    /// position — unless the item there has another id.
    fn place(&self, item_id: Option<&str>, index: Option<u64>) -> Option<usize> {
        let item_id = item_id.filter(|id| !id.is_empty());
        if let Some(&at) = item_id.and_then(|id| self.by_id.get(id)) {
            return Some(at);
        }
        let at = *self.by_index.get(&index?)?;
        let there = self.slots[at].item["id"]
            .as_str()
            .filter(|id| !id.is_empty());
        match (item_id, there) {
            (Some(wanted), Some(there)) if wanted != there => None,
            _ => Some(at),
        }
    }

    fn find(&mut self, item_id: Option<&str>, index: Option<u64>) -> Option<&mut Slot> {
        let at = self.place(item_id, index)?;
        self.slots.get_mut(at)
    }

    /// Add `item` (from `output_item.added`), or update the slot it
    /// already has (from `output_item.done`). What is not an item is
    /// passed over.
    fn put(&mut self, item: &Value, index: Option<u64>) -> Result<(), ModelError> {
        if !item["type"].is_string() {
            return Ok(());
        }
        let id = item["id"].as_str().filter(|id| !id.is_empty());
        let arguments = item["arguments"].as_str();
        // A position to find the slot by: its first one, never a second
        // that another item may hold.
        let mut new_index = index;
        let at = match self.place(id, index) {
            Some(at) => {
                let slot = &mut self.slots[at];
                slot.item = item.clone();
                if let Some(arguments) = arguments {
                    arguments.clone_into(&mut slot.arguments);
                }
                if slot.index.is_none() {
                    slot.index = index;
                } else {
                    new_index = None;
                }
                at
            }
            None => {
                if self.slots.len() == MAX_OUTPUT_ITEMS {
                    return Err(ModelError::new(
                        ModelErrorKind::Protocol,
                        format!(
                            "the answer has more than the {MAX_OUTPUT_ITEMS} output items a turn may have"
                        ),
                    ));
                }
                self.slots.push(Slot {
                    index,
                    item: item.clone(),
                    arguments: arguments.unwrap_or_default().to_owned(),
                    text: String::new(),
                    refusal: String::new(),
                });
                self.slots.len() - 1
            }
        };
        if let Some(id) = id {
            self.by_id.entry(id.to_owned()).or_insert(at);
        }
        if let Some(index) = new_index {
            self.by_index.entry(index).or_insert(at);
        }
        Ok(())
    }

    /// The items in output order (those without a position after the
    /// rest, in the order they came), each with what its deltas brought.
    fn into_items(mut self) -> Vec<Value> {
        self.slots
            .sort_by_key(|slot| slot.index.unwrap_or(u64::MAX));
        self.slots.into_iter().map(Slot::into_item).collect()
    }
}

async fn read_stream(
    response: reqwest::Response,
    events: EventSink<'_>,
) -> Result<ModelResponse, ModelError> {
    let mut stream = std::pin::pin!(sse::events(response));
    let mut answer = ModelResponse::default();
    let mut slots = Slots::default();
    let mut finished: Option<Value> = None;
    while let Some(event) = stream.next().await {
        let event = event?;
        let mut data: Value = match serde_json::from_str(&event.data) {
            Ok(data) => data,
            Err(_) if event.data.trim().is_empty() || event.data.trim() == "[DONE]" => continue,
            Err(e) => {
                return Err(ModelError::new(
                    ModelErrorKind::Protocol,
                    format!(
                        "a stream event is not JSON ({e}): {}",
                        super::excerpt(&event.data)
                    ),
                ));
            }
        };
        let kind = data["type"].as_str().unwrap_or(event.name.as_str());
        let item_id = data["item_id"].as_str();
        let index = data["output_index"].as_u64();
        match kind {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = data["delta"].as_str().filter(|t| !t.is_empty()) {
                    answer.content.push_str(text);
                    events(ModelEvent::TextDelta(text.to_owned()));
                    if let Some(slot) = slots.find(item_id, index) {
                        if kind == "response.output_text.delta" {
                            slot.text.push_str(text);
                        } else {
                            slot.refusal.push_str(text);
                        }
                    }
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                slots.put(&data["item"], index)?;
            }
            "response.function_call_arguments.delta" => {
                if let Some(slot) = slots.find(item_id, index) {
                    slot.arguments
                        .push_str(data["delta"].as_str().unwrap_or_default());
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(slot), Some(arguments)) =
                    (slots.find(item_id, index), data["arguments"].as_str())
                {
                    arguments.clone_into(&mut slot.arguments);
                }
            }
            "response.completed" | "response.incomplete" => {
                match data.get_mut("response").map(Value::take) {
                    Some(response @ Value::Object(_)) => finished = Some(response),
                    _ => {
                        return Err(ModelError::new(
                            ModelErrorKind::Protocol,
                            "the stream ended with a completion event that holds no response",
                        ));
                    }
                }
                break;
            }
            "response.failed" => return Err(failure(&data["response"]["error"])),
            "error" => {
                let error = if data["error"].is_object() {
                    &data["error"]
                } else {
                    &data
                };
                return Err(failure(error));
            }
            _ => {} // created, in_progress, content_part.*, output_text.done …
        }
    }
    let Some(mut response) = finished else {
        return Err(sse::cut());
    };
    answer.stop_reason = stop_reason(&response);
    answer.usage = usage(&response["usage"]);
    let streamed = std::mem::take(&mut answer.content);
    match response.get_mut("output").map(Value::take) {
        // The response's own list is the whole answer, in order: it wins
        // over what the events built, text included, unless it holds no
        // text and the deltas did.
        Some(Value::Array(output)) if !output.is_empty() => {
            take_items(&mut answer, output, true)?;
            if answer.content.is_empty() && !streamed.is_empty() {
                answer.content.clone_from(&streamed);
                // Its message item goes back as the text: give it the text.
                if let Some(message) = answer
                    .provider_items
                    .iter_mut()
                    .find(|item| item["type"] == "message")
                {
                    message["content"] =
                        json!([{"type": "output_text", "text": streamed, "annotations": []}]);
                }
            }
        }
        // The events are all there is: the text came as deltas, and a
        // message item adds text only when none did.
        _ => {
            take_items(&mut answer, slots.into_items(), streamed.is_empty())?;
            if !streamed.is_empty() {
                answer.content.clone_from(&streamed);
            }
        }
    }
    // What was shown as it came must end as the answer reads: the rest of
    // it, when the deltas were its start; otherwise the answer stands, and
    // the transcript has it.
    match answer.content.strip_prefix(streamed.as_str()) {
        Some(rest) if !rest.is_empty() => events(ModelEvent::TextDelta(rest.to_owned())),
        Some(_) => {}
        None => tracing::debug!(
            "the streamed text differs from the completed response's; the response's is kept"
        ),
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::image::tests::png_of;

    /// A tool's answer holding `blocks`, as the agent loop records it.
    fn answer(id: &str, blocks: Vec<crate::outcome::ContentBlock>) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "draw".into(),
            content: crate::wire::providers::as_text(&blocks),
            is_error: false,
            blocks,
        }
    }

    fn image(mime_type: &str, data: Vec<u8>) -> crate::outcome::ContentBlock {
        crate::outcome::ContentBlock::Image(crate::outcome::Media {
            mime_type: mime_type.into(),
            data: data.into(),
        })
    }

    #[test]
    fn function_call_outputs_carry_only_the_images_openai_takes() {
        let svg = image("image/svg+xml", b"<svg/>".to_vec());
        let png = image("image/png", png_of(2, 2, 0));
        let input = input(&[answer("a", vec![svg, png])]);
        let output = input[0]["output"].as_array().unwrap();
        assert_eq!(output.len(), 2, "{output:?}");
        assert!(
            output[0]["text"].as_str().unwrap().starts_with(
                "[image dropped: image/svg+xml, 6 B, is not a PNG, JPEG, GIF or WebP image]"
            ),
            "{output:?}"
        );
        assert_eq!(output[1]["type"], "input_image");
    }

    fn call(id: &str) -> AssistantToolCall {
        AssistantToolCall {
            id: id.into(),
            name: "calc".into(),
            arguments: "{\"expression\":\"1\"}".into(),
        }
    }

    fn output(call_id: &str) -> Message {
        Message::Tool {
            tool_call_id: call_id.into(),
            name: "calc".into(),
            content: "1".into(),
            is_error: false,
            blocks: Vec::new(),
        }
    }

    #[test]
    fn the_items_go_back_verbatim_in_order_and_outputs_follow_them() {
        let items = vec![
            json!({"type": "reasoning", "id": "rs_1", "summary": []}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "calc", "arguments": "{\"expression\":\"1\"}", "status": "completed"}),
        ];
        let conversation = [
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![call("call_a")],
                provider_items: items.clone(),
            },
            output("call_a"),
        ];
        let input = input(&conversation);
        assert_eq!(input.len(), 4);
        assert_eq!(input[0], json!({"role": "user", "content": "hi"}));
        assert_eq!(input[1..3], items[..]);
        assert_eq!(
            input[3],
            json!({"type": "function_call_output", "call_id": "call_a", "output": "1"})
        );
    }

    #[test]
    fn a_turn_built_by_hand_is_sent_from_its_text_and_calls() {
        let conversation = [Message::Assistant {
            content: "Let me.".into(),
            tool_calls: vec![call("call_a")],
            provider_items: Vec::new(),
        }];
        let input = input(&conversation);
        assert_eq!(input[0], json!({"role": "assistant", "content": "Let me."}));
        assert_eq!(input[1]["type"], "function_call");
        assert_eq!(input[1]["call_id"], "call_a");
        assert!(input[1].get("id").is_none());
    }

    #[test]
    fn a_whole_response_reads_text_calls_items_and_usage() {
        let body = json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": "Let me."}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calc", "arguments": "{}"},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 3},
        });
        let answer = parse_response(body.clone()).unwrap();
        assert_eq!(answer.content, "Let me.");
        assert_eq!(answer.tool_calls[0].id, "call_1");
        assert_eq!(
            answer.provider_items,
            body["output"].as_array().unwrap()[..]
        );
        assert_eq!(answer.usage.input_tokens, 10);
        assert_eq!(answer.stop_reason.as_deref(), Some("completed"));
    }

    #[test]
    fn a_repeated_item_keeps_its_place_and_last_version_and_calls_without_ids_get_unique_ones() {
        let fc = |id: &str, call_id: Option<&str>, arguments: &str| {
            let mut item =
                json!({"type": "function_call", "id": id, "name": "calc", "arguments": arguments});
            if let Some(call_id) = call_id {
                item["call_id"] = json!(call_id);
            }
            item
        };
        let body = json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                fc("fc_1", Some("call_1"), ""),
                fc("fc_1", Some("call_1"), "{}"),
                fc("fc_2", None, "{}"),
                fc("fc_3", Some("call_1"), "{\"x\":1}"),
                fc("", Some(""), "{}"),
                fc("", None, "{}"),
                {"type": "web_search_call", "id": "ws_1"},
                "not an item",
                null,
            ],
        });
        let answer = parse_response(body).unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids.len(), 4, "{ids:?}");
        // The repeated call stays right after its reasoning, as last sent.
        assert_eq!(answer.provider_items[0]["id"], "rs_1");
        assert_eq!(ids[0], "call_1");
        assert_eq!(answer.tool_calls[0].arguments, "{\"x\":1}");
        // Made up where missing (an empty one is none): random, and unlike
        // each other.
        assert!(ids[1..].iter().all(|id| id.starts_with("call_toolhost_")));
        assert!(ids[1] != ids[2] && ids[2] != ids[3] && ids[1] != ids[3]);
        // The items carry the ids the outputs will answer, and nothing the
        // next request could not use is kept.
        let item_ids: Vec<&str> = answer.provider_items[1..]
            .iter()
            .map(|i| i["call_id"].as_str().unwrap())
            .collect();
        assert_eq!(item_ids, ids);
        assert_eq!(answer.provider_items.len(), 5);
    }

    #[test]
    fn items_that_would_leave_two_calls_one_call_id_are_refused() {
        // The third repeats the first's item id with the second's call id.
        let body = json!({"status": "completed", "output": [
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "calc", "arguments": "{}"},
            {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "calc", "arguments": "{}"},
            {"type": "function_call", "id": "fc_1", "call_id": "c2", "name": "calc", "arguments": "{}"},
        ]});
        let error = parse_response(body).unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("c2"), "{}", error.message);
    }

    #[test]
    fn an_answer_with_too_many_items_is_refused() {
        let items: Vec<Value> = (0..=MAX_OUTPUT_ITEMS)
            .map(|i| json!({"type": "reasoning", "id": format!("rs_{i}")}))
            .collect();
        let error = parse_response(json!({"status": "completed", "output": items})).unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("output items"), "{}", error.message);
    }

    #[tokio::test]
    async fn answers_that_are_not_objects_are_protocol_errors() {
        for body in [
            json!([1, 2]),
            json!("text"),
            json!(null),
            json!({"output": 5}),
        ] {
            let error = parse_response(body.clone()).unwrap_err();
            assert_eq!(error.kind, ModelErrorKind::Protocol, "{body}");
        }
        // An event named `response.completed` whose data is no object.
        let body = "event: response.completed\ndata: 5\n\n".to_owned();
        let error = read_stream(reqwest::Response::from(http::Response::new(body)), &|_| {})
            .await
            .unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
    }

    #[test]
    fn an_endpoints_text_in_an_error_is_cut_short() {
        let long = "x".repeat(100_000);
        let error = parse_response(json!({"status": "done", "junk": long})).unwrap_err();
        assert!(error.message.len() < 1_000, "{}", error.message.len());
        let error =
            parse_response(json!({"status": "failed", "error": {"message": long}})).unwrap_err();
        assert!(error.message.len() < 1_000, "{}", error.message.len());
    }

    fn sse(events: &[Value]) -> reqwest::Response {
        let body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        reqwest::Response::from(http::Response::new(body))
    }

    #[tokio::test]
    async fn a_stream_without_positions_keeps_arrival_order_and_counts_repeats_once() {
        let added = |id: &str, call_id: &str| {
            json!({"type": "response.output_item.added",
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": ""}})
        };
        let delta = |id: &str, piece: &str| json!({"type": "response.function_call_arguments.delta", "item_id": id, "delta": piece});
        let done = |id: &str, call_id: &str, arguments: &str| {
            json!({"type": "response.output_item.done",
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": arguments}})
        };
        let mut events = vec![added("fc_b", "call_b"), added("fc_a", "call_a")];
        // Many small deltas, every one kept.
        for _ in 0..2000 {
            events.push(delta("fc_b", " "));
        }
        events.extend([
            delta("fc_b", "{}"),
            delta("fc_a", "{\"x\":1}"),
            done("fc_a", "call_a", "{\"x\":1}"),
            done("fc_a", "call_a", "{\"x\":1}"),
            json!({"type": "response.completed", "response": {"status": "completed", "output": [], "usage": {"input_tokens": 1, "output_tokens": 2}}}),
        ]);
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_b", "call_a"]);
        assert_eq!(answer.tool_calls[0].arguments.trim(), "{}");
        assert_eq!(answer.tool_calls[1].arguments, "{\"x\":1}");
        assert_eq!(answer.provider_items.len(), 2);
        assert_eq!(answer.provider_items[0]["id"], "fc_b");
        assert_eq!(answer.usage.output_tokens, 2);
    }

    #[tokio::test]
    async fn a_stream_that_stops_before_it_completes_is_cut() {
        let events = [json!({"type": "response.created", "response": {}})];
        let error = read_stream(sse(&events), &|_| {}).await.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::StreamCut);
    }

    fn completed(output: Value) -> Value {
        json!({"type": "response.completed", "response": {"status": "completed", "output": output}})
    }

    #[tokio::test]
    async fn the_completed_responses_output_wins_over_what_the_events_built() {
        let message = json!({"type": "message", "id": "msg_1", "role": "assistant",
            "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}]});
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Hel"}),
            completed(json!([message])),
        ];
        let shown = std::sync::Mutex::new(String::new());
        let answer = read_stream(sse(&events), &|event| {
            let ModelEvent::TextDelta(text) = event;
            shown.lock().unwrap().push_str(&text);
        })
        .await
        .unwrap();
        assert_eq!(answer.content, "Hello there.");
        assert_eq!(answer.provider_items, [message]);
        // What was shown ends as the answer reads.
        assert_eq!(*shown.lock().unwrap(), "Hello there.");
    }

    #[tokio::test]
    async fn a_completed_message_without_text_gets_the_streamed_text() {
        let events = [
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Hi"}),
            completed(
                json!([{"type": "message", "id": "msg_1", "role": "assistant", "content": []}]),
            ),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        assert_eq!(answer.content, "Hi");
        // The item goes back in the next request: with the text.
        assert_eq!(answer.provider_items[0]["content"][0]["text"], "Hi");
    }

    #[tokio::test]
    async fn a_message_whose_done_never_came_keeps_its_streamed_text() {
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "Hel"}),
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "delta": "lo."}),
            // Not an item: passed over, not a slot of its own.
            json!({"type": "response.output_item.added", "output_index": 1}),
            completed(json!([])),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        assert_eq!(answer.content, "Hello.");
        assert_eq!(answer.provider_items.len(), 1);
        assert_eq!(answer.provider_items[0]["id"], "msg_1");
        assert_eq!(answer.provider_items[0]["content"][0]["text"], "Hello.");
    }

    #[tokio::test]
    async fn an_event_for_another_item_is_not_matched_by_its_position() {
        let added = |id: &str, call_id: &str| {
            json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": ""}})
        };
        let events = [
            added("fc_a", "call_a"),
            // The same position, another id: a new item, not an update.
            added("fc_b", "call_b"),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_b", "output_index": 0, "delta": "{\"b\":1}"}),
            json!({"type": "response.function_call_arguments.delta", "item_id": "fc_a", "output_index": 0, "delta": "{\"a\":1}"}),
            completed(json!([])),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        let calls: Vec<(&str, &str)> = answer
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("call_a", "{\"a\":1}"), ("call_b", "{\"b\":1}")]);
    }

    #[tokio::test]
    async fn a_slot_is_found_by_its_first_position_only() {
        let call = |id: Option<&str>, call_id: &str| {
            let mut item = json!({"type": "function_call", "call_id": call_id, "name": "calc", "arguments": "{}"});
            if let Some(id) = id {
                item["id"] = json!(id);
            }
            item
        };
        let events = [
            json!({"type": "response.output_item.added", "output_index": 0, "item": call(Some("fc_a"), "call_a")}),
            // Done at another position: the item keeps its first.
            json!({"type": "response.output_item.done", "output_index": 1, "item": call(Some("fc_a"), "call_a")}),
            // So an item without an id at that position is a new one.
            json!({"type": "response.output_item.added", "output_index": 1, "item": call(None, "call_b")}),
            completed(json!([])),
        ];
        let answer = read_stream(sse(&events), &|_| {}).await.unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["call_a", "call_b"]);
    }
}
