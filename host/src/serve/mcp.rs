//! The MCP server: `tools/list` and `tools/call` over stdio or Streamable
//! HTTP, built on rmcp.
//!
//! Both protocol eras are served and negotiated per request by rmcp:
//! 2025-11-25 clients (`initialize`, sessions optional) and the stateless
//! 2026-07-28 revision (`server/discover`, per-request `_meta`).
//!
//! - `tools/list`: every loaded tool, shaped by
//!   [`crate::wire::definitions`] (title, annotations from the hints, the
//!   input schema, an output schema that is always an object schema).
//! - `tools/call`: the dispatcher's outcome, shaped by
//!   [`crate::wire::results`]: `isError` for every failed outcome (invalid
//!   arguments included), the typed error in `_meta`. A name no loaded tool
//!   has is JSON-RPC error −32602, as the specification asks.
//! - Cancellation: `notifications/cancelled`, or an HTTP client that drops
//!   its stream, drops the call, which stops its instance.
//! - Approval: a tool that needs approval runs when the operator passed
//!   `--yes`, or when the person at a 2025-11-25 client that supports
//!   elicitation says yes (`elicitation/create`); otherwise it is refused
//!   (`denied_by_user`). (2026-07-28 forbids requests from server to
//!   client; asking there waits on input-required results, contract 0.2.)
//!   Neither the model nor the client can grant a capability: approval only
//!   lets a call run with the grants the manifest already gave.
//! - Logging: once a client sets a level (`logging/setLevel`, or a
//!   2026-07-28 request's `_meta` log level), the lines the tool logs at or
//!   above it reach the client as `notifications/message` while the call
//!   runs, masked and within the call's log budget, before its result.
//! - A reload (`--watch`) sends `notifications/tools/list_changed` to every
//!   connected client.

// MCP logging is deprecated by SEP-2577 (2026-07-28), and rmcp marks its
// types so; 2025-11-25 clients still ask for it.
#![allow(deprecated)]

use std::net::SocketAddr;
use std::sync::Arc;

use std::sync::Mutex;

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ClientResult, CompleteRequestMethod, CompleteRequestParams, CompleteResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData, Implementation,
    ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesRequestMethod,
    ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult, ListToolsResult,
    LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId, ResultType,
    ServerCapabilities, ServerConfig, ServerRequest, SetLevelRequestParams, SubscriptionFilter,
    Tool,
};
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, RoleServer, SubscriptionContext,
    SubscriptionSink,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::Value;

use super::requests::{Intake, Requests, Tracked};
use super::sessions::Sessions;
use super::{NobodyToAsk, ServeConfig, ServeError, Shared};
use crate::observe::{Answer, Asker, Progress, Question};
use crate::spec::ToolSpec;
use crate::tool_host::{Approver, CallOptions};

/// The `_meta` key of a `tools/call` request that carries the
/// application's injected context (a JSON object).
pub const CONTEXT_META_KEY: &str = "toolhost/context";
use crate::observe::{CallObserver, LogLevel};
use crate::tool_call::ToolCall;
use crate::wire;

/// How long a person has to answer an approval request.
const APPROVAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Whether the request speaks the stateless revision (2026-07-28 or later),
/// where every request says what it needs in its own `_meta` and the
/// server sends the client no requests of its own.
fn stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// Whether the client can be asked: it declared elicitation, and it speaks
/// a revision that lets the server send it requests (before 2026-07-28).
fn can_ask(context: &RequestContext<RoleServer>) -> bool {
    !stateless(context)
        && context
            .client_capabilities()
            .is_some_and(|c| c.elicitation.is_some())
}

/// Asks the person at the MCP client whether a call that needs approval may
/// run, and a tool's questions. An approval is a yes or no, never more: its
/// schema has one boolean.
#[derive(Debug)]
struct AskTheClient {
    peer: Peer<RoleServer>,
}

/// The most characters of a call's arguments an approval request shows;
/// past it, the request says how many more there are, so the person knows
/// what they cannot see.
const APPROVAL_ARGUMENTS: usize = 4000;

