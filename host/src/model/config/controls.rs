//! [`LoopControls`]: how the agent loop runs against an endpoint, and the
//! types of its controls (tool choice, sampling, prices, a structured
//! answer), each checked here.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::{ControlOverrides, InvalidSetting, Provider};

/// How the agent loop runs: the `[model]` keys (and `run` flags) that an
/// embedder sets on [`AgentPolicy`](crate::agent::AgentPolicy) too. The
/// defaults are the manifest's.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopControls {
    /// Model calls per task before the loop gives up (default 10).
    pub max_steps: u32,
    /// Tokens the model may generate per call (default 1024).
    pub max_tokens: u32,
    /// Retries of a model call after a transient failure (default 4).
    pub max_retries: u32,
    /// Whether the model must call tools (default `auto`). `required` and a
    /// named tool hold for the first `tool_choice_steps` steps only, so the
    /// loop can end.
    pub tool_choice: ToolChoice,
    /// For `required` or a named tool: how many first steps it applies to
    /// (default 1), after which the model may answer.
    pub tool_choice_steps: u32,
    /// Let the model call several tools in one turn (default true).
    pub parallel_tool_calls: bool,
    /// The most tool calls run per turn; later ones in the turn are
    /// answered `denied_by_user` (retryable) and not run (default 16; 1
    /// when `parallel_tool_calls` is false).
    pub max_tool_calls_per_turn: NonZeroU32,
    /// Sampling, passed through where the provider accepts it.
    pub sampling: Sampling,
    /// Tokens (input and output) a run may spend, checked before each
    /// model call, which may generate at most what remains (default: no
    /// cap).
    pub max_run_tokens: Option<u64>,
    /// Dollars a run may spend by the `prices` estimate (default: no cap).
    pub max_run_cost: Option<f64>,
    /// Prices for the spend estimate.
    pub prices: Option<Prices>,
    /// A schema the final answer must satisfy.
    pub response_format: Option<ResponseFormat>,
    /// Code mode: offer the model the tools that call tools (the code
    /// tool's `run_code`) instead of the tools they may call, so that the
    /// model writes one program rather than making many calls (default
    /// false: every tool is offered, `run_code` beside the others).
    pub code_mode: bool,
}

impl Default for LoopControls {
    fn default() -> Self {
        Self {
            max_steps: 10,
            max_tokens: 1024,
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
            code_mode: false,
        }
    }
}

impl LoopControls {
    /// Turn parallel tool calls on or off, keeping the per-turn cap in
    /// step: off means one call a turn, and turning them back on lifts that
    /// cap to the default.
    pub fn set_parallel_tool_calls(&mut self, parallel: bool) {
        if !parallel || !self.parallel_tool_calls {
            self.max_tool_calls_per_turn = default_calls_per_turn(parallel);
        }
        self.parallel_tool_calls = parallel;
    }

    /// Replace the controls `overrides` gives. Unchecked but for a cap of
    /// zero calls per turn, which the type cannot hold.
    pub(super) fn apply(&mut self, overrides: ControlOverrides) -> Result<(), InvalidSetting> {
        let ControlOverrides {
            max_steps,
            max_tokens,
            max_retries,
            tool_choice,
            tool_choice_steps,
            parallel_tool_calls,
            max_tool_calls_per_turn,
            temperature,
            top_p,
            seed,
            stop,
            max_run_tokens,
            max_run_cost,
            prices,
            response_format,
            code_mode,
        } = overrides;
        self.code_mode = code_mode.unwrap_or(self.code_mode);
        self.max_steps = max_steps.unwrap_or(self.max_steps);
        self.max_tokens = max_tokens.unwrap_or(self.max_tokens);
        self.max_retries = max_retries.unwrap_or(self.max_retries);
        if let Some(choice) = tool_choice {
            self.tool_choice = choice;
        }
        self.tool_choice_steps = tool_choice_steps.unwrap_or(self.tool_choice_steps);
        if let Some(parallel) = parallel_tool_calls {
            self.set_parallel_tool_calls(parallel);
        }
        if let Some(cap) = max_tool_calls_per_turn {
            self.max_tool_calls_per_turn = NonZeroU32::new(cap).ok_or_else(|| {
                InvalidSetting::new(
                    "max_tool_calls_per_turn",
                    "must be at least 1 (it caps the calls run per turn)",
                )
            })?;
        }
        let sampling = &mut self.sampling;
        sampling.temperature = temperature.or(sampling.temperature);
        sampling.top_p = top_p.or(sampling.top_p);
        sampling.seed = seed.or(sampling.seed);
        if let Some(stop) = stop {
            sampling.stop = stop;
        }
        self.max_run_tokens = max_run_tokens.or(self.max_run_tokens);
        self.max_run_cost = max_run_cost.or(self.max_run_cost);
        self.prices = prices.or(self.prices);
        if response_format.is_some() {
            self.response_format = response_format;
        }
        Ok(())
    }

