//! `toolhost serve` without `[serve.auth]`, where every caller is the same
//! anonymous principal: what one client address may take of what all
//! share (MCP sessions, request bodies being read; parked calls are tested
//! in `serve/mcp/mrtr.rs`'s unit tests), so that one client cannot lock
//! the others out.
//!
//! Clients are told apart by address: every 127.0.0.0/8 address is this
//! machine on Linux, so a client bound to 127.0.0.2 is another client.

use tokio::io::AsyncWriteExt as _;

use super::*;

/// A manifest with calc, whose sessions section allows `share` sessions
/// per caller.
fn manifest_with_session_share(share: usize) -> String {
    format!(
        "{}\n[serve.sessions]\nper_principal = {share}\n",
        manifest(None)
    )
}

#[tokio::test]
async fn one_address_cannot_open_every_mcp_session_without_auth() {
    let server = Server::start(&manifest_with_session_share(3), &[]);
    let greedy = client_from([127, 0, 0, 2]);
    for id in 0..3 {
        let response = server.mcp_via(&greedy, &initialize_2025(id), &[]).await;
        assert_eq!(response.result(id)["protocolVersion"], "2025-11-25");
    }
    // The address holds its share: its next session is refused, with the
    // bound and the setting named.
    let response = server.mcp_via(&greedy, &initialize_2025(3), &[]).await;
    assert_eq!(
        response.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        response.text
    );
    assert!(response.headers.contains_key("retry-after"));
    for needle in [
        "too_many_sessions",
        "3 MCP sessions",
        "one address",
        "per_principal",
    ] {
        assert!(
            response.text.contains(needle),
            "{needle}: {}",
            response.text
        );
    }
    // Another address still opens one.
    let session = open_session(&server).await;
    let listed = server
        .mcp_in_session(
            &json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list"}),
            &session,
        )
        .await;
    assert!(listed.result(9)["tools"].is_array(), "{}", listed.text);
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            "toolhost_rejected_requests_total{front_end=\"mcp\",reason=\"sessions_principal\"}"
        ),
        Some(1.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_body_sent_to_a_route_that_takes_none_is_refused_unread() {
    let server = Server::start(&manifest(None), &[]);
    // The body is announced and never sent: it is refused at once.
    for head in [
        "GET /v1/tools HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n",
        "GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "DELETE /v1/tasks/t1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n",
    ] {
        let answer = hostile::raw(&server, head).await;
        assert_eq!(hostile::status_of(&answer), 413, "{head}: {answer}");
        assert!(answer.contains("takes no request body"), "{answer}");
    }
    let metrics = server.metrics().await;
    assert_eq!(
        hostile::rejected(&metrics, "http", "body_not_taken"),
        3.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn a_flood_of_dribbled_bodies_cannot_lock_a_client_out() {
    let server = Server::start(&manifest(None), &[]);
    // More connections than the server holds, from four addresses, each
    // sending complete headers and the first byte of a body it promises
    // to be ten bytes long, and then nothing (small, so that each address
    // stays within its share of the body budget, and every connection
    // holds its place reading).
    let mut flood = Vec::new();
    for i in 0..1100u16 {
        let last = 2 + u8::try_from(i % 4).unwrap();
        let source = std::net::SocketAddr::from(([127, 0, 0, last], 0));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(source).unwrap();
        let mut tcp = socket.connect(server.addr).await.unwrap();
        tcp.write_all(
            b"POST /v1/tool_calls HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 10\r\n\r\n[",
        )
        .await
        .unwrap();
        flood.push(tcp);
    }
    // A client that sends its request at once is served while the flood
    // is still there: the probe, and a call.
    let healthz = server
        .http
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("a well-behaved client is served during the flood");
    assert_eq!(healthz.status(), StatusCode::OK);
    let answers = server.answers("", &json!([calc("a", "6*7")])).await;
    assert_eq!(answers[0]["content"], "42", "{answers:?}");
    // The server made room by closing connections still sending bodies.
    let metrics = server.metrics().await;
    assert!(
        hostile::rejected(&metrics, "http", "connection_shed") >= 1.0,
        "{metrics}"
    );
    drop(flood);
}

/// Regression: four addresses (four /64s) could hold every MCP session
/// without `[serve.auth]`: each address's default share was 256 of the
/// 1,024. It is 32 now.
#[tokio::test]
async fn without_auth_one_address_holds_32_sessions_by_default() {
    let server = Server::start(&manifest(None), &[]);
    let greedy = client_from([127, 0, 0, 4]);
    for id in 0..32 {
        let response = server.mcp_via(&greedy, &initialize_2025(id), &[]).await;
        assert_eq!(
            response.result(id)["protocolVersion"],
            "2025-11-25",
            "{}",
            response.text
        );
    }
    let response = server.mcp_via(&greedy, &initialize_2025(32), &[]).await;
    assert_eq!(
        response.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        response.text
    );
    assert!(
        response.text.contains("32 MCP sessions"),
        "{}",
        response.text
    );
    // Another address is not held back.
    let other = client_from([127, 0, 0, 5]);
    let response = server.mcp_via(&other, &initialize_2025(1), &[]).await;
    assert_eq!(
        response.result(1)["protocolVersion"],
        "2025-11-25",
        "{}",
        response.text
    );
    // On loopback no start-up warning is due.
    assert!(
        !server.stderr().contains("told apart by their address only"),
        "{}",
        server.stderr()
    );
}

/// Regression: the body budget had no per-address share, and a body's
/// room is held while its calls run, so one client's slow calls could
/// hold all of it. Room for a body's declared length is taken before a
/// byte is read, and one address may hold a quarter of the budget.
#[tokio::test]
async fn one_address_holds_at_most_its_share_of_the_body_budget() {
    let server = Server::start(&manifest(None), &[]);
    // Four bodies of the default --max-body (4 MiB), declared and never
    // sent: 16 MiB, this address's share of the 64 MiB.
    let mut held = Vec::new();
    for _ in 0..4 {
        let source = std::net::SocketAddr::from(([127, 0, 0, 6], 0));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(source).unwrap();
        let mut tcp = socket.connect(server.addr).await.unwrap();
        tcp.write_all(
            format!(
                "POST /v1/tool_calls HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\n\r\n[",
                4 << 20
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        held.push(tcp);
    }
    let metrics_series =
        "toolhost_rejected_requests_total{front_end=\"http\",reason=\"body_share\"}";
    // The room is taken as the headers arrive, not as the bytes do.
    let mut refused = None;
    for _ in 0..200 {
        let same = client_from([127, 0, 0, 6]);
        let response = same
            .post(server.url("/v1/tool_calls"))
            .json(&json!([calc("a", "1+1")]))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            refused = Some(response);
            break;
        }
        // The four bodies' headers may not all be read yet.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let refused = refused.expect("the address's fifth body is refused");
    assert!(refused.headers().contains_key("retry-after"));
    let text = refused.text().await.unwrap();
    for needle in ["server_busy", "your address", "16 MiB"] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
    // Another address is served meanwhile.
    let answers = server.answers("", &json!([calc("b", "6*7")])).await;
    assert_eq!(answers[0]["content"], "42", "{answers:?}");
    let metrics = server.metrics().await;
    assert!(
        metric(&metrics, metrics_series).is_some_and(|n| n >= 1.0),
        "{metrics}"
    );
    // Once those bodies go, the address has its room back.
    drop(held);
    let again = client_from([127, 0, 0, 6]);
    let mut served = false;
    for _ in 0..200 {
        let response = again
            .post(server.url("/v1/tool_calls"))
            .json(&json!([calc("c", "2+2")]))
            .send()
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        served,
        "the share comes back when the bodies' connections close"
    );
}

/// A server listening beyond loopback without `[serve.auth]` or
/// `--proxy-protocol` tells callers apart by address alone: it says so
/// at start, naming both fixes.
#[test]
fn serving_beyond_loopback_without_auth_warns_that_callers_share_an_address() {
    let dir = tempfile::tempdir().unwrap();
    let manifest_path = dir.path().join("toolhost.toml");
    std::fs::write(&manifest_path, manifest(None)).unwrap();
    let name = "TOOLHOST_TEST_WARN_TOKEN";
    let mut child = toolhost(
        &manifest_path,
        &["serve", "--listen", "0.0.0.0:0", "--token-env", name],
    )
    .env(name, "a-long-enough-test-token-0123456789")
    .spawn()
    .unwrap();
    let (stderr, ready) = drain_stderr(&mut child);
    let started = ready.recv_timeout(START_TIMEOUT);
    // Log lines go out through a writer thread of their own.
    for _ in 0..200 {
        if stderr.lock().unwrap().contains("--proxy-protocol") {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let text = stderr.lock().unwrap().clone();
    assert!(started.is_ok(), "{text}");
    for needle in [
        "told apart by their address only",
        "32 MCP sessions",
        "[serve.auth]",
        "--proxy-protocol",
    ] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}

/// Regression (review): room for a declared length was taken from the
/// budget all addresses share as the headers arrived, so 16 requests that
/// sent only their headers, from four addresses, held all 64 MiB and
/// every other client's body got 503. A declared length now holds only
/// its own address's share; the budget is taken as bytes arrive.
#[tokio::test]
async fn bodies_announced_and_never_sent_hold_no_room_of_other_clients() {
    let server = Server::start(&manifest(None), &[]);
    let mut held = Vec::new();
    for last in 2..6u8 {
        for _ in 0..4 {
            let source = std::net::SocketAddr::from(([127, 0, 0, last], 0));
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(source).unwrap();
            let mut tcp = socket.connect(server.addr).await.unwrap();
            tcp.write_all(
                format!(
                    "POST /v1/tool_calls HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    4 << 20
                )
                .as_bytes(),
            )
            .await
            .unwrap();
            held.push(tcp);
        }
    }
    // Another client's call is served, not refused for room.
    let response = client_from([127, 0, 0, 9])
        .post(server.url("/v1/tool_calls"))
        .json(&json!([calc("a", "6*7")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let answers: Vec<Value> = response.json().await.unwrap();
    assert_eq!(answers[0]["content"], "42", "{answers:?}");
    let metrics = server.metrics().await;
    assert_eq!(
        hostile::rejected(&metrics, "http", "body_budget"),
        0.0,
        "{metrics}"
    );
    drop(held);
}

/// A reverse proxy on the same machine reaches a loopback server as
/// 127.0.0.1: without `[serve.auth]` every caller then shares one
/// address's share. The first forwarded request is warned of, once.
#[tokio::test]
async fn a_request_forwarded_by_a_loopback_proxy_is_warned_of_once() {
    let server = Server::start(&manifest(None), &[]);
    for _ in 0..2 {
        let response = server
            .http
            .get(server.url("/v1/tools"))
            .header("X-Forwarded-For", "203.0.113.7")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let warned = eventually(Duration::from_secs(10), || async {
        server
            .stderr()
            .contains("through a reverse proxy on this machine")
    })
    .await;
    assert!(warned, "{}", server.stderr());
    let text = server.stderr();
    assert_eq!(text.matches("through a reverse proxy").count(), 1, "{text}");
    for needle in ["32 MCP sessions", "[serve.auth]", "--proxy-protocol"] {
        assert!(text.contains(needle), "{needle}: {text}");
    }
}
