//! A batch answers every call, in order, whatever happens to the others.

use std::time::Duration;

use serde_json::json;
use toolhost::ErrorType;
use toolhost::{ComponentConfig, ToolCall};

use crate::util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_in_a_batch_leave_every_other_call_alone() {
    let limits = quick_limits()
        .with_timeout(Duration::from_millis(500))
        .unwrap()
        .with_fuel(50_000_000)
        .unwrap()
        .with_memory(16 << 20)
        .unwrap();
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
    const N: usize = 64;
    // A server that answers no request until all N are waiting: the batch
    // completes only if its N calls run at once. No clock decides it (the
    // long deadline only ends a batch that does not).
    let gate = std::sync::Arc::new(tokio::sync::Barrier::new(N));
    let server = serve(axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let gate = gate.clone();
            async move {
                gate.wait().await;
                "through"
            }
        }),
    ))
    .await;
    let limits = quick_limits()
        .with_timeout(Duration::from_secs(60))
        .unwrap()
        .with_max_concurrency(N)
        .unwrap();
    let grants = toolhost::Grants::none()
        .allow_host(&server.origin())
        .unwrap();
    let host = probe_host(grants, limits).await;
    let calls: Vec<_> = (0..N)
        .map(|i| ToolCall::new(format!("c{i}"), "fetch", json!({"name": server.url("/")})))
        .collect();
    let outcomes = host.call_batch(calls).await;
    // A call refused for another reason (e.g. out of descriptors with a low
    // `ulimit -n`) leaves the others at the barrier: name it, not them.
    if let Some(other) = outcomes
        .iter()
        .find(|o| o.is_error() && err(o) != ErrorType::Timeout)
    {
        panic!("a call failed before the barrier: {other:?}");
    }
    for outcome in &outcomes {
        assert_eq!(
            ok(outcome),
            "200 through",
            "fewer than {N} ran at once: {outcome:?}"
        );
    }
    assert_eq!(server.hits(), N);
}

/// A stream of results with at most `window` calls in flight, sampled for
/// the most instances it ever ran at once.
async fn stream_sampling(
    host: &toolhost::ToolHost,
    calls: Vec<ToolCall>,
    window: usize,
) -> (Vec<toolhost::CallResult>, usize) {
    use futures::StreamExt as _;
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (host, most) = (host.clone(), most.clone());
        tokio::spawn(async move {
            loop {
                most.fetch_max(host.in_flight(), std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let env = toolhost::CallOptions::default();
    let results: Vec<_> = host
        .call_stream(futures::stream::iter(calls))
        .options(&env)
        .window(std::num::NonZeroUsize::new(window).unwrap())
        .run()
        .collect()
        .await;
    sampler.abort();
    (results, most.load(std::sync::atomic::Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_batch_answers_in_order_through_its_window() {
    let limits = quick_limits()
        .with_timeout(Duration::from_secs(20))
        .unwrap()
        .with_max_concurrency(16)
        .unwrap();
    let host = probe_host(toolhost::Grants::none(), limits).await;
    // Later calls end sooner: the answers still come in the calls' order.
    let mut calls: Vec<ToolCall> = (0..12)
        .map(|i| ToolCall::new(format!("s{i}"), "sleep", json!({"n": 120 - 10 * i})))
        .collect();
    calls.insert(3, ToolCall::new("s0", "sleep", json!({"n": 1})));
    calls.push(ToolCall::with_raw_arguments("bad", "sleep", "{"));
    let expected: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
    let (results, most) = stream_sampling(&host, calls, 3).await;
    // Each result carries the spec of the tool its call named, the
    // repeated and the malformed calls' too: a front end renders it as is.
    assert!(
        results
            .iter()
            .all(|r| r.spec.as_ref().is_some_and(|spec| spec.name == "sleep"))
    );
    let outcomes: Vec<toolhost::Outcome> = results.into_iter().map(|r| r.outcome).collect();
    let ids: Vec<String> = outcomes.iter().map(|o| o.call_id.clone()).collect();
    assert_eq!(ids, expected, "one outcome per call, in the calls' order");
    assert!(
        most <= 3,
        "{most} instances ran at once through a window of 3"
    );
    assert!(
        most >= 2,
        "the window runs calls side by side ({most} at most)"
    );
    // The repeated id is answered, not run; the malformed call too.
    assert_eq!(err(&outcomes[3]), ErrorType::InvalidArguments);
    assert_eq!(err(&outcomes[13]), ErrorType::InvalidArguments);
    assert!(outcomes[..3].iter().all(|o| !o.is_error()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_stops_its_calls() {
    use futures::StreamExt as _;
    let (_work, data) = data_dir();
    let grants = toolhost::Grants::none()
        .file(&data, "/data", toolhost::FileMode::ReadWrite)
        .unwrap();
    // A deadline no test waits out: only the dropped stream can stop the
    // slow call within the test's patience.
    let limits = quick_limits()
        .with_timeout(Duration::from_secs(600))
        .unwrap();
    let host = probe_host(grants, limits).await;
    // One slow call, then writes the window has not reached.
    let calls =
        std::iter::once(ToolCall::new("slow", "sleep", json!({"n": 60_000}))).chain(late_writes(4));
    let mut stream = Box::pin(
        host.call_stream(futures::stream::iter(calls))
            .window(std::num::NonZeroUsize::new(1).unwrap())
            .run(),
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), stream.next())
            .await
            .is_err(),
        "the slow call is still running"
    );
    wait_until(Duration::from_secs(60), "the slow call runs", || {
        host.in_flight() > 0
    })
    .await;
    drop(stream);
    // Stopped, long before its ten-minute deadline would have.
    wait_until(Duration::from_secs(60), "the slow call was stopped", || {
        host.in_flight() == 0
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(late_files(&data), 0, "no call of a dropped stream started");
}
