//! OpenAI's Responses API (`POST {base_url}/responses`).
//!
//! The conversation goes out as input items: user and assistant messages,
//! `function_call` items for the model's tool calls and
//! `function_call_output` items for their answers (images included, as
//! `input_image` parts), with system messages as `instructions`. Reasoning
//! items a reasoning model returned are sent back verbatim, before the
//! calls they led to, as the API requires. Responses are stored as the API
//! does by default, so those items can be referred to by id; requesting
//! `reasoning.encrypted_content` instead is refused by models without
//! reasoning.

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{
    AssistantToolCall, ClientSettings, EventSink, Message, ModelError, ModelErrorKind, ModelEvent,
    ModelRequest, ModelResponse, ToolChoice, Usage, Wire, sse,
};
use crate::outcome::ContentBlock;

/// The Responses API wire format.
#[derive(Debug)]
pub struct OpenAIResponses;

impl Wire for OpenAIResponses {
    const NAME: &'static str = "openai-responses";
    const PATH: &'static str = "/responses";

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
    use base64::Engine as _;
    let mut items = Vec::with_capacity(conversation.len());
    for message in conversation.iter().filter(|m| !m.is_empty_turn()) {
        match message {
            Message::System { .. } => {}
            Message::User { content } => items.push(json!({"role": "user", "content": content})),
            Message::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                items.extend(reasoning.iter().cloned());
                if !content.is_empty() {
                    items.push(json!({"role": "assistant", "content": content}));
                }
                for call in tool_calls {
                    items.push(json!({
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments,
                    }));
                }
            }
            Message::Tool {
                tool_call_id,
                content,
                blocks,
                ..
            } => {
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
                items.push(json!({
                    "type": "function_call_output",
                    "call_id": tool_call_id,
                    "output": output,
                }));
            }
        }
    }
    items
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

/// Add one output item to `answer`.
fn take_item(answer: &mut ModelResponse, item: &Value, with_text: bool) {
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
        Some("function_call") => answer.tool_calls.push(AssistantToolCall {
            id: item["call_id"].as_str().map_or_else(
                || format!("call_{}", answer.tool_calls.len()),
                str::to_owned,
            ),
            name: item["name"].as_str().unwrap_or_default().to_owned(),
            arguments: match &item["arguments"] {
                Value::String(text) => text.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            },
        }),
        Some("reasoning") => answer.reasoning.push(item.clone()),
        _ => {}
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
    for item in output {
        take_item(&mut answer, item, true);
    }
    Ok(answer)
}

/// A function call whose arguments are still streaming in.
struct Pending {
    item_id: String,
    output_index: Option<u64>,
    item: Value,
}

async fn read_stream(
    response: reqwest::Response,
    events: EventSink<'_>,
) -> Result<ModelResponse, ModelError> {
    let mut stream = std::pin::pin!(sse::events(response));
    let mut answer = ModelResponse::default();
    // Output items by position, as they complete; calls still streaming.
    let mut done: Vec<(u64, Value)> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
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
        let kind = data["type"]
            .as_str()
            .unwrap_or(event.name.as_str())
            .to_owned();
        match kind.as_str() {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = data["delta"].as_str().filter(|t| !t.is_empty()) {
                    answer.content.push_str(text);
                    events(ModelEvent::TextDelta(text.to_owned()));
                }
            }
            "response.output_item.added" if data["item"]["type"] == "function_call" => {
                let mut item = data["item"].clone();
                if !item["arguments"].is_string() {
                    item["arguments"] = json!("");
                }
                pending.push(Pending {
                    item_id: item["id"].as_str().unwrap_or_default().to_owned(),
                    output_index: data["output_index"].as_u64(),
                    item,
                });
            }
            "response.function_call_arguments.delta" => {
                if let Some(call) = find(&mut pending, &data) {
                    let mut arguments = call.item["arguments"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    arguments.push_str(data["delta"].as_str().unwrap_or_default());
                    call.item["arguments"] = json!(arguments);
                }
            }
            "response.function_call_arguments.done" => {
                if let (Some(call), Some(arguments)) =
                    (find(&mut pending, &data), data["arguments"].as_str())
                {
                    call.item["arguments"] = json!(arguments);
                }
            }
            "response.output_item.done" => {
                let item = &data["item"];
                let index = data["output_index"].as_u64().unwrap_or(done.len() as u64);
                let index_given = data["output_index"].as_u64();
                pending.retain(|p| {
                    let same = if p.item_id.is_empty() {
                        index_given.is_some() && p.output_index == index_given
                    } else {
                        item["id"].as_str() == Some(p.item_id.as_str())
                    };
                    !same
                });
                done.push((index, item.clone()));
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
    // Calls whose item never completed keep what streamed in.
    done.extend(
        pending
            .into_iter()
            .map(|p| (p.output_index.unwrap_or(u64::MAX), p.item)),
    );
    if done.is_empty() {
        // A server that sent no item events: the response holds them all.
        let items = response["output"].as_array().cloned().unwrap_or_default();
        done.extend(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| (i as u64, item)),
        );
    }
    done.sort_by_key(|(index, _)| *index);
    // Text came in as deltas; a message item adds text only when none did.
    let with_text = answer.content.is_empty();
    for (_, item) in &done {
        take_item(&mut answer, item, with_text);
    }
    if with_text && !answer.content.is_empty() {
        events(ModelEvent::TextDelta(answer.content.clone()));
    }
    Ok(answer)
}

/// The pending call an arguments event is about, by item id or position.
fn find<'a>(pending: &'a mut [Pending], data: &Value) -> Option<&'a mut Pending> {
    let item_id = data["item_id"].as_str();
    let index = data["output_index"].as_u64();
    pending.iter_mut().rev().find(|p| match item_id {
        Some(id) if !p.item_id.is_empty() => p.item_id == id,
        _ => index.is_some() && p.output_index == index,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_goes_back_before_the_calls_and_outputs_follow_them() {
        let conversation = [
            Message::system("be brief"),
            Message::user("hi"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![AssistantToolCall {
                    id: "call_a".into(),
                    name: "calc".into(),
                    arguments: "{\"expression\":\"1\"}".into(),
                }],
                reasoning: vec![json!({"type": "reasoning", "id": "rs_1", "summary": []})],
            },
            Message::Tool {
                tool_call_id: "call_a".into(),
                name: "calc".into(),
                content: "1".into(),
                is_error: false,
                blocks: Vec::new(),
            },
        ];
        let items = input(&conversation);
        assert_eq!(items.len(), 4);
        assert_eq!(items[0], json!({"role": "user", "content": "hi"}));
        assert_eq!(items[1]["id"], "rs_1");
        assert_eq!(items[2]["type"], "function_call");
        assert_eq!(items[2]["call_id"], "call_a");
        assert_eq!(
            items[3],
            json!({"type": "function_call_output", "call_id": "call_a", "output": "1"})
        );
    }

    #[test]
    fn a_whole_response_reads_text_calls_reasoning_and_usage() {
        let body = json!({
            "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me."}]},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calc", "arguments": "{}"},
            ],
            "usage": {"input_tokens": 10, "output_tokens": 3},
        });
        let answer = parse_response(&body).unwrap();
        assert_eq!(answer.content, "Let me.");
        assert_eq!(answer.tool_calls[0].id, "call_1");
        assert_eq!(answer.reasoning.len(), 1);
        assert_eq!(answer.usage.input_tokens, 10);
        assert_eq!(answer.stop_reason.as_deref(), Some("completed"));
    }
}
