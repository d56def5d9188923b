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

/// The fewest output tokens the API accepts in `max_output_tokens`.
pub const MIN_OUTPUT_TOKENS: u32 = 16;

/// The Responses API wire format.
#[derive(Debug)]
pub struct OpenAIResponses;

impl Wire for OpenAIResponses {
    const NAME: &'static str = "openai-responses";
    const PATH: &'static str = "/responses";
    const MIN_OUTPUT_TOKENS: u32 = MIN_OUTPUT_TOKENS;

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

    fn prepare(
        builder: reqwest::RequestBuilder,
        settings: &ClientSettings,
    ) -> reqwest::RequestBuilder {
        match &settings.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    fn parse_response(body: &Value) -> Result<ModelResponse, ModelError> {
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
                blocks,
                ..
            } => items.push(call_output(tool_call_id, content, blocks)),
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
    for call in tool_calls {
        let carried = provider_items
            .iter()
            .any(|i| i["type"] == "function_call" && i["call_id"] == call.id.as_str());
        if !carried {
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
fn call_output(call_id: &str, content: &str, blocks: &[ContentBlock]) -> Value {
    use base64::Engine as _;
    let images: Vec<Value> = blocks
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image(media) => Some(json!({
                "type": "input_image",
                "image_url": format!(
                    "data:{};base64,{}",
                    media.mime_type,
                    base64::engine::general_purpose::STANDARD.encode(&media.data)
                ),
            })),
            _ => None,
        })
        .collect();
    let output = if images.is_empty() {
        json!(content)
    } else {
        let mut parts = vec![json!({"type": "input_text", "text": content})];
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
    ModelError::new(kind, format!("the model endpoint failed: {error}"))
}

/// Why generation stopped: the incomplete reason, or the status.
fn stop_reason(response: &Value) -> Option<String> {
    response["incomplete_details"]["reason"]
        .as_str()
        .or_else(|| response["status"].as_str())
        .map(str::to_owned)
}

/// Read the output items, in order, into `answer`: the text (from
/// message items when `with_text`: a stream's text came as deltas), the
/// function calls, and every item verbatim to go back with the turn.
///
/// An item repeated (same id, or a call with the same `call_id`) counts
/// once. A call without a `call_id` gets one that no other call of the
/// answer has, written into its item too, so its output pairs with it.
fn take_items(answer: &mut ModelResponse, items: Vec<Value>, with_text: bool) {
    let mut ids = HashSet::new();
    let mut call_ids: HashSet<String> = items
        .iter()
        .filter(|i| i["type"] == "function_call")
        .filter_map(|i| i["call_id"].as_str().map(str::to_owned))
        .collect();
    let mut taken_calls = HashSet::new();
    let mut unnamed = 0;
    for mut item in items {
        if let Some(id) = item["id"].as_str().filter(|id| !id.is_empty())
            && !ids.insert(id.to_owned())
        {
            continue;
        }
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
                let call_id = match item["call_id"].as_str() {
                    Some(id) => id.to_owned(),
                    None => loop {
                        unnamed += 1;
                        let id = format!("call_toolhost_{unnamed}");
                        if call_ids.insert(id.clone()) {
                            item["call_id"] = json!(id);
                            break id;
                        }
                    },
                };
                if !taken_calls.insert(call_id.clone()) {
                    continue;
                }
                answer.tool_calls.push(AssistantToolCall {
                    id: call_id,
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
        answer.provider_items.push(item);
    }
}

fn parse_response(body: &Value) -> Result<ModelResponse, ModelError> {
    if body["status"] == "failed" {
        return Err(failure(&body["error"]));
    }
    let output = body["output"].as_array().ok_or_else(|| {
        ModelError::new(
            ModelErrorKind::Protocol,
            format!("the answer has no output items: {body}"),
        )
    })?;
    let mut answer = ModelResponse {
        stop_reason: stop_reason(body),
        usage: usage(&body["usage"]),
        ..ModelResponse::default()
    };
    take_items(&mut answer, output.clone(), true);
    Ok(answer)
}

/// One output item as it streams in.
struct Slot {
    /// Its position in the output, when the server said.
    index: Option<u64>,
    /// The item: as added, then as done.
    item: Value,
    /// A function call's arguments so far, appended in place.
    arguments: String,
}

/// The output items of a stream, found by item id or by position.
#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    by_id: HashMap<String, usize>,
    by_index: HashMap<u64, usize>,
}

impl Slots {
    /// The slot an event is about: by its item id, else by its position.
    fn find(&mut self, item_id: Option<&str>, index: Option<u64>) -> Option<&mut Slot> {
        let at = item_id
            .filter(|id| !id.is_empty())
            .and_then(|id| self.by_id.get(id))
            .or_else(|| index.and_then(|i| self.by_index.get(&i)))
            .copied()?;
        self.slots.get_mut(at)
    }

    /// Add `item` (from `output_item.added`), or update the slot it
    /// already has (from `output_item.done`).
    fn put(&mut self, item: &Value, index: Option<u64>) {
        let id = item["id"].as_str();
        let arguments = item["arguments"].as_str();
        if let Some(slot) = self.find(id, index) {
            slot.item = item.clone();
            if let Some(arguments) = arguments {
                arguments.clone_into(&mut slot.arguments);
            }
            return;
        }
        let at = self.slots.len();
        if let Some(id) = id.filter(|id| !id.is_empty()) {
            self.by_id.insert(id.to_owned(), at);
        }
        if let Some(index) = index {
            self.by_index.entry(index).or_insert(at);
        }
        self.slots.push(Slot {
            index,
            item: item.clone(),
            arguments: arguments.unwrap_or_default().to_owned(),
        });
    }

    /// The items in output order (those without a position after the
    /// rest, in the order they came), each call with its arguments.
    fn into_items(mut self) -> Vec<Value> {
        self.slots
            .sort_by_key(|slot| slot.index.unwrap_or(u64::MAX));
        self.slots
            .into_iter()
            .map(|mut slot| {
                if slot.item["type"] == "function_call" {
                    slot.item["arguments"] = Value::String(slot.arguments);
                }
                slot.item
            })
            .collect()
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
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(data) => data,
            Err(_) if event.data.trim().is_empty() || event.data.trim() == "[DONE]" => continue,
            Err(e) => {
                return Err(ModelError::new(
                    ModelErrorKind::Protocol,
                    format!("a stream event is not JSON ({e}): {}", event.data),
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
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                slots.put(&data["item"], index);
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
                finished = Some(data["response"].clone());
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
    let Some(response) = finished else {
        return Err(sse::cut());
    };
    answer.stop_reason = stop_reason(&response);
    answer.usage = usage(&response["usage"]);
    let mut items = slots.into_items();
    if items.is_empty() {
        // A server that sent no item events: the response holds them all.
        items = response["output"].as_array().cloned().unwrap_or_default();
    }
    // Text came in as deltas; message items add text only when none did.
    let with_text = answer.content.is_empty();
    take_items(&mut answer, items, with_text);
    if with_text && !answer.content.is_empty() {
        events(ModelEvent::TextDelta(answer.content.clone()));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let answer = parse_response(&body).unwrap();
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
    fn repeated_items_count_once_and_calls_without_ids_get_unique_ones() {
        let fc = |id: &str, call_id: Option<&str>| {
            let mut item =
                json!({"type": "function_call", "id": id, "name": "calc", "arguments": "{}"});
            if let Some(call_id) = call_id {
                item["call_id"] = json!(call_id);
            }
            item
        };
        let body = json!({
            "status": "completed",
            "output": [
                fc("fc_1", Some("call_toolhost_1")),
                fc("fc_1", Some("call_toolhost_1")),
                fc("fc_2", None),
                fc("fc_3", Some("call_toolhost_1")),
                fc("", None),
            ],
        });
        let answer = parse_response(&body).unwrap();
        let ids: Vec<&str> = answer.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(
            ids,
            ["call_toolhost_1", "call_toolhost_2", "call_toolhost_3"]
        );
        // The items carry the ids the outputs will answer.
        let item_ids: Vec<&str> = answer
            .provider_items
            .iter()
            .map(|i| i["call_id"].as_str().unwrap())
            .collect();
        assert_eq!(item_ids, ids);
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
        // Many small deltas: appended in place, not copied each time.
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
}
