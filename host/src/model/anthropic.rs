//! The Anthropic Messages API.
//!
//! Tool results of a turn go back as `tool_result` blocks, all in one user
//! message, first (before any text), as the API requires.

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{
    AssistantToolCall, ClientSettings, EventSink, Message, ModelError, ModelErrorKind, ModelEvent,
    ModelRequest, ModelResponse, ToolChoice, Usage, Wire, sse,
};
use crate::wire::definitions::{Format, tool_definition};
use crate::wire::providers::{self, Vendor};

/// The API version this client speaks.
const API_VERSION: &str = "2023-06-01";

/// The Anthropic Messages wire format: `POST {base_url}/messages`.
#[derive(Debug)]
pub struct Anthropic;

impl Wire for Anthropic {
    const NAME: &'static str = "anthropic";
    const PATH: &'static str = "/messages";

    fn body(settings: &ClientSettings, request: &ModelRequest<'_>) -> Value {
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::System { content } => Some(content.as_str()),
                _ => None,
            })
            .collect();
        let mut body = json!({
            "model": settings.model,
            "max_tokens": request.max_tokens,
            "messages": messages(request.messages),
            "stream": settings.stream,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| tool_definition(t, Format::Anthropic))
            .collect();
        // A structured answer is given through a tool whose input is the
        // answer (the API has no response format of its own), and the
        // model must call a tool to answer at all.
        let mut choice = request.tool_choice.clone();
        if let Some(format) = request.response_format {
            tools.push(json!({
                "name": format.name,
                "description": "Give your final answer by calling this tool, once you need no other tool. Its input is the answer.",
                "input_schema": format.schema,
            }));
            choice = match choice {
                ToolChoice::Auto | ToolChoice::Required => ToolChoice::Required,
                // "No tools" with a structured answer: answer now.
                ToolChoice::None => ToolChoice::Tool(format.name.clone()),
                named @ ToolChoice::Tool(_) => named,
            };
        }
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
            let mut tool_choice = match &choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            };
            if !request.parallel_tool_calls && choice != ToolChoice::None {
                tool_choice["disable_parallel_tool_use"] = json!(true);
            }
            // Only sent when it says more than the default.
            if tool_choice != json!({"type": "auto"}) {
                body["tool_choice"] = tool_choice;
            }
        }
        let sampling = request.sampling;
        if let Some(temperature) = sampling.temperature {
            // Unchanged: `ModelConfig::check` keeps it within 0 to 1.
            body["temperature"] = json!(temperature);
        }
        if let Some(top_p) = sampling.top_p {
            body["top_p"] = json!(top_p);
        }
        if !sampling.stop.is_empty() {
            body["stop_sequences"] = json!(sampling.stop);
        }
        body
    }

    fn prepare(
        builder: reqwest::RequestBuilder,
        settings: &ClientSettings,
    ) -> reqwest::RequestBuilder {
        let builder = builder.header("anthropic-version", API_VERSION);
        match &settings.api_key {
            Some(key) => builder.header("x-api-key", key),
            None => builder,
        }
    }

    fn parse_response(body: Value) -> Result<ModelResponse, ModelError> {
        parse_response(&body)
    }

    fn read_stream(
        response: reqwest::Response,
        events: EventSink<'_>,
    ) -> impl Future<Output = Result<ModelResponse, ModelError>> + Send + '_ {
        read_stream(response, events)
    }
}

