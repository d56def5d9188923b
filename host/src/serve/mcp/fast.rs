//! The `/mcp` endpoint, with a fast path in front of rmcp for the one
//! request shape that dominates stateless traffic: a 2026-07-28
//! `tools/call` that needs nothing but its answer.
//!
//! rmcp serves a stateless request across three tasks (the HTTP
//! connection's, a serve loop's and the handler's, and toolhost's call
//! task besides), and every hand-off between them is a wake-up, on a
//! 2-core machine often a context switch: about 150 µs of a call's
//! 280 µs. The fast path runs such a call on the connection's own task,
//! from the body to the answer, with nothing spawned.
//!
//! It takes a request only when rmcp would run the call and answer it
//! with one JSON message, decided before anything of it is done or
//! counted; any other request (a session's, one with an `Origin`, a
//! progress token, a log level, elicitation or tasks declared, answers
//! to questions, a header rmcp would refuse, a tool that is unknown, out
//! of the caller's scopes, needs a client capability or runs as a task,
//! a context that is refused, a body that is not exactly such a request)
//! goes to rmcp whole, untouched. Once taken, a call is what rmcp's is:
//! the same checks, admission (`[serve.limits]`), environment, dispatcher
//! entry (`Shared::call_batch`, so the same metrics), cancellation (the
//! call stops when the client goes away: its future is dropped with the
//! request's), drain and answer, serialized from the same rmcp types.
//! The HTTP edge (`http::checks`: Host, Origin, the token, body limits,
//! scopes, the drain) has run before either.
//!
//! `TOOLHOST_MCP_FAST_PATH=0` (or [`crate::serve::ServeConfig`]'s
//! `mcp_fast_path`) sends every request to rmcp, to compare the two.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use axum::response::Response;
use rmcp::model::{
    CallToolRequestMethod, ClientJsonRpcMessage, ClientRequest, ErrorCode, ErrorData, GetMeta as _,
    JsonObject, JsonRpcRequest, JsonRpcVersion2_0, ProtocolVersion, RequestId, RequestMetaObject,
    ServerJsonRpcMessage, ServerResult,
};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use serde_json::Value;

use super::McpServer;
use super::call::{call_tool_result, injected_context, rate_limited};
use super::capabilities::missing_capabilities;
use crate::component::TaskSupport;
use crate::identity::Principal;
use crate::serve::Shared;
use crate::serve::sessions::Sessions;
use crate::tool_call::{Arguments, ToolCall};
use crate::tool_host::CallOptions;

/// The protocol revision the fast path serves: the stateless one.
const STATELESS: &str = "2026-07-28";

/// The hosts rmcp accepts in `Host` on a loopback address (any port).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The `/mcp` endpoint: rmcp, behind the fast path when it is on.
#[derive(Clone)]
pub(in crate::serve) struct Endpoint {
    rmcp: StreamableHttpService<McpServer, Sessions>,
    fast: Option<FastPath>,
}

/// What the fast path needs: the tools and the policy, and which `Host`
/// headers rmcp accepts.
#[derive(Clone)]
struct FastPath {
    shared: Shared,
    /// rmcp checks `Host` against the loopback names on a loopback
    /// address, and not at all on others.
    loopback: bool,
}

impl Endpoint {
    /// `rmcp`, behind the fast path unless `fast` is false.
    pub(super) fn new(
        rmcp: StreamableHttpService<McpServer, Sessions>,
        shared: Shared,
        loopback: bool,
        fast: bool,
    ) -> Self {
        Self {
            rmcp,
            fast: fast.then_some(FastPath { shared, loopback }),
        }
    }
}

impl tower::Service<Request<Body>> for Endpoint {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.serve(request).await) })
    }
}

impl Endpoint {
    async fn serve(self, request: Request<Body>) -> Response {
        let Some(fast) = &self.fast else {
            return rmcp(&self.rmcp, request).await;
        };
        if !fast.may_take(request.method(), request.headers()) {
            return rmcp(&self.rmcp, request).await;
        }
        let (parts, body) = request.into_parts();
        // The edge read the body whole, within `--max-body`: this is a copy
        // of a buffer, never a wait.
        let Ok(body) = axum::body::to_bytes(body, usize::MAX).await else {
            return rmcp(&self.rmcp, Request::from_parts(parts, Body::empty())).await;
        };
        match fast.take(&parts, &body) {
            Some(call) => fast.answer(call).await,
            None => rmcp(&self.rmcp, Request::from_parts(parts, Body::from(body))).await,
        }
    }
}

