//! `toolhost:tool/tools`: a call calling other tools (code mode).
//!
//! The sandbox only carries the calls across: which tools a component may
//! call, the budget, and the call itself belong to the dispatcher, which
//! gives each call of a component granted `call_tools` a [`ToolCaller`].
//! A call without one (no grant, describing, an instance made ahead of
//! its call) is refused `capability_denied`.
//!
//! The arguments arrive as handles into the guest's memory (`WasmStr`,
//! `WasmList`), as in `keyvalue/linker.rs`: a list of calls is counted
//! before anything is copied, a name is looked up where it lies, and an
//! argument is copied only once it is known to fit. Reading a string checks
//! it is UTF-8, which costs its length: the bytes read for one list are
//! bounded ([`MAX_LIST_BYTES`]), so a list whose thousand entries all point
//! at one large buffer costs the host that bound and one string at most.

use std::future::Future;
use std::sync::Arc;

use futures::future::BoxFuture;
use tracing::Instrument as _;
use wasmtime::StoreContextMut;
use wasmtime::component::{ComponentType, Lift, Linker, WasmList, WasmStr};

use super::bindings::v0_2::toolhost::tool::types as wit;
use super::deadline::Deadline;
use super::state::State;
use crate::outcome::{CallError, ContentBlock, ErrorType, ResourceContents, ToolOutput, clip};

/// The most calls one `call-tools` list may hold. Past it the calling
/// instance traps: answering each entry would cost host memory in
/// proportion to a length the guest chose.
pub(crate) const MAX_LIST: u32 = 1024;

/// The most bytes of names and arguments the calls of one list may carry
/// together (each string is read to check it is UTF-8, so this bounds the
/// host's work on a list too).
const MAX_LIST_BYTES: usize = 32 << 20;

const TOOLS: &str = "toolhost:tool/tools@0.2.1";

/// The kinds the host gives: a callee's own error of one of these kinds
/// reaches the caller as `tool_error:KIND`.
const HOST_KINDS: &[&str] = &[
    "tool_error",
    "invalid_arguments",
    "unknown_tool",
    "capability_denied",
    "timeout",
    "fuel_exhausted",
    "memory_exhausted",
    "trap",
    "denied_by_user",
    "internal",
    "budget_exhausted",
];

/// The longest tool name (`spec::valid_name`): a longer one is unknown
/// without being looked up.
const MAX_NAME: usize = 64;

/// Bytes of names and arguments the host reads (checking they are UTF-8)
/// per unit of the caller's fuel: reading is paid for like computing, so a
/// guest calling in a loop with lists of large strings runs out of fuel
/// instead of spending the host's time for free.
const BYTES_PER_FUEL: usize = 8;

/// Fuel one entry of a list costs the caller (the host's work on it beyond
/// reading its strings: a refusal's message, a task).
const FUEL_PER_CALL: u64 = 1000;

/// How a call reaches other tools: made by the dispatcher for each call of
/// a component granted `call_tools`.
///
/// A call is admitted in steps: [`check`](Self::check) the name,
/// [`take`](Self::take) a call from the budget before its arguments are
/// read (a caller past its budget has nothing more read), and
/// [`give_back`](Self::give_back) what a call refused for its arguments
/// took, so a refusal costs the budget nothing; then
/// [`call`](Self::call) it, under the number [`take`](Self::take) gave.
/// Every refusal, the sandbox's own included, goes through
/// [`refused`](Self::refused). Calls are numbered in the order the
/// program made them, refused or not.
pub(crate) trait ToolCaller: Send + Sync {
    /// Whether the caller may call tool `name` (its grant, the tool's
    /// existence): the most bytes of arguments the tool accepts.
    ///
    /// # Errors
    ///
    /// Why the call is refused, for the calling tool to read.
    fn check(&self, name: &str) -> Result<usize, CallError>;

    /// Take one call from the caller's budget: its number.
    ///
    /// # Errors
    ///
    /// `budget_exhausted` when none is left.
    fn take(&self) -> Result<u32, CallError>;

    /// Give back the call numbered `number`, taken and then refused.
    fn give_back(&self, number: u32, name: &str, error: CallError) -> CallError;

