//! What a component may touch: directories, HTTP origins, environment
//! variables and configuration values. Deny by default: [`Grants::none`]
//! computes and nothing else.
//!
//! This is the one place a manifest's words become capabilities. The sandbox
//! builds each call's WASI context and HTTP hook from a [`Grants`] and from
//! nothing else, so a grant that is not here does not exist.
//!
//! # Examples
//!
//! ```
//! use toolhost::grants::{FileMode, Grants};
//!
//! # fn main() -> Result<(), toolhost::grants::GrantError> {
//! let dir = std::env::temp_dir();
//! let grants = Grants::none()
//!     .allow_host("https://api.example.org")?
//!     .allow_host("https://*.wikipedia.org")?
//!     .file(&dir, "/data", FileMode::ReadOnly)?
//!     .env("UNITS", "metric")
//!     .config("api_key", "s3cret", true);
//! assert!(grants.hosts().allows("https", "fr.wikipedia.org", 443));
//! assert!(!grants.hosts().allows("http", "api.example.org", 80));
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Everything one component is allowed beyond pure computation.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    files: Vec<FileGrant>,
    hosts: AllowedHosts,
    env: Vec<(String, String)>,
    config: BTreeMap<String, ConfigValue>,
}

impl Grants {
    /// No capabilities at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// Allow HTTP requests to `pattern` (`scheme://host[:port]`; see [`HostPattern`]).
    ///
    /// # Errors
    ///
    /// When `pattern` is not of that form; the message says how to write it.
    pub fn allow_host(mut self, pattern: &str) -> Result<Self, GrantError> {
        self.hosts.0.push(pattern.parse()?);
        Ok(self)
    }

    /// Make host directory `host` visible to the tool as `guest`.
    ///
    /// # Errors
    ///
    /// When `host` is not an existing directory, `guest` is not an absolute
    /// path, or `guest` is granted twice.
    pub fn file(
        mut self,
        host: impl AsRef<Path>,
        guest: &str,
        mode: FileMode,
    ) -> Result<Self, GrantError> {
        let host = host.as_ref();
        if !host.is_dir() {
            return Err(GrantError(format!(
                "{} is not an existing directory; create it or fix the path",
                host.display()
            )));
        }
        if !guest.starts_with('/') {
            return Err(GrantError(format!(
                "guest path {guest:?} must be absolute, e.g. \"/data\""
            )));
        }
        let guest = guest.trim_end_matches('/');
        let guest = if guest.is_empty() { "/" } else { guest };
        if self.files.iter().any(|f| f.guest == guest) {
            return Err(GrantError(format!("guest path {guest:?} is granted twice")));
        }
        let host = host
            .canonicalize()
            .map_err(|e| GrantError(format!("cannot resolve {}: {e}", host.display())))?;
        self.files.push(FileGrant {
            host,
            guest: guest.to_owned(),
            mode,
        });
        Ok(self)
    }

    /// Set environment variable `name` to `value` inside the tool. The host's
    /// own environment is never inherited.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Make `value` readable through the `config(key)` import. A `secret`
    /// value is masked wherever the host logs or returns tool text.
    pub fn config(
        mut self,
        key: impl Into<String>,
        value: impl Into<String>,
        secret: bool,
    ) -> Self {
        self.config.insert(
            key.into(),
            ConfigValue {
                value: value.into(),
                secret,
            },
        );
        self
    }

    /// The granted directories.
    pub fn files(&self) -> &[FileGrant] {
        &self.files
    }

    /// The granted HTTP origins.
    pub fn hosts(&self) -> &AllowedHosts {
        &self.hosts
    }

    /// The environment variables the tool sees.
    pub fn env_vars(&self) -> &[(String, String)] {
        &self.env
    }

    /// The value granted under config `key`.
    pub fn config_value(&self, key: &str) -> Option<&str> {
        self.config.get(key).map(|c| c.value.as_str())
    }

    /// The config keys granted, with whether each is secret.
    pub fn config_keys(&self) -> impl Iterator<Item = (&str, bool)> {
        self.config.iter().map(|(k, v)| (k.as_str(), v.secret))
    }

