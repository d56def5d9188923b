//! The `[model]` table, validated: which endpoint ([`ModelConfig`]), and
//! every control the agent loop offers ([`LoopControls`]: tool choice,
//! parallel calls, sampling, budgets, prices, a structured final answer).
//!
//! A leaf module, beside the providers that read it but importing none of
//! them: the manifest parses into these types, the command line overrides
//! them ([`ModelConfig::apply`]), and the providers and the agent loop read
//! them. Everything here is checked in one place, so a value that passed
//! is one the providers can send.

mod base_url;
mod controls;

use std::time::Duration;

pub use base_url::{BaseUrl, BaseUrlError};
pub use controls::{
    DEFAULT_CALLS_PER_TURN, LoopControls, Prices, ResponseFormat, Sampling, SchemaFileError,
    ToolChoice, default_calls_per_turn,
};

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

/// The fewest output tokens the Responses API lets one call ask for in
/// `max_output_tokens`: it refuses a request that asks for fewer.
pub const RESPONSES_MIN_OUTPUT_TOKENS: u32 = 16;

impl Provider {
    /// The fewest output tokens the endpoint lets one call ask for (the
    /// Responses API's [`RESPONSES_MIN_OUTPUT_TOKENS`]; 1 for the others).
    #[must_use]
    pub const fn min_output_tokens(self) -> u32 {
        match self {
            Self::OpenAIResponses => RESPONSES_MIN_OUTPUT_TOKENS,
            Self::OpenAI | Self::Anthropic => 1,
        }
    }

    /// The hottest temperature the endpoint takes: Anthropic's go up to 1,
    /// OpenAI's up to 2.
    const fn hottest(self) -> f64 {
        match self {
            Self::Anthropic => 1.0,
            Self::OpenAI | Self::OpenAIResponses => 2.0,
        }
    }
}

/// The `[model]` table, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Wire format.
    pub provider: Provider,
    /// Endpoint base URL, e.g. `http://127.0.0.1:8080/v1`.
    pub base_url: BaseUrl,
    /// Model name sent with each request.
    pub model: String,
    /// Environment variable holding the API key; the key itself never
    /// appears in the manifest, the logs or the transcript.
    pub api_key_env: Option<String>,
    /// Stream answers over SSE (default true).
    pub stream: bool,
    /// Per attempt: how long to wait for the whole answer, or, streaming,
    /// for the next byte (default 120 s).
    pub timeout: Duration,
    /// A system prompt put before each task (`run --system` replaces it).
    pub system: Option<String>,
    /// How the agent loop runs against this endpoint: steps, tokens,
    /// retries, tool choice, sampling, budgets, a structured answer.
    pub controls: LoopControls,
}

impl ModelConfig {
    /// An endpoint of `provider` with the defaults.
    pub fn new(provider: Provider, base_url: BaseUrl, model: impl Into<String>) -> Self {
        Self {
            provider,
            base_url,
            model: model.into(),
            api_key_env: None,
            stream: true,
            timeout: Duration::from_secs(120),
            system: None,
            controls: LoopControls::default(),
        }
    }

    /// An OpenAI-compatible endpoint with the defaults.
    pub fn openai(base_url: BaseUrl, model: impl Into<String>) -> Self {
        Self::new(Provider::OpenAI, base_url, model)
    }

    /// Apply `overrides` (each one given replaces the setting), then check
    /// the result as [`ModelConfig::check`] does: what the command line does
    /// with its flags, and the manifest with its keys.
    ///
    /// # Errors
    ///
    /// The setting at fault and what to write instead. The settings are
    /// left changed.
    pub fn apply(&mut self, overrides: Overrides) -> Result<(), InvalidSetting> {
        let Overrides {
            base_url,
            model,
            provider,
            system,
            controls,
        } = overrides;
        if let Some(base_url) = base_url {
            self.base_url = base_url;
        }
        if let Some(model) = model {
            self.model = model;
        }
        if let Some(provider) = provider {
            self.provider = provider;
        }
        if system.is_some() {
            self.system = system;
        }
        self.controls.apply(controls)?;
        self.check()
    }

    /// Check the settings that must agree with each other or lie in a
    /// range, after the manifest or the command line set them.
    ///
    /// # Errors
    ///
    /// The `[model]` key at fault and what to write instead.
    pub fn check(&self) -> Result<(), InvalidSetting> {
        self.controls.check(self.provider)
    }
}

/// Settings that replace `[model]`'s for a run (the command line's flags),
/// each one only when given. See [`ModelConfig::apply`].
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// The endpoint's base URL.
    pub base_url: Option<BaseUrl>,
    /// The model's name.
    pub model: Option<String>,
    /// The wire format.
    pub provider: Option<Provider>,
    /// The system prompt.
    pub system: Option<String>,
    /// The agent loop's controls.
    pub controls: ControlOverrides,
}

