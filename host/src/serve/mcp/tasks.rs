//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663, on
//! 2026-07-28): a `tools/call` answered with a task handle, read with
//! `tasks/get`, its questions answered with `tasks/update`, stopped with
//! `tasks/cancel`.
//!
//! A call becomes a task when its tool's `[[tool]]` entry says
//! `task_support = "optional"` or `"required"` and the request declares the
//! extension in its capabilities (the server decides, as SEP-2663 has it;
//! a `"required"` tool refuses a client that did not declare it). The task
//! is the same durable task as `POST /v1/tool_calls?async=1` starts
//! ([`crate::serve::tasks`]): kept in `[serve.tasks]`'s store, so any
//! replica answers for it, and its principal's only: another's task id
//! gets exactly the answer an unknown id gets.

use rmcp::model::{
    CallToolResponse, CancelTaskParams, ClientCapabilities, CreateTaskResult, DetailedTask,
    ElicitRequest, ErrorCode, ErrorData, GetTaskParams, GetTaskResult, InputRequest, InputRequests,
    JsonObject, Task, TaskPayload, TaskStatus, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

use super::capabilities::stateless;
use super::{McpServer, RATE_LIMITED};
use crate::component::TaskSupport;
use crate::identity::Principal;
use crate::serve::tasks::input::{Answered, Reply};
use crate::serve::tasks::{self, Cancelled, Record, Started, State, StoreDown};
use crate::tool_call::{Arguments, ToolCall};
use crate::tool_host::{Tool, ToolHost};

/// How often a client should poll `tasks/get` (`pollIntervalMs`): a
/// second keeps a long call's answer prompt without a poll a request.
const POLL_INTERVAL_MS: u64 = 1000;

/// Whether the call of `tool` this request makes becomes a task: the
/// tool allows it and the request declared the extension. A tool that
/// requires tasks refuses a request that did not (−32021, naming the
/// extension).
pub(super) fn as_task(
    tool: Tool<'_>,
    context: &RequestContext<RoleServer>,
) -> Result<bool, ErrorData> {
    let declared = stateless(context)
        && context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
    match tool.component().task_support {
        TaskSupport::Optional => Ok(declared),
        TaskSupport::Required if declared => Ok(true),
        TaskSupport::Required => Err(ErrorData::new(
            ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
            format!(
                "tool '{}' runs only as a task: declare the {} extension in the request's \
                 client capabilities (a 2026-07-28 request), then poll tasks/get for its result",
                crate::outcome::clip(&tool.spec().name, 64),
                rmcp::model::TASKS_EXTENSION_ID
            ),
            serde_json::to_value(ClientCapabilities::builder().enable_tasks().build())
                .ok()
                .map(|caps| json!({"requiredCapabilities": caps})),
        )),
        _ => Ok(false),
    }
}

/// The answer to a task id that is not the caller's, whether or not it
/// exists: nobody learns which ids exist.
fn not_found() -> ErrorData {
    ErrorData::invalid_params(
        "no task of yours has this id (finished tasks are kept for [serve.tasks] ttl, then \
         forgotten); call the tool again",
        None,
    )
}

fn store_down(down: StoreDown) -> ErrorData {
    ErrorData::internal_error(down.to_string(), Some(json!({"retryAfter": 1})))
}

/// When, as RFC 3339 in UTC.
fn time(ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(at).to_string()
}

fn status(state: State) -> TaskStatus {
    match state {
        State::Working => TaskStatus::Working,
        State::InputRequired => TaskStatus::InputRequired,
        State::Completed => TaskStatus::Completed,
        State::Failed => TaskStatus::Failed,
        State::Cancelled => TaskStatus::Cancelled,
    }
}

impl McpServer {
    /// `record` as an MCP task; its `ttlMs` is how long it is kept once
    /// finished (`[serve.tasks] ttl`).
    fn task_of(&self, record: &Record) -> Task {
        let ttl = u64::try_from(self.shared.tasks().policy().ttl.as_millis()).unwrap_or(u64::MAX);
        let mut task = Task::new(
            record.id.clone(),
            status(record.state),
            time(record.created_ms),
            time(record.updated_ms),
        )
        .with_ttl_ms(ttl)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
        if let Some(reason) = &record.reason {
            task = task.with_status_message(reason.clone());
        }
        task
    }

    /// Start the call of `tool` as a task of `principal`, who sent
    /// `request`: its handle, or the refusal (nothing started).
    pub(super) async fn start_task(
        &self,
        host: &ToolHost,
        principal: &Principal,
        request: &RequestContext<RoleServer>,
        tool: Tool<'_>,
        arguments: Value,
        context: Option<Value>,
    ) -> Result<CallToolResponse, ErrorData> {
        let call = ToolCall {
            id: format!("task-call-{}", tasks::random_id()),
            name: tool.spec().name.clone(),
            arguments: Arguments::Json(arguments),
        };
        let started = tasks::start_from(
            &self.shared,
            host,
            principal,
            Self::peer(request),
            vec![call],
            context,
            tasks::Front {
                format: "mcp",
                asks: super::capabilities::can_ask_in_results(request),
            },
        );
        match started.await {
            Ok(records) => {
                let record = records.first().ok_or_else(|| {
                    ErrorData::internal_error("the task was started but not returned", None)
                })?;
                Ok(CreateTaskResult::new(self.task_of(record)).into())
            }
            Err(Started::Full { unfinished, max }) => {
                self.shared.metrics().reject("mcp", "too_many_tasks");
                Err(ErrorData::new(
                    ErrorCode(RATE_LIMITED),
                    format!(
                        "you have {unfinished} tasks not yet finished; at most {max} may be \
                         unfinished at once ([serve.tasks] max_per_principal). Wait for some to \
                         finish (tasks/get) or cancel them (tasks/cancel); nothing was started"
                    ),
                    Some(json!({"reason": "too_many_tasks", "retryAfter": 1})),
                ))
            }
            Err(Started::Refused(refusal)) => Err(super::call::rate_limited(&refusal)),
            Err(Started::Down(down)) => Err(store_down(down)),
        }
    }

    /// `tasks/get`: the task as its owner sees it, its result inline once
    /// completed, its questions while it waits on them.
    pub(super) async fn get_task_of(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let principal = self.principal(&context)?;
        let record = tasks::view(&self.shared, &principal, &request.task_id)
            .await
            .map_err(store_down)?
            .ok_or_else(not_found)?;
        let payload = payload(&record)?;
        Ok(GetTaskResult::new(DetailedTask::new(
            self.task_of(&record),
            payload,
        )))
    }

    /// `tasks/cancel`: stop the task's call wherever it runs.
    pub(super) async fn cancel_task_of(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context)?;
        match tasks::cancel(&self.shared, &principal, &request.task_id)
            .await
            .map_err(store_down)?
        {
            Cancelled::Now(_) => Ok(()),
            Cancelled::AlreadyFinished(record) => Err(ErrorData::invalid_params(
                format!(
                    "the task already finished ({}); there is nothing to cancel",
                    serde_json::to_value(status(record.state))
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                ),
                None,
            )),
            Cancelled::NotFound => Err(not_found()),
        }
    }

    /// `tasks/update`: the answers to the task's outstanding questions.
    /// Keys of no outstanding question are ignored, as SEP-2663 asks; an
    /// answer that is no elicitation result is refused, naming its key.
    pub(super) async fn update_task_of(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context)?;
        // One read: the caller's task (or the answer an unknown id gets),
        // and the one question it waits on. Other keys are ignored without
        // touching the store, however many a request carries.
        let record = tasks::view(&self.shared, &principal, &request.task_id)
            .await
            .map_err(store_down)?
            .ok_or_else(not_found)?;
        let Some(waiting) = record.input.as_ref().map(|p| p.key.as_str()) else {
            return Ok(());
        };
        let Some((key, value)) = request.input_responses.get_key_value(waiting) else {
            return Ok(());
        };
        let reply = reply_of(key, value)?;
        let answered = tasks::input::answer(&self.shared, &principal, &request.task_id, key, reply)
            .await
            .map_err(store_down)?;
        if let Answered::NotFound = answered {
            return Err(not_found());
        }
        Ok(())
    }
}

