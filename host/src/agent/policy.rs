//! [`AgentPolicy`]: how the loop behaves, and its check against the tools
//! and the endpoint of a run.

use std::time::Duration;

use crate::model::ModelError;
use crate::model::config::{LoopControls, ModelConfig, ToolChoice};
use crate::spec::ToolSpec;

/// How the loop behaves: the loop controls `[model]` sets (or an embedder
/// does: [`LoopControls`]), and how it waits between retries of a model
/// call. [`AgentPolicy::from_config`] reads it from `[model]`; the defaults
/// are the manifest's.
#[derive(Debug, Clone)]
pub struct AgentPolicy {
    /// Steps, tokens, retries, tool choice, parallel calls, sampling,
    /// budgets, prices and a structured answer, as in `[model]`.
    pub controls: LoopControls,
    /// The first retry's delay; each further one doubles, up to `max_delay`.
    pub base_delay: Duration,
    /// The longest wait between retries (also caps `Retry-After`).
    pub max_delay: Duration,
}

impl Default for AgentPolicy {
    fn default() -> Self {
        Self::new(LoopControls::default())
    }
}

impl AgentPolicy {
    /// A policy with `controls`, and retries that wait 500 ms at first and
    /// 30 s at the most.
    #[must_use]
    pub fn new(controls: LoopControls) -> Self {
        Self {
            controls,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }

    /// The policy `[model]` describes.
    #[must_use]
    pub fn from_config(config: &ModelConfig) -> Self {
        Self::new(config.controls.clone())
    }

    /// Check the policy against the tools a run offers and the endpoint
    /// it asks: a named `tool_choice` must name one of the tools, a
    /// structured answer's name must not, and a call must be let generate
    /// at least `least_tokens`, the fewest the endpoint accepts
    /// ([`ModelClient::min_output_tokens`](crate::model::ModelClient::min_output_tokens)). (A system prompt is not part
    /// of the policy: it is the first of the messages a run is given,
    /// [`Message::system`](crate::model::Message::system).)
    ///
    /// # Errors
    ///
    /// A [`PolicyError`] saying what is wrong and what to change.
    pub fn check(&self, tools: &[ToolSpec], least_tokens: u32) -> Result<(), PolicyError> {
        let controls = &self.controls;
        if controls.max_steps == 0 {
            return Err(PolicyError::NoSteps);
        }
        let least = least_tokens.max(1);
        if controls.max_tokens < least {
            return Err(PolicyError::TooFewTokens {
                max_tokens: controls.max_tokens,
                least,
            });
        }
        if let Some(limit) = controls.max_run_tokens
            && limit < u64::from(least)
        {
            return Err(PolicyError::RunTokensBelowOneCall { limit, least });
        }
        let exists = |name: &str| tools.iter().any(|t| t.name == name);
        if let ToolChoice::Tool(name) = &controls.tool_choice
            && !exists(name)
        {
            return Err(PolicyError::UnknownTool {
                name: name.clone(),
                tools: tools.iter().map(|t| t.name.clone()).collect(),
            });
        }
        if let Some(format) = &controls.response_format
            && exists(&format.name)
        {
            return Err(PolicyError::AnswerNamedLikeTool {
                name: format.name.clone(),
            });
        }
        Ok(())
    }

    /// The tool choice for step `step` (1-based).
    pub(super) fn tool_choice_at(&self, step: u32) -> &ToolChoice {
        let controls = &self.controls;
        if controls.tool_choice.forces_a_call() && step > controls.tool_choice_steps {
            ToolChoice::AUTO
        } else {
            &controls.tool_choice
        }
    }

    /// The wait before retry number `attempt` (1-based): exponential with
    /// full jitter in its upper half, or what the endpoint asked for.
    pub(super) fn delay(&self, attempt: u32, error: &ModelError) -> Duration {
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

/// A policy that does not fit the tools or the endpoint of a run: nothing
/// is asked. Each says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// `max_steps` is 0.
    #[error("max_steps must be at least 1: a run must be able to ask the model")]
    NoSteps,
    /// `max_tokens` is below what the endpoint lets a call ask for.
    #[error(
        "max_tokens is {max_tokens}, and the model endpoint takes no fewer than {least} output tokens a call; raise it to at least {least}"
    )]
    TooFewTokens {
        /// The policy's `max_tokens`.
        max_tokens: u32,
        /// The fewest the endpoint takes.
        least: u32,
    },
    /// `max_run_tokens` cannot pay for one call.
    #[error(
        "max_run_tokens is {limit}, less than the {least} output tokens the model endpoint takes at the least for one call; raise it to at least {least}"
    )]
    RunTokensBelowOneCall {
        /// The policy's `max_run_tokens`.
        limit: u64,
        /// The fewest the endpoint takes.
        least: u32,
    },
    /// `tool_choice` names no tool of the run.
    #[error("tool_choice names the tool {name:?}, which no loaded tool is; name one of: {}", .tools.join(", "))]
    UnknownTool {
        /// The name.
        name: String,
        /// The tools there are.
        tools: Vec<String>,
    },
    /// The structured answer's name is a tool's.
    #[error(
        "response_format is named {name:?}, like a loaded tool; give it another name (with Anthropic the answer is given through a tool of that name)"
    )]
    AnswerNamedLikeTool {
        /// The name.
        name: String,
    },
    /// The structured answer's schema does not compile.
    #[error("response_format {0}")]
    AnswerSchema(String),
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

    #[test]
    fn a_forcing_tool_choice_holds_for_its_first_steps_only() {
        let policy = AgentPolicy::new(LoopControls {
            tool_choice: ToolChoice::Required,
            tool_choice_steps: 2,
            ..LoopControls::default()
        });
        assert_eq!(policy.tool_choice_at(2), &ToolChoice::Required);
        assert_eq!(policy.tool_choice_at(3), &ToolChoice::Auto);
    }

    #[test]
    fn a_tool_choice_naming_no_tool_lists_the_tools() {
        let policy = AgentPolicy::new(LoopControls {
            tool_choice: ToolChoice::Tool("nope".into()),
            ..LoopControls::default()
        });
        let error = policy.check(&[], 1).unwrap_err();
        assert_eq!(
            error.to_string(),
            "tool_choice names the tool \"nope\", which no loaded tool is; name one of: "
        );
    }
}
