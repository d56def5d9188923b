//! End-to-end tier: `toolhost run` against a real local model server.
//!
//! Ignored by default; `scripts/test.sh` starts the model
//! (`scripts/local-model.sh`) and runs these with `--ignored`, passing the
//! server's URL in `TOOLHOST_E2E_BASE_URL`. They use the quickstart's demo
//! manifest (`example-tools/demo.toml`: two tools, temperature 0, a seed, at
//! most 4 calls a turn). Even so, a small local model's wording is not
//! ours to test: the tests assert what the loop guarantees — tool calls made
//! and each answered, the run finished in time — and which tools ran.

use std::collections::HashSet;
use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::root;

fn base_url() -> String {
    std::env::var("TOOLHOST_E2E_BASE_URL")
        .expect("TOOLHOST_E2E_BASE_URL is not set: run scripts/test.sh, which starts a local model for these tests")
}

/// The longest one run may take: a healthy run takes under a minute on 2
/// cores; a model stuck in a loop must fail the test, not hold the tier.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Run `toolhost run --json` on the demo manifest and return its transcript
/// events.
fn run(provider: &str, prompt: &str) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .current_dir(root())
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .args([
            "run",
            "--config",
            "example-tools/demo.toml",
            "--json",
            "--provider",
            provider,
        ])
        .args(["--base-url", &base_url(), prompt])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("toolhost runs");
    // Read both pipes while waiting, so a chatty run cannot fill one.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "the run took over {RUN_LIMIT:?} and was stopped; its events so far:\n{}",
                stdout.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert!(status.success(), "stderr: {stderr}");
    stdout
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
fn e2e_the_quickstart_task_runs_both_tools_and_answers() {
    let task = std::fs::read_to_string(root().join("example-tools/demo-task.txt")).unwrap();
    let events = run("openai", task.trim());
    let results = assert_calls_answered(&events);
    assert!(
        results
            .iter()
            .any(|m| m["name"] == "calc" && m["content"] == "7006652"),
        "{results:#?}"
    );
    assert!(
        results
            .iter()
            .any(|m| m["name"] == "http_get" && m["error"]["type"] == "capability_denied"),
        "{results:#?}"
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["end"]["kind"], "answered", "{finished:#}");
    // demo.toml runs at most 4 calls a turn: the rest of a turn's calls
    // are answered denied_by_user without running.
    let mut ran_per_turn = vec![0];
    for event in &events {
        match event["type"].as_str() {
            Some("model_call") => ran_per_turn.push(0),
            Some("tool_result") if event["message"]["error"]["type"] != "denied_by_user" => {
                *ran_per_turn.last_mut().unwrap() += 1;
            }
            _ => {}
        }
    }
    assert!(
        ran_per_turn.iter().all(|&n| n <= 4),
        "at most 4 calls run per turn: {ran_per_turn:?}"
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
