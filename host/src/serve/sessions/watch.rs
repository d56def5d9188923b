//! A request's answer stream, watched for a client that drops it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use rmcp::model::{JsonRpcMessage, RequestId};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;

use super::{RESUME_GRACE, Session};

/// A request's answer stream, watched: if the client drops it before the
/// answer went out, and does not resume it within [`RESUME_GRACE`], the
/// request is cancelled.
pub(super) struct Watched<S> {
    pub(super) inner: S,
    /// `None` once the answer has gone out (or for a message that is no
    /// request).
    pub(super) watch: Option<Watch>,
}

pub(super) struct Watch {
    pub(super) session: Arc<Session>,
    pub(super) id: RequestId,
    /// rmcp's number for this stream, from its events' ids.
    pub(super) stream: Option<String>,
}

impl<S: Stream<Item = ServerSseMessage> + Unpin> Stream for Watched<S> {
    type Item = ServerSseMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.inner).poll_next(cx);
        if let (Poll::Ready(Some(event)), Some(watch)) = (&polled, &mut self.watch) {
            if let Some((_, stream)) = event.event_id.as_deref().and_then(|e| e.split_once('/')) {
                watch.stream = Some(stream.to_owned());
            }
            let answered = match event.message.as_deref() {
                Some(JsonRpcMessage::Response(response)) => response.id == watch.id,
                Some(JsonRpcMessage::Error(error)) => error.id.as_ref() == Some(&watch.id),
                _ => false,
            };
            if answered {
                self.watch = None;
            }
        }
        polled
    }
}

impl<S> Drop for Watched<S> {
    fn drop(&mut self) {
        let Some(watch) = self.watch.take() else {
            return;
        };
        // Dropped with no runtime (the process is ending): nothing to stop.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tokio::time::sleep(RESUME_GRACE).await;
            let resumed = watch
                .stream
                .as_deref()
                .is_some_and(|stream| watch.session.resumed(stream));
            if !resumed && watch.session.requests.is_running(&watch.id) {
                tracing::debug!(id = %watch.id, "stopping a call whose client dropped its stream");
                watch.session.requests.abandon(watch.id);
            }
        });
    }
}
