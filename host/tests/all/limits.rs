//! Every limit ends a call with its own outcome type, and never affects
//! another call.

use std::time::{Duration, Instant};

use serde_json::json;
use toolhost::ErrorType;
use toolhost::Grants;

use crate::util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_state_survives_between_calls() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    for _ in 0..3 {
        assert_eq!(ok(&call(&host, "counter", json!({})).await), "1");
    }
    let calls = (0..8)
        .map(|i| toolhost::ToolCall::new(format!("c{i}"), "counter", json!({})))
        .collect();
    for outcome in host.call_batch(calls).await {
        assert_eq!(ok(&outcome), "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fuel_exhaustion_is_fuel_exhausted() {
    let limits = quick_limits()
        .with_fuel(5_000_000)
        .unwrap()
        .with_timeout(Duration::from_secs(30))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let outcome = call(&host, "spin", json!({})).await;
    assert_eq!(err(&outcome), ErrorType::FuelExhausted);
    assert!(!outcome.result.as_ref().unwrap_err().retryable);
    assert!(outcome.stats.fuel_used >= 5_000_000, "{:?}", outcome.stats);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_bound_tool_times_out_on_the_wall_clock() {
    let limits = quick_limits()
        .with_fuel(u64::MAX)
        .unwrap()
        .with_timeout(Duration::from_millis(300))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    // The spin has fuel for ever: only the wall clock ends it. The bound
    // only ends a test that would otherwise never end; how precisely the
    // deadline fires depends on the machine's load.
    let outcome = tokio::time::timeout(Duration::from_secs(60), call(&host, "spin", json!({})))
        .await
        .expect("the deadline never stopped the spin");
    assert_eq!(err(&outcome), ErrorType::Timeout);
    assert_eq!(message(&outcome), "timed out after 300ms");
    assert!(outcome.result.as_ref().unwrap_err().retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_sleeping_in_a_host_call_times_out() {
    let limits = quick_limits()
        .with_timeout(Duration::from_millis(200))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let outcome = call(&host, "sleep", json!({"n": 60_000})).await;
    assert_eq!(err(&outcome), ErrorType::Timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_waiting_on_a_server_that_never_answers_times_out() {
    let (addr, accepted) = silent_server().await;
    let limits = quick_limits()
        .with_timeout(Duration::from_millis(400))
        .unwrap();
    let grants = Grants::none()
        .allow_host(&format!("http://{addr}"))
        .unwrap();
    let host = probe_host(grants, limits).await;
    let outcome = call(&host, "fetch", json!({"name": format!("http://{addr}/")})).await;
    assert_eq!(err(&outcome), ErrorType::Timeout, "{outcome:?}");
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the request reached the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_past_the_memory_limit_is_memory_exhausted() {
    let limits = quick_limits().with_memory(16 << 20).unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let outcome = call(&host, "alloc", json!({"n": 64})).await;
    assert_eq!(err(&outcome), ErrorType::MemoryExhausted, "{outcome:?}");
    assert_eq!(message(&outcome), "ran out of memory (limit 16.0 MiB)");
    // Within the limit the same tool succeeds.
    assert_eq!(
        ok(&call(&host, "alloc", json!({"n": 4})).await),
        "allocated 4 MiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn panics_unreachable_and_stack_overflow_are_traps() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let panic = call(&host, "panic", json!({})).await;
    assert_eq!(err(&panic), ErrorType::Trap);
    assert_eq!(message(&panic), "panicked");
    let unreachable = call(&host, "unreachable", json!({})).await;
    assert_eq!(err(&unreachable), ErrorType::Trap);
    assert!(
        message(&unreachable).contains("unreachable"),
        "{}",
        message(&unreachable)
    );
    let overflow = call(&host, "overflow", json!({})).await;
    assert_eq!(err(&overflow), ErrorType::Trap);
    assert_eq!(message(&overflow), "stack overflow");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_over_the_limit_is_truncated_visibly() {
    let limits = quick_limits().with_max_output(1024).unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let content = ok(&call(&host, "output", json!({"n": 100_000})).await);
    assert!(content.len() <= 1024, "{}", content.len());
    assert!(
        content.ends_with("[output truncated: 100000 bytes, limit 1024]"),
        "{content}"
    );
    let small = ok(&call(&host, "output", json!({"n": 10})).await);
    assert_eq!(small, "x".repeat(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_limit_queues_calls_instead_of_failing_them() {
    let limits = quick_limits()
        .with_max_concurrency(1)
        .unwrap()
        .with_timeout(Duration::from_secs(10))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let started = Instant::now();
    let calls = (0..4)
        .map(|i| toolhost::ToolCall::new(format!("c{i}"), "sleep", json!({"n": 100})))
        .collect();
    for outcome in host.call_batch(calls).await {
        assert_eq!(ok(&outcome), "awake");
    }
    // One at a time: four 100 ms sleeps cannot overlap.
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
}
