//! `toolhost serve` against hostile and careless clients: the checks every
//! route shares, what an unauthenticated peer can make the server hold,
//! repeated JSON-RPC ids, and a shutdown that answers every call in flight.
//!
//! Time bounds here separate "happened" from "waited out a timeout of 5 s
//! or more"; what a test asserts beyond that comes from what the server
//! reports (its answers, `/metrics`, its exit status).

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::*;

/// Send `request` as is on a new connection and read the whole answer.
pub(super) async fn raw(server: &Server, request: &str) -> String {
    let mut tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), tcp.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// The status code of a raw HTTP answer.
pub(super) fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"))
}

/// A refusals counter of `/metrics`.
pub(super) fn rejected(metrics: &str, front_end: &str, reason: &str) -> f64 {
    metric(
        metrics,
        &format!(
            "toolhost_rejected_requests_total{{front_end=\"{front_end}\",reason=\"{reason}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

// 1. Edge checks on every route.

#[tokio::test]
async fn a_foreign_host_is_refused_on_every_route_healthz_and_unknown_paths_included() {
    let server = Server::start(&manifest(None), &[]);
    for (method, path) in [
        ("GET", "/healthz"),
        ("GET", "/metrics"),
        ("GET", "/v1/tools"),
        ("POST", "/v1/tool_calls"),
        ("POST", "/mcp"),
        ("GET", "/no-such-route"),
    ] {
        let answer = raw(
            &server,
            &format!(
                "{method} {path} HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            ),
        )
        .await;
        assert_eq!(status_of(&answer), 403, "{method} {path}: {answer}");
        assert!(
            answer.contains("forbidden_host"),
            "{method} {path}: {answer}"
        );
    }
    for path in ["/healthz", "/no-such-route"] {
        let response = server
            .http
            .get(server.url(path))
            .header("origin", "https://evil.example")
            .send()
            .await
            .unwrap();
        let (kind, _) = refused(response, StatusCode::FORBIDDEN).await;
        assert_eq!(kind, "forbidden_origin", "{path}");
    }
}

#[tokio::test]
async fn an_absolute_form_target_is_what_the_request_is_for() {
    let server = Server::start(&manifest(None), &[]);
    // The target names another host; a loopback Host header cannot hide it.
    let answer = raw(
        &server,
        "GET http://evil.example/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status_of(&answer), 403, "{answer}");
    // And a loopback target is served whatever the Host header says.
    let answer = raw(
        &server,
        &format!(
            "GET http://{}/healthz HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n",
            server.addr
        ),
    )
    .await;
    assert_eq!(status_of(&answer), 200, "{answer}");
}

#[tokio::test]
async fn repeated_protocol_headers_are_refused_never_resolved() {
    let server = Server::start(&manifest(None), &[]);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta_2026()}});
    for (name, first, second) in [
        ("mcp-protocol-version", "2026-07-28", "2025-11-25"),
        ("mcp-method", "tools/list", "tools/call"),
        ("mcp-name", "calc", "other"),
        ("mcp-session-id", "a", "b"),
        ("mcp-param-region", "eu", "us"),
    ] {
        let response = server
            .http
            .post(server.url("/mcp"))
            .header(CONTENT_TYPE, "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(name, first)
            .header(name, second)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let (kind, message) = refused(response, StatusCode::BAD_REQUEST).await;
        assert_eq!(kind, "invalid_request", "{name}");
        assert!(message.contains(name), "{name}: {message}");
    }
    // Two versions folded onto one line are two versions.
    let response = server
        .http
        .post(server.url("/mcp"))
        .header(CONTENT_TYPE, "application/json")
        .header("mcp-protocol-version", "2026-07-28, 2025-11-25")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    refused(response, StatusCode::BAD_REQUEST).await;
    // Even /healthz refuses a repeated Authorization.
    let response = server
        .http
        .get(server.url("/healthz"))
        .header("authorization", "Bearer a")
        .header("authorization", "Bearer b")
        .send()
        .await
        .unwrap();
    refused(response, StatusCode::BAD_REQUEST).await;
}

// 2. What an unauthenticated peer can hold.

#[tokio::test]
async fn a_flood_of_half_open_connections_cannot_lock_a_client_out() {
    let server = Server::start(&manifest(None), &[]);
    // More connections than the server holds, from four addresses (every
    // 127.0.0.0/8 address is this machine), each sending half a request
    // and then nothing, as a slowloris client does.
    let mut flood = Vec::new();
    for i in 0..1100u16 {
        let last = 2 + u8::try_from(i % 4).unwrap();
        let source = std::net::SocketAddr::from(([127, 0, 0, last], 0));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(source).unwrap();
        let mut tcp = socket.connect(server.addr).await.unwrap();
        tcp.write_all(b"GET /v1/tools HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        flood.push(tcp);
    }
    // A client that sends its request at once is served, while the flood
    // is still there (well inside the 10 s it gets to finish its headers).
    let healthz = server
        .http
        .get(server.url("/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .expect("a well-behaved client is served during the flood");
    assert_eq!(healthz.status(), StatusCode::OK);
    // The server made room by closing the oldest half-open connections.
    let mut oldest = flood.swap_remove(0);
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), oldest.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the oldest half-open connection is still open"
    );
    // 1,101 connections for 1,024 places: the server closed at least 77 of
    // the flood's. Most are shed to make room; on a loaded machine, where
    // the flood takes longer than the 10 s a connection gets for its
    // headers, some are closed by that timeout first: counted by what the
    // flood sees (each closed socket reads an answer or its end), not by
    // the shed counter alone, so the count holds however fast the flood is.
    let mut closed = 0;
    for tcp in &mut flood {
        let mut byte = [0u8; 1];
        if tokio::time::timeout(Duration::from_millis(5), tcp.read(&mut byte))
            .await
            .is_ok()
        {
            closed += 1;
        }
    }
    assert!(
        closed + 1 >= 77,
        "only {closed} of the flood's connections were closed"
    );
    let metrics = server.metrics().await;
    assert!(
        rejected(&metrics, "http", "connection_shed") >= 1.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn streams_that_last_take_at_most_half_of_an_addresss_connections() {
    let server = Server::start(&manifest(None), &[]);
    let listen = |id: u64| {
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
            "params": {"notifications": {"toolsListChanged": true}}});
        body["params"]["_meta"] = meta_2026();
        body
    };
    // 128 subscriptions, held open: an address's share of streams.
    let mut held = Vec::new();
    for id in 0..128 {
        let response = server
            .http
            .post(server.url("/mcp"))
            .header(CONTENT_TYPE, "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2026-07-28")
            .header("Mcp-Method", "subscriptions/listen")
            .body(listen(id).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "subscription {id}");
        held.push(response);
    }
    let response = server
        .mcp_2026(
            500,
            "subscriptions/listen",
            json!({"notifications": {"toolsListChanged": true}}),
        )
        .await;
    assert_eq!(
        response.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        response.text
    );
    assert!(
        response.text.contains("too_many_streams"),
        "{}",
        response.text
    );
    // The rest of the address's connections still serve requests.
    let answers = server.answers("", &json!([calc("a", "6*7")])).await;
    assert_eq!(answers[0]["content"], "42");
    drop(held);
}

#[tokio::test]
async fn header_bytes_past_the_bound_are_refused() {
    let server = Server::start(&manifest(None), &[]);
    let padding = "x".repeat(20 << 10);
    let answer = raw(
        &server,
        &format!("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {padding}\r\n\r\n"),
    )
    .await;
    assert_eq!(status_of(&answer), 431, "{answer}");
    // Within the bound, the same request is served.
    let padding = "x".repeat(8 << 10);
    let answer = raw(
        &server,
        &format!(
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: {padding}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert_eq!(status_of(&answer), 200, "{answer}");
}

// 3. JSON-RPC ids.

/// `tools/call` of the probe's `sleep` for `ms`, under `id`.
fn sleep_call(id: u64, ms: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "sleep", "arguments": {"n": ms}}})
}

#[tokio::test]
async fn a_repeated_id_in_a_session_is_refused_and_the_first_call_still_answered() {
    let server = Arc::new(Server::start(&manifest(Some(LONG_PROBE)), &[]));
    let session = open_session(&server).await;
    let headers = [
        ("mcp-session-id", session.as_str()),
        ("MCP-Protocol-Version", "2025-11-25"),
    ];
    let first = tokio::spawn({
        let server = server.clone();
        let session = session.clone();
        async move {
            server
                .mcp(
                    &sleep_call(7, 5000),
                    &[
                        ("mcp-session-id", session.as_str()),
                        ("MCP-Protocol-Version", "2025-11-25"),
                    ],
                )
                .await
        }
    });
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 1.0, Duration::from_secs(60))
        .await;
    assert!(
        running.is_some(),
        "the first call never started\n{}",
        server.stderr()
    );
    let second = server.mcp(&sleep_call(7, 10), &headers).await;
    let error = &second.reply(7)["error"];
    assert_eq!(error["code"], -32600, "{}", second.text);
    assert!(
        error["message"].as_str().unwrap().contains("in flight"),
        "{error}"
    );
    let first = first.await.unwrap();
    assert_eq!(
        first.result(7)["content"][0]["text"],
        "awake",
        "the first request keeps its own answer: {}",
        first.text
    );
    // Once answered, the id may be used again.
    let again = server.mcp(&sleep_call(7, 10), &headers).await;
    assert_eq!(again.result(7)["content"][0]["text"], "awake");
}

#[test]
fn a_repeated_id_over_stdio_gets_an_error_and_the_first_call_its_answer() {
    let mut server = StdioServer::start(&manifest(Some(LONG_PROBE)));
    server.send(&initialize_2025(1));
    server.reply(1);
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    server.send(&sleep_call(7, 5000));
    server.send(&sleep_call(7, 10));
    let mut answers = [server.reply(7), server.reply(7)];
    answers.sort_by_key(|a| a.get("error").is_none());
    assert_eq!(answers[0]["error"]["code"], -32600, "{}", answers[0]);
    assert_eq!(
        answers[1]["result"]["content"][0]["text"], "awake",
        "{}",
        answers[1]
    );
}

// 4. Shutdown, and sessions that end.

pub(super) fn sigterm(child: &Child) {
    let pid = rustix::process::Pid::from_child(child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
}

#[tokio::test]
async fn sigterm_answers_every_call_in_flight_on_every_front_end_and_refuses_new_work() {
    let mut server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let session = open_session(&server).await;
    let url = server.url("");
    let http = client();
    // One call in flight each: the HTTP API, MCP 2026-07-28, MCP 2025-11-25.
    let api = tokio::spawn({
        let http = http.clone();
        let url = url.clone();
        async move {
            let response = http
                .post(format!("{url}/v1/tool_calls"))
                .json(&json!([{"id": "api", "name": "sleep", "args": {"n": 5000}}]))
                .send()
                .await?;
            response.json::<Value>().await
        }
    });
    let post_mcp = |body: Value, headers: Vec<(&'static str, String)>| {
        let http = http.clone();
        let url = url.clone();
        tokio::spawn(async move {
            let mut request = http
                .post(format!("{url}/mcp"))
                .header(CONTENT_TYPE, "application/json")
                .header("accept", "application/json, text/event-stream")
                .body(body.to_string());
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request.send().await?;
            let headers = response.headers().clone();
            let text = response.text().await?;
            Ok::<_, reqwest::Error>(jsonrpc_messages(&headers, &text))
        })
    };
    let mut stateless = sleep_call(20, 5000);
    stateless["params"]["_meta"] = meta_2026();
    let stateless = post_mcp(
        stateless,
        vec![
            ("MCP-Protocol-Version", "2026-07-28".into()),
            ("Mcp-Method", "tools/call".into()),
            ("Mcp-Name", "sleep".into()),
        ],
    );
    let in_session = post_mcp(
        sleep_call(25, 5000),
        vec![
            ("mcp-session-id", session.clone()),
            ("MCP-Protocol-Version", "2025-11-25".into()),
        ],
    );
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 3.0, Duration::from_secs(60))
        .await;
    assert!(
        running.is_some(),
        "the calls never all started\n{}",
        server.stderr()
    );
    sigterm(&server.child);
    // New work is refused with 503 and a time to retry; what lets the
    // running calls finish still passes.
    let refusal = eventually_refused(&server).await;
    assert_eq!(refusal.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refusal.1.as_deref(), Some("5"), "Retry-After");
    let healthz = server
        .http
        .get(server.url("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(healthz.status(), StatusCode::SERVICE_UNAVAILABLE);
    let mcp = server.mcp_2026(30, "tools/list", json!({})).await;
    assert_eq!(mcp.status, StatusCode::SERVICE_UNAVAILABLE, "{}", mcp.text);
    assert_eq!(mcp.reply(30)["error"]["code"], -32000, "{}", mcp.text);
    // Every call in flight gets its real answer.
    let api = api.await.unwrap().expect("the HTTP API call is answered");
    assert_eq!(api[0]["content"], "awake", "{api}");
    let stateless = stateless
        .await
        .unwrap()
        .expect("the 2026-07-28 call is answered");
    assert_eq!(
        stateless[0]["result"]["content"][0]["text"], "awake",
        "{stateless:?}"
    );
    let in_session = in_session
        .await
        .unwrap()
        .expect("the 2025-11-25 call is answered");
    let answer = in_session
        .iter()
        .find(|m| m["id"] == 25)
        .expect("an answer");
    assert_eq!(answer["result"]["content"][0]["text"], "awake", "{answer}");
    let exit = wait_exit_async(&mut server.child, Duration::from_secs(30)).await;
    let status =
        exit.unwrap_or_else(|| panic!("still running 30 s after SIGTERM\n{}", server.stderr()));
    assert_eq!(status.code(), Some(0), "stderr:\n{}", server.stderr());
}

/// Poll `POST /v1/tool_calls` until the draining server refuses it: its
/// status and `Retry-After`.
async fn eventually_refused(server: &Server) -> (StatusCode, Option<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let response = server.tool_calls("", &json!([calc("x", "1+1")])).await;
        if response.status() != StatusCode::OK {
            let retry = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let status = response.status();
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["error"]["type"], "shutting_down", "{body}");
            return (status, retry);
        }
        assert!(
            Instant::now() < deadline,
            "new work was still taken after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn calls_still_running_when_the_drain_time_is_up_are_answered_with_an_error() {
    let mut server = Server::start(&manifest(Some(LONG_PROBE)), &["--drain", "1s"]);
    let request = client()
        .post(server.url("/v1/tool_calls"))
        .json(&json!([calc("quick", "6*7"), {"id": "stuck", "name": "spin", "args": {}}]));
    let task = tokio::spawn(async move { request.send().await?.json::<Value>().await });
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 1.0, Duration::from_secs(60))
        .await;
    assert!(running.is_some(), "spin never started\n{}", server.stderr());
    sigterm(&server.child);
    let answers = task
        .await
        .unwrap()
        .expect("the batch is answered, not cut off");
    assert_eq!(answers[0]["content"], "42", "{answers}");
    let stuck = &answers[1];
    assert_eq!(stuck["tool_call_id"], "stuck");
    assert_eq!(stuck["error"]["type"], "internal", "{stuck}");
    assert_eq!(stuck["error"]["retryable"], true, "{stuck}");
    assert!(
        stuck["content"].as_str().unwrap().contains("shutting down"),
        "{stuck}"
    );
    let exit = wait_exit_async(&mut server.child, Duration::from_secs(20)).await;
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "{}", server.stderr());
}

#[test]
fn sigterm_over_stdio_answers_the_call_in_flight_refuses_new_requests_and_exits_zero() {
    let mut server = StdioServer::start(&manifest(Some(LONG_PROBE)));
    server.send(&initialize_2025(1));
    server.reply(1);
    server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // The probe's sleep reports progress before it sleeps: the signal
    // comes once the call runs.
    let mut call = sleep_call(2, 5000);
    call["params"]["_meta"] = json!({"progressToken": "nap"});
    server.send(&call);
    server.progress("sleeping");
    sigterm(&server.child);
    // Draining once it says so (its log is on stderr).
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.stderr.lock().unwrap().contains("shutting down") {
        assert!(Instant::now() < deadline, "no shutdown began after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    server.send(&json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    let refused = server.reply(4);
    assert_eq!(refused["error"]["code"], -32000, "{refused}");
    let answer = server.reply(2);
    assert_eq!(answer["result"]["content"][0]["text"], "awake", "{answer}");
    let status = wait_exit(&mut server.child, Duration::from_secs(20))
        .expect("the stdio server exits once the call is answered");
    assert!(status.success(), "{status:?}");
}

/// A server with a session open and `spin` (which runs until its ten-minute
/// deadline) called in it and running; the session's id and the call.
/// The server logs what ends a session's requests (toolhost at info) and
/// rmcp's service loop (`serve finished`, at info; its drain's timeout is a
/// warning).
async fn spin_in_a_session() -> (Arc<Server>, String, tokio::task::JoinHandle<McpResponse>) {
    let server = Arc::new(Server::start_with_env(
        &manifest(Some(LONG_PROBE)),
        &[],
        &[("RUST_LOG", "warn,toolhost=info,rmcp::service=info")],
    ));
    let session = open_session(&server).await;
    let call = tokio::spawn({
        let server = server.clone();
        let session = session.clone();
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                              "params": {"name": "spin", "arguments": {}}});
            server.mcp_in_session(&body, &session).await
        }
    });
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 1.0, Duration::from_secs(60))
        .await;
    assert!(running.is_some(), "spin never started\n{}", server.stderr());
    (server, session, call)
}

