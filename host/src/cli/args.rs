//! The command line: every command and flag, parsed by clap, and the
//! small conversions from flags to the library's types.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use toolhost::DEFAULT_MANIFEST;
use toolhost::FileMode;
use toolhost::authoring::scaffold;
use toolhost::model::config::{BaseUrl, ControlOverrides, Provider, ResponseFormat, ToolChoice};
use toolhost::wire::definitions::Format;
use toolhost::wire::results;

use super::log::LogFormat;

/// Run LLM tool calls in fresh, capability-scoped WebAssembly sandboxes.
#[derive(Parser)]
#[command(version, about)]
pub(crate) struct Cli {
    /// The manifest.
    #[arg(long, short, global = true, default_value = DEFAULT_MANIFEST, env = "TOOLHOST_CONFIG")]
    pub(crate) config: PathBuf,
    /// Log format on stderr. Levels come from RUST_LOG (default: warn).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Compile every component instead of using the on-disk cache.
    #[arg(long, global = true)]
    pub(crate) no_cache: bool,
    /// Refuse to run if toolhost.lock would change (a registry component
    /// not pinned yet, or an entry the manifest no longer names): for CI
    /// and production, where what runs is what was reviewed.
    #[arg(long, global = true)]
    pub(crate) locked: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Print the tool definitions as the model sees them.
    Tools {
        /// Wire format.
        #[arg(long, value_enum, default_value_t = FormatArg::Openai)]
        format: FormatArg,
    },
    /// Run one tool call, or a batch, and print the ToolMessages.
    Call(CallArgs),
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
        /// Accept OAuth access tokens (JWTs) signed by a key of this JWK Set: a
        /// file, or an https URL (fetched, cached, refreshed on an unknown key id).
        /// With --issuer and --audience; the same keys as [serve.auth] in the manifest.
        #[arg(long, value_name = "FILE|URL")]
        jwks: Option<String>,
        /// An accepted token issuer (`iss`); repeatable.
        #[arg(long = "issuer", value_name = "ISS")]
        issuers: Vec<String>,
        /// This server's resource URL, the `aud` tokens must carry (RFC 8707).
        #[arg(long, value_name = "URL")]
        audience: Option<String>,
        /// Fill context key KEY from the principal's claim CLAIM (e.g. user=sub),
        /// so that stores scoped by KEY are each caller's own; repeatable.
        #[arg(long = "context-claim", value_name = "KEY=CLAIM")]
        context_claims: Vec<String>,
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
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = toolhost::duration::parse)]
        drain: std::time::Duration,
        /// Connections from CIDR (a load balancer, e.g. 10.0.0.0/8 or
        /// 127.0.0.1/32; repeatable) start with a PROXY protocol header
        /// (HAProxy's send-proxy-v2) naming the client, whose address then
        /// counts for the per-address limits. Such connections must send one.
        #[arg(long = "proxy-protocol", value_name = "CIDR")]
        proxy_protocol: Vec<ipnet::IpNet>,
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
    Run(RunArgs),
    /// Publish a component to an OCI registry in the CNCF Wasm layout (what
    /// `wkg oci pull` reads), its tools' names, descriptions and schemas
    /// and its imports in annotations. Prints the pushed reference with its digest.
    Push {
        /// The component.
        component: PathBuf,
        /// Where: oci://REGISTRY/REPOSITORY:TAG.
        reference: String,
        /// An extra manifest annotation (repeatable).
        #[arg(long = "annotation", value_name = "KEY=VALUE")]
        annotations: Vec<String>,
        /// The description registry browsers show (default: the tool's own, for a one-tool component).
        #[arg(long)]
        description: Option<String>,
        /// Where the source is (org.opencontainers.image.source), e.g. a repository URL.
        #[arg(long, value_name = "URL")]
        source: Option<String>,
    },
    /// Pull a registry component by digest into the cache, every blob
    /// checked against its digest; print its digests.
    Pull {
        /// oci://REGISTRY/REPOSITORY:TAG or …@sha256:….
        reference: String,
        /// Also copy the component to FILE.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Refuse it unless a signature by this public key (PEM) vouches for it: a cosign
        /// .sig signature or a Sigstore bundle signed by the key.
        #[arg(long, value_name = "KEY.pub")]
        key: Option<PathBuf>,
    },
    /// Sign a registry component by digest with a private key (PKCS#8 PEM,
    /// e.g. from `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`),
    /// adding a cosign signature (the sha256-<digest>.sig tag) that
    /// `cosign verify --key` and toolhost's verify policies read.
    Sign {
        /// oci://REGISTRY/REPOSITORY@sha256:… (a digest: a tag can move after you looked).
        reference: String,
        /// The private key.
        #[arg(long, value_name = "KEY.pem")]
        key: PathBuf,
        /// Sign with a Sigstore bundle attached as an OCI referrer (what
        /// cosign 3's `sign --key` writes) instead of a .sig signature.
        #[arg(long)]
        bundle: bool,
    },
    /// Show what a registry component is and asks for (tools, schemas,
    /// imports, digests) from its manifest, without downloading or running it.
    Inspect {
        /// oci://REGISTRY/REPOSITORY:TAG or …@sha256:….
        reference: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pin the manifest's registry components in toolhost.lock (beside the
    /// manifest; commit it). Pins already there are kept.
    Lock {
        /// Resolve the tags again and move the pins: every reference, or
        /// only those given.
        #[arg(long, value_name = "REFERENCE", num_args = 0..)]
        update: Option<Vec<String>>,
    },
    /// Show a saved transcript (`run --transcript FILE` or `run --json`) as
    /// `run` displayed it. Needs no manifest.
    Replay {
        /// The transcript: JSON lines, or - for stdin.
        file: String,
    },
}

