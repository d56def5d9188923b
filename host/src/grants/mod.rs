//! What a component may touch: directories, HTTP origins, environment
//! variables, configuration values, key-value stores and other tools
//! (`call_tools`). Deny by default: [`Grants::none`]
//! computes and nothing else.
//!
//! This is the one place a manifest's words become capabilities. The sandbox
//! builds each call's WASI context and HTTP hook from a [`Grants`] and from
//! nothing else, so a grant that is not here does not exist. Grants are
//! domain data: a store is granted by its configuration (`store.rs`), and
//! the sandbox makes the live handle from it at load.
//!
//! # Examples
//!
//! ```
//! use toolhost::{FileMode, Grants};
//!
//! # fn main() -> Result<(), toolhost::GrantError> {
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

mod calls;
pub(crate) mod store;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

pub use self::calls::ToolCalls;
use self::store::StoreConfig;

/// Everything one component is allowed beyond pure computation.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    files: Vec<FileGrant>,
    hosts: AllowedHosts,
    env: Vec<(String, String)>,
    config: BTreeMap<String, ConfigValue>,
    stores: BTreeMap<String, StoreConfig>,
    calls: Option<ToolCalls>,
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
        let guest = guest_path(guest);
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
            quota: (mode == FileMode::ReadWrite).then_some(DEFAULT_QUOTA),
        });
        Ok(self)
    }

    /// Set the disk quota of the read-write directory granted as `guest`:
    /// the most its files may hold, counted across calls (the default is
    /// [`DEFAULT_QUOTA`]). Writes past it fail with `quota`.
    ///
    /// # Errors
    ///
    /// When `guest` is not granted, or is granted read-only.
    pub fn quota(mut self, guest: &str, bytes: u64) -> Result<Self, GrantError> {
        let guest = guest_path(guest);
        let Some(file) = self.files.iter_mut().find(|f| f.guest == guest) else {
            return Err(GrantError(format!("no directory is granted as {guest:?}")));
        };
        if file.mode != FileMode::ReadWrite {
            return Err(GrantError(format!(
                "{guest:?} is read-only; a quota applies to mode = \"read-write\" only"
            )));
        }
        file.quota = Some(bytes);
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

    /// Let the tool open `store` (by its name, through `wasi:keyvalue`).
    /// A second store of the same name replaces the first. The host opens
    /// the store on a call's first use of it; components granted the same
    /// configuration share it.
    pub fn store(mut self, store: StoreConfig) -> Self {
        self.stores.insert(store.name.clone(), store);
        self
    }

    /// The granted stores, by name.
    pub fn stores(&self) -> impl Iterator<Item = &StoreConfig> {
        self.stores.values()
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

    /// The secret values: masked wherever tool text leaves the sandbox.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        self.config
            .values()
            .filter(|c| c.secret)
            .map(|c| c.value.as_str())
    }

    /// Allow calls of other tools (`call_tools`): each through the host's
    /// dispatcher, under the callee's own grants and limits.
    pub fn call_tools(mut self, calls: ToolCalls) -> Self {
        self.calls = Some(calls);
        self
    }

    /// The tools this component may call, and its budget; `None` when it
    /// may call none.
    pub fn tool_calls(&self) -> Option<&ToolCalls> {
        self.calls.as_ref()
    }

    /// Whether this grants nothing: the tool can only compute.
    pub fn is_none(&self) -> bool {
        self.files.is_empty()
            && self.hosts.0.is_empty()
            && self.env.is_empty()
            && self.config.is_empty()
            && self.stores.is_empty()
            && self.calls.is_none()
    }
}

