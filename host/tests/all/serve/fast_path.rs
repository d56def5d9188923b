//! The MCP fast path (a plain stateless `tools/call` answered on its
//! request's own task, in front of rmcp): every request it takes, and every
//! one it leaves to rmcp, is answered exactly as rmcp answers it. Each case
//! goes to two servers of one manifest, one with the fast path and one
//! with `TOOLHOST_MCP_FAST_PATH=0` (rmcp for every request); the answers
//! must match in status, the headers that matter and body, and the
//! servers' counters must match after every case.
//! `toolhost_mcp_fast_path_requests_total` tells which path answered.

use super::*;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";

/// The counter of requests the fast path answered.
const FAST: &str = "toolhost_mcp_fast_path_requests_total";

/// One request to `/mcp`, as sent.
#[derive(Clone)]
struct Case {
    label: &'static str,
    method: reqwest::Method,
    headers: Vec<(&'static str, String)>,
    body: String,
}

/// What matters of an answer: the status, the headers a client acts on,
/// and the body (its JSON-RPC messages when it has any).
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    content_type: Option<String>,
    session: bool,
    www_authenticate: Option<String>,
    retry_after: Option<String>,
    body: Body,
    /// A JSON body as sent: the fast path's is rmcp's, byte for byte.
    json_text: Option<String>,
}

#[derive(Debug, PartialEq)]
enum Body {
    Messages(Vec<Value>),
    Json(Value),
    Text(String),
}

/// The headers of a 2026-07-28 `tools/call` of `name`.
fn call_headers(name: &str) -> Vec<(&'static str, String)> {
    vec![
        ("content-type", "application/json".into()),
        ("accept", "application/json, text/event-stream".into()),
        ("mcp-protocol-version", "2026-07-28".into()),
        ("mcp-method", "tools/call".into()),
        ("mcp-name", name.into()),
    ]
}

/// A 2026-07-28 `tools/call` of `name` with `arguments` and `meta` (the
/// required keys are added), as the fast path takes it.
fn call(label: &'static str, id: u64, name: &str, arguments: Value, meta: Value) -> Case {
    let mut full = meta_2026();
    for (key, value) in meta.as_object().cloned().unwrap_or_default() {
        full[key] = value;
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": arguments, "_meta": full}});
    Case {
        label,
        method: reqwest::Method::POST,
        headers: call_headers(name),
        body: body.to_string(),
    }
}

impl Case {
    /// The case with header `name` set to `value` (or removed, for `None`).
    fn header(mut self, name: &'static str, value: Option<&str>) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        if let Some(value) = value {
            self.headers.push((name, value.to_owned()));
        }
        self
    }

    /// The case with another body.
    fn body(mut self, body: impl Into<String>) -> Self {
        self.body = body.into();
        self
    }
}

/// Two servers of one manifest: the fast path, and rmcp alone.
struct Pair {
    fast: Server,
    rmcp: Server,
    /// The token `/metrics` is read with, when callers are told apart.
    token: Option<&'static str>,
}

impl Pair {
    fn start(manifest: &str, env: &[(&str, &str)], token: Option<&'static str>) -> Self {
        // A small --max-body, for a body over it.
        let args = ["--max-body", "65536"];
        let fast = Server::start_with_env(manifest, &args, env);
        let mut env = env.to_vec();
        env.push(("TOOLHOST_MCP_FAST_PATH", "0"));
        let rmcp = Server::start_with_env(manifest, &args, &env);
        Self { fast, rmcp, token }
    }

    async fn metrics(&self, server: &Server) -> String {
        let mut request = server.http.get(server.url("/metrics"));
        if let Some(token) = self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    }

