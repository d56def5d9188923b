//! `toolhost serve`: the tools over MCP (stdio or Streamable HTTP) and the
//! plain HTTP API, until the client goes or the process is told to stop.

use std::process::ExitCode;

use toolhost::serve::{self, ServeConfig, Transport};
use toolhost::{Manifest, SandboxOptions};

/// Where to serve and with what token (read from the environment variable
/// `--token-env` names).
pub(crate) struct ServeCommand {
    pub(crate) transport: Transport,
    pub(crate) token_env: Option<String>,
    pub(crate) config: ServeConfig,
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
