//! The per-call store state: the WASI context built from the component's
//! [`Grants`], the HTTP gate that enforces `allow_hosts`, the memory limiter,
//! and the record of what the host refused.

use std::sync::Arc;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use super::bindings::toolhost::tool::host::{self, Level};
use super::bindings::toolhost::tool::types;
use super::stdio::Tail;
use crate::grants::Grants;

/// Handles (streams, requests, fields, files) one call may hold at once:
/// plenty for any tool, and a bound on the host memory a guest can pin
/// outside its own limit.
const MAX_RESOURCES: usize = 4096;

/// Who is running: attached to every log line the tool writes.
#[derive(Debug, Clone)]
pub(crate) struct CallInfo {
    pub component: Arc<str>,
    pub tool: String,
    pub call_id: String,
}

/// Everything a tool instance can reach, for one call.
pub(crate) struct State {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    table: ResourceTable,
    gate: HttpGate,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) stderr: Tail,
    grants: Arc<Grants>,
    info: CallInfo,
}

impl State {
    /// The first request the host refused during this call, if any.
    pub(crate) fn denial(&self) -> Option<&str> {
        self.gate.denied.as_deref()
    }

    /// A fresh state that grants exactly `grants`: the host's environment,
    /// arguments, stdin, network and filesystem are never inherited.
    ///
    /// # Errors
    ///
    /// When a granted directory can no longer be opened (it was removed
    /// after load).
    pub(crate) fn new(
        grants: Arc<Grants>,
        memory_limit: u64,
        info: CallInfo,
    ) -> wasmtime::Result<Self> {
        let stderr = Tail::default();
        let mut wasi = WasiCtxBuilder::new();
        wasi.stdout(stderr.clone()).stderr(stderr.clone());
        for (name, value) in grants.env_vars() {
            wasi.env(name, value);
        }
        for file in grants.files() {
            let perms = match file.mode {
                crate::grants::FileMode::ReadOnly => FsPerms::ReadOnly,
                crate::grants::FileMode::ReadWrite => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(&file.host, &file.guest, perms)?;
        }
        // No raw sockets are ever granted: TCP, UDP and name lookup stay
        // off, so WASI refuses them before any OS socket exists and a tool
        // cannot use up the host's file descriptors; the address check
        // refuses everything should any of them ever be switched on.
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        wasi.socket_addr_check(|_, _| Box::pin(async { false }));
        Ok(Self {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            table: {
                let mut table = ResourceTable::new();
                table.set_max_capacity(MAX_RESOURCES);
                table
            },
            gate: HttpGate {
                grants: grants.clone(),
                denied: None,
            },
            limiter: MemoryLimiter::new(memory_limit),
            stderr,
            grants,
            info,
        })
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
        let message = self.grants.mask(message);
        let CallInfo {
            component,
            tool,
            call_id,
        } = &self.info;
        let component = &**component;
        // One macro call per level: tracing's level must be a constant.
        match level {
            Level::Trace => {
                tracing::trace!(target: "toolhost::guest", component, tool, call_id, "{message}")
            }
            Level::Debug => {
                tracing::debug!(target: "toolhost::guest", component, tool, call_id, "{message}")
            }
            Level::Info => {
                tracing::info!(target: "toolhost::guest", component, tool, call_id, "{message}")
            }
            Level::Warn => {
                tracing::warn!(target: "toolhost::guest", component, tool, call_id, "{message}")
            }
            Level::Error => {
                tracing::error!(target: "toolhost::guest", component, tool, call_id, "{message}")
            }
        }
    }

    fn config(&mut self, key: String) -> Option<String> {
        self.grants.config_value(&key).map(str::to_owned)
    }
}

/// Lets an outgoing HTTP request through only to a granted origin. Every hop
/// of a redirect is a new request from the guest, so it comes through here
/// too.
struct HttpGate {
    grants: Arc<Grants>,
    /// The first request refused during the call: what a failed call is
    /// reported as. Later ones are only logged.
    denied: Option<String>,
}

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = wasmtime_wasi_http::Result<()>> + Send>,
                )>,
            > + Send,
    > {
        let uri = request.uri();
        let scheme = uri.scheme_str().unwrap_or("https");
        let host = uri.host().unwrap_or_default();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme == "http" { 80 } else { 443 });
        if !self.grants.hosts().allows(scheme, host, port) {
            let what =
                format!("HTTP request to {scheme}://{host}:{port} (not in the tool's allow_hosts)");
            tracing::info!(target: "toolhost::grants", denied = %what, "capability refused");
            self.denied.get_or_insert(what);
            return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
        }
        _ = fut;
        Box::new(async move {
            use http_body_util::BodyExt;
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            Ok((
                response.map(BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }
}

/// Counts linear memory across all of an instance's memories against one
/// limit, and remembers whether it ever said no.
pub(crate) struct MemoryLimiter {
    limit: u64,
    used: u64,
    pub(crate) refused: bool,
}

impl MemoryLimiter {
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
        if self.used + growth > self.limit {
            self.refused = true;
            return Ok(false);
        }
        self.used += growth;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables are bounded by the pooling allocator's per-table size.
        Ok(true)
    }
}
