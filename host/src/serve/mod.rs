//! `toolhost serve`: the tools for every agent.
//!
//! - [`mcp`]: an MCP server (rmcp) over stdio or Streamable HTTP, for both
//!   protocol eras: 2025-11-25 clients (`initialize`, optional sessions) and
//!   the stateless 2026-07-28 revision (`server/discover`, per-request
//!   `_meta`), negotiated per request.
//! - [`http`]: one HTTP server with `/mcp`, `POST /v1/tool_calls`,
//!   `GET /v1/tools`, `/metrics` and `/healthz`, behind the guards every
//!   route shares: Host and Origin checks (DNS rebinding), an optional
//!   bearer token, body and batch limits.
//! - [`reload`]: `--watch`, which loads a changed manifest or component
//!   beside the running one and swaps it in atomically.
//! - [`Metrics`]: what `/metrics` reports.
//! - [`Drain`]: graceful shutdown: no new work, every call in flight
//!   answered, then exit.
//! - `edge`, `connections`, `sessions`, `requests`: what the HTTP server
//!   checks before any route (Host, Origin, repeated protocol headers,
//!   the token), what a peer can make it hold (connections, header bytes),
//!   MCP sessions and the JSON-RPC requests in flight on each.
//!
//! Every front end calls the same [`ToolHost`] and answers through
//! [`crate::wire::results`], so a call reads the same whichever way it came.

mod auth;
mod connections;
mod drain;
mod edge;
pub(crate) mod fair;
pub mod http;
pub mod mcp;
mod metrics;
mod redis_connection;
pub mod reload;
mod requests;
mod sessions;
pub(crate) mod tasks;

use std::net::SocketAddr;
use std::sync::Arc;

use crate::fixes::Fixes;
use crate::manifest::Manifest;
use crate::sandbox::SandboxOptions;
use crate::tool_call::ToolCall;
use crate::tool_host::{
    ApproveAll, Approver, CallOptions, CallResult, LoadError, LockMode, RefuseWithFix, Tool,
    ToolHost,
};
pub use drain::{DEFAULT_DRAIN, Drain};
pub use metrics::Metrics;

/// The largest HTTP request body accepted by default: 4 MiB, sixteen
/// calls' worth of the default 256 KiB argument limit.
pub const DEFAULT_MAX_BODY: usize = 4 << 20;

/// The most calls one `POST /v1/tool_calls` may carry by default.
pub const DEFAULT_MAX_BATCH: usize = 256;

/// How to serve. Built with [`ServeConfig::new`], then adjusted field by
/// field. Its `Debug` shows whether a token is set, never the token.
#[derive(Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// stdio or an HTTP address.
    pub transport: Transport,
    /// The bearer token HTTP clients must send; required on a non-loopback
    /// address.
    pub token: Option<String>,
    /// Browser origins accepted beyond loopback ones (`https://host[:port]`).
    pub allow_origins: Vec<String>,
    /// Reload the manifest and components when they change.
    pub watch: bool,
    /// Run calls that need approval without asking anyone.
    pub approve_all: bool,
    /// The largest HTTP request body, in bytes.
    pub max_body: usize,
    /// The most calls in one `POST /v1/tool_calls`.
    pub max_batch: usize,
    /// How long calls in flight may take to finish once the server is told
    /// to stop; those still running then are stopped and answered.
    pub drain: std::time::Duration,
    /// How refusals spell the fix for each setting: the defaults name
    /// these fields; a front end with its own flags sets its spellings.
    pub fixes: Fixes,
    /// How loading (and each reload) treats `toolhost.lock`.
    pub lock_mode: LockMode,
    /// Who may call, telling callers apart by their tokens; `None`: the
    /// manifest's `[serve.auth]`.
    pub auth: Option<crate::identity::Settings>,
    /// Load balancers whose connections start with a PROXY protocol header
    /// (v1 or v2) naming the client: its address, not theirs, is the one
    /// the limits kept per address count. Connections from these ranges
    /// must send one.
    pub proxy_protocol: Vec<ipnet::IpNet>,
    /// Answer a plain stateless MCP `tools/call` (2026-07-28, nothing
    /// asked of the server but the answer) on its request's own task,
    /// rather than through rmcp's tasks: the same answer, sooner. On by
    /// default; off, every MCP request goes through rmcp (to compare).
    pub mcp_fast_path: bool,
    /// How many threads serve HTTP connections, each request answered on
    /// the thread that read it (the calls a batch or a program spreads
    /// still run on every worker). `None`: as many as the runtime `serve`
    /// runs on has workers (none on a current-thread runtime); `Some(0)`:
    /// connections are tasks of that runtime.
    pub http_threads: Option<usize>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            transport,
            token,
            allow_origins,
            watch,
            approve_all,
            max_body,
            max_batch,
            drain,
            fixes,
            lock_mode,
            auth,
            proxy_protocol,
            mcp_fast_path,
            http_threads,
        } = self;
        f.debug_struct("ServeConfig")
            .field("transport", transport)
            .field("token", &token.as_ref().map(|_| "<redacted>"))
            .field("allow_origins", allow_origins)
            .field("watch", watch)
            .field("approve_all", approve_all)
            .field("max_body", max_body)
            .field("max_batch", max_batch)
            .field("drain", drain)
            .field("fixes", fixes)
            .field("lock_mode", lock_mode)
            .field("auth", auth)
            .field("proxy_protocol", proxy_protocol)
            .field("mcp_fast_path", mcp_fast_path)
            .field("http_threads", http_threads)
            .finish()
    }
}

