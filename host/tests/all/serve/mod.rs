//! `toolhost serve`: the real binary, over HTTP (the tool-call API, MCP
//! Streamable HTTP, metrics, guards, shutdown, hot reload) and over stdio.
//!
//! Every test starts its own server process on 127.0.0.1:0, reads the bound
//! address from its ready line on stderr, and talks to it as a client
//! would. Time bounds only end a test that would otherwise never end: a call
//! the test expects stopped has a ten-minute deadline, so "stopped" is never
//! told from "ran to its deadline" by a clock.

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde_json::{Value, json};

use crate::util::{component, root};

mod auth;
mod cold_start;
mod fair;
mod fast_path;
mod hostile;
mod library;
mod mcp_tasks;
mod peers;
mod registry;
mod replicas;
mod tasks;

/// What the server prints on stderr once it is listening.
const READY: &str = "toolhost: serving on http://";

/// How long a server may take to load its tools and bind.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Probe limits under which `spin` runs until its ten-minute deadline: fuel
/// enough for far longer than that, so only the deadline (or a
/// cancellation) ends it.
const LONG_PROBE: &str = r#"{ timeout = "10m", fuel = 1_000_000_000_000_000 }"#;

/// Probe limits under which `spin` ends within about a second.
const SHORT_PROBE: &str = r#"{ timeout = "1s" }"#;

/// A manifest with calc and, when `probe_limits` is given, the probe under
/// those limits. Components by absolute path, so the manifest can live in
/// any directory.
fn manifest(probe_limits: Option<&str>) -> String {
    let mut text = format!("[[tool]]\ncomponent = '{}'\n", component("calc").display());
    if let Some(limits) = probe_limits {
        text.push_str(&format!(
            "\n[[tool]]\ncomponent = '{}'\nlimits = {limits}\n",
            component("probe").display()
        ));
    }
    text
}

/// `toolhost --config MANIFEST ARGS…` with the test cache and quiet logs.
fn toolhost(manifest: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    command
        .arg("--config")
        .arg(manifest)
        .args(args)
        .current_dir(root())
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Collect a child's stderr on a thread (so the child never blocks on a
/// full pipe), sending the address of its ready line when it appears.
fn drain_stderr(child: &mut Child) -> (Arc<Mutex<String>>, mpsc::Receiver<SocketAddr>) {
    let stderr = child.stderr.take().expect("stderr is piped");
    let text = Arc::new(Mutex::new(String::new()));
    let (ready, addr) = mpsc::channel();
    let collected = text.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(rest) = line.strip_prefix(READY)
                && let Some(addr) = rest.split_whitespace().next()
                && let Ok(addr) = addr.parse::<SocketAddr>()
            {
                let _ = ready.send(addr);
            }
            let mut text = collected.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
        collected.lock().unwrap().push_str(STDERR_CLOSED);
    });
    (text, addr)
}

/// What [`drain_stderr`] appends once the child's stderr is closed: every
/// line before it has been read.
const STDERR_CLOSED: &str = "[stderr closed]\n";

/// Wait up to `limit` for `child` to exit.
fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`wait_exit`] without blocking the runtime.
async fn wait_exit_async(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An HTTP client that never goes through a proxy.
fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

/// A client whose connections come from `address` (any 127.0.0.0/8
/// address is this machine on Linux): a client the server tells apart
/// from [`client`]'s by its address.
fn client_from(address: [u8; 4]) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .no_proxy()
        .local_address(std::net::IpAddr::from(address))
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

/// A running `toolhost serve --listen 127.0.0.1:0`; killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    manifest: PathBuf,
    http: reqwest::Client,
    // Dropped after the child is killed.
    _dir: tempfile::TempDir,
}

impl Server {
    /// Serve `manifest_text` with `args` after `serve --listen 127.0.0.1:0`.
    fn start(manifest_text: &str, args: &[&str]) -> Self {
        Self::start_with_env(manifest_text, args, &[])
    }

    fn start_with_env(manifest_text: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let manifest = dir.path().join("toolhost.toml");
        std::fs::write(&manifest, manifest_text).unwrap();
        let mut command = toolhost(&manifest, &["serve", "--listen", "127.0.0.1:0"]);
        command.args(args);
        Self::spawn(command, env, manifest, dir)
    }

    /// `toolhost ARGS` (a serve command, listening on 127.0.0.1:0) run in
    /// `dir`, as a person types it there: its `toolhost.toml`, its lock
    /// file.
    fn start_in(dir: tempfile::TempDir, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
        command
            .args(args)
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let manifest = dir.path().join("toolhost.toml");
        Self::spawn(command, env, manifest, dir)
    }

