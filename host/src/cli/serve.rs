//! `toolhost serve`: the tools over MCP (stdio or Streamable HTTP) and the
//! plain HTTP API, until the client goes or the process is told to stop.

use std::process::ExitCode;

use toolhost::identity::{ContextSource, JwksSource, OAuthSettings, Settings};
use toolhost::serve::{self, ServeConfig, Transport};
use toolhost::{Manifest, SandboxOptions};

/// Where to serve and with what token (read from the environment variable
/// `--token-env` names).
pub(crate) struct ServeCommand {
    pub(crate) transport: Transport,
    pub(crate) token_env: Option<String>,
    pub(crate) auth: AuthFlags,
    pub(crate) config: ServeConfig,
}

/// `--jwks`, `--issuer`, `--audience` and `--context-claim`: the simple
/// cases of `[serve.auth]`, over the manifest's.
pub(crate) struct AuthFlags {
    pub(crate) jwks: Option<String>,
    pub(crate) issuers: Vec<String>,
    pub(crate) audience: Option<String>,
    pub(crate) context_claims: Vec<String>,
}

impl AuthFlags {
    /// The manifest's `[serve.auth]` with these flags over it; `None` when
    /// no flag is given. A flag replaces the manifest's key of that name.
    fn over(self, manifest: &Settings) -> Result<Option<Settings>, String> {
        let oauth_flags =
            self.jwks.is_some() || !self.issuers.is_empty() || self.audience.is_some();
        if !oauth_flags && self.context_claims.is_empty() {
            return Ok(None);
        }
        let mut settings = manifest.clone();
        if oauth_flags {
            settings.oauth = Some(oauth_over(
                self.jwks,
                self.issuers,
                self.audience,
                manifest.oauth.as_ref(),
            )?);
        }
        for binding in self.context_claims {
            let Some((key, claim)) = binding
                .split_once('=')
                .filter(|(k, c)| !k.is_empty() && !c.is_empty())
            else {
                return Err(format!(
                    "--context-claim {binding:?}: write KEY=CLAIM, e.g. user=sub"
                ));
            };
            settings
                .context
                .insert(key.to_owned(), ContextSource::Claim(claim.to_owned()));
        }
        Ok(Some(settings))
    }
}