/// The conversation in Anthropic's shape: user and assistant messages
/// alternate, tool results of a turn share one user message, before any text.
fn messages(conversation: &[Message]) -> Vec<Value> {
    let mut fitted = super::fitted_tool_results(conversation, Vendor::Anthropic);
    let mut out: Vec<Value> = Vec::new();
    for message in conversation.iter().filter(|m| !m.is_empty_turn()) {
        match message {
            Message::System { .. } => {}
            // The API refuses a text block that is empty or blank: such a
            // message says nothing, and is left out.
            Message::User { content } if content.trim().is_empty() => {}
            Message::User { content } => {
                let block = json!({"type": "text", "text": content});
                match out.last_mut() {
                    // After tool results: the text joins their message, after them.
                    Some(last) if last["role"] == "user" => push_block(last, block),
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut blocks = Vec::new();
                // Models often write a blank line before their tool calls;
                // the API refuses it sent back as a text block.
                if !content.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": content}));
                }
                for call in tool_calls {
                    // The API takes `input` as an object; arguments the model
                    // garbled were already answered with invalid_arguments.
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
                }
                if !blocks.is_empty() {
                    out.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                ..
            } => {
                // What Anthropic takes of the blocks is decided for the
                // whole request; a text-only result has none.
                let blocks = fitted.next().unwrap_or_default();
                let content = if blocks.is_empty() {
                    providers::anthropic_text(content)
                } else {
                    providers::anthropic_blocks(&blocks)
                };
                let block = json!({"type": "tool_result", "tool_use_id": tool_call_id, "content": content, "is_error": is_error});
                match out.last_mut() {
                    Some(last) if last["role"] == "user" && is_tool_results(last) => {
                        push_block(last, block)
                    }
                    _ => out.push(json!({"role": "user", "content": [block]})),
                }
            }
        }
    }
    out
}

fn push_block(message: &mut Value, block: Value) {
    if let Some(blocks) = message["content"].as_array_mut() {
        blocks.push(block);
    }
}

fn is_tool_results(message: &Value) -> bool {
    message["content"]
        .as_array()
        .is_some_and(|blocks| blocks.iter().all(|b| b["type"] == "tool_result"))
}

/// Anthropic counts cached prompt tokens apart from `input_tokens`; the
/// prompt's size is their sum.
fn usage(value: &Value) -> Usage {
    let count = |key: &str| value[key].as_u64().unwrap_or(0);
    Usage {
        input_tokens: count("input_tokens")
            .saturating_add(count("cache_read_input_tokens"))
            .saturating_add(count("cache_creation_input_tokens")),
        output_tokens: value["output_tokens"].as_u64().unwrap_or(0),
    }
}

fn parse_response(body: &Value) -> Result<ModelResponse, ModelError> {
    let blocks = body["content"].as_array().ok_or_else(|| {
        ModelError::new(
            ModelErrorKind::Protocol,
            format!(
                "the answer has no content blocks: {}",
                super::excerpt(&body.to_string())
            ),
        )
    })?;
    let mut answer = ModelResponse {
        stop_reason: body["stop_reason"].as_str().map(str::to_owned),
        usage: usage(&body["usage"]),
        ..ModelResponse::default()
    };
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => answer
                .content
                .push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => answer.tool_calls.push(AssistantToolCall {
                id: block["id"].as_str().unwrap_or_default().to_owned(),
                name: block["name"].as_str().unwrap_or_default().to_owned(),
                arguments: block["input"].to_string(),
            }),
            _ => {}
        }
    }
    Ok(answer)
}

/// A content block being assembled from stream events.
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

