//! The `toolhost` command: the only place that prints to the terminal or
//! decides the exit status.
//!
//! Exit status: 0 when every call produced a ToolMessage (even one with
//! `is_error`); 1 for a manifest or load error, for `run` a model endpoint
//! that failed for good, and for `call --batch` a batch that is not a JSON
//! array, call or assistant message (no call runs) or that stopped being
//! readable partway (the answers written stand); 2 for a usage error.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use futures::{FutureExt as _, StreamExt as _};
use toolhost::agent::{Agent, AgentEvent, AgentPolicy, RunEnd};
use toolhost::authoring::{componentize, lint, scaffold};
use toolhost::dispatcher::CallEnv;
use toolhost::grants::FileMode;
use toolhost::logging::LogFormat;
use toolhost::manifest::{DEFAULT_FILE, ModelConfig, Provider};
use toolhost::model::{self, Message, ResponseFormat, ToolChoice};
use toolhost::serve;
use toolhost::wire::definitions::{self, Format};
use toolhost::wire::results;
use toolhost::{ApproveAll, Approver, Manifest, RefuseAll, SandboxOptions, ToolCall, ToolHost};

mod cli;

use cli::prompts::{TerminalApprover, TerminalAsker};
use cli::terminal::TERMINAL;
use toolhost::printable::{self, one_line};

/// Run LLM tool calls in fresh, capability-scoped WebAssembly sandboxes.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// The manifest.
    #[arg(long, short, global = true, default_value = DEFAULT_FILE, env = "TOOLHOST_CONFIG")]
    config: PathBuf,
    /// Log format on stderr. Levels come from RUST_LOG (default: warn).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Compile every component instead of using the on-disk cache.
    #[arg(long, global = true)]
    no_cache: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the tool definitions as the model sees them.
    Tools {
        /// Wire format.
        #[arg(long, value_enum, default_value_t = FormatArg::Openai)]
        format: FormatArg,
    },
    /// Run one tool call, or a batch, and print the ToolMessages.
    Call {
        /// Tool name (omit with --batch).
        #[arg(required_unless_present = "batch", conflicts_with = "batch")]
        name: Option<String>,
        /// Arguments as a JSON object.
        #[arg(default_value = "{}")]
        args: String,
        /// Tool calls from FILE, or - for stdin: a JSON array of OpenAI, LangChain,
        /// Anthropic tool_use or MCP calls, or a whole assistant message.
        #[arg(long, value_name = "FILE")]
        batch: Option<String>,
        /// Approve calls whose manifest entry requires approval.
        #[arg(long)]
        yes: bool,
        /// Answer format: ToolMessages, OpenAI chat-completions messages (tool messages,
        /// then one user message with their images), Anthropic tool_result blocks, or
        /// MCP CallToolResults.
        #[arg(long, value_enum, default_value_t = ResultFormatArg::Toolmessage)]
        format: ResultFormatArg,
        /// Context for the tools as a JSON object (e.g. '{"user":"ada"}'): tools
        /// read it and scoped stores are kept by it.
        #[arg(long, value_name = "JSON", value_parser = parse_context)]
        context: Option<serde_json::Value>,
        #[command(flatten)]
        component: ComponentFlags,
    },
    /// Serve the tools: MCP over stdio, or one HTTP server with MCP at /mcp,
    /// POST /v1/tool_calls, GET /v1/tools, /metrics and /healthz.
    Serve {
        /// MCP over stdin and stdout (for Claude Code, Cursor and other MCP clients).
        #[arg(long, required_unless_present = "listen", conflicts_with = "listen")]
        stdio: bool,
        /// Serve HTTP on ADDR, e.g. 127.0.0.1:8787. A non-loopback address needs --token-env.
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
        /// Require `Authorization: Bearer <token>`, the token read from environment variable NAME.
        #[arg(long, value_name = "NAME")]
        token_env: Option<String>,
        /// Also accept browser requests from ORIGIN (e.g. https://app.example.com);
        /// loopback origins are always accepted on a loopback address.
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        allow_origins: Vec<String>,
        /// Reload the manifest and components when they change, without dropping calls.
        #[arg(long)]
        watch: bool,
        /// Approve calls whose manifest entry requires approval (otherwise a
        /// client that supports elicitation is asked, and the rest are refused).
        #[arg(long)]
        yes: bool,
        /// The largest request body accepted over HTTP, in bytes.
        #[arg(long, value_name = "BYTES", default_value_t = toolhost::serve::DEFAULT_MAX_BODY)]
        max_body: usize,
        /// The most tool calls one POST /v1/tool_calls may carry.
        #[arg(long, value_name = "N", default_value_t = toolhost::serve::DEFAULT_MAX_BATCH)]
        max_batch: usize,
        /// On SIGTERM or SIGINT, how long calls in flight may take to finish
        /// (new requests are refused meanwhile); those still running then are
        /// stopped and answered with an error.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
        drain: std::time::Duration,
    },
    /// Validate the manifest and components; print what each tool may touch,
    /// and warnings (with the fix) about what models and clients trip on.
    Check {
        /// Make every warning an error (exit status 1).
        #[arg(long)]
        strict: bool,
    },
    /// Start a tool: write folder NAME with one working tool in LANG, its
    /// manifest, a README and one build command (./build.sh).
    New {
        /// The folder to create; its name names the tool (`-` becomes `_`).
        name: PathBuf,
        /// The language.
        #[arg(long, value_enum)]
        lang: LangArg,
    },
    /// Make a core WebAssembly module (C with wasi-libc, built for
    /// wasm32-wasi as a reactor) into a tool component.
    Componentize {
        /// The core module.
        module: PathBuf,
        /// Where to write the component.
        #[arg(long, short)]
        output: PathBuf,
        /// The contract's folder the module's bindings were made from (a
        /// scaffold's `wit/`); default: the contract this binary carries.
        #[arg(long, value_name = "DIR")]
        wit: Option<PathBuf>,
    },
    /// The agent loop: ask the model, run its tool calls in sandboxes, repeat.
    /// With PROMPT, one task; without, an interactive chat.
    Run {
        /// The task. Omit for an interactive chat.
        prompt: Option<String>,
        /// Model endpoint base URL (overrides [model] base_url).
        #[arg(long)]
        base_url: Option<String>,
        /// Model name (overrides [model] model).
        #[arg(long)]
        model: Option<String>,
        /// Wire format (overrides [model] provider).
        #[arg(long, value_enum)]
        provider: Option<Provider>,
        /// Write the transcript as JSON lines on stdout instead of the display.
        #[arg(long)]
        json: bool,
        /// Also save the transcript as JSON lines to FILE.
        #[arg(long, value_name = "FILE")]
        transcript: Option<PathBuf>,
        /// Approve calls that need approval without asking.
        #[arg(long)]
        yes: bool,
        /// A system prompt (replaces [model] system).
        #[arg(long)]
        system: Option<String>,
        /// Context for the tools as a JSON object (e.g. '{"user":"ada"}'): tools
        /// read it and scoped stores are kept by it; the model never sees it.
        #[arg(long, value_name = "JSON", value_parser = parse_context)]
        context: Option<serde_json::Value>,
        #[command(flatten)]
        controls: Box<LoopFlags>,
    },
    /// Show a saved transcript (`run --transcript FILE` or `run --json`) as
    /// `run` displayed it. Needs no manifest.
    Replay {
        /// The transcript: JSON lines, or - for stdin.
        file: String,
    },
}

