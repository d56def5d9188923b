//! The per-call store state: one fresh value per call, built from the
//! component's [`Grants`] and nothing else.
//!
//! Each capability lives in its own module, which owns its grant, its
//! per-call budget and its refusal: `files` (granted directories, open
//! handles, disk quota), `http` (allow_hosts, connections, host memory behind
//! wasi:http objects), `env` (environment and config), `logging` (the
//! tool's log lines). This module only puts them together, with the memory
//! limiter and the resource table that bound everything else.

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::v0_1::toolhost::tool0_1_0 as v0_1;
use super::bindings::v0_2::toolhost::tool::host::{self, Level, Refused};
use super::bindings::v0_2::toolhost::tool::types;
use super::calls::Calls;
use super::deadline::Deadline;
use super::files::{CallFiles, ComponentFiles};
use super::http::HttpGate;
use super::interact::Interaction;
use super::keyvalue::CallStores;
use super::logging::GuestLog;
use super::refusal::Refusals;
use super::secrets::Secrets;
use super::stdio::Tail;
use super::{env, http};
use crate::grants::Grants;
use crate::stores::GrantedStores;

/// Handles (streams, files, requests, header fields, pollables) one call may
/// hold at once. A tool needs a few dozen at most; every host object a tool
/// can create is one handle, so this count times the largest object one
/// handle can hold bounds the host memory a call can pin (see `http` and
/// `files` for those sizes). Past it, the call ends `memory_exhausted`.
pub(crate) const MAX_HANDLES: usize = 256;

/// The most `wasi:random` hands out in one request. Transient, but the host
/// allocates it before copying it into the guest.
const MAX_RANDOM_BYTES: u64 = 1 << 20;

/// Who is running: attached to every log line the tool writes.
#[derive(Clone)]
pub(crate) struct CallInfo {
    pub component: Arc<str>,
    pub tool: String,
    pub call_id: String,
    /// Who else hears the tool's log lines and progress while the call runs.
    pub observer: Option<Arc<dyn crate::observe::CallObserver>>,
    /// Who answers the tool's questions.
    pub asker: Arc<dyn crate::observe::Asker>,
    /// The application's context for the call: selects store namespaces.
    pub context: Option<Arc<serde_json::Value>>,
    /// The call's deadline, which asking stops (none when describing).
    pub deadline: Option<Deadline>,
    /// How the call calls other tools: none unless granted `call_tools`.
    pub caller: Option<Arc<dyn super::calls::ToolCaller>>,
    /// What the call's lines, progress, questions and refusals are masked
    /// with when more than its component's secrets (see `CallSide`).
    pub secrets: Option<Arc<Secrets>>,
}

impl CallInfo {
    /// For an instance made ahead of its call, or one done with it: the
    /// component alone.
    pub(crate) fn unbound(component: Arc<str>) -> Self {
        Self {
            component,
            tool: String::new(),
            call_id: String::new(),
            observer: None,
            asker: Arc::new(crate::observe::NobodyToAsk),
            context: None,
            deadline: None,
            caller: None,
            secrets: None,
        }
    }
}

/// What one component was granted, made live at load: the grants, its held
/// directories, the handles of its stores and the masker of its secrets.
/// Every call's [`State`] is built from these and nothing else.
#[derive(Debug, Default)]
pub(crate) struct Capabilities {
    pub grants: Arc<Grants>,
    pub files: ComponentFiles,
    pub stores: Arc<GrantedStores>,
    pub secrets: Arc<Secrets>,
}

/// What of a state belongs to its call: who hears its progress and answers
/// its questions, which namespace its stores are in, how its lines are
/// logged, which tools it may call.
fn call_parts(
    info: CallInfo,
    stores: &Arc<GrantedStores>,
    secrets: &Arc<Secrets>,
    refusals: &Refusals,
) -> (Interaction, CallStores, GuestLog, Calls) {
    let calls = Calls {
        caller: info.caller.clone(),
        deadline: info.deadline.clone(),
    };
    // A call's own masker, when it was given one, else its component's.
    // Refusals keep the call's masker once given one: a send still
    // running on its own task after the call ended may yet be refused.
    if let Some(own) = &info.secrets {
        refusals.mask_with(own.clone());
    }
    let secrets = info.secrets.clone().unwrap_or_else(|| secrets.clone());
    let interaction = Interaction::new(
        info.tool.clone(),
        info.call_id.clone(),
        secrets.clone(),
        info.observer.clone(),
        info.asker.clone(),
        info.deadline.clone(),
    );
    let stores = CallStores::new(stores.clone(), info.context.clone(), refusals.clone());
    (interaction, stores, GuestLog::new(info, secrets), calls)
}