async fn read_stream(
    response: reqwest::Response,
    events: EventSink<'_>,
) -> Result<ModelResponse, ModelError> {
    let mut stream = std::pin::pin!(sse::events(response));
    let mut answer = ModelResponse::default();
    // Blocks by index; some servers close them all only at the end.
    let mut blocks: Vec<(u64, Block)> = Vec::new();
    let mut stopped = false;
    while let Some(event) = stream.next().await {
        let event = event?;
        let data: Value = match serde_json::from_str(&event.data) {
            Ok(data) => data,
            Err(_) if event.data.trim().is_empty() => continue,
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
        let kind = data["type"]
            .as_str()
            .unwrap_or(event.name.as_str())
            .to_owned();
        match kind.as_str() {
            "message_start" => answer.usage += usage(&data["message"]["usage"]),
            "content_block_start" => {
                let block = &data["content_block"];
                let index = data["index"].as_u64().unwrap_or(blocks.len() as u64);
                let entry = match block["type"].as_str() {
                    Some("text") => {
                        if let Some(text) = block["text"].as_str().filter(|t| !t.is_empty()) {
                            answer.content.push_str(text);
                            events(ModelEvent::TextDelta(text.to_owned()));
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: block["id"].as_str().unwrap_or_default().to_owned(),
                        name: block["name"].as_str().unwrap_or_default().to_owned(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                blocks.push((index, entry));
            }
            "content_block_delta" => {
                let index = data["index"].as_u64();
                let delta = &data["delta"];
                let block = blocks
                    .iter_mut()
                    .rev()
                    .find(|(i, _)| index.is_none_or(|index| *i == index));
                match (delta["type"].as_str(), block) {
                    (Some("text_delta"), _) => {
                        let text = delta["text"].as_str().unwrap_or_default();
                        answer.content.push_str(text);
                        events(ModelEvent::TextDelta(text.to_owned()));
                    }
                    (Some("input_json_delta"), Some((_, Block::ToolUse { json, .. }))) => {
                        json.push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data["delta"]["stop_reason"].as_str() {
                    answer.stop_reason = Some(reason.to_owned());
                }
                // Output tokens here are cumulative for the message.
                if let Some(output) = data["usage"]["output_tokens"].as_u64() {
                    answer.usage.output_tokens = output;
                }
            }
            "message_stop" => {
                stopped = true;
                break;
            }
            "error" => {
                let error = &data["error"];
                let kind = match error["type"].as_str() {
                    Some("overloaded_error" | "api_error") => ModelErrorKind::Overloaded,
                    _ => ModelErrorKind::Protocol,
                };
                return Err(ModelError::new(
                    kind,
                    format!(
                        "the model endpoint failed mid-stream: {}",
                        super::excerpt(&error.to_string())
                    ),
                ));
            }
            _ => {} // ping, content_block_stop
        }
    }
    if !stopped {
        return Err(sse::cut());
    }
    for (_, block) in blocks {
        if let Block::ToolUse { id, name, json } = block {
            // An empty input streams as no deltas at all.
            let arguments = if json.trim().is_empty() {
                "{}".to_owned()
            } else {
                json
            };
            answer.tool_calls.push(AssistantToolCall {
                id,
                name,
                arguments,
            });
        }
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::ContentBlock;
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

    /// Issue 24: a blank line before a tool call, or a blank turn, is no
    /// text block the API would refuse.
    #[test]
    fn blank_text_never_becomes_a_text_block() {
        let conversation = [
            Message::user("go"),
            Message::Assistant {
                content: "\n\n".into(),
                tool_calls: vec![AssistantToolCall {
                    id: "a".into(),
                    name: "calc".into(),
                    arguments: "{}".into(),
                }],
                provider_items: vec![],
            },
            Message::Tool {
                tool_call_id: "a".into(),
                name: "calc".into(),
                content: "1".into(),
                is_error: false,
                blocks: Vec::new(),
            },
            Message::Assistant {
                content: " ".into(),
                tool_calls: vec![],
                provider_items: vec![],
            },
            Message::user("  "),
            Message::user("and now?"),
        ];
        let out = messages(&conversation);
        let roles: Vec<&str> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(out[1]["content"].as_array().unwrap().len(), 1);
        assert_eq!(out[1]["content"][0]["type"], "tool_use");
        let last = out[2]["content"].as_array().unwrap();
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[1], json!({"type": "text", "text": "and now?"}));
        for message in &out {
            for block in message["content"].as_array().unwrap() {
                if block["type"] == "text" {
                    assert!(
                        !block["text"].as_str().unwrap().trim().is_empty(),
                        "{out:?}"
                    );
                }
            }
        }
    }

    /// Issue 24: what Anthropic refuses never goes out: empty text blocks,
    /// an empty result, an image over its size limit.
    #[test]
    fn tool_results_hold_only_what_the_api_takes() {
        let conversation = [
            answer(
                "a",
                vec![
                    ContentBlock::Text(String::new()),
                    image("image/png", png_of(9000, 10, 0)),
                    image("image/jpeg", png_of(10, 10, 0)),
                ],
            ),
            Message::Tool {
                tool_call_id: "b".into(),
                name: "noop".into(),
                content: String::new(),
                is_error: false,
                blocks: Vec::new(),
            },
        ];
        let out = messages(&conversation);
        let results = out[0]["content"].as_array().unwrap();
        let first = results[0]["content"].as_array().unwrap();
        assert_eq!(first.len(), 2, "{first:?}");
        assert_eq!(
            first[0]["text"],
            "[image dropped: image/png, 9000x10 px; Anthropic takes images up to 8000x8000 px]"
        );
        // Sent under the type its bytes have.
        assert_eq!(first[1]["source"]["media_type"], "image/png");
        assert_eq!(results[1]["content"], "(no output)");
    }

    #[test]
    fn tool_results_of_a_turn_share_one_user_message_first() {
        let conversation = [
            Message::user("hi"),
            Message::Assistant {
                content: "let me".into(),
                tool_calls: vec![
                    AssistantToolCall {
                        id: "a".into(),
                        name: "calc".into(),
                        arguments: "{\"expression\":\"1\"}".into(),
                    },
                    AssistantToolCall {
                        id: "b".into(),
                        name: "calc".into(),
                        arguments: "{oops".into(),
                    },
                ],
                provider_items: vec![],
            },
            Message::Tool {
                tool_call_id: "a".into(),
                name: "calc".into(),
                content: "1".into(),
                is_error: false,
                blocks: Vec::new(),
            },
            Message::Tool {
                tool_call_id: "b".into(),
                name: "calc".into(),
                content: "Error: …".into(),
                is_error: true,
                blocks: Vec::new(),
            },
            // An empty answer is left out: the API refuses one sent back.
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![],
                provider_items: vec![],
            },
            Message::user("and now?"),
        ];
        let out = messages(&conversation);
        assert_eq!(out.len(), 3);
        assert_eq!(out[1]["content"][1]["input"], json!({"expression": "1"}));
        assert_eq!(
            out[1]["content"][2]["input"],
            json!({}),
            "garbled arguments become an empty object"
        );
        let results = &out[2]["content"];
        assert_eq!(out[2]["role"], "user");
        assert_eq!(results[0]["type"], "tool_result");
        assert_eq!(results[0]["tool_use_id"], "a");
        assert_eq!(results[1]["is_error"], true);
        assert_eq!(results[2]["type"], "text", "text follows the tool results");
    }
}