/// Loop controls that replace [`LoopControls`]' own, each one only when
/// given. See [`LoopControls`] for what each means.
#[derive(Debug, Clone, Default)]
pub struct ControlOverrides {
    /// Model calls per task.
    pub max_steps: Option<u32>,
    /// Tokens the model may generate per call.
    pub max_tokens: Option<u32>,
    /// Retries of a model call after a transient failure.
    pub max_retries: Option<u32>,
    /// Whether the model must call tools.
    pub tool_choice: Option<ToolChoice>,
    /// How many first steps a forcing tool choice applies to.
    pub tool_choice_steps: Option<u32>,
    /// Parallel tool calls on or off; off also caps a turn at one call, and
    /// on lifts that cap to the default (see
    /// [`LoopControls::set_parallel_tool_calls`]).
    pub parallel_tool_calls: Option<bool>,
    /// The most tool calls run per turn (0 is refused).
    pub max_tool_calls_per_turn: Option<u32>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// A sampling seed.
    pub seed: Option<i64>,
    /// Stop sequences, replacing all of the configured ones.
    pub stop: Option<Vec<String>>,
    /// Tokens a run may spend.
    pub max_run_tokens: Option<u64>,
    /// Dollars a run may spend.
    pub max_run_cost: Option<f64>,
    /// Prices for the spend estimate.
    pub prices: Option<Prices>,
    /// A schema for the final answer.
    pub response_format: Option<ResponseFormat>,
    /// Code mode on or off.
    pub code_mode: Option<bool>,
}

/// A model setting that is out of range or disagrees with another: the
/// key at fault (a `[model]` key, e.g. `max_tokens`) and what to write
/// instead. The caller says where the key was set (the manifest names its
/// file, the command line its flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct InvalidSetting {
    key: &'static str,
    message: String,
}

impl InvalidSetting {
    pub(crate) fn new(key: &'static str, message: impl Into<String>) -> Self {
        Self {
            key,
            message: message.into(),
        }
    }

    /// The `[model]` key at fault, e.g. `max_tokens`.
    #[must_use]
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// What is wrong and what to write instead.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ModelConfig {
        ModelConfig::openai("http://127.0.0.1:8080/v1".parse().unwrap(), "m")
    }

    #[test]
    fn overrides_replace_only_what_they_give_and_are_checked() {
        let mut config = config();
        config.controls.sampling.temperature = Some(0.5);
        config
            .apply(Overrides {
                provider: Some(Provider::Anthropic),
                controls: ControlOverrides {
                    max_steps: Some(3),
                    stop: Some(vec!["END".into()]),
                    ..ControlOverrides::default()
                },
                ..Overrides::default()
            })
            .unwrap();
        assert_eq!(config.provider, Provider::Anthropic);
        assert_eq!(config.controls.max_steps, 3);
        assert_eq!(config.controls.sampling.temperature, Some(0.5));
        assert_eq!(config.controls.sampling.stop, ["END"]);
        // Checked against the provider the overrides chose: Anthropic's
        // temperatures end at 1.
        let error = config
            .apply(Overrides {
                controls: ControlOverrides {
                    temperature: Some(1.5),
                    ..ControlOverrides::default()
                },
                ..Overrides::default()
            })
            .unwrap_err();
        assert_eq!(error.key(), "temperature");
        assert_eq!(error.message(), "1.5 is not between 0 and 1");
    }

    #[test]
    fn a_zero_cap_on_calls_per_turn_is_refused_and_named() {
        let error = config()
            .apply(Overrides {
                controls: ControlOverrides {
                    max_tool_calls_per_turn: Some(0),
                    ..ControlOverrides::default()
                },
                ..Overrides::default()
            })
            .unwrap_err();
        assert_eq!(error.key(), "max_tool_calls_per_turn");
        assert!(!error.to_string().contains("--"), "no flag names: {error}");
    }

    #[test]
    fn turning_parallel_calls_off_and_on_keeps_the_cap_in_step() {
        let mut config = config();
        let parallel = |on| Overrides {
            controls: ControlOverrides {
                parallel_tool_calls: Some(on),
                ..ControlOverrides::default()
            },
            ..Overrides::default()
        };
        config.apply(parallel(false)).unwrap();
        assert_eq!(config.controls.max_tool_calls_per_turn.get(), 1);
        config.apply(parallel(true)).unwrap();
        assert_eq!(
            config.controls.max_tool_calls_per_turn,
            DEFAULT_CALLS_PER_TURN
        );
    }

    #[test]
    fn the_responses_api_needs_sixteen_output_tokens() {
        let mut config = config();
        config.provider = Provider::OpenAIResponses;
        config.controls.max_tokens = 15;
        let error = config.check().unwrap_err();
        assert_eq!(error.key(), "max_tokens");
        assert!(error.message().contains("at least 16"), "{error}");
        config.controls.max_tokens = 16;
        assert_eq!(config.check(), Ok(()));
    }
}
