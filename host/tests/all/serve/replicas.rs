//! Replicas sharing 2025-11-25 MCP sessions through one real Redis
//! (`[serve.sessions] redis`): a session opened on one is served by
//! another, stays its principal's, ends everywhere on `DELETE` or expiry;
//! and each principal's share of the sessions one server keeps.

use super::*;
use crate::redis_server::RedisServer;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";

/// calc, and two static-token principals, with `sessions` as the body of
/// `[serve.sessions]`.
fn two_principals(sessions: &str) -> String {
    format!(
        "[[tool]]\ncomponent = '{}'\n\n[serve.auth]\n\
         [[serve.auth.token]]\nprincipal = 'alice'\nenv = 'ALICE_TOKEN'\n\
         scopes = ['tools:*', 'metrics:read']\n\
         [[serve.auth.token]]\nprincipal = 'bob'\nenv = 'BOB_TOKEN'\n\n\
         [serve.sessions]\n{sessions}\n",
        component("calc").display(),
    )
}

/// Two replicas of `two_principals(sessions)`, with `SESSIONS_REDIS` set
/// to `redis`.
fn replicas(sessions: &str, redis: &str) -> (Server, Server) {
    let text = two_principals(sessions);
    let env = [
        ("ALICE_TOKEN", ALICE),
        ("BOB_TOKEN", BOB),
        ("SESSIONS_REDIS", redis),
    ];
    (
        Server::start_with_env(&text, &[], &env),
        Server::start_with_env(&text, &[], &env),
    )
}

/// A 2025-11-25 request in `session` as the holder of `token`.
async fn in_session(server: &Server, token: &str, session: &str, body: &Value) -> McpResponse {
    let bearer = format!("Bearer {token}");
    server
        .mcp(
            body,
            &[
                ("authorization", &bearer),
                ("mcp-session-id", session),
                ("MCP-Protocol-Version", "2025-11-25"),
            ],
        )
        .await
}

/// Open a session on `server` as the holder of `token`; its id.
async fn open_as(server: &Server, token: &str) -> String {
    let bearer = format!("Bearer {token}");
    let opened = server
        .mcp(&initialize_2025(1), &[("authorization", &bearer)])
        .await;
    assert_eq!(opened.status, StatusCode::OK, "{}", opened.text);
    let session = opened
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a 2025-11-25 initialize opens a session")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = in_session(server, token, &session, &initialized).await;
    assert!(response.status.is_success(), "{}", response.text);
    session
}

/// End `session` on `server` as the holder of `token` (`DELETE /mcp`),
/// which must succeed.
async fn close_as(server: &Server, token: &str, session: &str) {
    let closed = server
        .http
        .delete(server.url("/mcp"))
        .bearer_auth(token)
        .header("mcp-session-id", session)
        .header("MCP-Protocol-Version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
}

fn calc_request(id: u64, expression: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "calc", "arguments": {"expression": expression}}})
}