    fn spawn(
        mut command: Command,
        env: &[(&str, &str)],
        manifest: PathBuf,
        dir: tempfile::TempDir,
    ) -> Self {
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the toolhost binary runs");
        let (stderr, ready) = drain_stderr(&mut child);
        let addr = match ready.recv_timeout(START_TIMEOUT) {
            Ok(addr) => addr,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the server did not print its ready line\nstderr:\n{}",
                    stderr.lock().unwrap()
                );
            }
        };
        Self {
            child,
            addr,
            stderr,
            manifest,
            http: client(),
            _dir: dir,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Everything the server wrote on stderr, once it has closed it (after
    /// it exited): a line logged just before the exit is in.
    async fn stderr_when_closed(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.stderr();
            if text.ends_with(STDERR_CLOSED) || Instant::now() >= deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits, with 60 s of patience, for a line on stderr that holds every
    /// one of `parts`; panics saying `why` it should have come.
    async fn logged(&self, parts: &[&str], why: &str) {
        let line = |l: &str| parts.iter().all(|p| l.contains(p));
        self.logged_where(
            |text| text.lines().any(line),
            &format!("{why}: no line with {parts:?}"),
        )
        .await;
    }

    /// Waits, with 60 s of patience, until what the server wrote on stderr
    /// satisfies `done`; panics saying `why` it should have.
    async fn logged_where(&self, done: impl Fn(&str) -> bool, why: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.stderr();
            if done(&text) {
                return;
            }
            assert!(Instant::now() < deadline, "{why}\n{text}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `POST /v1/tool_calls` with `body` as JSON.
    async fn tool_calls(&self, query: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/v1/tool_calls{query}")))
            .json(body)
            .send()
            .await
            .expect("the request gets an answer")
    }

    /// `POST /v1/tool_calls`, expecting 200 and a JSON array.
    async fn answers(&self, query: &str, body: &Value) -> Vec<Value> {
        let response = self.tool_calls(query, body).await;
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "body: {text}");
        match serde_json::from_str(&text) {
            Ok(Value::Array(answers)) => answers,
            _ => panic!("expected a JSON array, got {text}"),
        }
    }

    async fn get_json(&self, path: &str) -> Value {
        let response = self.http.get(self.url(path)).send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert_eq!(status, StatusCode::OK, "GET {path}: {text}");
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("GET {path} is not JSON ({e}): {text}"))
    }

    async fn metrics(&self) -> String {
        let response = self.http.get(self.url("/metrics")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    }

    /// Poll `/metrics` until `series` reads `want`, for up to `limit`;
    /// returns how long it took, or `None`.
    async fn wait_for_metric(&self, series: &str, want: f64, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if metric(&self.metrics().await, series) == Some(want) {
                return Some(start.elapsed());
            }
            if start.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The names `GET /v1/tools` lists now.
    async fn tool_names(&self) -> Vec<String> {
        let tools = self.get_json("/v1/tools").await;
        tools
            .as_array()
            .expect("an array of tools")
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// POST one JSON-RPC message to `/mcp` with `headers`.
    async fn mcp(&self, body: &Value, headers: &[(&str, &str)]) -> McpResponse {
        self.mcp_via(&self.http, body, headers).await
    }

    /// POST one JSON-RPC message to `/mcp` with `headers`, from `http`
    /// (a client bound to another address, see [`client_from`]).
    async fn mcp_via(
        &self,
        http: &reqwest::Client,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> McpResponse {
        let mut request = http
            .post(self.url("/mcp"))
            .header(CONTENT_TYPE, "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request
            .send()
            .await
            .expect("the MCP request gets an answer");
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        McpResponse {
            status,
            messages: jsonrpc_messages(&headers, &text),
            headers,
            text,
        }
    }

    /// POST one JSON-RPC message to `/mcp` in the 2025-11-25 session `session`.
    async fn mcp_in_session(&self, body: &Value, session: &str) -> McpResponse {
        let headers = [
            ("mcp-session-id", session),
            ("MCP-Protocol-Version", "2025-11-25"),
        ];
        self.mcp(body, &headers).await
    }

    /// Close the 2025-11-25 session `session`: `DELETE /mcp`.
    async fn close_session(&self, session: &str) -> reqwest::Response {
        self.http
            .delete(self.url("/mcp"))
            .header("mcp-session-id", session)
            .header("MCP-Protocol-Version", "2025-11-25")
            .send()
            .await
            .unwrap()
    }

    /// A 2026-07-28 stateless request: the protocol headers and `_meta`.
    async fn mcp_2026(&self, id: u64, method: &str, mut params: Value) -> McpResponse {
        let name = params["name"].as_str().map(str::to_owned);
        params["_meta"] = meta_2026();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut headers = vec![
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", method),
        ];
        if let Some(name) = &name {
            headers.push(("Mcp-Name", name.as_str()));
        }
        self.mcp(&body, &headers).await
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `_meta` every 2026-07-28 request carries.
fn meta_2026() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}
    })
}

/// An answer from `/mcp`.
#[derive(Debug)]
struct McpResponse {
    status: StatusCode,
    headers: HeaderMap,
    messages: Vec<Value>,
    text: String,
}

impl McpResponse {
    /// The one JSON-RPC response with `id`.
    #[track_caller]
    fn reply(&self, id: u64) -> &Value {
        self.messages
            .iter()
            .find(|m| m["id"] == json!(id))
            .unwrap_or_else(|| panic!("no reply with id {id}: {} {}", self.status, self.text))
    }

    #[track_caller]
    fn result(&self, id: u64) -> &Value {
        let reply = self.reply(id);
        assert!(reply.get("error").is_none(), "expected a result: {reply}");
        &reply["result"]
    }
}

/// The JSON-RPC messages of a response: a JSON body, or the `data:` of
/// each server-sent event (the priming event's empty data skipped).
fn jsonrpc_messages(headers: &HeaderMap, text: &str) -> Vec<Value> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/json") {
        // A JSON body that is not JSON-RPC (the guards' refusals) is no message.
        return serde_json::from_str::<Value>(text)
            .ok()
            .filter(|v| v.get("jsonrpc").is_some())
            .into_iter()
            .collect();
    }
    if !content_type.starts_with("text/event-stream") {
        return Vec::new();
    }
    let mut messages = Vec::new();
    let mut data = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.is_empty() {
            if !data.trim().is_empty() {
                let message = serde_json::from_str(&data)
                    .unwrap_or_else(|e| panic!("an SSE event is not JSON ({e}): {data}"));
                messages.push(message);
            }
            data.clear();
        } else if let Some(value) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(value.strip_prefix(' ').unwrap_or(value));
        }
    }
    messages
}

/// The value of one series in Prometheus text (`name{labels}` exactly as
/// the server writes it, or a bare name).
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// Check a refused request: `status`, a JSON body `{"error":{"type","message"}}`;
/// returns the type and the message.
async fn refused(response: reqwest::Response, status: StatusCode) -> (String, String) {
    let got = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = response.text().await.unwrap();
    assert_eq!(got, status, "body: {text}");
    assert!(
        content_type.starts_with("application/json"),
        "a refusal should be JSON, got content type {content_type:?}: {text}"
    );
    let body: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    let kind = body["error"]["type"].as_str();
    let message = body["error"]["message"].as_str();
    match (kind, message) {
        (Some(kind), Some(message)) if !kind.is_empty() && !message.is_empty() => {
            (kind.to_owned(), message.to_owned())
        }
        _ => panic!("expected {{\"error\":{{\"type\",\"message\"}}}}, got {text}"),
    }
}

fn calc(id: &str, expression: &str) -> Value {
    json!({"id": id, "name": "calc", "args": {"expression": expression}})
}

// 1. POST /v1/tool_calls: every call shape, every result format.

#[tokio::test]
async fn tool_calls_read_every_shape_and_answer_in_order() {
    let server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let batch = json!([
        {"id": "o1", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\":\"6*7\"}"}},
        {"id": "l1", "name": "calc", "args": {"expression": "1/0"}, "type": "tool_call"},
        {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "ab", "times": 2}},
        {"name": "calc", "arguments": {"expression": "10-1"}},
        {"id": "u1", "name": "no_such_tool", "args": {}},
    ]);
    let answers = server.answers("", &batch).await;
    let ids: Vec<&str> = answers
        .iter()
        .map(|a| a["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["o1", "l1", "toolu_1", "call_4", "u1"], "{answers:#?}");
    for answer in &answers {
        assert_eq!(answer["role"], "tool", "{answer}");
    }
    assert_eq!(answers[0]["content"], "42");
    assert_eq!(answers[0]["is_error"], false);
    assert_eq!(answers[0]["status"], "success");
    assert_eq!(answers[0]["structured"], json!({"value": 42.0}));
    // A tool that fails is still an answer, with its typed error.
    assert_eq!(answers[1]["is_error"], true, "{}", answers[1]);
    assert_eq!(answers[1]["status"], "error");
    assert!(
        answers[1]["error"]["type"]
            .as_str()
            .is_some_and(|t| !t.is_empty()),
        "{}",
        answers[1]
    );
    assert_eq!(answers[2]["content"], "abab");
    assert_eq!(answers[2]["name"], "echo");
    assert_eq!(answers[3]["content"], "9");
    assert_eq!(answers[4]["is_error"], true);
    assert_eq!(answers[4]["error"]["type"], "unknown_tool");
}

#[tokio::test]
async fn tool_calls_answer_anthropic_tool_result_blocks_exactly() {
    let server = Server::start(&manifest(None), &[]);
    let batch = json!([
        {"type": "tool_use", "id": "toolu_ok", "name": "calc", "input": {"expression": "6*7"}},
        {"type": "tool_use", "id": "toolu_bad", "name": "calc", "input": {"expression": "1/0"}},
    ]);
    let answers = server.answers("?format=anthropic", &batch).await;
    assert_eq!(
        answers[0],
        json!({"type": "tool_result", "tool_use_id": "toolu_ok", "content": "42", "is_error": false})
    );
    // The Messages API refuses unknown fields: exactly these four.
    let failed = answers[1].as_object().unwrap();
    let mut keys: Vec<&str> = failed.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["content", "is_error", "tool_use_id", "type"],
        "{failed:?}"
    );
    assert_eq!(failed["type"], "tool_result");
    assert_eq!(failed["tool_use_id"], "toolu_bad");
    assert_eq!(failed["is_error"], true);
    assert!(
        failed["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("Error")),
        "{failed:?}"
    );
}

#[tokio::test]
async fn tool_calls_answer_mcp_call_tool_results() {
    let server = Server::start(&manifest(None), &[]);
    let batch = json!([
        {"name": "calc", "arguments": {"expression": "6*7"}},
        {"name": "calc", "arguments": {"expression": "1/0"}},
        {"name": "no_such_tool", "arguments": {}},
    ]);
    let answers = server.answers("?format=mcp", &batch).await;
    assert_eq!(
        answers[0],
        json!({"content": [{"type": "text", "text": "42"}], "isError": false,
               "structuredContent": {"value": 42.0}})
    );
    assert_eq!(answers[1]["isError"], true, "{}", answers[1]);
    assert_eq!(answers[1]["content"][0]["type"], "text");
    assert!(
        answers[1]["_meta"]["toolhost/error"]["type"].is_string(),
        "{}",
        answers[1]
    );
    assert_eq!(answers[2]["isError"], true);
    assert_eq!(
        answers[2]["_meta"]["toolhost/error"]["type"],
        "unknown_tool"
    );
}

#[tokio::test]
async fn tool_calls_accept_whole_assistant_messages() {
    let server = Server::start(&manifest(None), &[]);
    let anthropic = json!({
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "two sums", "signature": "sig"},
            {"type": "text", "text": "Let me compute both."},
            {"type": "tool_use", "id": "toolu_a", "name": "calc", "input": {"expression": "1+1"}},
            {"type": "tool_use", "id": "toolu_b", "name": "calc", "input": {"expression": "2*3"}},
        ]
    });
    let answers = server.answers("?format=anthropic", &anthropic).await;
    assert_eq!(
        answers,
        [
            json!({"type": "tool_result", "tool_use_id": "toolu_a", "content": "2", "is_error": false}),
            json!({"type": "tool_result", "tool_use_id": "toolu_b", "content": "6", "is_error": false}),
        ]
    );
    let openai = json!({
        "role": "assistant",
        "content": null,
        "tool_calls": [
            {"id": "call_x", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\":\"3+4\"}"}},
            {"id": "call_y", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\":\"5*5\"}"}},
        ]
    });
    let answers = server.answers("", &openai).await;
    let got: Vec<(&str, &str)> = answers
        .iter()
        .map(|a| {
            (
                a["tool_call_id"].as_str().unwrap(),
                a["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, [("call_x", "7"), ("call_y", "25")]);
}

/// Issue 24: `?format=openai` answers in OpenAI's own shapes: a `tool`
/// message of text per call, exactly the fields the API takes, in order,
/// then one `user` message carrying the images; and each provider's
/// answers hold only the images it takes.
#[tokio::test]
async fn tool_calls_answer_in_openai_shapes_and_each_provider_gets_images_it_takes() {
    let server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let batch = json!([
        {"id": "m1", "name": "media", "args": {"size": 64}},
        {"id": "c1", "name": "calc", "args": {"expression": "6*7"}},
        {"id": "m2", "name": "media", "args": {"size": 100}},
    ]);
    let answers = server.answers("?format=openai", &batch).await;
    assert_eq!(answers.len(), 4, "{answers:#?}");
    assert_eq!(
        answers[1],
        json!({"role": "tool", "tool_call_id": "c1", "content": "42"})
    );
    assert_eq!(answers[0]["role"], "tool");
    assert_eq!(answers[0]["tool_call_id"], "m1");
    assert_eq!(
        answers[0]["content"],
        "a picture\n[image: image/png, 64 B]\n[resource r: https://example.org/r (a resource)]"
    );
    assert_eq!(answers[0].as_object().unwrap().len(), 3, "{}", answers[0]);
    let images = &answers[3];
    assert_eq!(images["role"], "user");
    let parts = images["content"].as_array().unwrap();
    let kinds: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image_url", "text", "image_url"]);
    assert_eq!(parts[2]["text"], "Image returned by tool call m2:");
    assert!(
        parts[3]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBORw0KGgo"),
        "{}",
        parts[3]
    );
    // An image over Anthropic's 5 MiB (as base64) reads as a line saying
    // why; MCP clients, which have no such limit, get it whole.
    let big = json!([{"type": "tool_use", "id": "toolu_big", "name": "media", "input": {"size": 4_000_000}}]);
    let answers = server.answers("?format=anthropic", &big).await;
    let content = answers[0]["content"].as_array().unwrap();
    assert_eq!(
        content[1],
        json!({"type": "text", "text": "[image dropped: image/png, 3.8 MiB; Anthropic takes images up to 3.75 MiB (5 MiB as base64)]"})
    );
    let answers = server.answers("?format=mcp", &big).await;
    assert_eq!(answers[0]["content"][1]["type"], "image");
}

/// Issue 24: an Anthropic `response.content` array posted as it is got an
/// error answer under an invented id (`call_1`) for each text or thinking
/// block, which the Messages API would refuse on the next request.
#[tokio::test]
async fn tool_calls_answer_only_the_tool_use_blocks_of_an_anthropic_content_array() {
    let server = Server::start(&manifest(None), &[]);
    let content = json!([
        {"type": "thinking", "thinking": "two sums", "signature": "sig"},
        {"type": "text", "text": "Let me compute both."},
        {"type": "tool_use", "id": "toolu_a", "name": "calc", "input": {"expression": "1+1"}},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "tool_use", "id": "toolu_b", "name": "calc", "input": {"expression": "2*3"}},
    ]);
    let answers = server.answers("?format=anthropic", &content).await;
    assert_eq!(
        answers,
        [
            json!({"type": "tool_result", "tool_use_id": "toolu_a", "content": "2", "is_error": false}),
            json!({"type": "tool_result", "tool_use_id": "toolu_b", "content": "6", "is_error": false}),
        ]
    );
    // A block of a type no reader knows is still refused, with an answer.
    let answers = server
        .answers(
            "",
            &json!([{"type": "text", "text": "hi"}, {"type": "picture"}]),
        )
        .await;
    assert_eq!(answers.len(), 1, "{answers:#?}");
    assert_eq!(answers[0]["tool_call_id"], "call_1");
    assert_eq!(answers[0]["error"]["type"], "invalid_arguments");
    let message = answers[0]["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("tool call #2 "), "{message}");
}

// 2. Requests that cannot be read: 4xx with a JSON error that says the fix.

#[tokio::test]
async fn tool_calls_refuse_a_body_that_is_not_json_with_400() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .header(CONTENT_TYPE, "application/json")
        .body("[{\"name\": \"calc\",")
        .send()
        .await
        .unwrap();
    let (kind, message) = refused(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(kind, "invalid_request");
    assert!(message.contains("JSON"), "{message}");
}

#[tokio::test]
async fn tool_calls_refuse_other_content_types_with_415() {
    let server = Server::start(&manifest(None), &[]);
    let body = json!([calc("a", "1+1")]).to_string();
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut request = server
            .http
            .post(server.url("/v1/tool_calls"))
            .body(body.clone());
        if let Some(content_type) = content_type {
            request = request.header(CONTENT_TYPE, content_type);
        }
        let response = request.send().await.unwrap();
        let (_, message) = refused(response, StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
        assert!(
            message.contains("application/json"),
            "{content_type:?}: {message}"
        );
    }
    // With a charset parameter it is still JSON.
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .header(CONTENT_TYPE, "application/json; charset=utf-8")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn tool_calls_refuse_a_body_over_max_body_with_a_json_413() {
    let server = Server::start(&manifest(None), &["--max-body", "1000"]);
    let small = json!([calc("a", "1+1")]);
    assert_eq!(server.tool_calls("", &small).await.status(), StatusCode::OK);
    // Valid JSON, one call, but 2000 bytes.
    let big = json!([calc("a", &format!("1{}", "+0".repeat(1000)))]);
    assert!(big.to_string().len() > 1000);
    let (_, message) = refused(
        server.tool_calls("", &big).await,
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    assert!(message.contains("--max-body"), "{message}");
}

#[tokio::test]
async fn tool_calls_refuse_a_batch_over_max_batch_with_413() {
    let server = Server::start(&manifest(None), &["--max-batch", "2"]);
    let two = json!([calc("a", "1+1"), calc("b", "2+2")]);
    assert_eq!(server.answers("", &two).await.len(), 2);
    let three = json!([calc("a", "1+1"), calc("b", "2+2"), calc("c", "3+3")]);
    let (_, message) = refused(
        server.tool_calls("", &three).await,
        StatusCode::PAYLOAD_TOO_LARGE,
    )
    .await;
    assert!(message.contains("--max-batch"), "{message}");
}

#[tokio::test]
async fn tool_calls_refuse_an_unknown_format_with_400() {
    let server = Server::start(&manifest(None), &[]);
    let batch = json!([calc("a", "1+1")]);
    let (_, message) = refused(
        server.tool_calls("?format=xml", &batch).await,
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert!(
        message.contains("anthropic"),
        "the message names the formats: {message}"
    );
}

// 3. GET /v1/tools, /healthz, unknown routes.

#[tokio::test]
async fn tools_are_listed_in_each_format() {
    let server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let openai = server.get_json("/v1/tools?format=openai").await;
    assert_eq!(
        openai,
        server.get_json("/v1/tools").await,
        "openai is the default"
    );
    let openai = openai.as_array().unwrap();
    assert!(openai.len() > 2);
    for tool in openai {
        assert_eq!(tool["type"], "function", "{tool}");
        assert!(tool["function"]["name"].is_string(), "{tool}");
        assert_eq!(tool["function"]["parameters"]["type"], "object", "{tool}");
    }
    let names: Vec<&str> = openai
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"calc") && names.contains(&"echo"),
        "{names:?}"
    );

    let anthropic = server.get_json("/v1/tools?format=anthropic").await;
    for tool in anthropic.as_array().unwrap() {
        assert!(tool["name"].is_string(), "{tool}");
        assert_eq!(tool["input_schema"]["type"], "object", "{tool}");
        assert!(
            tool.get("type").is_none() && tool.get("function").is_none(),
            "{tool}"
        );
    }

    let mcp = server.get_json("/v1/tools?format=mcp").await;
    let mcp = mcp.as_array().unwrap();
    assert_eq!(mcp.len(), openai.len());
    for tool in mcp {
        assert!(tool["name"].is_string(), "{tool}");
        assert!(
            tool["title"].as_str().is_some_and(|t| !t.is_empty()),
            "{tool}"
        );
        assert_eq!(tool["inputSchema"]["type"], "object", "{tool}");
        assert!(tool["annotations"].is_object(), "{tool}");
        if let Some(output) = tool.get("outputSchema") {
            assert_eq!(
                output["type"], "object",
                "MCP output schemas are objects: {tool}"
            );
        }
    }
    let calc = mcp.iter().find(|t| t["name"] == "calc").unwrap();
    assert_eq!(calc["title"], "Calc");
    assert_eq!(calc["outputSchema"]["type"], "object", "{calc}");
    assert!(calc["annotations"]["readOnlyHint"].is_boolean(), "{calc}");
}

#[tokio::test]
async fn healthz_reports_status_and_tool_count() {
    let server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let tools = server.tool_names().await.len();
    let health = server.get_json("/healthz").await;
    assert_eq!(health, json!({"status": "ok", "tools": tools}));
}

#[tokio::test]
async fn unknown_routes_are_a_json_404() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .http
        .get(server.url("/v2/nothing"))
        .send()
        .await
        .unwrap();
    let (kind, message) = refused(response, StatusCode::NOT_FOUND).await;
    assert_eq!(kind, "not_found");
    assert!(
        message.contains("/v1/tool_calls"),
        "the message names the routes: {message}"
    );
}

// 4. Guards: DNS rebinding (Host, Origin), the bearer token, unsafe configurations.

fn initialize_2025(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "toolhost-tests", "version": "1"}
    }})
}