/// `request`, answered by rmcp.
///
/// On the workers when this is a front thread (`serve::http::fronts`):
/// rmcp spawns a session's tasks and each request's handler where it is
/// called, and a session's calls must spread over the cores as any
/// others do.
async fn rmcp(
    rmcp: &StreamableHttpService<McpServer, Sessions>,
    request: Request<Body>,
) -> Response {
    let rmcp = rmcp.clone();
    let handled =
        crate::sandbox::spread::off_the_front(
            async move { rmcp.handle(request).await.map(Body::new) },
        )
        .await;
    handled.unwrap_or_else(|e| {
        if e.is_cancelled() {
            // Only the workers' runtime shutting down cancels it.
            tracing::debug!("an MCP request was stopped as the server shut down");
        } else {
            tracing::error!(error = %e, "the MCP handler failed");
        }
        let mut response = json_message(ServerJsonRpcMessage::error(
            ErrorData::internal_error("the MCP handler failed; see the server's log", None),
            None,
        ));
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        response
    })
}

/// A call the fast path took, checked, with all it needs to run.
struct Taken {
    id: RequestId,
    principal: Principal,
    host: crate::tool_host::ToolHost,
    name: String,
    arguments: serde_json::Map<String, Value>,
    context: Option<Value>,
}

impl FastPath {
    /// Whether a request with `method` and `headers` may be one the fast
    /// path takes, before its body is read: a POST outside any session,
    /// without `Origin`, whose `Host`, `Accept`, `Content-Type` and MCP
    /// headers rmcp accepts as they are for a 2026-07-28 `tools/call`.
    /// (The name in `Mcp-Name` is checked against the body later.)
    fn may_take(&self, method: &Method, headers: &HeaderMap) -> bool {
        *method == Method::POST
            && !headers.contains_key("mcp-session-id")
            && !headers.contains_key(header::ORIGIN)
            && self.host_allowed(headers)
            && accepts_json_and_sse(headers)
            && content_type_is_json(headers)
            && only(headers, "mcp-protocol-version").is_some_and(|v| v == STATELESS)
            && only(headers, "mcp-method").is_some_and(|v| v == "tools/call")
            && only(headers, "mcp-name").is_some_and(|v| !v.starts_with("=?base64?"))
    }

    /// Whether rmcp accepts the request's `Host` (it checks the name, any
    /// port, on a loopback address).
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        if !self.loopback {
            return true;
        }
        let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let Ok(authority) = host.parse::<axum::http::uri::Authority>() else {
            return false;
        };
        let name = authority
            .host()
            .trim_matches(['[', ']'])
            .to_ascii_lowercase();
        LOOPBACK_HOSTS.contains(&name.as_str())
    }

    /// The call in `body`, if it is one the fast path answers as rmcp
    /// would; `None` (nothing done, nothing counted) for rmcp to answer.
    fn take(&self, parts: &Parts, body: &Bytes) -> Option<Taken> {
        let Call {
            id,
            meta,
            name,
            arguments,
        } = Call::read(body)?;
        // The request's own revision, complete (`clientCapabilities`
        // given), nothing asked of the server beyond the answer.
        if meta.protocol_version()? != ProtocolVersion::V_2026_07_28
            || meta.get_progress_token().is_some()
            || meta.log_level().is_some()
            || only(&parts.headers, "mcp-name") != Some(name.as_str())
        {
            return None;
        }
        let capabilities = meta.client_capabilities()?;
        if capabilities.elicitation.is_some() || capabilities.supports_tasks() {
            return None;
        }
        let principal = match (parts.extensions.get::<Principal>(), self.shared.auth()) {
            (Some(principal), _) => principal.clone(),
            (None, None) => Principal::anyone(),
            (None, Some(_)) => return None,
        };
        let host = self.shared.host();
        let tool = host.tool(&name)?;
        if !principal.holds(&crate::serve::auth::required_scopes(&host, &name))
            || missing_capabilities(&name, tool.component(), Some(capabilities)).is_some()
            || tool.component().task_support == TaskSupport::Required
            || has_param_headers(&tool.spec().input_schema)
        {
            return None;
        }
        let context = injected_context(&self.shared, &meta, &principal).ok()?;
        let name = tool.spec().name.clone();
        Some(Taken {
            id,
            principal,
            host,
            name,
            arguments: arguments.unwrap_or_default(),
            context,
        })
    }

    /// Run `taken` on this task, as rmcp runs a stateless call, and answer
    /// it with one JSON message.
    async fn answer(&self, taken: Taken) -> Response {
        self.shared.metrics().mcp_fast_path();
        let Taken {
            id,
            principal,
            host,
            name,
            arguments,
            context,
        } = taken;
        // Held until the call has answered.
        let permit = match self.shared.admit(&principal, &[name.as_str()]).await {
            Ok(permit) => permit,
            Err(refusal) => {
                return json_message(ServerJsonRpcMessage::error(
                    rate_limited(&refusal),
                    Some(id),
                ));
            }
        };
        let mut env = CallOptions::default().approver(self.shared.refuse());
        if let Some(context) = context {
            env = env.context(context);
        }
        let call = ToolCall {
            id: id.to_string(),
            name,
            arguments: Arguments::Json(Value::Object(arguments)),
        };
        let stopped = Cancelled(Some(call.name.clone()));
        let mut results = self.shared.call_batch(&host, vec![call], env, "mcp").await;
        stopped.disarm();
        drop(permit);
        let answer = match results.pop() {
            Some(result) => call_tool_result(&result),
            None => Err(ErrorData::internal_error(
                "the call ended without an answer",
                None,
            )),
        };
        json_message(match answer {
            Ok(response) => {
                let mut result = ServerResult::from(response);
                result.fill_missing_cache_hints();
                ServerJsonRpcMessage::response(result, id)
            }
            Err(error) => ServerJsonRpcMessage::error(error, Some(id)),
        })
    }
}

