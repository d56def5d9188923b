//! Many callers, told apart (issue 27, identity): static tokens mapped to
//! principals and OAuth access tokens checked as a resource server; the
//! context keys stores are scoped by filled from the principal, never the
//! request; scopes deciding what a caller sees and may call; sessions
//! kept to the principal that opened them.

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, KeyPair};

use super::*;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";
const AUDIENCE: &str = "http://127.0.0.1/mcp";
const ISSUER: &str = "https://idp.example.com";

/// calc and notes (a store scoped by `user`), with `auth` as `[serve.auth]`.
fn notes_manifest(auth: &str) -> String {
    format!(
        "[[tool]]\ncomponent = '{}'\n\n[[tool]]\ncomponent = '{}'\nstores = ['notes']\n\n\
         [store.notes]\nbackend = 'embedded'\nscope = 'user'\n\n[serve.auth]\n{auth}\n",
        component("calc").display(),
        component("notes").display(),
    )
}

/// Two static-token principals; `user` bound to their `sub`.
fn two_principals() -> String {
    notes_manifest(
        "context.user = 'claim:sub'\n\
         [[serve.auth.token]]\nprincipal = 'alice'\nenv = 'ALICE_TOKEN'\n\
         [[serve.auth.token]]\nprincipal = 'bob'\nenv = 'BOB_TOKEN'\n",
    )
}

fn note_call(id: &str, tool: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": tool, "arguments": args.to_string()}})
}

async fn call_as(
    server: &Server,
    token: &str,
    call: Value,
    context: Option<&str>,
) -> reqwest::Response {
    let mut request = server
        .http
        .post(server.url("/v1/tool_calls"))
        .bearer_auth(token)
        .json(&json!([call]));
    if let Some(context) = context {
        request = request.header("toolhost-context", context);
    }
    request.send().await.unwrap()
}

async fn answer_text(response: reqwest::Response) -> String {
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, StatusCode::OK, "{text}");
    text
}

/// The issue's own example: with one token for everyone, a caller set
/// `{"user": "alice"}` and read Alice's notes. Now each token is a
/// principal, `user` is its `sub`, and a request that sets `user` is
/// refused.
#[tokio::test]
async fn each_principal_reads_only_its_own_notes() {
    let server = Server::start_with_env(
        &two_principals(),
        &[],
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
    );
    let remember = note_call(
        "r",
        "remember",
        json!({"topic": "parking", "text": "level 3"}),
    );
    answer_text(call_as(&server, ALICE, remember, None).await).await;
    let recall = note_call("q", "recall", json!({"topic": "parking"}));
    let alice = answer_text(call_as(&server, ALICE, recall.clone(), None).await).await;
    assert!(alice.contains("level 3"), "{alice}");
    let bob = answer_text(call_as(&server, BOB, recall.clone(), None).await).await;
    assert!(!bob.contains("level 3"), "{bob}");
    // Bob names Alice in the context: refused, not merged.
    let response = call_as(&server, BOB, recall.clone(), Some(r#"{"user":"alice"}"#)).await;
    let (_, message) = refused(response, StatusCode::BAD_REQUEST).await;
    assert!(message.contains("comes from your identity"), "{message}");
    // Keys the configuration does not name are refused too.
    let response = call_as(&server, BOB, recall, Some(r#"{"tenant":"acme"}"#)).await;
    let (_, message) = refused(response, StatusCode::BAD_REQUEST).await;
    assert!(message.contains("context.tenant = \"caller\""), "{message}");
    // A token no principal has is 401.
    let response = call_as(
        &server,
        "not-a-token-of-anyone-here",
        calc("a", "1+1"),
        None,
    )
    .await;
    refused(response, StatusCode::UNAUTHORIZED).await;
}

/// Over MCP the same: `_meta` may not set a bound key, and a session
/// belongs to the principal that opened it.
#[tokio::test]
async fn an_mcp_session_belongs_to_the_principal_that_opened_it() {
    let server = Server::start_with_env(
        &two_principals(),
        &[],
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
    );
    let alice = format!("Bearer {ALICE}");
    let bob = format!("Bearer {BOB}");
    let opened = server
        .mcp(&initialize_2025(1), &[("authorization", &alice)])
        .await;
    let session = opened
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let in_session = |who: &str| {
        [
            ("authorization", who.to_owned()),
            ("mcp-session-id", session.clone()),
            ("MCP-Protocol-Version", "2025-11-25".to_owned()),
        ]
    };
    let headers = in_session(&alice);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _ = server
        .mcp(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            &headers,
        )
        .await;
    let own = server.mcp(&list, &headers).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.text);
    let headers = in_session(&bob);
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let foreign = server.mcp(&list, &headers).await;
    assert_eq!(foreign.status, StatusCode::NOT_FOUND, "{}", foreign.text);
    // A bound key in `_meta` is refused (2026-07-28, stateless).
    let mut params = json!({"name": "recall", "arguments": {"topic": "x"}});
    params["_meta"] = meta_2026();
    params["_meta"]["toolhost/context"] = json!({"user": "alice"});
    let response = server
        .mcp(
            &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}),
            &[
                ("authorization", &bob),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "recall"),
            ],
        )
        .await;
    assert!(
        response.text.contains("comes from your identity"),
        "{}",
        response.text
    );
}

