//! Model endpoints: the conversation types, the [`ModelClient`] trait, and
//! clients for OpenAI-compatible chat completions, OpenAI's Responses API
//! and the Anthropic Messages API, streaming or not.
//!
//! Clients make one attempt per call and classify failures; the agent loop
//! decides about retries ([`ModelError::retryable`]), so an embedder's own
//! client gets the same retry policy.

mod anthropic;
pub mod config;
mod openai;
mod responses;
mod sse;

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Serialize;

pub use anthropic::Anthropic;
pub use config::{ModelConfig, Prices, Provider, ResponseFormat, Sampling, ToolChoice};
pub use openai::OpenAI;
pub use responses::OpenAIResponses;

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

/// What kind of failure a model call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The endpoint answered with an HTTP error status.
    Status(u16),
    /// No connection, or it broke before an answer.
    Connection,
    /// No answer in time.
    Timeout,
    /// A stream ended before the answer was complete.
    StreamCut,
    /// The endpoint said it is overloaded or failed mid-stream.
    Overloaded,
    /// The answer could not be understood.
    Protocol,
}

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ModelError {
    /// The kind of failure.
    pub kind: ModelErrorKind,
    /// What happened, for the operator. Never contains the API key.
    pub message: String,
    /// How long the endpoint asked us to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl ModelError {
    pub(crate) fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether trying again may succeed: rate limits, server errors,
    /// timeouts, broken connections and cut streams. Client errors (bad
    /// request, bad key, unknown model) are final.
    pub fn retryable(&self) -> bool {
        match self.kind {
            ModelErrorKind::Status(status) => {
                status == 408 || status == 409 || status == 429 || status >= 500
            }
            ModelErrorKind::Connection
            | ModelErrorKind::Timeout
            | ModelErrorKind::StreamCut
            | ModelErrorKind::Overloaded => true,
            ModelErrorKind::Protocol => false,
        }
    }

    /// Classify a reqwest failure.
    pub(crate) fn from_reqwest(error: &reqwest::Error, what: &str) -> Self {
        let kind = if error.is_timeout() {
            ModelErrorKind::Timeout
        } else if error.is_decode() {
            ModelErrorKind::Protocol
        } else {
            ModelErrorKind::Connection
        };
        // reqwest's messages name the URL, never the headers.
        let mut message = format!("{what}: {error}");
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message += &format!(": {cause}");
            source = cause.source();
        }
        Self::new(kind, message)
    }

    /// An HTTP error status with the start of its body.
    pub(crate) fn from_status(
        status: reqwest::StatusCode,
        retry_after: Option<Duration>,
        body: &str,
    ) -> Self {
        let hint = match status.as_u16() {
            401 | 403 => {
                " (check the API key: [model] api_key_env names the variable that holds it)"
            }
            404 => " (check [model] base_url and model)",
            _ => "",
        };
        let body = excerpt(body);
        Self {
            kind: ModelErrorKind::Status(status.as_u16()),
            message: format!("the model endpoint answered {status}{hint}: {body}"),
            retry_after,
        }
    }
}

/// Settings shared by both clients.
#[derive(Clone)]
pub struct ClientSettings {
    /// Base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// The API key, if the endpoint needs one.
    pub api_key: Option<String>,
    /// Stream answers (SSE) rather than wait for them whole.
    pub stream: bool,
    /// Give up on an attempt after this long without a byte (streaming) or
    /// without the whole answer (not streaming).
    pub timeout: Duration,
}

