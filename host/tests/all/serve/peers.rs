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
    // to be a megabyte long, and then nothing.
    let mut flood = Vec::new();
    for i in 0..1100u16 {
        let last = 2 + u8::try_from(i % 4).unwrap();
        let source = std::net::SocketAddr::from(([127, 0, 0, last], 0));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(source).unwrap();
        let mut tcp = socket.connect(server.addr).await.unwrap();
        tcp.write_all(
            b"POST /v1/tool_calls HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Type: application/json\r\nContent-Length: 1000000\r\n\r\n[",
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