#[tokio::test]
async fn ending_a_session_stops_its_running_calls_at_once() {
    let (server, session, call) = spin_in_a_session().await;
    let finished = |log: &str| log.matches("serve finished").count();
    let services_ended = finished(&server.stderr());
    let closed = server.close_session(&session).await;
    assert!(closed.status().is_success(), "{}", closed.status());
    server
        .logged(
            &[
                "the session ended: cancelling its requests in flight",
                "in_flight=1",
            ],
            "the session's end cancelled nothing",
        )
        .await;
    let stopped = server
        .wait_for_metric("toolhost_instances_in_flight", 0.0, Duration::from_secs(60))
        .await;
    assert!(
        stopped.is_some(),
        "the session's call still runs\n{}",
        server.stderr()
    );
    // Stopped by the session's end, not by rmcp's five-second drain of the
    // ended service, which stops a handler still running only once it has
    // timed out, and says so before the service's end. (Its ten-minute
    // deadline is further still.)
    server
        .logged_where(
            |log| finished(log) > services_ended,
            "the session's service never ended",
        )
        .await;
    assert!(
        !server
            .stderr()
            .contains("timed out draining in-flight responses"),
        "the call ran on until rmcp's drain gave up on it\n{}",
        server.stderr()
    );
    call.abort();
}

