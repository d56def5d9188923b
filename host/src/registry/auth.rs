//! Who toolhost is to a registry: credentials from the manifest (a user
//! name and the environment variable holding the password) or from
//! Docker's `config.json`, and the challenges registries answer 401 with
//! (`Basic realm=…`, or `Bearer realm=…,service=…,scope=…` naming a token
//! service). A password never reaches a log or an error message.

use std::fmt;
use std::path::PathBuf;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::header;

use super::Reason;
use super::body::{read_capped, unreachable};
use super::client::Client;
use super::reference::OciRef;

/// A user name and password for one registry.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub username: String,
    pub password: String,
    /// Where they came from, for messages.
    pub source: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"***")
            .field("source", &self.source)
            .finish()
    }
}

impl Credentials {
    /// The `Authorization` value of HTTP Basic.
    pub fn basic(&self) -> String {
        format!(
            "Basic {}",
            STANDARD.encode(format!("{}:{}", self.username, self.password))
        )
    }
}

/// Credentials for `host` from Docker's config (`$DOCKER_CONFIG/config.json`,
/// else `~/.docker/config.json`), if it has plain ones.
///
/// # Errors
///
/// When the file names a credential helper for the host (which toolhost
/// does not run) or is not JSON: the message says what to do.
pub(crate) fn docker_config(host: &str) -> Result<Option<Credentials>, String> {
    let Some(path) = docker_config_path() else {
        return Ok(None);
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    from_docker_config(&text, host, &path.display().to_string())
}

fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json"))
}

/// Credentials for `host` in the text of a Docker config file at `path`.
fn from_docker_config(text: &str, host: &str, path: &str) -> Result<Option<Credentials>, String> {
    let config: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!("{path} is not JSON ({e}); fix it or point DOCKER_CONFIG elsewhere")
    })?;
    // Docker Hub's entry has its historical key; other registries are
    // keyed by host, sometimes written as a URL.
    let keys = [
        host.to_owned(),
        format!("https://{host}"),
        format!("http://{host}"),
        format!("https://{host}/v1/"),
    ];
    let auths = config.get("auths").and_then(serde_json::Value::as_object);
    let entry = auths.and_then(|auths| keys.iter().find_map(|k| auths.get(k)));
    if let Some(entry) = entry {
        let source = format!("{path} (auths.{host})");
        if let Some(encoded) = entry.get("auth").and_then(serde_json::Value::as_str) {
            let decoded = STANDARD
                .decode(encoded)
                .ok()
                .and_then(|d| String::from_utf8(d).ok())
                .ok_or_else(|| format!("{source}: `auth` is not base64 of user:password"))?;
            let (username, password) = decoded
                .split_once(':')
                .ok_or_else(|| format!("{source}: `auth` is not base64 of user:password"))?;
            return Ok(Some(Credentials {
                username: username.to_owned(),
                password: password.to_owned(),
                source,
            }));
        }
        let field = |name| entry.get(name).and_then(serde_json::Value::as_str);
        if let (Some(username), Some(password)) = (field("username"), field("password")) {
            return Ok(Some(Credentials {
                username: username.to_owned(),
                password: password.to_owned(),
                source,
            }));
        }
    }
    let helper = config
        .get("credHelpers")
        .and_then(|h| h.get(host))
        .or_else(|| config.get("credsStore"))
        .and_then(serde_json::Value::as_str);
    match helper {
        Some(helper) if entry.is_none() => Err(format!(
            "{path} keeps the credentials of {host} in the helper docker-credential-{helper}, which toolhost does not run; \
             give them in the manifest instead ([registry.host.\"{host}\"] username = \"…\", password_env = \"VAR\")"
        )),
        _ => Ok(None),
    }
}

/// What a registry's 401 asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    /// HTTP Basic, with the credentials themselves.
    Basic,
    /// A token from `realm`, asked for with `service` and `scope`.
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

impl Challenge {
    /// Parse a `WWW-Authenticate` value.
    pub fn parse(value: &str) -> Option<Self> {
        let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Some(Self::Basic);
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let params = parameters(rest);
        let get = |name: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        Some(Self::Bearer {
            realm: get("realm")?,
            service: get("service"),
            scope: get("scope"),
        })
    }
}

/// `key="value"` pairs separated by commas; commas inside quotes (a scope
/// such as `repository:a:pull,push`) belong to the value.
fn parameters(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            return pairs;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| *c != ',') {
                value.push(c);
            }
        }
        pairs.push((key.trim().to_owned(), value));
    }
}

