//! Serve the tools from your own axum app: toolhost's MCP endpoint (`/mcp`)
//! and HTTP API (`/v1/tool_calls`, `/v1/tools`, `/metrics`, `/healthz`)
//! beside your own routes, behind the same edge checks `toolhost serve`
//! runs (Host, Origin, body size).
//!
//! ```sh
//! scripts/build-tools.sh --rust      # builds target/tools/calc.wasm
//! cargo run --release --example serve_in_axum            # one request to each, then exits
//! cargo run --release --example serve_in_axum -- --keep  # and serves until Ctrl-C
//! ```

use std::net::SocketAddr;

use anyhow::Context as _;
use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::serve::{ServeConfig, Shared, Transport};
use toolhost::{ComponentConfig, SandboxOptions, ToolHost};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let host = ToolHost::load_components(
        vec![ComponentConfig::new("target/tools/calc.wasm")],
        SandboxOptions::default(),
    )
    .await
    .context("loading target/tools/calc.wasm (build it with scripts/build-tools.sh --rust)")?;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let local: SocketAddr = listener.local_addr()?;
    let config = ServeConfig::new(Transport::Http(local));
    let stop = CancellationToken::new();
    let tools =
        toolhost::serve::http::router(Shared::new(host, &config)?, &config, local, stop.clone());
    let app = Router::new()
        .route("/hello", get(|| async { "hello from my own route" }))
        .merge(tools);
    let server = tokio::spawn({
        let stop = stop.clone();
        async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        }
    });
    println!("serving on http://{local}: /hello, /mcp, /v1/tool_calls, /v1/tools");

    // reqwest is built without a TLS backend of its own here; a plain-HTTP
    // client still wants a crypto provider installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let hello = client
        .get(format!("http://{local}/hello"))
        .send()
        .await?
        .text()
        .await?;
    println!("GET /hello -> {hello}");
    let answers: Value = client
        .post(format!("http://{local}/v1/tool_calls"))
        .json(&json!([{"id": "call_1", "type": "function",
            "function": {"name": "calc", "arguments": "{\"expression\": \"6*7\"}"}}]))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    println!("POST /v1/tool_calls -> {answers}");
    anyhow::ensure!(
        answers[0]["content"] == "42",
        "calc did not answer 42: {answers}"
    );

    if std::env::args().any(|a| a == "--keep") {
        tokio::signal::ctrl_c().await?;
    }
    stop.cancel();
    server.await??;
    Ok(())
}
