//! OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama …).

use futures::StreamExt as _;
use serde_json::{Value, json};

use super::{
    AssistantToolCall, ClientSettings, EventSink, Message, ModelError, ModelErrorKind, ModelEvent,
    ModelRequest, ModelResponse, ToolChoice, Usage, Wire, sse,
};
use crate::wire::definitions::{Format, tool_definition};
use crate::wire::providers::{self, Vendor};

/// The OpenAI chat-completions wire format: `POST {base_url}/chat/completions`.
#[derive(Debug)]
pub struct OpenAI;

impl Wire for OpenAI {
    const NAME: &'static str = "openai-compatible";
    const PATH: &'static str = "/chat/completions";

    fn body(settings: &ClientSettings, request: &ModelRequest<'_>) -> Value {
        let mut body = json!({
            "model": settings.model,
            "messages": messages(request.messages),
            "max_tokens": request.max_tokens,
            "stream": settings.stream,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| tool_definition(t, Format::OpenAI))
                .collect();
            match request.tool_choice {
                // The endpoint's default: not sent, for servers that do not
                // know the field.
                ToolChoice::Auto => {}
                ToolChoice::Required => body["tool_choice"] = json!("required"),
                ToolChoice::None => body["tool_choice"] = json!("none"),
                ToolChoice::Tool(name) => {
                    body["tool_choice"] = json!({"type": "function", "function": {"name": name}});
                }
            }
            if !request.parallel_tool_calls {
                body["parallel_tool_calls"] = json!(false);
            }
        }
        let sampling = request.sampling;
        if let Some(temperature) = sampling.temperature {
            body["temperature"] = json!(temperature);
        }
        if let Some(top_p) = sampling.top_p {
            body["top_p"] = json!(top_p);
        }
        if let Some(seed) = sampling.seed {
            body["seed"] = json!(seed);
        }
        if !sampling.stop.is_empty() {
            body["stop"] = json!(sampling.stop);
        }
        if let Some(format) = request.response_format {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": format.name, "schema": format.schema, "strict": format.strict},
            });
        }
        if settings.stream {
            body["stream_options"] = json!({"include_usage": true});
        }
        body
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

/// The conversation in OpenAI's shape. Tool messages carry text only, so
/// the images tools returned follow the turn's tool messages in one user
/// message, each after a line naming its call. What OpenAI takes of them
/// is decided in [`crate::wire::providers`], for the whole request.
fn messages(conversation: &[Message]) -> Vec<Value> {
    let mut fitted = super::fitted_tool_results(conversation, Vendor::OpenAI);
    let mut out = Vec::with_capacity(conversation.len());
    let mut images: Vec<Value> = Vec::new();
    for m in conversation.iter().filter(|m| !m.is_empty_turn()) {
        if let Message::Tool {
            tool_call_id,
            content,
            ..
        } = m
        {
            // A text-only result has no blocks: its text is `content`.
            let blocks = fitted.next().unwrap_or_default();
            if blocks.is_empty() {
                out.push(providers::openai_tool_message(tool_call_id, content));
            } else {
                let text = providers::as_text(&blocks);
                out.push(providers::openai_tool_message(tool_call_id, &text));
                images.extend(providers::openai_image_parts(tool_call_id, &blocks));
            }
            continue;
        }
        out.extend(providers::openai_images_message(std::mem::take(
            &mut images,
        )));
        out.push(message(m));
    }
    out.extend(providers::openai_images_message(images));
    out
}

/// One message in OpenAI's shape. Tool errors are spelled out in `content`.
fn message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            let mut m = json!({"role": "assistant", "content": if content.is_empty() { Value::Null } else { json!(content) }});
            if !tool_calls.is_empty() {
                m["tool_calls"] = tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            m
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => providers::openai_tool_message(tool_call_id, content),
    }
}

/// Arguments as text: most endpoints send a JSON string, some an object.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn usage(value: &Value) -> Usage {
    Usage {
        input_tokens: value["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: value["completion_tokens"].as_u64().unwrap_or(0),
    }
}

fn parse_response(body: &Value) -> Result<ModelResponse, ModelError> {
    let choice = body["choices"].get(0).ok_or_else(|| {
        ModelError::new(
            ModelErrorKind::Protocol,
            format!(
                "the answer has no choices: {}",
                super::excerpt(&body.to_string())
            ),
        )
    })?;
    let message = &choice["message"];
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, call)| AssistantToolCall {
                    id: call["id"]
                        .as_str()
                        .map_or_else(|| format!("call_{i}"), str::to_owned),
                    name: call["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    arguments: arguments_text(&call["function"]["arguments"]),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(ModelResponse {
        content: message["content"].as_str().unwrap_or_default().to_owned(),
        tool_calls,
        stop_reason: choice["finish_reason"].as_str().map(str::to_owned),
        usage: usage(&body["usage"]),
        provider_items: Vec::new(),
    })
}

