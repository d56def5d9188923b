//! [`BaseUrl`]: a model endpoint's base URL, checked once wherever it comes
//! from.

use std::fmt;
use std::str::FromStr;

/// A model endpoint's base URL, e.g. `http://127.0.0.1:8080/v1`: an
/// `http://` or `https://` URL with a host, kept without a trailing `/` so
/// that a provider's path (`/chat/completions`) follows it. The manifest's
/// `base_url`, the command line's `--base-url` and code all read it through
/// [`FromStr`], so each refuses the same URLs with the same words.
///
/// # Examples
///
/// ```
/// use toolhost::model::config::BaseUrl;
///
/// let url: BaseUrl = "http://127.0.0.1:8080/v1/".parse().unwrap();
/// assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1");
/// assert!("127.0.0.1:8080/v1".parse::<BaseUrl>().is_err());
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BaseUrl(String);

impl BaseUrl {
    /// The URL, without a trailing `/`.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for BaseUrl {
    type Err = BaseUrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if !(text.starts_with("http://") || text.starts_with("https://")) {
            return Err(BaseUrlError::Scheme(text.to_owned()));
        }
        match url::Url::parse(text) {
            Ok(url) if url.host().is_some() => Ok(Self(text.trim_end_matches('/').to_owned())),
            Ok(_) => Err(BaseUrlError::NotUrl {
                text: text.to_owned(),
                reason: "it names no host".to_owned(),
            }),
            Err(error) => Err(BaseUrlError::NotUrl {
                text: text.to_owned(),
                reason: error.to_string(),
            }),
        }
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Shown as the string it is, as the manifest spells it.
impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<str> for BaseUrl {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Why text is not a model endpoint's base URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BaseUrlError {
    /// It does not start with `http://` or `https://`.
    #[error("{0:?} must start with http:// or https://, e.g. \"http://127.0.0.1:8080/v1\"")]
    Scheme(String),
    /// It starts like one, but is no URL with a host.
    #[error("{text:?} is not a URL ({reason}); write e.g. \"http://127.0.0.1:8080/v1\"")]
    NotUrl {
        /// The text.
        text: String,
        /// What the URL parser found wrong.
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_with_a_host_are_base_urls() {
        for good in [
            "http://127.0.0.1:8080/v1",
            "https://api.openai.com/v1",
            "http://[::1]:11434/v1",
            "https://api.example",
        ] {
            let url: BaseUrl = good.parse().unwrap();
            assert_eq!(url.as_str(), good);
        }
        assert_eq!(
            "127.0.0.1:8080/v1"
                .parse::<BaseUrl>()
                .unwrap_err()
                .to_string(),
            "\"127.0.0.1:8080/v1\" must start with http:// or https://, e.g. \"http://127.0.0.1:8080/v1\""
        );
        for bad in ["ftp://x", "", "localhost:8080"] {
            assert!(matches!(
                bad.parse::<BaseUrl>(),
                Err(BaseUrlError::Scheme(_))
            ));
        }
        for bad in ["http://", "https://[::1", "http://a:99999/v1"] {
            let error = bad.parse::<BaseUrl>().unwrap_err();
            assert!(matches!(error, BaseUrlError::NotUrl { .. }), "{bad}");
            assert!(error.to_string().contains("is not a URL"), "{error}");
        }
    }

    #[test]
    fn a_trailing_slash_is_dropped_so_paths_follow_it() {
        let url: BaseUrl = "http://127.0.0.1:8080/v1//".parse().unwrap();
        assert_eq!(url.to_string(), "http://127.0.0.1:8080/v1");
        assert_eq!(format!("{url:?}"), "\"http://127.0.0.1:8080/v1\"");
    }
}