    /// The counters both servers keep for every call and refusal (the
    /// fast path's own counter and timings left out).
    async fn counters(&self, server: &Server) -> Vec<String> {
        let text = self.metrics(server).await;
        let mut lines: Vec<String> = text
            .lines()
            .filter(|line| {
                [
                    "toolhost_tool_calls_total",
                    "toolhost_rejected_requests_total",
                    "toolhost_rate_limited_total",
                    "toolhost_tool_call_duration_seconds_count",
                    "toolhost_tool_call_queue_wait_seconds_count",
                    "toolhost_instances_in_flight",
                ]
                .iter()
                .any(|name| line.starts_with(name))
            })
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    /// Send `case` to both servers; assert that they answer alike and
    /// count alike; return the answer and whether the fast path took it.
    async fn same(&self, case: &Case) -> (Answer, bool) {
        let before = metric(&self.metrics(&self.fast).await, FAST).unwrap_or(0.0);
        let fast = send(&self.fast, case).await;
        let rmcp = send(&self.rmcp, case).await;
        assert_eq!(
            fast, rmcp,
            "{}: the fast path answers as rmcp does",
            case.label
        );
        assert_eq!(
            self.counters(&self.fast).await,
            self.counters(&self.rmcp).await,
            "{}: both count alike",
            case.label
        );
        let after = metric(&self.metrics(&self.fast).await, FAST).unwrap_or(0.0);
        assert_eq!(
            metric(&self.metrics(&self.rmcp).await, FAST).unwrap_or(0.0),
            0.0,
            "{}: the server without the fast path never takes it",
            case.label
        );
        (fast, after > before)
    }

    /// [`Pair::same`] for a case the fast path must take.
    async fn taken(&self, case: Case) -> Answer {
        let (answer, taken) = self.same(&case).await;
        assert!(taken, "{}: the fast path took it: {answer:?}", case.label);
        answer
    }

    /// [`Pair::same`] for a case the fast path must leave to rmcp.
    async fn left(&self, case: Case) -> Answer {
        let (answer, taken) = self.same(&case).await;
        assert!(!taken, "{}: left to rmcp: {answer:?}", case.label);
        answer
    }
}

/// `case` sent to `server` on a connection of its own.
async fn send(server: &Server, case: &Case) -> Answer {
    let mut request = client()
        .request(case.method.clone(), server.url("/mcp"))
        .body(case.body.clone());
    for (name, value) in &case.headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.expect("an answer");
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (status, content_type) = (response.status(), header("content-type"));
    let (session, www_authenticate, retry_after) = (
        response.headers().contains_key("mcp-session-id"),
        header("www-authenticate"),
        header("retry-after"),
    );
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let messages = jsonrpc_messages(&headers, &text);
    let json_text = content_type
        .as_deref()
        .is_some_and(|t| t.starts_with("application/json"))
        .then(|| text.clone());
    let body = if !messages.is_empty() {
        Body::Messages(messages)
    } else if let Ok(json) = serde_json::from_str(&text) {
        Body::Json(json)
    } else {
        Body::Text(text)
    };
    Answer {
        status: status.as_u16(),
        content_type,
        session,
        www_authenticate,
        retry_after,
        body,
        json_text,
    }
}

impl Answer {
    /// The one JSON-RPC message of the answer.
    #[track_caller]
    fn message(&self) -> &Value {
        match &self.body {
            Body::Messages(messages) if messages.len() == 1 => &messages[0],
            _ => panic!("expected one JSON-RPC message: {self:?}"),
        }
    }
}

#[tokio::test]
async fn the_fast_path_answers_what_it_takes_as_rmcp_does() {
    let pair = Pair::start(&manifest(Some(SHORT_PROBE)), &[], None);
    let calc = |label, id, expression: &str| {
        call(
            label,
            id,
            "calc",
            json!({"expression": expression}),
            json!({}),
        )
    };
    let answer = pair.taken(calc("a call", 1, "6*7")).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.content_type.as_deref(), Some("application/json"));
    assert_eq!(answer.message()["result"]["content"][0]["text"], "42");
    // A tool's failure is a result with isError, on either path.
    let answer = pair.taken(calc("a tool error", 2, "1/")).await;
    assert_eq!(answer.message()["result"]["isError"], true, "{answer:?}");
    let invalid = call("invalid arguments", 3, "calc", json!({"x": 1}), json!({}));
    let answer = pair.taken(invalid).await;
    assert_eq!(answer.message()["result"]["isError"], true, "{answer:?}");
    // A string id, no arguments at all, the application's context.
    let mut no_arguments = calc("a string id, no arguments", 0, "");
    no_arguments.body = json!({"jsonrpc": "2.0", "id": "call-7", "method": "tools/call",
        "params": {"name": "calc", "_meta": meta_2026()}})
    .to_string();
    pair.taken(no_arguments).await;
    let context = call(
        "an injected context",
        4,
        "calc",
        json!({"expression": "1+1"}),
        json!({"toolhost/context": {"user": "ada"}}),
    );
    pair.taken(context).await;
    let seen = call(
        "a context the tool reads",
        8,
        "injected",
        json!({}),
        json!({"toolhost/context": {"tenant": "t1"}}),
    );
    let answer = pair.taken(seen).await;
    assert_eq!(
        answer.message()["result"]["content"][0]["text"],
        r#"{"tenant":"t1"}"#
    );
    // A call that runs out of time: the limit error, after about 1 s.
    let spin = call("a runaway call", 5, "spin", json!({}), json!({}));
    let answer = pair.taken(spin).await;
    assert_eq!(answer.message()["result"]["isError"], true, "{answer:?}");
    // Headers rmcp reads loosely, written otherwise.
    let spelled = calc("header spellings", 6, "2+2")
        .header("accept", Some("text/event-stream, APPLICATION/JSON"))
        .header("content-type", Some("application/json; charset=utf-8"))
        .header(
            "host",
            Some(&format!("LOCALHOST:{}", pair.fast.addr.port())),
        );
    pair.taken(spelled).await;
}