/// What `toolhost call` was asked to run, and how: its flags.
#[derive(clap::Args)]
pub(crate) struct CallArgs {
    /// Tool name (omit with --batch).
    #[arg(required_unless_present = "batch", conflicts_with = "batch")]
    pub(crate) name: Option<String>,
    /// Arguments as a JSON object.
    #[arg(default_value = "{}")]
    pub(crate) args: String,
    /// Tool calls from FILE, or - for stdin: a JSON array of OpenAI, LangChain,
    /// Anthropic tool_use or MCP calls, or a whole assistant message.
    #[arg(long, value_name = "FILE")]
    pub(crate) batch: Option<String>,
    /// Approve calls whose manifest entry requires approval.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Answer format: ToolMessages, OpenAI chat-completions messages (tool messages,
    /// then one user message with their images), Anthropic tool_result blocks, or
    /// MCP CallToolResults.
    #[arg(long, value_enum, default_value_t = ResultFormatArg::Toolmessage)]
    pub(crate) format: ResultFormatArg,
    /// Context for the tools as a JSON object (e.g. '{"user":"ada"}'): tools
    /// read it and scoped stores are kept by it.
    #[arg(long, value_name = "JSON", value_parser = parse_context)]
    pub(crate) context: Option<serde_json::Value>,
    #[command(flatten)]
    pub(crate) component: ComponentFlags,
}

/// What `toolhost run` was asked to do: its flags.
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The task. Omit for an interactive chat.
    pub(crate) prompt: Option<String>,
    /// Model endpoint base URL (overrides [model] base_url).
    #[arg(long)]
    pub(crate) base_url: Option<BaseUrl>,
    /// Model name (overrides [model] model).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Wire format (overrides [model] provider).
    #[arg(long, value_enum)]
    pub(crate) provider: Option<Provider>,
    /// Write the transcript as JSON lines on stdout instead of the display.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also save the transcript as JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) transcript: Option<PathBuf>,
    /// Approve calls that need approval without asking.
    #[arg(long)]
    pub(crate) yes: bool,
    /// A system prompt (replaces [model] system).
    #[arg(long)]
    pub(crate) system: Option<String>,
    /// Context for the tools as a JSON object (e.g. '{"user":"ada"}'): tools
    /// read it and scoped stores are kept by it; the model never sees it.
    #[arg(long, value_name = "JSON", value_parser = parse_context)]
    pub(crate) context: Option<serde_json::Value>,
    #[command(flatten)]
    pub(crate) controls: Box<LoopFlags>,
}

