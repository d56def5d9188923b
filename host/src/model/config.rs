//! The `[model]` table, validated: which endpoint, and every control the
//! agent loop offers (tool choice, parallel calls, sampling, budgets,
//! prices, a structured final answer).
//!
//! A leaf module: the manifest parses into these types, the providers and
//! the agent loop read them, and none of them imports the others for it.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// Which wire format the model endpoint speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum Provider {
    /// Any OpenAI-compatible chat-completions endpoint.
    #[default]
    #[serde(rename = "openai")]
    #[cfg_attr(feature = "cli", value(name = "openai"))]
    OpenAI,
    /// OpenAI's Responses API (`POST /responses`).
    #[serde(rename = "openai-responses")]
    #[cfg_attr(feature = "cli", value(name = "openai-responses"))]
    OpenAIResponses,
    /// The Anthropic Messages API.
    #[serde(rename = "anthropic")]
    Anthropic,
}

impl Provider {
    /// The fewest output tokens the endpoint lets one call ask for: its
    /// wire format's [`Wire::MIN_OUTPUT_TOKENS`](super::Wire::MIN_OUTPUT_TOKENS).
    #[must_use]
    pub const fn min_output_tokens(self) -> u32 {
        use super::Wire;
        match self {
            Self::OpenAI => super::OpenAI::MIN_OUTPUT_TOKENS,
            Self::OpenAIResponses => super::OpenAIResponses::MIN_OUTPUT_TOKENS,
            Self::Anthropic => super::Anthropic::MIN_OUTPUT_TOKENS,
        }
    }
}

/// Whether, and which, tools the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides. The default.
    #[default]
    Auto,
    /// The model must call at least one tool.
    Required,
    /// The model must not call tools (they are still described to it).
    None,
    /// The model must call this tool.
    Tool(String),
}

impl ToolChoice {
    /// `auto`, for where a reference is needed.
    pub const AUTO: &'static Self = &Self::Auto;

    /// `"auto"`, `"required"`, `"none"`, or a tool's name.
    pub fn parse(text: &str) -> Self {
        match text {
            "auto" => Self::Auto,
            "required" => Self::Required,
            "none" => Self::None,
            name => Self::Tool(name.to_owned()),
        }
    }

    /// Whether this choice forces a tool call, so that a loop that kept it
    /// on every step could never finish.
    pub fn forces_a_call(&self) -> bool {
        matches!(self, Self::Required | Self::Tool(_))
    }
}

/// Sampling settings, passed to the endpoint unchanged. Unset ones are not
/// sent, so the endpoint's defaults apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sampling {
    /// Temperature (0 is the most deterministic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// A seed, for endpoints that accept one (OpenAI-compatible chat
    /// completions; the Anthropic and Responses APIs have none, and it is
    /// not sent to them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Sequences that end generation (`stop_sequences` for Anthropic; the
    /// Responses API has none, and they are not sent to it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
}

/// What tokens cost, in US dollars per million, for the spend estimate.
/// None are built in: prices change, and differ by endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prices {
    /// Per million input (prompt) tokens.
    pub input: f64,
    /// Per million output (generated) tokens.
    pub output: f64,
}

impl Prices {
    /// The estimated cost of `input` and `output` tokens, in dollars.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input + output as f64 * self.output) / 1e6
    }
}

/// A JSON Schema the model's final answer must satisfy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResponseFormat {
    /// The schema's name, as the providers want one (`^[A-Za-z0-9_-]{1,64}$`);
    /// with Anthropic, also the name of the tool the answer is given through.
    pub name: String,
    /// The schema: an object schema.
    pub schema: Value,
    /// Ask the endpoint to enforce the schema strictly (OpenAI `strict`).
    pub strict: bool,
}