#[tokio::test]
async fn the_fast_path_leaves_every_other_request_to_rmcp() {
    let pair = Pair::start(&manifest(Some(SHORT_PROBE)), &[], None);
    let calc = || call("calc", 1, "calc", json!({"expression": "6*7"}), json!({}));
    let left = [
        calc().body("{not json").tap("malformed JSON"),
        calc().body(format!("[{}]", calc().body)).tap("a batch"),
        calc()
            .body(
                r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            )
            .tap("a notification"),
        calc()
            .body(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#)
            .tap("a response"),
        calc()
            .header("accept", Some("application/json"))
            .tap("Accept without event streams"),
        calc()
            .header("accept", Some("application/json, text/event-stream;q=0"))
            .tap("Accept weighing event streams out"),
        calc()
            .header("content-type", Some("text/plain"))
            .tap("not JSON"),
        calc().header("mcp-name", None).tap("no Mcp-Name"),
        calc()
            .header("mcp-name", Some("spin"))
            .tap("Mcp-Name of another tool"),
        calc()
            .header("mcp-method", Some("tools/list"))
            .tap("Mcp-Method of another method"),
        calc()
            .header("mcp-protocol-version", Some("2025-11-25"))
            .tap("a header version other than the body's"),
        calc()
            .header("mcp-protocol-version", None)
            .tap("no protocol header"),
        calc()
            .header("mcp-session-id", Some("no-such-session"))
            .tap("an unknown session"),
        calc()
            .header(
                "origin",
                Some(&format!("http://127.0.0.1:{}", pair.fast.addr.port())),
            )
            .tap("a browser's origin"),
        calc()
            .header("origin", Some("https://evil.example"))
            .tap("a foreign origin"),
        calc()
            .header("host", Some("evil.example"))
            .tap("a foreign host"),
        // Loopback to the edge, not one of the names rmcp takes.
        calc()
            .header("host", Some("127.0.0.2"))
            .tap("another loopback host"),
        call("unknown", 1, "nope", json!({}), json!({})).tap("an unknown tool"),
        call(
            "log level",
            1,
            "calc",
            json!({"expression": "1"}),
            json!({"io.modelcontextprotocol/logLevel": "debug"}),
        )
        .tap("a log level"),
        call(
            "elicitation",
            1,
            "calc",
            json!({"expression": "1"}),
            json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}),
        )
        .tap("elicitation declared"),
        call(
            "tasks",
            1,
            "calc",
            json!({"expression": "1"}),
            json!({"io.modelcontextprotocol/clientCapabilities":
                    {"extensions": {"io.modelcontextprotocol/tasks": {}}}}),
        )
        .tap("the tasks extension declared"),
        call(
            "no capabilities",
            1,
            "calc",
            json!({"expression": "1"}),
            json!({}),
        )
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "calc", "arguments": {"expression": "1"},
                "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}})
            .to_string(),
        )
        .tap("no client capabilities"),
        call("state", 1, "calc", json!({"expression": "1"}), json!({}))
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "calc", "arguments": {"expression": "1"}, "requestState": "abc",
                "_meta": meta_2026()}})
                .to_string(),
            )
            .tap("a request state"),
        call(
            "context",
            1,
            "calc",
            json!({"expression": "1"}),
            json!({"toolhost/context": "not an object"}),
        )
        .tap("a context that is no object"),
        call("list", 1, "calc", json!({}), json!({}))
            .header("mcp-method", Some("tools/list"))
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                         "params": {"_meta": meta_2026()}})
                .to_string(),
            )
            .tap("tools/list"),
    ];
    for case in left {
        pair.left(case).await;
    }
    // A body over --max-body is refused at the edge, on either path.
    let huge = "1+".repeat(40_000) + "1";
    let oversize = call(
        "oversize",
        1,
        "calc",
        json!({"expression": huge}),
        json!({}),
    );
    let answer = pair.left(oversize).await;
    assert_eq!(answer.status, 413, "{answer:?}");
    // A progress token's answer is an event stream, as rmcp gives it.
    let progress = call(
        "a progress token",
        9,
        "report_progress",
        json!({"n": 2}),
        json!({"progressToken": "p1"}),
    );
    let answer = pair.left(progress).await;
    assert!(
        answer
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("text/event-stream")),
        "{answer:?}"
    );
    let Body::Messages(messages) = &answer.body else {
        panic!("{answer:?}");
    };
    assert_eq!(
        messages.len(),
        4,
        "three reports, then the result: {answer:?}"
    );
}