impl ServeConfig {
    /// Serve over `transport` with the defaults: no token, no extra
    /// origins, no reload, approval refused, default limits.
    pub fn new(transport: Transport) -> Self {
        Self {
            transport,
            token: None,
            allow_origins: Vec::new(),
            watch: false,
            approve_all: false,
            max_body: DEFAULT_MAX_BODY,
            max_batch: DEFAULT_MAX_BATCH,
            drain: drain::DEFAULT_DRAIN,
            fixes: Fixes::default(),
            lock_mode: LockMode::Write,
            auth: None,
            proxy_protocol: Vec::new(),
            mcp_fast_path: true,
            http_threads: None,
        }
    }
}

/// Where to serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// MCP over stdin and stdout.
    Stdio,
    /// HTTP on this address.
    Http(SocketAddr),
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration cannot be served as given; the message says the fix.
    #[error("{0}")]
    Usage(String),
    /// The manifest's components did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The manifest could not be read.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// The transport failed (the address is taken, stdio closed badly, …).
    #[error("{0}")]
    Transport(String),
}

/// Load `manifest` and serve it until stdin closes (stdio) or the process
/// is told to stop (SIGINT or SIGTERM; calls in flight are answered first,
/// see [`Drain`]).
/// `on_ready` is called once the tools are loaded and, for HTTP, the
/// address is bound (with the address, which matters when its port was 0).
///
/// # Errors
///
/// [`ServeError::Usage`] for a configuration that would be unsafe or
/// cannot work (a non-loopback address without a token), otherwise a load
/// or transport error.
pub async fn run(
    manifest: Manifest,
    options: SandboxOptions,
    config: ServeConfig,
    on_ready: impl FnOnce(Option<SocketAddr>) + Send,
) -> Result<(), ServeError> {
    let mut config = config;
    // Over stdio the launching user is the one caller: nobody to tell apart.
    config.auth = match config.transport {
        Transport::Stdio => None,
        Transport::Http(_) => Some(
            config
                .auth
                .take()
                .unwrap_or_else(|| manifest.serve.auth.clone()),
        ),
    };
    if let Transport::Http(addr) = config.transport
        && !addr.ip().is_loopback()
        && config.token.is_none()
        && !config
            .auth
            .as_ref()
            .is_some_and(crate::identity::Settings::is_enabled)
    {
        return Err(ServeError::Usage(format!(
            "serving on {addr}, which is not a loopback address, needs a bearer token: \
             {} (or listen on 127.0.0.1)",
            config.fixes.token
        )));
    }
    // Before anything else: a signal from here on stops the server cleanly.
    let signal = http::shutdown_signal();
    // Checked against every component now: the tools arrive a few at a
    // time (see `finish_loading`).
    if let Some(settings) = &config.auth
        && (settings.is_enabled() || !settings.context.is_empty())
    {
        unbound_store(manifest.components.iter(), &settings.context)?;
    }
    let (host, pinned, loading) = ToolHost::load_in_background(
        &manifest,
        options.clone(),
        &config.lock_mode,
        COMPILE_BEFORE_SERVING,
    )
    .await?;
    let complete = loading.pending() == 0;
    let limiter = limiter(&manifest, &host, complete)?;
    let shared = Shared::new(host, &config)?
        .with_limiter(limiter)
        .with_tasks(tasks::Tasks::new(manifest.serve.tasks.clone()).map_err(ServeError::Usage)?)
        .with_sessions(manifest.serve.sessions.clone())?;
    shared.metrics().registry(&pinned.report);
    shared.set_loading(loading.pending());
    // The rest loads while the server answers; then `--watch` starts
    // (a reload meanwhile would race the versions still arriving).
    let failed = Arc::new(std::sync::Mutex::new(None));
    let stop = Arc::new(tokio::sync::Notify::new());
    let watch = config
        .watch
        .then(|| (manifest.clone(), options, config.lock_mode.clone()));
    let (_watcher, watch) = match watch {
        Some((manifest, options, lock_mode)) if complete => (
            Some(reload::watch(manifest, options, lock_mode, shared.clone())?),
            None,
        ),
        watch => (None, watch),
    };
    let loader = tokio::spawn(finish_loading(
        loading,
        manifest,
        shared.clone(),
        watch,
        failed.clone(),
        stop.clone(),
    ));
    let signal = async move {
        tokio::select! {
            () = signal => {}
            () = stop.notified() => {}
        }
    };
    let served = match config.transport {
        Transport::Stdio => {
            on_ready(None);
            mcp::serve_stdio(shared, signal).await
        }
        Transport::Http(addr) => http::serve(addr, shared, &config, signal, on_ready).await,
    };
    loader.abort();
    let failed = failed.lock().expect("the load error's lock").take();
    match failed {
        Some(error) => Err(error),
        None => served,
    }
}

