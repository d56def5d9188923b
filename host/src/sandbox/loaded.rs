//! A loaded component: compiled and linked once, instantiated afresh for
//! each call (or ahead of it, see `ready`), under its grants and limits.
//! What a call's result becomes on its way out is the [`Sealer`]'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Engine, Store};

use super::bindings::v0_2::toolhost::tool::types as wit;
use super::cache::CacheStatus;
use super::contract::{Contract, Toolbox};
use super::deadline::Deadline;
use super::engine::EpochTicker;
use super::ready::{Pool, Prepared, Ready, StopOnExit};
use super::seal::{Sealer, SetupFailed};
use super::secrets::Secrets;
use super::state::{Binding, CallInfo, Capabilities, Purpose, State};
use crate::component::ComponentConfig;
use crate::observe::{Asker, CallObserver, NobodyToAsk};
use crate::outcome::{CallError, ToolOutput};

/// How long a call waits before trying again when the instance pool is
/// momentarily full (components of several core modules can fill it before
/// the dispatcher's count of instances does): the call queues, under its
/// deadline, instead of failing.
const POOL_RETRY: Duration = Duration::from_millis(2);

/// What the application supplies with a call: who hears it, who answers
/// its questions, and its injected context.
#[derive(Clone)]
pub(crate) struct CallSide {
    pub observer: Option<Arc<dyn CallObserver>>,
    pub asker: Arc<dyn Asker>,
    pub context: Option<Arc<serde_json::Value>>,
    /// How the call calls other tools: the dispatcher's, for a component
    /// granted `call_tools`.
    pub caller: Option<Arc<dyn super::calls::ToolCaller>>,
    /// What the call's text is masked with when more than its component's
    /// secrets: for a call another tool made, the callee's secrets and the
    /// caller's (which the caller may have handed it as an argument).
    pub secrets: Option<Arc<Secrets>>,
}

impl Default for CallSide {
    fn default() -> Self {
        Self {
            observer: None,
            asker: Arc::new(NobodyToAsk),
            context: None,
            caller: None,
            secrets: None,
        }
    }
}

/// How many instances of `config`'s component are kept made ahead of their
/// calls at most, and whether only where it pays (`ready = "auto"`). A
/// component granted directories gets none: an instance made ahead could
/// read or write its files while it has no call (HTTP and stores are
/// refused to such an instance instead, so the component can be told
/// unfit), and would hold descriptors while it waits.
pub(crate) fn kept_ready(config: &ComponentConfig) -> (usize, bool) {
    if !config.grants.files().is_empty() {
        return (0, false);
    }
    let (most, measured) = config.limits.ready.most();
    (most.min(config.limits.max_concurrency), measured)
}

/// A tool spec as the component declared it.
#[derive(Clone)]
pub(crate) struct RawSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: String,
    pub output_schema: Option<String>,
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

impl From<wit::ToolSpec> for RawSpec {
    fn from(spec: wit::ToolSpec) -> Self {
        Self {
            read_only: spec.hints.contains(wit::Hints::READ_ONLY),
            destructive: spec.hints.contains(wit::Hints::DESTRUCTIVE),
            idempotent: spec.hints.contains(wit::Hints::IDEMPOTENT),
            open_world: spec.hints.contains(wit::Hints::OPEN_WORLD),
            name: spec.name,
            title: spec.title,
            description: spec.description,
            input_schema: spec.input_schema,
            output_schema: spec.output_schema,
        }
    }
}

/// What one call produced, and what it cost.
pub(crate) struct Ran {
    /// The sealed result.
    pub(crate) result: Result<ToolOutput, CallError>,
    /// Fuel the tool used.
    pub(crate) fuel_used: u64,
    /// Questions it asked a person, answered or not.
    pub(crate) questions: u32,
    /// It ran in an instance made ahead of it.
    pub(crate) made_ahead: bool,
    /// What was left of its time when it ended: waits for a person's
    /// answer not counted.
    pub(crate) time_left: Duration,
}

/// What a call asks of its instance.
struct Request<'a> {
    name: &'a str,
    arguments: &'a str,
    context: wit::CallContext,
}

