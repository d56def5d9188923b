//! Server-sent events from a streaming response.

use eventsource_stream::Eventsource as _;
use futures::{Stream, StreamExt as _};

use super::{ModelError, ModelErrorKind};

/// One server-sent event.
pub(crate) struct Event {
    /// The `event:` field (Anthropic names its events; OpenAI does not).
    pub name: String,
    /// The `data:` field.
    pub data: String,
}

/// The events of `response`'s body, in order. A transport failure mid-body
/// is a [`ModelErrorKind::StreamCut`]; whether the stream ended too early is
/// for the caller to say, since only it knows what a complete answer is. A
/// body longer than [`MAX_ANSWER_BYTES`](super::MAX_ANSWER_BYTES) is a
/// protocol error: no answer a loop can use is that long, and the host
/// must not hold whatever an endpoint sends.
pub(crate) fn events(response: reqwest::Response) -> impl Stream<Item = Result<Event, ModelError>> {
    let mut read = 0usize;
    let body = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(Failure::Transport)?;
        read += chunk.len();
        if read > super::MAX_ANSWER_BYTES {
            return Err(Failure::TooLong);
        }
        Ok(chunk)
    });
    body.eventsource().map(|item| {
        item.map(|event| Event {
            name: event.event,
            data: event.data,
        })
        .map_err(|e| {
            let kind = match &e {
                eventsource_stream::EventStreamError::Transport(Failure::Transport(t))
                    if t.is_timeout() =>
                {
                    ModelErrorKind::Timeout
                }
                eventsource_stream::EventStreamError::Transport(Failure::Transport(_)) => {
                    ModelErrorKind::StreamCut
                }
                _ => ModelErrorKind::Protocol,
            };
            ModelError::new(kind, format!("the model's stream broke: {e}"))
        })
    })
}

/// Why the body stopped.
#[derive(Debug)]
enum Failure {
    Transport(reqwest::Error),
    TooLong,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(e) => write!(f, "{e}"),
            Self::TooLong => write!(
                f,
                "the answer is longer than {} MiB",
                super::MAX_ANSWER_BYTES >> 20
            ),
        }
    }
}

impl std::error::Error for Failure {}

/// The error for a stream that ended before its answer was complete.
pub(crate) fn cut() -> ModelError {
    ModelError::new(
        ModelErrorKind::StreamCut,
        "the model's stream ended before the answer was complete",
    )
}