impl AskTheClient {
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

/// How long a person has to answer a tool's question (the sandbox bounds
/// it too, with what is left of the call's [`crate::sandbox::ASK_WAIT`]).
const ASK_TIMEOUT: std::time::Duration = crate::sandbox::ASK_WAIT;

impl Asker for AskTheClient {
    /// The question and its schema as the host made them safe to show
    /// (masked, printable, only the keywords of an elicitation form).
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let message = format!(
                "The tool '{}' asks: {}",
                crate::outcome::clip(&question.tool, 64),
                question.message
            );
            let params = match serde_json::from_value(serde_json::json!({
                "mode": "form",
                "message": message,
                "requestedSchema": question.schema,
            })) {
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

/// What the server tells clients about itself.
const INSTRUCTIONS: &str = "Each tool call runs in its own fresh WebAssembly sandbox with only the \
capabilities its manifest grants, under fuel, time and memory limits. A failed call has isError \
set and its typed error (type, message, retryable) in _meta[\"toolhost/error\"].";

/// One MCP connection's handler (one per stdio process, one per HTTP
/// session or stateless request); cheap to clone.
#[derive(Clone, Debug)]
pub struct McpServer {
    shared: Shared,
    listeners: Arc<Listeners>,
    /// The level this client asked for with `logging/setLevel`; none until
    /// it asks, and then no tool's lines are sent.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl McpServer {
    /// A handler serving `shared`'s tools; `listeners` is shared by every
    /// handler of one server, so that a reload reaches every client.
    fn new(shared: Shared, listeners: Arc<Listeners>) -> Self {
        Self {
            shared,
            listeners,
            log_level: Arc::default(),
        }
    }

    /// The level asked for by this request (2026-07-28), or by this
    /// connection (`logging/setLevel`) for a client of an earlier revision.
    /// A 2026-07-28 request gets lines only if it asks for them itself,
    /// whatever an earlier request on the same connection set.
    fn log_level(&self, context: &RequestContext<RoleServer>) -> Option<LoggingLevel> {
        if let Some(level) = context.meta.log_level() {
            return Some(level);
        }
        if stateless(context) {
            return None;
        }
        *self.log_level.lock().expect("log level lock")
    }
}

/// How long a notification may wait on a client that does not read.
const NOTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Lines that wait to be sent to the client; more than a call's whole log
/// budget (100 lines), so none is lost to a slow client within one call.
const QUEUED_LINES: usize = 128;

/// What a running call sends its client before its result.
enum Note {
    Log(LoggingLevel, String),
    Progress(ProgressNotificationParam),
}

/// Passes a call's log lines on as `notifications/message` (at the level
/// the client asked for) and its progress as `notifications/progress`
/// (when the request carried a `progressToken`).
#[derive(Debug)]
struct CallForwarder {
    minimum: Option<LoggingLevel>,
    progress_token: Option<ProgressToken>,
    tool: String,
    notes: tokio::sync::mpsc::Sender<Note>,
}

impl std::fmt::Debug for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Note")
    }
}

impl CallForwarder {
    /// The forwarder, and the task that sends what it queues to `peer`;
    /// the task ends once the forwarder is dropped and its queue is empty.
    fn start(
        minimum: Option<LoggingLevel>,
        progress_token: Option<ProgressToken>,
        tool: &str,
        peer: Peer<RoleServer>,
    ) -> (Arc<Self>, tokio::task::JoinHandle<()>) {
        let (notes, mut queued) = tokio::sync::mpsc::channel(QUEUED_LINES);
        let logger = tool.to_owned();
        let task = tokio::spawn(async move {
            while let Some(note) = queued.recv().await {
                let sent = match note {
                    Note::Log(level, line) => {
                        let message =
                            LoggingMessageNotificationParam::new(level, Value::String(line))
                                .with_logger(logger.clone());
                        peer.notify_logging_message(message).await
                    }
                    Note::Progress(progress) => peer.notify_progress(progress).await,
                };
                if sent.is_err() {
                    break;
                }
            }
        });
        let forwarder = Arc::new(Self {
            minimum,
            progress_token,
            tool: tool.to_owned(),
            notes,
        });
        (forwarder, task)
    }
}

fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Trace | LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warn => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// MCP's levels in order (rmcp's type has no order of its own).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

impl CallObserver for CallForwarder {
    fn wants(&self, level: LogLevel) -> bool {
        self.minimum
            .is_some_and(|minimum| rank(mcp_level(level)) >= rank(minimum))
    }

    fn log(&self, level: LogLevel, line: &str) {
        if self.wants(level)
            && self
                .notes
                .try_send(Note::Log(mcp_level(level), line.to_owned()))
                .is_err()
        {
            tracing::debug!(tool = %self.tool, "a log line for the MCP client was dropped: the client is not reading");
        }
    }