    /// A call of `name` refused with `error` (`name` is empty when it was
    /// not read): numbered, reported as a call that ended, and returned.
    fn refused(&self, name: &str, error: CallError) -> CallError;

    /// Run admitted call `number` to its end. `deadline` is the calling
    /// call's: its clock stands still while the callee waits for a person.
    fn call(
        &self,
        number: u32,
        name: String,
        arguments: String,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'static, Result<ToolOutput, CallError>>;
}

/// What a call may call: its caller (none without a grant) and its deadline.
#[derive(Clone, Default)]
pub(crate) struct Calls {
    pub caller: Option<Arc<dyn ToolCaller>>,
    pub deadline: Option<Deadline>,
}

/// One entry of a `call-tools` list, still in the guest's memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct LazyCall {
    name: WasmStr,
    arguments: WasmStr,
}

type Cx<'a> = StoreContextMut<'a, State>;
type WitResult = Result<wit::ToolOutput, wit::ToolError>;
type Answer<'a, T> = Box<dyn Future<Output = wasmtime::Result<(T,)>> + Send + 'a>;

/// Add `toolhost:tool/tools` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    let mut instance = linker.instance(TOOLS)?;
    instance.func_wrap_async("call-tool", call_tool)?;
    instance.func_wrap_async("call-tools", call_tools)?;
    Ok(())
}

