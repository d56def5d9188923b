//! Host-side containment: nothing a tool or a model does costs the host more
//! than the call's budgets, and nothing a tool says leaves the sandbox
//! unmasked. Each test provokes one class of attack.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use toolhost::ErrorType;
use toolhost::Limits;
use toolhost::{ApproveAll, ComponentConfig, ToolCall, ToolHost};
use toolhost::{FileMode, Grants};

use crate::util::*;

/// The probe with `data` granted read-write as `/data` under `quota` bytes.
async fn quota_host(data: &std::path::Path, quota: u64) -> ToolHost {
    let grants = Grants::none()
        .file(data, "/data", FileMode::ReadWrite)
        .unwrap()
        .quota("/data", quota)
        .unwrap();
    probe_host(grants, quick_limits()).await
}

fn slow_limits() -> Limits {
    quick_limits()
        .with_timeout(Duration::from_secs(20))
        .unwrap()
}

// Class 2: descriptors are a process-wide resource, counted per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_call_holds_at_most_its_share_of_descriptors() {
    let (_work, data) = data_dir();
    let grants = Grants::none()
        .file(&data, "/data", FileMode::ReadOnly)
        .unwrap();
    let host = probe_host(grants, slow_limits()).await;
    // Four calls fit a component's share even under `ulimit -n` 1024.
    let calls: Vec<_> = (0..4)
        .map(|i| {
            ToolCall::new(
                format!("c{i}"),
                "hold_files",
                json!({"path": "/data/notes.txt", "n": 5000, "hold_ms": 300}),
            )
        })
        .collect();
    let batch = tokio::spawn({
        let host = host.clone();
        async move { host.call_batch(calls).await }
    });
    // While they hold all they could get, the host can still open files
    // and other calls still run.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(std::fs::File::open(data.join("notes.txt")).is_ok());
    assert_eq!(
        ok(&call(&host, "echo", json!({"text": "ok", "times": 1})).await),
        "ok"
    );
    for outcome in batch.await.unwrap() {
        let content = ok(&outcome);
        assert!(content.starts_with("opened 64;"), "{content}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_keep_their_files_counted_after_the_descriptor_goes() {
    let (_work, data) = data_dir();
    let grants = Grants::none()
        .file(&data, "/data", FileMode::ReadOnly)
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let content = ok(&call(
        &host,
        "hold_streams",
        json!({"name": "notes.txt", "n": 1000}),
    )
    .await);
    assert!(content.starts_with("held 64;"), "{content}");
}

// Class 3: host CPU outside the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backtracking_pattern_cannot_hold_the_host() {
    let limits = quick_limits().with_timeout(Duration::from_secs(3)).unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let hostile = format!("{}!", "a".repeat(20_000));
    // A backtracking matcher would take longer than the universe's age on
    // this argument; a linear one, milliseconds. The bound only ends a test
    // that would otherwise never end.
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        call(&host, "pattern", json!({ "s": hostile })),
    )
    .await
    .expect("the pattern check held the host past its deadline");
    assert_eq!(err(&outcome), ErrorType::InvalidArguments, "{outcome:?}");
    assert!(message(&outcome).len() < 1024, "the argument is not echoed");
    assert_eq!(ok(&call(&host, "pattern", json!({"s": "aaaa"})).await), "4");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_and_non_object_arguments_are_refused_before_the_tool_runs() {
    let limits = quick_limits().with_max_arguments(1024).unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let big = "y".repeat(5 << 20);
    let outcome = call(&host, "echo", json!({"text": big, "times": 1})).await;
    assert_eq!(err(&outcome), ErrorType::InvalidArguments);
    assert!(
        message(&outcome).contains("max_arguments"),
        "{}",
        message(&outcome)
    );
    assert!(message(&outcome).len() < 512);
    let raw = ToolCall::with_raw_arguments("r", "echo", "x".repeat(1 << 20));
    assert_eq!(err(&host.call(raw).await), ErrorType::InvalidArguments);
    for value in [json!(5), json!("str"), json!(null), json!([1, 2])] {
        let outcome = call(&host, "counter", value.clone()).await;
        assert_eq!(err(&outcome), ErrorType::InvalidArguments, "{value}");
        assert!(
            message(&outcome).contains("JSON object"),
            "{}",
            message(&outcome)
        );
    }
}