/// The calc result of `tools/call` in `session`, which must succeed.
async fn calc_in_session(server: &Server, token: &str, session: &str, id: u64) -> String {
    let response = in_session(server, token, session, &calc_request(id, "6*7")).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.text);
    let result = response.result(id);
    assert_eq!(result["isError"], json!(false), "{result}");
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_session_opened_on_one_replica_is_served_by_another_and_stays_its_owners() {
    let redis = RedisServer::start();
    let (one, two) = replicas("redis = { env = 'SESSIONS_REDIS' }", &redis.url());
    let session = open_as(&one, ALICE).await;
    // Bob presents Alice's id to the replica that does not hold it yet:
    // refused as if it did not exist, and nothing is restored for him.
    let foreign = in_session(&two, BOB, &session, &calc_request(2, "1")).await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND, "{}", foreign.text);
    // Alice's next call lands on the other replica: restored there.
    assert!(
        calc_in_session(&two, ALICE, &session, 3)
            .await
            .contains("42")
    );
    assert!(
        calc_in_session(&one, ALICE, &session, 4)
            .await
            .contains("42")
    );
    // Restored, the session is still Alice's alone, on both replicas.
    for server in [&two, &one] {
        let foreign = in_session(server, BOB, &session, &calc_request(5, "1")).await;
        assert_eq!(foreign.status, StatusCode::NOT_FOUND, "{}", foreign.text);
    }
    // 2026-07-28 requests carry no session: any replica answers them.
    for (id, server) in [(6, &one), (7, &two)] {
        let mut params = json!({"name": "calc", "arguments": {"expression": "6*7"}});
        params["_meta"] = meta_2026();
        let bearer = format!("Bearer {ALICE}");
        let response = server
            .mcp(
                &json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}),
                &[
                    ("authorization", &bearer),
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", "calc"),
                ],
            )
            .await;
        assert_eq!(
            response.result(id)["isError"],
            json!(false),
            "{}",
            response.text
        );
    }
    let metrics = two
        .http
        .get(two.url("/metrics"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(
            &metrics,
            "toolhost_rejected_requests_total{front_end=\"mcp\",reason=\"foreign_session\"}"
        ),
        Some(2.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn deleting_a_shared_session_on_one_replica_ends_it_on_every_replica() {
    let redis = RedisServer::start();
    let (one, two) = replicas("redis = { env = 'SESSIONS_REDIS' }", &redis.url());
    let session = open_as(&one, ALICE).await;
    // Held by both replicas now.
    calc_in_session(&two, ALICE, &session, 2).await;
    close_as(&one, ALICE, &session).await;
    for server in [&two, &one] {
        let after = in_session(server, ALICE, &session, &calc_request(3, "1")).await;
        assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
    }
}

#[tokio::test]
async fn a_shared_session_deleted_where_it_was_never_held_ends_everywhere() {
    let redis = RedisServer::start();
    let (one, two) = replicas("redis = { env = 'SESSIONS_REDIS' }", &redis.url());
    let session = open_as(&one, ALICE).await;
    close_as(&two, ALICE, &session).await;
    let after = in_session(&one, ALICE, &session, &calc_request(2, "1")).await;
    assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
}

#[tokio::test]
async fn an_idle_shared_session_expires_on_every_replica() {
    let redis = RedisServer::start();
    let (one, two) = replicas(
        "redis = { env = 'SESSIONS_REDIS' }\nidle = '1s'",
        &redis.url(),
    );
    let session = open_as(&one, ALICE).await;
    calc_in_session(&two, ALICE, &session, 2).await;
    // Redis drops the session a second after its last use, whatever the
    // load on this machine; wait well past it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for server in [&two, &one] {
        let after = in_session(server, ALICE, &session, &calc_request(3, "1")).await;
        assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
    }
}

#[tokio::test]
async fn a_replica_that_cannot_reach_the_session_store_keeps_its_own_sessions_and_refuses_others_with_503()
 {
    // A port nothing listens on: Redis is down from the start.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let (one, two) = replicas("redis = { env = 'SESSIONS_REDIS' }", &url);
    let session = open_as(&one, ALICE).await;
    assert!(
        calc_in_session(&one, ALICE, &session, 2)
            .await
            .contains("42")
    );
    let elsewhere = in_session(&two, ALICE, &session, &calc_request(3, "1")).await;
    assert_eq!(
        elsewhere.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        elsewhere.text
    );
    assert!(
        elsewhere.headers.contains_key("retry-after"),
        "{:?}",
        elsewhere.headers
    );
    assert!(
        elsewhere.text.contains("session_store_unavailable"),
        "{}",
        elsewhere.text
    );
    // Bob still cannot use Alice's session where it is held.
    let foreign = in_session(&one, BOB, &session, &calc_request(4, "1")).await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND, "{}", foreign.text);
}

#[tokio::test]
async fn one_principal_cannot_hold_more_than_its_share_of_sessions() {
    let text = two_principals("per_principal = 2");
    let server = Server::start_with_env(&text, &[], &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)]);
    let first = open_as(&server, ALICE).await;
    open_as(&server, ALICE).await;
    let bearer = format!("Bearer {ALICE}");
    let third = server
        .mcp(&initialize_2025(1), &[("authorization", &bearer)])
        .await;
    assert_eq!(
        third.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        third.text
    );
    assert!(
        third.headers.contains_key("retry-after"),
        "{:?}",
        third.headers
    );
    assert!(
        third.text.contains("[serve.sessions] per_principal"),
        "the refusal names the key: {}",
        third.text
    );
    // Bob's share is his own.
    open_as(&server, BOB).await;
    // Alice closes one, and may open another.
    close_as(&server, ALICE, &first).await;
    open_as(&server, ALICE).await;
}