/// The `[model]` table, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Wire format.
    pub provider: Provider,
    /// Endpoint base URL, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Model name sent with each request.
    pub model: String,
    /// Environment variable holding the API key; the key itself never
    /// appears in the manifest, the logs or the transcript.
    pub api_key_env: Option<String>,
    /// Model calls per task before the loop gives up (default 10).
    pub max_steps: u32,
    /// Tokens the model may generate per call (default 1024).
    pub max_tokens: u32,
    /// Stream answers over SSE (default true).
    pub stream: bool,
    /// Per attempt: how long to wait for the whole answer, or, streaming,
    /// for the next byte (default 120 s).
    pub timeout: Duration,
    /// Retries of a model call after a transient failure (default 4).
    pub max_retries: u32,
    /// Whether the model must call tools (default `auto`).
    pub tool_choice: ToolChoice,
    /// For `required` or a named tool: how many first steps it applies to
    /// (default 1), after which the model may answer.
    pub tool_choice_steps: u32,
    /// Let the model call several tools in one turn (default true).
    pub parallel_tool_calls: bool,
    /// The most tool calls run per turn; the rest are answered, not run
    /// (default 16; 1 when `parallel_tool_calls` is false).
    pub max_tool_calls_per_turn: NonZeroU32,
    /// Sampling, passed through.
    pub sampling: Sampling,
    /// Tokens (input and output) a run may spend, checked before each
    /// model call (default: no cap).
    pub max_run_tokens: Option<u64>,
    /// Dollars a run may spend by the `prices` estimate (default: no cap).
    pub max_run_cost: Option<f64>,
    /// Prices for the spend estimate.
    pub prices: Option<Prices>,
    /// A schema for the final answer.
    pub response_format: Option<ResponseFormat>,
    /// A system prompt put before each task (`run --system` replaces it).
    pub system: Option<String>,
}

impl ModelConfig {
    /// An OpenAI-compatible endpoint with the defaults.
    pub fn openai(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: Provider::OpenAI,
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            max_steps: 10,
            max_tokens: 1024,
            stream: true,
            timeout: Duration::from_secs(120),
            max_retries: 4,
            tool_choice: ToolChoice::Auto,
            tool_choice_steps: 1,
            parallel_tool_calls: true,
            max_tool_calls_per_turn: DEFAULT_CALLS_PER_TURN,
            sampling: Sampling::default(),
            max_run_tokens: None,
            max_run_cost: None,
            prices: None,
            response_format: None,
            system: None,
        }
    }
}

impl ModelConfig {
    /// Turn parallel tool calls on or off, keeping the per-turn cap in
    /// step: off means one call a turn, and turning them back on lifts that
    /// cap to the default.
    pub fn set_parallel_tool_calls(&mut self, parallel: bool) {
        if !parallel || !self.parallel_tool_calls {
            self.max_tool_calls_per_turn = default_calls_per_turn(parallel);
        }
        self.parallel_tool_calls = parallel;
    }
}

/// The per-turn cap when none is configured: [`DEFAULT_CALLS_PER_TURN`],
/// or one call when calls are not parallel.
pub fn default_calls_per_turn(parallel: bool) -> NonZeroU32 {
    if parallel {
        DEFAULT_CALLS_PER_TURN
    } else {
        NonZeroU32::MIN
    }
}

/// Tool calls run per turn unless configured: more than any real task
/// needs at once, few enough that a model stuck emitting calls until its
/// token limit costs seconds, not minutes.
pub const DEFAULT_CALLS_PER_TURN: NonZeroU32 = NonZeroU32::new(16).expect("16 is not zero");

impl ResponseFormat {
    /// Check the name and that the schema is an object schema that
    /// compiles, within the size any tool schema may have.
    ///
    /// # Errors
    ///
    /// What is wrong, and how to fix it.
    pub fn check(&self) -> Result<(), String> {
        if !crate::spec::valid_name(&self.name) {
            return Err(format!(
                "the name {:?} must match ^[A-Za-z0-9_-]{{1,64}}$",
                crate::outcome::clip(&self.name, 80)
            ));
        }
        let is_object = self.schema.as_object().is_some_and(|schema| {
            schema.get("type").is_none_or(|t| t == "object") && schema.contains_key("properties")
        });
        if !is_object {
            return Err(
                "must be an object schema, e.g. {\"type\": \"object\", \"properties\": {…}}: the providers take only objects as structured answers".into(),
            );
        }
        let size = self.schema.to_string().len();
        if size > crate::spec::MAX_SCHEMA {
            return Err(format!(
                "is {size} bytes; at most {}",
                crate::spec::MAX_SCHEMA
            ));
        }
        self.compile().map(drop)
    }

