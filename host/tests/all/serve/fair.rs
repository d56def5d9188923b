//! Fair shares (`[serve.limits]`) on a real server: refusals on both front
//! ends, budgets per principal, concurrency caps, manifest errors, and two
//! replicas sharing one real Redis.

use super::*;
use crate::redis_server::RedisServer;

/// Tokens of two static-token principals (at least 16 characters each).
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

/// The JSON-RPC code of a rate-limited MCP call.
const RATE_LIMITED: i64 = -32029;

/// `manifest(probe_limits)` with `[serve]` tables after it.
fn limited(probe_limits: Option<&str>, serve: &str) -> String {
    format!("{}\n{serve}\n", manifest(probe_limits))
}

/// A 429 from `POST /v1/tool_calls`: its `Retry-After` in seconds and its
/// message.
async fn rate_limited(response: reqwest::Response) -> (u64, String) {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let (kind, message) = refused(response, StatusCode::TOO_MANY_REQUESTS).await;
    assert_eq!(kind, "rate_limited", "{message}");
    let retry_after = retry_after.unwrap_or_else(|| panic!("no Retry-After in seconds: {message}"));
    (retry_after, message)
}

/// `POST /v1/tool_calls` with one calc call as the holder of `token`.
async fn calc_as(server: &Server, token: &str) -> reqwest::Response {
    server
        .http
        .post(server.url("/v1/tool_calls"))
        .bearer_auth(token)
        .json(&json!([calc("c", "1+1")]))
        .send()
        .await
        .unwrap()
}

/// The JSON-RPC error of a 2026-07-28 `tools/call` of calc, which must be
/// a rate limit: its `data`.
async fn mcp_rate_limited(server: &Server, id: u64) -> Value {
    let response = server
        .mcp_2026(
            id,
            "tools/call",
            json!({"name": "calc", "arguments": {"expression": "1+1"}}),
        )
        .await;
    let reply = response.reply(id);
    assert_eq!(reply["error"]["code"], RATE_LIMITED, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("serve.limits.")),
        "the message names the key to raise: {reply}"
    );
    reply["error"]["data"].clone()
}