    fn progress(&self, progress: &Progress) {
        let Some(token) = &self.progress_token else {
            return;
        };
        let mut param = ProgressNotificationParam::new(token.clone(), progress.done);
        param.total = progress.total;
        param.message.clone_from(&progress.message);
        // Progress is lossy by nature: a report the client is too slow for
        // is dropped, and a later one says more.
        let _ = self.notes.try_send(Note::Progress(param));
    }
}

/// Who hears of a new tool list: 2025-11-25 clients by their connection
/// (stdio, or an HTTP session), 2026-07-28 clients by their open
/// `subscriptions/listen` request.
#[derive(Debug, Default)]
struct Listeners {
    peers: Mutex<Vec<Peer<RoleServer>>>,
    /// Open `subscriptions/listen` requests, by a number of their own;
    /// each removes itself when it ends.
    subscriptions: Mutex<std::collections::HashMap<u64, SubscriptionSink>>,
    next_subscription: std::sync::atomic::AtomicU64,
}

impl Listeners {
    fn add_peer(&self, peer: Peer<RoleServer>) {
        let mut peers = self.peers.lock().expect("listeners lock");
        peers.retain(|p| !p.is_transport_closed());
        peers.push(peer);
    }

    /// Tell every listener the tool list changed, forgetting those gone.
    /// Each is told on its own task, under [`NOTIFY_TIMEOUT`]: a client
    /// that does not read its stream holds up nobody else.
    fn tools_changed(&self) {
        let peers: Vec<_> = {
            let mut peers = self.peers.lock().expect("listeners lock");
            peers.retain(|p| !p.is_transport_closed());
            peers.clone()
        };
        for peer in peers {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, peer.notify_tool_list_changed()).await;
            });
        }
        let sinks: Vec<_> = self
            .subscriptions
            .lock()
            .expect("listeners lock")
            .values()
            .cloned()
            .collect();
        for sink in sinks {
            tokio::spawn(async move {
                let _ = tokio::time::timeout(NOTIFY_TIMEOUT, sink.notify_tool_list_changed()).await;
            });
        }
    }

    /// Until the server stops: pass every reload of `shared` on.
    fn spawn_notifier(self: &Arc<Self>, shared: &Shared) -> tokio::task::JoinHandle<()> {
        let mut changes = shared.changes();
        let listeners = self.clone();
        tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                listeners.tools_changed();
            }
        })
    }
}

