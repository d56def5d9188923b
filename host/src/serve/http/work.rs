//! What a request asks of the server, read from its route and, for MCP,
//! from the heads of the JSON-RPC messages it carries: whether it starts
//! new work (refused while the server drains), finishes work a drain waits
//! for, holds a stream, or opens a session.

use axum::http::Method;
use serde::Deserialize;
use serde_json::Value;

/// What a request asks of the server, as far as shutting down and the
/// session cap care.
#[derive(Debug)]
pub(super) enum Work {
    /// `POST /v1/tool_calls`: calls.
    ToolCalls,
    /// `/mcp`: the JSON-RPC requests it carries (notifications and answers
    /// to the server's questions carry none), and whether one of them is
    /// an `initialize` without a session (which opens one).
    Mcp {
        method: Method,
        requests: Vec<Value>,
        /// Whether one of `requests` starts new work, rather than finishing
        /// work under way (see [`finishes_work`]).
        fresh: bool,
        opens_session: bool,
        /// A `GET` that resumes a stream (`Last-Event-ID`): it collects the
        /// answer of a call in flight.
        resumes: bool,
        /// A `subscriptions/listen`, whose answer lasts.
        listens: bool,
        /// The tools its `tools/call` requests name, for the scope check.
        calls: Vec<String>,
    },
    /// Anything else: listings, metrics, unknown routes.
    Other,
}

impl Work {
    /// What the request with `parts` and `body` asks.
    pub(super) fn of(parts: &axum::http::request::Parts, body: &[u8]) -> Self {
        let path = parts.uri.path();
        if path == "/v1/tool_calls" && parts.method == Method::POST {
            return Self::ToolCalls;
        }
        if path != "/mcp" && !path.starts_with("/mcp/") {
            return Self::Other;
        }
        let messages = jsonrpc_messages(body);
        // A body that is not JSON-RPC is new work for a draining server:
        // it finishes nothing (rmcp answers it with an error otherwise).
        let unreadable = parts.method == Method::POST
            && (messages.is_empty() || !messages.iter().all(Head::is_message))
            && !body.iter().all(u8::is_ascii_whitespace);
        let in_session = parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .is_some();
        let has = |method: &str| messages.iter().any(|m| m.method.as_deref() == Some(method));
        Self::Mcp {
            method: parts.method.clone(),
            opens_session: parts.method == Method::POST && !in_session && has("initialize"),
            resumes: parts.method == Method::GET && parts.headers.contains_key("last-event-id"),
            listens: has("subscriptions/listen"),
            calls: messages
                .iter()
                .filter(|m| m.method.as_deref() == Some("tools/call"))
                .filter_map(|m| m.params.as_ref()?.get("name")?.as_str().map(str::to_owned))
                .collect(),
            fresh: unreadable
                || messages
                    .iter()
                    .any(|m| m.method.is_some() && m.id.is_some() && !finishes_work(m)),
            requests: messages
                .into_iter()
                .filter(|m| m.method.is_some())
                .filter_map(|m| m.id)
                .collect(),
        }
    }

    /// Whether it starts work a draining server no longer takes: calls,
    /// JSON-RPC requests, new event streams (but not a stream resumed to
    /// collect an answer the drain waits for, nor requests that finish
    /// work under way, see [`finishes_work`]).
    pub(super) fn is_new(&self) -> bool {
        match self {
            Self::ToolCalls => true,
            Self::Mcp {
                method,
                fresh,
                resumes,
                ..
            } => (*method == Method::GET && !resumes) || *fresh,
            Self::Other => false,
        }
    }

    /// Whether the answer finishes work a drain must wait for.
    pub(super) fn is_call(&self) -> bool {
        self.counts(|method, requests, resumes| (method == Method::POST && requests) || resumes)
    }

    /// What a drain asks of a request: tool calls always count and other
    /// paths never do; an MCP request counts as `mcp` says of its method,
    /// whether it holds JSON-RPC requests, and whether it resumes a stream.
    fn counts(&self, mcp: impl FnOnce(&Method, bool, bool) -> bool) -> bool {
        match self {
            Self::ToolCalls => true,
            Self::Mcp {
                method,
                requests,
                resumes,
                ..
            } => mcp(method, !requests.is_empty(), *resumes),
            Self::Other => false,
        }
    }

    /// Whether the answer is a stream that lasts: an event stream, or a
    /// subscription.
    pub(super) fn is_stream(&self) -> bool {
        matches!(self, Self::Mcp { method, listens, .. } if *method == Method::GET || *listens)
    }
}

/// The head of one JSON-RPC message.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    params: Option<Value>,
    /// Whether it has a result: `"result": null` is one (JSON-RPC allows
    /// any value), which an `Option` would read as none.
    #[serde(default, deserialize_with = "present")]
    result: bool,
    #[serde(default, deserialize_with = "present")]
    error: bool,
}