impl fmt::Debug for ClientSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSettings")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("stream", &self.stream)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ClientSettings {
    /// Settings from `[model]`, reading the API key from the environment.
    ///
    /// # Errors
    ///
    /// When `api_key_env` names a variable that is not set.
    pub fn from_config(config: &ModelConfig) -> Result<Self, String> {
        let api_key = match &config.api_key_env {
            Some(name) => Some(std::env::var(name).map_err(|_| {
                format!("[model] api_key_env = {name:?}, but {name} is not set; export it or remove api_key_env for endpoints without keys")
            })?),
            None => None,
        };
        Ok(Self {
            base_url: config.base_url.trim_end_matches('/').to_owned(),
            model: config.model.clone(),
            api_key,
            stream: config.stream,
            timeout: config.timeout,
        })
    }

    fn http(&self) -> Result<reqwest::Client, String> {
        // The ring provider is already in the build for wasi:http; the
        // default (aws-lc-rs) would add a C library for no gain.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Redirects are not followed: reqwest keeps custom headers such as
        // Anthropic's `x-api-key` across hosts, which would hand the key to
        // whoever the endpoint (or a man in the middle) redirects to.
        let builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // Below the 5 s after which llama.cpp, uvicorn and Node close
            // an idle connection, so the race of a request with the
            // server's close is rare.
            .pool_idle_timeout(POOL_IDLE)
            .redirect(reqwest::redirect::Policy::none());
        let builder = if self.stream {
            builder.read_timeout(self.timeout)
        } else {
            builder.timeout(self.timeout)
        };
        builder
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))
    }
}

/// The client `config` asks for.
///
/// # Errors
///
/// When the API key variable is missing or the HTTP client cannot be built.
pub fn client_for(config: &ModelConfig) -> Result<Box<dyn ModelClient>, String> {
    let settings = ClientSettings::from_config(config)?;
    Ok(match config.provider {
        Provider::OpenAI => Box::new(OpenAIClient::new(settings)?),
        Provider::OpenAIResponses => Box::new(OpenAIResponsesClient::new(settings)?),
        Provider::Anthropic => Box::new(AnthropicClient::new(settings)?),
    })
}

/// What differs between providers' HTTP APIs; [`HttpClient`] does the rest.
pub trait Wire: Send + Sync + 'static {
    /// For logs, e.g. `anthropic`.
    const NAME: &'static str;
    /// Appended to the base URL, e.g. `/messages`.
    const PATH: &'static str;
    /// The fewest tokens a request may ask for.
    const MIN_OUTPUT_TOKENS: u32 = 1;

    /// The request body for `request`.
    fn body(settings: &ClientSettings, request: &ModelRequest<'_>) -> serde_json::Value;

    /// Add the provider's headers: authentication, API version. By
    /// default, the API key as a bearer token, as OpenAI's APIs take it.
    fn prepare(
        builder: reqwest::RequestBuilder,
        settings: &ClientSettings,
    ) -> reqwest::RequestBuilder {
        match &settings.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// Read a whole (non-streaming) answer.
    ///
    /// # Errors
    ///
    /// When the answer does not have the provider's shape.
    fn parse_response(body: serde_json::Value) -> Result<ModelResponse, ModelError>;

    /// Read a streamed answer, reporting text as it comes.
    fn read_stream(
        response: reqwest::Response,
        events: EventSink<'_>,
    ) -> impl Future<Output = Result<ModelResponse, ModelError>> + Send + '_;
}

/// A model endpoint over HTTP, speaking wire format `W`.
pub struct HttpClient<W> {
    settings: ClientSettings,
    http: reqwest::Client,
    wire: std::marker::PhantomData<W>,
}

impl<W> fmt::Debug for HttpClient<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<W: Wire> HttpClient<W> {
    /// A client with `settings`.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be built.
    pub fn new(settings: ClientSettings) -> Result<Self, String> {
        Ok(Self {
            http: settings.http()?,
            settings,
            wire: std::marker::PhantomData,
        })
    }

    async fn attempt(
        &self,
        request: ModelRequest<'_>,
        events: EventSink<'_>,
    ) -> Result<ModelResponse, ModelError> {
        let builder = self
            .http
            .post(format!("{}{}", self.settings.base_url, W::PATH))
            .json(&W::body(&self.settings, &request));
        let builder = W::prepare(builder, &self.settings);
        let again = builder.try_clone();
        let sent = std::time::Instant::now();
        let response = match (send(builder).await, again) {
            // A kept-alive connection the server closed while it sat idle
            // fails the request sent on it at once, before any answer. That
            // is not the endpoint failing: open a new connection and send
            // once more, quietly, without counting a retry. Only a failure
            // that came at once: one that came later may be a request the
            // server worked on (and billed), which the loop's retry policy
            // decides about, in the open.
            (Err(SendError::Stale(error)), Some(again)) if sent.elapsed() < STALE_WITHIN => {
                tracing::debug!(error = %error, "the idle connection to the model endpoint was closed; reconnecting");
                send(again).await
            }
            (result, _) => result,
        }
        .map_err(SendError::into_model_error)?;
        if self.settings.stream {
            W::read_stream(response, events).await
        } else {
            let body = read_body(response).await?;
            let body: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
                ModelError::new(
                    ModelErrorKind::Protocol,
                    format!("the model's answer is not JSON: {e}"),
                )
            })?;
            W::parse_response(body)
        }
    }
}

