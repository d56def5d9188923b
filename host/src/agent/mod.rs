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
//!     Arc::from(model::client_for(&config)?),
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

mod events;
mod policy;
mod run;
mod tools;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tracing::Instrument as _;

pub use events::{AgentEvent, RunEnd, Transcript};
pub use policy::{AgentPolicy, PolicyError};

use crate::arguments::CompiledSchema;
use crate::fixes::Fixes;
use crate::model::config::ResponseFormat;
use crate::model::{
    AssistantToolCall, Message, ModelClient, ModelError, ModelEvent, ModelRequest, ModelResponse,
};
use crate::observe::{Asker, NobodyToAsk};
use crate::spec::ToolSpec;
use crate::tool_host::{Approver, ToolHost};
use run::{OnEvent, Run, check_answer};

/// A model client, a tool host and an approver, run in a loop.
#[derive(Clone)]
pub struct Agent {
    model: Arc<dyn ModelClient>,
    host: ToolHost,
    approver: Arc<dyn Approver>,
    asker: Arc<dyn Asker>,
    context: Option<Arc<serde_json::Value>>,
    policy: AgentPolicy,
    fixes: Arc<Fixes>,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("model", &self.model.describe())
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The response format of a run and its compiled schema.
type AnswerSchema<'a> = (&'a ResponseFormat, CompiledSchema);

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
            fixes: Arc::default(),
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

    /// Spell the fixes the run's messages name as `fixes` does: a front
    /// end with flags names them (by default the step-budget message says
    /// to raise `max_steps` in `[model]`).
    pub fn with_fixes(mut self, fixes: Fixes) -> Self {
        self.fixes = Arc::new(fixes);
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
        on_event: OnEvent<'_>,
    ) -> Transcript {
        let started = Instant::now();
        let code_mode = self.policy.controls.code_mode;
        let offered = match self.host.code_mode_specs() {
            Some(specs) if code_mode => Some(specs.into_iter().cloned().collect()),
            None if code_mode => None,
            _ => Some(self.host.specs().cloned().collect()),
        };
        let tools: Vec<ToolSpec> = offered.clone().unwrap_or_default();
        let mut run = Run::new(
            messages,
            on_event,
            self.policy.controls.prices.is_some(),
            &self.fixes,
        );
        run.emit(AgentEvent::RunStarted {
            trace_id,
            model: self.model.describe(),
            tools: tools.iter().map(|t| t.name.clone()).collect(),
        });
        let steps = match self.answer_schema(&tools) {
            Ok(_) if offered.is_none() => {
                let error = "code_mode is on, but no loaded tool is granted call_tools: add the code tool to the manifest (see example-tools/code.toml), or turn code_mode off";
                run.end(
                    RunEnd::Misconfigured {
                        error: error.to_owned(),
                    },
                    format!("The run was not started: {error}"),
                );
                0
            }
            Ok(schema) => self.turns(&mut run, &tools, schema.as_ref()).await,
            Err(error) => {
                run.end(
                    RunEnd::Misconfigured {
                        error: error.to_string(),
                    },
                    format!("The run was not started: {error}"),
                );
                0
            }
        };
        self.finish(run, steps, started)
    }

    /// Check the policy for a run with `tools`, and compile the response
    /// format's schema, if there is one.
    fn answer_schema(&self, tools: &[ToolSpec]) -> Result<Option<AnswerSchema<'_>>, PolicyError> {
        self.policy.check(tools, self.model.min_output_tokens())?;
        let Some(format) = &self.policy.controls.response_format else {
            return Ok(None);
        };
        let schema = format.compile().map_err(PolicyError::AnswerSchema)?;
        Ok(Some((format, schema)))
    }

    /// Ask the model and run its tool calls, turn after turn, until the
    /// run ends; the model calls made.
    async fn turns(
        &self,
        run: &mut Run<'_>,
        tools: &[ToolSpec],
        schema: Option<&AnswerSchema<'_>>,
    ) -> u32 {
        let mut steps = 0;
        let mut wrong_answers = 0;
        loop {
            if let Some(end) = self.budget_left(&run.transcript, steps) {
                run.end_for_budget(end, steps, self.policy.controls.max_steps);
                return steps;
            }
            steps += 1;
            let response = match self.ask(run, steps, tools).await {
                Ok(response) => response,
                Err(error) => {
                    let text = format!("The model endpoint failed: {error}");
                    run.end(
                        RunEnd::ModelFailed {
                            error: error.message,
                        },
                        text,
                    );
                    return steps;
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
            let answer = match (schema, calls.as_slice()) {
                (_, []) => Some((None, response.content)),
                (Some((format, _)), [call]) if call.name == format.name => {
                    Some((Some(call), call.arguments.clone()))
                }
                _ => None,
            };
            let Some((answer_call, text)) = answer else {
                self.run_tools(run, &calls).await;
                continue;
            };
            let Some((_, schema)) = schema else {
                run.transcript.final_text = text;
                return steps;
            };
            if judge(run, schema, answer_call, text, &mut wrong_answers)
                .await
                .is_break()
            {
                return steps;
            }
        }
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
        let controls = &self.policy.controls;
        let used = transcript.usage.total();
        // Less than the endpoint lets a call generate is as good as none.
        let least = u64::from(self.model.min_output_tokens());
        if let Some(limit) = controls.max_run_tokens
            && used.saturating_add(least) > limit
        {
            return Some(RunEnd::TokenBudget { used, limit });
        }
        if let (Some(limit), Some(spent)) = (controls.max_run_cost, transcript.cost_usd)
            && spent >= limit
        {
            return Some(RunEnd::CostBudget { spent, limit });
        }
        (steps == controls.max_steps).then_some(RunEnd::StepBudget)
    }

    /// One model call, with retries.
    async fn ask(
        &self,
        run: &mut Run<'_>,
        step: u32,
        tools: &[ToolSpec],
    ) -> Result<ModelResponse, ModelError> {
        let controls = &self.policy.controls;
        let started = Instant::now();
        let mut retries = 0;
        // What the token budget leaves, if less than a call may generate.
        let used = run.transcript.usage.total();
        let max_tokens = match controls.max_run_tokens {
            Some(limit) => u32::try_from(limit.saturating_sub(used))
                .unwrap_or(u32::MAX)
                .min(controls.max_tokens)
                .max(1),
            None => controls.max_tokens,
        };
        loop {
            let request = ModelRequest {
                messages: &run.transcript.messages,
                tools,
                max_tokens,
                tool_choice: self.policy.tool_choice_at(step),
                parallel_tool_calls: controls.parallel_tool_calls,
                sampling: &controls.sampling,
                response_format: controls.response_format.as_ref(),
            };
            let on_event = run.on_event;
            let sink = move |event: ModelEvent| match event {
                ModelEvent::TextDelta(text) => on_event(&AgentEvent::TextDelta { text }),
            };
            let span = tracing::info_span!("model_call", step, attempt = retries + 1);
            match self.model.complete(request, &sink).instrument(span).await {
                Ok(response) => {
                    self.count(run, step, &response, started, retries);
                    return Ok(response);
                }
                Err(error) if error.retryable() && retries < controls.max_retries => {
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

    /// Count what a model call spent, and report it.
    fn count(
        &self,
        run: &mut Run<'_>,
        step: u32,
        response: &ModelResponse,
        started: Instant,
        retries: u32,
    ) {
        run.transcript.usage += response.usage;
        let cost_usd =
            self.policy.controls.prices.map(|prices| {
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
    }
}

/// Judge a final answer, `text` (given through `answer_call`, when the
/// model called the answer tool), against the response format's `schema`:
/// accepted, the run ends; wrong a second time, it ends too; wrong the
/// first time, the model is told why and the run goes on.
async fn judge(
    run: &mut Run<'_>,
    schema: &CompiledSchema,
    answer_call: Option<&AssistantToolCall>,
    text: String,
    wrong_answers: &mut u32,
) -> std::ops::ControlFlow<()> {
    use std::ops::ControlFlow::{Break, Continue};
    match check_answer(schema, &text).await {
        Ok(value) => {
            if let Some(call) = answer_call {
                run.answer_call(call, Ok(()));
            }
            run.transcript.final_text = text;
            run.transcript.answer = Some(value);
            Break(())
        }
        Err(problem) => {
            *wrong_answers += 1;
            if let Some(call) = answer_call {
                run.answer_call(call, Err(problem.clone()));
            }
            if *wrong_answers > 1 {
                run.end(RunEnd::InvalidAnswer { error: problem }, text);
                return Break(());
            }
            if answer_call.is_none() {
                run.push(Message::user(format!(
                    "Your answer does not match the required JSON schema: {problem}. Answer again with only the JSON, matching the schema."
                )));
            }
            Continue(())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::future::BoxFuture;

    use super::*;
    use crate::model::config::LoopControls;
    use crate::model::{EventSink, ModelErrorKind};

    /// A model that counts the calls it gets, and fails each.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl ModelClient for Counting {
        fn complete<'a>(
            &'a self,
            _: ModelRequest<'a>,
            _: EventSink<'a>,
        ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Err(ModelError::new(ModelErrorKind::Protocol, "no")) })
        }

        fn describe(&self) -> String {
            "counting".into()
        }
    }

    #[tokio::test]
    async fn a_response_format_whose_schema_does_not_compile_asks_nothing() {
        let options = crate::SandboxOptions {
            cache_dir: None,
            max_instances: 4,
            ..crate::SandboxOptions::default()
        };
        let host = ToolHost::load_components(vec![], options).await.unwrap();
        let model = Arc::new(Counting::default());
        let policy = AgentPolicy::new(LoopControls {
            response_format: Some(ResponseFormat::new(serde_json::json!({
                "type": "object",
                "properties": {"a": {"type": "string", "pattern": "("}},
            }))),
            ..LoopControls::default()
        });
        let agent = Agent::new(model.clone(), host, Arc::new(crate::RefuseAll), policy);
        let transcript = agent.run(vec![Message::user("hi")]).await;
        let RunEnd::Misconfigured { error } = &transcript.end else {
            panic!("{:?}", transcript.end);
        };
        assert!(
            error.starts_with("response_format is not valid JSON Schema"),
            "{error}"
        );
        assert_eq!(model.0.load(Ordering::SeqCst), 0);
    }
}
