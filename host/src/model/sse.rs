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
/// for the caller to say, since only it knows what a complete answer is.
pub(crate) fn events(response: reqwest::Response) -> impl Stream<Item = Result<Event, ModelError>> {
    response.bytes_stream().eventsource().map(|item| {
        item.map(|event| Event {
            name: event.event,
            data: event.data,
        })
        .map_err(|e| {
            let kind = match &e {
                eventsource_stream::EventStreamError::Transport(t) if t.is_timeout() => {
                    ModelErrorKind::Timeout
                }
                eventsource_stream::EventStreamError::Transport(_) => ModelErrorKind::StreamCut,
                _ => ModelErrorKind::Protocol,
            };
            ModelError::new(kind, format!("the model's stream broke: {e}"))
        })
    })
}

/// The error for a stream that ended before its answer was complete.
pub(crate) fn cut() -> ModelError {
    ModelError::new(
        ModelErrorKind::StreamCut,
        "the model's stream ended before the answer was complete",
    )
}