/// What the fast path reads of a `tools/call`: the same values rmcp's
/// parse gives it.
struct Call {
    id: RequestId,
    meta: RequestMetaObject,
    name: String,
    arguments: Option<JsonObject>,
}

impl Call {
    /// The `tools/call` in `body` that asks nothing but its answer (no
    /// answers to questions, no request state); `None` for anything else.
    ///
    /// A body with exactly a plain call's fields is read straight into
    /// them (`Plain`); any other goes through rmcp's own parse, whose
    /// untagged and flattened message types buffer the whole body first
    /// (about a tenth of the fast path's time). Both give the same values:
    /// the plain read uses rmcp's types for every field it keeps, and
    /// refuses any field it does not know, which rmcp then reads.
    fn read(body: &[u8]) -> Option<Self> {
        Self::plain(body).or_else(|| Self::through_rmcp(body))
    }

    /// `body` read as a [`Plain`] call; `None` when it is not one.
    fn plain(body: &[u8]) -> Option<Self> {
        let MapOnly(plain) = serde_json::from_slice::<MapOnly<Plain>>(body).ok()?;
        let MapOnly(params) = plain.params;
        Some(Self {
            id: plain.id,
            meta: params.meta.unwrap_or_default(),
            name: params.name,
            arguments: params.arguments,
        })
    }

    /// `body` read by rmcp, as a call asking nothing but its answer.
    fn through_rmcp(body: &[u8]) -> Option<Self> {
        let Ok(ClientJsonRpcMessage::Request(JsonRpcRequest { id, request, .. })) =
            serde_json::from_slice::<ClientJsonRpcMessage>(body)
        else {
            return None;
        };
        let meta = request.get_meta().clone();
        let ClientRequest::CallToolRequest(call) = request else {
            return None;
        };
        let params = call.params;
        if params.input_responses.is_some() || params.request_state.is_some() {
            return None;
        }
        Some(Self {
            id,
            meta,
            name: params.name.into_owned(),
            arguments: params.arguments,
        })
    }
}

/// A JSON-RPC `tools/call` request with a plain call's fields and no
/// other.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Plain {
    #[allow(dead_code, reason = "read to check it is \"2.0\"")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[allow(dead_code, reason = "read to check it is \"tools/call\"")]
    method: CallToolRequestMethod,
    params: MapOnly<PlainParams>,
}

/// `T` read from a JSON object only. A derived struct also reads an array,
/// by position, where rmcp's messages (with flattened fields) read objects
/// only.
struct MapOnly<T>(T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for MapOnly<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Object<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        deserializer
            .deserialize_map(Object(std::marker::PhantomData))
            .map(MapOnly)
    }
}

/// A plain call's `params`: its name, arguments and `_meta`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PlainParams {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMetaObject>,
}

/// Logs, as rmcp's path does, a call whose client went away before its
/// answer (its future, and so the call, dropped).
struct Cancelled(Option<String>);

