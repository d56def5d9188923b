//! `tools/call`: the tool resolved and checked against what the client
//! declared, the call's environment (the application's context, who is
//! asked for approval and answers, where its log lines and progress go),
//! the call run until it ends or the client cancels it, and its outcome
//! rendered as a `CallToolResult`.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData, ResultType};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;
use tokio::task::JoinHandle;

use super::ask::AskTheClient;
use super::capabilities::{can_ask, can_ask_in_results, missing_capabilities, stateless};
use super::forward::CallForwarder;
use super::{CONTEXT_META_KEY, McpServer, NOTIFY_TIMEOUT};
use crate::identity::Principal;
use crate::tool_call::{Arguments, ToolCall};
use crate::tool_host::{CallOptions, CallResult, Tool, ToolHost};
use crate::wire;

impl McpServer {
    /// Answer a `tools/call`: a JSON-RPC error when the call cannot be
    /// made at all (a name no loaded tool has, a client without a
    /// capability the tool requires, a malformed context), otherwise the
    /// call's outcome, failed calls included, as a `CallToolResult`.
    pub(super) async fn call(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let host = self.host_for(&request.name, &context).await;
        // Before anything is sent on the request's stream: a refusal here is
        // the whole answer (HTTP 400 for a 2026-07-28 request).
        let principal = self.principal(&context)?;
        let tool = self.callable(&host, &request.name, &context, &principal)?;
        // Answers the client gives up front, or with a retry: each answers
        // the call's question of its key, when it asks one.
        let mut given = super::mrtr::answers(request.input_responses)?;
        if let Some(state) = request.request_state.as_deref() {
            let name = &tool.spec().name;
            let running = self
                .parking
                .resume(principal.id(), name, state, &mut given)?;
            return self
                .wait_on(running, &principal, name, &context, given)
                .await;
        }
        if super::tasks::as_task(tool, &context)? {
            let injected = self.injected_context(&context, &principal)?;
            let arguments = Value::Object(request.arguments.unwrap_or_default());
            return self
                .start_task(&host, &principal, &context, tool, arguments, injected)
                .await;
        }
        // Held until the call has answered.
        let permit = self
            .shared
            .admit(&principal, &[tool.spec().name.as_str()])
            .await
            .map_err(|refusal| rate_limited(&refusal))?;
        let (env, forwarding) = self.call_env(tool, &context, &principal)?;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        if stateless(&context) {
            // Its questions answer the request with input-required results.
            let call = ToolCall {
                id: context.id.to_string(),
                name: tool.spec().name.clone(),
                arguments: Arguments::Json(arguments),
            };
            let asks = can_ask_in_results(&context);
            let running = self.spawn_call(&host, call, env, permit, asks);
            let answer = self
                .wait_on(running, &principal, &tool.spec().name, &context, given)
                .await;
            if let Some(forwarding) = forwarding {
                if matches!(answer, Ok(CallToolResponse::InputRequired(_))) {
                    // The call waits on, holding the forwarder open: this
                    // request's stream has nothing more of it to carry.
                    forwarding.abort();
                } else {
                    flush(forwarding, &tool.spec().name).await;
                }
            }
            return answer;
        }
        let _permit = permit;
        let run = self
            .shared
            .call_tool(tool, context.id.to_string(), arguments, env, "mcp");
        // A cancelled request drops the call, which stops its instance.
        let result = tokio::select! {
            result = run => result,
            () = context.ct.cancelled() => {
                tracing::info!(tool = %tool.spec().name, "call cancelled by the client");
                // Nothing more of the call reaches the client: its
                // callees' tasks may still be ending.
                if let Some(forwarding) = forwarding {
                    forwarding.abort();
                }
                return Err(ErrorData::internal_error("the request was cancelled", None));
            }
        };
        if let Some(forwarding) = forwarding {
            flush(forwarding, &tool.spec().name).await;
        }
        call_tool_result(&result)
    }

    /// The tool `name` names, if this client can call it: JSON-RPC error
    /// −32602 for a name no loaded tool has (as the specification asks),
    /// −32021 for a client that lacks a capability the tool's component
    /// requires. Each refusal is counted.
    fn callable<'h>(
        &self,
        host: &'h ToolHost,
        name: &str,
        context: &RequestContext<RoleServer>,
        principal: &Principal,
    ) -> Result<Tool<'h>, ErrorData> {
        let Some(tool) = host.tool(name) else {
            self.shared.metrics().reject("mcp", "unknown_tool");
            // Only the tools this caller may call: the others' names are not
            // its to learn.
            let known: Vec<&str> = host
                .specs()
                .filter(|s| principal.holds(&crate::serve::auth::required_scopes(host, &s.name)))
                .map(|s| s.name.as_str())
                .take(20)
                .collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {:?}; available tools: {}",
                    crate::outcome::clip(name, 64),
                    known.join(", ")
                ),
                None,
            ));
        };
        // The HTTP edge answered this 403 already; stdio callers hold
        // every scope. This holds for a server built into another app.
        let scopes = crate::serve::auth::required_scopes(host, name);
        if !principal.holds(&scopes) {
            self.shared.metrics().reject("mcp", "insufficient_scope");
            return Err(ErrorData::invalid_request(
                format!(
                    "calling `{name}` needs the scopes {}; get a token that holds them",
                    scopes.join(" ")
                ),
                None,
            ));
        }
        if let Some(missing) = missing_capabilities(
            &tool.spec().name,
            tool.component(),
            context.client_capabilities(),
        ) {
            self.shared.metrics().reject("mcp", "client_capability");
            return Err(missing);
        }
        Ok(tool)
    }

    /// What a call of `tool` runs with: the application's context from the
    /// request's `_meta` (never the model's), the client as approver and
    /// asker when it can be asked (nobody otherwise), and a forwarder for
    /// the call's log lines and progress when the client wants them, with
    /// the task that sends them.
    fn call_env(
        &self,
        tool: Tool<'_>,
        context: &RequestContext<RoleServer>,
        principal: &Principal,
    ) -> Result<(CallOptions, Option<JoinHandle<()>>), ErrorData> {
        let mut env = CallOptions::default().approver(self.shared.refuse());
        if let Some(injected) = self.injected_context(context, principal)? {
            env = env.context(injected);
        }
        let minimum = self.log_level(context);
        let progress_token = context.meta.get_progress_token();
        let forwarding = if minimum.is_some() || progress_token.is_some() {
            let (forwarder, task) = CallForwarder::start(
                minimum,
                progress_token,
                &tool.spec().name,
                context.peer.clone(),
            );
            env = env.observer(forwarder);
            Some(task)
        } else {
            None
        };
        if can_ask(context) {
            let client = Arc::new(AskTheClient::new(context.peer.clone()));
            env = env.approver(client.clone()).asker(client);
        }
        Ok((env, forwarding))
    }
}