#[tokio::test]
async fn a_principal_over_its_rate_gets_429_with_retry_after_and_mcp_gets_retry_after_data() {
    let server = Server::start(
        &limited(None, "[serve.limits]\nper_principal = { rate = \"2/min\" }"),
        &[],
    );
    server.answers("", &json!([calc("a", "1+1")])).await;
    let response = server
        .mcp_2026(
            1,
            "tools/call",
            json!({"name": "calc", "arguments": {"expression": "2+2"}}),
        )
        .await;
    assert_eq!(response.result(1)["isError"], false);
    // The third call of the same principal (`anyone`: no auth), on either front end.
    let (retry_after, message) =
        rate_limited(server.tool_calls("", &json!([calc("b", "1")])).await).await;
    assert!(
        (1..=30).contains(&retry_after),
        "2/min refills one call in 30 s: {retry_after}"
    );
    assert!(message.contains("per_principal.rate"), "{message}");
    let data = mcp_rate_limited(&server, 2).await;
    let secs = data["retryAfter"].as_u64().unwrap_or(0);
    assert!((1..=30).contains(&secs), "{data}");
    assert_eq!(data["reason"], "rate_principal", "{data}");
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "toolhost_rate_limited_total{class=\"anyone\",reason=\"rate_principal\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
    // A refused call never ran: two calls counted, both successes.
    assert_eq!(
        metric(
            &metrics,
            "toolhost_tool_calls_total{tool=\"calc\",outcome=\"success\",front_end=\"http\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn static_token_principals_have_budgets_of_their_own() {
    let serve = "[serve.limits]\nper_principal = { rate = \"1/min\" }\n\
                 [[serve.auth.token]]\nprincipal = \"alice\"\nenv = \"ALICE_TOKEN\"\n\
                 [[serve.auth.token]]\nprincipal = \"bob\"\nenv = \"BOB_TOKEN\"\n\
                 [[serve.auth.token]]\nprincipal = \"ops\"\nenv = \"OPS_TOKEN\"\n\
                 scopes = [\"metrics:read\"]\n";
    // `/metrics` names every tool: only a principal with its scope reads it.
    const OPS: &str = "ops-token-0123456789abcdef";
    let server = Server::start_with_env(
        &limited(None, serve),
        &[],
        &[
            ("ALICE_TOKEN", ALICE),
            ("BOB_TOKEN", BOB),
            ("OPS_TOKEN", OPS),
        ],
    );
    assert_eq!(calc_as(&server, ALICE).await.status(), StatusCode::OK);
    let (_, message) = rate_limited(calc_as(&server, ALICE).await).await;
    assert!(message.contains("alice"), "{message}");
    // Alice spent her budget, not Bob's.
    assert_eq!(calc_as(&server, BOB).await.status(), StatusCode::OK);
    rate_limited(calc_as(&server, BOB).await).await;
    let metrics = server
        .http
        .get(server.url("/metrics"))
        .bearer_auth(OPS)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for who in ["alice", "bob"] {
        let series = format!(
            "toolhost_rate_limited_total{{class=\"token:{who}\",reason=\"rate_principal\"}}"
        );
        assert_eq!(metric(&metrics, &series), Some(1.0), "{series}\n{metrics}");
    }
}

#[tokio::test]
async fn a_concurrency_cap_refuses_calls_beyond_it_until_the_running_call_ends() {
    let server = Server::start(
        &limited(
            Some(LONG_PROBE),
            "[serve.limits]\nper_principal = { concurrency = 1 }",
        ),
        &[],
    );
    // A batch runs its calls at once: two calls need two slots, and a
    // refused batch runs none of its calls.
    let batch = json!([calc("a", "1"), calc("b", "2")]);
    let (_, message) = rate_limited(server.tool_calls("", &batch).await).await;
    assert!(message.contains("none of them ran"), "{message}");
    let spin = server
        .http
        .post(server.url("/v1/tool_calls"))
        .json(&json!([{"id": "s", "name": "spin", "args": {}}]));
    let task = tokio::spawn(async move { spin.send().await.map(|r| r.status()) });
    let running = server
        .wait_for_metric("toolhost_instances_in_flight", 1.0, Duration::from_secs(60))
        .await;
    assert!(
        running.is_some(),
        "the spin never started\n{}",
        server.stderr()
    );
    let (retry_after, message) =
        rate_limited(server.tool_calls("", &json!([calc("c", "3")])).await).await;
    assert!(retry_after >= 1, "{retry_after}");
    assert!(message.contains("per_principal.concurrency"), "{message}");
    let data = mcp_rate_limited(&server, 3).await;
    assert_eq!(data["reason"], "concurrency_principal", "{data}");
    // The spin's client leaves: its call stops and its slot is freed.
    task.abort();
    let _ = task.await;
    let freed = eventually(Duration::from_secs(10), || async {
        server
            .tool_calls("", &json!([calc("d", "4")]))
            .await
            .status()
            == StatusCode::OK
    })
    .await;
    assert!(freed, "the slot was not freed\n{}", server.metrics().await);
    // The batch, the HTTP call and the MCP call; and any refused while
    // the slot was being freed.
    let metrics = server.metrics().await;
    let refused = metric(
        &metrics,
        "toolhost_rate_limited_total{class=\"anyone\",reason=\"concurrency_principal\"}",
    );
    assert!(refused.is_some_and(|n| n >= 3.0), "{metrics}");
}

/// `toolhost check` of calc with `serve`: its exit status and stderr.
fn check(serve: &str, env: &[(&str, &str)]) -> (ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolhost.toml");
    std::fs::write(&path, limited(None, serve)).unwrap();
    let mut command = toolhost(&path, &["check"]);
    command.env_remove("NO_SUCH_REDIS_URL_VAR");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    (
        output.status,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn bad_serve_limits_are_a_manifest_error_naming_the_key_and_the_fix() {
    for (serve, expected) in [
        (
            "[serve.limits]\nper_principal = { rate = \"fast\" }",
            "`serve.limits.per_principal.rate`: \"fast\" is not COUNT/PERIOD",
        ),
        (
            "[serve.limits]\nper_tool = { concurrency = 0 }",
            "`serve.limits.per_tool.concurrency`: 0 would refuse every call",
        ),
        (
            "[serve.limits]\nper_principal = { rates = \"1/s\" }",
            "`serve.limits.per_principal.rates`: unknown field `rates`",
        ),
        (
            "[serve.limits]\nredis = { env = \"NO_SUCH_REDIS_URL_VAR\" }",
            "`serve.limits.redis`: environment variable NO_SUCH_REDIS_URL_VAR is not set",
        ),
        (
            "[serve.limits]\nredis = { file = \"x\" }",
            "`serve.limits.redis`: write the URL, or { env = \"NAME\" }",
        ),
    ] {
        let (status, stderr) = check(serve, &[]);
        assert!(!status.success(), "{serve}: {stderr}");
        assert!(
            stderr.contains(expected),
            "{serve}\n  gave: {stderr}\n  want: {expected}"
        );
    }
    // The URL from the environment is checked like a written one, and its
    // password is not shown.
    let (status, stderr) = check(
        "[serve.limits]\nredis = { env = \"LIMITS_URL\" }",
        &[("LIMITS_URL", "http://u:hunter2hunter2@db")],
    );
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("`serve.limits.redis`: \"http://u:***@db/\" is not a Redis URL"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
}

#[test]
fn a_limit_for_a_tool_not_loaded_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolhost.toml");
    std::fs::write(
        &path,
        limited(None, "[serve.limits.tool.calculator]\nconcurrency = 1"),
    )
    .unwrap();
    let mut child = toolhost(&path, &["serve", "--listen", "127.0.0.1:0"])
        .spawn()
        .unwrap();
    let (stderr, _ready) = drain_stderr(&mut child);
    let Some(status) = wait_exit(&mut child, Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the server started: {}", stderr.lock().unwrap());
    };
    std::thread::sleep(Duration::from_millis(100));
    let text = stderr.lock().unwrap().clone();
    assert!(!status.success(), "{text}");
    assert!(
        text.contains(
            "`serve.limits.tool.calculator` names no loaded tool; write the name of one (calc)"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn two_replicas_on_one_redis_share_a_principals_budget() {
    let redis = RedisServer::start();
    let text = limited(
        None,
        "[serve.limits]\nredis = { env = \"LIMITS_REDIS\" }\nper_principal = { rate = \"3/min\" }",
    );
    let url = redis.url();
    let env = [("LIMITS_REDIS", url.as_str())];
    let one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    for (i, server) in [&one, &two, &one].into_iter().enumerate() {
        server
            .answers("", &json!([calc(&format!("c{i}"), "1")]))
            .await;
    }
    // Three calls spent the budget across both; the fourth is refused by
    // the replica that has made only one.
    let (retry_after, _) = rate_limited(two.tool_calls("", &json!([calc("d", "1")])).await).await;
    assert!(
        (1..=20).contains(&retry_after),
        "3/min refills one call in 20 s: {retry_after}"
    );
    let metrics = two.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "toolhost_rate_limited_total{class=\"anyone\",reason=\"rate_principal\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        metric(&metrics, "toolhost_rate_limiter_outages_total"),
        Some(0.0),
        "{metrics}"
    );
}

/// A reload whose version lacks a tool `[serve.limits.tool.NAME]` limits is
/// refused, and the running version keeps serving: the tool renamed would
/// otherwise run without the cap the operator set.
#[tokio::test]
async fn a_reload_that_drops_a_limited_tool_is_refused_and_the_old_version_serves() {
    let limits = "[serve.limits]\ntool.calc = { concurrency = 2 }";
    let server = Server::start(&limited(None, limits), &["--watch"]);
    let probe_only = format!(
        "[[tool]]\ncomponent = '{}'\n\n{limits}\n",
        component("probe").display()
    );
    std::fs::write(&server.manifest, probe_only).unwrap();
    let server = &server;
    let refused = eventually(Duration::from_secs(15), || async move {
        server.stderr().contains("reload refused")
    })
    .await;
    let log = server.stderr();
    assert!(refused, "{log}");
    assert!(log.contains("`serve.limits.tool.calc`"), "{log}");
    assert!(log.contains("restart the server"), "{log}");
    let tools = server.tool_names().await;
    assert!(tools.iter().any(|n| n == "calc"), "{tools:?}");
    assert!(!tools.iter().any(|n| n == "echo"), "{tools:?}");
    server.answers("", &json!([calc("c", "1+1")])).await;
}