// Class 4: describing tools needs and gets no capabilities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_described_with_no_grants_at_all() {
    let (_work, data) = data_dir();
    let grants = Grants::none()
        .file(&data, "/data", FileMode::ReadWrite)
        .unwrap();
    // Loading asks the component for its tools; its tool list tries to
    // write into every directory it can see.
    let _host = probe_host(grants, quick_limits()).await;
    assert!(
        !data.join("written-by-tools").exists(),
        "tools() ran with the component's file grant"
    );
}

// Class 5: no component panics the host at load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_name_listed_twice_is_a_load_error_not_a_panic() {
    let error = ToolHost::load_components(
        vec![ComponentConfig::new(component("probe-dup"))],
        options(),
    )
    .await
    .expect_err("a duplicate name must not load");
    let text = error.to_string();
    assert!(text.contains("\"echo\" twice"), "{text}");
}

// Class 6: secrets never leave the sandbox through any channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_masked_in_every_channel() {
    const SECRET: &str = "sk_live_0123456789abcdef";
    let grants = Grants::none().config("key", SECRET, true);
    let host = probe_host(grants, quick_limits()).await;
    for how in [
        "kind",
        "message",
        "denied_url",
        "structured",
        "artifact",
        "stderr",
    ] {
        let outcome = call(&host, "leak", json!({"key": "key", "how": how})).await;
        let message = serde_json::to_string(&outcome.to_message()).unwrap();
        assert!(!message.contains(SECRET), "{how}: {message}");
        assert!(!message.contains(&SECRET[1..]), "{how}: {message}");
    }
    let outcome = call(&host, "leak", json!({"key": "key", "how": "denied_url"})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
    assert!(
        message(&outcome).contains("[redacted]"),
        "{}",
        message(&outcome)
    );
    let outcome = call(&host, "leak", json!({"key": "key", "how": "structured"})).await;
    assert_eq!(
        outcome.result.as_ref().unwrap().structured,
        Some(json!({"key": "[redacted]"}))
    );
}

/// One logged event: its target and its fields, formatted.
struct Event {
    target: String,
    fields: std::collections::HashMap<String, String>,
}

/// Keeps every event logged while it is the thread's subscriber.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Event>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(std::collections::HashMap<String, String>);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.insert(field.name().to_owned(), format!("{value:?}"));
            }
        }
        let mut fields = Fields(Default::default());
        event.record(&mut fields);
        self.0.lock().unwrap().push(Event {
            target: event.metadata().target().to_owned(),
            fields: fields.0,
        });
    }
}

/// Run `test` on a one-thread runtime (so the tool's host calls run on this
/// thread) and return what was logged meanwhile.
fn logged_while(test: impl std::future::Future<Output = ()>) -> Vec<Event> {
    use tracing_subscriber::layer::SubscriberExt as _;
    let capture = Capture::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(capture.clone()));
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
    std::mem::take(&mut *capture.0.lock().unwrap())
}

// Class 7: logs a tool controls are bounded per call.
#[test]
fn a_tool_logging_in_a_loop_is_held_to_its_budget() {
    let events = logged_while(async {
        let host = probe_host(Grants::none(), quick_limits()).await;
        let outcome = call(&host, "log_flood", json!({"n": 100_000})).await;
        assert_eq!(ok(&outcome), "logged");
    });
    let guest: Vec<&Event> = events
        .iter()
        .filter(|e| e.target == "toolhost::guest")
        .collect();
    let bytes: usize = guest.iter().map(|e| e.fields["message"].len()).sum();
    // 100 lines at most, then one line saying how many were dropped.
    assert!(guest.len() <= 101, "{} guest log events", guest.len());
    assert!(bytes <= 80 * 1024, "{bytes} bytes of guest log");
    let last = &guest.last().unwrap().fields["message"];
    assert!(last.contains("past its budget"), "{last}");
}

// Class 6, the stderr channel: only the tail is kept, and it may begin
// partway through a secret.
#[test]
fn a_stderr_tail_cut_inside_a_secret_is_masked() {
    const SECRET: &str = "sk_live_0123456789abcdef";
    let events = logged_while(async {
        let host = probe_host(Grants::none().config("key", SECRET, true), quick_limits()).await;
        let outcome = call(&host, "stderr_secret", json!({"name": "key"})).await;
        assert_eq!(err(&outcome), ErrorType::Trap);
    });
    let tail = events
        .iter()
        .rev()
        .find_map(|e| e.fields.get("stderr_tail"))
        .expect("the trap was logged with its stderr tail");
    let second_half = &SECRET[SECRET.len() / 2..];
    assert!(!tail.contains(second_half), "{tail}");
    assert!(tail.starts_with("[redacted]ffff"), "{}", &tail[..40]);
}