/// Open a 2025-11-25 session (initialize, then initialized); its id.
async fn open_session(server: &Server) -> String {
    let response = server.mcp(&initialize_2025(1), &[]).await;
    assert_eq!(response.result(1)["protocolVersion"], "2025-11-25");
    let session = response
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a 2025-11-25 initialize opens a session")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = server.mcp_in_session(&initialized, &session).await;
    assert!(
        response.status.is_success(),
        "{} {}",
        response.status,
        response.text
    );
    session
}

/// The session's server-to-client event stream (`GET /mcp`), open.
async fn event_stream(server: &Server, session: &str) -> reqwest::Response {
    let response = server
        .http
        .get(server.url("/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response
}

#[tokio::test]
async fn a_foreign_origin_is_refused_on_every_route() {
    let server = Server::start(&manifest(None), &[]);
    let evil = "http://evil.example";
    let response = server
        .http
        .get(server.url("/v1/tools"))
        .header("origin", evil)
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(response, StatusCode::FORBIDDEN).await.0,
        "forbidden_origin"
    );
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .header("origin", evil)
        .json(&json!([calc("a", "1+1")]))
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(response, StatusCode::FORBIDDEN).await.0,
        "forbidden_origin"
    );
    let response = server.mcp(&initialize_2025(1), &[("origin", evil)]).await;
    assert_eq!(response.status, StatusCode::FORBIDDEN, "{}", response.text);
    assert!(
        response.messages.is_empty(),
        "no MCP answer: {}",
        response.text
    );
    let body: Value = serde_json::from_str(&response.text).unwrap();
    assert_eq!(body["error"]["type"], "forbidden_origin", "{body}");
}