impl<W: Wire> ModelClient for HttpClient<W> {
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        events: EventSink<'a>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        Box::pin(self.attempt(request, events))
    }

    fn describe(&self) -> String {
        format!(
            "{} {} at {}",
            W::NAME,
            self.settings.model,
            self.settings.base_url
        )
    }

    fn min_output_tokens(&self) -> u32 {
        W::MIN_OUTPUT_TOKENS
    }
}

/// How long an idle connection to the endpoint is kept for the next call.
const POOL_IDLE: Duration = Duration::from_secs(4);

/// How soon a request on a reused connection must fail, closed before any
/// answer, to be sent again quietly: the time the close of an idle
/// connection takes to show, well short of any model call's.
const STALE_WITHIN: Duration = Duration::from_millis(500);

/// The longest answer read from a model endpoint, streamed or whole: far
/// more than any answer a loop can use, and a bound on what an endpoint can
/// make the host hold.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// The most of an error body read, for its message: the rest is dropped.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The longest an error body is read for.
const ERROR_BODY_TIME: Duration = Duration::from_secs(5);

/// At most 500 characters of what an endpoint sent, for an error message:
/// enough to show what went wrong, never a whole answer in a log line.
pub(crate) fn excerpt(text: &str) -> String {
    crate::outcome::clip(text, 500)
}

/// A whole answer's body, at most [`MAX_ANSWER_BYTES`].
async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, ModelError> {
    let too_long = || {
        ModelError::new(
            ModelErrorKind::Protocol,
            format!(
                "the model's answer is longer than {} MiB",
                MAX_ANSWER_BYTES >> 20
            ),
        )
    };
    if response
        .content_length()
        .is_some_and(|length| length > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_long());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ModelError::from_reqwest(&e, "reading the model's answer"))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_long());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Read `Retry-After` (seconds) from a response.
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds = value.trim().parse::<f64>().ok()?;
    // Clamp: the agent caps waits anyway, and a huge value must not panic.
    Duration::try_from_secs_f64(seconds.clamp(0.0, 3600.0)).ok()
}

/// Why a request got no successful response.
enum SendError {
    /// It went out on a pooled connection the server had closed.
    Stale(ModelError),
    /// Anything else.
    Failed(ModelError),
}

impl SendError {
    fn into_model_error(self) -> ModelError {
        match self {
            Self::Stale(error) | Self::Failed(error) => error,
        }
    }
}

