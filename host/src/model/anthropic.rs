//! The Anthropic Messages API.
//!
//! Tool results of a turn go back as `tool_result` blocks, all in one user
//! message, first (before any text), as the API requires.

use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::stream::{Lenient, view};
use super::{
    AnswerError, AssistantToolCall, ClientSettings, Message, ModelError, ModelErrorKind,
    ModelRequest, ModelResponse, StreamedAnswer, ToolChoice, Usage, Wire, sse,
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
    type Answer = Answer;
    type Event = Event;
    type Reader = Reader;

    fn body<'a>(
        settings: &'a ClientSettings,
        request: &'a ModelRequest<'a>,
    ) -> impl Serialize + Send + 'a {
        let (tools, tool_choice) = tools(request);
        let sampling = request.sampling;
        MessagesRequest {
            model: &settings.model,
            max_tokens: request.max_tokens,
            messages: messages(request.messages),
            stream: settings.stream,
            system: super::system_text(request.messages),
            tools,
            tool_choice,
            // Unchanged: `LoopControls::check` keeps it within 0 to 1.
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            stop_sequences: &sampling.stop,
        }
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

    fn answer(whole: Answer) -> Result<ModelResponse, AnswerError> {
        answer(whole)
    }

    fn read(
        reader: &mut Reader,
        event: Event,
        answer: &mut StreamedAnswer<'_>,
    ) -> Result<ControlFlow<()>, ModelError> {
        read(reader, event, answer)
    }

    fn finish(reader: Reader, answer: StreamedAnswer<'_>) -> Result<ModelResponse, ModelError> {
        finish(reader, answer)
    }
}

/// A Messages API request. What is not set is not sent.
#[derive(Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    messages: Vec<Value>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

/// The tools of a request and the choice among them, when there are any.
/// A structured answer is given through a tool whose input is the answer
/// (the API has no response format of its own), and the model must call a
/// tool to answer at all. The choice is only sent when it says more than
/// the default, `auto`.
fn tools(request: &ModelRequest<'_>) -> (Option<Vec<Value>>, Option<Value>) {
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|t| tool_definition(t, Format::Anthropic))
        .collect();
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
    if tools.is_empty() {
        return (None, None);
    }
    let mut tool_choice = match &choice {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
    };
    if !request.parallel_tool_calls
        && choice != ToolChoice::None
        && let Value::Object(fields) = &mut tool_choice
    {
        fields.insert("disable_parallel_tool_use".to_owned(), Value::Bool(true));
    }
    let tool_choice = (tool_choice != json!({"type": "auto"})).then_some(tool_choice);
    (Some(tools), tool_choice)
}

/// The conversation in Anthropic's shape: user and assistant messages
/// alternate, tool results of a turn share one user message, before any text.
fn messages(conversation: &[Message]) -> Vec<Value> {
    let mut fitted = super::fitted_tool_results(conversation, Vendor::Anthropic);
    let mut out: Vec<Turn> = Vec::new();
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
                    Some(last) if last.role == USER => {
                        last.blocks.push(block);
                        last.results_only = false;
                    }
                    _ => out.push(Turn::new(USER, block, false)),
                }
            }
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if let Some(turn) = assistant_turn(content, tool_calls) {
                    out.push(turn);
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
                    Some(last) if last.role == USER && last.results_only => last.blocks.push(block),
                    _ => out.push(Turn::new(USER, block, true)),
                }
            }
        }
    }
    out.into_iter()
        .map(|turn| json!({"role": turn.role, "content": turn.blocks}))
        .collect()
}

const USER: &str = "user";

/// A message of the request as it is built.
struct Turn {
    role: &'static str,
    blocks: Vec<Value>,
    /// Whether every block is a tool result, so that the turn's next
    /// result joins them.
    results_only: bool,
}

impl Turn {
    fn new(role: &'static str, block: Value, results_only: bool) -> Self {
        Self {
            role,
            blocks: vec![block],
            results_only,
        }
    }
}

/// An assistant turn's blocks, if it has any: its text, unless blank
/// (models often write a blank line before their tool calls, and the API
/// refuses it sent back as a text block), then its tool calls.
fn assistant_turn(content: &str, tool_calls: &[AssistantToolCall]) -> Option<Turn> {
    let mut blocks = Vec::new();
    if !content.trim().is_empty() {
        blocks.push(json!({"type": "text", "text": content}));
    }
    for call in tool_calls {
        let input = call.arguments_object();
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    (!blocks.is_empty()).then_some(Turn {
        role: "assistant",
        blocks,
        results_only: false,
    })
}

/// A whole Messages API answer.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Answer {
    content: Lenient<Vec<Lenient<Block>>>,
    stop_reason: Lenient<String>,
    usage: Lenient<AnthropicUsage>,
}

/// A content block of an answer, whole or as it starts in a stream.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    Text(TextBlock),
    ToolUse(ToolUse),
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct TextBlock {
    text: Lenient<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ToolUse {
    id: Lenient<String>,
    name: Lenient<String>,
    /// The input whole; a stream's starts empty and comes in pieces.
    input: Value,
}

/// Token counts. Anthropic counts cached prompt tokens apart from
/// `input_tokens`; the prompt's size is their sum.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct AnthropicUsage {
    input_tokens: Lenient<u64>,
    cache_read_input_tokens: Lenient<u64>,
    cache_creation_input_tokens: Lenient<u64>,
    output_tokens: Lenient<u64>,
}