#[tokio::test]
async fn a_dropped_request_in_a_session_stops_its_call_once_it_cannot_be_resumed() {
    let (server, _session, call) = spin_in_a_session().await;
    // The client goes away without a word.
    call.abort();
    // The call runs on while its stream could be resumed (10 s), then stops,
    // well before its ten-minute deadline.
    let stopped = server
        .wait_for_metric("toolhost_instances_in_flight", 0.0, Duration::from_secs(60))
        .await;
    assert!(
        stopped.is_some(),
        "the dropped call still runs\n{}",
        server.stderr()
    );
}

#[tokio::test]
async fn a_draining_server_lets_a_client_resume_the_stream_of_its_call() {
    use futures::StreamExt as _;
    let mut server = Server::start(&manifest(Some(LONG_PROBE)), &[]);
    let session = open_session(&server).await;
    let post = server
        .http
        .post(server.url("/mcp"))
        .header(CONTENT_TYPE, "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .body(sleep_call(11, 4000).to_string())
        .send()
        .await
        .unwrap();
    // The stream's first event (the priming one) names it; then the
    // client's connection breaks.
    let mut body = post.bytes_stream();
    let mut seen = String::new();
    let event_id = loop {
        let chunk = body.next().await.expect("an event").unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(id) = seen.lines().find_map(|l| l.strip_prefix("id:")) {
            break id.trim().to_owned();
        }
    };
    drop(body);
    sigterm(&server.child);
    server.logged(&["shutting down"], "no shutdown began").await;
    let resumed = server
        .http
        .get(server.url("/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .header("last-event-id", &event_id)
        .send()
        .await
        .unwrap();
    assert_eq!(
        resumed.status(),
        StatusCode::OK,
        "a resumption passes the drain"
    );
    let headers = resumed.headers().clone();
    let text = resumed.text().await.unwrap();
    let messages = jsonrpc_messages(&headers, &text);
    let answer = messages
        .iter()
        .find(|m| m["id"] == 11)
        .unwrap_or_else(|| panic!("no answer: {text}"));
    assert_eq!(answer["result"]["content"][0]["text"], "awake", "{answer}");
    let exit = wait_exit_async(&mut server.child, Duration::from_secs(30)).await;
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "{}", server.stderr());
}

// 7. Reload.

#[tokio::test]
async fn a_reload_logs_what_each_tool_may_now_touch() {
    let server = Server::start(&manifest(None), &["--watch"]);
    // calc gains a host; the probe arrives with its grants.
    let changed = format!(
        "[[tool]]\ncomponent = '{}'\nallow_hosts = [\"https://api.example.com\"]\n\n[[tool]]\ncomponent = '{}'\nconfig = {{ region = \"eu\" }}\n",
        component("calc").display(),
        component("probe").display()
    );
    std::fs::write(&server.manifest, changed).unwrap();
    let server = &server;
    // The new tools are served before the reload's log is complete (and
    // read back from the pipe): wait for its last line.
    let reloads = |n: usize| async move {
        eventually(Duration::from_secs(15), || async move {
            server.stderr().matches("reloaded: new calls use").count() >= n
        })
        .await
    };
    let reloaded = eventually(Duration::from_secs(15), || async move {
        server.tool_names().await.iter().any(|n| n == "echo")
    })
    .await;
    assert!(
        reloaded && reloads(1).await,
        "no reload\n{}",
        server.stderr()
    );
    let log = server.stderr();
    let line = |needle: &str| log.lines().any(|l| l.contains(needle));
    assert!(
        line("reload grants tool=calc now=\"http: may request https://api.example.com\""),
        "{log}"
    );
    assert!(
        line("reload takes away tool=calc was=\"http: none\""),
        "{log}"
    );
    assert!(line("reload adds a tool tool=echo"), "{log}");
    assert!(line("config: may read region"), "{log}");
    // Back: calc loses the host again, and the probe's tools go.
    std::fs::write(&server.manifest, manifest(None)).unwrap();
    let reloaded = eventually(Duration::from_secs(15), || async move {
        !server.tool_names().await.iter().any(|n| n == "echo")
    })
    .await;
    assert!(
        reloaded && reloads(2).await,
        "no second reload\n{}",
        server.stderr()
    );
    let log = server.stderr();
    assert!(
        log.lines().any(|l| l.contains(
            "reload takes away tool=calc was=\"http: may request https://api.example.com\""
        )),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("reload removes a tool tool=echo")),
        "{log}"
    );
}

#[tokio::test]
async fn a_reload_that_changes_the_task_store_says_it_takes_a_restart() {
    let server = Server::start(&manifest(None), &["--watch"]);
    let server = &server;
    // A new `[serve.tasks]`, and a new tool to see the reload by.
    let changed = format!(
        "{}\n[[tool]]\ncomponent = '{}'\n\n[serve.tasks]\nttl = \"5m\"\n",
        manifest(None),
        component("probe").display()
    );
    std::fs::write(&server.manifest, changed).unwrap();
    let reloaded = eventually(Duration::from_secs(15), || async move {
        server.stderr().contains("reloaded: new calls use")
    })
    .await;
    assert!(reloaded, "no reload\n{}", server.stderr());
    let log = server.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("[serve.tasks] changed") && l.contains("restart the server")),
        "{log}"
    );
}

