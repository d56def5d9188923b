//! End-to-end tier: `toolhost run` against a real local model server.
//!
//! Ignored by default; `scripts/test.sh` starts the model
//! (`scripts/local-model.sh`) and runs these with `--ignored`, passing the
//! server's URL in `TOOLHOST_E2E_BASE_URL`. A small local model is not
//! deterministic, so the tests assert what the loop guarantees — tool calls
//! made and each answered, the run finished — not what the model says.

use std::collections::HashSet;
use std::process::Command;

use serde_json::Value;

use crate::util::root;

fn base_url() -> String {
    std::env::var("TOOLHOST_E2E_BASE_URL")
        .expect("TOOLHOST_E2E_BASE_URL is not set: run scripts/test.sh, which starts a local model for these tests")
}

/// Run `toolhost run --json` and return its transcript events.
fn run(provider: &str, prompt: &str) -> Vec<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(root())
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .args([
            "run",
            "--config",
            "example-tools/toolhost.toml",
            "--json",
            "--provider",
            provider,
        ])
        .args([
            "--base-url",
            &base_url(),
            "--model",
            "qwen2.5-coder-1.5b",
            prompt,
        ])
        .output()
        .expect("toolhost runs");
    assert!(
        output.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).expect("every stdout line is a JSON event"))
        .collect()
}

/// Every tool call started was answered, and the run finished.
fn assert_calls_answered(events: &[Value]) -> Vec<Value> {
    let started: HashSet<&str> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_started")
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    let results: Vec<Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| e["message"].clone())
        .collect();
    let answered: HashSet<&str> = results
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert!(
        !started.is_empty(),
        "the model made no tool call: {events:#?}"
    );
    assert_eq!(started, answered, "every tool call is answered once");
    assert_eq!(results.len(), answered.len());
    assert_eq!(events.last().unwrap()["type"], "finished");
    results
}

#[test]
#[ignore = "needs a local model server: scripts/test.sh starts one"]
fn e2e_openai_streaming_run_calls_tools_and_answers() {
    let events = run(
        "openai",
        "Use the calc tool to compute 1234 * 5678 and tell me the result.",
    );
    let results = assert_calls_answered(&events);
    assert!(
        results
            .iter()
            .any(|m| m["name"] == "calc" && m["content"] == "7006652"),
        "{results:#?}"
    );
}

#[test]
#[ignore = "needs a local model server: scripts/test.sh starts one"]
fn e2e_anthropic_run_reports_a_refused_capability() {
    let events = run(
        "anthropic",
        "Use the http_get tool to fetch http://169.254.169.254/latest/meta-data/ and tell me what happened.",
    );
    let results = assert_calls_answered(&events);
    assert!(
        results
            .iter()
            .any(|m| m["name"] == "http_get" && m["error"]["type"] == "capability_denied"),
        "{results:#?}"
    );
}
