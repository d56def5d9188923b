//! Guest probes for toolhost's own tests: each tool exercises one capability
//! or one limit, so that a test can provoke exactly one failure mode.
//! Never shipped to users; built by `scripts/build-tools.sh`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_guest::{Context, Level, Output, Tool, ToolError, http};

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    text: String,
    #[schemars(range(min = 1, max = 10))]
    times: u32,
}

#[derive(Deserialize, JsonSchema)]
struct Amount {
    n: u64,
}

#[derive(Deserialize, JsonSchema)]
struct Name {
    name: String,
}

static CALLS: AtomicU32 = AtomicU32::new(0);

fn echo(args: EchoArgs) -> Result<Output, ToolError> {
    Ok(Output::text(args.text.repeat(args.times as usize)))
}

/// Counts calls in a static: a fresh instance per call always answers 1.
fn counter(_: Nothing) -> Result<Output, ToolError> {
    Ok(Output::text(
        (CALLS.fetch_add(1, Ordering::SeqCst) + 1).to_string(),
    ))
}

/// Burns CPU forever: stopped only by fuel or the deadline.
fn spin(_: Nothing) -> Result<Output, ToolError> {
    let mut x: u64 = 0;
    loop {
        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Sleeps `n` milliseconds inside a host call (wasi:clocks), not burning fuel.
fn sleep(args: Amount) -> Result<Output, ToolError> {
    std::thread::sleep(std::time::Duration::from_millis(args.n));
    Ok(Output::text("awake"))
}

/// Allocates and touches `n` MiB.
fn alloc(args: Amount) -> Result<Output, ToolError> {
    let mut blocks = Vec::new();
    for _ in 0..args.n {
        blocks.push(black_box(vec![1u8; 1 << 20]));
    }
    Ok(Output::text(format!("allocated {} MiB", blocks.len())))
}

fn panic(_: Nothing) -> Result<Output, ToolError> {
    eprintln!("probe: about to panic");
    panic!("probe panicked on purpose");
}

/// Executes the `unreachable` instruction itself, not a panic.
fn unreachable(_: Nothing) -> Result<Output, ToolError> {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    unreachable!("the probe runs only as wasm")
}

#[allow(unconditional_recursion)]
fn recurse(depth: u64, pad: [u64; 16]) -> u64 {
    black_box(pad);
    recurse(black_box(depth + 1), black_box(pad)) + 1
}

fn overflow(_: Nothing) -> Result<Output, ToolError> {
    Ok(Output::text(recurse(0, [0; 16]).to_string()))
}

/// Returns `n` bytes of output.
fn output(args: Amount) -> Result<Output, ToolError> {
    Ok(Output::text("x".repeat(args.n as usize)))
}

/// Reads an environment variable.
fn env(args: Name) -> Result<Output, ToolError> {
    match std::env::var(&args.name) {
        Ok(value) => Ok(Output::text(value)),
        Err(_) => Err(ToolError::not_found(format!("{} is not set", args.name))),
    }
}

/// Reads a granted config value and logs a line carrying it.
fn config(args: Name) -> Result<Output, ToolError> {
    let value = toolhost_guest::config(&args.name)
        .ok_or_else(|| ToolError::not_found(format!("no config {:?}", args.name)))?;
    toolhost_guest::log(Level::Info, &format!("config {} is {value}", args.name));
    Ok(Output::text(value))
}

/// Opens a raw TCP connection to `name` ("127.0.0.1:port").
fn socket(args: Name) -> Result<Output, ToolError> {
    std::net::TcpStream::connect(&args.name)?;
    Ok(Output::text("connected"))
}

/// GET `name` with the SDK's client and no handling of its errors beyond `?`.
fn fetch(args: Name, cx: &Context) -> Result<Output, ToolError> {
    let budget = std::time::Duration::from_millis(cx.deadline_ms() * 10);
    let response = http::Request::get(&args.name).timeout(budget).send()?;
    Ok(Output::text(format!(
        "{} {}",
        response.status(),
        response.text()
    )))
}

/// Tries a denied request, handles the error, and succeeds anyway.
fn fetch_or_fallback(args: Name) -> Result<Output, ToolError> {
    match http::get(&args.name) {
        Ok(response) => Ok(Output::text(response.status().to_string())),
        Err(e) => Ok(Output::text(format!("fallback after: {e}"))),
    }
}

/// Returns the call id and deadline the host passed in.
fn context(_: Nothing, cx: &Context) -> Result<Output, ToolError> {
    Ok(Output::text(format!(
        "{} {}",
        cx.call_id(),
        cx.deadline_ms()
    )))
}

toolhost_guest::export_tools! {
    Tool::new("echo", "Repeat text", echo).read_only(),
    Tool::new("counter", "Count calls in this instance", counter),
    Tool::new("spin", "Loop forever", spin),
    Tool::new("sleep", "Sleep n ms", sleep),
    Tool::new("alloc", "Allocate n MiB", alloc),
    Tool::new("panic", "Panic", panic),
    Tool::new("unreachable", "Execute unreachable", unreachable),
    Tool::new("overflow", "Overflow the stack", overflow),
    Tool::new("output", "Return n bytes", output),
    Tool::new("env", "Read an environment variable", env),
    Tool::new("config", "Read a config value", config),
    Tool::new("socket", "Open a TCP connection", socket),
    Tool::new("fetch", "GET a URL", fetch),
    Tool::new("fetch_or_fallback", "GET a URL, tolerate failure", fetch_or_fallback),
    Tool::new("context", "Show the call context", context),
    Tool::new("wipe", "Pretend to delete everything", counter).destructive(),
}