    /// The secret values, to be masked in logs and tool output.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.config
            .values()
            .filter(|c| c.secret)
            .map(|c| c.value.as_str())
    }

    /// `text` with every secret value replaced by `[redacted]`: applied to
    /// tool output, tool logs and logged arguments.
    pub fn mask(&self, mut text: String) -> String {
        // Longest first, so a secret that contains another is masked whole.
        let mut secrets: Vec<&str> = self.secrets().collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        for secret in secrets {
            // Very short values would mask ordinary text; they are not
            // secrets worth the name.
            if secret.len() >= 4 && text.contains(secret) {
                text = text.replace(secret, "[redacted]");
            }
        }
        text
    }

    /// Whether this grants nothing: the tool can only compute.
    pub fn is_none(&self) -> bool {
        self.files.is_empty()
            && self.hosts.0.is_empty()
            && self.env.is_empty()
            && self.config.is_empty()
    }
}

/// A config value; `secret` ones never appear in logs or tool output.
#[derive(Clone)]
struct ConfigValue {
    value: String,
    secret: bool,
}

impl fmt::Debug for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.secret {
            f.write_str("<secret>")
        } else {
            self.value.fmt(f)
        }
    }
}

/// How a granted directory may be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileMode {
    /// Read files and list directories. The default.
    #[default]
    ReadOnly,
    /// Also create, write, rename and delete.
    ReadWrite,
}

impl fmt::Display for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ReadOnly => "read-only",
            Self::ReadWrite => "read-write",
        })
    }
}

/// A host directory visible to the tool under a guest path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileGrant {
    /// The directory on the host, canonicalized at load.
    pub host: PathBuf,
    /// Where the tool sees it, e.g. `/data`.
    pub guest: String,
    /// Read-only or read-write.
    pub mode: FileMode,
}

/// The HTTP origins a component may reach.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<HostPattern>);

impl AllowedHosts {
    /// Whether a request to `scheme://host:port` is allowed. `host` is matched
    /// case-insensitively; an IP address matches only a pattern that names it.
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.0.iter().any(|p| p.matches(scheme, host, port))
    }

    /// The patterns, as written.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.0
    }
}

/// One `allow_hosts` entry: `scheme://host[:port]`.
///
/// - `scheme` is `http` or `https`.
/// - `host` is a name (`example.org`), an IP address (`127.0.0.1`, `[::1]`),
///   a wildcard over subdomains (`*.example.org`, which does not match
///   `example.org` itself), or `*` for any host.
/// - `port` defaults to the scheme's (80 or 443); `*` allows any port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    scheme: String,
    host: HostMatch,
    port: PortMatch,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Any,
    Exact(String),
    /// `*.example.org`, stored as `.example.org`.
    Subdomains(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortMatch {
    Any,
    Exact(u16),
}

impl HostPattern {
    fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        if !self.scheme.eq_ignore_ascii_case(scheme) {
            return false;
        }
        if let PortMatch::Exact(allowed) = self.port
            && allowed != port
        {
            return false;
        }
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        match &self.host {
            HostMatch::Any => true,
            HostMatch::Exact(name) => *name == host,
            HostMatch::Subdomains(suffix) => {
                host.parse::<std::net::IpAddr>().is_err() && host.ends_with(suffix.as_str())
            }
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for HostPattern {
    type Err = GrantError;

    fn from_str(text: &str) -> Result<Self, GrantError> {
        let fail = |why: &str| GrantError(format!("{text:?}: {why}"));
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(fail(&format!(
                "missing scheme; write \"https://{text}\" or \"http://{text}\""
            )));
        };
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(fail("the scheme must be http or https")),
        };
        if rest.contains(['/', '?', '#', '@']) {
            return Err(fail(
                "write only scheme://host[:port]: paths, queries and user info are not matched",
            ));
        }
        // Split the port off, minding IPv6 literals like [::1]:8080.
        let (host, port) = match rest.rfind(':') {
            Some(i) if !rest[i..].contains(']') => (&rest[..i], Some(&rest[i + 1..])),
            _ => (rest, None),
        };
        let port = match port {
            None => PortMatch::Exact(default_port),
            Some("*") => PortMatch::Any,
            Some(p) => PortMatch::Exact(
                p.parse()
                    .map_err(|_| fail(&format!("{p:?} is not a port number (1-65535) or *")))?,
            ),
        };
        let host = host.to_ascii_lowercase();
        let host = if host == "*" {
            HostMatch::Any
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(fail("a wildcard must look like *.example.org"));
            }
            HostMatch::Subdomains(format!(".{suffix}"))
        } else if host.is_empty() || host.contains('*') {
            return Err(fail(
                "the host must be a name, an IP address, *.domain or *",
            ));
        } else {
            HostMatch::Exact(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
            )
        };
        Ok(Self {
            scheme,
            host,
            port,
            text: text.to_owned(),
        })
    }
}