/// The error for a call of `tool` by a client that did not declare every
/// capability its component requires (`client_capabilities` in the
/// manifest): MCP's `MissingRequiredClientCapability` (−32021), naming
/// what is missing in `data.requiredCapabilities`. Over the stateless
/// revision the server cannot put questions to the client yet (it would
/// take input-required results), so `elicitation` counts as missing there
/// whatever the client declared: the tool would otherwise fail halfway.
fn missing_capabilities(
    tool: &str,
    config: &crate::component::ComponentConfig,
    declared: Option<rmcp::model::ClientCapabilities>,
    stateless: bool,
) -> Option<ErrorData> {
    if config.client_capabilities.is_empty() {
        return None;
    }
    let declared = serde_json::to_value(declared.unwrap_or_default()).unwrap_or_default();
    let usable = |capability: &crate::component::ClientCapability| {
        let unusable = stateless && *capability == crate::component::ClientCapability::Elicitation;
        !unusable
            && declared
                .get(capability.name())
                .is_some_and(|v| !v.is_null())
    };
    let missing: serde_json::Map<String, Value> = config
        .client_capabilities
        .iter()
        .filter(|capability| !usable(capability))
        .map(|capability| {
            (
                capability.name().to_owned(),
                Value::Object(serde_json::Map::new()),
            )
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    let names: Vec<&str> = missing.keys().map(String::as_str).collect();
    Some(ErrorData::new(
        rmcp::model::ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY,
        format!(
            "tool '{}' needs a client that declares {}; this client did not (declare it in the \
             client's capabilities, or use a client that supports it; questions reach \
             2025-11-25 sessions only)",
            crate::outcome::clip(tool, 64),
            names.join(" and ")
        ),
        Some(serde_json::json!({"requiredCapabilities": missing})),
    ))
}

/// A tool definition as rmcp types it, from the one MCP mapping in
/// [`wire::definitions`].
fn mcp_tool(spec: &ToolSpec) -> Result<Tool, ErrorData> {
    let definition = wire::definitions::tool_definition(spec, wire::definitions::Format::Mcp);
    serde_json::from_value(definition).map_err(|e| {
        ErrorData::internal_error(format!("tool '{}' cannot be listed: {e}", spec.name), None)
    })
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("toolhost", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    /// The tool as listed, so that rmcp checks a 2026-07-28 request's
    /// `Mcp-Param-*` headers against the `x-mcp-header` annotations of its
    /// input schema.
    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.shared
            .host()
            .spec(name)
            .and_then(|spec| mcp_tool(spec).ok())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let host = self.shared.host();
        let tools = host.specs().map(mcp_tool).collect::<Result<Vec<_>, _>>()?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let host = self.shared.host();
        let Some(spec) = host.spec(&request.name).cloned() else {
            self.shared.metrics().reject("mcp", "unknown_tool");
            let known: Vec<&str> = host.specs().map(|s| s.name.as_str()).take(20).collect();
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool {:?}; available tools: {}",
                    crate::outcome::clip(&request.name, 64),
                    known.join(", ")
                ),
                None,
            ));
        };
        // Before anything is sent on the request's stream: a refusal here is
        // the whole answer (HTTP 400 for a 2026-07-28 request).
        if let Some(config) = host.component_of(&spec.name)
            && let Some(missing) = missing_capabilities(
                &spec.name,
                config,
                context.client_capabilities(),
                stateless(&context),
            )
        {
            self.shared.metrics().reject("mcp", "client_capability");
            return Err(missing);
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let call = ToolCall::new(context.id.to_string(), spec.name.clone(), arguments);
        let mut env = CallOptions::default().approver(Arc::new(NobodyToAsk));
        // The application's context for the call, never the model's.
        match context.meta.get(CONTEXT_META_KEY) {
            None | Some(Value::Null) => {}
            Some(injected @ Value::Object(_)) => env = env.context(injected.clone()),
            Some(_) => {
                self.shared.metrics().reject("mcp", "bad_context");
                return Err(ErrorData::invalid_params(
                    format!(
                        "_meta[\"{CONTEXT_META_KEY}\"] must be a JSON object, e.g. {{\"user\":\"ada\"}}"
                    ),
                    None,
                ));
            }
        }
        let minimum = self.log_level(&context);
        let progress_token = context.meta.get_progress_token();
        let forwarding = if minimum.is_some() || progress_token.is_some() {
            let (forwarder, task) =
                CallForwarder::start(minimum, progress_token, &spec.name, context.peer.clone());
            env = env.observer(forwarder);
            Some(task)
        } else {
            None
        };
        if can_ask(&context) {
            let client = Arc::new(AskTheClient {
                peer: context.peer.clone(),
            });
            env = env.approver(client.clone()).asker(client);
        }
        let run = self.shared.call_one(&host, call, env, "mcp");
        // A cancelled request drops the call, which stops its instance.
        let outcome = tokio::select! {
            outcome = run => outcome,
            () = context.ct.cancelled() => {
                tracing::info!(tool = %spec.name, "call cancelled by the client");
                return Err(ErrorData::internal_error("the request was cancelled", None));
            }
        };
        // The tool's log lines and progress go out before its result, unless
        // the client does not read them: then they are dropped, never the
        // result.
        if let Some(mut forwarding) = forwarding
            && tokio::time::timeout(NOTIFY_TIMEOUT, &mut forwarding)
                .await
                .is_err()
        {
            forwarding.abort();
            tracing::debug!(tool = %spec.name, "log lines for the MCP client were dropped: it does not read them");
        }
        let result = wire::results::render(&outcome, Some(&spec), wire::results::Format::Mcp);
        let mut result: CallToolResult = serde_json::from_value(result).map_err(|e| {
            ErrorData::internal_error(format!("the result cannot be sent: {e}"), None)
        })?;
        // rmcp drops it again for clients older than 2026-07-28.
        result.result_type = Some(ResultType::COMPLETE);
        Ok(result.into())
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        *self.log_level.lock().expect("log level lock") = Some(request.level);
        Ok(())
    }

    // A tool host has no prompts, resources or completions: say so with
    // -32601 rather than answer empty lists for capabilities it does not
    // declare (rmcp's defaults).
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Err(ErrorData::method_not_found::<ListPromptsRequestMethod>())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Err(ErrorData::method_not_found::<ListResourcesRequestMethod>())
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            ListResourceTemplatesRequestMethod,
        >())
    }

    async fn complete(
        &self,
        _request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Err(ErrorData::method_not_found::<CompleteRequestMethod>())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.listeners.add_peer(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let id = self
            .listeners
            .next_subscription
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let subscriptions = &self.listeners.subscriptions;
        subscriptions
            .lock()
            .expect("listeners lock")
            .insert(id, context.sink().clone());
        // A subscription lasts until the client ends it, or the server
        // shuts down (then it is answered, and a drain does not wait on it).
        tokio::select! {
            () = context.cancelled() => {}
            () = self.shared.drain().draining() => {}
        }
        subscriptions.lock().expect("listeners lock").remove(&id);
        Ok(())
    }
}

