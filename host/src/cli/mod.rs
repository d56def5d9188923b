//! The `toolhost` binary's own parts (not the library's): its arguments,
//! one module per command, what it writes on stdout, the human display of a
//! run, the terminal and its prompts, and the stderr log format.
//!
//! [`run`] is the whole command line: it reads what a command needs (the
//! manifest, the loaded tools) and hands it to the command's module.

pub(crate) mod args;
mod call;
mod check;
mod display;
mod fixes;
pub(crate) mod log;
mod new;
mod output;
pub(crate) mod prompts;
mod registry;
mod replay;
mod run;
mod serve;
pub(crate) mod terminal;

use std::path::Path;
use std::process::ExitCode;

use toolhost::{LockMode, Manifest, SandboxOptions, ToolHost};

use args::{Cli, Command};

/// Run the command `cli` names; its exit status.
///
/// # Errors
///
/// What stops the command: a manifest or load error, a failed endpoint, a
/// usage error ([`args::UsageError`], exit status 2).
pub(crate) async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Replay { file } => replay::replay(&file).map(|()| ExitCode::SUCCESS),
        Command::New { name, lang } => new::new_tool(&name, lang.into()),
        Command::Componentize {
            module,
            output,
            wit,
        } => new::componentize(&module, &output, wit.as_deref()),
        Command::Push {
            component,
            reference,
            annotations,
            description,
            source,
        } => {
            let args = registry::PushArgs {
                component,
                reference,
                annotations,
                description,
                source,
            };
            registry::push(
                args,
                registry::config(&cli.config)?.registry,
                options(cli.no_cache),
            )
            .await
        }
        Command::Pull {
            reference,
            output,
            key,
        } => {
            let config = registry::config(&cli.config)?;
            let pull = registry::PullArgs {
                reference,
                output,
                key,
            };
            registry::pull(pull, config, options(cli.no_cache)).await
        }
        Command::Sign {
            reference,
            key,
            bundle,
        } => {
            let settings = registry::config(&cli.config)?.registry;
            let kind = if bundle {
                registry::SignatureKind::Bundle
            } else {
                registry::SignatureKind::Cosign
            };
            registry::sign(&reference, &key, kind, settings, options(cli.no_cache)).await
        }
        Command::Inspect { reference, json } => {
            let settings = registry::config(&cli.config)?.registry;
            registry::inspect(&reference, json, settings, options(cli.no_cache)).await
        }
        Command::Lock { update } => {
            let manifest = manifest(&Command::Lock { update: None }, &cli.config)?;
            registry::lock(&manifest, update, cli.locked, options(cli.no_cache)).await
        }
        command => {
            let mode = if cli.locked {
                LockMode::Locked
            } else {
                LockMode::Write
            };
            run_with_manifest(command, &cli.config, cli.no_cache, mode).await
        }
    }
}

/// The sandbox's options: the default cache, or none with `--no-cache`;
/// a line on stderr each time a component compiles.
fn options(no_cache: bool) -> SandboxOptions {
    with_cache_flag(SandboxOptions::default(), no_cache)
}

/// The sandbox's options for `manifest`: its cache beside it when the
/// environment names none (see [`toolhost::dir_for_manifest`]), beside
/// the component for `call --component`.
fn manifest_options(manifest: &Manifest, no_cache: bool) -> SandboxOptions {
    if no_cache {
        return options(true);
    }
    let anchor = match manifest.lock_path() {
        Some(_) => Some(manifest.path.as_path()),
        None => manifest.components.first().and_then(|c| c.path()),
    };
    let options = anchor.map_or_else(SandboxOptions::default, SandboxOptions::for_manifest);
    with_cache_flag(options, false)
}

/// `options` without a cache under `--no-cache`, and saying on stderr
/// (never stdout, which carries results) when a component compiles.
fn with_cache_flag(options: SandboxOptions, no_cache: bool) -> SandboxOptions {
    let options = options.with_compile_hook(std::sync::Arc::new(say_compiling));
    if no_cache {
        options.with_cache_dir(None)
    } else {
        options
    }
}

/// One line on stderr while a component compiles: it takes seconds, tens
/// of them for a Python or JavaScript component, and nothing else is
/// printed meanwhile.
fn say_compiling(compiling: &toolhost::Compiling) {
    let why = match compiling.cause {
        toolhost::CacheStatus::Rebuilt => "its cached code is stale",
        toolhost::CacheStatus::Disabled => "no compile cache",
        _ => "first run",
    };
    let seconds = compiling.estimate.as_secs_f64().round().max(1.0);
    eprintln!(
        "toolhost: compiling {} ({why}, about {seconds} s)…",
        compiling.component
    );
}