/// A task's status-specific part: its questions, result or error.
fn payload(record: &Record) -> Result<TaskPayload, ErrorData> {
    Ok(match record.state {
        State::Working => TaskPayload::Working,
        State::InputRequired => TaskPayload::InputRequired {
            input_requests: input_requests(record)?,
        },
        State::Completed => {
            let result = match &record.result {
                Some(Value::Object(result)) => result.clone(),
                _ => JsonObject::new(),
            };
            TaskPayload::Completed { result }
        }
        State::Failed => {
            let message = record
                .reason
                .clone()
                .unwrap_or_else(|| "the task failed".into());
            let error = json!({"code": ErrorCode::INTERNAL_ERROR.0, "message": message});
            TaskPayload::Failed {
                error: error.as_object().cloned().unwrap_or_default(),
            }
        }
        State::Cancelled => TaskPayload::Cancelled,
    })
}

/// The task's outstanding question as MCP input requests: an elicitation
/// form, in the one shape every question reaches an MCP client in.
fn input_requests(record: &Record) -> Result<InputRequests, ErrorData> {
    let mut requests = InputRequests::new();
    let Some(pending) = record.input.as_ref().filter(|p| p.reply.is_none()) else {
        return Ok(requests);
    };
    let params = super::ask::question_params(&pending.tool, &pending.message, &pending.schema)
        .map_err(|e| {
            ErrorData::internal_error(format!("the question cannot be shown: {e}"), None)
        })?;
    requests.insert(
        pending.key.clone(),
        InputRequest::Elicitation(ElicitRequest::new(params)),
    );
    Ok(requests)
}

/// The client's answer to the question `key`, an elicitation result.
pub(super) fn reply_of(key: &str, value: &Value) -> Result<Reply, ErrorData> {
    // Kept in the task's record until the call takes it: no larger than
    // the sandbox takes an answer (64 KiB), with room for the envelope.
    const MAX_REPLY: usize = 80 * 1024;
    if serde_json::to_vec(value).map_or(true, |bytes| bytes.len() > MAX_REPLY) {
        return Err(ErrorData::invalid_params(
            format!(
                "inputResponses[{:?}] is over {MAX_REPLY} bytes; a tool takes answers of at most 64 KiB",
                crate::outcome::clip(key, 64)
            ),
            None,
        ));
    }
    let result: rmcp::model::ElicitResult = serde_json::from_value(value.clone()).map_err(|e| {
        ErrorData::invalid_params(
            format!(
                "inputResponses[{:?}] is not an elicitation result ({e}); answer with \
                     {{\"action\": \"accept\", \"content\": {{…}}}}, or action decline or cancel",
                crate::outcome::clip(key, 64)
            ),
            None,
        )
    })?;
    Ok(match result.action {
        rmcp::model::ElicitationAction::Accept => {
            Reply::Accepted(result.content.unwrap_or_else(|| json!({})))
        }
        rmcp::model::ElicitationAction::Decline => Reply::Declined,
        _ => Reply::Cancelled,
    })
}