impl AnthropicUsage {
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self
                .input_tokens
                .count()
                .saturating_add(self.cache_read_input_tokens.count())
                .saturating_add(self.cache_creation_input_tokens.count()),
            output_tokens: self.output_tokens.count(),
        }
    }
}

/// One event of a streamed answer.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// The message begins: its prompt's token counts.
    MessageStart(MessageStart),
    /// A content block begins.
    ContentBlockStart(BlockStart),
    /// A piece of a content block.
    ContentBlockDelta(BlockDelta),
    /// Why generation stopped, and the output tokens so far.
    MessageDelta(MessageDelta),
    /// The message is complete.
    MessageStop,
    /// A failure mid-stream.
    Error(StreamError),
    /// `ping`, `content_block_stop` and whatever comes new: nothing to read.
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct MessageStart {
    message: Lenient<StartedMessage>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct StartedMessage {
    usage: Lenient<AnthropicUsage>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct BlockStart {
    index: Lenient<u64>,
    content_block: Lenient<Block>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct BlockDelta {
    index: Lenient<u64>,
    delta: Lenient<Delta>,
}

/// A piece of a content block.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text(TextBlock),
    #[serde(rename = "input_json_delta")]
    InputJson(JsonPiece),
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct JsonPiece {
    partial_json: Lenient<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct MessageDelta {
    delta: Lenient<StopDelta>,
    usage: Lenient<AnthropicUsage>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct StopDelta {
    stop_reason: Lenient<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct StreamError {
    /// The failure, quoted as it came.
    error: Value,
}

/// The kind of a failure, from its `type`.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ErrorType {
    #[serde(rename = "type")]
    kind: Lenient<String>,
}

fn answer(answer: Answer) -> Result<ModelResponse, AnswerError> {
    let blocks = answer
        .content
        .0
        .ok_or(AnswerError::Lacks("content blocks"))?;
    let mut response = ModelResponse {
        stop_reason: answer.stop_reason.0,
        usage: answer.usage.0.unwrap_or_default().usage(),
        ..ModelResponse::default()
    };
    for block in blocks.into_iter().filter_map(|block| block.0) {
        match block {
            Block::Text(text) => response.content.push_str(text.text.or_empty()),
            Block::ToolUse(call) => response.tool_calls.push(AssistantToolCall {
                id: call.id.0.unwrap_or_default(),
                name: call.name.0.unwrap_or_default(),
                arguments: call.input.to_string(),
            }),
            Block::Other => {}
        }
    }
    Ok(response)
}

/// Whether the stream said its message is complete.
#[derive(Debug, Default)]
pub struct Reader {
    stopped: bool,
}

fn read(
    reader: &mut Reader,
    event: Event,
    answer: &mut StreamedAnswer<'_>,
) -> Result<ControlFlow<()>, ModelError> {
    match event {
        Event::MessageStart(start) => {
            if let Some(usage) = start.message.0.and_then(|message| message.usage.0) {
                answer.usage += usage.usage();
            }
        }
        Event::ContentBlockStart(start) => {
            // Blocks by position; some servers close them all only at the end.
            let index = start.index.0.or(Some(answer.parts() as u64));
            match start.content_block.0 {
                Some(Block::ToolUse(call)) => answer.start_call(
                    index,
                    Some(call.id.0.unwrap_or_default()),
                    call.name.0.unwrap_or_default(),
                ),
                Some(Block::Text(text)) => {
                    answer.text(text.text.or_empty());
                    answer.start_part(index);
                }
                Some(Block::Other) | None => answer.start_part(index),
            }
        }
        Event::ContentBlockDelta(piece) => match piece.delta.0 {
            Some(Delta::Text(text)) => answer.text(text.text.or_empty()),
            Some(Delta::InputJson(json)) => {
                answer.arguments(piece.index.0, json.partial_json.or_empty());
            }
            Some(Delta::Other) | None => {}
        },
        Event::MessageDelta(delta) => {
            if let Some(reason) = delta.delta.0.and_then(|delta| delta.stop_reason.0) {
                answer.stop_reason = Some(reason);
            }
            // Output tokens here are cumulative for the message.
            if let Some(output) = delta.usage.0.and_then(|usage| usage.output_tokens.0) {
                answer.usage.output_tokens = output;
            }
        }
        Event::MessageStop => {
            reader.stopped = true;
            return Ok(ControlFlow::Break(()));
        }
        Event::Error(failure) => {
            let kind = match view::<ErrorType>(&failure.error).kind.0.as_deref() {
                Some("overloaded_error" | "api_error") => ModelErrorKind::Overloaded,
                _ => ModelErrorKind::Protocol,
            };
            return Err(ModelError::new(
                kind,
                format!(
                    "the model endpoint failed mid-stream: {}",
                    super::excerpt(&failure.error.to_string())
                ),
            ));
        }
        Event::Other => {}
    }
    Ok(ControlFlow::Continue(()))
}

/// The streamed answer, if its message stopped; a tool call's empty input
/// streams as no pieces at all, and is `{}`.
fn finish(reader: Reader, answer: StreamedAnswer<'_>) -> Result<ModelResponse, ModelError> {
    if !reader.stopped {
        return Err(sse::cut());
    }
    let mut response = answer.finish();
    for call in &mut response.tool_calls {
        if call.arguments.trim().is_empty() {
            "{}".clone_into(&mut call.arguments);
        }
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{answer, image};
    use crate::outcome::ContentBlock;
    use crate::wire::image::tests::png_of;

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