#[tokio::test]
async fn a_loopback_origin_is_accepted() {
    let server = Server::start(&manifest(None), &[]);
    let origin = "http://localhost:3000";
    let response = server
        .http
        .get(server.url("/v1/tools"))
        .header("origin", origin)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let response = server.mcp(&initialize_2025(1), &[("origin", origin)]).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.text);
    assert_eq!(response.result(1)["protocolVersion"], "2025-11-25");
}

#[tokio::test]
async fn a_foreign_host_header_is_refused() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .http
        .get(server.url("/v1/tools"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(
        refused(response, StatusCode::FORBIDDEN).await.0,
        "forbidden_host"
    );
    let response = server
        .mcp(&initialize_2025(1), &[("host", "evil.example")])
        .await;
    assert_eq!(response.status, StatusCode::FORBIDDEN, "{}", response.text);
    // A loopback name with the server's port is this server.
    let response = server
        .http
        .get(server.url("/v1/tools"))
        .header("host", format!("localhost:{}", server.addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_configured_token_is_required_except_for_healthz() {
    const TOKEN: &str = "s3cret-test-token";
    let server = Server::start_with_env(
        &manifest(None),
        &["--token-env", "TOOLHOST_TEST_TOKEN"],
        &[("TOOLHOST_TEST_TOKEN", TOKEN)],
    );
    for path in ["/v1/tools", "/metrics"] {
        for authorization in [None, Some("Bearer wrong-token"), Some("Basic czNjcmV0")] {
            let mut request = server.http.get(server.url(path));
            if let Some(authorization) = authorization {
                request = request.header("authorization", authorization);
            }
            let response = request.send().await.unwrap();
            assert_eq!(
                response
                    .headers()
                    .get("www-authenticate")
                    .and_then(|v| v.to_str().ok()),
                Some("Bearer"),
                "{path} {authorization:?}"
            );
            assert_eq!(
                refused(response, StatusCode::UNAUTHORIZED).await.0,
                "unauthorized"
            );
        }
        let response = server
            .http
            .get(server.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path} with the token");
    }
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .json(&json!([calc("a", "1+1")]))
        .send()
        .await
        .unwrap();
    refused(response, StatusCode::UNAUTHORIZED).await;
    let response = server.mcp(&initialize_2025(1), &[]).await;
    assert_eq!(
        response.status,
        StatusCode::UNAUTHORIZED,
        "{}",
        response.text
    );
    let authorization = format!("Bearer {TOKEN}");
    let response = server
        .mcp(
            &initialize_2025(1),
            &[("authorization", authorization.as_str())],
        )
        .await;
    assert_eq!(response.result(1)["protocolVersion"], "2025-11-25");
    // Liveness stays open: a load balancer has no token.
    let health = server.get_json("/healthz").await;
    assert_eq!(health["status"], "ok");
}

/// Run `toolhost serve ARGS…` expecting it to refuse to start.
fn refused_to_start(args: &[&str], env: &[(&str, &str)], unset: &[&str]) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let manifest_path = dir.path().join("toolhost.toml");
    std::fs::write(&manifest_path, manifest(None)).unwrap();
    let mut command = toolhost(&manifest_path, &["serve"]);
    command.args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    for name in unset {
        command.env_remove(name);
    }
    let mut child = command.spawn().unwrap();
    let (stderr, _ready) = drain_stderr(&mut child);
    let Some(status) = wait_exit(&mut child, Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "toolhost serve {args:?} kept running\nstderr:\n{}",
            stderr.lock().unwrap()
        );
    };
    // Let the stderr thread read to the end.
    std::thread::sleep(Duration::from_millis(100));
    let text = stderr.lock().unwrap().clone();
    (status, text)
}

#[test]
fn a_non_loopback_address_without_a_token_exits_2() {
    let (status, stderr) = refused_to_start(&["--listen", "0.0.0.0:0"], &[], &[]);
    assert_eq!(status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("--token-env"),
        "the message names the fix: {stderr}"
    );
    assert!(!stderr.contains(READY), "{stderr}");
}

#[test]
fn a_token_env_naming_an_unset_variable_exits_2() {
    let name = "TOOLHOST_TEST_TOKEN_NEVER_SET";
    let (status, stderr) = refused_to_start(
        &["--listen", "127.0.0.1:0", "--token-env", name],
        &[],
        &[name],
    );
    assert_eq!(status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains(name),
        "the message names the variable: {stderr}"
    );
    // An empty token would let anyone in: also refused.
    let (status, stderr) = refused_to_start(
        &["--listen", "127.0.0.1:0", "--token-env", name],
        &[(name, "")],
        &[],
    );
    assert_eq!(status.code(), Some(2), "stderr: {stderr}");
}

// 5. /metrics.

#[tokio::test]
async fn metrics_count_calls_by_tool_outcome_and_front_end() {
    let server = Server::start(&manifest(None), &[]);
    server
        .answers(
            "",
            &json!([calc("a", "1+1"), calc("b", "2+2"), calc("c", "1/0")]),
        )
        .await;
    let response = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let content_type = response.headers()[CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/openmetrics-text")
            || content_type.starts_with("text/plain"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    assert_eq!(
        metric(
            &text,
            r#"toolhost_tool_calls_total{tool="calc",outcome="success",front_end="http"}"#
        ),
        Some(2.0),
        "{text}"
    );
    let failed: f64 = text
        .lines()
        .filter(|l| l.starts_with(r#"toolhost_tool_calls_total{tool="calc",outcome=""#))
        .filter(|l| !l.contains(r#"outcome="success""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        failed, 1.0,
        "the failed call is counted under its error type: {text}"
    );
    assert!(
        text.contains("# TYPE toolhost_tool_call_duration_seconds histogram"),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            r#"toolhost_tool_call_duration_seconds_count{tool="calc"}"#
        ),
        Some(3.0),
        "{text}"
    );
    assert!(
        text.lines().any(
            |l| l.starts_with("toolhost_tool_call_duration_seconds_bucket{")
                && l.contains(r#"tool="calc""#)
                && l.contains(r#"le="+Inf""#)
                && l.ends_with(" 3")
        ),
        "{text}"
    );
    assert_eq!(
        metric(&text, "toolhost_instances_in_flight"),
        Some(0.0),
        "{text}"
    );
}

#[tokio::test]
async fn metrics_count_made_up_tool_names_under_one_label() {
    let server = Server::start(&manifest(None), &[]);
    let batch: Vec<Value> = (0..50)
        .map(|i| json!({"id": format!("c{i}"), "name": format!("madeup_tool_{i}_xq"), "args": {}}))
        .collect();
    let answers = server.answers("", &Value::Array(batch)).await;
    assert!(answers.iter().all(|a| a["error"]["type"] == "unknown_tool"));
    // The MCP front end too.
    for i in 0..10 {
        let response = server
            .mcp_2026(
                i,
                "tools/call",
                json!({"name": format!("madeup_mcp_{i}_xq"), "arguments": {}}),
            )
            .await;
        assert!(
            response.reply(i).get("error").is_some(),
            "{}",
            response.text
        );
    }
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"toolhost_tool_calls_total{tool="(unknown)",outcome="unknown_tool",front_end="http"}"#
        ),
        Some(50.0),
        "{text}"
    );
    assert!(
        !text.contains("madeup_"),
        "a made-up name became a label:\n{text}"
    );
}

/// Issue 28: a program refused in a loop is reported to transcripts 32
/// times, and counted in the metrics every time.
#[tokio::test]
async fn metrics_count_every_refused_call_a_program_makes() {
    let manifest = format!(
        "[[tool]]\ncomponent = '{}'\ncall_tools = ['calc']\n\n[[tool]]\ncomponent = '{}'\n",
        component("probe-caller").display(),
        component("calc").display(),
    );
    let server = Server::start(&manifest, &[]);
    let answers = server
        .answers(
            "",
            &json!([{"id": "p", "name": "call_repeat", "args": {
                "name": "spin", "arguments": {}, "n": 100, "at_once": true,
            }}]),
        )
        .await;
    assert!(
        answers[0].to_string().contains("unknown_tool"),
        "{answers:?}"
    );
    let text = server.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"toolhost_tool_calls_total{tool="(unknown)",outcome="unknown_tool",front_end="nested"}"#
        ),
        Some(100.0),
        "{text}"
    );
}

// 6. MCP over Streamable HTTP, as raw JSON-RPC.

#[tokio::test]
async fn mcp_2025_initialize_negotiates_and_serves_a_session() {
    let server = Server::start(&manifest(None), &[]);
    let response = server.mcp(&initialize_2025(1), &[]).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.text);
    let result = response.result(1);
    assert_eq!(result["protocolVersion"], "2025-11-25", "{result}");
    assert_eq!(
        result["capabilities"]["tools"]["listChanged"], true,
        "{result}"
    );
    assert_eq!(result["serverInfo"]["name"], "toolhost", "{result}");
    let session = response
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a 2025-11-25 initialize opens a session")
        .to_owned();
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = server.mcp(&initialized, &headers).await;
    assert!(
        response.status.is_success(),
        "{} {}",
        response.status,
        response.text
    );
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let response = server.mcp(&list, &headers).await;
    let tools = response.result(2)["tools"].as_array().unwrap().clone();
    let calc = tools
        .iter()
        .find(|t| t["name"] == "calc")
        .expect("calc is listed");
    assert_eq!(calc["title"], "Calc");
    assert_eq!(calc["outputSchema"]["type"], "object");
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                      "params": {"name": "calc", "arguments": {"expression": "6*7"}}});
    let response = server.mcp(&call, &headers).await;
    let result = response.result(3);
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"value": 42.0}),
        "{result}"
    );
}

