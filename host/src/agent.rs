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
//! let options = SandboxOptions::default()
//!     .with_cache_dir(None)
//!     .with_max_instances(std::num::NonZeroU32::new(4).unwrap());
//! let host = ToolHost::load_components(vec![], options).await.unwrap();
//! let agent = Agent::new(Arc::new(Hello), host, Arc::new(RefuseAll), AgentPolicy::default());
//! let transcript = agent.run(vec![Message::user("hi")]).await;
//! assert_eq!(transcript.end, RunEnd::Answered);
//! assert_eq!(transcript.final_text, "hello");
//! # }
//! ```

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use crate::model::{
    Message, ModelClient, ModelConfig, ModelError, ModelEvent, ModelRequest, ModelResponse, Prices,
    ResponseFormat, Sampling, ToolChoice, Usage,
};
use crate::observe::{Answer, Asker, CallObserver, LogLevel, NobodyToAsk, Progress, Question};
use crate::outcome::{CallError, ErrorType, Outcome, clip};
use crate::spec::ToolSpec;
use crate::tool_call::ToolCall;
use crate::tool_host::{Approver, CallOptions, ToolHost};
use crate::wire::results::ToolMessage;

/// How the loop behaves. [`AgentPolicy::from_config`] reads it from
/// `[model]`; the defaults are the manifest's.
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
    /// Whether the model must call tools. `required` and a named tool hold
    /// for the first `tool_choice_steps` steps only, so the loop can end.
    pub tool_choice: ToolChoice,
    /// How many first steps a forcing `tool_choice` applies to.
    pub tool_choice_steps: u32,
    /// Whether the model may call several tools in one turn.
    pub parallel_tool_calls: bool,
    /// The most tool calls run per turn; later ones in the turn are
    /// answered `denied_by_user` (retryable) and not run.
    pub max_tool_calls_per_turn: NonZeroU32,
    /// Sampling, passed to the endpoint.
    pub sampling: Sampling,
    /// Tokens (input and output) the run may spend; checked before each
    /// model call, which may generate at most what remains.
    pub max_run_tokens: Option<u64>,
    /// Dollars the run may spend, by the `prices` estimate.
    pub max_run_cost: Option<f64>,
    /// Prices for the spend estimate.
    pub prices: Option<Prices>,
    /// A schema the final answer must satisfy.
    pub response_format: Option<ResponseFormat>,
}

impl Default for AgentPolicy {
    fn default() -> Self {
        Self::from_config(&ModelConfig::openai("http://127.0.0.1", "default"))
    }
}

impl AgentPolicy {
    /// The policy `[model]` describes.
    pub fn from_config(config: &ModelConfig) -> Self {
        Self {
            max_steps: config.max_steps,
            max_tokens: config.max_tokens,
            max_retries: config.max_retries,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            tool_choice: config.tool_choice.clone(),
            tool_choice_steps: config.tool_choice_steps,
            parallel_tool_calls: config.parallel_tool_calls,
            max_tool_calls_per_turn: config.max_tool_calls_per_turn,
            sampling: config.sampling.clone(),
            max_run_tokens: config.max_run_tokens,
            max_run_cost: config.max_run_cost,
            prices: config.prices,
            response_format: config.response_format.clone(),
        }
    }

