//! Key-value stores (`wasi:keyvalue`): deny by default, scopes that never
//! leak, quotas that refuse whole, state that survives a restart, and two
//! host processes sharing one real Redis.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::CallOptions;
use toolhost::ErrorType;
use toolhost::Grants;
use toolhost::stores::{Backend, Quota, Scope, StoreConfig};
use toolhost::{ToolCall, ToolHost};

use crate::redis_server::RedisServer;
use crate::util::{component, err, message, ok, probe_host, quick_limits, root};

fn store(name: &str, backend: Backend, scope: Scope, quota: Quota) -> StoreConfig {
    StoreConfig {
        name: name.into(),
        backend,
        scope,
        quota,
    }
}

fn embedded(dir: &Path, name: &str) -> Backend {
    Backend::Embedded {
        path: dir.join(format!("{name}.redb")),
    }
}

async fn call_as(
    host: &ToolHost,
    user: Option<&str>,
    tool: &str,
    args: Value,
) -> toolhost::Outcome {
    let mut env = CallOptions::default();
    if let Some(user) = user {
        env = env.context(json!({ "user": user }));
    }
    host.call(ToolCall::new("call_1", tool, args))
        .options(&env)
        .await
}

#[tokio::test]
async fn a_tool_without_a_store_grant_sees_no_store() {
    let dir = tempfile::tempdir().unwrap();
    let granted = store(
        "s",
        embedded(dir.path(), "s"),
        Scope::Global,
        Quota::default(),
    );
    let host = probe_host(Grants::none().store(granted), quick_limits()).await;
    // Allowed: the granted store.
    ok(&host
        .call(ToolCall::new(
            "c",
            "put",
            json!({"store": "s", "key": "k", "value": "v"}),
        ))
        .await);
    assert_eq!(
        ok(&host
            .call(ToolCall::new("c", "get", json!({"store": "s", "key": "k"})))
            .await),
        "v"
    );
    // Denied: a store that exists elsewhere, and one that does not exist,
    // read the same (no existence oracle), and name the fix.
    let bare = probe_host(Grants::none(), quick_limits()).await;
    for name in ["s", "nope"] {
        let outcome = bare
            .call(ToolCall::new(
                "c",
                "get",
                json!({"store": name, "key": "k"}),
            ))
            .await;
        assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
        assert!(
            message(&outcome).contains(&format!("add stores = [\"{name}\"]")),
            "{}",
            message(&outcome)
        );
    }
}

#[tokio::test]
async fn a_huge_store_name_is_refused_without_being_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let granted = store(
        "s",
        embedded(dir.path(), "s"),
        Scope::Global,
        Quota::default(),
    );
    let host = probe_host(Grants::none().store(granted), quick_limits()).await;
    let name = "n".repeat(200_000);
    let outcome = host
        .call(ToolCall::new(
            "c",
            "get",
            json!({"store": name, "key": "k"}),
        ))
        .await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
    assert!(
        message(&outcome).len() < 2000,
        "{}",
        message(&outcome).len()
    );
    assert!(
        message(&outcome).contains("is not granted"),
        "{}",
        message(&outcome)
    );
}

#[tokio::test]
async fn scoped_stores_never_leak_across_scopes() {
    let dir = tempfile::tempdir().unwrap();
    let notes = store(
        "s",
        embedded(dir.path(), "s"),
        Scope::ContextKey("user".into()),
        Quota::default(),
    );
    let host = probe_host(Grants::none().store(notes), quick_limits()).await;
    ok(&call_as(
        &host,
        Some("ada"),
        "put",
        json!({"store": "s", "key": "diary", "value": "ada's"}),
    )
    .await);
    ok(&call_as(
        &host,
        Some("bob"),
        "put",
        json!({"store": "s", "key": "diary", "value": "bob's"}),
    )
    .await);
    let get = json!({"store": "s", "key": "diary"});
    assert_eq!(
        ok(&call_as(&host, Some("ada"), "get", get.clone()).await),
        "ada's"
    );
    assert_eq!(
        ok(&call_as(&host, Some("bob"), "get", get.clone()).await),
        "bob's"
    );
    assert_eq!(
        ok(&call_as(&host, Some("eve"), "get", get.clone()).await),
        "(missing)"
    );
    // Listing sees only the caller's own keys.
    assert_eq!(
        ok(&call_as(
            &host,
            Some("eve"),
            "put_many",
            json!({"store": "s", "n": 2, "size": 1})
        )
        .await),
        "keys=3 batches=1"
    );
    // No scope in the context: refused, never the global namespace.
    let outcome = call_as(&host, None, "get", get).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
    assert!(
        message(&outcome).contains("has no `user`"),
        "{}",
        message(&outcome)
    );
}

