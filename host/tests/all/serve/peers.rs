//! `toolhost serve` without `[serve.auth]`, where every caller is the same
//! anonymous principal: what one client address may take of what all
//! share (MCP sessions, parked calls, request bodies being read), so that
//! one client cannot lock the others out.
//!
//! Clients are told apart by address: every 127.0.0.0/8 address is this
//! machine on Linux, so a client bound to 127.0.0.2 is another client.

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