#[tokio::test]
async fn mcp_2026_discover_lists_supported_versions() {
    let server = Server::start(&manifest(None), &[]);
    let response = server.mcp_2026(1, "server/discover", json!({})).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.text);
    let result = response.result(1);
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap_or_else(|| panic!("supportedVersions: {result}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(versions.contains(&"2026-07-28"), "{versions:?}");
    assert!(versions.contains(&"2025-11-25"), "{versions:?}");
    assert_eq!(
        result["capabilities"]["tools"]["listChanged"], true,
        "{result}"
    );
}

#[tokio::test]
async fn mcp_2026_tools_call_returns_structured_content() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .mcp_2026(
            7,
            "tools/call",
            json!({"name": "calc", "arguments": {"expression": "6*7"}}),
        )
        .await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.text);
    let result = response.result(7);
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(
        result["structuredContent"],
        json!({"value": 42.0}),
        "{result}"
    );
    assert_eq!(
        result["content"][0],
        json!({"type": "text", "text": "42"}),
        "{result}"
    );
    let response = server.mcp_2026(8, "tools/list", json!({})).await;
    let tools = response.result(8)["tools"].as_array().unwrap().clone();
    assert!(tools.iter().any(|t| t["name"] == "calc"), "{tools:?}");
}

#[tokio::test]
async fn mcp_unknown_tool_is_a_jsonrpc_invalid_params_error() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .mcp_2026(
            3,
            "tools/call",
            json!({"name": "no_such_tool", "arguments": {}}),
        )
        .await;
    let reply = response.reply(3);
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("calc"),
        "the message lists the tools: {message}"
    );
}