/// `call --component`: one component run without a manifest, granted only
/// what these flags say, under the default limits unless they say otherwise.
#[derive(clap::Args)]
struct ComponentFlags {
    /// Run this component without a manifest (the author's inner loop).
    #[arg(long, value_name = "FILE.wasm", conflicts_with = "batch")]
    component: Option<PathBuf>,
    /// Let it request ORIGIN (e.g. https://api.example.org, https://*.example.org:8443).
    #[arg(long, value_name = "ORIGIN", requires = "component")]
    allow_host: Vec<String>,
    /// Let it see host directory HOST as GUEST, read-only unless `:rw`.
    #[arg(long, value_name = "HOST:GUEST[:ro|rw]", requires = "component")]
    dir: Vec<String>,
    /// Set environment variable K inside it.
    #[arg(long, value_name = "K=V", requires = "component")]
    env: Vec<String>,
    /// Let it read config value K (the contract's `config(key)`).
    #[arg(long, value_name = "K=V", requires = "component")]
    config_value: Vec<String>,
    /// Wall-clock limit (default 5s).
    #[arg(long, value_name = "DURATION", requires = "component", value_parser = humantime::parse_duration)]
    timeout: Option<std::time::Duration>,
    /// Fuel limit (default 2000000000).
    #[arg(long, value_name = "N", requires = "component")]
    fuel: Option<u64>,
    /// Memory limit, e.g. 256MiB (default 64MiB; Python and JavaScript tools need about 256MiB).
    #[arg(long, value_name = "SIZE", requires = "component")]
    memory: Option<bytesize::ByteSize>,
    /// Also print the tool's log lines, and its fuel and time, on stderr.
    #[arg(long, short, requires = "component")]
    verbose: bool,
}

impl ComponentFlags {
    /// The component and what it is granted, or `None` without `--component`.
    fn config(&self) -> anyhow::Result<Option<toolhost::manifest::ComponentConfig>> {
        let Some(path) = &self.component else {
            return Ok(None);
        };
        let usage = |flag: &str, value: &str, message: String| {
            anyhow::anyhow!(UsageError(format!("{flag} {value:?}: {message}")))
        };
        let mut grants = toolhost::Grants::none();
        for origin in &self.allow_host {
            grants = grants
                .allow_host(origin)
                .map_err(|e| usage("--allow-host", origin, e.to_string()))?;
        }
        for dir in &self.dir {
            let (host, guest, mode) =
                parse_dir(dir).map_err(|message| usage("--dir", dir, message))?;
            grants = grants
                .file(host, guest, mode)
                .map_err(|e| usage("--dir", dir, e.to_string()))?;
        }
        let pair = |flag: &str, text: &str| match text.split_once('=') {
            Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
            _ => Err(usage(flag, text, "expected KEY=VALUE".into())),
        };
        for var in &self.env {
            let (key, value) = pair("--env", var)?;
            grants = grants.env(key, value);
        }
        for item in &self.config_value {
            let (key, value) = pair("--config-value", item)?;
            grants = grants.config(key, value, false);
        }
        let mut config = toolhost::manifest::ComponentConfig::new(path);
        config.grants = grants;
        config.limits = config
            .limits
            .with_call_limits(
                self.timeout,
                self.fuel,
                self.memory.map(|size| size.as_u64()),
            )
            .map_err(|(key, message)| anyhow::anyhow!(UsageError(format!("--{key}: {message}"))))?;
        Ok(Some(config))
    }
}