#[test]
fn a_store_scoped_by_an_unbound_key_refuses_to_start_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(
        &manifest,
        notes_manifest("[[serve.auth.token]]\nprincipal = 'alice'\nenv = 'ALICE_TOKEN'\n"),
    )
    .unwrap();
    let output = toolhost(&manifest, &["serve", "--listen", "127.0.0.1:0"])
        .env("ALICE_TOKEN", ALICE)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("context.user = \"claim:sub\""), "{stderr}");
}

/// Serving secrets are read by `serve --listen` alone: `call`, `check` and
/// `serve --stdio` (whose one caller is the launching user) neither need
/// the token variables nor tell callers apart.
#[test]
fn only_serving_over_http_reads_the_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(&manifest, two_principals()).unwrap();
    let output = toolhost(&manifest, &["call", "calc", r#"{"expression":"6*7"}"#])
        .env_remove("ALICE_TOKEN")
        .env_remove("BOB_TOKEN")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut child = toolhost(&manifest, &["serve", "--stdio"])
        .env_remove("ALICE_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for message in [
        initialize_2025(1),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ] {
        writeln!(stdin, "{message}").unwrap();
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listed = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.contains("\"id\":2"))
        .expect("an answer to tools/list");
    assert!(listed.contains("\"remember\""), "{listed}");
    drop(stdin);
    let _ = child.wait();
    // Over HTTP the variables are needed, and their absence is named.
    let output = toolhost(&manifest, &["serve", "--listen", "127.0.0.1:0"])
        .env("ALICE_TOKEN", ALICE)
        .env_remove("BOB_TOKEN")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("BOB_TOKEN"), "{stderr}");
}

/// A claim binding that two callers could share is refused at start: an
/// OAuth subject and a static token's principal may both be `alice`.
#[test]
fn a_claim_binding_two_sources_could_share_is_refused_naming_principal() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, Idp::new().jwks()).unwrap();
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(
        &manifest,
        notes_manifest(&format!(
            "jwks = '{}'\nissuers = ['{ISSUER}']\naudience = '{AUDIENCE}'\ncontext.user = 'claim:sub'\n\
             [[serve.auth.token]]\nprincipal = 'alice'\nenv = 'ALICE_TOKEN'\n",
            jwks.display()
        )),
    )
    .unwrap();
    let output = toolhost(&manifest, &["serve", "--listen", "127.0.0.1:0"])
        .env("ALICE_TOKEN", ALICE)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bind it to \"principal\""), "{stderr}");
}

/// An identity provider: one P-256 key, its key set in a file.
struct Idp {
    key: EcdsaKeyPair,
}

impl Idp {
    fn new() -> Self {
        let rng = SystemRandom::new();
        let doc =
            EcdsaKeyPair::generate_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let key =
            EcdsaKeyPair::from_pkcs8(&sig::ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng)
                .unwrap();
        Self { key }
    }

