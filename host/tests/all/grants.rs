//! Each grant: the allowed case works, everything around it is refused.

use std::sync::atomic::Ordering;

use serde_json::json;
use toolhost::ComponentConfig;
use toolhost::ErrorType;
use toolhost::{FileMode, Grants};

use crate::util::*;

async fn files_host(dir: &std::path::Path, mode: FileMode) -> toolhost::ToolHost {
    let grants = Grants::none().file(dir, "/data", mode).unwrap();
    host(vec![
        ComponentConfig::new(component("files"))
            .grants(grants)
            .limits(quick_limits()),
    ])
    .await
}

/// A granted directory `work/data` with a secret beside it in `work/`.
fn sandbox_dirs() -> (tempfile::TempDir, std::path::PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "granted text").unwrap();
    std::fs::write(work.path().join("secret.txt"), "TOP SECRET").unwrap();
    (work, data)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_directory_can_be_read_and_listed() {
    let (_work, data) = sandbox_dirs();
    let host = files_host(&data, FileMode::ReadOnly).await;
    assert_eq!(
        ok(&call(&host, "read_file", json!({"path": "/data/notes.txt"})).await),
        "granted text"
    );
    let listing = ok(&call(&host, "list_dir", json!({"path": "/data"})).await);
    assert!(listing.contains("notes.txt"), "{listing}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_outside_the_grant_are_refused() {
    let (work, data) = sandbox_dirs();
    let host = files_host(&data, FileMode::ReadOnly).await;
    let secret = work.path().join("secret.txt");
    for path in [
        "/etc/passwd".to_owned(),
        secret.display().to_string(),
        "/data/../secret.txt".to_owned(),
        "/data/../../etc/passwd".to_owned(),
    ] {
        let outcome = call(&host, "read_file", json!({"path": path})).await;
        assert_eq!(err(&outcome), ErrorType::ToolError, "{path}: {outcome:?}");
        assert!(!outcome.content().contains("TOP SECRET") && !outcome.content().contains("root:"));
        // Said as what it is, not as a missing file worth looking for again.
        let error = outcome.result.as_ref().unwrap_err();
        assert_eq!(
            error.tool_kind.as_deref(),
            Some("permission_denied"),
            "{path}"
        );
        assert!(!error.retryable, "{path}: {error:?}");
        assert!(
            error.message.contains("outside this tool's file grants")
                && error.message.contains("files = ["),
            "{path}: {error:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_inside_the_grant_is_not_found() {
    let (_work, data) = sandbox_dirs();
    let host = files_host(&data, FileMode::ReadOnly).await;
    let outcome = call(&host, "read_file", json!({"path": "/data/missing.txt"})).await;
    let error = outcome.result.as_ref().unwrap_err();
    assert_eq!(error.tool_kind.as_deref(), Some("not_found"), "{error:?}");
    assert!(
        error.retryable && error.message.starts_with("/data/missing.txt: "),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_cannot_escape_the_grant() {
    let (work, data) = sandbox_dirs();
    std::os::unix::fs::symlink(work.path().join("secret.txt"), data.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(work.path(), data.join("up")).unwrap();
    let host = files_host(&data, FileMode::ReadOnly).await;
    for path in ["/data/link.txt", "/data/up/secret.txt"] {
        let outcome = call(&host, "read_file", json!({"path": path})).await;
        assert_eq!(err(&outcome), ErrorType::ToolError, "{path}: {outcome:?}");
        assert!(!outcome.content().contains("TOP SECRET"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_grant_refuses_writes() {
    let (_work, data) = sandbox_dirs();
    let host = files_host(&data, FileMode::ReadOnly).await;
    let approve = std::sync::Arc::new(toolhost::ApproveAll);
    for (path, append) in [("/data/new.txt", false), ("/data/notes.txt", true)] {
        let call = toolhost::ToolCall::new(
            "w",
            "write_file",
            json!({"path": path, "content": "x", "append": append}),
        );
        let outcome = host
            .call_batch(vec![call])
            .approver(approve.clone())
            .await
            .remove(0);
        assert_eq!(err(&outcome), ErrorType::ToolError, "{outcome:?}");
    }
    assert!(!data.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(data.join("notes.txt")).unwrap(),
        "granted text"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_grant_allows_writes() {
    let (_work, data) = sandbox_dirs();
    let host = files_host(&data, FileMode::ReadWrite).await;
    let call = toolhost::ToolCall::new(
        "w",
        "write_file",
        json!({"path": "/data/out.txt", "content": "written", "append": null}),
    );
    let outcome = host
        .call(call)
        .approver(std::sync::Arc::new(toolhost::ApproveAll))
        .await;
    assert_eq!(ok(&outcome), "wrote 7 bytes to /data/out.txt");
    assert_eq!(
        std::fs::read_to_string(data.join("out.txt")).unwrap(),
        "written"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_to_a_granted_origin_works() {
    let server = text_server("hello from the test server").await;
    let grants = Grants::none().allow_host(&server.origin()).unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let content = ok(&call(&host, "fetch", json!({"name": server.url("/")})).await);
    assert_eq!(content, "200 hello from the test server");
    assert_eq!(server.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_body_reaches_the_server_whole() {
    // The SDK hands the request to the host before writing its body: a body
    // larger than the stream's buffer, written first, would block for good.
    let server = serve(
        axum::Router::new().route(
            "/",
            axum::routing::post(
                |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                    let length = headers
                        .get("content-length")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("none")
                        .to_owned();
                    format!("{} bytes, content-length {length}", body.len())
                },
            )
            .layer(axum::extract::DefaultBodyLimit::disable()),
        ),
    )
    .await;
    let grants = Grants::none().allow_host(&server.origin()).unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let n = 1 << 20;
    let content = ok(&call(&host, "post", json!({"url": server.url("/"), "n": n})).await);
    assert_eq!(content, format!("200 {n} bytes, content-length {n}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_to_another_origin_is_capability_denied() {
    let allowed = text_server("allowed").await;
    let other = text_server("other").await;
    let grants = Grants::none().allow_host(&allowed.origin()).unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let outcome = call(&host, "fetch", json!({"name": other.url("/")})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert!(
        message(&outcome).contains(&format!("http://{}", other.addr)),
        "{}",
        message(&outcome)
    );
    assert!(!outcome.result.as_ref().unwrap_err().retryable);
    assert_eq!(other.hits(), 0, "a denied request must not leave the host");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_grant_means_no_http_at_all() {
    let server = text_server("nope").await;
    let host = probe_host(Grants::none(), quick_limits()).await;
    let outcome = call(&host, "fetch", json!({"name": server.url("/")})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
    assert_eq!(server.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_to_a_denied_origin_is_refused() {
    let target = text_server("you should not see this").await;
    let location = target.url("/");
    let redirector = serve(axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let location = location.clone();
            async move { axum::response::Redirect::temporary(&location) }
        }),
    ))
    .await;
    let grants = Grants::none().allow_host(&redirector.origin()).unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let outcome = call(&host, "fetch", json!({"name": redirector.url("/")})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert_eq!(redirector.hits(), 1);
    assert_eq!(target.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_grant_does_not_cover_its_ip_literal() {
    let server = text_server("by ip").await;
    let grants = Grants::none()
        .allow_host(&format!("http://localhost:{}", server.addr.port()))
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let outcome = call(&host, "fetch", json!({"name": server.url("/")})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
    assert_eq!(server.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handled_denial_does_not_fail_the_call() {
    let server = text_server("nope").await;
    let host = probe_host(Grants::none(), quick_limits()).await;
    let content = ok(&call(&host, "fetch_or_fallback", json!({"name": server.url("/")})).await);
    assert!(
        content.starts_with("fallback after: request to"),
        "{content}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_sockets_are_refused_before_any_socket_exists() {
    let (addr, accepted) = silent_server().await;
    // Even a tool granted HTTP to that very address gets no raw socket.
    let grants = Grants::none()
        .allow_host(&format!("http://{addr}"))
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let outcome = call(&host, "socket", json!({"name": addr.to_string()})).await;
    assert_eq!(err(&outcome), ErrorType::ToolError, "{outcome:?}");
    assert_eq!(
        outcome.result.as_ref().unwrap_err().tool_kind.as_deref(),
        Some("permission_denied")
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_granted_environment_variables_are_visible() {
    let host = probe_host(Grants::none().env("UNITS", "metric"), quick_limits()).await;
    assert_eq!(
        ok(&call(&host, "env", json!({"name": "UNITS"})).await),
        "metric"
    );
    assert!(
        std::env::var_os("PATH").is_some(),
        "the host itself has PATH"
    );
    for name in ["PATH", "HOME", "CARGO_MANIFEST_DIR"] {
        let outcome = call(&host, "env", json!({"name": name})).await;
        assert_eq!(
            err(&outcome),
            ErrorType::ToolError,
            "{name} leaked: {outcome:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_values_are_readable_and_secrets_are_masked() {
    let grants =
        Grants::none()
            .config("region", "eu-west", false)
            .config("api_key", "sk-very-secret", true);
    let host = probe_host(grants, quick_limits()).await;
    assert_eq!(
        ok(&call(&host, "config", json!({"name": "region"})).await),
        "eu-west"
    );
    // The tool may use the secret, but what it returns never carries it.
    assert_eq!(
        ok(&call(&host, "config", json!({"name": "api_key"})).await),
        "[redacted]"
    );
    assert_eq!(
        err(&call(&host, "config", json!({"name": "missing"})).await),
        ErrorType::ToolError
    );
}