/// Uncached components up to this many bytes in all compile before the
/// server answers; larger ones compile while it answers. Rust tools (a
/// few hundred KiB each) compile in well under a second all together on
/// the reference 2-core host (calc, 0.2 MB: 0.3 s idle, 0.8 s under load),
/// so they are there from the first `tools/list`; a Python or JavaScript
/// component (13 to 19 MB, ten seconds and more) joins when it is ready.
/// The whole budget is about `estimate_compile(2 MiB)`: 1.3 s on two
/// cores, which keeps the first answer within 2 s of start.
pub const COMPILE_BEFORE_SERVING: u64 = 2 << 20;

/// Swap in each version of the tools `loading` hands out, telling clients
/// the list changed; once every component is in, check `[serve.limits]`
/// against the tools and start watching (`watch`: the manifest, options
/// and lock mode to reload with) until the server stops. A component that
/// fails to load stops the server with its error in `failed`: as at any
/// start, nothing is served unless everything loads.
async fn finish_loading(
    mut loading: crate::tool_host::Loading,
    manifest: Manifest,
    shared: Shared,
    watch: Option<(Manifest, SandboxOptions, LockMode)>,
    failed: Arc<std::sync::Mutex<Option<ServeError>>>,
    stop: Arc<tokio::sync::Notify>,
) {
    let fail = |error: ServeError| {
        tracing::error!(error = %format!("{error:#}"), "loading failed; stopping the server");
        *failed.lock().expect("the load error's lock") = Some(error);
        stop.notify_one();
    };
    while let Some(version) = loading.next().await {
        match version {
            Ok(host) => {
                let pending = loading.pending();
                let added: Vec<String> = host
                    .components()
                    .filter(|(config, _, _)| {
                        !shared
                            .host()
                            .components()
                            .any(|(old, _, _)| old.label() == config.label())
                    })
                    .map(|(config, tools, _)| format!("{} ({})", config.label(), tools.join(", ")))
                    .collect();
                shared.swap_loaded(host);
                shared.set_loading(pending);
                tracing::info!(added = %added.join("; "), still_compiling = pending, "tools ready");
            }
            Err(e) => return fail(ServeError::Load(e)),
        }
    }
    if let Some(policy) = &manifest.serve.limits
        && let Err(e) = check_limited_tools(&manifest, policy, &shared.host())
    {
        return fail(e);
    }
    if let Some((manifest, options, lock_mode)) = watch {
        match reload::watch(manifest, options, lock_mode, shared.clone()) {
            Ok(watcher) => {
                // Watch until the server stops (which aborts this task).
                let _watcher = watcher;
                std::future::pending::<()>().await;
            }
            Err(e) => fail(e),
        }
    }
}