// Class 8: non-regular files are refused before they can block a thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_fifo_is_refused_at_once() {
    let (_work, data) = data_dir();
    let status = std::process::Command::new("mkfifo")
        .arg(data.join("pipe"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let grants = Grants::none()
        .file(&data, "/data", FileMode::ReadOnly)
        .unwrap();
    let host = host(vec![
        ComponentConfig::new(component("files"))
            .grants(grants)
            .limits(quick_limits()),
    ])
    .await;
    // Opening the pipe would block until a writer comes, which none does:
    // the bound only ends a test that would otherwise never end, and the
    // typed error tells a refusal from a deadline.
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        call(&host, "read_file", json!({"path": "/data/pipe"})),
    )
    .await
    .expect("reading the pipe blocked the call");
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert!(
        message(&outcome).contains("not a regular file"),
        "{}",
        message(&outcome)
    );
}

// Class 9: a read-write grant has a quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_past_the_quota_are_refused() {
    let (_work, data) = data_dir();
    let host = quota_host(&data, 1 << 20).await;
    let outcome = call(
        &host,
        "write_bytes",
        json!({"path": "/data/big", "n": 8 << 20, "how": "stream"}),
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert!(message(&outcome).contains("quota"), "{}", message(&outcome));
    let written = std::fs::metadata(data.join("big")).unwrap().len();
    assert!(written <= 1 << 20, "{written} bytes reached the disk");
    let outcome = call(
        &host,
        "write_bytes",
        json!({"path": "/data/sparse", "n": 1u64 << 40, "how": "set_len"}),
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    // Deleting frees the quota again (the directory is measured anew).
    std::fs::remove_file(data.join("big")).unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let outcome = call(
        &host,
        "write_bytes",
        json!({"path": "/data/small", "n": 256 << 10, "how": "stream"}),
    )
    .await;
    assert_eq!(ok(&outcome), format!("wrote {}", 256 << 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_into_a_sparse_hole_are_charged() {
    let (_work, data) = data_dir();
    let host = quota_host(&data, 1 << 20).await;
    let outcome = call(&host, "hole_write", json!({"n": 8 * 1024})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert!(message(&outcome).contains("quota"), "{}", message(&outcome));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_cannot_be_moved_from_one_grant_into_another() {
    let work = tempfile::tempdir().unwrap();
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    std::fs::write(b.join("big"), "written under b's quota").unwrap();
    let grants = Grants::none()
        .file(&a, "/a", FileMode::ReadWrite)
        .unwrap()
        .file(&b, "/b", FileMode::ReadWrite)
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let outcome = call(&host, "rename", json!({"from": "/b/big", "to": "/a/big"})).await;
    assert!(outcome.is_error(), "{outcome:?}");
    assert!(b.join("big").exists() && !a.join("big").exists());
    // Within one grant, renaming works.
    assert_eq!(
        ok(&call(&host, "rename", json!({"from": "/b/big", "to": "/b/moved"})).await),
        "renamed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_grant_has_a_default_quota() {
    let (_work, data) = data_dir();
    let grants = Grants::none()
        .file(&data, "/data", FileMode::ReadWrite)
        .unwrap();
    assert_eq!(grants.files()[0].quota, Some(toolhost::DEFAULT_QUOTA));
    assert!(
        Grants::none()
            .file(&data, "/data", FileMode::ReadOnly)
            .unwrap()
            .quota("/data", 1)
            .is_err()
    );
}

// The granted directory is held from load: swapping its path afterwards
// widens nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_granted_path_for_a_symlink_after_load_widens_nothing() {
    let (work, data) = data_dir();
    let host = host(vec![
        ComponentConfig::new(component("files"))
            .grants(
                Grants::none()
                    .file(&data, "/data", FileMode::ReadOnly)
                    .unwrap(),
            )
            .limits(quick_limits()),
    ])
    .await;
    let elsewhere = work.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("secret.txt"), "TOP SECRET").unwrap();
    std::fs::rename(&data, work.path().join("moved")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &data).unwrap();
    let outcome = call(&host, "read_file", json!({"path": "/data/secret.txt"})).await;
    assert!(outcome.is_error(), "{outcome:?}");
    assert!(!outcome.content().contains("TOP SECRET"));
    assert_eq!(
        ok(&call(&host, "read_file", json!({"path": "/data/notes.txt"})).await),
        "granted text"
    );
}

// Class 11: output the host builds itself is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_never_echoes_a_huge_name() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let name = "n".repeat(1 << 20);
    let outcome = host.call(ToolCall::new("c", name, json!({}))).await;
    assert_eq!(err(&outcome), ErrorType::UnknownTool);
    let message = serde_json::to_string(&outcome.to_message()).unwrap();
    assert!(message.len() < 4096, "{} bytes", message.len());
}

// Class 12: batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_id_is_refused_not_run_twice() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let outcomes = host
        .call_batch(vec![
            ToolCall::new("same", "counter", json!({})),
            ToolCall::new("other", "counter", json!({})),
            ToolCall::new("same", "counter", json!({})),
        ])
        .await;
    let ids: Vec<_> = outcomes.iter().map(|o| o.call_id.as_str()).collect();
    assert_eq!(ids, ["same", "other", "same"]);
    assert_eq!(ok(&outcomes[0]), "1");
    assert_eq!(ok(&outcomes[1]), "1");
    assert_eq!(err(&outcomes[2]), ErrorType::InvalidArguments);
    assert!(
        message(&outcomes[2]).contains("not run"),
        "{}",
        message(&outcomes[2])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_batch_stops_its_calls() {
    let (_work, data) = data_dir();
    // The blocking call's fetch is answered only when the test says so:
    // no clock decides how long it holds the permit.
    let gate = Arc::new(tokio::sync::Notify::new());
    let server = serve(axum::Router::new().route(
        "/",
        axum::routing::get({
            let gate = gate.clone();
            move || {
                let gate = gate.clone();
                async move {
                    gate.notified().await;
                    "released"
                }
            }
        }),
    ))
    .await;
    let grants = Grants::none()
        .file(&data, "/data", FileMode::ReadWrite)
        .unwrap()
        .allow_host(&server.origin())
        .unwrap();
    let one_at_a_time = slow_limits().with_max_concurrency(1).unwrap();
    let host = probe_host(grants, one_at_a_time).await;
    // A call outside the batch holds the one permit first, so every call
    // of the batch is still queued when the batch is dropped, whatever
    // order its calls reach the queue in.
    let blocker = {
        let host = host.clone();
        let url = server.url("/");
        tokio::spawn(async move {
            host.call(ToolCall::new("hold", "fetch", json!({ "name": url })))
                .await
        })
    };
    wait_until(Duration::from_secs(20), "the blocking call starts", || {
        host.in_flight() > 0
    })
    .await;
    let batch = host
        .call_batch(late_writes(4))
        .approver(Arc::new(ApproveAll));
    assert!(
        tokio::time::timeout(Duration::from_millis(200), batch)
            .await
            .is_err(),
        "the batch waits behind the blocking call"
    );
    // The permit frees when the blocking call ends; nothing of the
    // dropped batch may take it.
    gate.notify_one();
    let outcome = blocker.await.unwrap();
    assert_eq!(ok(&outcome), "200 released", "{outcome:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(late_files(&data), 0, "calls of a dropped batch ran");
}

// Components of many core modules can fill the instance pool before the
// dispatcher's count of instances does: such calls wait for room, under
// their deadline, instead of failing as `internal`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_instance_pool_queues_calls_instead_of_failing_them() {
    let host = ToolHost::load_components(
        vec![ComponentConfig::new(component("text-py")).limits(slow_limits())],
        options().with_max_instances(std::num::NonZeroU32::new(2).unwrap()),
    )
    .await
    .expect("the Python component loads");
    let calls: Vec<_> = (0..24)
        .map(|i| {
            ToolCall::new(
                format!("c{i}"),
                "word_count",
                json!({"text": "one two three"}),
            )
        })
        .collect();
    for outcome in host.call_batch(calls).await {
        assert!(!outcome.is_error(), "{outcome:?}");
    }
}
