//! The `toolhost` command: the only place that prints to the terminal or
//! decides the exit status.
//!
//! Exit status: 0 when every call produced a ToolMessage (even one with
//! `is_error`), 1 for a manifest or load error, 2 for a usage error.

use std::io::{IsTerminal as _, Read as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use toolhost::formats::{self, Format};
use toolhost::grants::FileMode;
use toolhost::manifest::{Approval, DEFAULT_FILE};
use toolhost::{ApproveAll, Approver, Manifest, RefuseAll, SandboxOptions, ToolCall, ToolHost};

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
        /// A JSON array of tool_calls (OpenAI or LangChain shape) from FILE, or - for stdin.
        #[arg(long, value_name = "FILE")]
        batch: Option<String>,
        /// Approve calls whose manifest entry requires approval.
        #[arg(long)]
        yes: bool,
    },
    /// Validate the manifest and components; print what each tool may touch.
    Check,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Openai,
    Anthropic,
    Mcp,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let manifest = Manifest::load(&cli.config)?;
    let mut options = SandboxOptions::default();
    if cli.no_cache {
        options.cache_dir = None;
    }
    let host = ToolHost::load_components(manifest.components.clone(), options).await?;
    match cli.command {
        Command::Tools { format } => {
            let format = match format {
                FormatArg::Openai => Format::OpenAI,
                FormatArg::Anthropic => Format::Anthropic,
                FormatArg::Mcp => Format::Mcp,
            };
            let definitions: Vec<_> = host
                .specs()
                .map(|s| formats::tool_definition(s, format))
                .collect();
            println!("{}", serde_json::to_string_pretty(&definitions)?);
        }
        Command::Call {
            name,
            args,
            batch,
            yes,
        } => {
            let approver: Arc<dyn Approver> = if yes {
                Arc::new(ApproveAll)
            } else {
                Arc::new(RefuseAll)
            };
            match (name, batch) {
                (Some(name), None) => {
                    let call = ToolCall::with_raw_arguments("call_1", name, args);
                    let outcome = host.call_with(call, &*approver).await;
                    println!("{}", serde_json::to_string_pretty(&outcome.to_message())?);
                }
                (None, Some(source)) => {
                    let calls = toolhost::tool_call::parse_batch(&read_batch(&source)?)
                        .map_err(anyhow::Error::msg)?;
                    let outcomes = host.call_batch_with(calls, approver).await;
                    let messages: Vec<_> = outcomes.iter().map(|o| o.to_message()).collect();
                    println!("{}", serde_json::to_string_pretty(&messages)?);
                }
                _ => unreachable!("clap requires exactly one of NAME and --batch"),
            }
        }
        Command::Check => print_check(&manifest, &host),
    }
    Ok(())
}

fn read_batch(source: &str) -> anyhow::Result<String> {
    if source == "-" {
        if std::io::stdin().is_terminal() {
            eprintln!("reading a JSON array of tool calls from stdin (end with Ctrl-D)");
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading stdin")?;
        Ok(text)
    } else {
        std::fs::read_to_string(source).with_context(|| format!("reading {source}"))
    }
}

/// Per component: its tools, and exactly what they may touch.
fn print_check(manifest: &Manifest, host: &ToolHost) {
    println!("{}: ok", manifest.path.display());
    for (config, tools, cache) in host.components() {
        println!("\n{} (compiled code: {cache:?})", config.path.display());
        println!("  tools: {}", tools.join(", "));
        let grants = &config.grants;
        if grants.is_none() {
            println!("  grants: none (computes only: no files, network, environment or config)");
        }
        for file in grants.files() {
            let access = match file.mode {
                FileMode::ReadOnly => "read",
                FileMode::ReadWrite => "read and write",
            };
            println!(
                "  files: may {access} {} as {}",
                file.host.display(),
                file.guest
            );
        }
        for pattern in grants.hosts().patterns() {
            println!("  http: may request {pattern}");
        }
        if grants.hosts().patterns().is_empty() {
            println!("  http: none");
        }
        for (name, _) in grants.env_vars() {
            println!("  env: sees {name}");
        }
        for (key, secret) in grants.config_keys() {
            println!(
                "  config: may read {key}{}",
                if secret {
                    " (secret, masked in output and logs)"
                } else {
                    ""
                }
            );
        }
        let limits = &config.limits;
        println!(
            "  limits: timeout {}, fuel {}, memory {}, output {}, concurrency {}",
            humantime::format_duration(limits.timeout),
            limits.fuel,
            bytesize::ByteSize::b(limits.memory).display().iec(),
            bytesize::ByteSize::b(limits.max_output as u64)
                .display()
                .iec(),
            limits.max_concurrency
        );
        let approval = match config.approval {
            Approval::Never => "never asked",
            Approval::Always => "asked before every call",
            Approval::Destructive => "asked before destructive tools",
        };
        println!("  approval: {approval}");
    }
}
