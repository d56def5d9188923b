//! Who toolhost is to a registry: credentials from the manifest (a user
//! name and the environment variable holding the password) or from
//! Docker's `config.json` (written there, or kept by the credential helper
//! it names: see [`super::helper`]), and the challenges registries answer 401 with
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
use super::helper;
use super::reference::{DOCKER_HUB_API, DOCKER_HUB_AUTH_KEY, OciRef};

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

/// What Docker's config holds for a registry.
#[derive(Debug)]
pub(crate) enum Found {
    /// Credentials written in the file.
    Credentials(Credentials),
    /// A credential helper to ask, for a server.
    Helper {
        /// `docker-credential-{helper}`.
        helper: String,
        /// What to give it on its standard input.
        server: String,
        /// Where it was named.
        source: String,
    },
    /// Nothing: go anonymous.
    Nothing,
}

/// What Docker's config (`$DOCKER_CONFIG/config.json`, else
/// `~/.docker/config.json`) holds for `host`.
///
/// # Errors
///
/// When the file is not JSON, or an entry is not what Docker writes: the
/// message says what to do.
pub(crate) fn docker_config(host: &str) -> Result<Found, String> {
    let Some(path) = docker_config_path() else {
        return Ok(Found::Nothing);
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(Found::Nothing);
    };
    from_docker_config(&text, host, &path.display().to_string())
}

fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker/config.json"))
}

/// The keys Docker's config may file `host`'s credentials under, most
/// likely first: Docker Hub's under its historical URL, other registries
/// by host, sometimes written as a URL.
fn config_keys(host: &str) -> Vec<String> {
    if matches!(host, "docker.io" | "index.docker.io" | DOCKER_HUB_API) {
        return [
            DOCKER_HUB_AUTH_KEY,
            "index.docker.io",
            "docker.io",
            DOCKER_HUB_API,
        ]
        .map(str::to_owned)
        .to_vec();
    }
    vec![
        host.to_owned(),
        format!("https://{host}"),
        format!("http://{host}"),
        format!("https://{host}/v1/"),
    ]
}

/// What the text of a Docker config file at `path` holds for `host`.
fn from_docker_config(text: &str, host: &str, path: &str) -> Result<Found, String> {
    let config: serde_json::Value = serde_json::from_str(text).map_err(|e| {
        format!("{path} is not JSON ({e}); fix it or point DOCKER_CONFIG elsewhere")
    })?;
    let keys = config_keys(host);
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
            return Ok(Found::Credentials(Credentials {
                username: username.to_owned(),
                password: password.to_owned(),
                source,
            }));
        }
        let field = |name| entry.get(name).and_then(serde_json::Value::as_str);
        if let (Some(username), Some(password)) = (field("username"), field("password")) {
            return Ok(Found::Credentials(Credentials {
                username: username.to_owned(),
                password: password.to_owned(),
                source,
            }));
        }
    }
    // An entry without credentials (`{}`, as `docker login` writes beside
    // a credsStore) leaves them to the helper.
    let helpers = config.get("credHelpers");
    let (helper, source) = match keys
        .iter()
        .find_map(|k| helpers.and_then(|h| h.get(k)).map(|helper| (helper, k)))
    {
        Some((helper, key)) => (Some(helper), format!("{path} (credHelpers.{key})")),
        None => (config.get("credsStore"), format!("{path} (credsStore)")),
    };
    match helper.map(|h| h.as_str().ok_or(h)) {
        None | Some(Ok("")) => Ok(Found::Nothing),
        Some(Ok(helper)) => Ok(Found::Helper {
            helper: helper.to_owned(),
            server: keys[0].clone(),
            source,
        }),
        Some(Err(_)) => Err(format!(
            "{source} is not a helper's name; fix it or point DOCKER_CONFIG elsewhere"
        )),
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
    pub(super) async fn credentials(&self, registry: &str) -> Result<Option<Credentials>, Reason> {
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
        match docker_config(registry).map_err(Reason::Config)? {
            Found::Credentials(credentials) => Ok(Some(credentials)),
            Found::Nothing => Ok(None),
            Found::Helper {
                helper,
                server,
                source,
            } => {
                let ask = helper::Ask {
                    helper: &helper,
                    server: &server,
                    registry,
                    source: &source,
                };
                let found = helper::get(&ask, self.settings.timeout / 2)
                    .await
                    .map_err(Reason::Config)?;
                Ok(found.map(|credentials| Credentials {
                    source: format!("docker-credential-{helper} ({source})"),
                    ..credentials
                }))
            }
        }
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
                "{registry} asks for credentials: add [registry.host.\"{registry}\"] username = \"…\" and password_env = \"VAR\" to the manifest, or log in with `docker login {registry}` (~/.docker/config.json and the credential helpers it names are read)"
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
        let Found::Credentials(found) =
            from_docker_config(&text, "ghcr.io", "config.json").unwrap()
        else {
            panic!("not found")
        };
        assert_eq!((&*found.username, &*found.password), ("bot", "s3cret-pw"));
        assert!(!format!("{found:?}").contains("s3cret"));
        assert!(matches!(
            from_docker_config(&text, "quay.io", "config.json").unwrap(),
            Found::Nothing
        ));
    }

    #[test]
    fn docker_hub_credentials_are_looked_up_under_its_historical_key() {
        let auth = STANDARD.encode("hubber:hub-pw");
        let text =
            format!(r#"{{"auths": {{"https://index.docker.io/v1/": {{"auth": "{auth}"}}}}}}"#);
        for host in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
            let found = from_docker_config(&text, host, "config.json").unwrap();
            assert!(
                matches!(&found, Found::Credentials(c) if c.username == "hubber"),
                "{host}: {found:?}"
            );
        }
        let text = r#"{"auths": {"https://index.docker.io/v1/": {}}, "credsStore": "desktop"}"#;
        let Found::Helper { helper, server, .. } =
            from_docker_config(text, "docker.io", "config.json").unwrap()
        else {
            panic!("no helper")
        };
        assert_eq!(
            (&*helper, &*server),
            ("desktop", "https://index.docker.io/v1/")
        );
    }

    #[test]
    fn credential_helpers_are_found_per_host_or_as_the_store_and_json_is_required() {
        let text = r#"{"auths": {"ghcr.io": {}}, "credsStore": "desktop", "credHelpers": {"gcr.io": "gcloud"}}"#;
        let helper = |host| match from_docker_config(text, host, "config.json").unwrap() {
            Found::Helper {
                helper,
                server,
                source,
            } => (helper, server, source),
            other => panic!("{host}: {other:?}"),
        };
        let (name, server, source) = helper("gcr.io");
        assert_eq!((&*name, &*server), ("gcloud", "gcr.io"));
        assert!(source.contains("credHelpers.gcr.io"), "{source}");
        // An entry without credentials is left to the store.
        let (name, server, source) = helper("ghcr.io");
        assert_eq!((&*name, &*server), ("desktop", "ghcr.io"));
        assert!(source.contains("credsStore"), "{source}");
        assert!(
            from_docker_config("{", "gcr.io", "config.json")
                .unwrap_err()
                .contains("not JSON")
        );
        let error =
            from_docker_config(r#"{"credsStore": 7}"#, "gcr.io", "config.json").unwrap_err();
        assert!(error.contains("credsStore"), "{error}");
    }
}
