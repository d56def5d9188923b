//! Durations as people write them: `"30s"`, `"5m"`, `"100ms"`, `"1s 500ms"`.
//!
//! The one parser for every duration the manifest and the command line
//! take (`[limits] timeout`, `[model] timeout`, a tool's `cache`,
//! `--timeout`, `--drain`), so that each accepts the same spellings. A leaf
//! module: it imports nothing of the crate.

use std::time::Duration;

/// Read a duration: numbers, each followed by a unit (`ns`, `us`, `ms`,
/// `s`, `m`, `h`, `d` and their long forms), summed.
///
/// # Errors
///
/// A [`DurationError`] quoting the text, when it is no duration or one too
/// long to count.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(toolhost::duration::parse("1m 30s"), Ok(Duration::from_secs(90)));
/// assert_eq!(toolhost::duration::parse("100ms"), Ok(Duration::from_millis(100)));
/// assert!(toolhost::duration::parse("soon").is_err());
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    humantime::parse_duration(text).map_err(|error| DurationError {
        text: text.to_owned(),
        reason: error.to_string(),
    })
}

/// Text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration ({reason}); write e.g. \"30s\", \"5m\" or \"100ms\"")]
pub struct DurationError {
    text: String,
    reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_the_manifest_documents_is_read() {
        for (text, expected) in [
            ("5s", Duration::from_secs(5)),
            ("500ms", Duration::from_millis(500)),
            ("1s 2ms", Duration::from_millis(1002)),
            ("5m", Duration::from_secs(300)),
            ("24h", Duration::from_secs(86_400)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn what_is_no_duration_is_an_error_that_quotes_it_and_shows_the_form() {
        for text in ["soon", "", "5", "-1s", "99999999999999999999999s"] {
            let error = parse(text).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("{text:?} is not a duration")),
                "{error}"
            );
            assert!(error.contains("\"30s\""), "{error}");
        }
    }
}
