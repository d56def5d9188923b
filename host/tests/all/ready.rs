//! Instances made ahead of their calls (`limits.ready`): still one fresh
//! instance per call, given the call's own id, context, fuel and deadline;
//! never one that acted before it had a call.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolhost::CallOptions;
use toolhost::ErrorType;
use toolhost::Grants;
use toolhost::{ComponentConfig, ToolCall, ToolHost};
use toolhost::{Limits, ReadyInstances};

use crate::util::{Lines, component, err, host, ok, options, probe_host, quick_limits, wait_until};

fn ready(n: usize) -> Limits {
    quick_limits()
        .with_ready(ReadyInstances::Exactly(n))
        .unwrap()
}

/// How many instances of the `index`th component are ready now.
fn ready_now(host: &ToolHost, index: usize) -> usize {
    host.ready_instances().nth(index).unwrap().1
}

async fn filled(host: &ToolHost, index: usize, n: usize) {
    wait_until(Duration::from_secs(10), "instances made ahead", || {
        ready_now(host, index) == n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_made_ahead_serves_one_call_and_is_never_reused() {
    let host = probe_host(Grants::none(), ready(2)).await;
    filled(&host, 0, 2).await;
    for i in 0..10 {
        filled(&host, 0, 2).await;
        let outcome = host
            .call(ToolCall::new(format!("c{i}"), "counter", json!({})))
            .await;
        assert_eq!(ok(&outcome), "1", "call {i} saw an earlier call's state");
        assert!(
            outcome.stats.made_ahead,
            "call {i} found no instance made ahead"
        );
    }
    let batch: Vec<_> = (0..20)
        .map(|i| ToolCall::new(format!("b{i}"), "counter", json!({})))
        .collect();
    for outcome in host.call_batch(batch).await {
        assert_eq!(ok(&outcome), "1");
    }
    // Taken instances are made again.
    filled(&host, 0, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_made_ahead_is_given_its_calls_id_and_context() {
    let host = probe_host(Grants::none(), ready(2)).await;
    filled(&host, 0, 2).await;
    let outcome = host
        .call(ToolCall::new("the-call-id", "context", json!({})))
        .await;
    assert!(outcome.stats.made_ahead);
    assert!(ok(&outcome).starts_with("the-call-id "), "{outcome:?}");
    filled(&host, 0, 2).await;
    let env = CallOptions::default().context(json!({"user": "ada"}));
    let outcome = host
        .call(ToolCall::new("c", "injected", json!({})))
        .options(&env)
        .await;
    assert!(outcome.stats.made_ahead);
    assert_eq!(ok(&outcome), r#"{"user":"ada"}"#);
    filled(&host, 0, 2).await;
    let outcome = host.call(ToolCall::new("c", "injected", json!({}))).await;
    assert_eq!(ok(&outcome), "(none)", "a context outlived its call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_made_ahead_runs_under_the_calls_fuel_and_deadline() {
    // Instantiating is charged to the call either way: the same call uses
    // the same fuel in an instance made ahead and in one made for it.
    let made_now = probe_host(Grants::none(), ready(0)).await;
    let now = made_now
        .call(ToolCall::new("c", "counter", json!({})))
        .await;
    assert!(!now.stats.made_ahead);
    let host = probe_host(Grants::none(), ready(2)).await;
    filled(&host, 0, 2).await;
    let ahead = host.call(ToolCall::new("c", "counter", json!({}))).await;
    assert!(ahead.stats.made_ahead);
    assert_eq!(ahead.stats.fuel_used, now.stats.fuel_used);
    let limits = ready(2).with_fuel(50_000_000).unwrap();
    let host = probe_host(Grants::none(), limits).await;
    filled(&host, 0, 2).await;
    let spun = host.call(ToolCall::new("c", "spin", json!({}))).await;
    assert!(spun.stats.made_ahead);
    assert_eq!(err(&spun), ErrorType::FuelExhausted);

    let limits = ready(2)
        .with_fuel(u64::MAX)
        .unwrap()
        .with_timeout(Duration::from_millis(300))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    filled(&host, 0, 2).await;
    let outcome = host.call(ToolCall::new("c", "spin", json!({}))).await;
    assert!(outcome.stats.made_ahead);
    assert_eq!(err(&outcome), ErrorType::Timeout);
}

/// A store whose call is over may wait to be dropped, but lets go of the
/// call's observer (an MCP request waits for the last of its senders).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_call_lets_go_of_its_observer_at_once() {
    let host = probe_host(Grants::none(), ready(3)).await;
    filled(&host, 0, 3).await;
    for _ in 0..3 {
        let lines = Arc::new(Lines::default());
        let outcome = host
            .call(ToolCall::new("c", "counter", json!({})))
            .observer(lines.clone())
            .await;
        assert!(outcome.stats.made_ahead);
        assert_eq!(
            Arc::strong_count(&lines),
            1,
            "the call's observer is still held"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_acts_while_being_instantiated_is_made_at_call_time() {
    let host = host(vec![
        ComponentConfig::new(component("probe")).limits(ready(2)),
        ComponentConfig::new(component("probe-c-early")).limits(ready(2)),
    ])
    .await;
    // The probe's instances are made; the early one's first is made too,
    // found to have logged, and dropped.
    filled(&host, 0, 2).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ready_now(&host, 1), 0);
    // Its calls still run, each in an instance made for it, whose line is
    // the call's.
    for _ in 0..3 {
        let lines = Arc::new(Lines::default());
        let outcome = host
            .call(ToolCall::new("c", "hello", json!({})))
            .observer(lines.clone())
            .await;
        assert_eq!(ok(&outcome), "hello");
        assert!(!outcome.stats.made_ahead);
        assert_eq!(*lines.0.lock().unwrap(), ["made"]);
        assert_eq!(ready_now(&host, 1), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_zero_makes_every_instance_at_call_time() {
    let host = probe_host(Grants::none(), ready(0)).await;
    for _ in 0..3 {
        let outcome = host.call(ToolCall::new("c", "counter", json!({}))).await;
        assert_eq!(ok(&outcome), "1");
        assert!(!outcome.stats.made_ahead);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(ready_now(&host, 0), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_made_ahead_take_pool_slots_of_their_own() {
    // A pool for two calls: the four instances held ready could not all
    // be made in it, and would leave the calls no slot.
    let host = ToolHost::load_components(
        vec![
            ComponentConfig::new(component("probe")).limits(ready(2)),
            ComponentConfig::new(component("calc")).limits(ready(2)),
        ],
        options().with_max_instances(std::num::NonZeroU32::new(2).unwrap()),
    )
    .await
    .unwrap();
    filled(&host, 0, 2).await;
    filled(&host, 1, 2).await;
    let batch: Vec<_> = (0..8)
        .map(|i| ToolCall::new(format!("s{i}"), "sleep", json!({"n": 50})))
        .collect();
    for outcome in host.call_batch(batch).await {
        assert_eq!(ok(&outcome), "awake");
    }
}