/// A grant that cannot be given as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct GrantError(String);

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(patterns: &[&str]) -> AllowedHosts {
        AllowedHosts(patterns.iter().map(|p| p.parse().unwrap()).collect())
    }

    #[test]
    fn exact_hosts_match_scheme_host_and_default_port() {
        let allowed = hosts(&["https://example.org", "http://127.0.0.1:8081"]);
        assert!(allowed.allows("https", "example.org", 443));
        assert!(allowed.allows("https", "EXAMPLE.org", 443));
        assert!(!allowed.allows("http", "example.org", 80));
        assert!(!allowed.allows("https", "example.org", 8443));
        assert!(!allowed.allows("https", "www.example.org", 443));
        assert!(allowed.allows("http", "127.0.0.1", 8081));
        assert!(!allowed.allows("http", "127.0.0.1", 8082));
        assert!(!allowed.allows("http", "localhost", 8081));
    }

    #[test]
    fn wildcards_cover_subdomains_but_not_ip_literals() {
        let allowed = hosts(&["https://*.example.org", "http://*:*"]);
        assert!(allowed.allows("https", "a.b.example.org", 443));
        assert!(!allowed.allows("https", "example.org", 443));
        assert!(!allowed.allows("https", "evil-example.org", 443));
        assert!(allowed.allows("http", "anything.test", 1234));
        let allowed = hosts(&["https://*.1"]);
        assert!(!allowed.allows("https", "127.0.0.1", 443));
    }

    #[test]
    fn ipv6_literals_parse_with_and_without_ports() {
        let allowed = hosts(&["http://[::1]:8080", "http://[::2]"]);
        assert!(allowed.allows("http", "[::1]", 8080));
        assert!(allowed.allows("http", "::2", 80));
    }

    #[test]
    fn malformed_patterns_say_how_to_write_them() {
        let err = "example.org".parse::<HostPattern>().unwrap_err();
        assert!(err.0.contains("write \"https://example.org\""), "{err}");
        assert!("ftp://example.org".parse::<HostPattern>().is_err());
        assert!("https://example.org/path".parse::<HostPattern>().is_err());
        assert!("https://example.org:http".parse::<HostPattern>().is_err());
        assert!("https://ex*ample.org".parse::<HostPattern>().is_err());
    }

    #[test]
    fn files_must_exist_and_guest_paths_be_absolute_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        let err = Grants::none()
            .file(dir.path().join("nope"), "/data", FileMode::ReadOnly)
            .unwrap_err();
        assert!(err.0.contains("not an existing directory"));
        assert!(
            Grants::none()
                .file(dir.path(), "data", FileMode::ReadOnly)
                .is_err()
        );
        let twice = Grants::none()
            .file(dir.path(), "/data/", FileMode::ReadOnly)
            .unwrap()
            .file(dir.path(), "/data", FileMode::ReadWrite);
        assert!(twice.unwrap_err().0.contains("twice"));
    }

    #[test]
    fn secrets_are_not_printed_by_debug() {
        let grants = Grants::none()
            .config("key", "hunter2", true)
            .config("units", "metric", false);
        let debug = format!("{grants:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("metric"));
        assert_eq!(grants.secrets().collect::<Vec<_>>(), ["hunter2"]);
    }

    #[test]
    fn a_secret_containing_another_is_masked_whole() {
        let grants = Grants::none()
            .config("a", "abcd", true)
            .config("b", "abcdefgh", true);
        assert_eq!(
            grants.mask("key abcdefgh and abcd".into()),
            "key [redacted] and [redacted]"
        );
    }
}