/// `call --component`: one component run without a manifest, granted only
/// what these flags say, under the default limits unless they say otherwise.
#[derive(clap::Args)]
pub(crate) struct ComponentFlags {
    /// Run this component without a manifest (the author's inner loop): a
    /// file, or a registry reference (oci://REGISTRY/REPOSITORY:TAG or @sha256:…).
    #[arg(long, value_name = "FILE.wasm|oci://…", conflicts_with = "batch")]
    pub(crate) component: Option<String>,
    /// Let it request ORIGIN (e.g. https://api.example.org, https://*.example.org:8443).
    #[arg(long, value_name = "ORIGIN", requires = "component")]
    pub(crate) allow_host: Vec<String>,
    /// Let it see host directory HOST as GUEST, read-only unless `:rw`.
    #[arg(long, value_name = "HOST:GUEST[:ro|rw]", requires = "component")]
    pub(crate) dir: Vec<String>,
    /// Set environment variable K inside it.
    #[arg(long, value_name = "K=V", requires = "component")]
    pub(crate) env: Vec<String>,
    /// Let it read config value K (the contract's `config(key)`).
    #[arg(long, value_name = "K=V", requires = "component")]
    pub(crate) config_value: Vec<String>,
    /// Wall-clock limit (default 5s).
    #[arg(long, value_name = "DURATION", requires = "component", value_parser = toolhost::duration::parse)]
    pub(crate) timeout: Option<std::time::Duration>,
    /// Fuel limit (default 2000000000).
    #[arg(long, value_name = "N", requires = "component")]
    pub(crate) fuel: Option<u64>,
    /// Memory limit, e.g. 256MiB (default 64MiB; Python and JavaScript tools need about 256MiB).
    #[arg(long, value_name = "SIZE", requires = "component")]
    pub(crate) memory: Option<bytesize::ByteSize>,
    /// Also print the tool's log lines, and its fuel and time, on stderr.
    #[arg(long, short, requires = "component")]
    pub(crate) verbose: bool,
    /// For a registry component: refuse it unless a signature by this
    /// public key (PEM) vouches for it (a cosign .sig signature or a Sigstore
    /// bundle signed by the key).
    #[arg(long, value_name = "KEY.pub", requires = "component")]
    pub(crate) key: Option<PathBuf>,
}

impl ComponentFlags {
    /// The component and what it is granted, or `None` without `--component`.
    pub(crate) fn config(&self) -> anyhow::Result<Option<toolhost::ComponentConfig>> {
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
        let mut config = if path.starts_with(toolhost::registry::SCHEME) {
            let reference = path
                .parse()
                .map_err(|e: toolhost::registry::ReferenceError| {
                    usage("--component", path, e.to_string())
                })?;
            toolhost::ComponentConfig::registry(reference)
        } else {
            if self.key.is_some() {
                return Err(usage(
                    "--key",
                    path,
                    "signatures are checked on registry components (oci://…); a file on this disk is trusted as it is".into(),
                ));
            }
            toolhost::ComponentConfig::new(path)
        };
        if let Some(key) = &self.key {
            let text = std::fs::read_to_string(key)
                .with_context(|| format!("reading {}", key.display()))?;
            let public = toolhost::registry::verify::PublicKey::from_pem(&text)
                .map_err(|e| usage("--key", &key.display().to_string(), e.to_string()))?;
            config = config.verify(toolhost::registry::verify::Policy::Key {
                path: key.clone(),
                key: public,
            });
        }
        config.grants = grants;
        let flag = |e: toolhost::LimitsError| {
            anyhow::anyhow!(UsageError(format!("--{}: {}", e.key, e.message)))
        };
        if let Some(timeout) = self.timeout {
            config.limits = config.limits.with_timeout(timeout).map_err(flag)?;
        }
        if let Some(fuel) = self.fuel {
            config.limits = config.limits.with_fuel(fuel).map_err(flag)?;
        }
        if let Some(memory) = self.memory {
            config.limits = config.limits.with_memory(memory.as_u64()).map_err(flag)?;
        }
        Ok(Some(config))
    }
}

