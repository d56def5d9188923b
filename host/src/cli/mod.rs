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
pub(crate) mod log;
mod new;
mod output;
pub(crate) mod prompts;
mod replay;
mod run;
mod serve;
pub(crate) mod terminal;

use std::process::ExitCode;

use toolhost::{Manifest, SandboxOptions, ToolHost};

use args::{Cli, Command};

/// Run the command `cli` names; its exit status.
///
/// # Errors
///
/// What stops the command: a manifest or load error, a failed endpoint, a
/// usage error ([`args::UsageError`], exit status 2).
pub(crate) async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Replay { file } => return replay::replay(&file).map(|()| ExitCode::SUCCESS),
        Command::New { name, lang } => return new::new_tool(&name, lang.into()),
        Command::Componentize {
            module,
            output,
            wit,
        } => return new::componentize(&module, &output, wit.as_deref()),
        _ => {}
    }
    let mut options = SandboxOptions::default();
    if cli.no_cache {
        options = options.with_cache_dir(None);
    }
    // `call --component` needs no manifest: one made of its flags stands in.
    let from_flags = match &cli.command {
        Command::Call { component, .. } => component.config()?,
        _ => None,
    };
    let manifest = match from_flags {
        Some(config) => Manifest::of_components(vec![config]),
        // The library names no flag: the fix for a missing file is ours to say.
        None => Manifest::load(&cli.config).map_err(|e| match cli.config.exists() {
            true => anyhow::Error::from(e),
            false => anyhow::anyhow!(
                "{e}; pass --config or create {}",
                toolhost::DEFAULT_MANIFEST
            ),
        })?,
    };
    if let Command::Serve { .. } = cli.command {
        return Ok(serve::serve(manifest, options, serve_command(cli.command)).await);
    }
    let host = ToolHost::load_components(manifest.components.clone(), options).await?;
    match cli.command {
        Command::Tools { format } => call::tools(&host, format.into()),
        Command::Call {
            name,
            args,
            batch,
            yes,
            format,
            context,
            component,
        } => {
            let command = call::CallCommand {
                name,
                args,
                batch,
                yes,
                format,
                context,
                verbose: component.verbose,
            };
            call::call(&host, command).await
        }
        Command::Check { strict } => Ok(check::check(&manifest, &host, strict)),
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
            let command = run::RunCommand {
                prompt,
                base_url,
                model,
                provider,
                json,
                transcript,
                yes,
                system,
                context,
                controls: *controls,
            };
            run::run(&manifest, host, command).await
        }
        Command::Serve { .. }
        | Command::Replay { .. }
        | Command::New { .. }
        | Command::Componentize { .. } => unreachable!("done above"),
    }
}

/// `serve`'s flags as the library's serving configuration.
fn serve_command(command: Command) -> serve::ServeCommand {
    let Command::Serve {
        stdio,
        listen,
        token_env,
        allow_origins,
        watch,
        yes,
        max_body,
        max_batch,
        drain,
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
    serve::ServeCommand {
        transport,
        token_env,
        config,
    }
}
