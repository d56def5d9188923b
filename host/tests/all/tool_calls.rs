//! Tools calling tools (`call_tools`, contract 0.2.1's `toolhost:tool/tools`),
//! the host's side of code mode, through `tests/probe-caller` calling the
//! probe: grants, budgets, depth, approval, deadlines, and lists only a
//! hostile guest would pass.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use toolhost::{
    Approval, ApproveAll, Approver, CallObserver, CallOptions, ComponentConfig, ErrorType, Grants,
    LoadError, LogLevel, Outcome, ToolCall, ToolCalls, ToolHost, ToolSpec,
};

use crate::util::{component, err, message, ok, options, quick_limits};

fn caller(calls: ToolCalls) -> ComponentConfig {
    ComponentConfig::new(component("probe-caller"))
        .grants(Grants::none().call_tools(calls))
        .limits(quick_limits())
}

fn probe() -> ComponentConfig {
    // Fuel enough to outlive any caller's deadline.
    let limits = quick_limits().with_fuel(u64::MAX / 2).unwrap();
    ComponentConfig::new(component("probe")).limits(limits)
}

async fn load(components: Vec<ComponentConfig>) -> Result<ToolHost, LoadError> {
    ToolHost::load_components(components, options()).await
}

async fn host_calling(patterns: &[&str]) -> ToolHost {
    load(vec![
        caller(ToolCalls::new(patterns.iter().copied()).unwrap()),
        probe(),
    ])
    .await
    .expect("the caller and the probe load")
}

async fn run(host: &ToolHost, tool: &str, args: Value) -> Outcome {
    host.call(ToolCall::new("outer", tool, args)).await
}

async fn run_in(host: &ToolHost, tool: &str, args: Value, env: &CallOptions) -> Outcome {
    host.call(ToolCall::new("outer", tool, args))
        .options(env)
        .await
}

fn parsed(outcome: &Outcome) -> Value {
    serde_json::from_str(&ok(outcome)).expect("the probe answers JSON")
}

/// What the probe-caller's `call_huge` reports of the one list it passed
/// (`args`: its entries' shared name and arguments, and how many).
async fn call_huge(host: &ToolHost, args: Value) -> Value {
    parsed(&run(host, "call_huge", args).await)
}

#[tokio::test]
async fn a_granted_call_runs_through_the_dispatcher_and_is_reported_to_the_observer() {
    let host = host_calling(&["echo", "struct*"]).await;
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let outcome = run_in(
        &host,
        "call_many",
        json!({"calls": [
            {"name": "echo", "arguments": {"text": "ab", "times": 2}},
            {"name": "structured", "arguments": {"value": {"port": 1, "name": "n"}}},
        ]}),
        &env,
    )
    .await;
    let results = parsed(&outcome);
    assert_eq!(results[0]["ok"], "abab", "{results}");
    assert!(results[1]["structured"].is_string(), "{results}");
    let ids = heard.ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(
        ids.contains(&"outer/1".to_owned()) && ids.contains(&"outer/2".to_owned()),
        "{ids:?}"
    );
    // The caller's description ends with the declarations of what it may
    // call, and only that.
    let description = &host.spec("call_one").unwrap().description;
    assert!(
        description.contains("declare const tools: {"),
        "{description}"
    );
    assert!(description.contains("  echo(args: {"), "{description}");
    assert!(description.contains("  structured(args:"), "{description}");
    assert!(!description.contains("spin("), "{description}");
    // The probe's own tools say nothing of calling.
    assert!(
        !host
            .spec("echo")
            .unwrap()
            .description
            .contains("declare const")
    );
}

#[tokio::test]
async fn refused_calls_come_back_typed_and_nothing_runs() {
    let host = host_calling(&["echo", "leak"]).await;
    for (name, arguments, kind, says) in [
        ("spin", json!({}), "capability_denied", "may not call spin"),
        (
            "no_such_tool",
            json!({}),
            "unknown_tool",
            "no tool is named",
        ),
        (
            "echo",
            json!({"text": "a", "times": 0}),
            "invalid_arguments",
            "times",
        ),
        ("echo", json!("not an object"), "invalid_arguments", ""),
        // An error the callee returned itself keeps the callee's kind.
        (
            "leak",
            json!({"key": "k", "how": "message"}),
            "leak",
            "the key is",
        ),
    ] {
        let result = parsed(
            &run(
                &host,
                "call_one",
                json!({"name": name, "arguments": arguments}),
            )
            .await,
        );
        assert_eq!(result["err"], kind, "{name}: {result}");
        assert!(
            result["message"].as_str().unwrap().contains(says),
            "{name}: {result}"
        );
    }
    let denied = parsed(&run(&host, "call_one", json!({"name": "spin", "arguments": {}})).await);
    assert!(
        denied["message"]
            .as_str()
            .unwrap()
            .contains("add \"spin\" to call_tools"),
        "the refusal names the fix: {denied}"
    );
}

