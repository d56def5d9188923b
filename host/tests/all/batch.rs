//! A batch answers every call, in order, whatever happens to the others.

use std::time::Duration;

use serde_json::json;
use toolhost::outcome::ErrorType;
use toolhost::{ComponentConfig, Limits, ToolCall};

use crate::util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_in_a_batch_leave_every_other_call_alone() {
    let limits = Limits {
        timeout: Duration::from_millis(500),
        fuel: 50_000_000,
        memory: 16 << 20,
        ..quick_limits()
    };
    let host = host(vec![
        ComponentConfig::new(component("probe")).limits(limits),
        ComponentConfig::new(component("calc")),
    ])
    .await;
    let calls = vec![
        ToolCall::new("ok_1", "calc", json!({"expression": "6*7"})),
        ToolCall::new("fuel", "spin", json!({})),
        ToolCall::new("memory", "alloc", json!({"n": 64})),
        ToolCall::new("timeout", "sleep", json!({"n": 60_000})),
        ToolCall::new("panic", "panic", json!({})),
        ToolCall::new("overflow", "overflow", json!({})),
        ToolCall::new("unknown", "nope", json!({})),
        ToolCall::with_raw_arguments("bad_json", "calc", "{"),
        ToolCall::new("ok_2", "echo", json!({"text": "still here", "times": 1})),
    ];
    let expected_ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
    let outcomes = host.call_batch(calls).await;
    let ids: Vec<String> = outcomes.iter().map(|o| o.call_id.clone()).collect();
    assert_eq!(ids, expected_ids, "one outcome per call, in request order");
    assert_eq!(ok(&outcomes[0]), "42");
    assert_eq!(err(&outcomes[1]), ErrorType::FuelExhausted);
    assert_eq!(err(&outcomes[2]), ErrorType::MemoryExhausted);
    assert_eq!(err(&outcomes[3]), ErrorType::Timeout);
    assert_eq!(err(&outcomes[4]), ErrorType::Trap);
    assert_eq!(err(&outcomes[5]), ErrorType::Trap);
    assert_eq!(err(&outcomes[6]), ErrorType::UnknownTool);
    assert_eq!(err(&outcomes[7]), ErrorType::InvalidArguments);
    assert_eq!(ok(&outcomes[8]), "still here");
    // And the host still works afterwards.
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "1+1"})).await),
        "2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_batch_runs_concurrently_and_completes() {
    let host = host(vec![
        ComponentConfig::new(component("probe")).limits(quick_limits()),
    ])
    .await;
    let calls: Vec<_> = (0..64)
        .map(|i| ToolCall::new(format!("c{i}"), "sleep", json!({"n": 200})))
        .collect();
    let started = std::time::Instant::now();
    let outcomes = host.call_batch(calls).await;
    assert!(outcomes.iter().all(|o| o.result.is_ok()));
    // 64 sleeps of 200 ms, run with a concurrency limit of 64: far less than
    // the 12.8 s they would take one after another.
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}