#[tokio::test]
async fn quotas_refuse_with_typed_errors_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let quota = Quota {
        max_keys: 3,
        max_bytes: 1000,
        max_key_bytes: 16,
        max_value_bytes: 400,
        ..Quota::default()
    };
    let host = probe_host(
        Grants::none().store(store("s", embedded(dir.path(), "s"), Scope::Global, quota)),
        quick_limits(),
    )
    .await;
    let put = |key: &str, size: usize| {
        ToolCall::new("c", "put", json!({"store": "s", "key": key, "size": size}))
    };
    ok(&host.call(put("a", 300)).await);
    ok(&host.call(put("b", 300)).await);
    // Bytes: a third 300-byte value passes 1000 bytes.
    let over = host.call(put("c", 399)).await;
    assert_eq!(err(&over), ErrorType::CapabilityDenied);
    assert!(
        message(&over).contains("over its quota"),
        "{}",
        message(&over)
    );
    // Sizes of one key and one value.
    let long_key = host.call(put("a-very-long-key-name", 1)).await;
    assert!(
        message(&long_key).contains("keys of at most 16 bytes"),
        "{}",
        message(&long_key)
    );
    let big = host.call(put("d", 401)).await;
    assert!(
        message(&big).contains("values of at most 400 bytes"),
        "{}",
        message(&big)
    );
    // Keys: a batch that would make 5 keys is refused whole.
    let batch = host
        .call(ToolCall::new(
            "c",
            "put_many",
            json!({"store": "s", "n": 3, "size": 1}),
        ))
        .await;
    assert!(message(&batch).contains("at most 3"), "{}", message(&batch));
    // Nothing was lost or half-written.
    let get = |key: &str| ToolCall::new("c", "get", json!({"store": "s", "key": key}));
    assert_eq!(ok(&host.call(get("a")).await).len(), 300);
    assert_eq!(ok(&host.call(get("c")).await), "(missing)");
    assert_eq!(ok(&host.call(get("k2")).await), "(missing)");
}

#[tokio::test]
async fn store_operations_per_call_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let host = probe_host(
        Grants::none().store(store(
            "s",
            embedded(dir.path(), "s"),
            Scope::Global,
            Quota::default(),
        )),
        quick_limits(),
    )
    .await;
    ok(&host
        .call(ToolCall::new("c", "store_ops", json!({"n": 100})))
        .await);
    let outcome = host
        .call(ToolCall::new("c", "store_ops", json!({"n": 20_000})))
        .await;
    assert!(
        message(&outcome).contains("at most 10000 store operations"),
        "{}",
        message(&outcome)
    );
}

/// Run the `toolhost` binary with `manifest`.
fn toolhost_call(manifest: &Path, context: &str, tool: &str, args: Value) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["call", "--config"])
        .arg(manifest)
        .args(["--context", context, tool, &args.to_string()])
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("the toolhost binary runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a ToolMessage")
}

fn notes_manifest(dir: &Path, backend: &str) -> std::path::PathBuf {
    let manifest = dir.join("toolhost.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[tool]]\ncomponent = {:?}\nstores = [\"notes\"]\n\n[store.notes]\n{backend}\nscope = \"user\"\n",
            component("notes")
        ),
    )
    .unwrap();
    manifest
}