    /// The compiled schema, for checking answers.
    pub(crate) fn compile(&self) -> Result<crate::arguments::CompiledSchema, String> {
        crate::arguments::CompiledSchema::compile(&self.schema, &mut Default::default())
            .map_err(|e| format!("is not valid JSON Schema: {e}"))
    }
}

/// "must be at least `least`", with why when the provider sets it.
fn at_least(least: u32, provider: Provider) -> String {
    if provider == Provider::OpenAIResponses {
        format!(
            "must be at least {least} with provider = \"openai-responses\" (the fewest output tokens the API lets one call ask for)"
        )
    } else {
        format!("must be at least {least}")
    }
}

impl ModelConfig {
    /// Check the settings that must agree with each other or lie in a
    /// range, after the manifest or the command line set them.
    ///
    /// # Errors
    ///
    /// The `[model]` key at fault and what to write instead.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.max_steps == 0 {
            return Err(("max_steps", "must be at least 1".into()));
        }
        let least = self.provider.min_output_tokens();
        if self.max_tokens < least {
            return Err(("max_tokens", at_least(least, self.provider)));
        }
        if let ToolChoice::Tool(name) = &self.tool_choice
            && !crate::spec::valid_name(name)
        {
            return Err((
                "tool_choice",
                format!(
                    "{:?} is not \"auto\", \"required\", \"none\" or a tool name",
                    crate::outcome::clip(name, 80)
                ),
            ));
        }
        if self.tool_choice_steps == 0 {
            return Err((
                "tool_choice_steps",
                "must be at least 1 (it counts the first steps tool_choice applies to)".into(),
            ));
        }
        if !self.parallel_tool_calls && self.max_tool_calls_per_turn.get() > 1 {
            return Err((
                "max_tool_calls_per_turn",
                "must be 1 when parallel_tool_calls = false (one call per turn)".into(),
            ));
        }
        let within = |key: &'static str, value: Option<f64>, high: f64| match value {
            Some(v) if !(v.is_finite() && (0.0..=high).contains(&v)) => {
                Err((key, format!("{v} is not between 0 and {high}")))
            }
            _ => Ok(()),
        };
        // Anthropic takes temperatures up to 1, OpenAI up to 2.
        let hottest = if self.provider == Provider::Anthropic {
            1.0
        } else {
            2.0
        };
        within("temperature", self.sampling.temperature, hottest)?;
        within("top_p", self.sampling.top_p, 1.0)?;
        if self.sampling.stop.len() > 4 || self.sampling.stop.iter().any(String::is_empty) {
            return Err((
                "stop",
                "give at most 4 stop sequences, none of them empty".into(),
            ));
        }
        if self
            .max_run_tokens
            .is_some_and(|limit| limit < u64::from(least))
        {
            return Err(("max_run_tokens", at_least(least, self.provider)));
        }
        if let Some(prices) = &self.prices {
            within("prices", Some(prices.input), f64::MAX)?;
            within("prices", Some(prices.output), f64::MAX)?;
        }
        within("max_run_cost", self.max_run_cost, f64::MAX)?;
        if self.max_run_cost.is_some() && self.prices.is_none() {
            return Err((
                "max_run_cost",
                "needs prices to estimate spend; add [model.prices] input = …, output = … (dollars per million tokens)".into(),
            ));
        }
        if let Some(format) = &self.response_format {
            format.check().map_err(|e| ("response_format", e))?;
        }
        Ok(())
    }
}