/// Send `request` and return the response if its status is a success.
async fn send(request: reqwest::RequestBuilder) -> Result<reqwest::Response, SendError> {
    let response = request.send().await.map_err(|e| {
        let error = ModelError::from_reqwest(&e, "cannot reach the model endpoint");
        if closed_before_answer(&e) {
            SendError::Stale(error)
        } else {
            SendError::Failed(error)
        }
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = retry_after(response.headers());
    let body = error_body(response).await;
    Err(SendError::Failed(ModelError::from_status(
        status,
        retry_after,
        &body,
    )))
}

/// The start of a failed response's body, at most
/// [`MAX_ERROR_BODY_BYTES`] and what comes within [`ERROR_BODY_TIME`]: an
/// endpoint that answers an error with an endless body, or one that trickles
/// in, must not hold the call. A body that breaks off is shown as far as it
/// came.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    let read = async {
        while body.len() < MAX_ERROR_BODY_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
    };
    let _ = tokio::time::timeout(ERROR_BODY_TIME, read).await;
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

/// Whether `error` is a connection that was open, and closed by the other
/// side before any response: what reusing a connection the server closed
/// while idle looks like. A refused connection or a timeout is not.
fn closed_before_answer(error: &reqwest::Error) -> bool {
    if error.is_connect() || error.is_timeout() {
        return false;
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && (hyper.is_incomplete_message() || hyper.is_closed() || hyper.is_canceled())
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response whose body comes in `chunks` pieces of 1 MiB, with no
    /// length said up front.
    fn streamed_body(chunks: usize) -> reqwest::Response {
        let pieces = (0..chunks).map(|_| Ok::<_, std::io::Error>(vec![b' '; 1 << 20]));
        let body = reqwest::Body::wrap_stream(futures::stream::iter(pieces));
        reqwest::Response::from(http::Response::new(body))
    }

    #[tokio::test]
    async fn a_whole_answer_longer_than_the_cap_is_refused_said_or_not() {
        let over = (MAX_ANSWER_BYTES >> 20) + 1;
        let error = read_body(streamed_body(over)).await.unwrap_err();
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("32 MiB"), "{}", error.message);
        let said = reqwest::Response::from(http::Response::new(vec![b' '; MAX_ANSWER_BYTES + 1]));
        assert_eq!(
            read_body(said).await.unwrap_err().kind,
            ModelErrorKind::Protocol
        );
        assert_eq!(
            read_body(streamed_body(2)).await.unwrap().len(),
            2 << 20,
            "under the cap, all of it"
        );
    }

    #[tokio::test]
    async fn a_stream_longer_than_the_cap_ends_in_a_protocol_error() {
        use futures::StreamExt as _;
        let over = (MAX_ANSWER_BYTES >> 20) + 1;
        let events: Vec<_> = sse::events(streamed_body(over)).collect().await;
        let error = events
            .into_iter()
            .find_map(Result::err)
            .expect("the stream fails");
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("32 MiB"), "{}", error.message);
    }

    #[test]
    fn only_transient_failures_are_retryable() {
        let status = |code| ModelError::new(ModelErrorKind::Status(code), "");
        assert!(status(429).retryable());
        assert!(status(500).retryable() && status(503).retryable() && status(529).retryable());
        assert!(!status(400).retryable() && !status(401).retryable() && !status(404).retryable());
        assert!(ModelError::new(ModelErrorKind::StreamCut, "").retryable());
        assert!(ModelError::new(ModelErrorKind::Timeout, "").retryable());
        assert!(!ModelError::new(ModelErrorKind::Protocol, "").retryable());
    }

    #[test]
    fn retry_after_is_read_and_clamped_never_panicking() {
        let headers = |value: &str| {
            let mut map = reqwest::header::HeaderMap::new();
            map.insert(reqwest::header::RETRY_AFTER, value.parse().unwrap());
            map
        };
        assert_eq!(retry_after(&headers("2")), Some(Duration::from_secs(2)));
        assert_eq!(
            retry_after(&headers("0.5")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            retry_after(&headers("1e20")),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(retry_after(&headers("-3")), Some(Duration::ZERO));
        assert_eq!(retry_after(&headers("Wed, 21 Oct 2015 07:28:00 GMT")), None);
        assert_eq!(retry_after(&reqwest::header::HeaderMap::new()), None);
    }

    #[test]
    fn the_api_key_never_shows_in_debug_output() {
        let settings = ClientSettings {
            base_url: "http://x".into(),
            model: "m".into(),
            api_key: Some("sk-secret".into()),
            stream: true,
            timeout: Duration::from_secs(1),
        };
        assert!(!format!("{settings:?}").contains("sk-secret"));
    }
}
