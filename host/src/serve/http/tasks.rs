//! Durable tasks on the HTTP API (see [`crate::serve::tasks`]):
//!
//! | request | answer |
//! |---|---|
//! | `POST /v1/tool_calls?async=1` | 202, one task per call, in order: `[{"id","state":"working",…}]` |
//! | `GET /v1/tasks/ID` | 200, the task; its `result` once `completed` |
//! | `DELETE /v1/tasks/ID` | 200, the task cancelled (its call stopped); 409 if it had finished |
//!
//! A task is its principal's: another's id and an id that does not exist
//! get the same 404, so nobody learns which ids exist. Too many
//! unfinished tasks is 429 (`too_many_tasks`), nothing started; a store
//! that cannot be reached is 503.

use axum::extract::{Extension, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error;
use crate::identity::Principal;
use crate::serve::Shared;
use crate::serve::tasks::{self, Cancelled, Record, Started, StoreDown};
use crate::tool_call::ToolCall;
use crate::tool_host::ToolHost;

/// The answer to an id that is not the caller's, whether or not it exists.
fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no task of yours has this id (it may have expired: finished tasks are kept for \
         [serve.tasks] ttl); start the call again with POST /v1/tool_calls?async=1",
    )
}

fn unavailable(down: StoreDown) -> Response {
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        down.to_string(),
    );
    response.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from_static(super::RETRY_AFTER_SECONDS),
    );
    response
}

/// When, as RFC 3339 in UTC.
fn time(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// A task as its owner sees it.
fn task_json(record: &Record) -> Value {
    let mut task = json!({
        "id": record.id,
        "state": record.state,
        "tool": record.tool,
        "tool_call_id": record.call_id,
        "created_at": time(record.created_ms),
        "updated_at": time(record.updated_ms),
    });
    if let Some(result) = &record.result {
        task["result"] = result.clone();
    }
    if let Some(follow_up) = &record.follow_up {
        task["follow_up"] = follow_up.clone();
    }
    if let Some(reason) = &record.reason {
        let kind = match record.state {
            tasks::State::Cancelled => "cancelled",
            _ => "task_failed",
        };
        task["error"] = json!({"type": kind, "message": reason});
    }
    task
}

/// What a request asks to start as tasks.
pub(super) struct Call<'a> {
    pub(super) calls: Vec<ToolCall>,
    pub(super) context: Option<Value>,
    /// The answers' format, as `?format=` names it.
    pub(super) format: &'a str,
}

/// Start `call`'s calls as tasks of `principal`, asked from `peer`: 202
/// with them, in order, or the refusal.
pub(super) async fn start(
    shared: &Shared,
    host: &ToolHost,
    principal: &Principal,
    peer: Option<std::net::IpAddr>,
    call: Call<'_>,
) -> Response {
    let Call {
        calls,
        context,
        format,
    } = call;
    let count = calls.len();
    match tasks::start_from(
        shared,
        host,
        principal,
        peer,
        calls,
        context,
        tasks::Front {
            format,
            asks: false,
        },
    )
    .await
    {
        Ok(records) => {
            let body: Vec<Value> = records.iter().map(task_json).collect();
            (StatusCode::ACCEPTED, axum::Json(body)).into_response()
        }
        Err(Started::Full { unfinished, max }) => {
            shared.metrics().reject("http", "too_many_tasks");
            error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_tasks",
                format!(
                    "you have {unfinished} tasks not yet finished and this request would start \
                     {count} more; at most {max} may be unfinished at once ([serve.tasks] \
                     max_per_principal{per_address}). Wait for some to finish (GET /v1/tasks/ID) \
                     or cancel them (DELETE /v1/tasks/ID); nothing of this request was started",
                    per_address = if shared.auth().is_some() {
                        ""
                    } else {
                        ", counted per client address on a server without [serve.auth]"
                    }
                ),
            )
        }
        Err(Started::Refused(refusal)) => super::tool_calls::rate_limited(&refusal, count),
        Err(Started::Down(down)) => unavailable(down),
    }
}

/// `GET /v1/tasks/ID`.
pub(super) async fn get_task(
    State(shared): State<Shared>,
    principal: Option<Extension<Principal>>,
    Path(id): Path<String>,
) -> Response {
    let Some(principal) = super::routes::caller(&shared, principal) else {
        return not_found();
    };
    match tasks::view(&shared, &principal, &id).await {
        Ok(Some(record)) => axum::Json(task_json(&record)).into_response(),
        Ok(None) => not_found(),
        Err(down) => unavailable(down),
    }
}

/// `DELETE /v1/tasks/ID`: cancel it.
pub(super) async fn cancel_task(
    State(shared): State<Shared>,
    principal: Option<Extension<Principal>>,
    Path(id): Path<String>,
) -> Response {
    let Some(principal) = super::routes::caller(&shared, principal) else {
        return not_found();
    };
    match tasks::cancel(&shared, &principal, &id).await {
        Ok(Cancelled::Now(record)) => axum::Json(task_json(&record)).into_response(),
        Ok(Cancelled::AlreadyFinished(record)) => error(
            StatusCode::CONFLICT,
            "task_finished",
            format!(
                "the task already finished ({}); there is nothing to cancel",
                task_json(&record)["state"].as_str().unwrap_or_default()
            ),
        ),
        Ok(Cancelled::NotFound) => not_found(),
        Err(down) => unavailable(down),
    }
}
