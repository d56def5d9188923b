//! OpenAI-compatible chat completions (OpenAI, vLLM, llama.cpp, Ollama …).

use std::ops::ControlFlow;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::stream::{ArgumentsText, Lenient};
use super::{
    AnswerError, AssistantToolCall, ClientSettings, Message, ModelError, ModelErrorKind,
    ModelRequest, ModelResponse, Sampling, StreamedAnswer, ToolChoice, Usage, Wire, sse,
};
use crate::spec::ToolSpec;
use crate::wire::definitions::{Format, tool_definition};
use crate::wire::providers::{self, Vendor};

/// The OpenAI chat-completions wire format: `POST {base_url}/chat/completions`.
#[derive(Debug)]
pub struct OpenAI;

impl Wire for OpenAI {
    const NAME: &'static str = "openai-compatible";
    const PATH: &'static str = "/chat/completions";
    type Answer = Completion;
    type Event = Chunk;
    type Reader = ();

    fn body<'a>(
        settings: &'a ClientSettings,
        request: &'a ModelRequest<'a>,
    ) -> impl Serialize + Send + 'a {
        ChatRequest {
            model: &settings.model,
            messages: messages(request.messages),
            max_tokens: request.max_tokens,
            stream: settings.stream,
            tools: OfferedTools::new(
                request,
                |tool| tool_definition(tool, Format::OpenAI),
                |name| json!({"type": "function", "function": {"name": name}}),
            ),
            sampling: request.sampling,
            response_format: request.response_format.map(|format| {
                json!({
                    "type": "json_schema",
                    "json_schema": {"name": format.name, "schema": format.schema, "strict": format.strict},
                })
            }),
            stream_options: settings
                .stream
                .then(|| json!({"include_usage": true})),
        }
    }

    fn answer(completion: Completion) -> Result<ModelResponse, AnswerError> {
        answer(completion)
    }

    fn read(
        (): &mut (),
        chunk: Chunk,
        answer: &mut StreamedAnswer<'_>,
    ) -> Result<ControlFlow<()>, ModelError> {
        read(chunk, answer).map(ControlFlow::Continue)
    }

    fn finish((): (), answer: StreamedAnswer<'_>) -> Result<ModelResponse, ModelError> {
        finish(answer)
    }
}

/// A chat-completions request. What is not set is not sent, so that the
/// endpoint's defaults apply and servers that do not know a field are not
/// sent it.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<Value>,
    max_tokens: u32,
    stream: bool,
    #[serde(flatten)]
    tools: OfferedTools,
    /// Temperature, top_p, seed and stop, as OpenAI names them.
    #[serde(flatten)]
    sampling: &'a Sampling,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

/// The tools a request offers, as both of OpenAI's APIs take them: their
/// definitions, the choice, and `parallel_tool_calls: false` when calls
/// must come one at a time. With no tool offered nothing is sent, and the
/// choice `auto` is the endpoints' default, not sent either, for servers
/// that do not know the fields.
#[derive(Serialize)]
pub(super) struct OfferedTools {
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parallel_tool_calls: Option<bool>,
}

impl OfferedTools {
    /// The request's tools, each written by `definition`; `named` writes
    /// the choice of one tool by its name.
    pub(super) fn new(
        request: &ModelRequest<'_>,
        definition: impl Fn(&ToolSpec) -> Value,
        named: impl Fn(&str) -> Value,
    ) -> Self {
        if request.tools.is_empty() {
            return Self {
                tools: None,
                tool_choice: None,
                parallel_tool_calls: None,
            };
        }
        Self {
            tools: Some(request.tools.iter().map(definition).collect()),
            tool_choice: match request.tool_choice {
                ToolChoice::Auto => None,
                ToolChoice::Required => Some(json!("required")),
                ToolChoice::None => Some(json!("none")),
                ToolChoice::Tool(name) => Some(named(name)),
            },
            parallel_tool_calls: (!request.parallel_tool_calls).then_some(false),
        }
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
            let content = if content.is_empty() {
                Value::Null
            } else {
                json!(content)
            };
            if tool_calls.is_empty() {
                return json!({"role": "assistant", "content": content});
            }
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_text()}}))
                .collect();
            json!({"role": "assistant", "content": content, "tool_calls": calls})
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => providers::openai_tool_message(tool_call_id, content),
    }
}

