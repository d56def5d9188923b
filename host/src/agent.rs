//! The agent loop: ask the model, run all of a turn's tool calls in parallel
//! in fresh sandboxes, answer each one, and repeat until the model answers
//! without tools or the step budget ends.
//!
//! Policy:
//! - every tool_call id is answered before the next model call;
//! - arguments that are not JSON or fail the schema go back to the model as
//!   `invalid_arguments` (the model is re-asked; the tool is not retried);
//! - model-endpoint failures that can pass (429, 5xx, timeouts, broken
//!   connections, cut streams) are retried with exponential backoff and
//!   jitter, honouring `Retry-After`, then reported;
//! - whatever happens, [`Agent::run`] returns the transcript so far.
//!
//! # Examples
//!
//! ```no_run
//! use std::sync::Arc;
//! use toolhost::agent::{Agent, AgentPolicy};
//! use toolhost::model::{self, Message};
//! use toolhost::{Manifest, RefuseAll, ToolHost};
//!
//! # async fn run() -> anyhow::Result<()> {
//! let manifest = Manifest::load("toolhost.toml".as_ref())?;
//! let config = manifest.model.clone().expect("[model] is set");
//! let agent = Agent::new(
//!     Arc::from(model::client_for(&config).map_err(anyhow::Error::msg)?),
//!     ToolHost::load(&manifest).await?,
//!     Arc::new(RefuseAll),
//!     AgentPolicy::from_config(&config),
//! );
//! let transcript = agent.run(vec![Message::user("What is 6*7?")]).await;
//! println!("{}", transcript.final_text);
//! # Ok(()) }
//! ```
//!
//! Another provider plugs in through [`ModelClient`]:
//!
//! ```
//! use std::sync::Arc;
//! use futures::future::BoxFuture;
//! use toolhost::agent::{Agent, AgentPolicy, RunEnd};
//! use toolhost::model::{EventSink, Message, ModelClient, ModelError, ModelRequest, ModelResponse};
//! use toolhost::{RefuseAll, SandboxOptions, ToolHost};
//!
//! /// A "model" that always says hello.
//! struct Hello;
//!
//! impl ModelClient for Hello {
//!     fn complete<'a>(&'a self, _: ModelRequest<'a>, _: EventSink<'a>) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
//!         Box::pin(async { Ok(ModelResponse { content: "hello".into(), ..ModelResponse::default() }) })
//!     }
//!
//!     fn describe(&self) -> String {
//!         "hello".into()
//!     }
//! }
//!
//! # #[tokio::main] async fn main() {
//! let options = SandboxOptions { cache_dir: None, max_instances: 4, ..SandboxOptions::default() };
//! let host = ToolHost::load_components(vec![], options).await.unwrap();
//! let agent = Agent::new(Arc::new(Hello), host, Arc::new(RefuseAll), AgentPolicy::default());
//! let transcript = agent.run(vec![Message::user("hi")]).await;
//! assert_eq!(transcript.end, RunEnd::Answered);
//! assert_eq!(transcript.final_text, "hello");
//! # }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::dispatcher::{Approver, CallEnv, ToolHost, ToolSpec};
use crate::manifest::ModelConfig;
use crate::model::{
    Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse, Usage,
};
use crate::observe::{Answer, Asker, CallObserver, LogLevel, NobodyToAsk, Progress, Question};
use crate::tool_call::ToolCall;
use crate::wire::results::ToolMessage;

/// How the loop behaves.
#[derive(Debug, Clone)]
pub struct AgentPolicy {
    /// Model calls per task before the loop stops.
    pub max_steps: u32,
    /// Tokens the model may generate per call.
    pub max_tokens: u32,
    /// Retries of one model call after a transient failure.
    pub max_retries: u32,
    /// The first retry's delay; each further one doubles, up to `max_delay`.
    pub base_delay: Duration,
    /// The longest wait between retries (also caps `Retry-After`).
    pub max_delay: Duration,
}

