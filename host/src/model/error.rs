//! How a model call fails ([`ModelError`]), and why a client cannot be
//! made ([`ClientError`]).

use std::fmt;
use std::time::Duration;

use serde::Serialize;

/// What kind of failure a model call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The endpoint answered with an HTTP error status.
    Status(u16),
    /// No connection, or it broke before an answer.
    Connection,
    /// No answer in time.
    Timeout,
    /// A stream ended before the answer was complete.
    StreamCut,
    /// The endpoint said it is overloaded or failed mid-stream.
    Overloaded,
    /// The answer could not be understood.
    Protocol,
}

/// A failed model call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ModelError {
    /// The kind of failure.
    pub kind: ModelErrorKind,
    /// What happened, for the operator. Never contains the API key.
    pub message: String,
    /// How long the endpoint asked us to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl ModelError {
    /// A failure of `kind`, said by `message`.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// An answer that could not be understood: a
    /// [`ModelErrorKind::Protocol`] failure.
    pub(crate) fn protocol(message: impl Into<String>) -> Self {
        Self::new(ModelErrorKind::Protocol, message)
    }

    /// Whether trying again may succeed: rate limits, server errors,
    /// timeouts, broken connections and cut streams. Client errors (bad
    /// request, bad key, unknown model) are final.
    pub fn retryable(&self) -> bool {
        match self.kind {
            ModelErrorKind::Status(status) => {
                status == 408 || status == 409 || status == 429 || status >= 500
            }
            ModelErrorKind::Connection
            | ModelErrorKind::Timeout
            | ModelErrorKind::StreamCut
            | ModelErrorKind::Overloaded => true,
            ModelErrorKind::Protocol => false,
        }
    }

    /// Classify a reqwest failure.
    pub(crate) fn from_reqwest(error: &reqwest::Error, what: &str) -> Self {
        let kind = if error.is_timeout() {
            ModelErrorKind::Timeout
        } else if error.is_decode() {
            ModelErrorKind::Protocol
        } else {
            ModelErrorKind::Connection
        };
        // reqwest's messages name the URL, never the headers.
        let mut message = format!("{what}: {error}");
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            message += &format!(": {cause}");
            source = cause.source();
        }
        Self::new(kind, message)
    }

    /// An HTTP error status with the start of its body.
    pub(crate) fn from_status(
        status: reqwest::StatusCode,
        retry_after: Option<Duration>,
        body: &str,
    ) -> Self {
        let hint = match status.as_u16() {
            401 | 403 => {
                " (check the API key: [model] api_key_env names the variable that holds it)"
            }
            404 => " (check [model] base_url and model)",
            _ => "",
        };
        let body = super::excerpt(body);
        Self {
            kind: ModelErrorKind::Status(status.as_u16()),
            message: format!("the model endpoint answered {status}{hint}: {body}"),
            retry_after,
        }
    }
}

/// Why a model client cannot be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// `[model] api_key_env` names a variable that is not set.
    #[error(
        "[model] api_key_env = {0:?}, but {0} is not set; export it or remove api_key_env for endpoints without keys"
    )]
    MissingApiKey(String),
    /// The HTTP client cannot be built (its TLS roots cannot be loaded).
    #[error("cannot build the HTTP client: {0}")]
    Http(#[source] reqwest::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_transient_failures_are_retryable() {
        let status = |code| ModelError::new(ModelErrorKind::Status(code), "");
        assert!(status(429).retryable());
        assert!(status(500).retryable() && status(503).retryable() && status(529).retryable());
        assert!(!status(400).retryable() && !status(401).retryable() && !status(404).retryable());
        assert!(ModelError::new(ModelErrorKind::StreamCut, "").retryable());
        assert!(ModelError::new(ModelErrorKind::Timeout, "").retryable());
        assert!(!ModelError::new(ModelErrorKind::Protocol, "").retryable());
    }

    #[test]
    fn a_missing_api_key_names_the_variable_and_the_fix() {
        let error = ClientError::MissingApiKey("OPENAI_API_KEY".into()).to_string();
        assert!(
            error.starts_with(
                "[model] api_key_env = \"OPENAI_API_KEY\", but OPENAI_API_KEY is not set"
            ),
            "{error}"
        );
    }
}