#[tokio::test]
async fn mcp_invalid_arguments_are_a_tool_error_result() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .mcp_2026(
            4,
            "tools/call",
            json!({"name": "calc", "arguments": {"expression": 5}}),
        )
        .await;
    let result = response.result(4);
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["_meta"]["toolhost/error"]["type"], "invalid_arguments",
        "{result}"
    );
    assert!(result["content"][0]["text"].is_string(), "{result}");
}

#[tokio::test]
async fn mcp_a_runaway_call_ends_with_a_limit_error() {
    let server = Server::start(&manifest(Some(SHORT_PROBE)), &[]);
    let response = server
        .mcp_2026(5, "tools/call", json!({"name": "spin", "arguments": {}}))
        .await;
    let result = response.result(5);
    assert_eq!(result["isError"], true, "{result}");
    let kind = result["_meta"]["toolhost/error"]["type"]
        .as_str()
        .unwrap_or_default();
    assert!(["timeout", "fuel_exhausted"].contains(&kind), "{result}");
}

// 7. Cancellation: a client that goes away stops its call's instance.

/// Start `request` on its own task, wait until its spin is running, drop
/// it, and wait for the instance to stop: long before the ten-minute deadline
/// would have stopped it.
async fn dropping_the_request_stops_the_instance(
    server: &Server,
    request: reqwest::RequestBuilder,
) {
    let task = tokio::spawn(async move { request.send().await.map(|r| r.status()) });
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 1.0, Duration::from_secs(60))
        .await;
    assert!(
        running.is_some(),
        "the spin never started\n{}\nstderr:\n{}",
        server.metrics().await,
        server.stderr()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !task.is_finished(),
        "the spin answered before its deadline: {:?}",
        task.await
    );
    let dropped = Instant::now();
    task.abort();
    let _ = task.await;
    let stopped = server
        .wait_for_metric("toolhost_instances_in_flight", 0.0, Duration::from_secs(60))
        .await;
    assert!(
        stopped.is_some(),
        "the instance kept running {:?} after its client left (its deadline is ten minutes)\n{}",
        dropped.elapsed(),
        server.metrics().await
    );
}

#[tokio::test]
async fn a_dropped_mcp_request_stops_its_instance() {
    let server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "spin", "arguments": {}, "_meta": meta_2026()}});
    // A client of its own, so that nothing else shares its connection.
    let request = client()
        .post(server.url("/mcp"))
        .header(CONTENT_TYPE, "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", "tools/call")
        .header("Mcp-Name", "spin")
        .body(body.to_string());
    dropping_the_request_stops_the_instance(&server, request).await;
    // The server still answers.
    let response = server
        .mcp_2026(
            2,
            "tools/call",
            json!({"name": "calc", "arguments": {"expression": "1+1"}}),
        )
        .await;
    assert_eq!(response.result(2)["isError"], false);
}

#[tokio::test]
async fn a_dropped_tool_calls_request_stops_its_instance() {
    let server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let request = client()
        .post(server.url("/v1/tool_calls"))
        .json(&json!([{"id": "s", "name": "spin", "args": {}}]));
    dropping_the_request_stops_the_instance(&server, request).await;
    let answers = server.answers("", &json!([calc("a", "1+1")])).await;
    assert_eq!(answers[0]["content"], "2");
}

// 8. Graceful shutdown.

/// Waits for `server`, sent SIGTERM at `signalled` with a ten-minute drain,
/// to exit with status 0. One still running 60 s later waits out the drain,
/// which no test does: the panic says `why` it would.
async fn exited_zero_after_sigterm(server: &mut Server, signalled: Instant, why: &str) {
    let exit = wait_exit_async(&mut server.child, Duration::from_secs(60)).await;
    let status = exit.unwrap_or_else(|| {
        panic!(
            "still running {:?} after SIGTERM: {why}\n{}",
            signalled.elapsed(),
            server.stderr()
        )
    });
    assert_eq!(status.code(), Some(0), "stderr:\n{}", server.stderr());
}

#[tokio::test]
async fn sigterm_lets_calls_in_flight_finish_then_exits_zero() {
    // A drain no test waits out: a server that kept it would not exit within
    // the test's patience, whatever the machine's load.
    let mut server = Server::start(&manifest(Some(LONG_PROBE)), &["--drain", "10m"]);
    // Long enough that the signal, sent once the sleep is seen running,
    // comes before it ends: the server's log checks that below.
    let request = client()
        .post(server.url("/v1/tool_calls"))
        .json(&json!([{"id": "nap", "name": "sleep", "args": {"n": 5000}}]));
    let task = tokio::spawn(async move {
        let response = request.send().await?;
        let status = response.status();
        Ok::<_, reqwest::Error>((status, response.text().await?))
    });
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 1.0, Duration::from_secs(60))
        .await;
    assert!(
        running.is_some(),
        "the sleep never started\n{}",
        server.stderr()
    );
    let pid = rustix::process::Pid::from_child(&server.child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let signalled = Instant::now();
    let (status, text) = task.await.unwrap().unwrap_or_else(|e| {
        panic!(
            "the call in flight lost its answer: {e}\nstderr:\n{}",
            server.stderr()
        )
    });
    assert_eq!(status, StatusCode::OK, "{text}");
    let answers: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answers[0]["tool_call_id"], "nap", "{text}");
    assert_eq!(answers[0]["content"], "awake", "{text}");
    // Once nothing is in flight the process ends at once, not after the
    // ten minutes it grants requests that never finish.
    exited_zero_after_sigterm(
        &mut server,
        signalled,
        "the shutdown waits out its drain time",
    )
    .await;
    // The server says the signal found the sleep in flight: the test saw
    // what it is about.
    let log = server.stderr_when_closed().await;
    assert!(
        log.contains("in_flight=1"),
        "the signal came after the sleep had answered\nstderr:\n{log}"
    );
}