/// The instance a call starts with: one made ahead (`Ok(Some)`), none yet
/// (`Ok(None)`: made in the store when the call runs), or why binding one
/// made ahead failed.
type Instance = wasmtime::Result<Option<Toolbox>>;

/// A compiled, linked component, ready to instantiate for each call.
pub(crate) struct LoadedComponent {
    pub(super) engine: Engine,
    pub(super) ready: Arc<Ready>,
    /// The epoch, which ends every call's deadline, keeps ticking while a
    /// component is alive, also when its host is gone but the task making
    /// instances ahead still holds it.
    pub(super) _ticker: Arc<EpochTicker>,
    pub(super) pool: Arc<Pool>,
    pub(super) contract: Contract,
    pub(super) granted: Capabilities,
    pub(super) sealer: Sealer,
    pub(crate) label: Arc<str>,
    pub(crate) cache: CacheStatus,
    /// What it imports and exports, by WIT name (`wasi:http/outgoing-handler@0.2.6`).
    pub(crate) imports: Vec<String>,
    pub(crate) exports: Vec<String>,
}

impl Drop for LoadedComponent {
    /// Drop the instances made ahead and end the task that makes them.
    fn drop(&mut self) {
        self.ready.stop();
    }
}

impl LoadedComponent {
    /// The contract version the component was built against: `0.1.0`,
    /// `0.2.0` or `0.2.1`.
    pub(crate) fn contract_version(&self) -> &'static str {
        self.contract.version()
    }

    /// Ask a fresh instance, with no capabilities at all, which tools the
    /// component provides.
    pub(crate) async fn tools(&self) -> Result<Vec<RawSpec>, CallError> {
        let sealer = &self.sealer;
        let info = self.call_info("tools", "load", CallSide::default(), None);
        let mut store = self
            .new_store(Binding::Call(info), Purpose::Describe)
            .map_err(|e| sealer.seal_error(sealer.setup_failed(&e)))?;
        let run = async {
            let toolbox = self.contract.instantiate(&mut store).await?;
            toolbox.tools(&mut store).await
        };
        match tokio::time::timeout(self.sealer.limits.timeout, run).await {
            Err(_) => Err(sealer.timed_out()),
            Ok(Err(trap)) => Err(sealer.seal_error(sealer.classify(trap, &store))),
            Ok(Ok(specs)) => Ok(specs.into_iter().map(RawSpec::from).collect()),
        }
    }

    /// Keep up to `limits.ready` instances of this component made ahead of
    /// their calls (see `ready`), making another in the background each
    /// time a call takes one, until the component is dropped. Must be
    /// called within a tokio runtime.
    pub(crate) fn keep_ready(self: &Arc<Self>) {
        if self.ready.stopped() {
            return;
        }
        let component = Arc::downgrade(self);
        let ready = self.ready.clone();
        tokio::spawn(async move {
            // However the task ends (its component gone, a panic, the
            // runtime shutting down), what it made goes with it.
            let _stop = StopOnExit(ready.clone());
            loop {
                match component.upgrade() {
                    Some(component) => component.refill().await,
                    None => break,
                }
                if ready.stopped() {
                    break;
                }
                ready.woken().await;
            }
        });
    }

    /// Make instances ahead until as many as wanted are ready, the pool or
    /// the host's descriptors run short (tried again at the next call), or
    /// the component turns out unfit to be made ahead.
    async fn refill(&self) {
        self.ready.drop_spent();
        let limits = &self.sealer.limits;
        // Calls waiting for room in the pool come first.
        while self.ready.wants_more() && !self.pool.calls_waiting() {
            let Ok(mut store) = self.new_store(Binding::Ahead(self.label.clone()), Purpose::Call)
            else {
                return;
            };
            let started = Instant::now();
            let made =
                tokio::time::timeout(limits.timeout, self.contract.instantiate(&mut store)).await;
            let unfit = match made {
                Ok(Ok(toolbox)) => match store.data().unfit_for_a_call() {
                    None => {
                        if let Some(quickest) = self.ready.timed(started.elapsed()) {
                            tracing::debug!(
                                component = &*self.label,
                                us = quickest.as_micros() as u64,
                                "instantiating is quick: its instances are made ahead only between calls"
                            );
                            self.ready.between_calls_only();
                        }
                        if self.pool.calls_waiting() {
                            // Its slot goes to the call that waits for one.
                            return;
                        }
                        let fuel_spent = limits.fuel.saturating_sub(store.get_fuel().unwrap_or(0));
                        self.ready.put(Prepared {
                            store,
                            toolbox,
                            fuel_spent,
                        });
                        continue;
                    }
                    Some(why) => why.to_owned(),
                },
                Ok(Err(e))
                    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                        .is_some() =>
                {
                    return;
                }
                Ok(Err(e)) => format!(
                    "instantiating it failed ({:#})",
                    self.sealer.secrets.redact(&e)
                ),
                Err(_) => format!(
                    "instantiating it took longer than its timeout ({})",
                    humantime::format_duration(limits.timeout)
                ),
            };
            tracing::info!(component = &*self.label, reason = %unfit, "its instances are made when each call arrives, not ahead");
            self.ready.stop();
        }
    }

    /// Run tool `name` in a fresh instance under the component's grants and
    /// limits, within `time_left` of its timeout (checking the arguments
    /// spent the rest; time waiting for a person's answer does not count).
    /// The instance is one made ahead when one is ready, else made now.
    /// Returns the result, already masked and cut to the output limits,
    /// the fuel used and the questions asked.
    pub(crate) async fn call(
        &self,
        name: &str,
        arguments: &str,
        call_id: &str,
        time_left: Duration,
        side: CallSide,
    ) -> Ran {
        let deadline = Deadline::new(time_left);
        // Everything the call says is masked with the secrets it was given
        // (its caller's too), from its log lines to its sealed result.
        let sealer = match &side.secrets {
            Some(secrets) => std::borrow::Cow::Owned(Sealer {
                secrets: secrets.clone(),
                ..self.sealer.clone()
            }),
            None => std::borrow::Cow::Borrowed(&self.sealer),
        };
        let request = Request {
            name,
            arguments,
            context: wit::CallContext {
                call_id: call_id.to_owned(),
                deadline_ms: u64::try_from(time_left.as_millis()).unwrap_or(u64::MAX),
                context: side.context.as_ref().map(|c| c.to_string()),
            },
        };
        let info = || self.call_info(name, call_id, side.clone(), Some(deadline.clone()));
        let running = self.ready.call_starts();
        let (mut store, instance) = match self.ready.take() {
            Some(prepared) => self.bind(prepared, info()),
            None => match self.new_store(Binding::Call(info()), Purpose::Call) {
                Ok(store) => (store, Ok(None)),
                Err(e) => {
                    return Ran {
                        result: Err(sealer.seal_error(sealer.setup_failed(&e))),
                        fuel_used: 0,
                        questions: 0,
                        made_ahead: false,
                        time_left: deadline.left(),
                    };
                }
            },
        };
        let mut made_ahead = false;
        let run = self.run(&mut store, instance, &info, &mut made_ahead, &request);
        let result = tokio::select! {
            result = run => Ok(result),
            () = deadline.expired() => Err(()),
        };
        let fuel_used = sealer
            .limits
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        let result = match result {
            Err(()) => Err(sealer.timed_out()),
            Ok(Err(trap)) => Err(sealer.classify(trap, &store)),
            Ok(Ok(Err(error))) => Err(sealer.tool_error(error, &store)),
            Ok(Ok(Ok(output))) => Ok(output),
        };
        let questions = store.data().questions();
        // Resetting a large instance's memory is left to the background,
        // unless a call waits for its slot.
        if self.pool.calls_waiting() {
            drop(store);
        } else {
            self.ready.retire(store, running);
        }
        Ran {
            result: sealer.seal(result),
            fuel_used,
            questions,
            made_ahead,
            time_left: deadline.left(),
        }
    }

    /// Give the call an instance in `store` and run `request` in it. The
    /// instance is `instance` when one was made ahead, else made now; when
    /// the pool is full, the call waits for room (or takes an instance made
    /// ahead meanwhile) in a fresh store. `made_ahead` says which it ran in.
    async fn run(
        &self,
        store: &mut Store<State>,
        mut instance: Instance,
        info: &(dyn Fn() -> CallInfo + Sync),
        made_ahead: &mut bool,
        request: &Request<'_>,
    ) -> wasmtime::Result<Result<wit::ToolOutput, wit::ToolError>> {
        let mut waiting = None;
        let mut turn = None;
        loop {
            let (toolbox, ahead) = match std::mem::replace(&mut instance, Ok(None)) {
                Ok(Some(toolbox)) => (Ok(toolbox), true),
                Ok(None) => (self.contract.instantiate(store).await, false),
                Err(e) => return Err(SetupFailed(format!("{e:#}")).into()),
            };
            match toolbox {
                Err(e)
                    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                        .is_some() =>
                {
                    // One of this component's instances made ahead
                    // meanwhile serves as well as one made now.
                    if let Some(prepared) = self.ready.take() {
                        (*store, instance) = self.bind(prepared, info());
                        continue;
                    }
                    // Calls come first: no instance is made ahead while
                    // this one waits, and those made give their slots up.
                    if waiting.is_none() {
                        waiting = Some(self.pool.wait_for_room());
                    }
                    // The failed store goes first: it may hold part of the
                    // pool, which others waiting need.
                    *store = self
                        .new_store(Binding::Call(info()), Purpose::Call)
                        .map_err(|e| SetupFailed(format!("{e:#}")))?;
                    if turn.is_none() {
                        turn = Some(self.pool.turn().await);
                    } else {
                        tokio::time::sleep(POOL_RETRY).await;
                    }
                }
                Err(e) => return Err(e),
                // Leave the queue as soon as this call has its instance.
                Ok(toolbox) => {
                    drop((turn.take(), waiting.take()));
                    *made_ahead = ahead;
                    let Request {
                        name,
                        arguments,
                        context,
                    } = request;
                    return toolbox.call(store, name, arguments, context).await;
                }
            }
        }
    }

    /// How many instances of the component are made ahead and ready now.
    pub(crate) fn ready_now(&self) -> usize {
        self.ready.count()
    }

    /// This component's secrets, to mask what is shown of the calls it
    /// makes (`call_tools`) with them too.
    pub(crate) fn secrets(&self) -> Arc<super::secrets::Secrets> {
        self.sealer.secrets.clone()
    }

    /// Give the instance made ahead in `prepared` the call `info`, the
    /// whole of the call's fuel and a fresh epoch deadline.
    fn bind(&self, prepared: Prepared, info: CallInfo) -> (Store<State>, Instance) {
        let Prepared {
            mut store,
            toolbox,
            fuel_spent,
        } = prepared;
        store.data_mut().bind(info);
        let fuel = self.sealer.limits.fuel.saturating_sub(fuel_spent);
        let bound = store.set_fuel(fuel).map(|()| {
            store.set_epoch_deadline(1);
            Some(toolbox)
        });
        (store, bound)
    }

    /// What a call brings, as the store and the tool's log lines see it.
    fn call_info(
        &self,
        tool: &str,
        call_id: &str,
        side: CallSide,
        deadline: Option<Deadline>,
    ) -> CallInfo {
        CallInfo {
            component: self.label.clone(),
            tool: tool.to_owned(),
            // On every line the tool logs: the model's id, cut short.
            call_id: crate::outcome::clip(call_id, 128),
            observer: side.observer,
            asker: side.asker,
            context: side.context,
            deadline,
            caller: side.caller,
            secrets: side.secrets,
        }
    }

    fn new_store(&self, binding: Binding, purpose: Purpose) -> wasmtime::Result<Store<State>> {
        let limits = &self.sealer.limits;
        let state = State::new(&self.granted, limits.memory, binding, purpose)?;
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.set_fuel(limits.fuel)?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        Ok(store)
    }
}