    /// Check the controls that must agree with each other, or lie in a
    /// range, for an endpoint of `provider`.
    ///
    /// # Errors
    ///
    /// The `[model]` key at fault and what to write instead.
    pub fn check(&self, provider: Provider) -> Result<(), InvalidSetting> {
        let fail = |key, message: String| Err(InvalidSetting::new(key, message));
        if self.max_steps == 0 {
            return fail("max_steps", "must be at least 1".into());
        }
        let least = provider.min_output_tokens();
        if self.max_tokens < least {
            return fail("max_tokens", at_least(least, provider));
        }
        if let ToolChoice::Tool(name) = &self.tool_choice
            && !crate::spec::valid_name(name)
        {
            return fail(
                "tool_choice",
                format!(
                    "{:?} is not \"auto\", \"required\", \"none\" or a tool name",
                    crate::outcome::clip(name, 80)
                ),
            );
        }
        if self.tool_choice_steps == 0 {
            return fail(
                "tool_choice_steps",
                "must be at least 1 (it counts the first steps tool_choice applies to)".into(),
            );
        }
        if !self.parallel_tool_calls && self.max_tool_calls_per_turn.get() > 1 {
            return fail(
                "max_tool_calls_per_turn",
                "must be 1 when parallel_tool_calls = false (one call per turn)".into(),
            );
        }
        within("temperature", self.sampling.temperature, provider.hottest())?;
        within("top_p", self.sampling.top_p, 1.0)?;
        if self.sampling.stop.len() > 4 || self.sampling.stop.iter().any(String::is_empty) {
            return fail(
                "stop",
                "give at most 4 stop sequences, none of them empty".into(),
            );
        }
        if self
            .max_run_tokens
            .is_some_and(|limit| limit < u64::from(least))
        {
            return fail("max_run_tokens", at_least(least, provider));
        }
        self.check_spend()?;
        if let Some(format) = &self.response_format {
            format.check()?;
        }
        Ok(())
    }

    /// Prices and the spending cap: numbers, and no cap without prices.
    fn check_spend(&self) -> Result<(), InvalidSetting> {
        if let Some(prices) = &self.prices {
            within("prices", Some(prices.input), f64::MAX)?;
            within("prices", Some(prices.output), f64::MAX)?;
        }
        within("max_run_cost", self.max_run_cost, f64::MAX)?;
        if self.max_run_cost.is_some() && self.prices.is_none() {
            return Err(InvalidSetting::new(
                "max_run_cost",
                "needs prices to estimate spend; add [model.prices] input = …, output = … (dollars per million tokens)",
            ));
        }
        Ok(())
    }
}

/// `value`, if set, must be a number from 0 to `high`.
fn within(key: &'static str, value: Option<f64>, high: f64) -> Result<(), InvalidSetting> {
    match value {
        Some(v) if !(v.is_finite() && (0.0..=high).contains(&v)) => Err(InvalidSetting::new(
            key,
            format!("{v} is not between 0 and {high}"),
        )),
        _ => Ok(()),
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

/// The per-turn cap when none is configured: [`DEFAULT_CALLS_PER_TURN`],
/// or one call when calls are not parallel.
#[must_use]
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

impl ResponseFormat {
    /// The name a structured answer's schema gets when none is given.
    pub const DEFAULT_NAME: &'static str = "final_answer";

    /// A format for `schema`, named [`ResponseFormat::DEFAULT_NAME`], not
    /// strict.
    #[must_use]
    pub fn new(schema: Value) -> Self {
        Self {
            name: Self::DEFAULT_NAME.to_owned(),
            schema,
            strict: false,
        }
    }

    /// Read a JSON Schema from the file at `path` (the manifest's
    /// `schema_file`, `run --response-schema`).
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not JSON. Whether it is a schema
    /// is for [`ResponseFormat::check`].
    pub fn read_schema(path: &Path) -> Result<Value, SchemaFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| SchemaFileError::Unreadable {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| SchemaFileError::NotJson {
            path: path.to_owned(),
            source,
        })
    }

    /// Check the name and that the schema is an object schema that
    /// compiles, within the size any tool schema may have.
    ///
    /// # Errors
    ///
    /// What is wrong, and how to fix it, under the key `response_format`.
    pub fn check(&self) -> Result<(), InvalidSetting> {
        let fail = |message: String| Err(InvalidSetting::new("response_format", message));
        if !crate::spec::valid_name(&self.name) {
            return fail(format!(
                "the name {:?} must match ^[A-Za-z0-9_-]{{1,64}}$",
                crate::outcome::clip(&self.name, 80)
            ));
        }
        let is_object = self.schema.as_object().is_some_and(|schema| {
            schema.get("type").is_none_or(|t| t == "object") && schema.contains_key("properties")
        });
        if !is_object {
            return fail(
                "must be an object schema, e.g. {\"type\": \"object\", \"properties\": {…}}: the providers take only objects as structured answers".into(),
            );
        }
        let size = self.schema.to_string().len();
        if size > crate::spec::MAX_SCHEMA {
            return fail(format!(
                "is {size} bytes; at most {}",
                crate::spec::MAX_SCHEMA
            ));
        }
        self.compile()
            .map(drop)
            .map_err(|e| InvalidSetting::new("response_format", e))
    }

    /// The compiled schema, for checking answers.
    pub(crate) fn compile(&self) -> Result<crate::arguments::CompiledSchema, String> {
        crate::arguments::CompiledSchema::compile(&self.schema, &mut Default::default())
            .map_err(|e| format!("is not valid JSON Schema: {e}"))
    }
}

/// A schema file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaFileError {
    /// It cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not JSON.
    #[error("{} is not JSON: {source}", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// Where the JSON breaks.
        source: serde_json::Error,
    },
}