#[tokio::test]
async fn sigterm_ends_open_mcp_event_streams_and_exits_promptly() {
    // As above, a drain no test waits out.
    let mut server = Server::start(&manifest(None), &["--drain", "10m"]);
    let session = open_session(&server).await;
    // A client that keeps its event stream open and never hangs up.
    let _stream = event_stream(&server, &session).await;
    let pid = rustix::process::Pid::from_child(&server.child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let signalled = Instant::now();
    exited_zero_after_sigterm(
        &mut server,
        signalled,
        "an open event stream holds the shutdown to its drain time",
    )
    .await;
    // Ended by the server, not given up on after the wait for connections.
    let log = server.stderr_when_closed().await;
    assert!(
        !log.contains("connections still open"),
        "the event stream was not ended\nstderr:\n{log}"
    );
}

// 9. Hot reload.

/// Poll until `check` passes on the server, for up to `limit`.
async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return true;
        }
        if start.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn watch_reloads_a_changed_manifest_and_keeps_serving_through_a_broken_one() {
    let server = Server::start(&manifest(None), &["--watch"]);
    assert_eq!(server.tool_names().await, ["calc"]);

    std::fs::write(&server.manifest, manifest(Some(LONG_PROBE))).unwrap();
    let server = &server;
    let reloaded = eventually(Duration::from_secs(15), || async move {
        server.tool_names().await.iter().any(|n| n == "echo")
    })
    .await;
    assert!(
        reloaded,
        "the new manifest was not loaded\nstderr:\n{}",
        server.stderr()
    );
    let text = server.metrics().await;
    assert!(
        metric(&text, r#"toolhost_reloads_total{result="ok"}"#).is_some_and(|n| n >= 1.0),
        "{text}"
    );

    std::fs::write(
        &server.manifest,
        "[[tool]]\ncomponent = 42\nthis is not toml\n",
    )
    .unwrap();
    let failed = eventually(Duration::from_secs(15), || async move {
        metric(
            &server.metrics().await,
            r#"toolhost_reloads_total{result="failed"}"#,
        )
        .is_some_and(|n| n >= 1.0)
    })
    .await;
    assert!(
        failed,
        "the broken manifest was not tried\n{}",
        server.metrics().await
    );
    let names = server.tool_names().await;
    assert!(
        names.iter().any(|n| n == "echo") && names.iter().any(|n| n == "calc"),
        "the previous tools keep serving: {names:?}"
    );
    let answers = server
        .answers(
            "",
            &json!([calc("a", "6*7"), {"id": "e", "name": "echo", "args": {"text": "hi", "times": 2}}]),
        )
        .await;
    assert_eq!(answers[0]["content"], "42", "{answers:?}");
    assert_eq!(answers[1]["content"], "hihi", "{answers:?}");
}

#[tokio::test]
async fn watch_tells_mcp_sessions_the_tool_list_changed() {
    let server = Server::start(&manifest(None), &["--watch"]);
    let session = open_session(&server).await;
    let mut stream = event_stream(&server, &session).await;
    std::fs::write(&server.manifest, manifest(Some(LONG_PROBE))).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut seen = String::new();
    while !seen.contains("notifications/tools/list_changed") {
        match tokio::time::timeout_at(deadline, stream.chunk()).await {
            Ok(Ok(Some(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) => panic!("the event stream ended: {seen}"),
            Ok(Err(e)) => panic!("the event stream failed: {e}: {seen}"),
            Err(_) => panic!(
                "no tools/list_changed within 15 s; the stream carried: {seen:?}\nstderr:\n{}",
                server.stderr()
            ),
        }
    }
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let response = server.mcp_in_session(&list, &session).await;
    let tools = response.result(2)["tools"].as_array().unwrap().clone();
    assert!(
        tools.iter().any(|t| t["name"] == "echo"),
        "the session lists the new tools"
    );
}

// 10. MCP over stdio.

/// A `toolhost serve --stdio` child: JSON-RPC lines in, lines out.
struct StdioServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Messages read while waiting for another, in order: a later wait may
    /// want one.
    read: VecDeque<Value>,
    stderr: Arc<Mutex<String>>,
    _dir: tempfile::TempDir,
}

impl StdioServer {
    fn start(manifest_text: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let manifest_path = dir.path().join("toolhost.toml");
        std::fs::write(&manifest_path, manifest_text).unwrap();
        let mut child = toolhost(&manifest_path, &["serve", "--stdio"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("the toolhost binary runs");
        let (stderr, _) = drain_stderr(&mut child);
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            read: VecDeque::new(),
            stderr,
            _dir: dir,
        }
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Read lines until the response to `id`; every line must be JSON-RPC.
    fn reply(&mut self, id: u64) -> Value {
        self.read_until(&format!("a reply to {id}"), |m| m["id"] == json!(id))
    }

    /// Read lines until a progress notification with `message`: the tool's
    /// own report, not the host's (which says, with the same token, that the
    /// call waits for its component's compilation).
    fn progress(&mut self, message: &str) -> Value {
        self.read_until(&format!("progress \"{message}\""), |m| {
            m["method"] == "notifications/progress" && m["params"]["message"] == message
        })
    }

    /// The first message `wanted` accepts, among those read before or the
    /// lines to come; every line must be JSON-RPC.
    fn read_until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(at) = self.read.iter().position(&wanted) {
            return self.read.remove(at).expect("found above");
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what}\nstderr:\n{}", self.stderr.lock().unwrap()));
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC, got ({e}): {line}"));
            assert_eq!(message["jsonrpc"], "2.0", "{line}");
            if wanted(&message) {
                return message;
            }
            self.read.push_back(message);
        }
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn stdio_serves_mcp_until_stdin_closes() {
    let mut server = StdioServer::start(&manifest(Some(LONG_PROBE)));
    server.send(&initialize_2025(1));
    let init = server.reply(1);
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert_eq!(
        init["result"]["capabilities"]["tools"]["listChanged"], true,
        "{init}"
    );
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    server.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = server.reply(2);
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"calc") && names.contains(&"echo"),
        "{names:?}"
    );

    server.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                        "params": {"name": "calc", "arguments": {"expression": "6*7"}}}));
    let call = server.reply(3);
    assert_eq!(call["result"]["isError"], false, "{call}");
    assert_eq!(
        call["result"]["structuredContent"],
        json!({"value": 42.0}),
        "{call}"
    );

    server.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                        "params": {"name": "no_such_tool", "arguments": {}}}));
    assert_eq!(server.reply(4)["error"]["code"], -32602);

    drop(server.stdin.take());
    let status = wait_exit(&mut server.child, Duration::from_secs(15)).unwrap_or_else(|| {
        panic!(
            "still running after stdin closed\n{}",
            server.stderr.lock().unwrap()
        )
    });
    assert_eq!(
        status.code(),
        Some(0),
        "stderr:\n{}",
        server.stderr.lock().unwrap()
    );
}

// --- Limits an attacker on the other end of a connection meets ---------