/// Two replicas sharing sessions on `redis`, with `sessions` added to
/// `[serve.sessions]`, serving calc and the probe under `probe_limits`.
fn shared_replicas(redis: &RedisServer, sessions: &str, probe_limits: &str) -> (Server, Server) {
    let text = two_principals(&format!("redis = {{ env = 'SESSIONS_REDIS' }}\n{sessions}"))
        .replacen(
            "\n[serve.auth]",
            &format!(
                "\n[[tool]]\ncomponent = '{}'\nlimits = {probe_limits}\n\n[serve.auth]",
                component("probe").display()
            ),
            1,
        );
    let env = [
        ("ALICE_TOKEN", ALICE),
        ("BOB_TOKEN", BOB),
        ("SESSIONS_REDIS", &redis.url()),
    ];
    (
        Server::start_with_env(&text, &[], &env),
        Server::start_with_env(&text, &[], &env),
    )
}

/// An `initialize` as the holder of `token`, answered as it may be.
async fn initialize_as(server: &Server, token: &str) -> McpResponse {
    let bearer = format!("Bearer {token}");
    server
        .mcp(&initialize_2025(1), &[("authorization", &bearer)])
        .await
}

/// `series` in `server`'s `/metrics`, read as Alice (who may).
async fn metric_as_alice(server: &Server, series: &str) -> Option<f64> {
    let response = server
        .http
        .get(server.url("/metrics"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    metric(&response.text().await.unwrap(), series)
}

#[tokio::test]
async fn a_principals_share_of_sessions_holds_across_replicas() {
    let redis = RedisServer::start();
    let (one, two) = shared_replicas(&redis, "per_principal = 2", "{}");
    let first = open_as(&one, ALICE).await;
    open_as(&two, ALICE).await;
    // Alice holds two, one on each replica: neither opens a third.
    for server in [&one, &two] {
        let third = initialize_as(server, ALICE).await;
        assert_eq!(
            third.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            third.text
        );
        assert!(third.text.contains("per_principal"), "{}", third.text);
    }
    // Moving a session to the other replica does not free a place.
    calc_in_session(&two, ALICE, &first, 2).await;
    let third = initialize_as(&two, ALICE).await;
    assert_eq!(
        third.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        third.text
    );
    // Bob's share is his own.
    open_as(&one, BOB).await;
    // Ending one, on the replica that did not open it, frees its place.
    close_as(&two, ALICE, &first).await;
    open_as(&one, ALICE).await;
}

#[tokio::test]
async fn concurrent_initializes_never_overshoot_a_share() {
    let redis = RedisServer::start();
    let (one, two) = shared_replicas(&redis, "per_principal = 2", "{}");
    let attempts = (0..8).map(|i| {
        let server = if i % 2 == 0 { &one } else { &two };
        initialize_as(server, ALICE)
    });
    let statuses: Vec<StatusCode> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(|response| response.status)
        .collect();
    let opened = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count();
    assert_eq!((opened, refused), (2, 6), "{statuses:?}");
}

#[tokio::test]
async fn another_principals_requests_do_not_keep_a_session_alive() {
    let redis = RedisServer::start();
    let (one, two) = shared_replicas(&redis, "idle = '1s'", "{}");
    let session = open_as(&one, ALICE).await;
    // Bob names Alice's session, again and again, past its idle time: he
    // is told it does not exist, and it expires all the same.
    for i in 0..12 {
        let server = if i % 2 == 0 { &one } else { &two };
        let foreign = in_session(server, BOB, &session, &calc_request(i, "1")).await;
        assert_eq!(foreign.status, StatusCode::NOT_FOUND, "{}", foreign.text);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for server in [&two, &one] {
        let after = in_session(server, ALICE, &session, &calc_request(20, "1")).await;
        assert_eq!(after.status, StatusCode::NOT_FOUND, "{}", after.text);
    }
}

#[tokio::test]
async fn ending_a_shared_session_on_another_replica_stops_its_calls_here() {
    let redis = RedisServer::start();
    let (one, two) = shared_replicas(&redis, "idle = '2s'", LONG_PROBE);
    let session = open_as(&one, ALICE).await;
    let call = tokio::spawn({
        let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                          "params": {"name": "spin", "arguments": {}}});
        let session = session.clone();
        let url = one.url("/mcp");
        async move {
            reqwest::Client::new()
                .post(url)
                .bearer_auth(ALICE)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-session-id", session)
                .header("MCP-Protocol-Version", "2025-11-25")
                .body(body.to_string())
                .send()
                .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric_as_alice(&one, "toolhost_instances_in_flight").await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "spin never started\n{}",
            one.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    close_as(&two, ALICE, &session).await;
    // Stopped within a reaper tick or so, well before spin's 30 s deadline.
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric_as_alice(&one, "toolhost_instances_in_flight").await != Some(0.0) {
        assert!(
            Instant::now() < deadline,
            "the ended session's call still runs\n{}",
            one.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    call.abort();
}

/// calc and notes, with the notes store, the limits, the sessions and the
/// tasks all on the Redis `REDIS_URL` names, failing closed.
fn everything_on_redis() -> String {
    two_principals("redis = { env = 'REDIS_URL' }")
        .replacen(
            "\n[serve.auth]",
            &format!(
                "\n[[tool]]\ncomponent = '{}'\nstores = ['notes']\n\n\
                 [store.notes]\nbackend = {{ env = 'REDIS_URL' }}\n\n[serve.auth]",
                component("notes").display()
            ),
            1,
        )
        .replace("[serve.sessions]", "[serve.limits]\nredis = { env = 'REDIS_URL' }\non_redis_error = 'closed'\nper_principal = { rate = '100/s' }\n\n[serve.tasks]\nredis = { env = 'REDIS_URL' }\n\n[serve.sessions]")
}

/// A `remember` as Alice over the HTTP API: its answer's text, or the
/// error's.
async fn remember_as_alice(server: &Server) -> String {
    let response = server
        .http
        .post(server.url("/v1/tool_calls"))
        .bearer_auth(ALICE)
        .json(&json!([{"id": "r", "name": "remember",
                        "args": {"topic": "tls", "text": "over TLS"}}]))
        .send()
        .await
        .unwrap();
    response.text().await.unwrap()
}

#[tokio::test]
async fn every_redis_user_works_over_tls_and_checks_the_servers_certificate() {
    let redis = RedisServer::start_tls();
    assert!(redis.url().starts_with("rediss://"));
    let ca = redis.ca();
    let env = [
        ("ALICE_TOKEN", ALICE),
        ("BOB_TOKEN", BOB),
        ("REDIS_URL", &redis.url()),
        ("SSL_CERT_FILE", ca.to_str().unwrap()),
    ];
    let (one, two) = (
        Server::start_with_env(&everything_on_redis(), &[], &env),
        Server::start_with_env(&everything_on_redis(), &[], &env),
    );
    // The store and the limiter (which fails closed: an answer means it
    // reached Redis).
    let answer = remember_as_alice(&one).await;
    assert!(answer.contains("notes written so far"), "{answer}");
    // A session opened on one replica, served by the other.
    let session = open_as(&one, ALICE).await;
    assert!(
        calc_in_session(&two, ALICE, &session, 2)
            .await
            .contains("42")
    );
    // A task started on one, read on the other.
    let started: Value = one
        .http
        .post(one.url("/v1/tool_calls?async=1"))
        .bearer_auth(ALICE)
        .json(&json!([{"id": "t", "name": "calc", "args": {"expression": "6*7"}}]))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = started[0]["id"].as_str().expect("a task id").to_owned();
    let read = eventually(Duration::from_secs(10), || async {
        let task: Value = two
            .http
            .get(two.url(&format!("/v1/tasks/{id}")))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        task["state"] == "completed"
    })
    .await;
    assert!(read, "the task was not read back on the other replica");
    // A server that does not trust the CA reaches nothing: the certificate
    // is checked.
    let untrusting = Server::start_with_env(&everything_on_redis(), &[], &env[..3]);
    let answer = remember_as_alice(&untrusting).await;
    assert!(!answer.contains("notes written so far"), "{answer}");
    assert!(
        eventually(Duration::from_secs(10), || async {
            untrusting.stderr().contains("certificate")
                || untrusting.stderr().contains("Certificate")
        })
        .await,
        "{}",
        untrusting.stderr()
    );
}