/// Give a case its label (for the assertion messages).
trait Tap {
    fn tap(self, label: &'static str) -> Self;
}

impl Tap for Case {
    fn tap(mut self, label: &'static str) -> Self {
        self.label = label;
        self
    }
}

#[tokio::test]
async fn the_fast_path_keeps_tokens_scopes_and_context_bindings() {
    let manifest = format!(
        "[[tool]]\ncomponent = '{}'\n\n[[tool]]\ncomponent = '{}'\nstores = ['notes']\n\n\
         [store.notes]\nbackend = 'embedded'\nscope = 'user'\n\n[serve.auth]\n\
         context.user = 'claim:sub'\n\
         [[serve.auth.token]]\nprincipal = 'alice'\nenv = 'ALICE_TOKEN'\n\
         scopes = ['tools:*', 'metrics:read']\n\
         [[serve.auth.token]]\nprincipal = 'bob'\nenv = 'BOB_TOKEN'\nscopes = ['tools:recall']\n",
        component("calc").display(),
        component("notes").display(),
    );
    let pair = Pair::start(
        &manifest,
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
        Some(ALICE),
    );
    let as_ =
        |case: Case, token: &str| case.header("authorization", Some(&format!("Bearer {token}")));
    let remember = call(
        "remember",
        1,
        "remember",
        json!({"topic": "parking", "text": "level 3"}),
        json!({}),
    );
    pair.taken(as_(remember, ALICE)).await;
    let recall = call(
        "recall",
        2,
        "recall",
        json!({"topic": "parking"}),
        json!({}),
    );
    let alice = pair.taken(as_(recall.clone(), ALICE)).await;
    assert!(alice.message().to_string().contains("level 3"), "{alice:?}");
    let bob = pair
        .taken(as_(recall.clone(), BOB).tap("bob's recall"))
        .await;
    assert!(!bob.message().to_string().contains("level 3"), "{bob:?}");
    // Refused at the edge, before either path: no token, a wrong one, a
    // tool out of the caller's scopes.
    let answer = pair.left(recall.clone().tap("no token")).await;
    assert_eq!(answer.status, 401);
    let answer = pair
        .left(as_(recall.clone(), "not-a-token-of-anyone").tap("a wrong token"))
        .await;
    assert_eq!(answer.status, 401);
    let calc = call(
        "calc out of scope",
        3,
        "calc",
        json!({"expression": "1"}),
        json!({}),
    );
    let answer = pair.left(as_(calc, BOB)).await;
    assert_eq!(answer.status, 403);
    // A context key bound to the caller's identity, given by the request:
    // refused by rmcp (the fast path takes only contexts it would run).
    let named = call(
        "bob names alice",
        4,
        "recall",
        json!({"topic": "parking"}),
        json!({"toolhost/context": {"user": "alice"}}),
    );
    let answer = pair.left(as_(named, BOB)).await;
    assert!(answer.message().get("error").is_some(), "{answer:?}");
}

#[tokio::test]
async fn the_fast_path_refuses_over_the_rate_as_rmcp_does() {
    let manifest = format!(
        "{}\n[serve.limits]\nper_principal = {{ rate = \"2/min\" }}\n",
        manifest(None)
    );
    let pair = Pair::start(&manifest, &[], None);
    let calc = |id| call("calc", id, "calc", json!({"expression": "1+1"}), json!({}));
    pair.taken(calc(1)).await;
    pair.taken(calc(2)).await;
    let answer = pair.taken(calc(3).tap("over the rate")).await;
    let error = &answer.message()["error"];
    assert_eq!(error["code"], -32029, "{answer:?}");
    assert_eq!(answer.status, 200);
}