/// `--dir HOST:GUEST[:ro|rw]`: the guest path is absolute, so it starts at
/// the last `:/`, and a host path may hold colons of its own.
fn parse_dir(text: &str) -> Result<(&str, &str, FileMode), String> {
    let (spec, mode) = match text.rsplit_once(':') {
        Some((spec, "ro")) => (spec, FileMode::ReadOnly),
        Some((spec, "rw")) => (spec, FileMode::ReadWrite),
        Some((_, last)) if !last.starts_with('/') => {
            return Err(format!(
                "the mode is {last:?}; write ro or rw, e.g. ./data:/data:rw"
            ));
        }
        _ => (text, FileMode::ReadOnly),
    };
    match spec.rfind(":/") {
        Some(at) if at > 0 => Ok((&spec[..at], &spec[at + 1..], mode)),
        _ => Err("expected HOST:GUEST[:ro|rw] with an absolute GUEST, e.g. ./data:/data:ro".into()),
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum LangArg {
    Rust,
    Python,
    Typescript,
    Javascript,
    C,
}

impl From<LangArg> for scaffold::Language {
    fn from(lang: LangArg) -> Self {
        match lang {
            LangArg::Rust => Self::Rust,
            LangArg::Python => Self::Python,
            LangArg::Typescript => Self::TypeScript,
            LangArg::Javascript => Self::JavaScript,
            LangArg::C => Self::C,
        }
    }
}

/// `run` flags that override `[model]`'s agent-loop controls.
#[derive(clap::Args)]
#[command(next_help_heading = "Agent loop (override [model])")]
struct LoopFlags {
    /// Model calls before the run stops without an answer.
    #[arg(long, value_name = "N")]
    max_steps: Option<u32>,
    /// Tokens the model may generate per call.
    #[arg(long, value_name = "N")]
    max_tokens: Option<u32>,
    /// auto, required, none, or a tool's name.
    #[arg(long, value_name = "CHOICE")]
    tool_choice: Option<String>,
    /// How many first steps a forcing --tool-choice applies to.
    #[arg(long, value_name = "N")]
    tool_choice_steps: Option<u32>,
    /// Let the model call several tools per turn (true) or one (false).
    #[arg(long, value_name = "BOOL")]
    parallel_tool_calls: Option<bool>,
    /// The most tool calls run per turn; the rest are answered without running.
    #[arg(long, value_name = "N")]
    max_tool_calls_per_turn: Option<u32>,
    /// Sampling temperature (0 for the most deterministic answers).
    #[arg(long, value_name = "T")]
    temperature: Option<f64>,
    /// Nucleus sampling.
    #[arg(long, value_name = "P")]
    top_p: Option<f64>,
    /// A sampling seed (OpenAI-compatible chat completions only).
    #[arg(long, value_name = "N")]
    seed: Option<i64>,
    /// A stop sequence (repeatable).
    #[arg(long, value_name = "TEXT")]
    stop: Vec<String>,
    /// Tokens (input and output) the run may spend.
    #[arg(long, value_name = "N")]
    max_run_tokens: Option<u64>,
    /// Dollars the run may spend, by [model.prices].
    #[arg(long, value_name = "USD")]
    max_run_cost: Option<f64>,
    /// A JSON Schema file the final answer must satisfy.
    #[arg(long, value_name = "FILE")]
    response_schema: Option<PathBuf>,
}

impl LoopFlags {
    /// Apply the flags given to `config`, and check the result as the
    /// manifest's values are checked.
    fn apply(self, config: &mut ModelConfig) -> anyhow::Result<()> {
        let Self {
            max_steps,
            max_tokens,
            tool_choice,
            tool_choice_steps,
            parallel_tool_calls,
            max_tool_calls_per_turn,
            temperature,
            top_p,
            seed,
            stop,
            max_run_tokens,
            max_run_cost,
            response_schema,
        } = self;
        config.max_steps = max_steps.unwrap_or(config.max_steps);
        config.max_tokens = max_tokens.unwrap_or(config.max_tokens);
        if let Some(choice) = tool_choice {
            config.tool_choice = ToolChoice::parse(&choice);
        }
        config.tool_choice_steps = tool_choice_steps.unwrap_or(config.tool_choice_steps);
        if let Some(parallel) = parallel_tool_calls {
            config.set_parallel_tool_calls(parallel);
        }
        if let Some(n) = max_tool_calls_per_turn {
            config.max_tool_calls_per_turn = std::num::NonZeroU32::new(n).ok_or_else(|| {
                UsageError(
                    "--max-tool-calls-per-turn must be at least 1 (it caps the calls run per turn)"
                        .into(),
                )
            })?;
        }
        config.sampling.temperature = temperature.or(config.sampling.temperature);
        config.sampling.top_p = top_p.or(config.sampling.top_p);
        config.sampling.seed = seed.or(config.sampling.seed);
        if !stop.is_empty() {
            config.sampling.stop = stop;
        }
        config.max_run_tokens = max_run_tokens.or(config.max_run_tokens);
        config.max_run_cost = max_run_cost.or(config.max_run_cost);
        if let Some(path) = response_schema {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("--response-schema: reading {}", path.display()))?;
            let schema = serde_json::from_str(&text)
                .with_context(|| format!("--response-schema: {} is not JSON", path.display()))?;
            config.response_format = Some(ResponseFormat {
                name: "final_answer".into(),
                schema,
                strict: false,
            });
        }
        config.check().map_err(|(key, message)| {
            anyhow::anyhow!(UsageError(format!(
                "{key} ([model] or its flag): {message}"
            )))
        })
    }
}

/// A mistake in how toolhost was invoked: exit status 2.
#[derive(Debug)]
struct UsageError(String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Openai,
    Anthropic,
    Mcp,
}

impl From<FormatArg> for Format {
    fn from(format: FormatArg) -> Self {
        match format {
            FormatArg::Openai => Format::OpenAI,
            FormatArg::Anthropic => Format::Anthropic,
            FormatArg::Mcp => Format::Mcp,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum ResultFormatArg {
    Toolmessage,
    Openai,
    Anthropic,
    Mcp,
}

impl From<ResultFormatArg> for results::Format {
    fn from(format: ResultFormatArg) -> Self {
        match format {
            ResultFormatArg::Toolmessage => results::Format::ToolMessage,
            ResultFormatArg::Openai => results::Format::OpenAI,
            ResultFormatArg::Anthropic => results::Format::Anthropic,
            ResultFormatArg::Mcp => results::Format::Mcp,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Declared before the runtime so that it drops after it: lines the
    // runtime's tasks log while shutting down are flushed too.
    // `call --component --verbose` shows the tool's own log lines.
    let default_log = match &cli.command {
        Command::Call { component, .. } if component.verbose => "warn,toolhost::guest=trace",
        _ => "warn",
    };
    let _logging = match init_logging(cli.log_format, default_log) {
        Ok(logging) => logging,
        Err(e) => {
            eprintln!("error: cannot start logging: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Tools' files and connections come from a pool sized by this limit,
    // with a reserve kept for the host: raise it as far as allowed first.
    toolhost::sandbox::raise_descriptor_limit();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    };
    // A check of a tool's arguments that ran away past its call's deadline
    // cannot be stopped; exit without waiting for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

/// Print `value` as pretty JSON on stdout. A reader that went away (`| head`)
/// is not an error: there is nobody left to tell.
fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        result => Ok(result?),
    }
}

/// A JSON array written element by element as `elements` yields them,
/// each element as [`print_json`] writes a value, and what is ready out as
/// soon as the next is not: a reader sees each answer as it comes. Writes
/// go between prompts on the terminal, never into one. When stdout fails (a
/// reader that went away), the stream is still read to its end, so every
/// call of the batch runs as it would have; only the answers are dropped.
async fn print_json_array(
    elements: impl futures::Stream<Item = impl serde::Serialize>,
) -> anyhow::Result<()> {
    let mut elements = std::pin::pin!(elements);
    let mut pending = b"[".to_vec();
    let mut failure: Option<std::io::Error> = None;
    let mut written = 0usize;
    loop {
        let element = match elements.next().now_or_never() {
            Some(element) => element,
            None => {
                emit(&mut pending, &mut failure).await;
                elements.next().await
            }
        };
        let Some(element) = element else { break };
        if failure.is_some() {
            continue;
        }
        let text = serde_json::to_string_pretty(&element)?;
        pending.extend_from_slice(if written == 0 { b"\n" } else { b",\n" });
        for (i, line) in text.lines().enumerate() {
            if i > 0 {
                pending.push(b'\n');
            }
            pending.extend_from_slice(b"  ");
            pending.extend_from_slice(line.as_bytes());
        }
        written += 1;
        if pending.len() >= 64 << 10 {
            emit(&mut pending, &mut failure).await;
        }
    }
    pending.extend_from_slice(if written == 0 { b"]\n" } else { b"\n]\n" });
    emit(&mut pending, &mut failure).await;
    match failure {
        Some(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing the answers to stdout"))
        }
        _ => Ok(()),
    }
}

/// Write `pending` to stdout between prompts on the terminal, and empty it;
/// after stdout failed, only empty it.
async fn emit(pending: &mut Vec<u8>, failure: &mut Option<std::io::Error>) {
    use std::io::Write as _;
    if failure.is_none() && !pending.is_empty() {
        let _turn = TERMINAL.turn().await;
        let mut stdout = std::io::stdout().lock();
        if let Err(e) = stdout.write_all(pending).and_then(|()| stdout.flush()) {
            *failure = Some(e);
        }
    }
    pending.clear();
}

/// Installs the stderr logger; keep what it returns until `main` returns.
fn init_logging(
    format: LogFormat,
    default: &str,
) -> Result<Logging, tracing_subscriber::util::TryInitError> {
    toolhost::logging::init_with(format, default).map(|guard| Logging(Some(guard)))
}

/// Flushes the log when `main` returns, whichever way it does, and tells the
/// operator if a slow stderr cost log lines.
struct Logging(Option<toolhost::logging::Guard>);

impl Drop for Logging {
    fn drop(&mut self) {
        let Some(guard) = self.0.take() else { return };
        let dropped = guard.finish();
        if dropped == 0 {
            return;
        }
        // stderr is what did not keep up, and the log thread may still hold
        // it, so the notice gets a second to get through rather than holding
        // up the exit for as long as stderr stays stuck.
        let (written, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            eprintln!(
                "warning: {dropped} log lines were dropped because stderr did not keep up; \
                 send stderr to a file, or log less with RUST_LOG"
            );
            let _ = written.send(());
        });
        let _ = wait.recv_timeout(std::time::Duration::from_secs(1));
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Replay { file } => return replay(file).map(|()| ExitCode::SUCCESS),
        Command::New { name, lang } => return new_tool(name, (*lang).into()),
        Command::Componentize {
            module,
            output,
            wit,
        } => {
            let bytes =
                std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
            let component = componentize::componentize(&bytes, wit.as_deref())
                .with_context(|| module.display().to_string())?;
            std::fs::write(output, component)
                .with_context(|| format!("writing {}", output.display()))?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let mut options = SandboxOptions::default();
    if cli.no_cache {
        options.cache_dir = None;
    }
    // `call --component` needs no manifest: one made of its flags stands in.
    let from_flags = match &cli.command {
        Command::Call { component, .. } => component.config()?,
        _ => None,
    };
    let manifest = match from_flags {
        Some(config) => Manifest::of_components(vec![config]),
        None => Manifest::load(&cli.config)?,
    };
    if let Command::Serve {
        stdio,
        listen,
        token_env,
        allow_origins,
        watch,
        yes,
        max_body,
        max_batch,
        drain,
    } = cli.command
    {
        let transport = match (stdio, listen) {
            (true, _) => serve::Transport::Stdio,
            (false, Some(addr)) => serve::Transport::Http(addr),
            (false, None) => unreachable!("clap requires --stdio or --listen"),
        };
        let token = match token_env {
            Some(name) => match std::env::var(&name) {
                Ok(token) if !token.trim().is_empty() => Some(token),
                _ => {
                    eprintln!(
                        "error: --token-env {name}: the environment variable {name} is not set or empty; set it to the bearer token clients must send"
                    );
                    return Ok(ExitCode::from(2));
                }
            },
            None => None,
        };
        let config = serve::ServeConfig {
            transport,
            token,
            allow_origins,
            watch,
            approve_all: yes,
            max_body,
            max_batch,
            drain,
        };
        // Scripts wait for this line on stderr to know the server is up, and
        // read the address from it when the port was 0.
        let ready = |addr: Option<std::net::SocketAddr>| match addr {
            Some(addr) => eprintln!("toolhost: serving on http://{addr} (MCP at /mcp)"),
            None => eprintln!("toolhost: serving MCP on stdio"),
        };
        return Ok(match serve::run(manifest, options, config, ready).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e @ serve::ServeError::Usage(_)) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        });
    }
    let host = ToolHost::load_components(manifest.components.clone(), options).await?;
    match cli.command {
        Command::Serve { .. } => unreachable!("served above"),
        Command::Replay { .. } | Command::New { .. } | Command::Componentize { .. } => {
            unreachable!("done above")
        }
        Command::Tools { format } => {
            let definitions: Vec<_> = host
                .specs()
                .map(|s| definitions::tool_definition(s, format.into()))
                .collect();
            print_json(&definitions)?;
        }
        Command::Call {
            name,
            args,
            batch,
            yes,
            format,
            context,
            component,
        } => {
            let format = results::Format::from(format);
            let approver: Arc<dyn Approver> = if yes {
                Arc::new(ApproveAll)
            } else {
                Arc::new(RefuseAll)
            };
            let mut env = CallEnv::default().approver(approver);
            if std::io::stdin().is_terminal() && batch.as_deref() != Some("-") {
                env = env.asker(Arc::new(TerminalAsker(&TERMINAL)));
            }
            if let Some(context) = context {
                env = env.context(context);
            }
            match (name, batch) {
                (Some(name), None) => {
                    let call = ToolCall::with_raw_arguments("call_1", name, args);
                    let outcome = host.call_in(call, &env).await;
                    print_json(&results::render(&outcome, host.spec(&outcome.tool), format))?;
                    if component.verbose {
                        let stats = &outcome.stats;
                        eprintln!(
                            "{}: {} in {:.3} ms, fuel {}",
                            outcome.tool,
                            match &outcome.result {
                                Ok(_) => "success".to_owned(),
                                Err(error) => error.kind.to_string(),
                            },
                            stats.duration.as_secs_f64() * 1e3,
                            stats.fuel_used
                        );
                    }
                }
                (None, Some(source)) => {
                    // The whole batch is checked before any call runs;
                    // then the calls are read as the window takes them, and
                    // each answer is written as soon as it and those before
                    // it are in: a batch of any length holds only the calls
                    // in flight (and a hash per id).
                    let (name, batch) = if source == "-" {
                        if std::io::stdin().is_terminal() {
                            eprintln!(
                                "reading a JSON array of tool calls from stdin (end with Ctrl-D)"
                            );
                        }
                        (
                            "stdin",
                            toolhost::wire::BatchFile::open(std::io::stdin().lock()),
                        )
                    } else {
                        // A file as itself, so that copying it can stay in
                        // the kernel (copy_file_range).
                        let file = std::fs::File::open(&source)
                            .with_context(|| format!("reading {source}"))?;
                        (source.as_str(), toolhost::wire::BatchFile::open(file))
                    };
                    let batch = batch.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
                    let window = host.batch_window();
                    let (calls, reading) = batch.calls(window);
                    let outcomes = host.call_stream(calls, env, window);
                    let answers = results::answer_stream(outcomes, |name| host.spec(name), format);
                    print_json_array(answers).await?;
                    reading.finished().await.map_err(|e| {
                        anyhow::anyhow!(
                            "{e}; the answers written are those of the calls before that point"
                        )
                    })?;
                }
                _ => unreachable!("clap requires exactly one of NAME and --batch"),
            }
        }
        Command::Check { strict } => {
            print_check(&manifest, &host);
            let warnings = lint::lint(host.specs());
            for warning in &warnings {
                eprintln!("warning: {warning}");
            }
            if strict && !warnings.is_empty() {
                eprintln!(
                    "error: {} warnings, and --strict makes them errors",
                    warnings.len()
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Run {
            prompt,
            base_url,
            model,
            provider,
            json,
            transcript,
            yes,
            system,
            context,
            controls,
        } => {
            let mut config = match (manifest.model.clone(), &base_url, &model) {
                (Some(config), _, _) => config,
                (None, Some(base_url), Some(model)) => ModelConfig::openai(base_url, model),
                (None, _, _) => anyhow::bail!(
                    "{} has no [model] table; add one (see example-tools/toolhost.toml) or pass --base-url and --model",
                    manifest.path.display()
                ),
            };
            if let Some(base_url) = base_url {
                config.base_url = base_url;
            }
            if let Some(model) = model {
                config.model = model;
            }
            if let Some(provider) = provider {
                config.provider = provider;
            }
            controls.apply(&mut config)?;
            let client = model::client_for(&config).map_err(anyhow::Error::msg)?;
            let interactive = std::io::stdin().is_terminal();
            let approver: Arc<dyn Approver> = if yes {
                Arc::new(ApproveAll)
            } else if interactive {
                Arc::new(TerminalApprover(&TERMINAL))
            } else {
                Arc::new(RefuseAll)
            };
            let mut agent = Agent::new(
                Arc::from(client),
                host,
                approver,
                AgentPolicy::from_config(&config),
            );
            if interactive {
                agent = agent.with_asker(Arc::new(TerminalAsker(&TERMINAL)));
            }
            if let Some(context) = context {
                agent = agent.with_context(context);
            }
            let mut sink = TranscriptSink::new(json, transcript.as_deref())?;
            let mut messages: Vec<Message> = system
                .or_else(|| config.system.clone())
                .into_iter()
                .map(Message::system)
                .collect();
            return match prompt {
                Some(prompt) => {
                    messages.push(Message::user(prompt));
                    let end = run_task(&agent, messages, &mut sink).await?.0;
                    Ok(match end {
                        RunEnd::Answered
                        | RunEnd::StepBudget
                        | RunEnd::TokenBudget { .. }
                        | RunEnd::CostBudget { .. } => ExitCode::SUCCESS,
                        RunEnd::InvalidAnswer { .. } | RunEnd::ModelFailed { .. } => {
                            ExitCode::FAILURE
                        }
                        RunEnd::Misconfigured { .. } => ExitCode::from(2),
                    })
                }
                None => chat(&agent, messages, &mut sink)
                    .await
                    .map(|()| ExitCode::SUCCESS),
            };
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where events go: the human display, or JSON lines; and optionally a file.
struct TranscriptSink {
    json: bool,
    file: Option<std::io::BufWriter<std::fs::File>>,
    display: Display,
}

impl TranscriptSink {
    fn new(json: bool, path: Option<&std::path::Path>) -> anyhow::Result<Self> {
        let file = path
            .map(|p| {
                std::fs::File::create(p)
                    .with_context(|| format!("creating the transcript {}", p.display()))
            })
            .transpose()?
            .map(std::io::BufWriter::new);
        Ok(Self {
            json,
            file,
            display: Display::default(),
        })
    }

    fn event(&mut self, event: &AgentEvent) -> anyhow::Result<()> {
        use std::io::Write as _;
        let is_delta = matches!(event, AgentEvent::TextDelta { .. });
        if !is_delta {
            let line = serde_json::to_string(event)?;
            if self.json {
                println!("{line}");
            }
            if let Some(file) = &mut self.file {
                writeln!(file, "{line}")?;
                file.flush()?;
            }
        }
        if !self.json {
            self.display.show(&serde_json::to_value(event)?);
        }
        Ok(())
    }
}

/// Print a saved transcript as `run` displayed it.
fn replay(file: &str) -> anyhow::Result<()> {
    use std::io::BufRead as _;
    let reader: Box<dyn std::io::BufRead> = if file == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::io::BufReader::new(
            std::fs::File::open(file).with_context(|| format!("opening the transcript {file}"))?,
        ))
    };
    let mut display = Display::default();
    for (i, line) in reader.lines().enumerate() {
        let line = line.with_context(|| format!("reading {file}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let event: serde_json::Value = serde_json::from_str(&line)
            .ok()
            .filter(|event: &serde_json::Value| event["type"].is_string())
            .ok_or_else(|| {
                UsageError(format!(
                    "{file}:{}: not a transcript event; give a file written by `toolhost run --transcript FILE` or `--json`",
                    i + 1
                ))
            })?;
        display.show(&event);
    }
    Ok(())
}

/// The human view of a run, as it happens or replayed. It reads events as
/// their JSON, so a saved transcript shows exactly as the run did.
#[derive(Default)]
struct Display {
    /// The model's text shown since its last tool call: streamed in, or
    /// (not streaming, or replaying a transcript, which keeps no deltas)
    /// from its message.
    shown: String,
}

impl Display {
    fn show(&mut self, event: &serde_json::Value) {
        use std::io::Write as _;
        let text = |key: &str| event[key].as_str().unwrap_or_default();
        let number = |key: &str| event[key].as_f64().unwrap_or_default();
        match text("type") {
            "text_delta" => self.print_text(text("text")),
            "message" if event["message"]["role"] == "assistant" && self.shown.is_empty() => {
                self.print_text(event["message"]["content"].as_str().unwrap_or_default());
            }
            // A new turn (the loop sent an answer back to be fixed): what
            // comes next is new text.
            "message" if event["message"]["role"] == "user" => self.shown.clear(),
            "tool_call_started" => {
                self.shown.clear();
                let arguments = text("arguments");
                let arguments = serde_json::from_str::<serde_json::Value>(arguments)
                    .map_or_else(|_| arguments.to_owned(), |v| printable::json(&v));
                println!(
                    "\n→ {} {}",
                    one_line(text("name"), 64),
                    one_line(&arguments, 300)
                );
            }
            "tool_result" => {
                let message = &event["message"];
                let name = one_line(message["name"].as_str().unwrap_or_default(), 64);
                let duration_ms = number("duration_ms");
                // Text, or LangChain blocks: text first, then what else the
                // model got (images, files), a line each.
                let (first_line, others) = match &message["content"] {
                    serde_json::Value::Array(blocks) => {
                        let text: String = blocks
                            .iter()
                            .filter_map(|b| b["text"].as_str().filter(|_| b["type"] == "text"))
                            .collect();
                        let others: Vec<String> = blocks
                            .iter()
                            .filter(|b| b["type"] != "text")
                            .map(describe_block)
                            .collect();
                        (text, others)
                    }
                    content => (content.as_str().unwrap_or_default().to_owned(), Vec::new()),
                };
                let first_line = one_line(first_line.lines().next().unwrap_or_default(), 300);
                match message["error"]["type"].as_str() {
                    None => {
                        let cached = if event["cached"] == true {
                            " (cached)"
                        } else {
                            ""
                        };
                        println!("← {name} ✓{cached} {duration_ms:.1} ms: {first_line}");
                    }
                    Some(kind) => {
                        println!(
                            "← {name} ✗ {} {duration_ms:.1} ms: {first_line}",
                            one_line(kind, 32)
                        );
                    }
                }
                for other in others {
                    println!("  {}", one_line(&other, 200));
                }
            }
            "tool_progress" => {
                let amount = match event["total"].as_f64() {
                    Some(total) => format!("{}/{total}", number("done")),
                    None => format!("{}", number("done")),
                };
                let message = event["message"]
                    .as_str()
                    .map_or_else(String::new, |m| format!(" {}", one_line(m, 200)));
                println!("  … {} {amount}{message}", one_line(text("name"), 64));
            }
            "model_retry" => eprintln!(
                "(model call failed: {}; retry {} in {:.1} s)",
                one_line(text("error"), 500),
                number("attempt"),
                number("delay_ms") / 1e3
            ),
            "finished" => {
                if event["answer"].is_object() && text("final_text").trim() != self.shown.trim() {
                    // Given through the answer tool: not shown as text yet.
                    println!("\n{}", printable::text(text("final_text")));
                }
                // The next task of a chat shows its own text.
                self.shown.clear();
                println!();
                match event["end"]["kind"].as_str() {
                    Some("answered") => {}
                    Some("invalid_answer") => eprintln!(
                        "The answer does not match the response schema: {}",
                        printable::text(event["end"]["error"].as_str().unwrap_or_default())
                    ),
                    _ => eprintln!("{}", printable::text(text("final_text"))),
                }
                let usage = &event["usage"];
                let cost = event["cost_usd"]
                    .as_f64()
                    .map_or_else(String::new, |cost| format!(", about ${cost:.4}"));
                eprintln!(
                    "({} model call{}, {} tokens in, {} out{cost}, {:.1} s)",
                    number("steps"),
                    if number("steps") == 1.0 { "" } else { "s" },
                    usage["input_tokens"].as_u64().unwrap_or(0),
                    usage["output_tokens"].as_u64().unwrap_or(0),
                    number("duration_ms") / 1e3
                );
            }
            // The asker prints the question itself, beside its prompt.
            _ => {}
        }
        let _ = std::io::stdout().flush();
    }

    fn print_text(&mut self, text: &str) {
        print!("{}", printable::text(text));
        self.shown.push_str(text);
    }
}

/// A line for a content block other than text: its kind and what it is.
fn describe_block(block: &serde_json::Value) -> String {
    let field = |key: &str| block[key].as_str().unwrap_or_default();
    let what = [field("mime_type"), field("url"), field("name")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    format!("[{} {what}]", field("type"))
}

/// Run one task, showing events as they come; returns how it ended and the
/// conversation.
async fn run_task(
    agent: &Agent,
    messages: Vec<Message>,
    sink: &mut TranscriptSink,
) -> anyhow::Result<(RunEnd, Vec<Message>)> {
    let (mut events, task) = agent.run_stream(messages);
    // Events queue (unboundedly, within each call's budgets) while a prompt
    // holds the terminal: a call that reports never waits for the display.
    while let Some(event) = events.recv().await {
        let _turn = TERMINAL.turn().await;
        sink.event(&event)?;
    }
    let transcript = task.await.context("the agent task failed")?;
    Ok((transcript.end, transcript.messages))
}

/// An interactive chat: each line is a turn; the conversation carries over.
async fn chat(
    agent: &Agent,
    mut messages: Vec<Message>,
    sink: &mut TranscriptSink,
) -> anyhow::Result<()> {
    eprintln!("toolhost chat: type a message; /exit or Ctrl-D ends");
    loop {
        let Some(line) = TERMINAL.turn().await.next_line("\nyou> ").await else {
            return Ok(());
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if line == "/exit" {
            return Ok(());
        }
        messages.push(Message::user(line));
        messages = run_task(agent, messages, sink).await?.1;
    }
}

/// `toolhost new`: write the folder and say what to do next.
fn new_tool(dir: &std::path::Path, lang: scaffold::Language) -> anyhow::Result<ExitCode> {
    let made = match scaffold::create(dir, lang) {
        Ok(made) => made,
        Err(
            e @ (scaffold::ScaffoldError::BadName(_)
            | scaffold::ScaffoldError::Reserved(_)
            | scaffold::ScaffoldError::Exists(_)),
        ) => {
            return Err(UsageError(e.to_string()).into());
        }
        Err(e) => return Err(e.into()),
    };
    let dir = made.dir.display();
    println!(
        "created {dir}/ ({lang}, {} files): the tool {}",
        made.files, made.tool
    );
    println!("next:");
    println!("  {dir}/build.sh");
    println!(
        "  toolhost call --config {dir}/toolhost.toml {} '{{\"name\":\"Ada\"}}'",
        made.tool
    );
    println!("then read {dir}/README.md: arguments, errors, config, HTTP, stores");
    Ok(ExitCode::SUCCESS)
}

/// A `--context` value: a JSON object.
fn parse_context(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        _ => Err(r#"expected a JSON object, e.g. '{"user":"ada"}'"#.to_owned()),
    }
}

/// Per component: its tools, and exactly what they may touch.
fn print_check(manifest: &Manifest, host: &ToolHost) {
    println!("{}: ok", manifest.path.display());
    let versions: std::collections::HashMap<_, _> = host
        .contract_versions()
        .map(|(config, version)| (config.path.clone(), version))
        .collect();
    for (config, tools, cache) in host.components() {
        println!("\n{} (compiled code: {cache:?})", config.path.display());
        if let Some(version) = versions.get(&config.path) {
            println!("  contract: toolhost:tool@{version}");
        }
        println!("  tools: {}", tools.join(", "));
        let cached: Vec<String> = tools
            .iter()
            .filter_map(|tool| {
                host.cache_ttl(tool)
                    .map(|ttl| format!("{tool} ({})", humantime::format_duration(ttl)))
            })
            .collect();
        if !cached.is_empty() {
            println!("  cached results: {}", cached.join(", "));
        }
        for line in toolhost::describe::component_lines(config) {
            println!("  {line}");
        }
    }
}