    fn jwks(&self) -> String {
        let point = self.key.public_key().as_ref();
        json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": "k1", "use": "sig",
            "x": b64(&point[1..33]), "y": b64(&point[33..65])}]})
        .to_string()
    }

    fn token(&self, sub: &str, scope: &str, expires_in: i64) -> String {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let header = json!({"alg": "ES256", "kid": "k1", "typ": "at+jwt"});
        let claims = json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub, "scope": scope,
            "exp": now + expires_in, "iat": now});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), input.as_bytes())
            .unwrap();
        format!("{input}.{}", b64(signature.as_ref()))
    }
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// OAuth: 401 with the metadata's URL, the RFC 9728 document, a listing
/// of only the tools the token's scopes reach, 403 `insufficient_scope`
/// naming the scope a call needs, and bad tokens refused.
#[tokio::test]
async fn oauth_tokens_are_checked_as_a_resource_server_checks_them() {
    let idp = Idp::new();
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, idp.jwks()).unwrap();
    let auth = format!(
        "jwks = '{}'\nissuers = ['{ISSUER}']\naudience = '{AUDIENCE}'\ncontext.user = 'claim:sub'\n",
        jwks.display()
    );
    let server = Server::start(&notes_manifest(&auth), &[]);
    let response = server
        .http
        .get(server.url("/v1/tools"))
        .send()
        .await
        .unwrap();
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"http://127.0.0.1/.well-known/oauth-protected-resource/mcp\""
    );
    refused(response, StatusCode::UNAUTHORIZED).await;
    let metadata = server
        .get_json("/.well-known/oauth-protected-resource/mcp")
        .await;
    assert_eq!(metadata["resource"], AUDIENCE);
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
    // Tool names are not published to callers who have not authenticated.
    assert_eq!(
        metadata["scopes_supported"],
        json!(["metrics:read", "tools:*"])
    );
    let response = server
        .http
        .get(server.url("/.well-known/oauth-protected-resource/other"))
        .send()
        .await
        .unwrap();
    refused(response, StatusCode::NOT_FOUND).await;

    let calc_only = idp.token("carol", "tools:calc", 600);
    let listed = server
        .http
        .get(server.url("/v1/tools"))
        .bearer_auth(&calc_only)
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(names, ["calc"]);
    let ok = answer_text(call_as(&server, &calc_only, calc("a", "6*7"), None).await).await;
    assert!(ok.contains("42"), "{ok}");
    let response = call_as(
        &server,
        &calc_only,
        note_call("r", "recall", json!({"topic": ""})),
        None,
    )
    .await;
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"tools:recall\""), "{challenge}");
    refused(response, StatusCode::FORBIDDEN).await;
    // A name no tool has is refused without listing the others.
    let response = call_as(
        &server,
        &calc_only,
        note_call("u", "recal", json!({})),
        None,
    )
    .await;
    let (_, message) = refused(response, StatusCode::BAD_REQUEST).await;
    assert!(!message.contains("remember"), "{message}");
    // The same over MCP: 403 at the edge, before the call runs.
    let bearer = format!("Bearer {calc_only}");
    let mut params = json!({"name": "recall", "arguments": {"topic": ""}});
    params["_meta"] = meta_2026();
    let response = server
        .mcp(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}),
            &[
                ("authorization", &bearer),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "recall"),
            ],
        )
        .await;
    assert_eq!(response.status, StatusCode::FORBIDDEN, "{}", response.text);

    let expired = idp.token("carol", "tools:calc", -3600);
    let response = call_as(&server, &expired, calc("a", "1+1"), None).await;
    let challenge = response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
    let (_, message) = refused(response, StatusCode::UNAUTHORIZED).await;
    assert!(message.contains("expired"), "{message}");
    let forged = Idp::new().token("carol", "tools:*", 600);
    let response = call_as(&server, &forged, calc("a", "1+1"), None).await;
    refused(response, StatusCode::UNAUTHORIZED).await;
    // `/metrics` names every tool: it takes its own scope.
    let response = server
        .http
        .get(server.url("/metrics"))
        .bearer_auth(&calc_only)
        .send()
        .await
        .unwrap();
    refused(response, StatusCode::FORBIDDEN).await;
    let metrics = server
        .http
        .get(server.url("/metrics"))
        .bearer_auth(idp.token("ops", "metrics:read", 600))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("invalid_token"),
        "refusals are counted: {metrics}"
    );
}

/// A tool that calls tools (code mode) runs its calls as its caller's:
/// holding its own scope alone must not reach the tools it calls, nor show
/// their declarations.
#[tokio::test]
async fn a_tool_that_calls_tools_needs_the_scopes_of_the_tools_it_calls() {
    let manifest = format!(
        "[[tool]]\ncomponent = '{}'\ncall_tools = ['calc']\n\n[[tool]]\ncomponent = '{}'\n\n\
         [serve.auth]\n\
         [[serve.auth.token]]\nprincipal = 'alice'\nenv = 'ALICE_TOKEN'\nscopes = ['tools:call_one']\n\
         [[serve.auth.token]]\nprincipal = 'bob'\nenv = 'BOB_TOKEN'\nscopes = ['tools:call_one', 'tools:calc']\n",
        component("probe-caller").display(),
        component("calc").display(),
    );
    let server = Server::start_with_env(
        &manifest,
        &[],
        &[("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)],
    );
    let call = note_call(
        "c",
        "call_one",
        json!({"name": "calc", "arguments": {"expression": "6*7"}}),
    );
    let refused = call_as(&server, ALICE, call.clone(), None).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let text = refused.text().await.unwrap();
    assert!(
        text.contains("tools:calc"),
        "the refusal names the missing scope: {text}"
    );
    let answered = answer_text(call_as(&server, BOB, call, None).await).await;
    assert!(answered.contains("42"), "{answered}");
}