/// A whole chat completion.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Completion {
    choices: Lenient<Vec<Lenient<Choice>>>,
    usage: Lenient<ChatUsage>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct Choice {
    message: Lenient<ChatMessage>,
    finish_reason: Lenient<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ChatMessage {
    content: Lenient<String>,
    tool_calls: Lenient<Vec<Lenient<ChatToolCall>>>,
}

/// A tool call, whole or a piece of one.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ChatToolCall {
    index: Lenient<u64>,
    id: Lenient<String>,
    function: Lenient<Function>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct Function {
    name: Lenient<String>,
    arguments: ArgumentsText,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ChatUsage {
    prompt_tokens: Lenient<u64>,
    completion_tokens: Lenient<u64>,
}

impl ChatUsage {
    fn usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.count(),
            output_tokens: self.completion_tokens.count(),
        }
    }
}

/// One chunk of a streamed chat completion (they carry no `type`).
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
pub struct Chunk {
    /// A failure mid-stream, quoted as it came.
    error: Option<Value>,
    usage: Lenient<ChatUsage>,
    choices: Lenient<Vec<Lenient<ChunkChoice>>>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct ChunkChoice {
    delta: Lenient<Delta>,
    finish_reason: Lenient<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct Delta {
    content: Lenient<String>,
    tool_calls: Lenient<Vec<Lenient<ChatToolCall>>>,
}

/// The first of `choices`, if it reads as one.
fn first<T: Default>(choices: Lenient<Vec<Lenient<T>>>) -> Option<T> {
    let first = choices.0?.into_iter().next()?;
    Some(first.0.unwrap_or_default())
}

/// The items of a list, in order; one that does not read as a `T` is an
/// empty one (a call with no name is answered as an unknown tool).
fn each<T: Default>(list: Lenient<Vec<Lenient<T>>>) -> impl Iterator<Item = T> {
    list.0
        .into_iter()
        .flatten()
        .map(|item| item.0.unwrap_or_default())
}

fn answer(completion: Completion) -> Result<ModelResponse, AnswerError> {
    let choice = first(completion.choices).ok_or(AnswerError::Lacks("choices"))?;
    let message = choice.message.0.unwrap_or_default();
    let tool_calls = each(message.tool_calls)
        .enumerate()
        .map(|(i, call)| {
            let function = call.function.0.unwrap_or_default();
            AssistantToolCall {
                id: call.id.0.unwrap_or_else(|| format!("call_{i}")),
                name: function.name.0.unwrap_or_default(),
                arguments: function.arguments.0,
            }
        })
        .collect();
    Ok(ModelResponse {
        content: message.content.0.unwrap_or_default(),
        tool_calls,
        stop_reason: choice.finish_reason.0,
        usage: completion.usage.0.unwrap_or_default().usage(),
        provider_items: Vec::new(),
    })
}

/// Take in one chunk: the stream goes on to `[DONE]` or its end.
fn read(chunk: Chunk, answer: &mut StreamedAnswer<'_>) -> Result<(), ModelError> {
    if let Some(error) = chunk.error {
        return Err(ModelError::new(
            ModelErrorKind::Overloaded,
            format!(
                "the model endpoint failed mid-stream: {}",
                super::excerpt(&error.to_string())
            ),
        ));
    }
    if let Some(usage) = chunk.usage.0 {
        answer.usage = usage.usage();
    }
    let Some(choice) = first(chunk.choices) else {
        return Ok(());
    };
    let delta = choice.delta.0.unwrap_or_default();
    answer.text(delta.content.or_empty());
    for call in each(delta.tool_calls) {
        let function = call.function.0.unwrap_or_default();
        answer.call_piece(
            call.index.0,
            call.id.0.as_deref(),
            function.name.or_empty(),
            &function.arguments.0,
        );
    }
    if let Some(reason) = choice.finish_reason.0 {
        answer.stop_reason = Some(reason);
    }
    Ok(())
}

/// The streamed answer, if whole: without `[DONE]`, only a `finish_reason`
/// shows it is.
fn finish(answer: StreamedAnswer<'_>) -> Result<ModelResponse, ModelError> {
    if !answer.said_done() && answer.stop_reason.is_none() {
        return Err(sse::cut());
    }
    Ok(answer.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::{answer, image};
    use crate::wire::image::tests::{gif_of, png_of};

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

    fn read_all(chunks: &[Value]) -> Result<ModelResponse, ModelError> {
        let sink = |_| {};
        let mut answer = StreamedAnswer::new(&sink);
        for chunk in chunks {
            let chunk: Chunk = serde_json::from_value(chunk.clone()).unwrap();
            read(chunk, &mut answer)?;
        }
        finish(answer)
    }

    fn deltas(calls: &[Value]) -> Vec<Value> {
        let mut chunks: Vec<Value> = calls
            .iter()
            .map(|call| json!({"choices": [{"delta": {"tool_calls": [call]}}]}))
            .collect();
        chunks.push(json!({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}));
        chunks
    }

    fn assemble(calls: &[Value]) -> Vec<AssistantToolCall> {
        read_all(&deltas(calls)).unwrap().tool_calls
    }

    /// A model cut off at its token limit mid-call leaves arguments that are
    /// no JSON; sent back as they came, llama.cpp refuses the whole
    /// conversation (500), so the run could never go on. They go back as
    /// `{}`; whole arguments go back byte for byte.
    #[test]
    fn garbled_arguments_go_back_as_an_empty_object() {
        let call = |id: &str, arguments: &str| AssistantToolCall {
            id: id.into(),
            name: "calc".into(),
            arguments: arguments.into(),
        };
        let conversation = [Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                call("a", "{\n  \"expression\": \"1\"\n}"),
                call("b", "{\n  \"expression\": \"1234 * 5678"),
                call("c", "[1]"),
            ],
            provider_items: Vec::new(),
        }];
        let sent: Vec<Value> = messages(&conversation)[0]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["function"]["arguments"].clone())
            .collect();
        assert_eq!(
            sent,
            [
                json!("{\n  \"expression\": \"1\"\n}"),
                json!("{}"),
                json!("{}")
            ]
        );
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

    #[test]
    fn an_error_chunk_is_an_overload_and_a_stream_without_an_end_is_cut() {
        let error = read_all(&[json!({"error": {"message": "busy"}})]).unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Overloaded);
        assert_eq!(
            error.message,
            "the model endpoint failed mid-stream: {\"message\":\"busy\"}"
        );
        let error = read_all(&[json!({"choices": [{"delta": {"content": "Hi"}}]})]).unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::StreamCut);
    }

    #[test]
    fn a_whole_answer_reads_leniently_but_must_have_a_choice() {
        let body = json!({"choices": [{"finish_reason": "tool_calls", "message": {"content": null,
            "tool_calls": [{"function": {"name": "calc", "arguments": "{}"}}, 5]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": "x"}});
        let answer = OpenAI::parse_response(body.to_string().as_bytes()).unwrap();
        assert_eq!(answer.content, "");
        // What is no call reads as one without a name, which the loop
        // answers as an unknown tool.
        assert_eq!(answer.tool_calls.len(), 2);
        assert_eq!(answer.tool_calls[0].id, "call_0");
        assert_eq!(answer.tool_calls[1].name, "");
        assert_eq!(answer.usage.input_tokens, 3);
        assert_eq!(answer.stop_reason.as_deref(), Some("tool_calls"));
        for body in ["{}", "[1, 2]", "\"text\"", "{\"choices\": []}"] {
            let error = OpenAI::parse_response(body.as_bytes()).unwrap_err();
            assert_eq!(error.kind, ModelErrorKind::Protocol, "{body}");
            assert!(
                error.message.starts_with("the answer has no choices: "),
                "{}",
                error.message
            );
        }
        let error = OpenAI::parse_response(b"{oops").unwrap_err();
        assert!(
            error.message.starts_with("the model's answer is not JSON"),
            "{}",
            error.message
        );
    }
}