/// How `config` says callers are told apart: its `auth` settings, with
/// `--token-env`'s token as the principal `token` beside them when there
/// are any; `None` when callers are not told apart.
fn identity(config: &ServeConfig) -> Result<Option<auth::Auth>, ServeError> {
    let Some(mut settings) = config.auth.clone() else {
        return Ok(None);
    };
    if !settings.is_enabled() && settings.context.is_empty() {
        return Ok(None);
    }
    if let Some(token) = &config.token {
        let token = crate::identity::StaticToken::new("token".into(), token.clone(), Vec::new())
            .map_err(|e| ServeError::Usage(format!("{}: {e}", config.fixes.token)))?;
        settings.tokens.push(token);
    }
    settings.check().map_err(ServeError::Usage)?;
    auth::Auth::new(settings).map_err(ServeError::Usage)
}

/// A store of `components` scoped by a context key `bindings` neither
/// binds nor lets the caller give: any caller could name any other's data.
fn unbound_store<'a>(
    components: impl IntoIterator<Item = &'a crate::component::ComponentConfig>,
    bindings: &std::collections::BTreeMap<String, crate::identity::ContextSource>,
) -> Result<(), ServeError> {
    for component in components {
        for store in component.grants.stores() {
            if let crate::stores::Scope::ContextKey(key) = &store.scope
                && !bindings.contains_key(key)
            {
                return Err(ServeError::Usage(format!(
                    "store `{name}` is scoped by the context key `{key}`, which [serve.auth] does \
                     not bind: add `context.{key} = \"principal\"` (each caller its own), \
                     `context.{key} = \"claim:sub\"` (a claim of the caller's token; or \
                     --context-claim {key}=sub), or `context.{key} = \"caller\"` (the request \
                     chooses, so any caller can read any value's data)",
                    name = store.name
                )));
            }
        }
    }
    Ok(())
}

/// The limiter `manifest`'s `[serve.limits]` asks for, built once and
/// shared across reloads (so a reload keeps every budget's state). An
/// entry for a tool `host` does not have is refused (when `host` is
/// `complete`; else once it is, see `finish_loading`): it would limit
/// nothing, and is most likely a misspelling.
fn limiter(
    manifest: &Manifest,
    host: &ToolHost,
    complete: bool,
) -> Result<Option<fair::Limiter>, ServeError> {
    let Some(policy) = &manifest.serve.limits else {
        return Ok(None);
    };
    if complete {
        check_limited_tools(manifest, policy, host)?;
    }
    Ok(Some(fair::Limiter::new(policy.clone())))
}

/// Refuse a `[serve.limits]` entry for a tool `host` does not have.
fn check_limited_tools(
    manifest: &Manifest,
    policy: &crate::fair_shares::Policy,
    host: &ToolHost,
) -> Result<(), ServeError> {
    unlimited_tool(policy, host).map_err(|(name, loaded)| {
        ServeError::Usage(format!(
            "{}: `serve.limits.tool.{name}` names no loaded tool; write the name of one ({loaded}), \
             or remove the entry",
            manifest.path.display(),
        ))
    })
}

