//! Cold start: on an empty compile cache the server answers at once with
//! the tools ready so far (small components compile before it answers),
//! lists a large component's tools once it has compiled, and a call of
//! one of them waits for it.

use std::time::Duration;

use serde_json::json;

use super::{Server, metric};
use crate::util::component;

/// calc (small: compiled before the server answers) and units-js (13 MB:
/// compiled while it answers).
fn calc_and_units() -> String {
    format!(
        "[[tool]]\ncomponent = '{}'\n\n[[tool]]\ncomponent = '{}'\nlimits = {{ memory = \"256MiB\" }}\n",
        component("calc").display(),
        component("units-js").display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_server_lists_what_is_ready_while_a_large_component_compiles_and_its_calls_wait() {
    let cache = tempfile::tempdir().unwrap();
    let server = Server::start_with_env(
        &calc_and_units(),
        &[],
        &[("TOOLHOST_CACHE_DIR", cache.path().to_str().unwrap())],
    );
    // Answered before units-js was ready: its tool is not listed, and its
    // component was still compiling after the answer (the gauge only
    // ever goes down).
    assert_eq!(server.tool_names().await, ["calc"]);
    assert_eq!(
        metric(&server.metrics().await, "toolhost_components_loading"),
        Some(1.0),
        "stderr: {}",
        server.stderr()
    );
    // A call of its tool waits for it, then runs; calc never waited.
    let patient = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();
    let response = patient
        .post(server.url("/v1/tool_calls"))
        .json(&json!([
            {"id": "c", "name": "convert_units", "args": {"value": 0, "from": "C", "to": "F"}},
            {"id": "a", "name": "calc", "args": {"expression": "6*7"}}
        ]))
        .send()
        .await
        .unwrap();
    let answers: serde_json::Value = response.json().await.unwrap();
    assert_eq!(answers[0]["content"], "0 C = 32 F", "{answers}");
    assert_eq!(answers[1]["content"], "42", "{answers}");
    let metrics = server.metrics().await;
    assert_eq!(
        metric(&metrics, "toolhost_calls_waited_for_compile_total"),
        Some(1.0)
    );
    assert_eq!(metric(&metrics, "toolhost_components_loading"), Some(0.0));
    assert_eq!(server.tool_names().await, ["calc", "convert_units"]);
    // Each compile said so on stderr (read by a thread: by now, seconds
    // after units-js's compile began).
    let stderr = server.stderr();
    for component in ["calc", "units-js"] {
        let line = format!("toolhost: compiling {component}.wasm (first run, about ");
        assert_eq!(stderr.matches(&line).count(), 1, "stderr: {stderr}");
    }
}
