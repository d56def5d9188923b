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
//!
//! The parts:
//! - this module: the server handler, `tools/list` and the server's info;
//! - `call`: `tools/call`, from the request to its `CallToolResult`;
//! - `capabilities`: what the client declared and the protocol revision it
//!   speaks allow, checked against what a tool's component requires;
//! - `ask`: approval and a tool's questions, over elicitation;
//! - `forward`: a call's log lines and progress, passed on while it runs;
//! - `listeners`: who hears that the tool list changed;
//! - `transport`: stdio and the `/mcp` endpoint;
//! - `fast`: the `/mcp` endpoint's fast path, a plain stateless
//!   `tools/call` answered on its request's own task, in front of rmcp.

// MCP logging is deprecated by SEP-2577 (2026-07-28), and rmcp marks its
// types so; 2025-11-25 clients still ask for it.
#![allow(deprecated)]

mod ask;
mod call;
mod capabilities;
mod fast;
mod forward;
mod listeners;
mod mrtr;
mod tasks;
mod transport;

use std::sync::{Arc, Mutex};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CompleteRequestMethod,
    CompleteRequestParams, CompleteResult, ErrorData, GetTaskParams, GetTaskResult, Implementation,
    ListPromptsRequestMethod, ListPromptsResult, ListResourceTemplatesRequestMethod,
    ListResourceTemplatesResult, ListResourcesRequestMethod, ListResourcesResult, ListToolsResult,
    LoggingLevel, PaginatedRequestParams, ServerCapabilities, ServerConfig, SetLevelRequestParams,
    SubscriptionFilter, Tool, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer, SubscriptionContext};

use super::Shared;
use crate::identity::Principal;
use crate::spec::ToolSpec;
use crate::wire;
pub use call::RATE_LIMITED;
use capabilities::stateless;
use listeners::Listeners;
pub(super) use transport::{http_service, serve_stdio};

/// The `_meta` key of a `tools/call` request that carries the
/// application's injected context (a JSON object).
pub const CONTEXT_META_KEY: &str = "toolhost/context";

/// How long a notification may wait on a client that does not read.
const NOTIFY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// The 2026-07-28 calls waiting for answers to their questions, shared
    /// by every handler of one server.
    parking: Arc<mrtr::Parking>,
    /// The level this client asked for with `logging/setLevel`; none until
    /// it asks, and then no tool's lines are sent.
    log_level: Arc<Mutex<Option<LoggingLevel>>>,
}

impl McpServer {
    /// The address the request of `context` came from (the client's, behind
    /// a `--proxy-protocol` balancer); `None` over stdio.
    pub(super) fn peer(context: &RequestContext<RoleServer>) -> Option<std::net::IpAddr> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<super::http::Peer>())
            .map(|peer| peer.0)
    }

    /// Who sent the request of `context`: the principal the HTTP edge
    /// found (in the request's parts, which rmcp hands over); the launching
    /// user over stdio. A server that tells callers apart refuses a
    /// request that somehow carries no principal, rather than taking it
    /// for anyone's.
    pub(super) fn principal(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<Principal, ErrorData> {
        let found = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Principal>());
        match (found, self.shared.auth()) {
            (Some(principal), _) => Ok(principal.clone()),
            (None, None) => Ok(Principal::anyone()),
            (None, Some(_)) => Err(ErrorData::invalid_request(
                "this server tells callers apart, and the request carries no identity",
                None,
            )),
        }
    }
}

impl McpServer {
    /// A handler serving `shared`'s tools; `listeners` and `parking` are
    /// shared by every handler of one server, so that a reload reaches
    /// every client and an answer reaches the call that asked.
    fn new(shared: Shared, listeners: Arc<Listeners>, parking: Arc<mrtr::Parking>) -> Self {
        Self {
            shared,
            listeners,
            parking,
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
                .enable_tasks()
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
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let principal = self.principal(&context)?;
        let host = self.shared.host();
        let tools = host
            .specs()
            .filter(|spec| principal.holds(&crate::serve::auth::required_scopes(&host, &spec.name)))
            .map(mcp_tool)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.get_task_of(request, context).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.update_task_of(request, context).await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_task_of(request, context).await
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
        let id = self.listeners.add_subscription(context.sink().clone());
        // A subscription lasts until the client ends it, or the server
        // shuts down (then it is answered, and a drain does not wait on it).
        tokio::select! {
            () = context.cancelled() => {}
            () = self.shared.drain().draining() => {}
        }
        self.listeners.remove_subscription(id);
        Ok(())
    }
}