impl Default for AgentPolicy {
    fn default() -> Self {
        Self {
            max_steps: 10,
            max_tokens: 1024,
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl AgentPolicy {
    /// The policy `[model]` describes.
    pub fn from_config(config: &ModelConfig) -> Self {
        Self {
            max_steps: config.max_steps,
            max_tokens: config.max_tokens,
            max_retries: config.max_retries,
            ..Self::default()
        }
    }

    /// The wait before retry number `attempt` (1-based): exponential with
    /// full jitter in its upper half, or what the endpoint asked for.
    fn delay(&self, attempt: u32, error: &ModelError) -> Duration {
        if let Some(asked) = error.retry_after {
            return asked.min(self.max_delay);
        }
        let exponential = self
            .base_delay
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(self.max_delay);
        exponential.mul_f64(0.5 + fastrand::f64() / 2.0)
    }
}

/// Something that happened during a run, in order. Serialized, these are the
/// transcript's JSON lines.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The run began.
    RunStarted {
        /// An id for this run, also on its log spans.
        trace_id: String,
        /// The model endpoint.
        model: String,
        /// The tools offered.
        tools: Vec<String>,
    },
    /// A piece of the model's text as it streams in (not in transcripts).
    TextDelta {
        /// The text.
        text: String,
    },
    /// A model call failed and will be retried.
    ModelRetry {
        /// Which step.
        step: u32,
        /// Which retry this will be (1-based).
        attempt: u32,
        /// What failed.
        error: String,
        /// How long the loop waits first.
        delay_ms: u64,
    },
    /// A model call completed.
    ModelCall {
        /// Which step (1-based).
        step: u32,
        /// Time spent on the call, retries and waits included.
        duration_ms: f64,
        /// Retries it took.
        retries: u32,
        /// Tokens.
        usage: Usage,
        /// Why generation stopped.
        stop_reason: Option<String>,
    },
    /// A message joined the conversation.
    Message {
        /// The message.
        message: Message,
    },
    /// A tool call is about to run.
    ToolCallStarted {
        /// Its id.
        id: String,
        /// The tool.
        name: String,
        /// The arguments as the model wrote them.
        arguments: String,
    },
    /// A running tool reported progress.
    ToolProgress {
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// How much is done.
        done: f64,
        /// How much there is, when known.
        total: Option<f64>,
        /// The tool's short message.
        message: Option<String>,
    },
    /// A running tool asked the person a question.
    ToolAsked {
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// The question, as the person was shown it.
        question: String,
    },
    /// A tool call ended.
    ToolResult {
        /// The ToolMessage, typed error included.
        message: ToolMessage,
        /// Wall-clock time of the call.
        duration_ms: f64,
        /// Fuel the tool used.
        fuel: u64,
    },
    /// The run ended.
    Finished {
        /// How.
        end: RunEnd,
        /// The model's last text, or what stopped the run.
        final_text: String,
        /// Tokens over the whole run.
        usage: Usage,
        /// Model calls made.
        steps: u32,
        /// Wall-clock time of the run.
        duration_ms: f64,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunEnd {
    /// The model answered without calling tools.
    Answered,
    /// The step budget ran out while the model still called tools.
    StepBudget,
    /// The model endpoint failed for good.
    ModelFailed {
        /// Why.
        error: String,
    },
}

/// Everything a run produced.
#[derive(Debug, Clone, Serialize)]
pub struct Transcript {
    /// The whole conversation, input messages included.
    pub messages: Vec<Message>,
    /// Every event but text deltas, in order.
    pub events: Vec<AgentEvent>,
    /// How the run ended.
    pub end: RunEnd,
    /// The model's last text, or a message saying why the run stopped.
    pub final_text: String,
    /// Tokens over the whole run.
    pub usage: Usage,
}

/// A model client, a tool host and an approver, run in a loop.
#[derive(Clone)]
pub struct Agent {
    model: Arc<dyn ModelClient>,
    host: ToolHost,
    approver: Arc<dyn Approver>,
    asker: Arc<dyn Asker>,
    context: Option<Arc<serde_json::Value>>,
    policy: AgentPolicy,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model.describe())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// An agent that asks `model`, runs tools on `host`, and asks `approver`
    /// about calls whose manifest entry requires approval.
    pub fn new(
        model: Arc<dyn ModelClient>,
        host: ToolHost,
        approver: Arc<dyn Approver>,
        policy: AgentPolicy,
    ) -> Self {
        Self {
            model,
            host,
            approver,
            asker: Arc::new(NobodyToAsk),
            context: None,
            policy,
        }
    }

    /// Answer the questions tools ask with `asker` (by default nobody can
    /// be asked, and tools get a refusal at once).
    pub fn with_asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = asker;
        self
    }

    /// Give every tool call `context` (the application's, e.g. the user):
    /// tools read it and scoped stores are kept by it; the model never
    /// sees it.
    pub fn with_context(mut self, context: serde_json::Value) -> Self {
        self.context = Some(Arc::new(context));
        self
    }

    /// Run until the model answers, the step budget ends, or the endpoint
    /// fails for good.
    pub async fn run(&self, messages: Vec<Message>) -> Transcript {
        self.run_with(messages, &|_| {}).await
    }

    /// [`Agent::run`], streaming every event (text deltas included) through
    /// a channel as it happens. The last event is [`AgentEvent::Finished`];
    /// the task's result is the transcript.
    pub fn run_stream(
        &self,
        messages: Vec<Message>,
    ) -> (
        mpsc::UnboundedReceiver<AgentEvent>,
        tokio::task::JoinHandle<Transcript>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let agent = self.clone();
        let task = tokio::spawn(async move {
            agent
                .run_with(messages, &move |event| {
                    // A receiver that hung up only stops the display.
                    let _ = tx.send(event.clone());
                })
                .await
        });
        (rx, task)
    }

    /// [`Agent::run`], calling `on_event` for every event as it happens.
    pub async fn run_with(
        &self,
        messages: Vec<Message>,
        on_event: &(dyn Fn(&AgentEvent) + Send + Sync),
    ) -> Transcript {
        let trace_id = format!("{:016x}", fastrand::u64(..));
        let span =
            tracing::info_span!("agent_run", trace_id = %trace_id, model = %self.model.describe());
        self.run_inner(trace_id, messages, on_event)
            .instrument(span)
            .await
    }

    async fn run_inner(
        &self,
        trace_id: String,
        messages: Vec<Message>,
        on_event: &(dyn Fn(&AgentEvent) + Send + Sync),
    ) -> Transcript {
        let started = Instant::now();
        let tools: Vec<ToolSpec> = self.host.specs().cloned().collect();
        let mut run = Run {
            transcript: Transcript {
                messages,
                events: Vec::new(),
                end: RunEnd::Answered,
                final_text: String::new(),
                usage: Usage::default(),
            },
            on_event,
        };
        run.emit(AgentEvent::RunStarted {
            trace_id,
            model: self.model.describe(),
            tools: tools.iter().map(|t| t.name.clone()).collect(),
        });
        let mut steps = 0;
        loop {
            if steps == self.policy.max_steps {
                run.transcript.end = RunEnd::StepBudget;
                run.transcript.final_text = format!(
                    "Stopped after {steps} model calls without a final answer (max_steps = {}); the last tool results are in the transcript.",
                    self.policy.max_steps
                );
                break;
            }
            steps += 1;
            let response = match self.ask(&mut run, steps, &tools).await {
                Ok(response) => response,
                Err(error) => {
                    run.transcript.end = RunEnd::ModelFailed {
                        error: error.message.clone(),
                    };
                    run.transcript.final_text = format!("The model endpoint failed: {error}");
                    break;
                }
            };
            let calls = response.tool_calls.clone();
            run.push(Message::Assistant {
                content: response.content.clone(),
                tool_calls: response.tool_calls,
            });
            if calls.is_empty() {
                run.transcript.final_text = response.content;
                break;
            }
            self.run_tools(&mut run, &calls).await;
        }
        let usage = run.transcript.usage;
        let final_text = run.transcript.final_text.clone();
        let end = run.transcript.end.clone();
        run.emit(AgentEvent::Finished {
            end,
            final_text,
            usage,
            steps,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
        });
        run.transcript
    }

    /// One model call, with retries.
    async fn ask(
        &self,
        run: &mut Run<'_>,
        step: u32,
        tools: &[ToolSpec],
    ) -> Result<ModelResponse, ModelError> {
        let started = Instant::now();
        let mut retries = 0;
        loop {
            let request = ModelRequest {
                messages: &run.transcript.messages,
                tools,
                max_tokens: self.policy.max_tokens,
            };
            let on_event = run.on_event;
            let sink = move |event: ModelEvent| match event {
                ModelEvent::TextDelta(text) => on_event(&AgentEvent::TextDelta { text }),
            };
            let span = tracing::info_span!("model_call", step, attempt = retries + 1);
            let result = self.model.complete(request, &sink).instrument(span).await;
            match result {
                Ok(response) => {
                    run.transcript.usage += response.usage;
                    run.emit(AgentEvent::ModelCall {
                        step,
                        duration_ms: started.elapsed().as_secs_f64() * 1e3,
                        retries,
                        usage: response.usage,
                        stop_reason: response.stop_reason.clone(),
                    });
                    return Ok(response);
                }
                Err(error) if error.retryable() && retries < self.policy.max_retries => {
                    retries += 1;
                    let delay = self.policy.delay(retries, &error);
                    tracing::warn!(step, retry = retries, error = %error, delay_ms = delay.as_millis() as u64, "model call failed; retrying");
                    run.emit(AgentEvent::ModelRetry {
                        step,
                        attempt: retries,
                        error: error.message.clone(),
                        delay_ms: delay.as_millis() as u64,
                    });
                    tokio::time::sleep(delay).await;
                }
                Err(error) => {
                    tracing::error!(step, retries, error = %error, "model call failed");
                    return Err(error);
                }
            }
        }
    }

    /// Run a turn's tool calls in parallel and answer each, in order.
    async fn run_tools(&self, run: &mut Run<'_>, calls: &[crate::model::AssistantToolCall]) {
        for call in calls {
            run.emit(AgentEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let batch = calls
            .iter()
            .map(|c| {
                ToolCall::with_raw_arguments(c.id.clone(), c.name.clone(), c.arguments.clone())
            })
            .collect();
        // Progress and questions come from the calls while they run; they
        // become events here, on the run's own task, as they arrive.
        let (notes, mut heard) = mpsc::unbounded_channel();
        let relay = Arc::new(Relay {
            notes,
            asker: self.asker.clone(),
        });
        let mut env = CallEnv::default()
            .approver(self.approver.clone())
            .asker(relay.clone())
            .observer(relay);
        env.context.clone_from(&self.context);
        let calls = self.host.call_batch_in(batch, env);
        tokio::pin!(calls);
        let outcomes = loop {
            tokio::select! {
                outcomes = &mut calls => break outcomes,
                Some(event) = heard.recv() => run.emit(event),
            }
        };
        while let Ok(event) = heard.try_recv() {
            run.emit(event);
        }
        for outcome in outcomes {
            let message = outcome.to_message();
            run.emit(AgentEvent::ToolResult {
                message: message.clone(),
                duration_ms: outcome.stats.duration.as_secs_f64() * 1e3,
                fuel: outcome.stats.fuel_used,
            });
            run.push(Message::Tool {
                tool_call_id: message.tool_call_id,
                name: message.name,
                content: message.content.to_text(),
                blocks: message.content.blocks().to_vec(),
                is_error: message.is_error,
            });
        }
    }
}

/// Turns what running calls report into events, and passes their
/// questions on to the agent's asker.
struct Relay {
    notes: mpsc::UnboundedSender<AgentEvent>,
    asker: Arc<dyn Asker>,
}

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Relay")
    }
}

impl CallObserver for Relay {
    fn wants(&self, _: LogLevel) -> bool {
        false
    }

    fn log(&self, _: LogLevel, _: &str) {}

    fn progress(&self, progress: &Progress) {
        let _ = self.notes.send(AgentEvent::ToolProgress {
            id: progress.call_id.clone(),
            name: progress.tool.clone(),
            done: progress.done,
            total: progress.total,
            message: progress.message.clone(),
        });
    }
}

impl Asker for Relay {
    fn ask<'a>(&'a self, question: &'a Question) -> futures::future::BoxFuture<'a, Answer> {
        let _ = self.notes.send(AgentEvent::ToolAsked {
            id: question.call_id.clone(),
            name: question.tool.clone(),
            question: question.message.clone(),
        });
        self.asker.ask(question)
    }
}

/// A run in progress: the transcript and where events go.
struct Run<'a> {
    transcript: Transcript,
    on_event: &'a (dyn Fn(&AgentEvent) + Send + Sync),
}

impl Run<'_> {
    fn emit(&mut self, event: AgentEvent) {
        (self.on_event)(&event);
        self.transcript.events.push(event);
    }

    fn push(&mut self, message: Message) {
        self.transcript.messages.push(message.clone());
        self.emit(AgentEvent::Message { message });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelErrorKind;

    #[test]
    fn backoff_grows_with_jitter_and_honours_retry_after() {
        let policy = AgentPolicy::default();
        let error = ModelError::new(ModelErrorKind::Status(503), "busy");
        for attempt in 1..=4 {
            let full = policy.base_delay * (1 << (attempt - 1));
            let delay = policy.delay(attempt, &error);
            assert!(
                delay >= full / 2 && delay <= full,
                "attempt {attempt}: {delay:?}"
            );
        }
        assert!(policy.delay(30, &error) <= policy.max_delay);
        let asked = ModelError {
            retry_after: Some(Duration::from_secs(2)),
            ..error
        };
        assert_eq!(policy.delay(1, &asked), Duration::from_secs(2));
    }
}
