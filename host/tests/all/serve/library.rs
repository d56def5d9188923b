//! Serving from the library, as an embedder does (`examples/serve_in_axum.rs`):
//! the refusals name the library's settings, never a flag of the `toolhost`
//! binary, unless the embedder spells the fixes its own way (issue 25).

use std::net::SocketAddr;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolhost::serve::{self, ServeConfig, ServeError, Shared, Transport};
use toolhost::{Approval, ComponentConfig, Fixes, Manifest, ToolHost};

use super::{calc, client, refused};
use crate::util::{component, options};

/// The tools (calc, asking approval for every call) served from the
/// library's router under `adjust`ed configuration, on 127.0.0.1; stops
/// when dropped.
struct Embedded {
    local: SocketAddr,
    stop: CancellationToken,
}

impl Embedded {
    async fn start(adjust: impl FnOnce(&mut ServeConfig)) -> Self {
        let host = ToolHost::load_components(
            vec![ComponentConfig::new(component("calc")).approval(Approval::Always)],
            options(),
        )
        .await
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let mut config = ServeConfig::new(Transport::Http(local));
        adjust(&mut config);
        let stop = CancellationToken::new();
        let app = serve::http::router(
            Shared::new(host, &config).unwrap(),
            &config,
            local,
            stop.clone(),
        );
        tokio::spawn({
            let stop = stop.clone();
            async move {
                axum::serve(listener, app)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
            }
        });
        Self { local, stop }
    }

    async fn post(&self, body: &Value, origin: Option<&str>) -> reqwest::Response {
        let mut request = client()
            .post(format!("http://{}/v1/tool_calls", self.local))
            .json(body);
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send().await.unwrap()
    }

    /// The four refusals whose fix is a setting: a body over `max_body`, a
    /// batch over `max_batch`, a foreign Origin, and a call that needs
    /// approval with nobody to ask (its answer's text).
    async fn refusals(&self) -> [String; 4] {
        let big = json!([calc("a", &format!("1{}", "+0".repeat(1000)))]);
        let (_, body) = refused(self.post(&big, None).await, StatusCode::PAYLOAD_TOO_LARGE).await;
        let two = json!([calc("a", "1+1"), calc("b", "2+2")]);
        let (_, batch) = refused(self.post(&two, None).await, StatusCode::PAYLOAD_TOO_LARGE).await;
        let one = json!([calc("a", "1+1")]);
        let (_, origin) = refused(
            self.post(&one, Some("https://evil.example")).await,
            StatusCode::FORBIDDEN,
        )
        .await;
        let answer = self.post(&one, None).await;
        assert_eq!(answer.status(), StatusCode::OK);
        let answer = answer.text().await.unwrap();
        assert!(
            answer.contains("denied_by_user") || answer.contains("approval"),
            "{answer}"
        );
        [body, batch, origin, answer]
    }
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn small(config: &mut ServeConfig) {
    config.max_body = 1000;
    config.max_batch = 1;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_server_names_its_settings_not_the_binarys_flags() {
    let server = Embedded::start(small).await;
    let [body, batch, origin, approval] = server.refusals().await;
    assert!(body.contains("raise `ServeConfig::max_body`"), "{body}");
    assert!(batch.contains("raise `ServeConfig::max_batch`"), "{batch}");
    assert!(origin.contains("`ServeConfig::allow_origins`"), "{origin}");
    assert!(
        approval.contains("the operator can set `ServeConfig::approve_all`"),
        "{approval}"
    );
    for message in [body, batch, origin, approval] {
        assert!(!message.contains("--"), "no flag of the binary: {message}");
        assert!(!message.contains("toolhost serve"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedder_spells_each_fix_in_its_own_terms() {
    let server = Embedded::start(|config| {
        small(config);
        let mut fixes = Fixes::default();
        fixes.max_body = "raise http.max_body in app.yaml".into();
        fixes.max_batch = "raise http.max_batch in app.yaml".into();
        fixes.allow_origins = "add it to http.origins in app.yaml".into();
        fixes.approve_all = "an administrator can approve it in the console".into();
        config.fixes = fixes;
    })
    .await;
    let [body, batch, origin, approval] = server.refusals().await;
    assert!(
        body.contains("or raise http.max_body in app.yaml)"),
        "{body}"
    );
    assert!(
        batch.contains("or raise http.max_batch in app.yaml)"),
        "{batch}"
    );
    assert!(
        origin.ends_with("; add it to http.origins in app.yaml"),
        "{origin}"
    );
    assert!(
        approval.contains("an administrator can approve it in the console"),
        "{approval}"
    );
    for message in [body, batch, origin, approval] {
        assert!(!message.contains("ServeConfig"), "{message}");
    }
}

/// A manifest with calc, for [`serve::run`].
fn calc_manifest(dir: &tempfile::TempDir) -> Manifest {
    let path = dir.path().join("toolhost.toml");
    std::fs::write(&path, super::manifest(None)).unwrap();
    Manifest::load(&path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_from_the_library_on_an_open_address_names_the_token_setting() {
    // Refused before any signal handler is installed in the test process.
    let dir = tempfile::tempdir().unwrap();
    let open = ServeConfig::new(Transport::Http("0.0.0.0:0".parse().unwrap()));
    let error = serve::run(calc_manifest(&dir), options(), open, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(error, ServeError::Usage(_)), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("set one in `ServeConfig::token`"),
        "{message}"
    );
    assert!(!message.contains("--"), "{message}");
}