/// A guest path as granted: without trailing slashes, except the root.
fn guest_path(guest: &str) -> &str {
    match guest.trim_end_matches('/') {
        "" => "/",
        trimmed => trimmed,
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
#[non_exhaustive]
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
    /// For read-write grants: the most the directory's files may hold.
    pub quota: Option<u64>,
}

/// A read-write directory's disk quota when none is set: enough for a
/// tool's working files, far from filling a disk.
pub const DEFAULT_QUOTA: u64 = 100 * 1024 * 1024;

/// The HTTP origins a component may reach.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<HostPattern>);

impl AllowedHosts {
    /// Whether a request to `scheme://host:port` is allowed by some pattern.
    /// `host` is matched case-insensitively. An IP address, in whatever
    /// spelling (`127.0.0.1`, `127.1`, `0x7f.0.0.1`, `2130706433`, `[::1]`),
    /// matches only a pattern that names it in exactly that spelling:
    /// wildcards never match one.
    ///
    /// Matching is by name only. Where the name leads is checked when the
    /// request is sent: a name never reaches a loopback, private,
    /// link-local or metadata address (except loopback through a
    /// `localhost` pattern), and such an address is reached only by a
    /// request to it through a pattern naming it (see [`HostPattern::address`] and
    /// [`HostPattern::is_localhost`]).
    pub fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.matching(scheme, host, port).next().is_some()
    }

    /// The patterns that allow a request to `scheme://host:port`, in the
    /// order written.
    pub fn matching<'a>(
        &'a self,
        scheme: &'a str,
        host: &str,
        port: u16,
    ) -> impl Iterator<Item = &'a HostPattern> + 'a {
        let host = normalize(host);
        self.0
            .iter()
            .filter(move |p| p.matches(scheme, &host, port))
    }

    /// The patterns, as written.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.0
    }
}

/// One `allow_hosts` entry: `scheme://host[:port]`.
///
/// - `scheme` is `http` or `https`.
/// - `host` is a name (`example.org`), an IP address written in full
///   (`127.0.0.1`, `[::1]`), a wildcard over subdomains (`*.example.org`,
///   which does not match `example.org` itself), or `*` for any host.
///   Wildcards match names only, never an IP address in any spelling.
/// - `port` defaults to the scheme's (80 or 443); `*` allows any port.
///
/// A request to a name may reach only public addresses, except that a
/// pattern naming an address itself (`http://127.0.0.1:8081`,
/// `http://[::1]:8080`) reaches that address, and `localhost` reaches the
/// loopback addresses it resolves to.
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
    /// A name or an IP address, lowercase, IPv6 without brackets.
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
    /// Whether this pattern allows `scheme://host:port`, `host` normalized.
    fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        if !self.scheme.eq_ignore_ascii_case(scheme) {
            return false;
        }
        if let PortMatch::Exact(allowed) = self.port
            && allowed != port
        {
            return false;
        }
        match &self.host {
            HostMatch::Exact(name) => name == host,
            // Wildcards are for names: an address spelled in digits is not
            // a subdomain of anything, and `*` must not become "anywhere,
            // including this machine".
            HostMatch::Any => !is_numeric_host(host),
            HostMatch::Subdomains(suffix) => {
                !is_numeric_host(host) && host.ends_with(suffix.as_str())
            }
        }
    }

    /// The IP address this pattern names literally (`http://127.0.0.1:8081`,
    /// `http://[::1]:8080`), if it does. Only such a pattern lets a request
    /// reach a loopback, private, link-local or metadata address, and only
    /// that one.
    pub fn address(&self) -> Option<std::net::IpAddr> {
        match &self.host {
            HostMatch::Exact(host) => host.parse().ok(),
            _ => None,
        }
    }

    /// Whether this pattern names `localhost`, which may reach the loopback
    /// addresses it resolves to (and no other internal address).
    pub fn is_localhost(&self) -> bool {
        matches!(&self.host, HostMatch::Exact(host) if host == "localhost")
    }
}

/// Whether `host`, as a request names it, is an IP address in some spelling
/// (`127.0.0.1`, `127.1`, `0x7f.1`, `2130706433`, `[::1]`) rather than a
/// name: wildcards never match such a host.
pub(crate) fn is_ip_spelling(host: &str) -> bool {
    is_numeric_host(&normalize(host))
}

