//! Helpers shared by the integration tests: component paths, hosts with
//! chosen grants and limits, and HTTP servers on 127.0.0.1.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;
use toolhost::ErrorType;
use toolhost::Grants;
use toolhost::Limits;
use toolhost::{ComponentConfig, Outcome, SandboxOptions, ToolCall, ToolHost};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A component built by `scripts/build-tools.sh`.
pub fn component(name: &str) -> PathBuf {
    let path = root().join("target/tools").join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/build-tools.sh before the tests (scripts/test.sh does)",
        path.display()
    );
    path
}

/// Options for test hosts: a cache shared by the test run, so each component
/// compiles once, and a small pool.
pub fn options() -> SandboxOptions {
    SandboxOptions::default()
        .with_cache_dir(Some(root().join("target/test-cache")))
        .with_max_instances(std::num::NonZeroU32::new(200).unwrap())
}

/// Limits short enough for tests to fail fast. Every instance is made at
/// its call: whether `ready = "auto"` makes them ahead depends on how fast
/// the machine instantiates, and a test should take one path every run
/// (`ready.rs` tests the other).
pub fn quick_limits() -> Limits {
    Limits::default()
        .with_timeout(Duration::from_secs(5))
        .unwrap()
        .with_fuel(500_000_000)
        .unwrap()
        .with_memory(32 << 20)
        .unwrap()
        .with_max_output(32 << 10)
        .unwrap()
        .with_max_concurrency(64)
        .unwrap()
        .with_ready(toolhost::ReadyInstances::Exactly(0))
        .unwrap()
}

/// A host with the probe component under `grants` and `limits`.
/// A work directory holding `data/notes.txt`; keep the first until done.
pub fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "granted text").unwrap();
    (work, data)
}

/// The probe's `write_bytes` calls to `/data/late-0` … `late-{n-1}`:
/// calls whose files show whether they ran.
pub fn late_writes(n: usize) -> Vec<ToolCall> {
    (0..n)
        .map(|i| {
            ToolCall::new(
                format!("w{i}"),
                "write_bytes",
                serde_json::json!({"path": format!("/data/late-{i}"), "n": 1, "how": "stream"}),
            )
        })
        .collect()
}

/// How many of [`late_writes`]'s files are in `data`.
pub fn late_files(data: &std::path::Path) -> usize {
    std::fs::read_dir(data)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("late-"))
        })
        .count()
}

/// Wait until `done` holds, looking every 5 ms; panics with `what` after
/// `within`.
pub async fn wait_until(within: Duration, what: &str, done: impl Fn() -> bool) {
    let waiting = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(within, waiting)
        .await
        .unwrap_or_else(|_| panic!("{what}, within {within:?}"));
}

pub async fn probe_host(grants: Grants, limits: Limits) -> ToolHost {
    host(vec![
        ComponentConfig::new(component("probe"))
            .grants(grants)
            .limits(limits),
    ])
    .await
}

pub async fn host(components: Vec<ComponentConfig>) -> ToolHost {
    ToolHost::load_components(components, options())
        .await
        .expect("test components load")
}

/// Call `tool` with `args` and return the outcome.
pub async fn call(host: &ToolHost, tool: &str, args: Value) -> Outcome {
    host.call(ToolCall::new("call_test", tool, args)).await
}

/// The content of a successful outcome; panics with the error otherwise.
#[track_caller]
pub fn ok(outcome: &Outcome) -> String {
    match &outcome.result {
        Ok(output) => output.to_text(),
        Err(e) => panic!("expected success, got {e:?}"),
    }
}

/// The error type of a failed outcome; panics on success.
#[track_caller]
pub fn err(outcome: &Outcome) -> ErrorType {
    match &outcome.result {
        Ok(output) => panic!("expected an error, got success: {:?}", output.content),
        Err(e) => e.kind,
    }
}

/// The error message of a failed outcome.
#[track_caller]
pub fn message(outcome: &Outcome) -> String {
    outcome
        .result
        .as_ref()
        .expect_err("expected an error")
        .message
        .clone()
}

/// An HTTP server on 127.0.0.1 that counts requests.
pub struct Server {
    pub addr: SocketAddr,
    pub hits: Arc<AtomicUsize>,
}

impl Server {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

/// Serve `router` on a free port of 127.0.0.1, counting requests.
pub async fn serve(router: axum::Router) -> Server {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let router = router.layer(axum::middleware::from_fn(
        move |req, next: axum::middleware::Next| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { next.run(req).await }
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Server { addr, hits }
}

/// A server that answers `GET /` with `body`.
pub async fn text_server(body: &'static str) -> Server {
    serve(axum::Router::new().route("/", axum::routing::get(move || async move { body }))).await
}

/// A TCP listener on 127.0.0.1 that accepts connections and never answers;
/// counts the connections it accepted.
pub async fn silent_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            open.push(socket); // Hold it open, say nothing.
        }
    });
    (addr, accepted)
}

/// An observer that keeps every log line it hears, at every level.
#[derive(Debug, Default)]
pub struct Lines(pub std::sync::Mutex<Vec<String>>);

impl toolhost::CallObserver for Lines {
    fn wants(&self, _: toolhost::LogLevel) -> bool {
        true
    }
    fn log(&self, _: toolhost::LogLevel, line: &str) {
        self.0.lock().unwrap().push(line.to_owned());
    }
}