/// A tool call being assembled from stream deltas.
#[derive(Default)]
struct Partial {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Tool calls arrive in pieces keyed by `index`, with `id` on the first
/// piece. Some servers reuse index 0 for every call of a parallel batch, so a
/// new `id` always starts a new call; a piece without an id continues the
/// latest call with its index.
#[derive(Default)]
struct Assembler {
    calls: Vec<Partial>,
}

impl Assembler {
    fn push(&mut self, delta: &Value) {
        let index = delta["index"].as_u64();
        let id = delta["id"].as_str().filter(|id| !id.is_empty());
        let position = match id {
            Some(id) => match self.calls.iter().position(|c| c.id.as_deref() == Some(id)) {
                Some(position) => position,
                None => {
                    self.calls.push(Partial {
                        index,
                        id: Some(id.to_owned()),
                        ..Partial::default()
                    });
                    self.calls.len() - 1
                }
            },
            None => match self
                .calls
                .iter()
                .rposition(|c| index.is_none() || c.index == index)
            {
                Some(position) => position,
                None => {
                    self.calls.push(Partial {
                        index,
                        ..Partial::default()
                    });
                    self.calls.len() - 1
                }
            },
        };
        let call = &mut self.calls[position];
        if let Some(name) = delta["function"]["name"].as_str() {
            // Names come whole, but tolerate servers that split them.
            call.name.push_str(name);
        }
        match &delta["function"]["arguments"] {
            Value::String(piece) => call.arguments.push_str(piece),
            Value::Null => {}
            whole => call.arguments.push_str(&whole.to_string()),
        }
    }

    fn finish(self) -> Vec<AssistantToolCall> {
        self.calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| AssistantToolCall {
                id: c.id.unwrap_or_else(|| format!("call_{i}")),
                name: c.name,
                arguments: c.arguments,
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
    let mut calls = Assembler::default();
    let mut done = false;
    while let Some(event) = stream.next().await {
        let event = event?;
        if event.data.trim() == "[DONE]" {
            done = true;
            break;
        }
        if event.data.trim().is_empty() {
            continue;
        }
        let chunk: Value = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::new(
                ModelErrorKind::Protocol,
                format!(
                    "a stream chunk is not JSON ({e}): {}",
                    super::excerpt(&event.data)
                ),
            )
        })?;
        if let Some(error) = chunk.get("error") {
            return Err(ModelError::new(
                ModelErrorKind::Overloaded,
                format!(
                    "the model endpoint failed mid-stream: {}",
                    super::excerpt(&error.to_string())
                ),
            ));
        }
        if chunk["usage"].is_object() {
            answer.usage = usage(&chunk["usage"]);
        }
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            answer.content.push_str(text);
            events(ModelEvent::TextDelta(text.to_owned()));
        }
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            calls.push(call);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            answer.stop_reason = Some(reason.to_owned());
        }
    }
    // Without [DONE], only a finish_reason shows the answer is whole.
    if !done && answer.stop_reason.is_none() {
        return Err(sse::cut());
    }
    answer.tool_calls = calls.finish();
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::image::tests::{gif_of, png_of};

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

    /// Issue 24: OpenAI takes PNG, JPEG, WebP and still GIF images: an
    /// animated one reads as a line in the tool message, the others follow
    /// the turn's tool messages in one user message.
    #[test]
    fn images_openai_cannot_take_are_lines_in_the_tool_message() {
        let conversation = [
            answer("a", vec![image("image/gif", gif_of(2))]),
            answer("b", vec![image("image/png", png_of(2, 2, 0))]),
            Message::user("and now?"),
        ];
        let out = messages(&conversation);
        let roles: Vec<&str> = out.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["tool", "tool", "user", "user"]);
        assert_eq!(
            out[0],
            json!({"role": "tool", "tool_call_id": "a",
                   "content": "[image dropped: an animated GIF, 85 B; OpenAI takes PNG, JPEG, WebP and still GIF images]"})
        );
        let parts = out[2]["content"].as_array().unwrap();
        assert_eq!(parts.len(), 2, "only b's image: {parts:?}");
        assert_eq!(parts[0]["text"], "Image returned by tool call b:");
    }

    fn assemble(deltas: &[Value]) -> Vec<AssistantToolCall> {
        let mut assembler = Assembler::default();
        for delta in deltas {
            assembler.push(delta);
        }
        assembler.finish()
    }

    #[test]
    fn deltas_assemble_by_index() {
        let calls = assemble(&[
            json!({"index": 0, "id": "a", "function": {"name": "calc", "arguments": "{\"ex"}}),
            json!({"index": 1, "id": "b", "function": {"name": "echo", "arguments": ""}}),
            json!({"index": 0, "function": {"arguments": "pression\":\"1\"}"}}),
            json!({"index": 1, "function": {"arguments": "{}"}}),
        ]);
        assert_eq!(calls.len(), 2);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].arguments.as_str()),
            ("a", "{\"expression\":\"1\"}")
        );
        assert_eq!(
            (calls[1].name.as_str(), calls[1].arguments.as_str()),
            ("echo", "{}")
        );
    }

    #[test]
    fn a_new_id_at_a_reused_index_starts_a_new_call() {
        let calls = assemble(&[
            json!({"index": 0, "id": "a", "function": {"name": "calc", "arguments": "{\"expression\":"}}),
            json!({"index": 0, "function": {"arguments": "\"1\"}"}}),
            json!({"index": 0, "id": "b", "function": {"name": "calc", "arguments": "{\"expression\":\"2\"}"}}),
        ]);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[0].arguments, "{\"expression\":\"1\"}");
        assert_eq!(calls[1].arguments, "{\"expression\":\"2\"}");
    }

    #[test]
    fn arguments_sent_whole_as_an_object_are_kept() {
        let calls = assemble(&[
            json!({"index": 0, "id": "a", "function": {"name": "calc", "arguments": {"expression": "1"}}}),
        ]);
        assert_eq!(calls[0].arguments, "{\"expression\":\"1\"}");
    }
}