#[test]
fn the_embedded_store_survives_a_restart_of_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = notes_manifest(dir.path(), "backend = \"embedded\"");
    let saved = toolhost_call(
        &manifest,
        r#"{"user":"ada"}"#,
        "remember",
        json!({"topic": "parking", "text": "level 3"}),
    );
    assert_eq!(saved["is_error"], false, "{saved}");
    // A new process: the note is still there, for Ada only.
    let recalled = toolhost_call(
        &manifest,
        r#"{"user":"ada"}"#,
        "recall",
        json!({"topic": "parking"}),
    );
    assert_eq!(recalled["content"], "level 3");
    let other = toolhost_call(
        &manifest,
        r#"{"user":"bob"}"#,
        "recall",
        json!({"topic": "parking"}),
    );
    assert_eq!(other["error"]["type"], "tool_error", "{other}");
    assert!(dir.path().join(".toolhost/stores/notes.redb").is_file());
}

#[test]
fn two_host_processes_on_one_redis_see_each_others_writes() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let manifest = notes_manifest(dir.path(), &format!("backend = {:?}", redis.url()));
    // Each call is its own process: what one writes the next reads.
    let saved = toolhost_call(
        &manifest,
        r#"{"user":"ada"}"#,
        "remember",
        json!({"topic": "x", "text": "from process 1"}),
    );
    assert_eq!(saved["is_error"], false, "{saved}");
    let recalled = toolhost_call(
        &manifest,
        r#"{"user":"ada"}"#,
        "recall",
        json!({"topic": "x"}),
    );
    assert_eq!(recalled["content"], "from process 1");
    let bob = toolhost_call(
        &manifest,
        r#"{"user":"bob"}"#,
        "recall",
        json!({"topic": ""}),
    );
    assert_eq!(
        bob["content"], "No notes yet.",
        "scopes stay apart in Redis too"
    );
}

#[tokio::test]
async fn redis_quotas_hold_across_concurrent_writers_and_refuse_whole() {
    let redis = RedisServer::start();
    let quota = Quota {
        max_keys: 10,
        ..Quota::default()
    };
    let shared = || {
        store(
            "s",
            Backend::Redis {
                url: redis.url(),
                prefix: "test".into(),
            },
            Scope::Global,
            quota,
        )
    };
    // Two hosts with their own connections, as two processes would have.
    let a = probe_host(Grants::none().store(shared()), quick_limits()).await;
    let b = probe_host(Grants::none().store(shared()), quick_limits()).await;
    let writes = (0..20).map(|i| {
        let host = if i % 2 == 0 { a.clone() } else { b.clone() };
        async move {
            host.call(ToolCall::new(
                "c",
                "put",
                json!({"store": "s", "key": format!("k{i}"), "value": "v"}),
            ))
            .await
        }
    });
    let outcomes = futures::future::join_all(writes).await;
    let stored = outcomes.iter().filter(|o| !o.is_error()).count();
    assert_eq!(stored, 10, "exactly the quota, whoever wrote first");
    assert!(
        outcomes
            .iter()
            .filter(|o| o.is_error())
            .all(|o| message(o).contains("over its quota"))
    );
    let batch = a
        .call(ToolCall::new(
            "c",
            "put_many",
            json!({"store": "s", "n": 3, "size": 1}),
        ))
        .await;
    assert_eq!(err(&batch), ErrorType::CapabilityDenied);
    // Both hosts read what either wrote.
    for host in [&a, &b] {
        ok(&host
            .call(ToolCall::new(
                "c",
                "get",
                json!({"store": "s", "key": "k0"}),
            ))
            .await);
    }
}

#[tokio::test]
async fn an_unreachable_redis_is_a_typed_failure_not_a_hang() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = store(
        "s",
        Backend::Redis {
            url: format!("redis://127.0.0.1:{port}"),
            prefix: "t".into(),
        },
        Scope::Global,
        Quota::default(),
    );
    let host = probe_host(Grants::none().store(down), quick_limits()).await;
    let outcome = host
        .call(ToolCall::new("c", "get", json!({"store": "s", "key": "k"})))
        .await;
    assert_eq!(err(&outcome), ErrorType::ToolError);
    assert!(
        message(&outcome).contains("unavailable"),
        "{}",
        message(&outcome)
    );
}