/// `--dir HOST:GUEST[:ro|rw]`: the guest path is absolute, so it starts at
/// the last `:/`, and a host path may hold colons of its own.
pub(crate) fn parse_dir(text: &str) -> Result<(&str, &str, FileMode), String> {
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
pub(crate) enum LangArg {
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
#[derive(clap::Args, Default)]
#[command(next_help_heading = "Agent loop (override [model])")]
pub(crate) struct LoopFlags {
    /// Model calls before the run stops without an answer.
    #[arg(long, value_name = "N")]
    pub(crate) max_steps: Option<u32>,
    /// Tokens the model may generate per call.
    #[arg(long, value_name = "N")]
    pub(crate) max_tokens: Option<u32>,
    /// auto, required, none, or a tool's name.
    #[arg(long, value_name = "CHOICE")]
    pub(crate) tool_choice: Option<String>,
    /// How many first steps a forcing --tool-choice applies to.
    #[arg(long, value_name = "N")]
    pub(crate) tool_choice_steps: Option<u32>,
    /// Let the model call several tools per turn (true) or one (false).
    #[arg(long, value_name = "BOOL")]
    pub(crate) parallel_tool_calls: Option<bool>,
    /// The most tool calls run per turn; the rest are answered without running.
    #[arg(long, value_name = "N")]
    pub(crate) max_tool_calls_per_turn: Option<u32>,
    /// Sampling temperature (0 for the most deterministic answers).
    #[arg(long, value_name = "T")]
    pub(crate) temperature: Option<f64>,
    /// Nucleus sampling.
    #[arg(long, value_name = "P")]
    pub(crate) top_p: Option<f64>,
    /// A sampling seed (OpenAI-compatible chat completions only).
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<i64>,
    /// A stop sequence (repeatable).
    #[arg(long, value_name = "TEXT")]
    pub(crate) stop: Vec<String>,
    /// Tokens (input and output) the run may spend.
    #[arg(long, value_name = "N")]
    pub(crate) max_run_tokens: Option<u64>,
    /// Dollars the run may spend, by [model.prices].
    #[arg(long, value_name = "USD")]
    pub(crate) max_run_cost: Option<f64>,
    /// A JSON Schema file the final answer must satisfy.
    #[arg(long, value_name = "FILE")]
    pub(crate) response_schema: Option<PathBuf>,
    /// Code mode: offer the model the code tool (run_code, over the tools
    /// it may call) instead of those tools (sets [model] code_mode).
    #[arg(long)]
    pub(crate) code_mode: bool,
}

impl LoopFlags {
    /// The controls the flags given replace, for
    /// [`ModelConfig::apply`](toolhost::model::config::ModelConfig::apply).
    ///
    /// # Errors
    ///
    /// When the `--response-schema` file cannot be read or is not JSON.
    pub(crate) fn overrides(self) -> anyhow::Result<ControlOverrides> {
        // Destructured whole, so that a flag added here and not mapped
        // does not compile.
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
            code_mode,
        } = self;
        let response_format = match response_schema {
            Some(path) => Some(ResponseFormat::new(
                ResponseFormat::read_schema(&path).context("--response-schema")?,
            )),
            None => None,
        };
        Ok(ControlOverrides {
            max_steps,
            max_tokens,
            tool_choice: tool_choice.as_deref().map(ToolChoice::parse),
            tool_choice_steps,
            parallel_tool_calls,
            max_tool_calls_per_turn,
            temperature,
            top_p,
            seed,
            stop: (!stop.is_empty()).then_some(stop),
            max_run_tokens,
            max_run_cost,
            response_format,
            code_mode: code_mode.then_some(true),
            ..ControlOverrides::default()
        })
    }
}

/// A mistake in how toolhost was invoked: exit status 2.
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum FormatArg {
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
pub(crate) enum ResultFormatArg {
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

/// A `--context` value: a JSON object.
pub(crate) fn parse_context(text: &str) -> Result<serde_json::Value, String> {
    match serde_json::from_str(text) {
        Ok(value @ serde_json::Value::Object(_)) => Ok(value),
        _ => Err(r#"expected a JSON object, e.g. '{"user":"ada"}'"#.to_owned()),
    }
}
