//! Code mode's cost: one `run_code` call whose program makes 10 trivial
//! calls (calc, in one `Promise.all`), beside the same 10 calls made as one
//! batch of plain calls, and a `run_code` that calls nothing. The tools are
//! example-tools/code.toml's; the code tool is JavaScript, so the gap is
//! the engine's start and the program's own work, paid once per program
//! rather than once per call.
//!
//! Run with `scripts/bench.sh`, or `cargo bench -p toolhost --bench
//! code_mode` after `scripts/build-tools.sh`.

use std::time::{Duration, Instant};

use serde_json::json;
use toolhost::{Manifest, SandboxOptions, ToolCall, ToolHost};

mod common;
use common::{fmt_us, percentiles, root};

const ITERATIONS: usize = 300;

/// Ten calc calls in one `Promise.all`: the host runs them as one list.
const TEN_CALLS: &str = "const values = await Promise.all(Array.from({ length: 10 }, (_, i) => tools.calc({ expression: `${i}+1` })));\nreturn values.length;";

fn main() {
    let runtime = common::runtime();
    let manifest = Manifest::load(&root().join("example-tools/code.toml"))
        .expect("example-tools/code.toml loads (run scripts/build-tools.sh)");
    let host = runtime
        .block_on(ToolHost::load_components(
            manifest.components.clone(),
            SandboxOptions::default(),
        ))
        .expect("the code tool and its callees load");

    let run_code = |code: &'static str| {
        let host = &host;
        move || async move {
            let outcome = host
                .call(ToolCall::new("b", "run_code", json!({ "code": code })))
                .await;
            assert!(outcome.result.is_ok(), "{outcome:?}");
        }
    };
    let batch = || {
        let host = &host;
        async move {
            let calls = (0..10)
                .map(|i| {
                    ToolCall::new(
                        format!("b{i}"),
                        "calc",
                        json!({"expression": format!("{i}+1")}),
                    )
                })
                .collect();
            let outcomes = host.call_batch(calls).await;
            assert!(outcomes.iter().all(|o| o.result.is_ok()), "{outcomes:?}");
        }
    };

    println!(
        "\nCode mode: one program's calls against the same calls from the model (p50 and p99, {ITERATIONS} runs each)"
    );
    println!("  {:<60} {:>10} {:>10}", "", "p50", "p99");
    let ten = runtime.block_on(sample(run_code(TEN_CALLS)));
    let plain = runtime.block_on(sample(batch));
    let empty = runtime.block_on(sample(run_code("return 1;")));
    let rows = [
        (
            "run_code, a program making 10 calc calls (Promise.all)",
            ten,
        ),
        ("10 calc calls as one batch of plain calls", plain),
        ("run_code, a program making no call (`return 1`)", empty),
    ];
    for (what, (p50, p99)) in rows {
        println!(
            "  {what:<60} {:>10} {:>10}",
            fmt_us(micros(p50)),
            fmt_us(micros(p99))
        );
    }
    println!(
        "\n  run_code with 10 calls / 10 batched plain calls: {:.1}× at p50 ({} more per program)",
        micros(ten.0) / micros(plain.0),
        fmt_us(micros(ten.0) - micros(plain.0)),
    );
    println!(
        "  of which the program's own start (run_code calling nothing): {}",
        fmt_us(micros(empty.0))
    );
}

/// p50 and p99 of `ITERATIONS` runs of `f`, one at a time, after a warm-up.
async fn sample<F, Fut>(mut f: F) -> (Duration, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for _ in 0..20 {
        f().await;
    }
    let mut samples = Vec::with_capacity(ITERATIONS);
    for _ in 0..ITERATIONS {
        let started = Instant::now();
        f().await;
        samples.push(started.elapsed());
    }
    percentiles(samples)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