/// A `toolhost serve --stdio` child running the probe with one store `s`,
/// whose peak resident set the test can read between calls.
struct StdioHost {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    /// Answers read while waiting for another.
    early: std::collections::HashMap<u64, Value>,
    _dir: tempfile::TempDir,
}

impl StdioHost {
    fn start(backend: &str) -> Self {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("toolhost.toml");
        std::fs::write(
            &manifest,
            format!(
                "[[tool]]\ncomponent = {:?}\nstores = [\"s\"]\n\n[store.s]\n{backend}\n",
                component("probe")
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(["serve", "--stdio", "--config"])
            .arg(&manifest)
            .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
            .env("RUST_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the toolhost binary runs");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut host = Self {
            child,
            stdin,
            lines,
            early: std::collections::HashMap::new(),
            _dir: dir,
        };
        host.send(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "toolhost-tests", "version": "1"}}}),
        );
        host.reply(0);
        host.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        host
    }

    fn send(&mut self, message: &Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Start a `tools/call` as request `id`.
    fn call(&mut self, id: u64, tool: &str, args: Value) {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}}));
    }

    /// The answer to request `id` (answers come in any order).
    fn reply(&mut self, id: u64) -> Value {
        loop {
            if let Some(message) = self.early.remove(&id) {
                return message;
            }
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("no reply to {id}"));
            let message: Value = serde_json::from_str(&line).unwrap();
            if let Some(other) = message["id"].as_u64() {
                self.early.insert(other, message);
            }
        }
    }

    /// The child's peak resident set so far (`VmHWM`), in bytes.
    fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kib << 10
    }
}

impl Drop for StdioHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How much a `toolhost serve --stdio` child's peak resident set grows
/// while it answers `calls` at once (after one small call has opened the
/// store and compiled the probe), and the answers.
fn peak_growth(backend: &str, calls: &[(&str, Value)]) -> (u64, Vec<Value>) {
    let mut host = StdioHost::start(backend);
    host.call(
        1,
        "put",
        json!({"store": "s", "key": "warm", "value": "up"}),
    );
    let warm = host.reply(1);
    assert_eq!(warm["result"]["isError"], false, "{warm}");
    let before = host.peak_rss();
    for (i, (tool, args)) in calls.iter().enumerate() {
        host.call(10 + i as u64, tool, args.clone());
    }
    let replies = (0..calls.len())
        .map(|i| host.reply(10 + i as u64))
        .collect();
    (host.peak_rss().saturating_sub(before), replies)
}

/// Four concurrent `set-many` calls whose 1,000 entries each point at one
/// 256 KiB buffer: 256 MiB named per call by a guest that holds a few KiB.
/// Before the host read batches lazily, it copied each up to wasmtime's
/// 128 MiB per host call (the peak grew by about 260 MiB); now each is
/// refused after reading its entries' lengths. Run with `--nocapture` for
/// the figures, and for those of four honest 40 MiB batches (which include
/// the guests' own memories).
#[test]
fn aliased_batches_are_refused_before_the_host_copies_them() {
    let redis = RedisServer::start();
    for backend in [
        "backend = \"embedded\"".to_owned(),
        format!("backend = {:?}", redis.url()),
    ] {
        let aliased = json!({"store": "s", "op": "set", "n": 1000, "size": 256 << 10});
        let (growth, replies) = peak_growth(&backend, &vec![("aliased_batch", aliased); 4]);
        println!(
            "{backend}: 4 aliased set-many calls grew the host's peak RSS by {} MiB",
            growth >> 20
        );
        for reply in &replies {
            let text = reply["result"]["content"][0]["text"].as_str().unwrap_or("");
            assert_eq!(reply["result"]["isError"], true, "{reply}");
            assert!(
                text.contains("a batch may move at most 33554432 bytes"),
                "{text}"
            );
        }
        assert!(
            growth < 32 << 20,
            "{backend}: the host grew by {} MiB",
            growth >> 20
        );
        let honest = json!({"store": "s", "n": 40, "size": 1 << 20});
        let (growth, _) = peak_growth(&backend, &vec![("put_many", honest); 4]);
        println!(
            "{backend}: 4 put_many calls of 40 x 1 MiB grew the host's peak RSS by {} MiB",
            growth >> 20
        );
    }
}

