//! Key-value stores as a tool sees them: `put` and `get` of a 100-byte
//! value from inside a fresh sandbox, on the embedded store (redb, every
//! write `fsync`ed) and on Redis (a `redis-server` this benchmark starts on
//! 127.0.0.1), beside the same call with no store (the probe's `echo`).
//!
//! Run with `scripts/bench.sh`, or `cargo bench -p toolhost --bench stores`
//! after `scripts/build-tools.sh`. Needs `redis-server` (scripts/setup.sh
//! installs it).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolhost::Grants;
use toolhost::stores::{Backend, Quota, Scope, StoreConfig};
use toolhost::{ComponentConfig, SandboxOptions, ToolCall, ToolHost};

mod common;
use common::{fmt_us, percentiles};

const CALLS: usize = 2000;

fn main() {
    let runtime = common::runtime();
    let dir = tempfile::tempdir().expect("a temp dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server runs (apt-get install redis-server; scripts/setup.sh does)");
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let backends = [
        (
            "embedded (redb)",
            Backend::Embedded {
                path: dir.path().join("bench.redb"),
            },
        ),
        (
            "redis (127.0.0.1)",
            Backend::Redis {
                url: format!("redis://127.0.0.1:{port}"),
                prefix: "bench".into(),
            },
        ),
    ];
    println!(
        "\n== stores: one call = a fresh instance + one store operation ({CALLS} calls each, 100-byte values)\n"
    );
    println!("| store | put p50 | put p99 | get p50 | get p99 |");
    println!("|---|---|---|---|---|");
    runtime.block_on(async {
        let plain = host(Grants::none()).await;
        let (echo50, echo99) = time(&plain, |i| {
            ToolCall::new(format!("c{i}"), "echo", json!({"text": "x", "times": 1}))
        })
        .await;
        println!(
            "| (no store: `echo`) | {} | {} | | |",
            fmt_us(echo50),
            fmt_us(echo99)
        );
        for (label, backend) in backends {
            let store = StoreConfig {
                name: "s".into(),
                backend,
                scope: Scope::Global,
                quota: Quota {
                    max_keys: 1_000_000,
                    max_bytes: 1 << 30,
                    ..Quota::default()
                },
            };
            let host = host(Grants::none().store(store)).await;
            let value = "v".repeat(100);
            let put = |i: usize| {
                ToolCall::new(
                    format!("c{i}"),
                    "put",
                    json!({"store": "s", "key": format!("k{}", i % 100), "value": value}),
                )
            };
            let get = |i: usize| {
                ToolCall::new(
                    format!("c{i}"),
                    "get",
                    json!({"store": "s", "key": format!("k{}", i % 100)}),
                )
            };
            let (put50, put99) = time(&host, put).await;
            let (get50, get99) = time(&host, get).await;
            println!(
                "| {label} | {} | {} | {} | {} |",
                fmt_us(put50),
                fmt_us(put99),
                fmt_us(get50),
                fmt_us(get99)
            );
        }
    });
    let _ = redis.kill();
    let _ = redis.wait();
}

async fn host(grants: Grants) -> ToolHost {
    let options =
        SandboxOptions::default().with_cache_dir(Some(common::root().join("target/bench-cache")));
    ToolHost::load_components(
        vec![ComponentConfig::new(common::tool("probe")).grants(grants)],
        options,
    )
    .await
    .expect("the probe loads")
}

/// p50 and p99 in µs of `CALLS` calls one after another (after a warm-up).
async fn time(host: &ToolHost, call: impl Fn(usize) -> ToolCall) -> (f64, f64) {
    for i in 0..50 {
        assert!(!host.call(call(i)).await.is_error());
    }
    let mut samples = Vec::with_capacity(CALLS);
    for i in 0..CALLS {
        let started = Instant::now();
        let outcome = host.call(call(i)).await;
        samples.push(started.elapsed());
        assert!(!outcome.is_error(), "{:?}", outcome.result);
    }
    let (p50, p99) = percentiles(samples);
    (p50.as_secs_f64() * 1e6, p99.as_secs_f64() * 1e6)
}