/// Serve MCP on stdin and stdout until the client closes stdin (its calls
/// in flight are then stopped), or until SIGINT or SIGTERM: then new
/// requests are refused, and the process ends once every call in flight is
/// answered (see [`super::drain`]).
pub(super) async fn serve_stdio(
    shared: Shared,
    signal: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listeners = Arc::new(Listeners::default());
    let notify = listeners.spawn_notifier(&shared);
    let mut signal = std::pin::pin!(signal);
    let drain = shared.drain().clone();
    // Non-blocking pipes when the client launched us with pipes (as MCP
    // clients do): no hand-off to a blocking thread per message.
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let transport = Tracked::new(
        rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout),
        Arc::new(Requests::default()),
        Intake::Here,
        Some(drain.clone()),
    );
    let serving = McpServer::new(shared, listeners.clone()).serve(transport);
    // A signal before the client's first request stops the server too.
    let server = tokio::select! {
        server = serving => server
            .map_err(|e| ServeError::Transport(format!("MCP over stdio: {e}")))?,
        () = &mut signal => return Ok(()),
    };
    // The client is told of reloads once it has sent `initialized` (or
    // opened `subscriptions/listen`): see `on_initialized`.
    let waiting = server.waiting();
    tokio::pin!(waiting);
    let result = tokio::select! {
        result = &mut waiting => Some(result),
        () = &mut signal => {
            tracing::warn!("shutting down: taking no new requests, finishing the calls in flight");
            // The transport refuses new requests and ends the connection once
            // nothing is in flight; calls still running at the end of the
            // drain time are stopped and answered.
            drain.start();
            match tokio::time::timeout(drain.time(), &mut waiting).await {
                Ok(result) => Some(result),
                Err(_) => {
                    tracing::warn!("the drain time is up; stopping the calls still running");
                    drain.stop_now();
                    tokio::time::timeout(super::drain::ANSWER_STOPPED, &mut waiting).await.ok()
                }
            }
        }
    };
    notify.abort();
    match result {
        Some(result) => result
            .map(|_| ())
            .map_err(|e| ServeError::Transport(format!("MCP over stdio: {e}"))),
        None => Ok(()),
    }
}

/// The `/mcp` endpoint: Streamable HTTP with sessions for 2025-11-25
/// clients that want them, stateless for 2026-07-28 requests.
pub(super) fn http_service(
    shared: Shared,
    config: &ServeConfig,
    local: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    sessions: Arc<Sessions>,
) -> StreamableHttpService<McpServer, Sessions> {
    // JSON answers where the call sends nothing before its result: no event
    // stream to set up and tear down per call. (For 2026-07-28 requests:
    // rmcp answers requests in a 2025-11-25 session on an event stream.)
    let mut http = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_cancellation_token(stop)
        .with_max_request_body_bytes(config.max_body);
    if local.ip().is_loopback() {
        http = http
            .with_allowed_hosts(["localhost", "127.0.0.1", "::1"])
            .with_allowed_origins(
                [
                    "http://localhost:*",
                    "http://127.0.0.1:*",
                    "http://[::1]:*",
                    "https://localhost:*",
                    "https://127.0.0.1:*",
                    "https://[::1]:*",
                ]
                .into_iter()
                .map(String::from)
                .chain(config.allow_origins.iter().cloned()),
            )
            .enforce_origin_validation();
    } else {
        // Off loopback the bearer token guards the server; browsers are
        // still held to the allowed origins.
        http = http
            .disable_allowed_hosts()
            .with_allowed_origins(config.allow_origins.iter().cloned())
            .enforce_origin_validation();
    }
    let listeners = Arc::new(Listeners::default());
    // Ends with the runtime; the server lives as long as the process.
    drop(listeners.spawn_notifier(&shared));
    StreamableHttpService::new(
        move || Ok(McpServer::new(shared.clone(), listeners.clone())),
        sessions,
        http,
    )
}