/// `true` for a member that is there, whatever its value.
fn present<'de, D: serde::Deserializer<'de>>(value: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(value).map(|_| true)
}

impl Head {
    /// Whether it is a JSON-RPC message at all: a request or notification
    /// (a method), or an answer (a result or an error, under an id).
    fn is_message(&self) -> bool {
        self.method.is_some()
            || (self.id.as_ref().is_some_and(|id| !id.is_null()) && (self.result || self.error))
    }
}

/// Whether the JSON-RPC request `head` finishes work under way rather than
/// starting new work: reading, answering or cancelling MCP tasks (the
/// tasks extension; `tasks/result` is not among them, as toolhost does
/// not serve the 2025-11-25 tasks it belongs to), and a `tools/call` that brings a waiting call the
/// answers it asked for (`requestState`, SEP-2322). A draining server
/// still takes these: the drain waits for the work they finish, and
/// refusing them would leave that work unanswered until it is stopped.
fn finishes_work(head: &Head) -> bool {
    match head.method.as_deref() {
        Some("tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/list") => true,
        Some("tools/call") => head
            .params
            .as_ref()
            .and_then(|params| params.get("requestState"))
            .is_some_and(|state| !state.is_null()),
        _ => false,
    }
}

/// The heads of the JSON-RPC messages in a body (one, or a batch); none
/// when it is not JSON-RPC (rmcp answers that).
fn jsonrpc_messages(body: &[u8]) -> Vec<Head> {
    // A batch is an array (a `Head` would also read one, as a tuple).
    if body.trim_ascii_start().starts_with(b"[") {
        serde_json::from_slice::<Vec<Head>>(body).unwrap_or_default()
    } else {
        serde_json::from_slice::<Head>(body).map_or_else(|_| Vec::new(), |message| vec![message])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_initialize_outside_a_session_opens_one() {
        let post = |body: &[u8], session: bool| {
            let mut request = axum::http::Request::post("/mcp");
            if session {
                request = request.header("mcp-session-id", "s1");
            }
            let (parts, ()) = request.body(()).unwrap().into_parts();
            Work::of(&parts, body)
        };
        let opens = |work: Work| {
            matches!(
                work,
                Work::Mcp {
                    opens_session: true,
                    ..
                }
            )
        };
        let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        assert!(opens(post(initialize, false)));
        assert!(!opens(post(initialize, true)));
        assert!(opens(post(
            br#"[{"method":"ping","id":2},{"method":"initialize","id":3}]"#,
            false
        )));
        assert!(!opens(post(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            false
        )));
        assert!(!opens(post(b"not json", false)));
    }

    #[test]
    fn only_requests_are_new_work_for_a_draining_server() {
        let post = |body: &[u8]| {
            let (parts, ()) = axum::http::Request::post("/mcp")
                .body(())
                .unwrap()
                .into_parts();
            Work::of(&parts, body)
        };
        assert!(post(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#).is_new());
        // A cancellation and an answer to the server's question let calls
        // in flight finish: they pass.
        assert!(
            !post(
                br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#
            )
            .is_new()
        );
        assert!(!post(br#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#).is_new());
        // Regression: a `null` result (JSON-RPC allows any value) read as
        // no result, so the answer was new work.
        assert!(!post(br#"{"jsonrpc":"2.0","id":3,"result":null}"#).is_new());
        assert!(!post(br#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#).is_new());
        // Regression: a body that is not JSON-RPC at all passed a draining
        // server as if it finished something.
        for unreadable in [
            &b"not json"[..],
            b"{\"method\": 5, \"id\": 1}",
            b"[]",
            b"{}",
            b"{\"jsonrpc\":\"2.0\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}",
        ] {
            assert!(
                post(unreadable).is_new(),
                "{}",
                String::from_utf8_lossy(unreadable)
            );
        }
        assert!(!post(b"").is_new(), "an empty POST carries no work");
    }

    /// Regression: a draining server refused `tasks/get` and the answer a
    /// waiting call asked for, leaving the work the drain waits for
    /// without its end.
    #[test]
    fn requests_that_finish_work_under_way_are_not_new_work() {
        let post = |body: &str| {
            let (parts, ()) = axum::http::Request::post("/mcp")
                .body(())
                .unwrap()
                .into_parts();
            Work::of(&parts, body.as_bytes())
        };
        for method in ["tasks/get", "tasks/update", "tasks/cancel", "tasks/list"] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"taskId":"t"}}}}"#
            );
            let work = post(&body);
            assert!(!work.is_new(), "{method}");
            assert!(
                work.is_call(),
                "{method} is answered before the server stops"
            );
        }
        let continuation = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","requestState":"abc","inputResponses":{}}}"#;
        assert!(!post(continuation).is_new());
        let fresh = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","requestState":null}}"#;
        assert!(post(fresh).is_new());
        // One new request in a batch makes the batch new work.
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}]"#;
        assert!(post(batch).is_new());
    }
}
