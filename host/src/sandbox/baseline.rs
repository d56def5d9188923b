//! Reference points for the benchmarks, not for production: what a call
//! costs without toolhost's choices, and what it costs with no isolation
//! between calls at all. Lives here because only the sandbox touches
//! wasmtime-wasi.

use std::path::Path;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store};

use super::bindings::v0_2::Toolbox;
use super::bindings::v0_2::toolhost::tool::types as wit;
use super::state::{CallInfo, State};

/// The usual first attempt at a wasm tool host: the default (on-demand)
/// allocator, no `InstancePre` (imports resolved and type-checked on every
/// instantiation), no fuel or epochs, and the component compiled from its
/// bytes at every start.
#[allow(missing_debug_implementations)]
pub struct NaiveHost {
    engine: Engine,
    linker: Linker<State>,
    component: Component,
}

impl NaiveHost {
    /// Compile `path` from its bytes.
    ///
    /// # Errors
    ///
    /// When the file is unreadable or not a component.
    pub fn start(path: &Path) -> wasmtime::Result<Self> {
        let engine = Engine::new(&Config::new())?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
        super::contract::add_to_linker(&mut linker)?;
        let component = Component::new(&engine, std::fs::read(path)?)?;
        Ok(Self {
            engine,
            linker,
            component,
        })
    }

    /// Instantiate afresh and call tool `name`; returns its content.
    ///
    /// # Errors
    ///
    /// When the call traps or the tool returns an error.
    pub async fn call(&self, name: &str, arguments: &str) -> wasmtime::Result<String> {
        let mut store = Store::new(&self.engine, state()?);
        let toolbox = Toolbox::instantiate_async(&mut store, &self.component, &self.linker).await?;
        call(&toolbox, &mut store, name, arguments).await
    }
}

/// One instance, called again and again: no isolation between calls. The
/// floor under any per-call sandbox.
#[allow(missing_debug_implementations)]
pub struct ReusedInstance {
    store: Store<State>,
    toolbox: Toolbox,
}

impl ReusedInstance {
    /// Compile and instantiate `path` once.
    ///
    /// # Errors
    ///
    /// When the file is unreadable or not a component.
    pub async fn new(path: &Path) -> wasmtime::Result<Self> {
        let host = NaiveHost::start(path)?;
        let mut store = Store::new(&host.engine, state()?);
        let toolbox = Toolbox::instantiate_async(&mut store, &host.component, &host.linker).await?;
        Ok(Self { store, toolbox })
    }

    /// Call tool `name` in the same instance as every call before.
    ///
    /// # Errors
    ///
    /// When the call traps or the tool returns an error.
    pub async fn call(&mut self, name: &str, arguments: &str) -> wasmtime::Result<String> {
        call(&self.toolbox, &mut self.store, name, arguments).await
    }
}

fn state() -> wasmtime::Result<State> {
    let info = CallInfo::unbound("baseline".into());
    State::new(
        &super::state::Capabilities::default(),
        u64::MAX,
        super::state::Binding::Call(info),
        super::state::Purpose::Call,
    )
}

async fn call(
    toolbox: &Toolbox,
    store: &mut Store<State>,
    name: &str,
    arguments: &str,
) -> wasmtime::Result<String> {
    let context = wit::CallContext {
        call_id: "baseline".into(),
        deadline_ms: 0,
        context: None,
    };
    match toolbox
        .toolhost_tool_tool()
        .call_call(store, name, arguments, &context)
        .await?
    {
        Ok(output) => Ok(output
            .content
            .into_iter()
            .filter_map(|block| match block {
                wit::ContentBlock::Text(text) => Some(text),
                _ => None,
            })
            .collect()),
        Err(error) => wasmtime::bail!("tool error: {}", error.message),
    }
}