/// Logging in, for [`Client`]: tokens, credentials, and what to say when
/// the registry refuses.
impl Client {
    /// A bearer token from the registry's token service.
    pub(super) async fn token(
        &self,
        reference: &OciRef,
        realm: &str,
        service: Option<&str>,
        scope: &str,
        credentials: Option<&Credentials>,
    ) -> Result<String, Reason> {
        let mut url = reqwest::Url::parse(realm).map_err(|e| {
            Reason::Refused(format!("the token service {realm:?} is not a URL: {e}"))
        })?;
        // Plain HTTP only to the registry's own host, when the registry
        // itself may be spoken to in plain HTTP (this machine, or insecure).
        let realm_host = url
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']');
        let same_host = realm_host == reference.host();
        if url.scheme() != "https"
            && !(url.scheme() == "http"
                && same_host
                && self.plain_http_allowed(reference.registry()))
        {
            return Err(Reason::Refused(format!(
                "the token service {} is not HTTPS on another host than the registry; toolhost sends credentials there over HTTPS only",
                crate::printable::one_line(realm, 200)
            )));
        }
        if let Some(service) = service {
            url.query_pairs_mut().append_pair("service", service);
        }
        url.query_pairs_mut().append_pair("scope", scope);
        let mut request = self.http_for(reference.registry())?.get(url);
        if let Some(credentials) = credentials {
            request = request.header(header::AUTHORIZATION, credentials.basic());
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(reference, &e))?;
        if !response.status().is_success() {
            return Err(Reason::Unauthorized(self.login_fix(reference, credentials)));
        }
        let mut bytes = Vec::new();
        read_capped(
            response,
            "a token",
            (64 << 10, "a token is a few KiB"),
            |chunk| {
                bytes.extend_from_slice(chunk);
                Ok(())
            },
        )
        .await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&bytes).map_err(|e| {
            Reason::Refused(format!(
                "the token service answered something else than a token: {e}"
            ))
        })?;
        token
            .token
            .or(token.access_token)
            .map(|t| format!("Bearer {t}"))
            .ok_or_else(|| Reason::Refused("the token service answered no token".into()))
    }

    /// The manifest's credentials for `registry`, else Docker's.
    pub(super) fn credentials(&self, registry: &str) -> Result<Option<Credentials>, Reason> {
        if let Some(host) = self.settings.host(registry)
            && let Some(username) = &host.username
        {
            let Some(variable) = &host.password_env else {
                return Err(Reason::Config(format!(
                    "[registry.host.\"{registry}\"] has a username but no password_env naming the variable that holds the password"
                )));
            };
            let password = std::env::var(variable).map_err(|_| {
                Reason::Config(format!(
                    "the password of {registry} is read from ${variable}, which is not set"
                ))
            })?;
            return Ok(Some(Credentials {
                username: username.clone(),
                password,
                source: format!("the manifest ({username}, ${variable})"),
            }));
        }
        docker_config(registry).map_err(Reason::Config)
    }

    /// What to do when the registry refuses: the credentials tried, or how
    /// to give some.
    pub(super) fn login_fix(&self, reference: &OciRef, tried: Option<&Credentials>) -> String {
        let registry = reference.registry();
        match tried {
            Some(credentials) => format!(
                "{registry} refused the credentials from {} for {}; check them and their access to the repository",
                credentials.source,
                reference.repository()
            ),
            None => format!(
                "{registry} asks for credentials: add [registry.host.\"{registry}\"] username = \"…\" and password_env = \"VAR\" to the manifest, or log in with `docker login {registry}` (plain auths in ~/.docker/config.json are read)"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_of_distribution_and_token_services_parse() {
        assert_eq!(
            Challenge::parse(r#"Basic realm="toolhost-test""#),
            Some(Challenge::Basic)
        );
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://ghcr.io/token",service="ghcr.io",scope="repository:acme/calc:pull,push""#
            ),
            Some(Challenge::Bearer {
                realm: "https://ghcr.io/token".into(),
                service: Some("ghcr.io".into()),
                scope: Some("repository:acme/calc:pull,push".into()),
            })
        );
        assert_eq!(Challenge::parse("Negotiate abc"), None);
        assert_eq!(Challenge::parse(r#"Bearer service="x""#), None);
    }

    #[test]
    fn docker_config_credentials_are_found_by_host_and_never_printed() {
        let auth = STANDARD.encode("bot:s3cret-pw");
        let text = format!(r#"{{"auths": {{"https://ghcr.io": {{"auth": "{auth}"}}}}}}"#);
        let found = from_docker_config(&text, "ghcr.io", "config.json")
            .unwrap()
            .unwrap();
        assert_eq!((&*found.username, &*found.password), ("bot", "s3cret-pw"));
        assert!(!format!("{found:?}").contains("s3cret"));
        assert!(
            from_docker_config(&text, "quay.io", "config.json")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_credential_helper_is_named_with_the_manifest_alternative() {
        let text = r#"{"credHelpers": {"gcr.io": "gcloud"}}"#;
        let error = from_docker_config(text, "gcr.io", "config.json").unwrap_err();
        assert!(error.contains("docker-credential-gcloud"), "{error}");
        assert!(error.contains("password_env"), "{error}");
        assert!(
            from_docker_config("{", "gcr.io", "config.json")
                .unwrap_err()
                .contains("not JSON")
        );
    }
}