/// Whom a new state is for.
pub(crate) enum Binding {
    /// A call that has arrived.
    Call(CallInfo),
    /// An instance of this component made ahead of its call.
    Ahead(Arc<str>),
}

/// What describing a component's tools may touch: nothing. `tools()` runs
/// with no grants at all, so loading, `toolhost check` and listing tools
/// can never write a file or make a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `tools()`: no capabilities.
    Describe,
    /// A call: exactly the component's grants.
    Call,
}

/// Everything a tool instance can reach, for one call.
pub(crate) struct State {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    gate: HttpGate,
    pub(crate) files: CallFiles,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) stderr: Tail,
    pub(crate) refusals: Refusals,
    pub(crate) log: GuestLog,
    pub(crate) stores: CallStores,
    interaction: Interaction,
    /// The tools the call may call (`toolhost:tool/tools`).
    pub(crate) calls: Calls,
    /// How many of the calls it made have ended.
    nested_ended: u32,
    grants: Arc<Grants>,
    /// The stores the call may open: none when describing.
    granted_stores: Arc<GrantedStores>,
    secrets: Arc<Secrets>,
    /// The component's label, for its log lines.
    component: Arc<str>,
    /// False while an instance is made ahead of its call: nothing the call
    /// brings (its id, context, observer, asker) is known yet.
    bound: bool,
    /// What the instance used, if anything, while it had no call: a log
    /// line, progress, a question, a store or an HTTP request would be
    /// charged to no call, so such an instance is never handed one.
    used_unbound: Option<&'static str>,
}

impl State {
    /// A fresh state for `purpose`: the host's environment, arguments,
    /// stdin, network and filesystem are never inherited. A state made
    /// [`Binding::Ahead`] of its call must be [`State::bind`]ed to one
    /// before the instance runs it.
    ///
    /// # Errors
    ///
    /// When a granted directory cannot be opened for the call, or the host
    /// has no descriptors to spare for it.
    pub(crate) fn new(
        granted: &Capabilities,
        memory_limit: u64,
        binding: Binding,
        purpose: Purpose,
    ) -> wasmtime::Result<Self> {
        let (info, bound) = match binding {
            Binding::Call(info) => (info, true),
            Binding::Ahead(component) => (CallInfo::unbound(component), false),
        };
        let info_component = info.component.clone();
        let (grants, granted_stores) = match purpose {
            Purpose::Describe => (Arc::new(Grants::none()), Arc::default()),
            Purpose::Call => (granted.grants.clone(), granted.stores.clone()),
        };
        let (files, secrets) = (&granted.files, &granted.secrets);
        let refusals = Refusals::new(secrets.clone());
        let stderr = Tail::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stderr.clone())
            .stderr(stderr.clone())
            .max_random_size(MAX_RANDOM_BYTES);
        env::grant(&mut wasi, &grants);
        let descriptors = files.descriptors.clone();
        let files = match purpose {
            Purpose::Describe => CallFiles::none(files, refusals.clone()),
            Purpose::Call => files.grant(&mut wasi, refusals.clone())?,
        };
        // No raw sockets are ever granted: TCP, UDP and name lookup stay
        // off, so WASI refuses them before any OS socket exists and a tool
        // cannot use up the host's file descriptors; the address check
        // refuses everything should any of them ever be switched on.
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        wasi.socket_addr_check(|_, _| Box::pin(async { false }));
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_HANDLES);
        let (interaction, stores, log, calls) =
            call_parts(info, &granted_stores, secrets, &refusals);
        let mut gate = HttpGate::new(grants.clone(), refusals.clone(), descriptors);
        gate.for_call = bound;
        Ok(Self {
            wasi: wasi.build(),
            http: http::context(),
            table,
            gate,
            files,
            limiter: MemoryLimiter::new(memory_limit),
            stderr,
            log,
            refusals,
            stores,
            interaction,
            calls,
            nested_ended: 0,
            grants,
            granted_stores,
            secrets: secrets.clone(),
            component: info_component,
            bound,
            used_unbound: None,
        })
    }

    /// Give a state made ahead of its call the call: its log lines,
    /// progress, questions and stores are from now on the call's.
    pub(crate) fn bind(&mut self, info: CallInfo) {
        debug_assert!(!self.bound, "a state is bound to one call only");
        self.set_call(info);
        self.gate.for_call = true;
        self.bound = true;
    }

    /// Let go of what the call brought (its observer, asker and context)
    /// once it is over, while the store waits to be dropped: whoever
    /// waits for the last of those to go (an MCP request's forwarder) is
    /// not kept waiting by a store.
    pub(crate) fn release_call(&mut self) {
        self.set_call(CallInfo::unbound(self.component.clone()));
    }

    /// Make `info` the call whose log lines, progress, questions and
    /// stores these are.
    fn set_call(&mut self, info: CallInfo) {
        (self.interaction, self.stores, self.log, self.calls) =
            call_parts(info, &self.granted_stores, &self.secrets, &self.refusals);
    }

    /// Why an instance made ahead of its call cannot be given one: it used
    /// something that belongs to a call, was refused something, or wrote
    /// to its stdout or stderr while it was being made.
    pub(crate) fn unfit_for_a_call(&self) -> Option<&'static str> {
        if let Some(what) = self.used_unbound {
            return Some(what);
        }
        if self.refusals.denial().is_some()
            || self.refusals.exhaustion().is_some()
            || self.limiter.refused
        {
            return Some("it was refused a capability while being instantiated");
        }
        if !self.stderr.contents().0.is_empty() {
            return Some("it wrote to stdout or stderr while being instantiated");
        }
        None
    }

    /// One call this call made (code mode) ended: reported as the call's
    /// progress, counting them.
    pub(super) fn nested_call_ended(&mut self, message: &str) {
        self.nested_ended += 1;
        self.interaction
            .progress(f64::from(self.nested_ended), None, Some(message.to_owned()));
    }

    /// Note that the instance used `what` before it had a call; returns
    /// whether it had none, so that what belongs to a call is refused.
    pub(super) fn used(&mut self, what: &'static str) -> bool {
        if !self.bound && self.used_unbound.is_none() {
            self.used_unbound = Some(what);
        }
        !self.bound
    }
}

