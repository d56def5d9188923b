//! `POST /v1/tool_calls`: a batch of tool calls in any shape, with the
//! application's context in a header, answered in order in the format
//! asked for. A tool that fails is still a 200 with `is_error` in its
//! answer; only a request that cannot be read is 4xx.
//!
//! `[serve.limits]` admits a batch whole or not at all: every call is
//! admitted before any runs, and if one is refused the batch is answered
//! 429 with `Retry-After`, nothing of it run. A batch is one request, and
//! its calls run at once, so they count together against the caps; a
//! client retrying a 429 gets the whole batch or none of it, never a
//! half-run batch whose other half it must pick out of the answers.

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::error;
use super::routes::FormatQuery;
use crate::identity::Principal;
use crate::serve::Shared;
use crate::serve::auth::AuthRefusal;
use crate::tool_call::ToolCall;
use crate::tool_host::{CallOptions, ToolHost};
use crate::wire;

/// The header that carries a batch's injected context: a JSON object the
/// tools read (and scoped stores are kept by), which the model never sees.
pub const CONTEXT_HEADER: &str = "toolhost-context";

/// Why a batch's injected context cannot be read; the message says the
/// fix.
#[derive(Debug, thiserror::Error)]
enum ContextError {
    /// The header came more than once.
    #[error(
        "more than one `{header}` header; send one `{header}` header {holding}",
        header = CONTEXT_HEADER,
        holding = HOLDING
    )]
    Repeated,
    /// The header is not a JSON object.
    #[error(
        "the `{header}` header is not a JSON object; send one `{header}` header {holding}",
        header = CONTEXT_HEADER,
        holding = HOLDING
    )]
    NotAnObject,
}

/// What the context header holds, for [`ContextError`]'s messages.
const HOLDING: &str = r#"holding a JSON object, e.g. {"user":"ada"}"#;

/// The batch's injected context, from [`CONTEXT_HEADER`].
fn injected_context(headers: &HeaderMap) -> Result<Option<Value>, ContextError> {
    let mut values = headers.get_all(CONTEXT_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ContextError::Repeated);
    }
    // UTF-8, not only visible ASCII: a user may be called José.
    match std::str::from_utf8(value.as_bytes())
        .ok()
        .map(serde_json::from_str::<Value>)
    {
        Some(Ok(context @ Value::Object(_))) => Ok(Some(context)),
        _ => Err(ContextError::NotAnObject),
    }
}

/// The refusal of a batch with a call to a tool `principal` lacks a scope
/// for: nothing of the batch runs, and the answer names the scopes.
fn missing_scope(
    host: &ToolHost,
    calls: &[ToolCall],
    principal: &Principal,
) -> Option<AuthRefusal> {
    calls.iter().find_map(|call| {
        let scopes = crate::serve::auth::required_scopes(host, &call.name);
        (!principal.holds(&scopes)).then(|| AuthRefusal::Scope {
            tool: call.name.clone(),
            scopes,
        })
    })
}

/// `POST /v1/tool_calls`: the batch read in any shape [`wire::calls`]
/// knows, run, and answered in order in the `?format=` asked for; with
/// `?async=1`, started as tasks and answered 202 with their ids.
pub(super) async fn tool_calls(
    State(shared): State<Shared>,
    principal: Option<Extension<Principal>>,
    peer: Option<Extension<super::listen::Peer>>,
    query: Result<Query<FormatQuery>, QueryRejection>,
    headers: HeaderMap,
    // Read whole by `check_request`, within --max-body and its deadline.
    body: Bytes,
) -> Response {
    let reject = |reason: &'static str, status: StatusCode, message: String| {
        shared.metrics().reject("http", reason);
        error(status, "invalid_request", message)
    };
    let Ok(Query(query)) = query else {
        let message = super::routes::FormatError::Query.to_string();
        return reject("bad_format", StatusCode::BAD_REQUEST, message);
    };
    let (format, asynchronous) = match (query.format(), query.asynchronous()) {
        (Ok(format), Ok(asynchronous)) => (format, asynchronous),
        (Err(e), _) | (_, Err(e)) => {
            return reject("bad_format", StatusCode::BAD_REQUEST, e.to_string());
        }
    };
    let calls = match read_calls(&shared, &headers, &body) {
        Ok(calls) => calls,
        Err((reason, status, message)) => return reject(reason, status, message),
    };
    let Some(principal) = super::routes::caller(&shared, principal) else {
        return reject(
            "unauthenticated",
            StatusCode::UNAUTHORIZED,
            "no caller".into(),
        );
    };
    // Tools whose components are still compiling at start are waited for.
    let names: Vec<&str> = calls.iter().map(|call| call.name.as_str()).collect();
    let host = shared.host_for(&names).await;
    if let Some(refused) = unauthorized(&shared, &host, &calls, &principal) {
        return refused;
    }
    let context = match call_context(&shared, &principal, &headers) {
        Ok(context) => context,
        Err(message) => return reject("bad_context", StatusCode::BAD_REQUEST, message),
    };
    if asynchronous {
        let format = query.format_text();
        let peer = peer.map(|Extension(super::listen::Peer(ip))| ip);
        let call = super::tasks::Call {
            calls,
            context,
            format,
        };
        return super::tasks::start(&shared, &host, &principal, peer, call).await;
    }
    let mut env = CallOptions::default().approver(shared.refuse());
    if let Some(context) = context {
        env = env.context(context);
    }
    let results = match admit_and_run(&shared, &host, &principal, calls, env).await {
        Ok(results) => results,
        Err(refused) => return refused,
    };
    let mut answers = wire::results::Answers::new(format);
    let mut body: Vec<Value> = results
        .iter()
        .map(|result| answers.answer(&result.outcome, result.spec.as_deref()))
        .collect();
    // OpenAI's answers end with the user message carrying their images.
    body.extend(answers.finish());
    axum::Json(body).into_response()
}

