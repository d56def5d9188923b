//! A run in progress ([`Run`]): the transcript as it grows, where its
//! events go, and the words it ends with.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use super::events::{AgentEvent, RunEnd, Transcript};
use crate::fixes::Fixes;
use crate::model::{AssistantToolCall, Message, Usage};
use crate::outcome::{CallError, ErrorType, Outcome};

/// Where a run's events go, as they happen.
pub(super) type OnEvent<'a> = &'a (dyn Fn(&AgentEvent) + Send + Sync);

/// A run in progress: the transcript and where events go.
pub(super) struct Run<'a> {
    pub(super) transcript: Transcript,
    pub(super) on_event: OnEvent<'a>,
    /// Tool calls the model made, by tool, for the step-budget message.
    pub(super) calls_by_tool: BTreeMap<String, u32>,
    /// How the step-budget message says to raise `max_steps`.
    fixes: &'a Fixes,
}

impl<'a> Run<'a> {
    /// A run of `messages`, counting its cost when `priced`, its messages
    /// naming fixes as `fixes` spells them.
    pub(super) fn new(
        messages: Vec<Message>,
        on_event: OnEvent<'a>,
        priced: bool,
        fixes: &'a Fixes,
    ) -> Self {
        Self {
            transcript: Transcript {
                messages,
                events: Vec::new(),
                end: RunEnd::Answered,
                final_text: String::new(),
                answer: None,
                usage: Usage::default(),
                cost_usd: priced.then_some(0.0),
            },
            on_event,
            calls_by_tool: BTreeMap::new(),
            fixes,
        }
    }

    /// End the run with `end`, saying why in `final_text`.
    pub(super) fn end(&mut self, end: RunEnd, final_text: String) {
        self.transcript.final_text = final_text;
        self.transcript.end = end;
    }

    /// End the run for a budget spent after `steps` model calls, saying
    /// which and how to give it more.
    pub(super) fn end_for_budget(&mut self, end: RunEnd, steps: u32, max_steps: u32) {
        let text = match &end {
            RunEnd::TokenBudget { used, limit } => format!(
                "Stopped after {}: the run spent {used} tokens of its {limit} (max_run_tokens); raise it to let the run go on. The transcript so far is intact.",
                model_calls(steps)
            ),
            RunEnd::CostBudget { spent, limit } => format!(
                "Stopped after {}: the run spent about ${spent:.4} of its ${limit} (max_run_cost); raise it to let the run go on. The transcript so far is intact.",
                model_calls(steps)
            ),
            _ => self.step_budget_message(max_steps),
        };
        self.end(end, text);
    }

    /// Record `outcome` as the answer to its call.
    pub(super) fn answer(&mut self, outcome: &Outcome) {
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
    pub(super) fn answer_call(&mut self, call: &AssistantToolCall, verdict: Result<(), String>) {
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
            "Stopped after {} without a final answer (max_steps = {max_steps}){doing}. To give it more steps, {}; if it repeats the same call, a clearer task or tool description helps more. The last tool results are in the transcript.",
            model_calls(max_steps),
            self.fixes.max_steps
        )
    }

    pub(super) fn emit(&mut self, event: AgentEvent) {
        (self.on_event)(&event);
        self.transcript.events.push(event);
    }

    pub(super) fn push(&mut self, message: Message) {
        self.transcript.messages.push(message.clone());
        self.emit(AgentEvent::Message { message });
    }
}

/// The structured answer in `text`, if it satisfies `schema`: JSON,
/// possibly inside a Markdown code fence (small models add one).
pub(super) async fn check_answer(
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
