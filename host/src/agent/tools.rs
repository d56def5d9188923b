//! A turn's tool calls: which run, which are answered without running,
//! and what the running ones report on the way.

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Agent;
use super::events::AgentEvent;
use super::run::Run;
use crate::model::AssistantToolCall;
use crate::observe::{Answer, Asker, CallObserver, LogLevel, Progress, Question};
use crate::outcome::{CallError, ErrorType, Outcome, clip};
use crate::tool_call::ToolCall;
use crate::tool_host::CallOptions;

impl Agent {
    /// Run a turn's tool calls in parallel and answer each, in order: the
    /// first `max_tool_calls_per_turn` run, and later ones (and a call to
    /// the answer tool beside other calls) are answered without running.
    pub(super) async fn run_tools(&self, run: &mut Run<'_>, calls: &[AssistantToolCall]) {
        let cap = self.policy.controls.max_tool_calls_per_turn.get() as usize;
        let mut batch = Vec::with_capacity(calls.len().min(cap));
        let mut refused: Vec<Option<Outcome>> = Vec::with_capacity(calls.len());
        for call in calls {
            run.emit(AgentEvent::ToolCallStarted {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            *run.calls_by_tool.entry(clip(&call.name, 64)).or_default() += 1;
            match self.refusal(call, calls.len(), batch.len() == cap) {
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
        let outcomes = self.run_batch(run, batch).await;
        let mut ran = outcomes.into_iter();
        for slot in refused {
            let Some(outcome) = slot.or_else(|| ran.next()) else {
                continue;
            };
            run.answer(&outcome);
        }
    }

    /// Why `call`, one of the `asked` calls of a turn, is answered without
    /// running, if it is: a final answer beside other calls, or a call past
    /// the turn's cap (`full`).
    fn refusal(&self, call: &AssistantToolCall, asked: usize, full: bool) -> Option<CallError> {
        let controls = &self.policy.controls;
        let answer_tool = controls.response_format.as_ref().map(|f| f.name.as_str());
        if Some(call.name.as_str()) == answer_tool {
            return Some(CallError::new(
                ErrorType::InvalidArguments,
                "the final answer was given beside other tool calls; call it alone, once their results are back",
            ));
        }
        if !full {
            return None;
        }
        let mut error = CallError::new(
            ErrorType::DeniedByUser,
            format!(
                "this turn asked for {asked} tool calls and at most {} run per turn (max_tool_calls_per_turn); call it again in a later turn if it is still needed",
                controls.max_tool_calls_per_turn
            ),
        );
        error.retryable = true;
        Some(error)
    }

    /// Run `batch`, turning the progress and questions its calls report
    /// into events, on the run's own task, as they arrive.
    async fn run_batch(&self, run: &mut Run<'_>, batch: Vec<ToolCall>) -> Vec<Outcome> {
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
        outcomes
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

    fn called(&self, outcome: &crate::outcome::Outcome) {
        let _ = self.notes.send(AgentEvent::NestedToolResult {
            message: outcome.to_message(),
            duration_ms: outcome.stats.duration.as_secs_f64() * 1e3,
            fuel: outcome.stats.fuel_used,
            cached: outcome.stats.cached,
        });
    }

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