impl Cancelled {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Cancelled {
    fn drop(&mut self) {
        if let Some(tool) = &self.0 {
            tracing::info!(tool = %tool, "call cancelled by the client");
        }
    }
}

/// `message` as rmcp answers a stateless request with one message: JSON,
/// with the status its error code maps to.
fn json_message(message: ServerJsonRpcMessage) -> Response {
    let status = match &message {
        ServerJsonRpcMessage::Error(error) => match error.error.code {
            ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
            | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
            | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
            ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    };
    let body = match serde_json::to_vec(&message) {
        Ok(body) => body,
        Err(e) => {
            let error = ErrorData::internal_error(format!("the result cannot be sent: {e}"), None);
            let id = match message {
                ServerJsonRpcMessage::Response(response) => Some(response.id),
                ServerJsonRpcMessage::Error(error) => error.id,
                _ => None,
            };
            serde_json::to_vec(&ServerJsonRpcMessage::error(error, id)).unwrap_or_default()
        }
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The one value of header `name`, as text; `None` when it is absent,
/// repeated or not text.
fn only<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// Whether `Accept` names both JSON and event streams, read as rmcp reads
/// it; `false` (for rmcp to decide) when an entry has parameters or
/// quotes, which rmcp weighs.
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for entry in value.split(',') {
            if entry.contains([';', '"']) {
                return false;
            }
            let essence = entry.trim();
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// Whether `Content-Type` is JSON, as rmcp reads it.
fn content_type_is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split_once(';').map_or(v, |(essence, _)| essence);
            essence.trim().eq_ignore_ascii_case("application/json")
        })
}

/// Whether a tool's input schema asks for `Mcp-Param-*` headers
/// (`x-mcp-header` annotations), which rmcp checks against the arguments.
fn has_param_headers(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map
            .iter()
            .any(|(key, value)| key == "x-mcp-header" || has_param_headers(value)),
        Value::Array(items) => items.iter().any(has_param_headers),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn accept_with_weights_or_quotes_is_left_to_rmcp() {
        assert!(accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json, text/event-stream"
        )])));
        assert!(accepts_json_and_sse(&headers(&[
            ("accept", "application/json"),
            ("accept", "TEXT/EVENT-STREAM")
        ])));
        assert!(!accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json"
        )])));
        // rmcp drops an entry weighted zero: the fast path does not weigh.
        assert!(!accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json, text/event-stream;q=0"
        )])));
        assert!(!accepts_json_and_sse(&headers(&[(
            "accept",
            "application/json, \"text/event-stream\""
        )])));
    }

    #[test]
    fn a_repeated_header_has_no_one_value() {
        let repeated = headers(&[("mcp-method", "tools/call"), ("mcp-method", "tools/call")]);
        assert_eq!(only(&repeated, "mcp-method"), None);
        let once = headers(&[("mcp-method", "tools/call")]);
        assert_eq!(only(&once, "mcp-method"), Some("tools/call"));
    }

    /// The plain read gives exactly what rmcp's parse gives, and leaves
    /// to rmcp every body with a field it does not know.
    #[test]
    fn a_plain_call_is_read_as_rmcp_reads_it() {
        let meta = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"progressToken":7}"#;
        let plain = [
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"calc","arguments":{{"expression":"6*7"}},"_meta":{meta}}}}}"#
            ),
            r#"{"params":{"name":"calc"},"id":"a\u0000b","method":"tools/call","jsonrpc":"2.0"}"#
                .into(),
            r#"{"jsonrpc":"2.0","id":-3,"method":"tools/call","params":{"name":"é","arguments":null,"_meta":null}}"#
                .into(),
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x","arguments":{"a":1,"a":2}}}"#
                .into(),
        ];
        for body in &plain {
            let read = Call::plain(body.as_bytes()).expect(body);
            let rmcp = Call::through_rmcp(body.as_bytes()).expect(body);
            assert_eq!(read.id, rmcp.id, "{body}");
            assert_eq!(read.meta, rmcp.meta, "{body}");
            assert_eq!(read.name, rmcp.name, "{body}");
            assert_eq!(read.arguments, rmcp.arguments, "{body}");
        }
        let not_plain = [
            // Fields rmcp reads and the fast path must see: rmcp decides.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","inputResponses":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","task":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"},"extra":1}"#,
            // Not a plain call at all.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","name":"y"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}]"#,
            // By position: rmcp reads objects only.
            r#"["2.0",1,"tools/call",["calc",{"expression":"6*7"},{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}]]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["calc",{"expression":"6*7"},{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}]}"#,
            r#"["2.0",1,"tools/call",{"name":"calc"}]"#,
        ];
        for body in not_plain {
            assert!(Call::plain(body.as_bytes()).is_none(), "{body}");
        }
        for by_position in &not_plain[not_plain.len() - 3..] {
            assert!(
                Call::read(by_position.as_bytes()).is_none(),
                "{by_position}"
            );
        }
        // What rmcp reads of those is what the fast path goes by.
        assert!(
            Call::read(not_plain[0].as_bytes()).is_none(),
            "request state"
        );
        assert!(Call::read(not_plain[1].as_bytes()).is_none(), "answers");
    }

    #[test]
    fn param_header_annotations_are_found_at_any_depth() {
        let plain = serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert!(!has_param_headers(&plain));
        let annotated = serde_json::json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string", "x-mcp-header": "B"}}}}});
        assert!(has_param_headers(&annotated));
    }
}