/// Every backend a test should run on: an embedded file in `dir` and the
/// Redis server `redis`, each for a store `s` with `scope` and `quota`.
fn both(dir: &Path, redis: &RedisServer, scope: &Scope, quota: Quota) -> Vec<StoreConfig> {
    vec![
        store("s", embedded(dir, "s"), scope.clone(), quota),
        store(
            "s",
            Backend::Redis {
                url: redis.url(),
                prefix: format!("t:{}", fastrand_prefix()),
            },
            scope.clone(),
            quota,
        ),
    ]
}

/// A prefix no other test's keys share, though tests share one server.
fn fastrand_prefix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{}:{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

async fn call_with(host: &ToolHost, context: Value, tool: &str, args: Value) -> toolhost::Outcome {
    let env = CallOptions::default().context(context);
    host.call(ToolCall::new("call_1", tool, args))
        .options(&env)
        .await
}

#[tokio::test]
async fn a_number_and_a_string_with_the_same_text_are_different_namespaces() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let scope = Scope::ContextKey("user".into());
    for store in both(dir.path(), &redis, &scope, Quota::default()) {
        let host = probe_host(Grants::none().store(store), quick_limits()).await;
        let put = json!({"store": "s", "key": "k", "value": "number's"});
        ok(&call_with(&host, json!({"user": 7}), "put", put).await);
        let get = json!({"store": "s", "key": "k"});
        assert_eq!(
            ok(&call_with(&host, json!({"user": "7"}), "get", get.clone()).await),
            "(missing)"
        );
        assert_eq!(
            ok(&call_with(&host, json!({"user": 7}), "get", get.clone()).await),
            "number's"
        );
        // 7.0 is not a second spelling of 7: it is refused.
        let context: Value = serde_json::from_str(r#"{"user": 7.0}"#).unwrap();
        let outcome = call_with(&host, context, "get", get.clone()).await;
        assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
        assert!(
            message(&outcome).contains("not an integer"),
            "{}",
            message(&outcome)
        );
        // A value with `:` stays inside its own namespace.
        let sneaky = json!({"user": "7:h:x"});
        assert_eq!(ok(&call_with(&host, sneaky, "get", get).await), "(missing)");
    }
}

#[tokio::test]
async fn callers_inventing_namespaces_meet_the_store_wide_bound() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let scope = Scope::ContextKey("user".into());
    let quota = Quota {
        max_namespaces: 2,
        max_store_bytes: 1000,
        ..Quota::default()
    };
    for store in both(dir.path(), &redis, &scope, quota) {
        let host = probe_host(Grants::none().store(store), quick_limits()).await;
        let put = |size: usize| json!({"store": "s", "key": "k", "size": size});
        for user in ["ada", "bob"] {
            ok(&call_as(&host, Some(user), "put", put(100)).await);
        }
        let third = call_as(&host, Some("eve"), "put", put(1)).await;
        assert_eq!(err(&third), ErrorType::CapabilityDenied);
        assert!(
            message(&third).contains("raise max_namespaces"),
            "{}",
            message(&third)
        );
        // The namespaces that exist may grow up to the store's bytes.
        let big = call_as(&host, Some("ada"), "put", put(900)).await;
        assert!(
            message(&big).contains("raise max_store_bytes"),
            "{}",
            message(&big)
        );
        ok(&call_as(&host, Some("ada"), "put", put(700)).await);
        // Nothing refused was written.
        let get = json!({"store": "s", "key": "k"});
        assert_eq!(
            ok(&call_as(&host, Some("eve"), "get", get.clone()).await),
            "(missing)"
        );
        assert_eq!(
            ok(&call_as(&host, Some("ada"), "get", get).await).len(),
            700
        );
    }
}

