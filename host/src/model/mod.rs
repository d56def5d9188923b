//! Model endpoints: the conversation types, the [`ModelClient`] trait, and
//! clients for OpenAI-compatible chat completions, OpenAI's Responses API
//! and the Anthropic Messages API, streaming or not.
//!
//! Clients make one attempt per call and classify failures; the agent loop
//! decides about retries ([`ModelError::retryable`]), so an embedder's own
//! client gets the same retry policy.

mod anthropic;
pub mod config;
mod error;
mod http;
mod openai;
mod responses;
mod sse;
mod stream;

use futures::future::BoxFuture;
use serde::Serialize;

use config::{ModelConfig, Provider, ResponseFormat, Sampling, ToolChoice};

pub use anthropic::Anthropic;
pub use error::{ClientError, ModelError, ModelErrorKind};
pub use http::{AnswerError, ClientSettings, HttpClient, MAX_ANSWER_BYTES, Wire};
pub use openai::OpenAI;
pub use responses::OpenAIResponses;
pub use stream::StreamedAnswer;

/// A client for an OpenAI-compatible chat-completions endpoint.
pub type OpenAIClient = HttpClient<OpenAI>;
/// A client for the Anthropic Messages API.
pub type AnthropicClient = HttpClient<Anthropic>;
/// A client for OpenAI's Responses API.
pub type OpenAIResponsesClient = HttpClient<OpenAIResponses>;

use crate::spec::ToolSpec;

/// One message of a conversation, in provider-neutral form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
#[non_exhaustive]
pub enum Message {
    /// Instructions for the model.
    System {
        /// The instructions.
        content: String,
    },
    /// What the person said.
    User {
        /// The text.
        content: String,
    },
    /// What the model answered: text, tool calls, or both.
    Assistant {
        /// The text (may be empty when the model only calls tools).
        content: String,
        /// The tool calls, in the model's order.
        tool_calls: Vec<AssistantToolCall>,
        /// The provider's own output items for this turn, verbatim and in
        /// order, to go back as they came: the Responses API's message,
        /// reasoning and `function_call` items, whose ids it pairs up.
        /// Other providers leave it empty; when it is empty, the turn is
        /// sent from `content` and `tool_calls`. The items win over those
        /// fields: a message item goes back as it came, whatever `content`
        /// says now, and so does a call whose `call_id` an item carries.
        /// To send an edited turn, clear the items.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        provider_items: Vec<serde_json::Value>,
    },
    /// The answer to one tool call.
    Tool {
        /// The call this answers.
        tool_call_id: String,
        /// The tool's name.
        name: String,
        /// What the model reads, as text (other blocks described in a line).
        content: String,
        /// Whether the call failed.
        is_error: bool,
        /// Every block, when the result has more than text: Anthropic gets
        /// them in the `tool_result`, OpenAI its images in a user message
        /// after the tool messages.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        blocks: Vec<crate::outcome::ContentBlock>,
    },
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// An assistant turn with no text and no tool calls. Endpoints answer
    /// that way now and then, but refuse it back in a conversation, so
    /// requests leave it out.
    pub(crate) fn is_empty_turn(&self) -> bool {
        matches!(self, Self::Assistant { content, tool_calls, .. } if content.is_empty() && tool_calls.is_empty())
    }
}

/// The blocks of every tool result in `conversation`, in order, as
/// `vendor` takes them in one request (see
/// [`crate::wire::providers::fit_request`]); a text-only result has none.
pub(crate) fn fitted_tool_results(
    conversation: &[Message],
    vendor: crate::wire::providers::Vendor,
) -> std::vec::IntoIter<Vec<crate::outcome::ContentBlock>> {
    let results: Vec<&[crate::outcome::ContentBlock]> = conversation
        .iter()
        .filter_map(|m| match m {
            Message::Tool { blocks, .. } => Some(blocks.as_slice()),
            _ => None,
        })
        .collect();
    crate::wire::providers::fit_request(vendor, &results).into_iter()
}

/// A tool call as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AssistantToolCall {
    /// The id the answer must carry.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as JSON text, exactly as the model wrote them (possibly
    /// not valid JSON: the dispatcher answers that with `invalid_arguments`).
    pub arguments: String,
}

impl AssistantToolCall {
    /// The arguments as sent back to the model in the conversation: the
    /// object the model wrote, or an empty one when its text was not a JSON
    /// object. Endpoints refuse a conversation holding garbled arguments
    /// (llama.cpp answers 500; Anthropic's `input` must be an object), and a
    /// model cut off at its token limit mid-call writes exactly those. The
    /// call itself was answered with `invalid_arguments`, which tells the
    /// model what was wrong.
    #[must_use]
    pub fn arguments_object(&self) -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(&self.arguments)
            .ok()
            .filter(serde_json::Value::is_object)
            .unwrap_or_else(|| serde_json::Value::Object(serde_json::Map::new()))
    }

    /// The arguments as JSON text to send back: the model's own text when it
    /// is a JSON object (kept byte for byte, so a cached prompt prefix still
    /// matches), else `{}` (see [`AssistantToolCall::arguments_object`]).
    #[must_use]
    pub fn arguments_text(&self) -> &str {
        if is_json_object(&self.arguments) {
            &self.arguments
        } else {
            "{}"
        }
    }
}

