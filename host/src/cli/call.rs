//! `toolhost tools` and `toolhost call`: the tool definitions, and calls run
//! one at a time or as a batch, answered on stdout.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use toolhost::wire::definitions::{self, Format};
use toolhost::wire::results;
use toolhost::{ApproveAll, Approver, CallOptions, ToolCall, ToolHost};

use super::args::CallArgs;
use super::fixes::refuse_without_yes;
use super::output::{print_json, print_json_array};
use super::prompts::TerminalAsker;
use super::terminal::TERMINAL;

/// `toolhost tools`: every tool's definition in `format`.
pub(crate) fn tools(host: &ToolHost, format: Format) -> anyhow::Result<ExitCode> {
    let definitions: Vec<_> = host
        .specs()
        .map(|s| definitions::tool_definition(s, format))
        .collect();
    print_json(&definitions)?;
    Ok(ExitCode::SUCCESS)
}

/// `toolhost call`: one call (`NAME ARGS`) or a batch (`--batch FILE|-`).
pub(crate) async fn call(host: &ToolHost, command: CallArgs) -> anyhow::Result<ExitCode> {
    let format = results::Format::from(command.format);
    let approver: Arc<dyn Approver> = if command.yes {
        Arc::new(ApproveAll)
    } else {
        Arc::new(refuse_without_yes())
    };
    let mut env = CallOptions::default().approver(approver);
    if std::io::stdin().is_terminal() && command.batch.as_deref() != Some("-") {
        env = env.asker(Arc::new(TerminalAsker(&TERMINAL)));
    }
    if let Some(context) = command.context {
        env = env.context(context);
    }
    match (command.name, command.batch) {
        (Some(name), None) => {
            one(
                host,
                &name,
                command.args,
                &env,
                format,
                command.component.verbose,
            )
            .await?
        }
        (None, Some(source)) => batch(host, &source, env, format).await?,
        _ => unreachable!("clap requires exactly one of NAME and --batch"),
    }
    Ok(ExitCode::SUCCESS)
}

/// One call, its answer on stdout; with `verbose`, its outcome, time and
/// fuel on stderr.
async fn one(
    host: &ToolHost,
    name: &str,
    args: String,
    env: &CallOptions,
    format: results::Format,
    verbose: bool,
) -> anyhow::Result<()> {
    let call = ToolCall::with_raw_arguments("call_1", name, args);
    let outcome = host.call(call).options(env).await;
    print_json(&results::render(&outcome, host.spec(&outcome.tool), format))?;
    if verbose {
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
    Ok(())
}

/// A batch from a file or stdin. The whole batch is checked before any
/// call runs; then the calls are read as the window takes them, and each
/// answer is written as soon as it and those before it are in: a batch of
/// any length holds only the calls in flight (and a hash per id).
async fn batch(
    host: &ToolHost,
    source: &str,
    env: CallOptions,
    format: results::Format,
) -> anyhow::Result<()> {
    let (name, batch) = if source == "-" {
        if std::io::stdin().is_terminal() {
            eprintln!("reading a JSON array of tool calls from stdin (end with Ctrl-D)");
        }
        (
            "stdin",
            toolhost::wire::BatchFile::open(std::io::stdin().lock()),
        )
    } else {
        // A file as itself, so that copying it can stay in the kernel
        // (copy_file_range).
        let file = std::fs::File::open(source).with_context(|| format!("reading {source}"))?;
        (source, toolhost::wire::BatchFile::open(file))
    };
    let batch = batch.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let window = host.batch_window();
    let (calls, reading) = batch.calls(window);
    let results = host.call_stream(calls).options(&env).run();
    let answers = results::answer_stream(results, format);
    print_json_array(answers).await?;
    reading.finished().await.map_err(|e| {
        anyhow::anyhow!("{e}; the answers written are those of the calls before that point")
    })
}