/// The first tool `policy` limits that `host` does not have, with the
/// names `host` has: `Err((name, loaded))`.
fn unlimited_tool(
    policy: &crate::fair_shares::Policy,
    host: &ToolHost,
) -> Result<(), (String, String)> {
    let Some(name) = policy
        .tool_names()
        .find(|name| !host.specs().any(|spec| spec.name == *name))
    else {
        return Ok(());
    };
    let mut loaded: Vec<&str> = host.specs().map(|spec| spec.name.as_str()).collect();
    loaded.sort_unstable();
    let loaded = if loaded.is_empty() {
        "none is loaded".to_owned()
    } else {
        loaded.join(", ")
    };
    Err((name.to_owned(), loaded))
}

/// What every front end shares: the tools (swapped whole on reload), the
/// metrics, the approval policy, the fixes refusals name and the shutdown
/// state.
#[derive(Clone, Debug)]
pub struct Shared {
    tools: tokio::sync::watch::Sender<ToolHost>,
    metrics: Arc<Metrics>,
    approve_all: bool,
    max_batch: usize,
    fixes: Arc<Fixes>,
    /// Refuses calls that need approval when the client cannot be asked,
    /// naming `fixes.approve_all`.
    refuse: Arc<RefuseWithFix>,
    drain: Drain,
    /// How callers are told apart; `None`: they are not.
    auth: Option<Arc<auth::Auth>>,
    /// `[serve.limits]`; `None`: calls are not limited.
    limiter: Option<fair::Limiter>,
    /// `[serve.sessions]`, and the Redis store it shares sessions
    /// through, when it names one.
    sessions: Arc<crate::manifest::SessionSettings>,
    session_store: Option<Arc<sessions::SharedSessions>>,
    /// `[serve.tasks]`: durable tasks, in memory unless it says otherwise.
    tasks: tasks::Tasks,
    /// How many components are still compiling at start.
    loading: tokio::sync::watch::Sender<usize>,
}