/// A request refused before anything ran: the reason `/metrics` counts,
/// the status and the message.
type Rejection = (&'static str, StatusCode, String);

/// The batch `body` carries, declared JSON, in any shape [`wire::calls`]
/// knows, within `--max-batch`.
fn read_calls(
    shared: &Shared,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<ToolCall>, Rejection> {
    if !json_body(headers) {
        return Err((
            "content_type",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the tool calls as JSON with `Content-Type: application/json`".into(),
        ));
    }
    let Ok(text) = std::str::from_utf8(body) else {
        return Err((
            "malformed",
            StatusCode::BAD_REQUEST,
            "the body is not UTF-8 text; send a JSON array of tool calls".into(),
        ));
    };
    match wire::parse_batch_at_most(text, shared.max_batch) {
        Ok(calls) => Ok(calls),
        Err(wire::BatchError::TooMany { count, max }) => Err((
            "batch_too_large",
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request carries {count} tool calls; this server takes at most {max} at once \
                 (split the batch, or {})",
                shared.fixes().max_batch
            ),
        )),
        Err(wire::BatchError::Unreadable(message)) => {
            Err(("malformed", StatusCode::BAD_REQUEST, message))
        }
    }
}

/// The refusal of a batch a caller told apart from others may not run: one
/// naming a tool no tool has (whose usual answer lists every tool; refused
/// here, naming where this caller's tools are listed) or a tool whose
/// scopes the caller lacks (403, naming them).
fn unauthorized(
    shared: &Shared,
    host: &ToolHost,
    calls: &[ToolCall],
    principal: &Principal,
) -> Option<Response> {
    let auth = shared.auth()?;
    if let Some(call) = calls.iter().find(|c| host.spec(&c.name).is_none()) {
        shared.metrics().reject("http", "unknown_tool");
        return Some(error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!(
                "unknown tool {:?}; GET /v1/tools lists the tools you may call",
                crate::printable::one_line(&call.name, 64)
            ),
        ));
    }
    let refusal = missing_scope(host, calls, principal)?;
    shared.metrics().reject("http", refusal.reason());
    Some(auth.refusal(&refusal))
}

/// Whether the body is declared JSON (`Content-Type: application/json`,
/// parameters allowed).
fn json_body(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

/// The batch's injected context: the principal's (from its claims, and
/// the header where the bindings let the caller choose); the message of a
/// context that cannot be used.
fn call_context(
    shared: &Shared,
    principal: &Principal,
    headers: &HeaderMap,
) -> Result<Option<Value>, String> {
    let requested = injected_context(headers).map_err(|e| e.to_string())?;
    principal
        .context(shared.bindings(), requested)
        .map_err(|e| e.to_string())
}

/// Run `calls` once `[serve.limits]` has admitted them all (the 429 to
/// answer when it has not), holding their permits until every call has
/// answered.
async fn admit_and_run(
    shared: &Shared,
    host: &ToolHost,
    principal: &Principal,
    calls: Vec<ToolCall>,
    env: CallOptions,
) -> Result<Vec<crate::tool_host::CallResult>, Response> {
    let names: Vec<&str> = calls.iter().map(|call| call.name.as_str()).collect();
    let _permits = shared
        .admit(principal, &names)
        .await
        .map_err(|refusal| rate_limited(&refusal, calls.len()))?;
    drop(names);
    // Dropping this future (a client that hung up) aborts the calls.
    Ok(shared.call_batch(host, calls, env, "http").await)
}

/// The answer to a batch `[serve.limits]` refused: 429, with when to try
/// again in `Retry-After` and the budget and the fix in the body.
pub(super) fn rate_limited(refusal: &crate::serve::fair::Refusal, calls: usize) -> Response {
    let secs = refusal.retry_after_secs();
    let message = if calls > 1 {
        format!("{refusal} (the batch's {calls} calls are admitted together; none of them ran)")
    } else {
        refusal.to_string()
    };
    let mut response = error(StatusCode::TOO_MANY_REQUESTS, "rate_limited", message);
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
    response
}