#[tokio::test]
async fn listings_page_by_cursor_and_refuse_cursors_they_did_not_give() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for store in both(dir.path(), &redis, &Scope::Global, Quota::default()) {
        let host = probe_host(Grants::none().store(store), quick_limits()).await;
        // A value that is not UTF-8 once broke Redis listings.
        ok(&host
            .call(ToolCall::new(
                "c",
                "put",
                json!({"store": "s", "key": "raw", "size": 3, "fill": 255}),
            ))
            .await);
        // 1,002 keys, listed whole by the SDK across pages in one call.
        assert_eq!(
            ok(&host
                .call(ToolCall::new(
                    "c",
                    "put_many",
                    json!({"store": "s", "n": 1000, "size": 1})
                ))
                .await),
            "keys=1002 batches=1"
        );
        let page = ok(&host
            .call(ToolCall::new("c", "list_page", json!({"store": "s"})))
            .await);
        assert_eq!(page, "keys=1000 first=batches last=k998 cursor=1");
        // A cursor belongs to the call that was given it.
        for cursor in [1, 12345] {
            let outcome = host
                .call(ToolCall::new(
                    "c",
                    "list_page",
                    json!({"store": "s", "cursor": cursor}),
                ))
                .await;
            assert_eq!(err(&outcome), ErrorType::ToolError);
            assert!(
                message(&outcome).contains(&format!("cursor {cursor} was not given by list-keys")),
                "{}",
                message(&outcome)
            );
        }
    }
}

#[tokio::test]
async fn a_read_too_large_for_the_store_is_not_a_denial_and_a_write_is() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let quota = Quota {
        max_key_bytes: 16,
        ..Quota::default()
    };
    for store in both(dir.path(), &redis, &Scope::Global, quota) {
        let host = probe_host(Grants::none().store(store), quick_limits()).await;
        let long = "a-key-longer-than-sixteen-bytes";
        let read = host
            .call(ToolCall::new(
                "c",
                "get",
                json!({"store": "s", "key": long}),
            ))
            .await;
        assert_eq!(err(&read), ErrorType::ToolError, "{}", message(&read));
        assert!(
            message(&read).contains("keys of at most 16 bytes"),
            "{}",
            message(&read)
        );
        for op in ["get", "delete"] {
            let batch = host
                .call(ToolCall::new(
                    "c",
                    "aliased_batch",
                    json!({"store": "s", "op": op, "n": 3, "size": 17}),
                ))
                .await;
            assert_eq!(err(&batch), ErrorType::ToolError, "{}", message(&batch));
            assert!(
                message(&batch).contains("keys of at most 16 bytes"),
                "{}",
                message(&batch)
            );
        }
        let write = host
            .call(ToolCall::new(
                "c",
                "put",
                json!({"store": "s", "key": long, "value": "v"}),
            ))
            .await;
        assert_eq!(err(&write), ErrorType::CapabilityDenied);
        let counter = host
            .call(ToolCall::new(
                "c",
                "incr",
                json!({"store": "s", "key": long, "delta": 1}),
            ))
            .await;
        assert_eq!(err(&counter), ErrorType::CapabilityDenied);
    }
}