/// The commands that read a manifest: `serve` takes it as it is, the others
/// load its components first.
async fn run_with_manifest(
    command: Command,
    path: &Path,
    no_cache: bool,
    mode: LockMode,
) -> anyhow::Result<ExitCode> {
    let manifest = manifest(&command, path)?;
    let options = manifest_options(&manifest, no_cache);
    if let Command::Serve { .. } = command {
        let mut config = serve_command(command);
        config.config.lock_mode = mode;
        return Ok(serve::serve(manifest, options, config).await);
    }
    let (host, _) = ToolHost::load_manifest(&manifest, options, &mode).await?;
    match command {
        Command::Tools { format } => call::tools(&host, format.into()),
        Command::Call(flags) => call::call(&host, flags).await,
        Command::Check { strict } => Ok(check::check(&manifest, &host, strict)),
        Command::Run(flags) => run::run(&manifest, host, flags).await,
        Command::Serve { .. }
        | Command::Replay { .. }
        | Command::New { .. }
        | Command::Push { .. }
        | Command::Pull { .. }
        | Command::Sign { .. }
        | Command::Inspect { .. }
        | Command::Lock { .. }
        | Command::Componentize { .. } => unreachable!("done above"),
    }
}

/// The manifest at `path`; for `call --component`, which needs none, one
/// made of its flags stands in, with the `[registry]` table of the manifest
/// at `path` (when there is one) and the policy loading it would apply to
/// the reference (a `[[tool]]` entry's own `verify`, else `[verify]`)
/// unless `--key` gives another.
fn manifest(command: &Command, path: &Path) -> anyhow::Result<Manifest> {
    let from_flags = match command {
        Command::Call(flags) => flags
            .component
            .config()?
            .map(|config| (config, flags.component.key.is_some())),
        _ => None,
    };
    Ok(match from_flags {
        Some((mut config, keyed)) => {
            let section = registry::config(path)?;
            if !keyed && let toolhost::ComponentSource::Registry(reference) = &config.source {
                config.verify = section.policy_for(reference)?.clone();
            }
            let mut manifest = Manifest::of_components(vec![config]);
            manifest.registry = section.registry;
            manifest
        }
        // The library names no flag: the fix for a missing file is ours to say.
        None => Manifest::load(path).map_err(|e| match path.exists() {
            true => anyhow::Error::from(e),
            false => anyhow::anyhow!(
                "{e}; pass --config or create {}",
                toolhost::DEFAULT_MANIFEST
            ),
        })?,
    })
}

/// `serve`'s flags as the library's serving configuration.
/// `TOOLHOST_HTTP_THREADS`, when it is a number: how many threads serve
/// HTTP connections. Anything else is warned about and left to the default.
fn http_threads_from_env() -> Option<usize> {
    let value = std::env::var("TOOLHOST_HTTP_THREADS").ok()?;
    match value.trim().parse() {
        Ok(threads) => Some(threads),
        Err(_) => {
            tracing::warn!(
                value = %value,
                "TOOLHOST_HTTP_THREADS is not a number of threads; using one per core (unset it, or set a number such as 0 or 2)"
            );
            None
        }
    }
}

fn serve_command(command: Command) -> serve::ServeCommand {
    let Command::Serve {
        stdio,
        listen,
        token_env,
        jwks,
        issuers,
        audience,
        context_claims,
        allow_origins,
        watch,
        yes,
        max_body,
        max_batch,
        drain,
        proxy_protocol,
    } = command
    else {
        unreachable!("called for serve only")
    };
    let transport = match (stdio, listen) {
        (true, _) => toolhost::serve::Transport::Stdio,
        (false, Some(addr)) => toolhost::serve::Transport::Http(addr),
        (false, None) => unreachable!("clap requires --stdio or --listen"),
    };
    let mut config = toolhost::serve::ServeConfig::new(transport);
    config.allow_origins = allow_origins;
    config.watch = watch;
    config.approve_all = yes;
    config.max_body = max_body;
    config.max_batch = max_batch;
    config.drain = drain;
    config.proxy_protocol = proxy_protocol;
    // A switch for comparing the MCP fast path with rmcp's own path.
    config.mcp_fast_path = std::env::var_os("TOOLHOST_MCP_FAST_PATH").is_none_or(|v| v != "0");
    // A switch for comparing connections served on threads of their own
    // (the default) with connections as tasks of the runtime (0).
    config.http_threads = http_threads_from_env();
    config.fixes = fixes::flags();
    serve::ServeCommand {
        transport,
        token_env,
        auth: serve::AuthFlags {
            jwks,
            issuers,
            audience,
            context_claims,
        },
        config,
    }
}
