//! Questions for the person at the client, over elicitation
//! (`elicitation/create`, 2025-11-25 sessions): whether a call that needs
//! approval may run, and the questions a tool asks. A question nobody
//! waits for any more is withdrawn.

use futures::future::BoxFuture;
use rmcp::model::{
    CancelledNotificationParam, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, RequestId, ServerRequest,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleServer};
use serde_json::Value;

use super::NOTIFY_TIMEOUT;
use crate::observe::{Answer, Asker, Question};
use crate::spec::ToolSpec;
use crate::tool_call::ToolCall;
use crate::tool_host::Approver;

/// How long a person has to answer an approval request.
const APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Asks the person at the MCP client whether a call that needs approval may
/// run, and a tool's questions. An approval is a yes or no, never more: its
/// schema has one boolean.
#[derive(Debug)]
pub(super) struct AskTheClient {
    peer: Peer<RoleServer>,
}

/// The most characters of a call's arguments an approval request shows;
/// past it, the request says how many more there are, so the person knows
/// what they cannot see.
const APPROVAL_ARGUMENTS: usize = 4000;

impl AskTheClient {
    /// Ask the person at the client at the other end of `peer`.
    pub(super) fn new(peer: Peer<RoleServer>) -> Self {
        Self { peer }
    }

    /// Send one `elicitation/create` and wait for the answer, within
    /// `timeout`. When the wait is dropped before an answer (the call ended,
    /// or its time to wait for answers ran out), the request is withdrawn
    /// with `notifications/cancelled`, so the client stops showing a
    /// question nobody waits for.
    async fn elicit(
        &self,
        params: ElicitRequestParams,
        timeout: std::time::Duration,
    ) -> Result<ElicitResult, rmcp::ServiceError> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let handle = self
            .peer
            .send_request_with_option(request, PeerRequestOptions::with_timeout(timeout))
            .await?;
        let mut withdraw = Withdraw {
            peer: handle.peer.clone(),
            id: Some(handle.id.clone()),
        };
        let answer = handle.await_response().await;
        // Answered, or timed out (rmcp withdraws those itself).
        withdraw.id = None;
        match answer? {
            ClientResult::ElicitResult(result) => Ok(result),
            _ => Err(rmcp::ServiceError::UnexpectedResponse),
        }
    }
}

/// Withdraws an elicitation request when dropped while still armed.
struct Withdraw {
    peer: Peer<RoleServer>,
    id: Option<RequestId>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        runtime.spawn(async move {
            let withdrawn = CancelledNotificationParam::new(
                Some(id),
                Some("the question was withdrawn: the call no longer waits for an answer".into()),
            );
            let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_cancelled(withdrawn)).await;
        });
    }
}

impl Approver for AskTheClient {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let why = if spec.hints.destructive {
                "it may delete or overwrite data"
            } else {
                "the operator asked to approve each call"
            };
            // Exactly what will run, with nothing in it invisible.
            let arguments = match call.arguments.parse() {
                Ok(value) => crate::printable::json(&value),
                Err(_) => "(unreadable)".to_owned(),
            };
            let message = format!(
                "Allow the tool '{}' to run? It needs approval because {why}. It can only use \
                 what its manifest grants. Arguments: {}",
                crate::outcome::clip(&spec.name, 64),
                crate::printable::cut_noted(&arguments, APPROVAL_ARGUMENTS)
            );
            let params = serde_json::from_value(serde_json::json!({
                "mode": "form",
                "message": message,
                "requestedSchema": {
                    "type": "object",
                    "properties": {"approve": {"type": "boolean", "title": "Run this call"}},
                    "required": ["approve"],
                },
            }))
            .map_err(|e| format!("cannot ask for approval: {e}"))?;
            let answer = self
                .elicit(params, APPROVAL_TIMEOUT)
                .await
                .map_err(|e| format!("approval could not be asked for: {e}"))?;
            let approved = matches!(answer.action, ElicitationAction::Accept)
                && answer
                    .content
                    .as_ref()
                    .and_then(|c| c.get("approve"))
                    .and_then(Value::as_bool)
                    == Some(true);
            if approved {
                Ok(())
            } else {
                Err("the person at the client did not approve this call".to_owned())
            }
        })
    }
}

/// The elicitation form that puts the tool's question to the person:
/// `message` and `schema` as the sandbox made them safe to show, said to
/// be the tool's words. One shape for every way a question reaches an MCP
/// client (a request of its own, a task's input request, an
/// input-required result).
pub(super) fn question_params(
    tool: &str,
    message: &str,
    schema: &Value,
) -> Result<ElicitRequestParams, serde_json::Error> {
    let message = format!(
        "The tool '{}' asks: {message}",
        crate::outcome::clip(tool, 64)
    );
    serde_json::from_value(serde_json::json!({
        "mode": "form",
        "message": message,
        "requestedSchema": schema,
    }))
}

/// How long a person has to answer a tool's question (the sandbox bounds
/// it too, with what is left of the call's [`crate::sandbox::ASK_WAIT`]).
const ASK_TIMEOUT: std::time::Duration = crate::sandbox::ASK_WAIT;

impl Asker for AskTheClient {
    /// The question and its schema as the host made them safe to show
    /// (masked, printable, only the keywords of an elicitation form).
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let params = match question_params(&question.tool, &question.message, &question.schema)
            {
                Ok(params) => params,
                Err(e) => {
                    return Answer::Unavailable(format!(
                        "the question cannot be sent to the client: {e}"
                    ));
                }
            };
            match self.elicit(params, ASK_TIMEOUT).await {
                Err(e) => Answer::Unavailable(format!("the client did not answer: {e}")),
                Ok(answer) => match answer.action {
                    ElicitationAction::Accept => Answer::Accepted(
                        answer
                            .content
                            .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
                    ),
                    ElicitationAction::Decline => Answer::Declined,
                    _ => Answer::Cancelled,
                },
            }
        })
    }
}