impl Shared {
    /// Serve `host` under `config`'s policy, telling callers apart as
    /// `config.auth` says.
    ///
    /// # Errors
    ///
    /// [`ServeError::Usage`] when `config.auth` cannot be used: a static
    /// token that cannot be read, a key set file that cannot, a context
    /// binding that is ambiguous or has no identities to come from, or a
    /// store of `host` scoped by a key it neither binds nor lets the
    /// caller give.
    pub fn new(host: ToolHost, config: &ServeConfig) -> Result<Self, ServeError> {
        let auth = identity(config)?;
        if let Some(auth) = &auth {
            unbound_store(host.components().map(|c| c.0), &auth.settings().context)?;
        }
        Ok(Self {
            tools: tokio::sync::watch::Sender::new(host),
            metrics: Arc::new(Metrics::new()),
            approve_all: config.approve_all,
            max_batch: config.max_batch,
            fixes: Arc::new(config.fixes.clone()),
            refuse: Arc::new(RefuseWithFix::new(format!(
                "{}, or connect with an MCP client that supports elicitation",
                config.fixes.approve_all
            ))),
            drain: Drain::new(config.drain),
            auth: auth.map(Arc::new),
            limiter: None,
            sessions: Arc::default(),
            session_store: None,
            tasks: tasks::Tasks::in_memory(),
            loading: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Keep MCP sessions as `settings` say.
    fn with_sessions(
        mut self,
        settings: crate::manifest::SessionSettings,
    ) -> Result<Self, ServeError> {
        self.session_store = sessions::SharedSessions::new(&settings)
            .map_err(|e| ServeError::Usage(format!("[serve.sessions] redis: {e}")))?;
        self.sessions = Arc::new(settings);
        Ok(self)
    }

    /// How MCP sessions are kept, and the store they are shared through.
    pub(crate) fn sessions(
        &self,
    ) -> (
        &crate::manifest::SessionSettings,
        Option<Arc<sessions::SharedSessions>>,
    ) {
        (&self.sessions, self.session_store.clone())
    }

    /// Limit calls with `limiter`.
    fn with_limiter(mut self, limiter: Option<fair::Limiter>) -> Self {
        self.limiter = limiter;
        self
    }

    /// Keep durable tasks in `tasks`.
    fn with_tasks(mut self, tasks: tasks::Tasks) -> Self {
        self.tasks = tasks;
        self
    }

    /// The durable tasks.
    pub(crate) fn tasks(&self) -> &tasks::Tasks {
        &self.tasks
    }

    /// The limiter, when calls are limited.
    pub(crate) fn limiter(&self) -> Option<&fair::Limiter> {
        self.limiter.as_ref()
    }

    /// Admit a call of `principal` to each of `tools` (one per call, in
    /// order), all or none: on a refusal the permits already taken are
    /// dropped, freeing their concurrency slots (rate tokens they took stay
    /// spent: the limiter never refunds, so replicas agree). Hold the
    /// permits for as long as the calls run.
    ///
    /// # Errors
    ///
    /// The first call's [`fair::Refusal`].
    pub(crate) async fn admit(
        &self,
        principal: &crate::identity::Principal,
        tools: &[&str],
    ) -> Result<Vec<fair::Permit>, fair::Refusal> {
        let caller = fair::Caller {
            id: principal.id(),
            class: principal.class(),
        };
        self.admit_as(caller, tools).await
    }

    /// [`Shared::admit`] for a caller known by its id and class (a task
    /// run again for its owner).
    pub(crate) async fn admit_as(
        &self,
        caller: fair::Caller<'_>,
        tools: &[&str],
    ) -> Result<Vec<fair::Permit>, fair::Refusal> {
        let Some(limiter) = &self.limiter else {
            return Ok(Vec::new());
        };
        let mut permits = Vec::new();
        for tool in tools {
            permits.push(limiter.admit(caller, tool).await?);
        }
        Ok(permits)
    }

    /// How callers are told apart, when they are.
    pub(crate) fn auth(&self) -> Option<&auth::Auth> {
        self.auth.as_deref()
    }

    /// The context keys of a call and where each comes from; `None` when
    /// callers are not told apart (the request's context is the call's).
    pub(crate) fn bindings(
        &self,
    ) -> Option<&std::collections::BTreeMap<String, crate::identity::ContextSource>> {
        self.auth.as_ref().map(|auth| &auth.settings().context)
    }

    /// How refusals spell each fix.
    pub(crate) fn fixes(&self) -> &Fixes {
        &self.fixes
    }

    /// The approver for a call whose client cannot be asked: it refuses,
    /// naming how the operator allows such calls. (Under
    /// `approve_all`, [`Shared::call_batch`] replaces it.)
    pub(crate) fn refuse(&self) -> Arc<dyn Approver> {
        self.refuse.clone()
    }

    /// The shutdown state.
    pub fn drain(&self) -> &Drain {
        &self.drain
    }

    /// The tools as loaded now. A call keeps the version it started with to
    /// its end, whatever a reload swaps in meanwhile.
    pub fn host(&self) -> ToolHost {
        self.tools.borrow().clone()
    }

    /// Swap in a newly loaded version; front ends tell their clients that
    /// the tool list changed.
    ///
    /// # Errors
    ///
    /// [`ServeError::Usage`], and the running version stays, when callers
    /// are told apart and `host` has a store scoped by a context key the
    /// identity settings neither bind nor let the caller give; or when
    /// `host` lacks a tool `[serve.limits]` (as read at start) limits: the
    /// tool renamed would run unlimited.
    pub fn replace(&self, host: ToolHost) -> Result<(), ServeError> {
        if let Some(auth) = &self.auth {
            unbound_store(host.components().map(|c| c.0), &auth.settings().context)?;
        }
        if let Some(limiter) = &self.limiter {
            unlimited_tool(limiter.policy(), &host).map_err(|(name, loaded)| {
                ServeError::Usage(format!(
                    "the new version has no tool `{name}`, which `serve.limits.tool.{name}` \
                     limits (limits are read at start); keep the tool, or restart the server \
                     with the entry renamed to one of: {loaded}"
                ))
            })?;
        }
        self.tools.send_replace(host);
        Ok(())
    }

    /// Swap in a version of the tools loaded at start (see
    /// [`ToolHost::load_in_background`]): the components ready so far, so
    /// `[serve.limits]` is checked once all are. Front ends tell their
    /// clients the tool list changed.
    fn swap_loaded(&self, host: ToolHost) {
        self.tools.send_replace(host);
    }

    /// `pending` components are still compiling at start.
    fn set_loading(&self, pending: usize) {
        self.metrics.loading(pending);
        self.loading.send_replace(pending);
    }

    /// The tools as loaded now, for calls of the tools `names`: when a
    /// name is not a loaded tool's yet and components are still compiling
    /// at start, once every name is a tool's or all are loaded (then a
    /// name nobody has is unknown). Calls wait this way only until the
    /// first version with every component; reloads never make them wait.
    pub async fn host_for(&self, names: &[&str]) -> ToolHost {
        let has_all = |host: &ToolHost| names.iter().all(|name| host.spec(name).is_some());
        let host = self.host();
        if has_all(&host) || *self.loading.borrow() == 0 {
            return host;
        }
        self.metrics.waited_for_compile();
        let missing: Vec<String> = names
            .iter()
            .filter(|name| host.spec(name).is_none())
            .map(|name| crate::outcome::clip(name, 64))
            .collect();
        tracing::info!(tools = %missing.join(", "), compiling = *self.loading.borrow(), "the call waits for the components compiling at start");
        let mut tools = self.tools.subscribe();
        let mut loading = self.loading.subscribe();
        loop {
            let host = tools.borrow_and_update().clone();
            if has_all(&host) || *loading.borrow_and_update() == 0 {
                return host;
            }
            tokio::select! {
                changed = tools.changed() => if changed.is_err() { return self.host() },
                changed = loading.changed() => if changed.is_err() { return self.host() },
            }
        }
    }

    /// Whether components are still compiling at start.
    pub fn is_loading(&self) -> bool {
        *self.loading.borrow() > 0
    }

    /// A receiver that sees every swap.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<ToolHost> {
        self.tools.subscribe()
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Run `calls` on `host` (the version the caller looked the tools up
    /// in) in `env` (its approver replaced under `approve_all`), counting each
    /// outcome for `front_end`. Each outcome comes with the tool its call
    /// resolved to, for the front end to render it by.
    pub async fn call_batch(
        &self,
        host: &ToolHost,
        calls: Vec<ToolCall>,
        env: CallOptions,
        front_end: &'static str,
    ) -> Vec<CallResult> {
        let results = host.call_batch_resolved(calls, self.with_policy(env)).await;
        for result in &results {
            self.metrics.record(result, front_end);
        }
        results
    }

    /// [`Shared::call_batch`] for one call, with `id` and `arguments`, of
    /// `tool` (resolved by the front end, which checked it first).
    pub(crate) async fn call_tool(
        &self,
        tool: Tool<'_>,
        id: String,
        arguments: serde_json::Value,
        env: CallOptions,
        front_end: &'static str,
    ) -> CallResult {
        let result = tool.call_in(id, arguments, &self.with_policy(env)).await;
        self.metrics.record(&result, front_end);
        result
    }

    /// `env` as the operator's configuration has it (`approve_all`
    /// approves every call), stopped when the drain time is up.
    fn with_policy(&self, env: CallOptions) -> CallOptions {
        let mut env = env.stop_on(self.drain.stop_calls());
        // The calls a program makes (code mode) are counted too, under
        // the front end `nested`.
        env.observer = Some(Arc::new(metrics::Counted {
            inner: env.observer.take(),
            metrics: self.metrics.clone(),
        }));
        if self.approve_all {
            env.approver(Arc::new(ApproveAll))
        } else {
            env
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration may be logged whole: its `Debug` says a token is
    /// set, never which.
    #[test]
    fn a_logged_configuration_never_shows_its_token() {
        let mut config = ServeConfig::new(Transport::Stdio);
        config.token = Some("s3cret-token-value".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret-token-value"), "{shown}");
        assert!(shown.contains("token: Some(\"<redacted>\")"), "{shown}");
    }
}
