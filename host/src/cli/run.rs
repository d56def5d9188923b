//! `toolhost run`: the agent loop against the model endpoint, one task or
//! a chat, shown as it happens and written as a transcript.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use toolhost::agent::{Agent, AgentEvent, AgentPolicy, RunEnd};
use toolhost::model::config::{ModelConfig, Overrides};
use toolhost::model::{self, Message};
use toolhost::{ApproveAll, Approver, Manifest, ToolHost};

use super::args::{RunArgs, UsageError};
use super::display::Display;
use super::fixes::{self, refuse_without_yes};
use super::output::out;
use super::prompts::{TerminalApprover, TerminalAsker};
use super::terminal::TERMINAL;

/// The model settings: `[model]`, or `--base-url` and `--model`, with the
/// flags over the manifest.
fn model_config(manifest: &Manifest, command: &mut RunArgs) -> anyhow::Result<ModelConfig> {
    let mut config = match (manifest.model.clone(), &command.base_url, &command.model) {
        (Some(config), _, _) => config,
        (None, Some(base_url), Some(model)) => ModelConfig::openai(base_url.clone(), model),
        (None, _, _) => anyhow::bail!(
            "{} has no [model] table; add one (see example-tools/toolhost.toml) or pass --base-url and --model",
            manifest.path.display()
        ),
    };
    let overrides = Overrides {
        base_url: command.base_url.take(),
        model: command.model.take(),
        provider: command.provider,
        system: command.system.take(),
        controls: std::mem::take(&mut command.controls).overrides()?,
    };
    config.apply(overrides).map_err(|error| {
        UsageError(format!(
            "{} ([model] or its flag): {}",
            error.key(),
            error.message()
        ))
    })?;
    Ok(config)
}

/// `toolhost run`: one task with a prompt, else a chat.
pub(crate) async fn run(
    manifest: &Manifest,
    host: ToolHost,
    mut command: RunArgs,
) -> anyhow::Result<ExitCode> {
    let config = model_config(manifest, &mut command)?;
    let client = model::client_for(&config)?;
    let interactive = std::io::stdin().is_terminal();
    let approver: Arc<dyn Approver> = if command.yes {
        Arc::new(ApproveAll)
    } else if interactive {
        Arc::new(TerminalApprover(&TERMINAL))
    } else {
        Arc::new(refuse_without_yes())
    };
    let mut agent = Agent::new(
        Arc::from(client),
        host,
        approver,
        AgentPolicy::from_config(&config),
    )
    .with_fixes(fixes::flags());
    if interactive {
        agent = agent.with_asker(Arc::new(TerminalAsker(&TERMINAL)));
    }
    if let Some(context) = command.context {
        agent = agent.with_context(context);
    }
    let mut sink = TranscriptSink::new(command.json, command.transcript.as_deref())?;
    let mut messages: Vec<Message> = config
        .system
        .clone()
        .into_iter()
        .map(Message::system)
        .collect();
    let Some(prompt) = command.prompt else {
        return chat(&agent, messages, &mut sink)
            .await
            .map(|()| ExitCode::SUCCESS);
    };
    messages.push(Message::user(prompt));
    let end = run_task(&agent, messages, &mut sink).await?.0;
    Ok(match end {
        RunEnd::Answered
        | RunEnd::StepBudget
        | RunEnd::TokenBudget { .. }
        | RunEnd::CostBudget { .. } => ExitCode::SUCCESS,
        RunEnd::InvalidAnswer { .. } | RunEnd::ModelFailed { .. } => ExitCode::FAILURE,
        RunEnd::Misconfigured { .. } => ExitCode::from(2),
        // An end this binary does not know yet is not a success.
        _ => ExitCode::FAILURE,
    })
}

/// Where events go: the human display, or JSON lines; and optionally a file.
pub(crate) struct TranscriptSink {
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
                out!("{line}");
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

/// Run one task, showing events as they come; returns how it ended and the
/// conversation.
pub(crate) async fn run_task(
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
pub(crate) async fn chat(
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
