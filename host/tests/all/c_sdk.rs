//! The C SDK (`guest-sdk/c`), through its probe (`tests/probe-c`): arguments, the
//! host's imports, HTTP, key-value stores and file errors, as a C tool made
//! by `toolhost componentize` uses them.

use serde_json::json;
use toolhost::ErrorType;
use toolhost::stores::{Backend, Quota, Scope, StoreConfig};
use toolhost::{ComponentConfig, ToolHost};
use toolhost::{FileMode, Grants};

use crate::util::*;

async fn c_probe(grants: Grants) -> ToolHost {
    host(vec![
        ComponentConfig::new(component("probe-c"))
            .grants(grants)
            .limits(quick_limits()),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_of_every_kind_and_the_hosts_imports_reach_a_c_tool() {
    let host = c_probe(Grants::none().config("greeting", "hi", false)).await;
    let args = json!({
        "number": 1.5, "integer": 42, "flag": true, "text": "a\"\\\u{e9}\u{1F600}", "nothing": null
    });
    let outcome = call(&host, "c_args", args.clone()).await;
    assert_eq!(
        ok(&outcome),
        "number=1.5 integer=42 flag=1 text=a\"\\\u{e9}\u{1F600} null=0 greeting=hi"
    );
    let structured = outcome.result.unwrap().structured.unwrap();
    assert_eq!(structured, args);
    // A number that is not whole is no integer; absent arguments are absent.
    let outcome = call(&host, "c_args", json!({"integer": 1.5})).await;
    assert_eq!(
        ok(&outcome),
        "number=!0 integer=!0 flag=!0 text=(none) null=0 greeting=hi"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_tool_posts_a_large_body_and_is_refused_other_origins() {
    let server = serve(
        axum::Router::new().route(
            "/",
            axum::routing::post(|body: axum::body::Bytes| async move {
                format!("{} bytes", body.len())
            })
            .layer(axum::extract::DefaultBodyLimit::disable()),
        ),
    )
    .await;
    let other = text_server("other").await;
    let host = c_probe(Grants::none().allow_host(&server.origin()).unwrap()).await;
    let n = 1 << 20;
    let posted = call(&host, "c_post", json!({"url": server.url("/"), "n": n})).await;
    assert_eq!(ok(&posted), format!("200 {n} bytes"));
    let refused = call(&host, "c_post", json!({"url": other.url("/"), "n": 1})).await;
    assert_eq!(err(&refused), ErrorType::CapabilityDenied, "{refused:?}");
    assert_eq!(other.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_tool_keeps_counts_in_a_granted_store_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = StoreConfig {
        name: "counts".into(),
        backend: Backend::Embedded {
            path: dir.path().join("counts.redb"),
        },
        scope: Scope::Global,
        quota: Quota::default(),
    };
    let host = c_probe(Grants::none().store(store)).await;
    let args = json!({"store": "counts", "key": "visits"});
    assert_eq!(ok(&call(&host, "c_count", args.clone()).await), "seen 1");
    assert_eq!(ok(&call(&host, "c_count", args).await), "seen 2");
    let other = call(&host, "c_count", json!({"store": "other", "key": "k"})).await;
    assert_eq!(err(&other), ErrorType::CapabilityDenied, "{other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_tool_tells_a_path_outside_its_grants_from_a_missing_file() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("a.txt"), "granted").unwrap();
    let host = c_probe(
        Grants::none()
            .file(data.path(), "/data", FileMode::ReadOnly)
            .unwrap(),
    )
    .await;
    assert_eq!(
        ok(&call(&host, "c_read_file", json!({"path": "/data/a.txt"})).await),
        "granted"
    );
    for path in ["/etc/passwd", "/data/../etc/passwd"] {
        let outside = call(&host, "c_read_file", json!({ "path": path })).await;
        let error = outside.result.unwrap_err();
        assert_eq!(
            error.tool_kind.as_deref(),
            Some("permission_denied"),
            "{path}"
        );
        assert!(
            !error.retryable && error.message.contains("outside this tool's file grants"),
            "{path}: {error:?}"
        );
    }
    let missing = call(&host, "c_read_file", json!({"path": "/data/missing.txt"})).await;
    let error = missing.result.unwrap_err();
    assert_eq!(error.tool_kind.as_deref(), Some("not_found"), "{error:?}");
    assert!(error.retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_a_c_tool_answers_that_are_not_utf8_arrive_as_question_marks() {
    let host = c_probe(Grants::none()).await;
    let text = call(&host, "c_bad_bytes", json!({"fail": false})).await;
    assert_eq!(ok(&text), "caf? ??? ok \u{e9}");
    let failed = call(&host, "c_bad_bytes", json!({"fail": true})).await;
    let error = failed.result.unwrap_err();
    // The host takes only short identifiers as kinds: `bad?` is not one.
    assert_eq!(error.tool_kind.as_deref(), Some("error"));
    assert_eq!(error.message, "caf? ??? ok");
}
