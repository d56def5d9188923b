//! [`HttpClient`]: a model endpoint over HTTP, whatever its wire format;
//! [`Wire`]: what differs between the formats.

use std::fmt;
use std::ops::ControlFlow;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize as _;
use serde::de::DeserializeOwned;

use super::config::{BaseUrl, ModelConfig};
use super::stream::StreamedAnswer;
use super::{ClientError, EventSink, ModelClient, ModelError, ModelRequest, ModelResponse};

/// Settings shared by every client.
#[derive(Clone)]
pub struct ClientSettings {
    /// Base URL, e.g. `https://api.openai.com/v1`.
    pub base_url: BaseUrl,
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
    /// [`ClientError::MissingApiKey`] when `api_key_env` names a variable
    /// that is not set.
    pub fn from_config(config: &ModelConfig) -> Result<Self, ClientError> {
        let api_key = match &config.api_key_env {
            Some(name) => {
                Some(std::env::var(name).map_err(|_| ClientError::MissingApiKey(name.clone()))?)
            }
            None => None,
        };
        Ok(Self {
            base_url: config.base_url.clone(),
            model: config.model.clone(),
            api_key,
            stream: config.stream,
            timeout: config.timeout,
        })
    }

    fn http(&self) -> Result<reqwest::Client, ClientError> {
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
        builder.build().map_err(ClientError::Http)
    }
}

/// What differs between providers' HTTP APIs: the request, and how the
/// answer reads, whole or streamed. [`HttpClient`] does the rest, and the
/// provided methods read an answer through the types given here, so that
/// a provider is a mapping from its wire types to a [`ModelResponse`].
pub trait Wire: Send + Sync + 'static {
    /// For logs, e.g. `anthropic`.
    const NAME: &'static str;
    /// Appended to the base URL, e.g. `/messages`.
    const PATH: &'static str;
    /// The fewest tokens a request may ask for.
    const MIN_OUTPUT_TOKENS: u32 = 1;

    /// A whole (not streamed) answer, as the endpoint sends it. A body of
    /// another shape reads as the default, which [`Wire::answer`] refuses
    /// for what it lacks.
    type Answer: DeserializeOwned + Default;
    /// One event of a streamed answer: the data of one server-sent event,
    /// a JSON object whose `type`, when it has none, is the event's name.
    type Event: DeserializeOwned + Send;
    /// What reading a stream keeps from one event to the next, beyond what
    /// [`StreamedAnswer`] keeps.
    type Reader: Default + Send;

    /// The request body for `request`.
    fn body<'a>(
        settings: &'a ClientSettings,
        request: &'a ModelRequest<'a>,
    ) -> impl serde::Serialize + Send + 'a;

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

    /// The response a whole answer holds.
    ///
    /// # Errors
    ///
    /// [`AnswerError::Lacks`] when it lacks what every answer has (the
    /// error then quotes the answer), or the failure it reports.
    fn answer(answer: Self::Answer) -> Result<ModelResponse, AnswerError>;

    /// Take in one event of a stream; [`ControlFlow::Break`] when the
    /// answer is complete and the rest of the stream is not read.
    ///
    /// # Errors
    ///
    /// A failure the event reports, or one it makes plain.
    fn read(
        reader: &mut Self::Reader,
        event: Self::Event,
        answer: &mut StreamedAnswer<'_>,
    ) -> Result<ControlFlow<()>, ModelError>;

    /// The response, once the stream has ended or [`Wire::read`] broke off.
    ///
    /// # Errors
    ///
    /// When the answer is not complete (a [`ModelErrorKind::StreamCut`](super::ModelErrorKind::StreamCut))
    /// or contradicts itself.
    fn finish(
        reader: Self::Reader,
        answer: StreamedAnswer<'_>,
    ) -> Result<ModelResponse, ModelError>;

    /// Read a whole (not streamed) answer.
    ///
    /// # Errors
    ///
    /// When it is not JSON, lacks what every answer has, or reports a
    /// failure.
    fn parse_response(body: &[u8]) -> Result<ModelResponse, ModelError> {
        let value: serde_json::Value = serde_json::from_slice(body)
            .map_err(|e| ModelError::protocol(format!("the model's answer is not JSON: {e}")))?;
        let answer = Self::Answer::deserialize(&value).unwrap_or_default();
        Self::answer(answer).map_err(|error| match error {
            AnswerError::Lacks(what) => ModelError::protocol(format!(
                "the answer has no {what}: {}",
                super::excerpt(&value.to_string())
            )),
            AnswerError::Failed(error) => error,
        })
    }

    /// Read a streamed answer, reporting text as it comes.
    ///
    /// # Errors
    ///
    /// As [`Wire::read`] and [`Wire::finish`], and when the stream breaks
    /// or an event is not JSON.
    fn read_stream(
        response: reqwest::Response,
        events: EventSink<'_>,
    ) -> impl Future<Output = Result<ModelResponse, ModelError>> + Send + '_ {
        super::stream::read::<Self>(response, events)
    }
}

/// Why a whole answer gives no response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnswerError {
    /// It lacks what every answer of its wire format has, named in the
    /// plural (`choices`, `content blocks`, `output items`).
    Lacks(&'static str),
    /// It reports a failure, or contradicts itself.
    Failed(ModelError),
}

impl From<ModelError> for AnswerError {
    fn from(error: ModelError) -> Self {
        Self::Failed(error)
    }
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
    /// [`ClientError::Http`] when the HTTP client cannot be built.
    pub fn new(settings: ClientSettings) -> Result<Self, ClientError> {
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
            W::parse_response(&read_body(response).await?)
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

/// A whole answer's body, at most [`MAX_ANSWER_BYTES`].
async fn read_body(mut response: reqwest::Response) -> Result<Vec<u8>, ModelError> {
    let too_long = || {
        ModelError::protocol(format!(
            "the model's answer is longer than {} MiB",
            MAX_ANSWER_BYTES >> 20
        ))
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
    use crate::model::ModelErrorKind;

    /// A response whose body comes in `chunks` pieces of 1 MiB, with no
    /// length said up front.
    pub(crate) fn streamed_body(chunks: usize) -> reqwest::Response {
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
        let events: Vec<_> = crate::model::sse::events(streamed_body(over))
            .collect()
            .await;
        let error = events
            .into_iter()
            .find_map(Result::err)
            .expect("the stream fails");
        assert_eq!(error.kind, ModelErrorKind::Protocol);
        assert!(error.message.contains("32 MiB"), "{}", error.message);
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
            base_url: "http://x".parse().unwrap(),
            model: "m".into(),
            api_key: Some("sk-secret".into()),
            stream: true,
            timeout: Duration::from_secs(1),
        };
        assert!(!format!("{settings:?}").contains("sk-secret"));
    }
}