#[tokio::test]
async fn mcp_sessions_are_capped_and_stateless_requests_still_pass() {
    let server = Server::start(&manifest(None), &[]);
    // Sessions that never send `initialized` count too. Without
    // `[serve.auth]` one address may hold 32 of them: 32 addresses fill
    // the server.
    let mut refused = None;
    let mut opened = 0;
    'fill: for last in 2..=40u8 {
        let http = client_from([127, 0, 0, last]);
        for _ in 0..32 {
            let response = server.mcp_via(&http, &initialize_2025(opened), &[]).await;
            if response.status == StatusCode::SERVICE_UNAVAILABLE {
                refused = Some((opened, response.text));
                break 'fill;
            }
            assert!(response.status.is_success(), "{}", response.status);
            opened += 1;
        }
    }
    let (at, text) = refused.expect("the 1025th session is refused");
    assert_eq!(at, 1024, "sessions open before the refusal");
    assert!(text.contains("too_many_sessions"), "{text}");
    // Headers that claim 2026-07-28 do not get an initialize past the cap.
    let sneaky = server
        .mcp(
            &json!({"jsonrpc": "2.0", "id": 5000, "method": "initialize", "params": {
                "protocolVersion": "2026-07-28", "capabilities": {},
                "clientInfo": {"name": "toolhost-tests", "version": "1"}}}),
            &[("MCP-Protocol-Version", "2026-07-28")],
        )
        .await;
    assert_eq!(
        sneaky.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        sneaky.text
    );
    // Nor does a session id rmcp cannot read (it is no session id to rmcp).
    let unreadable = server
        .http
        .post(server.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header(
            "mcp-session-id",
            reqwest::header::HeaderValue::from_bytes(b"\xff").unwrap(),
        )
        .body(initialize_2025(5001).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(unreadable.status(), StatusCode::SERVICE_UNAVAILABLE);
    // A 2026-07-28 request needs no session and still runs.
    let call = server
        .mcp_2026(
            7,
            "tools/call",
            json!({"name": "calc", "arguments": {"expression": "6*7"}}),
        )
        .await;
    assert_eq!(call.result(7)["isError"], false, "{}", call.text);
}

#[tokio::test]
async fn a_huge_batch_is_refused_before_its_calls_are_read() {
    let server = Server::start(&manifest(None), &[]);
    // About 4 MiB of empty calls: refused on the count, with the fix named.
    let body = format!("[{}]", vec!["{}"; 1_300_000].join(","));
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let (kind, message) = refused(response, StatusCode::PAYLOAD_TOO_LARGE).await;
    assert_eq!(kind, "invalid_request");
    assert!(message.contains("1300000 tool calls"), "{message}");
    assert!(message.contains("--max-batch"), "{message}");
}

#[tokio::test]
async fn a_client_must_send_its_headers_in_time() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = Server::start(&manifest(None), &[]);
    // Half a request, then nothing: closed after the header timeout (10 s).
    // (A flood of them is shed sooner: see hostile.rs.)
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(b"GET /v1/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(30), slow.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "a connection that never finished its headers stayed open"
    );
}

#[test]
fn sigterm_stops_a_stdio_server_with_status_zero() {
    let mut server = StdioServer::start(&manifest(None));
    server.send(&initialize_2025(1));
    assert_eq!(server.reply(1)["result"]["protocolVersion"], "2025-11-25");
    let pid = rustix::process::Pid::from_child(&server.child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = wait_exit(&mut server.child, Duration::from_secs(10))
        .expect("the stdio server exits after SIGTERM");
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn a_bad_query_string_or_method_gets_a_json_error() {
    let server = Server::start(&manifest(None), &[]);
    let response = server
        .http
        .get(server.url("/v1/tools?format=openai&format=mcp"))
        .send()
        .await
        .unwrap();
    let (kind, message) = refused(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(kind, "invalid_request");
    assert!(message.contains("format"), "{message}");
    let response = server
        .http
        .get(server.url("/v1/tool_calls"))
        .send()
        .await
        .unwrap();
    let (kind, message) = refused(response, StatusCode::METHOD_NOT_ALLOWED).await;
    assert_eq!(kind, "method_not_allowed");
    assert!(message.contains("POST /v1/tool_calls"), "{message}");
}

#[tokio::test]
async fn closing_an_mcp_session_answers_no_content() {
    let server = Server::start(&manifest(None), &[]);
    let session = open_session(&server).await;
    let response = server.close_session(&session).await;
    // What the MCP Python SDK expects (it warns on anything but 200 or 204).
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_body_that_never_finishes_is_cut_off() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let server = Server::start(&manifest(None), &[]);
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(
        b"POST /v1/tool_calls HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n[",
    )
    .await
    .unwrap();
    // The body's deadline is 30 s; the answer is a 408.
    let mut answer = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(60), tcp.read(&mut answer)).await;
    let n = read.expect("no answer within 60 s").unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test]
async fn tool_calls_take_the_injected_context_from_a_header() {
    let server = Server::start(&manifest(Some("{}")), &[]);
    let call = json!([{"id": "a", "name": "injected", "args": {}}]);
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .header("toolhost-context", r#"{"user":"ada"}"#)
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answers: Value = response.json().await.unwrap();
    assert_eq!(answers[0]["content"], r#"{"user":"ada"}"#, "{answers}");
    // Without the header the tool sees none.
    assert_eq!(server.answers("", &call).await[0]["content"], "(none)");
    // A header that is not a JSON object is the client's mistake, named.
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .header("toolhost-context", "ada")
        .json(&call)
        .send()
        .await
        .unwrap();
    let (kind, message) = refused(response, StatusCode::BAD_REQUEST).await;
    assert_eq!(kind, "invalid_request");
    assert!(message.contains("toolhost-context"), "{message}");
}

#[tokio::test]
async fn mcp_calls_take_context_from_meta_and_send_progress_and_images() {
    let server = Server::start(&manifest(Some("{}")), &[]);
    let call = |id: u64, name: &str, arguments: Value, extra_meta: Value| {
        let mut meta = meta_2026();
        meta.as_object_mut()
            .unwrap()
            .extend(extra_meta.as_object().unwrap().clone());
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": arguments, "_meta": meta}})
    };
    let headers = |name: &'static str| {
        [
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", name),
        ]
    };
    let seen = server
        .mcp(
            &call(
                1,
                "injected",
                json!({}),
                json!({"toolhost/context": {"tenant": "t1"}}),
            ),
            &headers("injected"),
        )
        .await;
    assert_eq!(
        seen.result(1)["content"][0]["text"],
        r#"{"tenant":"t1"}"#,
        "{}",
        seen.text
    );
    let bad = server
        .mcp(
            &call(2, "injected", json!({}), json!({"toolhost/context": "t1"})),
            &headers("injected"),
        )
        .await;
    assert!(
        bad.reply(2)["error"]["message"]
            .as_str()
            .unwrap()
            .contains("toolhost/context"),
        "{}",
        bad.text
    );
    let progress = server
        .mcp(
            &call(
                3,
                "report_progress",
                json!({"n": 2}),
                json!({"progressToken": "p-1"}),
            ),
            &headers("report_progress"),
        )
        .await;
    let reports: Vec<&Value> = progress
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(reports.len(), 3, "{}", progress.text);
    assert!(
        reports
            .iter()
            .all(|r| r["params"]["progressToken"] == "p-1")
    );
    assert_eq!(reports[2]["params"]["progress"], 2.0);
    assert_eq!(progress.result(3)["content"][0]["text"], "done");
    let media = server
        .mcp(
            &call(4, "media", json!({"size": 16}), json!({})),
            &headers("media"),
        )
        .await;
    let content = &media.result(4)["content"];
    assert_eq!(content[1]["type"], "image", "{content}");
    assert_eq!(content[1]["mimeType"], "image/png");
    assert_eq!(content[2]["type"], "resource_link");
}
