//! Fresh-instance call latency and warm start, against DESIGN.md §8.
//!
//! Run with `scripts/bench.sh` (builds the tools first), or
//! `cargo bench -p toolhost --bench calls` once `scripts/build-tools.sh` has run.
//!
//! Each call goes through the whole public path a user gets: argument
//! validation, a fresh instance from the pooling allocator, the call, output
//! checks. Calls run one after another, so the figures are latency, not
//! throughput.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolhost::{Manifest, SandboxOptions, ToolCall, ToolHost};

const MANIFEST: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../example-tools/toolhost.toml"
);

struct Case {
    language: &'static str,
    tool: &'static str,
    args: Value,
    target: Duration,
    iterations: usize,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let manifest = Manifest::load(Path::new(MANIFEST))
        .unwrap_or_else(|e| panic!("{e}\nrun scripts/build-tools.sh first"));

    // Warm start: a new host (engine, pool, components from the compile
    // cache, each asked for its tools) for the example manifest.
    let host = runtime
        .block_on(ToolHost::load_components(
            manifest.components.clone(),
            SandboxOptions::default(),
        ))
        .unwrap();
    let mut starts = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        let host = runtime
            .block_on(ToolHost::load_components(
                manifest.components.clone(),
                SandboxOptions::default(),
            ))
            .unwrap();
        starts.push(started.elapsed());
        drop(host);
    }
    starts.sort();

    let cases = [
        Case {
            language: "Rust",
            tool: "calc",
            args: json!({"expression": "6*7"}),
            target: Duration::from_micros(10),
            iterations: 20_000,
        },
        Case {
            language: "Python",
            tool: "word_count",
            args: json!({"text": "one two three"}),
            target: Duration::from_micros(500),
            iterations: 2_000,
        },
        Case {
            language: "JavaScript",
            tool: "convert_units",
            args: json!({"value": 10, "from": "km", "to": "mi"}),
            target: Duration::from_micros(250),
            iterations: 2_000,
        },
    ];

    println!(
        "toolhost benchmark: {} cores, example manifest",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>14}",
        "fresh-instance call", "p50", "p99", "target p50", "p50 / target"
    );
    // `cargo bench --bench calls -- rust` runs only the matching cases (for profiling).
    let filter = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|f| f.to_lowercase());
    for case in cases.iter().filter(|c| {
        filter
            .as_ref()
            .is_none_or(|f| c.language.to_lowercase().contains(f))
    }) {
        let mut samples = Vec::with_capacity(case.iterations);
        runtime.block_on(async {
            // Warm-up: fault in the pool slots and code pages.
            for _ in 0..case.iterations / 10 {
                let outcome = host
                    .call(ToolCall::new("w", case.tool, case.args.clone()))
                    .await;
                assert!(outcome.result.is_ok(), "{outcome:?}");
            }
            for _ in 0..case.iterations {
                let call = ToolCall::new("b", case.tool, case.args.clone());
                let started = Instant::now();
                let outcome = host.call(call).await;
                samples.push(started.elapsed());
                assert!(outcome.result.is_ok());
            }
        });
        samples.sort();
        let p50 = percentile(&samples, 0.50);
        println!(
            "{:<28} {:>12} {:>12} {:>12} {:>13.1}x",
            format!("{} ({})", case.language, case.tool),
            micros(p50),
            micros(percentile(&samples, 0.99)),
            micros(case.target),
            p50.as_secs_f64() / case.target.as_secs_f64()
        );
    }
    println!();
    let p50 = percentile(&starts, 0.5);
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>13.1}x",
        format!("warm start ({} components)", manifest.components.len()),
        format!("{:.1} ms", p50.as_secs_f64() * 1e3),
        format!("{:.1} ms", starts.last().unwrap().as_secs_f64() * 1e3),
        "100.0 ms",
        p50.as_secs_f64() / 0.1
    );
    println!("(warm start columns: median and worst of 10; ratios above 1 miss the target)");
}