    /// Check the policy against the tools a run offers and the endpoint
    /// it asks: a named `tool_choice` must name one of the tools, a
    /// structured answer's name must not, and a call must be let generate
    /// at least `least_tokens`, the fewest the endpoint accepts
    /// ([`ModelClient::min_output_tokens`]). (A system prompt is not part
    /// of the policy: it is the first of the messages a run is given,
    /// [`Message::system`].)
    ///
    /// # Errors
    ///
    /// What is wrong and what to change.
    pub fn check(&self, tools: &[ToolSpec], least_tokens: u32) -> Result<(), String> {
        if self.max_steps == 0 {
            return Err("max_steps must be at least 1: a run must be able to ask the model".into());
        }
        let least = least_tokens.max(1);
        if self.max_tokens < least {
            return Err(format!(
                "max_tokens is {}, and the model endpoint takes no fewer than {least} output tokens a call; raise it to at least {least}",
                self.max_tokens
            ));
        }
        if let Some(limit) = self.max_run_tokens
            && limit < u64::from(least)
        {
            return Err(format!(
                "max_run_tokens is {limit}, less than the {least} output tokens the model endpoint takes at the least for one call; raise it to at least {least}"
            ));
        }
        let exists = |name: &str| tools.iter().any(|t| t.name == name);
        if let ToolChoice::Tool(name) = &self.tool_choice
            && !exists(name)
        {
            return Err(format!(
                "tool_choice names the tool {name:?}, which no loaded tool is; name one of: {}",
                tools
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if let Some(format) = &self.response_format
            && exists(&format.name)
        {
            return Err(format!(
                "response_format is named {:?}, like a loaded tool; give it another name (with Anthropic the answer is given through a tool of that name)",
                format.name
            ));
        }
        Ok(())
    }

    /// The tool choice for step `step` (1-based).
    fn tool_choice_at(&self, step: u32) -> &ToolChoice {
        if self.tool_choice.forces_a_call() && step > self.tool_choice_steps {
            ToolChoice::AUTO
        } else {
            &self.tool_choice
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
#[non_exhaustive]
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
        /// The call's estimated cost in dollars, when prices are set.
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
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
        /// Answered from the result cache: the tool did not run.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        cached: bool,
    },
    /// The run ended.
    Finished {
        /// How.
        end: RunEnd,
        /// The model's last text, or what stopped the run.
        final_text: String,
        /// Tokens over the whole run.
        usage: Usage,
        /// The run's estimated cost in dollars, when prices are set.
        #[serde(skip_serializing_if = "Option::is_none")]
        cost_usd: Option<f64>,
        /// The structured answer, when a response format was asked for and
        /// the answer satisfied it.
        #[serde(skip_serializing_if = "Option::is_none")]
        answer: Option<Value>,
        /// Model calls made.
        steps: u32,
        /// Wall-clock time of the run.
        duration_ms: f64,
    },
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunEnd {
    /// The model answered without calling tools (or, with a response
    /// format, gave an answer that satisfies it).
    Answered,
    /// The step budget ran out while the model still called tools.
    StepBudget,
    /// The token budget ran out before the next model call.
    TokenBudget {
        /// Tokens spent, input and output.
        used: u64,
        /// `max_run_tokens`.
        limit: u64,
    },
    /// The spending cap ran out before the next model call.
    CostBudget {
        /// Estimated dollars spent.
        spent: f64,
        /// `max_run_cost`.
        limit: f64,
    },
    /// The final answer did not satisfy the response format, even after
    /// the model was told why once.
    InvalidAnswer {
        /// What is wrong with it.
        error: String,
    },
    /// The policy does not fit the tools (a `tool_choice` naming no
    /// tool, a response format named like a tool); nothing was asked.
    Misconfigured {
        /// What to change.
        error: String,
    },
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
    /// The structured answer, when a response format was asked for and the
    /// answer satisfied it.
    pub answer: Option<Value>,
    /// Tokens over the whole run.
    pub usage: Usage,
    /// The run's estimated cost in dollars, when prices are set.
    pub cost_usd: Option<f64>,
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
                answer: None,
                usage: Usage::default(),
                cost_usd: self.policy.prices.map(|_| 0.0),
            },
            on_event,
            calls_by_tool: BTreeMap::new(),
        };
        run.emit(AgentEvent::RunStarted {
            trace_id,
            model: self.model.describe(),
            tools: tools.iter().map(|t| t.name.clone()).collect(),
        });
        let mut steps = 0;
        let answer_schema = match self
            .policy
            .check(&tools, self.model.min_output_tokens())
            .and_then(|()| {
                self.policy
                    .response_format
                    .as_ref()
                    .map(|format| format.compile().map(|schema| (format, schema)))
                    .transpose()
            }) {
            Ok(schema) => schema,
            Err(error) => {
                run.transcript.final_text = format!("The run was not started: {error}");
                run.transcript.end = RunEnd::Misconfigured { error };
                return self.finish(run, steps, started);
            }
        };
        let mut wrong_answers = 0;
        loop {
            if let Some(end) = self.budget_left(&run.transcript, steps) {
                run.transcript.final_text = match &end {
                    RunEnd::TokenBudget { used, limit } => format!(
                        "Stopped after {}: the run spent {used} tokens of its {limit} (max_run_tokens); raise it to let the run go on. The transcript so far is intact.",
                        model_calls(steps)
                    ),
                    RunEnd::CostBudget { spent, limit } => format!(
                        "Stopped after {}: the run spent about ${spent:.4} of its ${limit} (max_run_cost); raise it to let the run go on. The transcript so far is intact.",
                        model_calls(steps)
                    ),
                    _ => run.step_budget_message(self.policy.max_steps),
                };
                run.transcript.end = end;
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
                provider_items: response.provider_items,
            });
            // The answer: text without tool calls, or (the forced-tool
            // pattern) a lone call to the response format's tool.
            let answer = match (&answer_schema, calls.as_slice()) {
                (_, []) => Some((None, response.content)),
                (Some((format, _)), [call]) if call.name == format.name => {
                    Some((Some(call), call.arguments.clone()))
                }
                _ => None,
            };
            let Some((answer_call, text)) = answer else {
                self.run_tools(&mut run, &calls).await;
                continue;
            };
            let Some((_, schema)) = &answer_schema else {
                run.transcript.final_text = text;
                break;
            };
            match check_answer(schema, &text).await {
                Ok(value) => {
                    if let Some(call) = answer_call {
                        run.answer_call(call, Ok(()));
                    }
                    run.transcript.final_text = text;
                    run.transcript.answer = Some(value);
                    break;
                }
                Err(problem) => {
                    wrong_answers += 1;
                    if let Some(call) = answer_call {
                        run.answer_call(call, Err(problem.clone()));
                    }
                    if wrong_answers > 1 {
                        run.transcript.final_text = text;
                        run.transcript.end = RunEnd::InvalidAnswer { error: problem };
                        break;
                    }
                    if answer_call.is_none() {
                        run.push(Message::user(format!(
                            "Your answer does not match the required JSON schema: {problem}. Answer again with only the JSON, matching the schema."
                        )));
                    }
                }
            }
        }
        self.finish(run, steps, started)
    }

    /// Emit [`AgentEvent::Finished`] and hand over the transcript.
    fn finish(&self, mut run: Run<'_>, steps: u32, started: Instant) -> Transcript {
        let transcript = &run.transcript;
        let event = AgentEvent::Finished {
            end: transcript.end.clone(),
            final_text: transcript.final_text.clone(),
            usage: transcript.usage,
            cost_usd: transcript.cost_usd,
            answer: transcript.answer.clone(),
            steps,
            duration_ms: started.elapsed().as_secs_f64() * 1e3,
        };
        run.emit(event);
        run.transcript
    }

    /// Why the run may not make another model call, if it may not.
    fn budget_left(&self, transcript: &Transcript, steps: u32) -> Option<RunEnd> {
        let used = transcript.usage.total();
        // Less than the endpoint lets a call generate is as good as none.
        let least = u64::from(self.model.min_output_tokens());
        if let Some(limit) = self.policy.max_run_tokens
            && used.saturating_add(least) > limit
        {
            return Some(RunEnd::TokenBudget { used, limit });
        }
        if let (Some(limit), Some(spent)) = (self.policy.max_run_cost, transcript.cost_usd)
            && spent >= limit
        {
            return Some(RunEnd::CostBudget { spent, limit });
        }
        (steps == self.policy.max_steps).then_some(RunEnd::StepBudget)
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
        // What the token budget leaves, if less than a call may generate.
        let used = run.transcript.usage.total();
        let max_tokens = match self.policy.max_run_tokens {
            Some(limit) => u32::try_from(limit.saturating_sub(used))
                .unwrap_or(u32::MAX)
                .min(self.policy.max_tokens)
                .max(1),
            None => self.policy.max_tokens,
        };
        loop {
            let request = ModelRequest {
                messages: &run.transcript.messages,
                tools,
                max_tokens,
                tool_choice: self.policy.tool_choice_at(step),
                parallel_tool_calls: self.policy.parallel_tool_calls,
                sampling: &self.policy.sampling,
                response_format: self.policy.response_format.as_ref(),
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
                    let cost_usd = self.policy.prices.map(|prices| {
                        prices.cost(response.usage.input_tokens, response.usage.output_tokens)
                    });
                    if let (Some(total), Some(cost)) = (&mut run.transcript.cost_usd, cost_usd) {
                        *total += cost;
                    }
                    run.emit(AgentEvent::ModelCall {
                        step,
                        duration_ms: started.elapsed().as_secs_f64() * 1e3,
                        retries,
                        usage: response.usage,
                        cost_usd,
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

    /// Run a turn's tool calls in parallel and answer each, in order: the
    /// first `max_tool_calls_per_turn` run, and later ones (and a call to
    /// the answer tool beside other calls) are answered without running.
    async fn run_tools(&self, run: &mut Run<'_>, calls: &[crate::model::AssistantToolCall]) {
        let cap = self.policy.max_tool_calls_per_turn.get() as usize;
        let answer_tool = self
            .policy
            .response_format
            .as_ref()
            .map(|f| f.name.as_str());
        let mut batch = Vec::with_capacity(calls.len().min(cap));
        let mut refused: Vec<Option<Outcome>> = Vec::with_capacity(calls.len());
        for call in calls {
            run.emit(AgentEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            *run.calls_by_tool.entry(clip(&call.name, 64)).or_default() += 1;
            let refusal = if Some(call.name.as_str()) == answer_tool {
                Some(CallError::new(
                    ErrorType::InvalidArguments,
                    "the final answer was given beside other tool calls; call it alone, once their results are back",
                ))
            } else if batch.len() == cap {
                let mut error = CallError::new(
                    ErrorType::DeniedByUser,
                    format!(
                        "this turn asked for {} tool calls and at most {cap} run per turn (max_tool_calls_per_turn); call it again in a later turn if it is still needed",
                        calls.len()
                    ),
                );
                error.retryable = true;
                Some(error)
            } else {
                None
            };
            match refusal {
                Some(error) => refused.push(Some(Outcome::error(
                    call.id.clone(),
                    clip(&call.name, 64),
                    error,
                ))),
                None => {
                    batch.push(ToolCall::with_raw_arguments(
                        call.id.clone(),
                        call.name.clone(),
                        call.arguments.clone(),
                    ));
                    refused.push(None);
                }
            }
        }
        if batch.len() < calls.len() {
            tracing::info!(
                asked = calls.len(),
                ran = batch.len(),
                "some of the turn's tool calls were answered without running"
            );
        }
        // Progress and questions come from the calls while they run; they
        // become events here, on the run's own task, as they arrive.
        let (notes, mut heard) = mpsc::unbounded_channel();
        let relay = Arc::new(Relay {
            notes,
            asker: self.asker.clone(),
        });
        let mut env = CallOptions::default()
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
        let mut ran = outcomes.into_iter();
        for slot in refused {
            let Some(outcome) = slot.or_else(|| ran.next()) else {
                continue;
            };
            run.answer(&outcome);
        }
    }
}

/// The structured answer in `text`, if it satisfies `schema`: JSON,
/// possibly inside a Markdown code fence (small models add one).
async fn check_answer(
    schema: &crate::arguments::CompiledSchema,
    text: &str,
) -> Result<Value, String> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    let value: Value =
        serde_json::from_str(unfenced).map_err(|e| format!("it is not JSON ({e})"))?;
    match schema.check(value, unfenced.len(), ANSWER_CHECK_TIME).await {
        Ok(value) => Ok(value),
        Err(crate::arguments::Invalid::Mismatch(problem)) => Err(problem),
        Err(crate::arguments::Invalid::TimedOut) => {
            Err("checking it against the schema took too long".into())
        }
    }
}

/// "1 model call", "2 model calls".
fn model_calls(n: u32) -> String {
    format!("{n} model call{}", if n == 1 { "" } else { "s" })
}

/// The longest a final answer's check against its schema may take.
const ANSWER_CHECK_TIME: Duration = Duration::from_secs(5);

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
    /// Tool calls the model made, by tool, for the step-budget message.
    calls_by_tool: BTreeMap<String, u32>,
}

impl Run<'_> {
    /// Record `outcome` as the answer to its call.
    fn answer(&mut self, outcome: &Outcome) {
        let message = outcome.to_message();
        self.emit(AgentEvent::ToolResult {
            message: message.clone(),
            duration_ms: outcome.stats.duration.as_secs_f64() * 1e3,
            fuel: outcome.stats.fuel_used,
            cached: outcome.stats.cached,
        });
        self.push(Message::Tool {
            tool_call_id: message.tool_call_id,
            name: message.name,
            content: message.content.to_text(),
            blocks: message.content.blocks().to_vec(),
            is_error: message.is_error,
        });
    }

    /// Answer the call that gave the final answer: accepted, or why not.
    fn answer_call(&mut self, call: &crate::model::AssistantToolCall, verdict: Result<(), String>) {
        self.emit(AgentEvent::ToolCallStarted {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        });
        let outcome = match verdict {
            Ok(()) => Outcome {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                result: Ok(crate::outcome::ToolOutput::text("Answer received.")),
                stats: Default::default(),
            },
            Err(problem) => Outcome::error(
                call.id.clone(),
                call.name.clone(),
                CallError::new(
                    ErrorType::InvalidArguments,
                    format!("the answer does not match the required schema: {problem}"),
                ),
            ),
        };
        self.answer(&outcome);
    }

    /// Why the step budget ended the run, with what the model was doing
    /// and how to give it more steps.
    fn step_budget_message(&self, max_steps: u32) -> String {
        let mut calls: Vec<(&String, &u32)> = self.calls_by_tool.iter().collect();
        calls.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let doing = if calls.is_empty() {
            String::new()
        } else {
            let listed: Vec<String> = calls
                .iter()
                .take(5)
                .map(|(name, count)| format!("{name} ×{count}"))
                .collect();
            format!(": the model kept calling tools ({})", listed.join(", "))
        };
        format!(
            "Stopped after {} without a final answer (max_steps = {max_steps}){doing}. To give it more steps, raise max_steps in [model] or pass --max-steps; if it repeats the same call, a clearer task or tool description helps more. The last tool results are in the transcript.",
            model_calls(max_steps)
        )
    }

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