#[tokio::test]
async fn refused_calls_are_reported_like_ended_ones_the_first_32_of_a_call() {
    let host = host_calling(&["echo"]).await;
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let outcome = run_in(
        &host,
        "call_many",
        json!({"calls": [
            {"name": "spin", "arguments": {}},
            {"name": "echo", "arguments": {"text": "a", "times": 1}},
        ]}),
        &env,
    )
    .await;
    assert!(outcome.result.is_ok(), "{outcome:?}");
    let mut ids = heard.ids();
    ids.sort();
    assert_eq!(
        ids,
        ["outer/1", "outer/2"],
        "the refused call is reported too"
    );
    // A guest refused in a loop is not reported without end.
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let outcome = run_in(
        &host,
        "call_repeat",
        json!({"name": "spin", "arguments": {}, "n": 200, "at_once": true}),
        &env,
    )
    .await;
    assert_eq!(parsed(&outcome)["kinds"], json!(["capability_denied"]));
    assert_eq!(heard.ids().len(), 32);
}

#[tokio::test]
async fn refusals_the_sandbox_makes_are_reported_and_cost_the_budget_nothing() {
    let calls = ToolCalls::new(["echo"]).unwrap().max_calls(2).unwrap();
    let probe = ComponentConfig::new(component("probe"))
        .limits(quick_limits().with_max_arguments(1024).unwrap());
    let host = load(vec![caller(calls), probe]).await.unwrap();
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    // Arguments over echo's max_arguments, and a name longer than any
    // tool's, three times each; then the two calls the budget allows.
    let big = json!({"name": "echo", "arguments": {"text": "x".repeat(2000), "times": 1}});
    let long = json!({"name": "x".repeat(65), "arguments": {}});
    let fine = json!({"name": "echo", "arguments": {"text": "a", "times": 1}});
    let outcome = run_in(
        &host,
        "call_many",
        json!({"calls": [big, big, big, long, long, long, fine, fine]}),
        &env,
    )
    .await;
    let results = parsed(&outcome);
    let kinds: Vec<&str> = results
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["err"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(
        kinds,
        [
            "invalid_arguments",
            "invalid_arguments",
            "invalid_arguments",
            "unknown_tool",
            "unknown_tool",
            "unknown_tool",
            "ok",
            "ok"
        ],
        "{results}"
    );
    let mut reported: Vec<(String, String)> = heard
        .ids()
        .into_iter()
        .zip(heard.tools.lock().unwrap().iter().cloned())
        .collect();
    reported.sort();
    let expected: Vec<(String, String)> = (1..=8)
        .map(|n| {
            let tool = if (4..=6).contains(&n) {
                "(unknown)"
            } else {
                "echo"
            };
            (format!("outer/{n}"), tool.to_owned())
        })
        .collect();
    assert_eq!(reported, expected, "every call is reported, refused or not");
    // Numbered in the program's order, refused or not.
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let fine = json!({"name": "echo", "arguments": {"text": "a", "times": 1}});
    let long = json!({"name": "x".repeat(65), "arguments": {}});
    let outcome = run_in(&host, "call_many", json!({"calls": [fine, long]}), &env).await;
    assert!(outcome.result.is_ok(), "{outcome:?}");
    let mut reported: Vec<(String, String)> = heard
        .ids()
        .into_iter()
        .zip(heard.tools.lock().unwrap().iter().cloned())
        .collect();
    reported.sort();
    assert_eq!(
        reported,
        [
            ("outer/1".to_owned(), "echo".to_owned()),
            ("outer/2".to_owned(), "(unknown)".to_owned())
        ]
    );
}

#[tokio::test]
async fn the_callers_progress_counts_its_calls_and_relays_its_callees_reports() {
    let host = host_calling(&["echo", "report_progress"]).await;
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let outcome = run_in(
        &host,
        "call_one",
        json!({"name": "report_progress", "arguments": {"n": 3}}),
        &env,
    )
    .await;
    assert!(outcome.result.is_ok(), "{outcome:?}");
    let progress = heard.progress.lock().unwrap().clone();
    // The callee's four reports (its backwards one dropped by its own
    // sandbox), between whole numbers, then the call's end as 1.
    let messages: Vec<&str> = progress.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(
        messages,
        [
            "[report_progress] step 0 (0/3)",
            "[report_progress] step 1 (1/3)",
            "[report_progress] step 2 (2/3)",
            "[report_progress] step 3 (3/3)",
            "report_progress done",
        ],
        "{progress:?}"
    );
    assert!(
        progress.windows(2).all(|w| w[0].0 < w[1].0),
        "progress grows: {progress:?}"
    );
    assert!(
        progress[..4].iter().all(|(done, _)| *done < 1.0),
        "{progress:?}"
    );
    assert_eq!(progress[4].0, 1.0, "{progress:?}");
}

#[tokio::test]
async fn a_component_granted_nothing_is_refused_every_call() {
    let host = load(vec![
        ComponentConfig::new(component("probe-caller")).limits(quick_limits()),
        probe(),
    ])
    .await
    .unwrap();
    let result = parsed(
        &run(
            &host,
            "call_one",
            json!({"name": "echo", "arguments": {"text": "a", "times": 1}}),
        )
        .await,
    );
    assert_eq!(result["err"], "capability_denied", "{result}");
    assert!(
        result["message"]
            .as_str()
            .unwrap()
            .contains("grants no call_tools"),
        "{result}"
    );
    // The description says nothing of tools to call.
    assert!(
        !host
            .spec("call_one")
            .unwrap()
            .description
            .contains("declare const")
    );
}

#[tokio::test]
async fn the_budget_bounds_the_calls_of_one_call_one_by_one_and_in_lists() {
    let calls = ToolCalls::new(["echo"]).unwrap().max_calls(3).unwrap();
    let host = load(vec![caller(calls), probe()]).await.unwrap();
    for at_once in [false, true] {
        let result = parsed(
            &run(
                &host,
                "call_repeat",
                json!({"name": "echo", "arguments": {"text": "a", "times": 1}, "n": 5, "at_once": at_once}),
            )
            .await,
        );
        assert_eq!(result["ok"], 3, "{result}");
        assert_eq!(result["kinds"], json!(["budget_exhausted"]), "{result}");
        assert!(
            result["first_error"]
                .as_str()
                .unwrap()
                .contains("raise call_tools.max_calls"),
            "{result}"
        );
    }
    // The budget is per call: the next call has its own.
    let again = parsed(
        &run(
            &host,
            "call_repeat",
            json!({"name": "echo", "arguments": {"text": "a", "times": 1}, "n": 3}),
        )
        .await,
    );
    assert_eq!(again["ok"], 3, "{again}");
}

#[tokio::test]
async fn lists_only_a_hostile_guest_passes_are_bounded_before_anything_is_copied() {
    let calls = ToolCalls::new(["echo"]).unwrap().max_calls(1000).unwrap();
    let host = load(vec![caller(calls), probe()]).await.unwrap();
    // Past the list's bound: the caller traps, and no call was made.
    let outcome = run(
        &host,
        "call_huge",
        json!({"name": "echo", "n": 5000, "bytes": 1}),
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::Trap, "{outcome:?}");
    assert!(
        message(&outcome).contains("a list holds at most 1024"),
        "{}",
        message(&outcome)
    );
    // 1000 entries sharing one 1 MiB buffer: each is over the callee's
    // max_arguments, measured where it lies, and refused uncopied.
    let result = call_huge(&host, json!({"name": "echo", "n": 1000, "bytes": 1 << 20})).await;
    assert_eq!(result["refused"], 1000, "{result}");
    assert!(
        result["first_error"]
            .as_str()
            .unwrap()
            .contains("max_arguments"),
        "{result}"
    );
    // 200 KiB each: under max_arguments, but the list's calls carry at
    // most 32 MiB together.
    let result = call_huge(&host, json!({"name": "echo", "n": 200, "bytes": 200 << 10})).await;
    assert!(
        result["last_error"]
            .as_str()
            .unwrap()
            .contains("split the list"),
        "{result}"
    );
    // A name of any length is looked up where it lies.
    let long = "x".repeat(200 << 10);
    let result = parsed(&run(&host, "call_one", json!({"name": long, "arguments": {}})).await);
    assert_eq!(result["err"], "unknown_tool");
    assert!(
        result["message"].as_str().unwrap().len() < 2048,
        "the name is not echoed whole"
    );
}

/// Issue 28: what the host reads of a list (its names and arguments) is
/// paid for in the caller's fuel, as computing is: a caller that makes the
/// host read more than its fuel pays for runs out of fuel.
#[tokio::test]
async fn reading_a_list_is_paid_in_the_callers_fuel() {
    const FUEL: u64 = 3_000_000;
    let limits = quick_limits()
        .with_fuel(FUEL)
        .unwrap()
        .with_memory(256 << 20)
        .unwrap();
    let host = load(vec![
        caller(ToolCalls::new(["echo"]).unwrap()).limits(limits),
        probe(),
    ])
    .await
    .unwrap();
    // A name of 32 KiB, read once (and refused: no tool has a name that
    // long) for an eighth of a fuel unit a byte, and 1,000 for the entry.
    let huge = |n: u32| json!({"name": "", "name_bytes": 32 << 10, "n": n, "bytes": 1});
    let one = run(&host, "call_huge", huge(1)).await;
    assert!(one.result.is_ok(), "{one:?}");
    assert!(one.stats.fuel_used < FUEL / 4, "{:?}", one.stats);
    // A thousand entries sharing that name: the host reads 32 MiB of them
    // (the list's bound) and refuses the rest unread, 5 million fuel of
    // work the program pays for, past its 3 million.
    let many = run(&host, "call_huge", huge(1000)).await;
    assert_eq!(err(&many), ErrorType::FuelExhausted, "{many:?}");
}

/// Issue 28: a list whose reading costs more fuel than the caller has left
/// runs none of its calls, though each was admitted: every one is refused
/// `budget_exhausted` (the callee never ran), and the caller stops, out of
/// fuel.
#[tokio::test]
async fn a_list_the_caller_cannot_pay_for_runs_none_of_its_calls() {
    let limits = quick_limits()
        .with_fuel(3_000_000)
        .unwrap()
        .with_memory(256 << 20)
        .unwrap();
    let grant = ToolCalls::new(["echo"]).unwrap().max_calls(1000).unwrap();
    let host = load(vec![caller(grant).limits(limits), probe()])
        .await
        .unwrap();
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    // A thousand calls of echo sharing 24 KiB of arguments: 24 MiB read
    // (3 million fuel) and a thousand entries (a million more).
    let outcome = run_in(
        &host,
        "call_huge",
        json!({"name": "echo", "n": 1000, "bytes": 24 << 10}),
        &env,
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::FuelExhausted, "{outcome:?}");
    let said = heard.said.lock().unwrap().clone();
    assert_eq!(said.len(), 32, "the first refusals are reported: {said:?}");
    assert!(
        said.iter()
            .all(|s| s.contains("ran out of fuel before this call was made")),
        "no call of the list ran: {said:?}"
    );
    let kinds = heard.kinds.lock().unwrap().clone();
    assert!(
        kinds.len() == 32
            && kinds
                .iter()
                .all(|k| k == "capability_denied:budget_exhausted"),
        "refused as the caller's budget, not the callee's fuel: {kinds:?}"
    );
}

#[tokio::test]
async fn a_tool_that_calls_tools_cannot_be_called_and_misspelt_grants_fail_the_load() {
    // Two callers: each may call the probe, neither the other; a glob
    // passes over the caller, a name is a load error.
    let host = load(vec![caller(ToolCalls::new(["*"]).unwrap()), probe()])
        .await
        .unwrap();
    let result = parsed(
        &run(
            &host,
            "call_one",
            json!({"name": "call_many", "arguments": {"calls": []}}),
        )
        .await,
    );
    assert_eq!(result["err"], "capability_denied", "{result}");
    let description = &host.spec("call_one").unwrap().description;
    assert!(!description.contains("call_many("), "{description}");
    for (patterns, says) in [
        (vec!["call_many"], "cannot be called"),
        (vec!["echo", "ecoh"], "no loaded tool is named \"ecoh\""),
    ] {
        let error = load(vec![caller(ToolCalls::new(patterns).unwrap()), probe()])
            .await
            .expect_err("the grant is wrong")
            .to_string();
        assert!(error.contains(says), "{error}");
        assert!(
            error.contains("probe-caller"),
            "the load error names the component: {error}"
        );
    }
    let tiny = options().with_max_instances(std::num::NonZeroU32::new(1).unwrap());
    let error = ToolHost::load_components(
        vec![caller(ToolCalls::new(["echo"]).unwrap()), probe()],
        tiny,
    )
    .await
    .expect_err("one instance cannot hold a call and its calls")
    .to_string();
    assert!(error.contains("raise max_instances"), "{error}");
}

#[tokio::test]
async fn callers_never_hold_every_instance_their_calls_need() {
    // Two instances in all: with eight callers at once, each waiting on
    // three calls, a host that let callers take both would never finish.
    let small = options().with_max_instances(std::num::NonZeroU32::new(2).unwrap());
    let host = ToolHost::load_components(
        vec![caller(ToolCalls::new(["echo"]).unwrap()), probe()],
        small,
    )
    .await
    .unwrap();
    let calls: Vec<ToolCall> = (0..8)
        .map(|i| {
            ToolCall::new(
                format!("outer{i}"),
                "call_repeat",
                json!({"name": "echo", "arguments": {"text": "a", "times": 1}, "n": 3, "at_once": true}),
            )
        })
        .collect();
    let outcomes = tokio::time::timeout(Duration::from_secs(120), host.call_batch(calls))
        .await
        .expect("no deadlock: callers wait for half of the instances at most");
    for outcome in &outcomes {
        assert_eq!(parsed(outcome)["ok"], 3, "{outcome:?}");
    }
}

#[tokio::test]
async fn the_whole_tree_ends_by_the_callers_deadline() {
    let limits = quick_limits().with_timeout(Duration::from_secs(1)).unwrap();
    let callee = probe();
    let callee_limits = callee
        .limits
        .with_timeout(Duration::from_secs(120))
        .unwrap();
    let host = load(vec![
        caller(ToolCalls::new(["spin", "sleep"]).unwrap()).limits(limits),
        callee.limits(callee_limits),
    ])
    .await
    .unwrap();
    // The callee could run 2 minutes (its own timeout); the caller has 1 s,
    // and its calls end with it, one by one and in a list.
    for (name, arguments) in [("spin", json!({})), ("sleep", json!({"n": 100_000}))] {
        for (tool, args) in [
            ("call_one", json!({"name": name, "arguments": arguments})),
            (
                "call_many",
                json!({"calls": [{"name": name, "arguments": arguments}]}),
            ),
        ] {
            let heard = Arc::new(Heard::default());
            let env = CallOptions::default().observer(heard.clone());
            let outcome = run_in(&host, tool, args, &env).await;
            assert_eq!(
                err(&outcome),
                ErrorType::Timeout,
                "{tool} {name}: {outcome:?}"
            );
            // The callee's instance is freed with its caller, not minutes
            // later. (A list's calls run in tasks, which stop at their next
            // yield: within milliseconds; the limit is far from both.)
            let freed = tokio::time::timeout(Duration::from_secs(30), async {
                while host.in_flight() > 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            assert!(freed.is_ok(), "{tool} {name}: the callee still runs");
            // The call that was stopped is reported, as every call is.
            let reported = tokio::time::timeout(Duration::from_secs(30), async {
                while heard.said.lock().unwrap().is_empty() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
            assert!(reported.is_ok(), "{tool} {name}: the call is not reported");
            let said = heard.said.lock().unwrap().clone();
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(
                said[0].contains("the call that made it ended first"),
                "{said:?}"
            );
            assert_eq!(heard.ids(), ["outer/1"]);
        }
    }
}

/// Issue 28: a client's call id of any length costs a program's calls a
/// label of at most 128 characters each, not a copy of the id.
#[tokio::test]
async fn the_ids_of_a_programs_calls_carry_at_most_128_characters_of_the_callers() {
    let host = host_calling(&["echo"]).await;
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let id = "i".repeat(1 << 20);
    let calls = json!({"calls": [
        {"name": "echo", "arguments": {"text": "a", "times": 1}},
        {"name": "nope", "arguments": {}},
    ]});
    let outcome = host
        .call(ToolCall::new(id.as_str(), "call_many", calls))
        .options(&env)
        .await;
    assert!(outcome.result.is_ok(), "{:?}", outcome.result);
    assert_eq!(outcome.call_id.len(), 1 << 20, "the call keeps its own id");
    let ids = heard.ids();
    assert_eq!(ids.len(), 2, "{ids:?}");
    for id in ids {
        assert!(id.chars().count() <= 128 + 3, "{} characters", id.len());
        assert!(id.starts_with("iii") && (id.ends_with("…/1") || id.ends_with("…/2")));
    }
}

/// Issue 28: a list the host cannot read (arguments that are not UTF-8,
/// which only a hand-written component can pass) traps its caller, and
/// every call of it admitted before is reported refused, none run.
#[tokio::test]
async fn a_list_the_host_cannot_read_runs_none_of_its_calls() {
    let host = host_calling(&["echo"]).await;
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let outcome = run_in(
        &host,
        "call_huge",
        json!({"name": "echo", "n": 3, "bytes": 1, "bad_last": true}),
        &env,
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::Trap, "{outcome:?}");
    let said = heard.said.lock().unwrap().clone();
    assert_eq!(said.len(), 3, "each call numbered is reported: {said:?}");
    assert!(
        said.iter().all(|s| s.contains("could not read")),
        "{said:?}"
    );
    let mut ids = heard.ids();
    ids.sort();
    assert_eq!(ids, ["outer/1", "outer/2", "outer/3"]);
}

/// Issue 28: a callee's errors are held until the caller reads them, as its
/// results are: past half the memory the caller has left, an error is cut
/// short (its kind kept) rather than copied whole into a caller that would
/// trap on it.
#[tokio::test]
async fn the_errors_of_a_list_count_against_the_callers_memory_too() {
    // Output room for the first error whole, which the probe returns too.
    let limits = quick_limits()
        .with_memory(24 << 20)
        .unwrap()
        .with_max_output(1 << 20)
        .unwrap();
    let grant = ToolCalls::new(["env"]).unwrap().max_calls(1000).unwrap();
    let host = load(vec![caller(grant).limits(limits), probe()])
        .await
        .unwrap();
    // Each error quotes its 32 KiB name (the callee's 32 KiB of output):
    // 32 MiB of errors in all, nearly three times half of what the caller
    // has left.
    let result = call_huge(
        &host,
        json!({"name": "env", "n": 1000, "bytes": 32 << 10, "key": "name"}),
    )
    .await;
    assert_eq!(result["refused"], 1000, "{result}");
    let cut = result["last_error"].as_str().unwrap();
    assert!(cut.starts_with("not_found: xxx"), "the kind is kept: {cut}");
    assert!(cut.contains("(cut: the results of this call"), "{cut}");
    assert!(cut.len() < 1024, "{} bytes", cut.len());
}

#[tokio::test]
async fn the_results_of_a_list_fit_in_half_the_callers_memory_and_the_rest_are_refused() {
    let probe = ComponentConfig::new(component("probe"))
        .limits(quick_limits().with_max_output(2 << 20).unwrap());
    let host = load(vec![caller(ToolCalls::new(["echo"]).unwrap()), probe])
        .await
        .unwrap();
    // 30 results of 1,000 KiB for a caller of 32 MiB: those past 16 MiB
    // are refused, typed, and the caller goes on.
    let outcome = run(
        &host,
        "call_repeat",
        json!({"name": "echo", "arguments": {"text": "x".repeat(100 << 10), "times": 10}, "n": 30, "at_once": true}),
    )
    .await;
    let answer = parsed(&outcome);
    let accepted = answer["ok"].as_u64().unwrap();
    assert!((10..=16).contains(&accepted), "{answer}");
    assert_eq!(answer["kinds"], json!(["memory_exhausted"]), "{answer}");
    assert!(
        answer["first_error"]
            .as_str()
            .unwrap()
            .contains("more than half the memory the caller has left"),
        "{answer}"
    );
}

#[tokio::test]
async fn the_results_fit_in_what_the_caller_has_left_not_in_its_limit() {
    let probe = ComponentConfig::new(component("probe"))
        .limits(quick_limits().with_max_output(2 << 20).unwrap());
    let host = load(vec![caller(ToolCalls::new(["echo"]).unwrap()), probe])
        .await
        .unwrap();
    // A caller of 32 MiB holding 20 MiB: 15 results of 1,000 KiB fit in
    // half its limit, but not beside what it holds. Counted against half
    // of what it has left, the results past it are refused, typed, and the
    // caller goes on (before, their copy trapped it).
    for at_once in [true, false] {
        let outcome = run(
            &host,
            "call_repeat",
            json!({"name": "echo", "arguments": {"text": "x".repeat(100 << 10), "times": 10}, "n": 15, "at_once": at_once, "hold": 20 << 20}),
        )
        .await;
        let answer = parsed(&outcome);
        assert_eq!(answer["held"], 20 << 20, "{answer}");
        let accepted = answer["ok"].as_u64().unwrap();
        assert!((1..15).contains(&accepted), "at once {at_once}: {answer}");
        assert_eq!(answer["kinds"], json!(["memory_exhausted"]), "{answer}");
    }
}

/// Approves after a while: a person deciding.
struct SlowApprover(Duration);

impl Approver for SlowApprover {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            tokio::time::sleep(self.0).await;
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_callee_that_needs_approval_is_approved_and_the_callers_clock_waits_for_the_person() {
    let limits = quick_limits().with_timeout(Duration::from_secs(2)).unwrap();
    let host = load(vec![
        caller(ToolCalls::new(["echo"]).unwrap()).limits(limits),
        probe().approval(Approval::Always),
    ])
    .await
    .unwrap();
    let args = json!({"name": "echo", "arguments": {"text": "ok", "times": 1}});
    // Nobody to ask: the callee is refused, and the caller hears why.
    let refused = parsed(&run(&host, "call_one", args.clone()).await);
    assert_eq!(refused["err"], "denied_by_user", "{refused}");
    let approved = host
        .call(ToolCall::new("outer", "call_one", args.clone()))
        .options(&CallOptions::default().approver(Arc::new(ApproveAll)))
        .await;
    assert_eq!(parsed(&approved)["ok"], "ok");
    // A person who takes longer than the caller's whole timeout: the
    // caller's clock stands still while they decide.
    let slow = host
        .call(ToolCall::new("outer", "call_one", args))
        .options(&CallOptions::default().approver(Arc::new(SlowApprover(Duration::from_secs(3)))))
        .await;
    assert_eq!(parsed(&slow)["ok"], "ok", "{slow:?}");
}

/// Records the ids of the calls a call made.
#[derive(Debug, Default)]
struct Heard {
    called: Mutex<Vec<String>>,
    /// The tool each call that ended was reported under.
    tools: Mutex<Vec<String>>,
    /// What each call that ended said.
    said: Mutex<Vec<String>>,
    /// The kind (and code) each call that failed ended with.
    kinds: Mutex<Vec<String>>,
    progress: Mutex<Vec<(f64, String)>>,
}

impl Heard {
    fn ids(&self) -> Vec<String> {
        self.called.lock().unwrap().clone()
    }
}

impl CallObserver for Heard {
    fn wants(&self, _: LogLevel) -> bool {
        false
    }
    fn log(&self, _: LogLevel, _: &str) {}
    fn progress(&self, progress: &toolhost::Progress) {
        self.progress
            .lock()
            .unwrap()
            .push((progress.done, progress.message.clone().unwrap_or_default()));
    }
    fn called(&self, outcome: &Outcome) {
        self.called.lock().unwrap().push(outcome.call_id.clone());
        self.tools.lock().unwrap().push(outcome.tool.clone());
        self.said.lock().unwrap().push(outcome.content());
        if let Err(error) = &outcome.result {
            let code = error.tool_kind.as_deref().unwrap_or_default();
            self.kinds
                .lock()
                .unwrap()
                .push(format!("{}:{code}", error.kind));
        }
    }
}

/// Hears everything: each log line, progress message, question, approval
/// and outcome, as text.
#[derive(Debug, Default)]
struct Everything(Mutex<Vec<String>>);

impl Everything {
    fn push(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl CallObserver for Everything {
    fn wants(&self, _: LogLevel) -> bool {
        true
    }
    fn log(&self, _: LogLevel, line: &str) {
        self.push(format!("line: {line}"));
    }
    fn progress(&self, progress: &toolhost::Progress) {
        self.push(format!("progress: {:?}", progress.message));
    }
    fn called(&self, outcome: &Outcome) {
        self.push(format!("called: {outcome:?}"));
    }
}

impl toolhost::Asker for Everything {
    fn ask<'a>(&'a self, question: &'a toolhost::Question) -> BoxFuture<'a, toolhost::Answer> {
        self.push(format!("asked: {}", question.message));
        Box::pin(async { toolhost::Answer::Declined })
    }
}

impl Approver for Everything {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        _: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        self.push(format!("approve: {:?}", call.arguments));
        Box::pin(async { Ok(()) })
    }
}

/// Every event and span field logged while it is the thread's subscriber,
/// as text.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<String>>>);

impl Logged {
    fn visit(&self, record: impl FnOnce(&mut dyn tracing::field::Visit)) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0 += &format!("{}={value:?} ", field.name());
            }
        }
        let mut text = Text(String::new());
        record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logged {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        self.visit(|v| event.record(v));
    }
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.visit(|v| attrs.record(v));
    }
    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.visit(|v| values.record(v));
    }
}

/// Issue 28: a caller may hand a callee its secret as an argument, so
/// everything of the callee's call is masked with the caller's secrets as
/// well as its own, wherever it goes: its log lines, progress, questions,
/// refusals, result (text, structured output, errors), the dispatcher's
/// own errors, the arguments an approver is shown, the host's log; and the
/// sandbox's refusals of the program's own calls.
#[test]
fn everything_of_a_callees_call_is_masked_with_the_callers_secrets_too() {
    const SECRET: &str = "caller-secret-5f1a9c";
    // Longer than a schema's complaint may be, and with a character JSON
    // escapes: masked before any cut, in the escaped form as well.
    const JWT_START: &str = "eyJhbGciOi";
    let jwt = format!("{JWT_START}\"{}", "x".repeat(300));
    let everything = Arc::new(Everything::default());
    let logged = Logged::default();
    let heard = everything.clone();
    let _guard = {
        use tracing_subscriber::layer::SubscriberExt as _;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(logged.clone()))
    };
    let results = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async move {
            let callees = ["say", "echo", "structured", "ask_json", "fetch"];
            let host = load(vec![
                ComponentConfig::new(component("probe-caller"))
                    .grants(
                        Grants::none()
                            .call_tools(ToolCalls::new(callees).unwrap())
                            .config("token", SECRET, true)
                            .config("jwt", &jwt, true),
                    )
                    .limits(quick_limits()),
                probe().approval(Approval::Always),
            ])
            .await
            .unwrap();
            let env = CallOptions::default()
                .observer(heard.clone())
                .asker(heard.clone())
                .approver(heard.clone());
            let calls = json!([
                {"name": "say", "arguments": {"text": format!("the token is {SECRET}")}},
                {"name": "echo", "arguments": {"text": format!("the token is {SECRET}"), "times": 1}},
                {"name": "structured", "arguments": {"value": {"port": 1, "name": SECRET}}},
                {"name": "ask_json", "arguments": {
                    "question": format!("may I use {SECRET}?"),
                    "schema": r#"{"type":"object","properties":{"ok":{"type":"boolean"}}}"#,
                    "progress": format!("working with {SECRET}"),
                }},
                {"name": "fetch", "arguments": {"name": format!("http://{SECRET}.example/")}},
                {"name": "echo", "arguments": {"text": "a", "times": SECRET}},
                {"name": SECRET, "arguments": {}},
                {"name": "echo", "arguments": {"text": "a", "times": jwt}},
            ]);
            let outcome = run_in(&host, "call_many", json!({"calls": calls}), &env).await;
            parsed(&outcome)
        });
    let heard = everything.all();
    let logged = logged.0.lock().unwrap().clone();
    for text in heard.iter().chain(&logged) {
        assert!(!text.contains(SECRET), "{text}");
        assert!(!text.contains(JWT_START), "{text}");
    }
    let masked = |what: &str| {
        heard
            .iter()
            .any(|text| text.starts_with(what) && text.contains("[redacted]"))
    };
    for what in [
        "line: [say] the token is",
        "progress: Some(\"[ask_json] working with",
        "asked: may I use",
        "approve: ",
        "called: ",
    ] {
        assert!(masked(what), "{what}: {heard:#?}");
    }
    // What the program read, which its own result is sealed with anyway.
    let results = results.as_array().unwrap();
    assert_eq!(results[1]["ok"], "the token is [redacted]", "{results:?}");
    for (i, kind) in [
        (4, "capability_denied"),
        (5, "invalid_arguments"),
        (6, "unknown_tool"),
        (7, "invalid_arguments"),
    ] {
        assert_eq!(results[i]["err"], kind, "{results:?}");
        assert!(
            results[i]["message"]
                .as_str()
                .unwrap()
                .contains("[redacted]"),
            "{results:?}"
        );
    }
    // The host's log has the arguments of the callee's call, masked.
    assert!(
        logged
            .iter()
            .any(|text| text.contains("arguments=") && text.contains("[redacted]")),
        "{logged:#?}"
    );
}

/// Issue 28: a call a program makes, masked with its caller's secrets,
/// neither reads nor fills the callee's cache: a result stored unmasked by
/// a call of its own would show the caller's secret.
#[tokio::test]
async fn a_call_masked_with_its_callers_secrets_bypasses_the_cache() {
    const SECRET: &str = "caller-secret-5f1a9c";
    let server = crate::util::text_server("the key is caller-secret-5f1a9c").await;
    let probe = ComponentConfig::new(component("probe"))
        .grants(Grants::none().allow_host(&server.origin()).unwrap())
        .limits(quick_limits())
        .cache(Duration::from_secs(60));
    let host = load(vec![
        ComponentConfig::new(component("probe-caller"))
            .grants(
                Grants::none()
                    .call_tools(ToolCalls::new(["fetch_cacheable"]).unwrap())
                    .config("token", SECRET, true),
            )
            .limits(quick_limits()),
        probe,
    ])
    .await
    .unwrap();
    let args = json!({"name": server.url("/")});
    // Called on its own first: the secret is not the probe's, so its
    // result is cached as the server sent it.
    let direct = run(&host, "fetch_cacheable", args.clone()).await;
    assert_eq!(ok(&direct), format!("200 the key is {SECRET}"));
    let heard = Arc::new(Heard::default());
    let env = CallOptions::default().observer(heard.clone());
    let outcome = run_in(
        &host,
        "call_one",
        json!({"name": "fetch_cacheable", "arguments": args}),
        &env,
    )
    .await;
    assert!(outcome.result.is_ok(), "{outcome:?}");
    let said = heard.said.lock().unwrap().clone();
    assert_eq!(said, ["200 the key is [redacted]"], "{said:?}");
    // The program's call ran (a second request) and stored nothing.
    assert_eq!(server.hits(), 2);
    let again = run(&host, "fetch_cacheable", args).await;
    assert!(again.stats.cached);
    assert_eq!(ok(&again), format!("200 the key is {SECRET}"));
}

#[tokio::test]
async fn a_callee_cannot_pose_as_the_host_with_a_kind_of_its_own() {
    let probe = ComponentConfig::new(component("probe"))
        .grants(Grants::none().config("k", "budget_exhausted", false))
        .limits(quick_limits());
    let host = load(vec![caller(ToolCalls::new(["leak"]).unwrap()), probe])
        .await
        .unwrap();
    let result = parsed(
        &run(
            &host,
            "call_one",
            json!({"name": "leak", "arguments": {"key": "k", "how": "kind"}}),
        )
        .await,
    );
    assert_eq!(result["err"], "tool_error:budget_exhausted", "{result}");
}

#[tokio::test]
async fn a_tool_that_calls_tools_cannot_cache_its_results() {
    let cached = caller(ToolCalls::new(["echo"]).unwrap()).cache(Duration::from_secs(60));
    let error = load(vec![cached, probe()])
        .await
        .expect_err("a cached program would skip its callees")
        .to_string();
    assert!(error.contains("calls other tools"), "{error}");
}

#[tokio::test]
async fn a_list_of_one_huge_name_shared_by_every_entry_is_read_once_or_twice() {
    let limits = quick_limits().with_memory(256 << 20).unwrap();
    let host = load(vec![
        caller(ToolCalls::new(["echo"]).unwrap()).limits(limits),
        probe(),
    ])
    .await
    .unwrap();
    // 1024 entries naming one 16 MiB name: read until the list's 32 MiB
    // of strings, the rest refused unread (before, each entry's name was
    // checked and hashed: 16 GiB of work).
    let result = call_huge(
        &host,
        json!({"name": "x", "name_bytes": 16 << 20, "n": 1024, "bytes": 1}),
    )
    .await;
    assert_eq!(result["refused"], 1024, "{result}");
    assert!(
        result["first_error"]
            .as_str()
            .unwrap()
            .starts_with("unknown_tool"),
        "{result}"
    );
    assert!(
        result["last_error"]
            .as_str()
            .unwrap()
            .contains("split the list"),
        "{result}"
    );
}