// PROXY protocol from a trusted load balancer.

/// The address the tests' "load balancer" connects from.
const BALANCER: &str = "127.0.0.2";

/// A connection to `server` from [`BALANCER`], which sends `header` (a
/// PROXY protocol header, or nothing) first.
async fn from_balancer(server: &Server, header: &[u8]) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(format!("{BALANCER}:0").parse().unwrap())
        .unwrap();
    let mut tcp = socket.connect(server.addr).await.unwrap();
    tcp.write_all(header).await.unwrap();
    tcp
}

/// A version-1 PROXY header for a connection from `client`.
fn proxied_from(client: &str) -> Vec<u8> {
    format!("PROXY TCP4 {client} 127.0.0.1 40000 8787\r\n").into_bytes()
}

#[tokio::test]
async fn behind_a_proxy_protocol_balancer_each_client_has_its_own_share_of_connections() {
    let server = Server::start(
        &manifest(None),
        &["--proxy-protocol", &format!("{BALANCER}/32")],
    );
    let get = format!(
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
        server.addr.port()
    );
    // The balancer must say whose connection it is: without a header, the
    // connection is closed unanswered, and the log says what to fix.
    let mut bare = from_balancer(&server, get.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), bare.read_to_end(&mut answer)).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    assert!(
        eventually(Duration::from_secs(5), || async {
            server.stderr().contains("send a PROXY header")
        })
        .await,
        "{}",
        server.stderr()
    );
    // With one, it is served.
    let mut proxied = from_balancer(
        &server,
        &[proxied_from("10.0.0.1"), get.into_bytes()].concat(),
    )
    .await;
    let mut answer = Vec::new();
    proxied.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert_eq!(status_of(&answer), 200, "{answer}");
    // Each client has its own share: as many idle connections as one
    // address may hold, each from another client, shed nothing ...
    let mut idle = Vec::new();
    for i in 0..256u32 {
        let client = format!("10.1.{}.{}", i / 250, i % 250 + 1);
        idle.push(from_balancer(&server, &proxied_from(&client)).await);
    }
    // ... while one client past its share sheds its own oldest.
    for _ in 0..257 {
        idle.push(from_balancer(&server, &proxied_from("10.2.0.1")).await);
    }
    let shed = || async { rejected(&server.metrics().await, "http", "connection_shed") };
    assert!(
        eventually(Duration::from_secs(10), || async { shed().await >= 1.0 }).await,
        "no connection was shed\n{}",
        server.stderr()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(shed().await, 1.0, "clients were counted as one address");
}