/// Whether `text` is one JSON object and nothing else: what a tool call's
/// arguments must be for an endpoint to take them back. Checked without
/// building the value.
pub(crate) fn is_json_object(text: &str) -> bool {
    serde_json::from_str::<std::collections::HashMap<String, serde::de::IgnoredAny>>(text).is_ok()
}

/// What the agent asks of the model.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The conversation so far.
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
    /// The most tokens to generate.
    pub max_tokens: u32,
    /// Whether the model must call a tool on this step.
    pub tool_choice: &'a ToolChoice,
    /// Whether it may call several in one turn.
    pub parallel_tool_calls: bool,
    /// Sampling, passed through where the provider accepts it.
    pub sampling: &'a Sampling,
    /// A schema the final answer must satisfy.
    pub response_format: Option<&'a ResponseFormat>,
}

impl<'a> ModelRequest<'a> {
    /// A request with the endpoint's defaults for everything but the
    /// conversation, the tools and `max_tokens`.
    pub fn new(messages: &'a [Message], tools: &'a [ToolSpec], max_tokens: u32) -> Self {
        static DEFAULT: Sampling = Sampling {
            temperature: None,
            top_p: None,
            seed: None,
            stop: Vec::new(),
        };
        Self {
            messages,
            tools,
            max_tokens,
            tool_choice: ToolChoice::AUTO,
            parallel_tool_calls: true,
            sampling: &DEFAULT,
            response_format: None,
        }
    }
}

/// Token counts, as the endpoint reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
}

impl Usage {
    /// Input and output tokens together.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        // Saturating: the counts come from the endpoint, which may lie.
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

/// The model's answer to one request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelResponse {
    /// The text.
    pub content: String,
    /// The tool calls, in order.
    pub tool_calls: Vec<AssistantToolCall>,
    /// Why generation stopped, as the endpoint says it (`stop`, `tool_calls`,
    /// `end_turn`, `max_tokens` …).
    pub stop_reason: Option<String>,
    /// Token counts.
    pub usage: Usage,
    /// Items to send back with this turn (see [`Message::Assistant`]).
    pub provider_items: Vec<serde_json::Value>,
}

/// Something a streaming client reports while the answer comes in.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelEvent {
    /// A piece of the answer's text.
    TextDelta(String),
}

/// Receives [`ModelEvent`]s as they happen.
pub type EventSink<'a> = &'a (dyn Fn(ModelEvent) + Send + Sync);

/// A model endpoint. Implement it to plug in another provider.
pub trait ModelClient: Send + Sync {
    /// Make one attempt at `request`, reporting text as it streams in.
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        events: EventSink<'a>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;

    /// A short description for logs, e.g. `openai qwen2.5-coder at http://…`.
    fn describe(&self) -> String;

    /// The fewest tokens a request may ask the endpoint to generate (the
    /// Responses API refuses fewer than 16): a run whose token budget
    /// leaves less ends instead.
    fn min_output_tokens(&self) -> u32 {
        1
    }
}

/// The client `config` asks for.
///
/// # Errors
///
/// When the API key variable is missing or the HTTP client cannot be built.
pub fn client_for(config: &ModelConfig) -> Result<Box<dyn ModelClient>, ClientError> {
    let settings = ClientSettings::from_config(config)?;
    Ok(match config.provider {
        Provider::OpenAI => Box::new(OpenAIClient::new(settings)?),
        Provider::OpenAIResponses => Box::new(OpenAIResponsesClient::new(settings)?),
        Provider::Anthropic => Box::new(AnthropicClient::new(settings)?),
    })
}

/// The system messages of `conversation`, in order and apart by a blank
/// line: what Anthropic takes as `system` and the Responses API as
/// `instructions`. None when there are none.
pub(crate) fn system_text(conversation: &[Message]) -> Option<String> {
    let system: Vec<&str> = conversation
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    (!system.is_empty()).then(|| system.join("\n\n"))
}

/// At most 500 characters of what an endpoint sent, for an error message:
/// enough to show what went wrong, never a whole answer in a log line.
pub(crate) fn excerpt(text: &str) -> String {
    crate::outcome::clip(text, 500)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::Message;
    use crate::outcome::{ContentBlock, Media};

    /// A tool's answer holding `blocks`, as the agent loop records it.
    pub(crate) fn answer(id: &str, blocks: Vec<ContentBlock>) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "draw".into(),
            content: crate::wire::providers::as_text(&blocks),
            is_error: false,
            blocks,
        }
    }

    /// An image block of `mime_type` holding `data`.
    pub(crate) fn image(mime_type: &str, data: Vec<u8>) -> ContentBlock {
        ContentBlock::Image(Media {
            mime_type: mime_type.into(),
            data: data.into(),
        })
    }

    #[test]
    fn the_system_text_is_every_system_message_in_order() {
        let conversation = [
            Message::system("be brief"),
            Message::user("hi"),
            Message::system("be kind"),
        ];
        assert_eq!(
            super::system_text(&conversation).as_deref(),
            Some("be brief\n\nbe kind")
        );
        assert_eq!(super::system_text(&[Message::user("hi")]), None);
    }
}