impl McpServer {
    /// The context the call runs with: the request's `_meta` (never the
    /// model's arguments), as the principal's bindings allow it. A refusal
    /// is counted.
    pub(super) fn injected_context(
        &self,
        context: &RequestContext<RoleServer>,
        principal: &Principal,
    ) -> Result<Option<Value>, ErrorData> {
        injected_context(&self.shared, &context.meta, principal).inspect_err(|_| {
            self.shared.metrics().reject("mcp", "bad_context");
        })
    }
}

/// The context a call with the request `_meta` `meta` runs with, as
/// `principal`'s bindings allow it; the refusal, uncounted.
pub(super) fn injected_context(
    shared: &crate::serve::Shared,
    meta: &rmcp::model::RequestMetaObject,
    principal: &Principal,
) -> Result<Option<Value>, ErrorData> {
    let requested = match meta.get(CONTEXT_META_KEY) {
        None | Some(Value::Null) => None,
        Some(injected @ Value::Object(_)) => Some(injected.clone()),
        Some(_) => {
            return Err(ErrorData::invalid_params(
                format!(
                    "_meta[\"{CONTEXT_META_KEY}\"] must be a JSON object, e.g. {{\"user\":\"ada\"}}"
                ),
                None,
            ));
        }
    };
    principal
        .context(shared.bindings(), requested)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))
}

/// Let the call's log lines and progress go out before its result, unless
/// the client does not read them: then they are dropped, never the result.
async fn flush(mut forwarding: JoinHandle<()>, tool: &str) {
    if tokio::time::timeout(NOTIFY_TIMEOUT, &mut forwarding)
        .await
        .is_err()
    {
        forwarding.abort();
        tracing::debug!(tool = %tool, "log lines for the MCP client were dropped: it does not read them");
    }
}

/// The call's outcome as rmcp types it, shaped by the one MCP mapping in
/// [`wire::results`] after the spec the call resolved to.
pub(super) fn call_tool_result(result: &CallResult) -> Result<CallToolResponse, ErrorData> {
    let rendered = wire::results::render(
        &result.outcome,
        result.spec.as_deref(),
        wire::results::Format::Mcp,
    );
    let mut result: CallToolResult = serde_json::from_value(rendered)
        .map_err(|e| ErrorData::internal_error(format!("the result cannot be sent: {e}"), None))?;
    // rmcp drops it again for clients older than 2026-07-28.
    result.result_type = Some(ResultType::COMPLETE);
    Ok(result.into())
}

/// The JSON-RPC error code of a call `[serve.limits]` refused. MCP defines
/// none for rate limits; this one is in JSON-RPC's range for
/// implementation-defined server errors, and ends in HTTP's 429.
pub const RATE_LIMITED: i32 = -32029;

/// The error for a call `[serve.limits]` refused: [`RATE_LIMITED`], the
/// budget and the fix in the message, and `data.retryAfter` (whole
/// seconds, as HTTP's `Retry-After`) and `data.reason` (the budget that
/// refused, as `/metrics` counts it) for a client to act on.
pub(super) fn rate_limited(refusal: &crate::serve::fair::Refusal) -> ErrorData {
    ErrorData::new(
        rmcp::model::ErrorCode(RATE_LIMITED),
        refusal.to_string(),
        Some(serde_json::json!({
            "retryAfter": refusal.retry_after_secs(),
            "reason": refusal.reason.as_str(),
        })),
    )
}

impl McpServer {
    /// The tools for a call of `name`: when no loaded tool has the name
    /// and components are still compiling at start, once they are (see
    /// [`crate::serve::Shared::host_for`]); a client that asked for
    /// progress is told it waits, and why.
    async fn host_for(&self, name: &str, context: &RequestContext<RoleServer>) -> ToolHost {
        if self.shared.is_loading()
            && self.shared.host().tool(name).is_none()
            && let Some(token) = context.meta.get_progress_token()
        {
            let mut waiting = rmcp::model::ProgressNotificationParam::new(token, 0.0);
            waiting.message = Some(
                "waiting for the components compiling at start (a first run compiles each once)"
                    .into(),
            );
            let _ =
                tokio::time::timeout(NOTIFY_TIMEOUT, context.peer.notify_progress(waiting)).await;
        }
        self.shared.host_for(&[name]).await
    }
}
