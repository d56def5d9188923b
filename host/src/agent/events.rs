//! What a run reports: its events ([`AgentEvent`], the transcript's JSON
//! lines), how it ended ([`RunEnd`]) and everything it produced
//! ([`Transcript`]).

use serde::Serialize;
use serde_json::Value;

use crate::model::{Message, Usage};
use crate::wire::results::ToolMessage;

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
    /// A call a tool made ended: a tool granted `call_tools` (the code
    /// tool's `run_code`) calls other tools, and each of those calls is
    /// recorded here, its id the calling call's with `/1`, `/2`, … after
    /// it. Its result went to the calling program, not to the model.
    NestedToolResult {
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