/// `host` as patterns store it: lowercase, IPv6 without brackets.
fn normalize(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether `host` (normalized) is an IP address in some spelling rather than
/// a name: an IPv6 literal, or a host whose last label is a number (decimal,
/// octal `0177` or hex `0x7f`), which resolvers read as IPv4 (`127.1`,
/// `0x7f.0.0.1`, `2130706433`, `0177.0.0.1`), as the URL standard does. No
/// top-level domain is numeric, so no real name is caught.
fn is_numeric_host(host: &str) -> bool {
    if host.contains(':') {
        return true;
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or(host);
    let hex = last
        .strip_prefix("0x")
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    hex || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
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
            let host = normalize(&host);
            // `127.1` would match only requests spelled `127.1` yet never
            // name an address: say how to write the address instead.
            if is_numeric_host(&host) && host.parse::<std::net::IpAddr>().is_err() {
                return Err(fail(&format!(
                    "{host:?} is not an IP address written in full; write it like 127.0.0.1 or [::1]"
                )));
            }
            HostMatch::Exact(host)
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
    fn wildcards_never_match_any_spelling_of_an_address() {
        let allowed = hosts(&[
            "http://*:*",
            "http://*.1:*",
            "http://*.0.0.1:*",
            "http://*.x7f:*",
        ]);
        for host in [
            "127.0.0.1",
            "127.1",
            "0x7f.0.0.1",
            "0x7f.1",
            "0X7F.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f000001",
            "127.0.0.1.",
            "[::1]",
            "::1",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "169.254.169.254",
            "0x",
        ] {
            assert!(!allowed.allows("http", host, 80), "{host}");
        }
        // Names, including ones with numeric labels before the last, still match.
        assert!(allowed.allows("http", "localhost", 80));
        assert!(allowed.allows("http", "1.2.3.example", 80));
        assert!(allowed.allows("http", "0x7f.example", 80));
    }

    #[test]
    fn an_address_matches_only_a_pattern_naming_it_in_that_spelling() {
        let allowed = hosts(&["http://127.0.0.1:8081", "http://[::1]:8080"]);
        assert!(allowed.allows("http", "127.0.0.1", 8081));
        assert!(!allowed.allows("http", "127.1", 8081));
        assert!(!allowed.allows("http", "2130706433", 8081));
        assert!(allowed.allows("http", "[::1]", 8080));
        assert!(!allowed.allows("http", "[0:0::1]", 8080));
        assert!(!allowed.allows("http", "[::ffff:127.0.0.1]", 8080));
    }

    #[test]
    fn patterns_say_which_address_they_name() {
        let named = |p: &str| p.parse::<HostPattern>().unwrap();
        assert_eq!(
            named("http://127.0.0.1:8081").address(),
            Some([127, 0, 0, 1].into())
        );
        assert_eq!(
            named("http://[::1]:8080").address(),
            Some(std::net::Ipv6Addr::LOCALHOST.into())
        );
        for pattern in [
            "http://localhost",
            "http://*",
            "https://*.example.org",
            "https://example.org",
        ] {
            assert_eq!(named(pattern).address(), None, "{pattern}");
        }
        assert!(named("http://LocalHost:8080").is_localhost());
        assert!(!named("http://*.localhost").is_localhost());
        assert!(!named("http://*").is_localhost());
    }

    #[test]
    fn abbreviated_addresses_are_refused_with_the_full_spelling() {
        for pattern in [
            "http://127.1",
            "http://0x7f.0.0.1",
            "http://2130706433:80",
            "http://10.1",
        ] {
            let err = pattern.parse::<HostPattern>().unwrap_err();
            assert!(err.0.contains("written in full"), "{pattern}: {err}");
        }
    }

    #[test]
    fn matching_lists_every_pattern_that_allows_a_request() {
        let allowed = hosts(&["http://*:*", "http://localhost:8080", "https://localhost"]);
        let matched: Vec<String> = allowed
            .matching("http", "LOCALHOST", 8080)
            .map(|p| p.to_string())
            .collect();
        assert_eq!(matched, ["http://*:*", "http://localhost:8080"]);
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
}