/// The manifest's OAuth settings (`base`) with `--jwks`, `--issuer` and
/// `--audience` over them. `--jwks` is the key set of every issuer (the
/// flags' or the manifest's); without it, each `--issuer` keeps the key
/// set the manifest gives it.
fn oauth_over(
    jwks: Option<String>,
    issuers: Vec<String>,
    audience: Option<String>,
    base: Option<&OAuthSettings>,
) -> Result<OAuthSettings, String> {
    let jwks = jwks
        .map(|text| {
            JwksSource::parse(&text, std::path::Path::new(".")).map_err(|e| format!("--jwks: {e}"))
        })
        .transpose()?;
    // `--jwks` alone is the key set of the manifest's issuers: refused when
    // they have sets of their own, which it would silently replace (one
    // party's keys would then sign for another issuer's principals).
    if let (Some(_), true, Some(base)) = (&jwks, issuers.is_empty(), base) {
        let mut sources: Vec<&JwksSource> = base.issuers().map(|(_, s)| s).collect();
        sources.dedup();
        if sources.len() > 1 {
            let names: Vec<&str> = base.issuers().map(|(i, _)| i).collect();
            return Err(format!(
                "--jwks would replace the key sets of the manifest's issuers, which have sets of \
                 their own ({}); name the issuers it is for with --issuer",
                names.join(", ")
            ));
        }
    }
    let named: Vec<String> = if issuers.is_empty() {
        base.map(|o| o.issuers().map(|(i, _)| i.to_owned()).collect())
            .unwrap_or_default()
    } else {
        issuers
    };
    let with_keys = named
        .into_iter()
        .map(|issuer| {
            let keys = jwks.clone().or_else(|| {
                base.and_then(|o| o.issuers().find(|(i, _)| *i == issuer))
                    .map(|(_, source)| source.clone())
            });
            keys.map(|keys| (issuer.clone(), keys)).ok_or_else(|| {
                format!("--issuer {issuer:?} needs --jwks FILE|URL (the issuer's key set)")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let audience = match (audience, base) {
        (Some(audience), _) => audience,
        (None, Some(oauth)) => oauth.audience().to_owned(),
        (None, None) => {
            return Err(
                "--jwks needs --audience URL (this server's URL, as tokens name it) and --issuer \
                 ISS"
                .into(),
            );
        }
    };
    let oauth = OAuthSettings::per_issuer(with_keys, audience)
        .map_err(|e| format!("--jwks/--issuer/--audience: {e}"))?;
    Ok(match base {
        Some(base) => oauth.checked_like(base),
        None => oauth,
    })
}

/// Serve `manifest` until stdin closes or a signal stops it (then calls in
/// flight are answered first).
pub(crate) async fn serve(
    manifest: Manifest,
    options: SandboxOptions,
    command: ServeCommand,
) -> ExitCode {
    let mut config = command.config;
    config.transport = command.transport;
    match command.auth.over(&manifest.serve.auth) {
        Ok(auth) => config.auth = auth,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    }
    if let Some(name) = command.token_env {
        match std::env::var(&name) {
            Ok(token) if !token.trim().is_empty() => config.token = Some(token),
            _ => {
                eprintln!(
                    "error: --token-env {name}: the environment variable {name} is not set or empty; set it to the bearer token clients must send"
                );
                return ExitCode::from(2);
            }
        }
    }
    // Scripts wait for this line on stderr to know the server is up, and
    // read the address from it when the port was 0.
    let ready = |addr: Option<std::net::SocketAddr>| match addr {
        Some(addr) => eprintln!("toolhost: serving on http://{addr} (MCP at /mcp)"),
        None => eprintln!("toolhost: serving MCP on stdio"),
    };
    match serve::run(manifest, options, config, ready).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e @ serve::ServeError::Usage(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AUDIENCE: &str = "https://tools.example.com/mcp";

    fn file(name: &str) -> JwksSource {
        JwksSource::File(name.into())
    }

    #[test]
    fn jwks_alone_never_replaces_the_key_sets_of_issuers_with_their_own() {
        let own = OAuthSettings::per_issuer(
            vec![
                ("https://idp.example.com".into(), file("idp.json")),
                ("https://partner.example.org".into(), file("partner.json")),
            ],
            AUDIENCE.into(),
        )
        .unwrap();
        let e = oauth_over(Some("local.json".into()), vec![], None, Some(&own)).unwrap_err();
        assert!(
            e.contains("name the issuers it is for with --issuer"),
            "{e}"
        );
        // Named, it is theirs alone; the issuers not named are dropped.
        let named = oauth_over(
            Some("local.json".into()),
            vec!["https://idp.example.com".into()],
            None,
            Some(&own),
        )
        .unwrap();
        let issuers: Vec<_> = named.issuers().collect();
        assert_eq!(
            issuers,
            [("https://idp.example.com", &file("./local.json"))]
        );
        // --issuer without --jwks keeps the manifest's set of that issuer.
        let kept = oauth_over(
            None,
            vec!["https://partner.example.org".into()],
            None,
            Some(&own),
        )
        .unwrap();
        let issuers: Vec<_> = kept.issuers().collect();
        assert_eq!(
            issuers,
            [("https://partner.example.org", &file("partner.json"))]
        );
        // One shared set: --jwks alone replaces it for every issuer.
        let shared = OAuthSettings::new(
            file("idp.json"),
            vec![
                "https://a.example.com".into(),
                "https://b.example.com".into(),
            ],
            AUDIENCE.into(),
        )
        .unwrap();
        let replaced = oauth_over(Some("local.json".into()), vec![], None, Some(&shared)).unwrap();
        assert!(replaced.issuers().all(|(_, s)| *s == file("./local.json")));
    }
}