fn call_tool(mut cx: Cx<'_>, (name, arguments): (WasmStr, WasmStr)) -> Answer<'_, WitResult> {
    Box::new(async move {
        let mut results = run(&mut cx, vec![LazyCall { name, arguments }]).await?;
        let result = results.pop().unwrap_or_else(|| {
            Err(to_wit_error(CallError::new(
                ErrorType::Internal,
                "the call was lost",
            )))
        });
        Ok((result,))
    })
}

fn call_tools(mut cx: Cx<'_>, (calls,): (WasmList<LazyCall>,)) -> Answer<'_, Vec<WitResult>> {
    Box::new(async move {
        let len = calls.len();
        if len > MAX_LIST as usize {
            wasmtime::bail!(
                "it passed call-tools a list of {len} calls; a list holds at most {MAX_LIST}: split it (no call of that list was made)"
            );
        }
        let mut lazy = Vec::with_capacity(len);
        for i in 0..len {
            if let Some(call) = calls.get(&mut cx, i) {
                lazy.push(call?);
            }
        }
        Ok((run(&mut cx, lazy).await?,))
    })
}

/// Admit each call, copy the arguments of those admitted, and run them all
/// at once: one result per call, in order.
async fn run(cx: &mut Cx<'_>, lazy: Vec<LazyCall>) -> wasmtime::Result<Vec<WitResult>> {
    let state = cx.data_mut();
    let unbound = state.used("it called a tool while being instantiated");
    let Calls { caller, deadline } = state.calls.clone();
    let caller = match caller {
        Some(caller) if !unbound => caller,
        _ => {
            let refusal = not_granted();
            return Ok(lazy.iter().map(|_| Err(refusal.clone())).collect());
        }
    };
    let mut read = 0usize;
    let mut admitted = Vec::with_capacity(lazy.len());
    for call in &lazy {
        match admit(cx, &*caller, call, &mut read) {
            Ok(call) => admitted.push(call),
            Err(unreadable) => {
                give_back_all(&*caller, admitted, &unreadable_list());
                return Err(unreadable);
            }
        }
    }
    if let Err(out_of_fuel) = charge(cx, read, lazy.len()) {
        give_back_all(&*caller, admitted, &out_of_fuel);
        return Err(wasmtime::Trap::OutOfFuel.into());
    }
    // Each call on a task of its own, so that calls run on every core;
    // the set aborts them all if the calling call is dropped (its
    // deadline, a stop), and the tree of calls ends with it.
    let mut running = tokio::task::JoinSet::new();
    let workers = super::spread::workers();
    let mut results: Vec<Option<WitResult>> = Vec::with_capacity(admitted.len());
    let mut names = Vec::new();
    for (i, admitted) in admitted.into_iter().enumerate() {
        match admitted {
            Err(error) => results.push(Some(Err(to_wit_error(error)))),
            Ok((number, name, arguments)) => {
                results.push(None);
                names.push((i, name.clone()));
                let call = caller.call(number, name, arguments, deadline.clone());
                running.spawn_on(async move { (i, call.await) }.in_current_span(), &workers);
            }
        }
    }
    // What the results hold, waiting for the list's last call, is counted
    // against half the memory the caller may still grow by (the other half
    // is for its own work on them, since the results are then copied into
    // its memory): past it a result is dropped and answered
    // `memory_exhausted`, which the caller can handle, where a copy past
    // its limit would trap it. Memory the caller has grown and freed again
    // is not counted as room: this errs on the side of the caller going on.
    let room = cx.data().limiter.left() / 2;
    let mut held = 0u64;
    while let Some(done) = running.join_next().await {
        let (i, mut result) =
            done.map_err(|e| wasmtime::Error::msg(format!("a tool call failed: {e}")))?;
        let too_much = || {
            format!(
                "the results of this call would hold more than half the memory the caller has left ({room} bytes) together; make fewer calls at once, calls that return less, or hold less yourself"
            )
        };
        match &mut result {
            Ok(output) => {
                // The artifact is the application's, never the program's.
                output.artifact = None;
                let size = size_of_output(output);
                held = held.saturating_add(size);
                if held > room {
                    // Dropped, so not held: later, smaller results may fit.
                    held -= size;
                    result = Err(CallError::new(ErrorType::MemoryExhausted, too_much()));
                }
            }
            // A callee's error is held too (its message may be as long as
            // a result); one that does not fit is cut to a few lines, its
            // kind kept. It was masked already, so a cut leaves no part of
            // a secret.
            Err(error) => {
                let size = error_size(error);
                held = held.saturating_add(size);
                if held > room {
                    held -= size;
                    error.message = format!(
                        "{} (cut: {})",
                        clip(&error.message, MAX_CUT_ERROR),
                        too_much()
                    );
                    held = held.saturating_add(error_size(error));
                }
            }
        }
        // The caller's progress counts the calls that end.
        if let Some((_, name)) = names.iter().find(|(at, _)| *at == i) {
            let ended = if result.is_ok() { "done" } else { "failed" };
            cx.data_mut()
                .nested_call_ended(&format!("{} {ended}", clip(name, 64)));
        }
        results[i] = Some(result.map(to_wit_output).map_err(to_wit_error));
    }
    Ok(results
        .into_iter()
        .map(|result| {
            result.unwrap_or_else(|| {
                Err(to_wit_error(CallError::new(
                    ErrorType::Internal,
                    "the call was lost",
                )))
            })
        })
        .collect())
}

/// One call admitted, with its name and arguments copied out of the guest,
/// or why it is refused (reported through `caller`). `read` sums the bytes of the list's strings read
/// so far (names and arguments, whether admitted or not): reading one
/// checks it is UTF-8, and a hostile list points every entry at one large
/// buffer, so past [`MAX_LIST_BYTES`] nothing more is read and the rest of
/// the list is refused unread. The work a list can cost is that bound plus
/// one string.
fn admit(
    cx: &Cx<'_>,
    caller: &dyn ToolCaller,
    call: &LazyCall,
    read: &mut usize,
) -> wasmtime::Result<Result<(u32, String, String), CallError>> {
    let refuse = |name: &str, error: CallError| Ok(Err(caller.refused(name, error)));
    let invalid = |message: String| CallError::new(ErrorType::InvalidArguments, message);
    let over = |read: usize| {
        invalid(format!(
            "the calls of one list may carry at most {MAX_LIST_BYTES} bytes of names and arguments together, and this one reaches {read}: split the list"
        ))
    };
    if *read > MAX_LIST_BYTES {
        return refuse("", over(*read));
    }
    let name = call.name.to_str(cx)?;
    *read = read.saturating_add(name.len());
    if name.len() > MAX_NAME {
        // Never hashed: no tool has a name this long. Nor quoted: a cut
        // would leave the start of a secret the program passed as a name
        // where masking cannot recognise it.
        let error = CallError::new(
            ErrorType::UnknownTool,
            format!(
                "no tool has a name of {} bytes: a tool name is at most {MAX_NAME} characters",
                name.len()
            ),
        );
        return refuse("", error);
    }
    let most = match caller.check(&name) {
        Ok(most) => most,
        Err(error) => return refuse(&name, error),
    };
    if *read > MAX_LIST_BYTES {
        return refuse(&name, over(*read));
    }
    // Taken before the arguments are read, given back if they are refused.
    let number = match caller.take() {
        Ok(number) => number,
        Err(error) => return refuse(&name, error),
    };
    let give_back = |error: CallError| Ok(Err(caller.give_back(number, &name, error)));
    let arguments = match call.arguments.to_str(cx) {
        Ok(arguments) => arguments,
        Err(unreadable) => {
            caller.give_back(number, &name, unreadable_list());
            return Err(unreadable);
        }
    };
    *read = read.saturating_add(arguments.len());
    if arguments.len() > most {
        let error = invalid(format!(
            "the arguments of this call of {} are {} bytes, over the {most} it accepts (its max_arguments limit)",
            clip(&name, 64),
            arguments.len()
        ));
        return give_back(error);
    }
    if *read > MAX_LIST_BYTES {
        return give_back(over(*read));
    }
    Ok(Ok((number, name.into_owned(), arguments.into_owned())))
}

/// Give back every call of `admitted` (none of them will run) with
/// `error`, each reported refused: the list stops the caller before any
/// of its calls is made.
fn give_back_all(
    caller: &dyn ToolCaller,
    admitted: Vec<Result<(u32, String, String), CallError>>,
    error: &CallError,
) {
    for (number, name, _) in admitted.into_iter().flatten() {
        caller.give_back(number, &name, error.clone());
    }
}

/// What each admitted call of a list the host could not read (a name or
/// arguments not UTF-8) is refused with: the caller traps.
fn unreadable_list() -> CallError {
    CallError::new(
        ErrorType::InvalidArguments,
        "the calling tool passed a list the host could not read (a name or arguments not UTF-8), so no call of it was made",
    )
}

/// Charge the caller fuel for the host's work on a list of `calls` whose
/// strings came to `read` bytes.
///
/// # Errors
///
/// When that is more than the caller has left (it is left with none): the
/// error each of the list's calls is refused with (`capability_denied`,
/// code `budget_exhausted`; the caller then traps out of fuel).
fn charge(cx: &mut Cx<'_>, read: usize, calls: usize) -> Result<(), CallError> {
    let cost = u64::try_from(read / BYTES_PER_FUEL)
        .unwrap_or(u64::MAX)
        .saturating_add(
            u64::try_from(calls)
                .unwrap_or(u64::MAX)
                .saturating_mul(FUEL_PER_CALL),
        );
    // Fuel is always on in the host's engine; an engine without it has
    // nothing to charge.
    let Ok(fuel) = cx.get_fuel() else {
        return Ok(());
    };
    let _ = cx.set_fuel(fuel.saturating_sub(cost));
    if cost > fuel {
        // The caller's budget, not the callee's fuel: the callee never ran.
        let mut error = CallError::new(
            ErrorType::CapabilityDenied,
            format!(
                "the calling tool ran out of fuel before this call was made: reading its list of {calls} calls ({read} bytes of names and arguments) cost {cost} fuel, and it had {fuel} left"
            ),
        );
        error.tool_kind = Some("budget_exhausted".to_owned());
        return Err(error);
    }
    Ok(())
}

fn not_granted() -> wit::ToolError {
    to_wit_error(CallError::new(
        ErrorType::CapabilityDenied,
        "this tool may not call other tools: its manifest entry grants no call_tools; add e.g. call_tools = [\"calc\"] to it",
    ))
}

/// A callee's failure as the caller reads it: the kind the callee gave for
/// an error of its own, else the host's.
fn to_wit_error(error: CallError) -> wit::ToolError {
    // A tool's own kind, or a refusal's finer one (`budget_exhausted`).
    // A callee's own kind that spells one of the host's is marked as the
    // tool's, so a callee cannot pose as the host (a false
    // `budget_exhausted` would stop the program's later calls).
    let kind = match (error.kind, error.tool_kind) {
        (ErrorType::ToolError, Some(kind)) if HOST_KINDS.contains(&kind.as_str()) => {
            format!("tool_error:{kind}")
        }
        (_, Some(kind)) => kind,
        (kind, None) => kind.as_str().to_owned(),
    };
    wit::ToolError {
        kind,
        message: error.message,
        retryable: error.retryable,
    }
}

/// What one content block or result holds beyond its strings and bytes,
/// on the host and once copied into the caller: its record, pointers and
/// lengths. Counted so that many empty blocks are not free.
const BLOCK_OVERHEAD: usize = 64;

/// How much of a callee's error message is kept when the results of a list
/// would not fit otherwise.
const MAX_CUT_ERROR: usize = 200;

/// The bytes a callee's error holds until the caller reads it.
fn error_size(error: &CallError) -> u64 {
    let kind = error.tool_kind.as_ref().map_or(0, String::len);
    u64::try_from(BLOCK_OVERHEAD + error.message.len() + kind).unwrap_or(u64::MAX)
}

/// About the bytes an output holds: every string and byte buffer, and
/// [`BLOCK_OVERHEAD`] per block and per result.
fn size_of_output(output: &ToolOutput) -> u64 {
    let optional = |text: &Option<String>| text.as_ref().map_or(0, String::len);
    let blocks: usize = output
        .content
        .iter()
        .map(|block| {
            BLOCK_OVERHEAD
                + match block {
                    ContentBlock::Text(text) => text.len(),
                    ContentBlock::Image(m) | ContentBlock::Audio(m) => {
                        m.data.len() + m.mime_type.len()
                    }
                    ContentBlock::ResourceLink(link) => {
                        link.uri.len()
                            + link.name.len()
                            + optional(&link.mime_type)
                            + optional(&link.description)
                    }
                    ContentBlock::Resource(resource) => {
                        resource.uri.len()
                            + optional(&resource.mime_type)
                            + match &resource.contents {
                                ResourceContents::Text(text) => text.len(),
                                ResourceContents::Blob(bytes) => bytes.len(),
                            }
                    }
                }
        })
        .sum::<usize>()
        + BLOCK_OVERHEAD;
    let structured = output
        .structured
        .as_ref()
        .map_or(0, |v| v.to_string().len());
    u64::try_from(blocks.saturating_add(structured)).unwrap_or(u64::MAX)
}

/// A callee's result, sealed by the host (cut to its limits, its secrets
/// masked), in the contract's shape.
fn to_wit_output(output: ToolOutput) -> wit::ToolOutput {
    let media = |m: crate::outcome::Media| wit::Media {
        mime_type: m.mime_type,
        data: m.data.to_vec(),
    };
    let content = output
        .content
        .into_iter()
        .map(|block| match block {
            ContentBlock::Text(text) => wit::ContentBlock::Text(text),
            ContentBlock::Image(m) => wit::ContentBlock::Image(media(m)),
            ContentBlock::Audio(m) => wit::ContentBlock::Audio(media(m)),
            ContentBlock::ResourceLink(link) => {
                wit::ContentBlock::ResourceLink(wit::ResourceLink {
                    uri: link.uri,
                    name: link.name,
                    mime_type: link.mime_type,
                    description: link.description,
                })
            }
            ContentBlock::Resource(resource) => {
                wit::ContentBlock::Embedded(wit::EmbeddedResource {
                    uri: resource.uri,
                    mime_type: resource.mime_type,
                    contents: match resource.contents {
                        ResourceContents::Text(text) => wit::ResourceContents::Text(text),
                        ResourceContents::Blob(bytes) => {
                            wit::ResourceContents::Blob(bytes.to_vec())
                        }
                    },
                })
            }
        })
        .collect();
    wit::ToolOutput {
        content,
        structured: output.structured.map(|value| value.to_string()),
        artifact: output.artifact,
    }
}