impl State {
    /// The call's resource table.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }

    /// The call's resource table, to read.
    pub(crate) fn table_ref(&self) -> &ResourceTable {
        &self.table
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        self.used("it used wasi:http while being instantiated");
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

impl types::Host for State {}

impl host::Host for State {
    fn log(&mut self, level: Level, message: String) {
        self.used("it logged while being instantiated");
        self.log.write(level, &message);
    }

    fn config(&mut self, key: String) -> Option<String> {
        env::config(&self.grants, &key)
    }

    fn progress(&mut self, done: f64, total: Option<f64>, message: Option<String>) {
        self.used("it reported progress while being instantiated");
        self.interaction.progress(done, total, message);
    }

    async fn ask(&mut self, question: String, answer_schema: String) -> Result<String, Refused> {
        self.used("it asked a question while being instantiated");
        self.interaction.ask(None, question, answer_schema).await
    }

    async fn ask_with_key(
        &mut self,
        key: String,
        question: String,
        answer_schema: String,
    ) -> Result<String, Refused> {
        self.used("it asked a question while being instantiated");
        self.interaction
            .ask(Some(key), question, answer_schema)
            .await
    }
}

// Contract 0.1: the same log and config.
impl v0_1::types::Host for State {}

impl v0_1::host::Host for State {
    fn log(&mut self, level: v0_1::host::Level, message: String) {
        let level = match level {
            v0_1::host::Level::Trace => Level::Trace,
            v0_1::host::Level::Debug => Level::Debug,
            v0_1::host::Level::Info => Level::Info,
            v0_1::host::Level::Warn => Level::Warn,
            v0_1::host::Level::Error => Level::Error,
        };
        self.used("it logged while being instantiated");
        self.log.write(level, &message);
    }

    fn config(&mut self, key: String) -> Option<String> {
        env::config(&self.grants, &key)
    }
}

/// What one table element costs the host.
const TABLE_ELEMENT_BYTES: u64 = 8;

/// Counts linear memory and table elements across all of an instance's
/// memories and tables against one limit, and remembers whether it ever said
/// no.
pub(crate) struct MemoryLimiter {
    limit: u64,
    used: u64,
    pub(crate) refused: bool,
}

impl MemoryLimiter {
    /// What the instance may still grow by, in bytes.
    pub(crate) fn left(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    fn new(limit: u64) -> Self {
        Self {
            limit,
            used: 0,
            refused: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current) as u64;
        if self.used.saturating_add(growth) > self.limit {
            self.refused = true;
            return Ok(false);
        }
        self.used += growth;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Table elements are host memory too (a pointer each): they count
        // against the same limit as linear memory.
        let growth = (desired.saturating_sub(current) as u64).saturating_mul(TABLE_ELEMENT_BYTES);
        if self.used.saturating_add(growth) > self.limit {
            self.refused = true;
            return Ok(false);
        }
        self.used += growth;
        Ok(true)
    }
}

impl State {
    /// How many questions the call asked a person, answered or not.
    pub(crate) fn questions(&self) -> u32 {
        self.interaction.questions()
    }
}