#[tokio::test]
async fn batches_past_their_bounds_are_refused_before_they_are_read() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for store in both(dir.path(), &redis, &Scope::Global, Quota::default()) {
        let host = probe_host(Grants::none().store(store), quick_limits()).await;
        let batch = |op: &str, n: usize, size: usize| {
            ToolCall::new(
                "c",
                "aliased_batch",
                json!({"store": "s", "op": op, "n": n, "size": size}),
            )
        };
        // More keys than a batch may name, each the same 1 KiB key.
        for op in ["get", "delete", "set"] {
            let outcome = host.call(batch(op, 100_000, 16)).await;
            assert!(
                message(&outcome).contains("at most 1000 keys of store 's'; this one names 100000"),
                "{op}: {}",
                message(&outcome)
            );
        }
        // Values past the store's size are a refusal of the write.
        let big = host.call(batch("set", 2, (1 << 20) + 1)).await;
        assert_eq!(err(&big), ErrorType::CapabilityDenied);
        // Within bounds, an aliased batch is just a batch.
        ok(&host.call(batch("set", 10, 1000)).await);
        ok(&host.call(batch("get", 10, 8)).await);
        ok(&host.call(batch("delete", 10, 8)).await);
    }
}

#[tokio::test]
async fn counters_refuse_alike_through_wasi_on_both_backends() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    for store in both(dir.path(), &redis, &Scope::Global, Quota::default()) {
        let host = probe_host(Grants::none().store(store), quick_limits()).await;
        let incr = |key: &str, delta: u64| {
            ToolCall::new(
                "c",
                "incr",
                json!({"store": "s", "key": key, "delta": delta}),
            )
        };
        assert_eq!(ok(&host.call(incr("n", 41)).await), "41");
        assert_eq!(ok(&host.call(incr("n", 1)).await), "42");
        ok(&host
            .call(ToolCall::new(
                "c",
                "put",
                json!({"store": "s", "key": "z", "value": "007"}),
            ))
            .await);
        let padded = host.call(incr("z", 1)).await;
        assert!(
            message(&padded).contains("not a counter"),
            "{}",
            message(&padded)
        );
        let over = host.call(incr("n", u64::MAX)).await;
        assert!(
            message(&over)
                .contains("the counter holds 42, and adding 18446744073709551615 would pass"),
            "{}",
            message(&over)
        );
        assert_eq!(ok(&host.call(incr("n", 0)).await), "42");
    }
}

#[tokio::test]
async fn a_second_process_on_an_embedded_store_is_told_the_cause_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = notes_manifest(dir.path(), "backend = \"embedded\"");
    // This process opens the store the manifest names, and keeps it open.
    let held = store(
        "notes",
        Backend::Embedded {
            path: dir.path().join(".toolhost/stores/notes.redb"),
        },
        Scope::Global,
        Quota::default(),
    );
    let host = probe_host(Grants::none().store(held), quick_limits()).await;
    ok(&host
        .call(ToolCall::new(
            "c",
            "put",
            json!({"store": "notes", "key": "k", "value": "v"}),
        ))
        .await);
    let second = tokio::task::spawn_blocking(move || {
        toolhost_call(
            &manifest,
            r#"{"user":"ada"}"#,
            "remember",
            json!({"topic": "t", "text": "x"}),
        )
    })
    .await
    .unwrap();
    let text = second["content"].as_str().unwrap_or_default();
    assert_eq!(second["is_error"], true, "{second}");
    assert!(text.contains("open in another toolhost process"), "{text}");
    assert!(text.contains("redis://"), "{text}");
    assert!(!text.contains("try again later"), "{text}");
    assert!(
        !text.contains(".redb"),
        "the path is the operator's: {text}"
    );
    assert_eq!(second["error"]["retryable"], false, "{second}");
}

#[test]
fn check_shows_the_store_wide_bounds_and_no_redis_password() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = notes_manifest(
        dir.path(),
        "backend = \"redis://user:hun@ter2@127.0.0.1:6379/0?password=hunter2\"\nmax_namespaces = 500",
    );
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["check", "--config"])
        .arg(&manifest)
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .stdin(Stdio::null())
        .output()
        .expect("the toolhost binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("redis at redis://user:***@127.0.0.1:6379/0?password=***"),
        "{stdout}"
    );
    assert!(
        stdout.contains("500 namespaces and 1.0 GiB in all"),
        "{stdout}"
    );
    assert!(!stdout.contains("ter2"), "{stdout}");
}
