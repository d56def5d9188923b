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
            let base = manifest.oauth.as_ref();
            let jwks = match (self.jwks, base) {
                (Some(text), _) => JwksSource::parse(&text, std::path::Path::new("."))
                    .map_err(|e| format!("--jwks: {e}"))?,
                (None, Some(oauth)) => oauth.jwks.clone(),
                (None, None) => {
                    return Err(
                        "--issuer and --audience need --jwks FILE|URL (the issuers' key set)"
                            .into(),
                    );
                }
            };
            let issuers = if self.issuers.is_empty() {
                base.map(|o| o.issuers.clone()).unwrap_or_default()
            } else {
                self.issuers
            };
            let audience = match (self.audience, base) {
                (Some(audience), _) => audience,
                (None, Some(oauth)) => oauth.audience.clone(),
                (None, None) => return Err("--jwks needs --audience URL (this server's URL, as tokens name it) and --issuer ISS".into()),
            };
            let mut oauth = OAuthSettings::new(jwks, issuers, audience)
                .map_err(|e| format!("--jwks/--issuer/--audience: {e}"))?;
            if let Some(base) = base {
                oauth.algorithms = base.algorithms.clone();
                oauth.leeway = base.leeway;
            }
            settings.oauth = Some(oauth);
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
