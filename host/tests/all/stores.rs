//! Key-value stores (`wasi:keyvalue`): deny by default, scopes that never
//! leak, quotas that refuse whole, state that survives a restart, and two
//! host processes sharing one real Redis.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::dispatcher::CallEnv;
use toolhost::grants::Grants;
use toolhost::outcome::ErrorType;
use toolhost::stores::{Backend, Quota, Scope, Store, StoreConfig};
use toolhost::{ToolCall, ToolHost};

use crate::util::{component, err, message, ok, probe_host, quick_limits, root};

fn store(name: &str, backend: Backend, scope: Scope, quota: Quota) -> Arc<Store> {
    Arc::new(Store::new(StoreConfig {
        name: name.into(),
        backend,
        scope,
        quota,
    }))
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
    let mut env = CallEnv::default();
    if let Some(user) = user {
        env = env.context(json!({ "user": user }));
    }
    host.call_in(ToolCall::new("call_1", tool, args), &env)
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

/// A `redis-server` on a free port of 127.0.0.1, stopped when dropped.
struct RedisServer {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server runs: install it with `apt-get install redis-server` (scripts/setup.sh does)");
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!("redis-server did not start on port {port}");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
