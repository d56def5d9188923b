//! The WebAssembly MCP peer, side by side with toolhost and the Python
//! server: hyper-mcp (crates.io), serving toolhost's calc built as an
//! Extism plugin (host/benches/peers/extism-calc), driven over stdio by the
//! same client as the other rows. stdio is the one transport hyper-mcp
//! has; its README leaves SSE and Streamable HTTP to a proxy in front.
//!
//! Every server serves calc alone, so that the cold start and the memory
//! compare (toolhost's other rows serve example-tools/toolhost.toml).
//! scripts/bench.sh installs hyper-mcp into target/bench-peers and builds
//! the plugin there.
//!
//! Each server gets, beside p50 / p99 and calls/s: its cold start (process
//! start to the first `tools/list` answered, the median of
//! [`COLD_STARTS`] starts, with each host's compile cache warm, as on a
//! user's second start), and its resident memory idle and at its peak
//! while [`BURST`] calls sent at once are answered.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::process::Command;

use super::{Figures, StdioClient, common, measure, python};
use common::{fmt_us, root};

/// Where scripts/bench.sh installs the peers.
const PEERS: &str = "target/bench-peers";
/// Starts timed per server; the median is shown.
const COLD_STARTS: usize = 5;
/// Calls sent at once for the memory figure.
const BURST: usize = 1_000;
/// How long the burst may take. hyper-mcp 0.8.3 leaves about one call in a
/// hundred of such a burst unanswered for good; the row says how many.
const BURST_WAIT: Duration = Duration::from_secs(30);

/// What one server measured.
struct PeerFigures {
    calls: Figures,
    cold_start: Duration,
    rss_idle_kib: u64,
    rss_burst_kib: u64,
    /// Calls of the burst answered within [`BURST_WAIT`].
    burst_answered: usize,
}

/// A server under test, as a command that starts it afresh.
struct Peer {
    name: String,
    start: Box<dyn Fn() -> Command>,
    /// The name the server lists calc under.
    calc: &'static str,
}

/// Measure the three servers over stdio, print their table with each
/// figure's ratio to toolhost's, and add their rows to `rows`. Returns the
/// calls of toolhost's row and of hyper-mcp's, for the closing ratios.
pub async fn stdio_rows(rows: &mut Vec<Value>) -> (Figures, Figures) {
    let scratch = tempfile::tempdir().expect("a temp dir");
    let peers = [
        toolhost(scratch.path()),
        hyper_mcp(scratch.path()),
        python_mcp(),
    ];
    println!(
        "\nWebAssembly MCP peer over stdio, calc alone in each server \
         (cold start: process start to first tools/list answered; RSS: idle, \
         and at peak with {BURST} calls sent at once)"
    );
    println!(
        "  {:<38} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>11}",
        "", "p50", "p99", "1 client", "16 clients", "cold start", "RSS idle", "RSS 1,000"
    );
    let mut measured: Vec<PeerFigures> = Vec::new();
    for peer in &peers {
        let figures = measure_peer(peer).await;
        print_row(&peer.name, &figures);
        if figures.burst_answered < BURST {
            println!(
                "    {} of the {BURST} calls sent at once were not answered within {}s",
                BURST - figures.burst_answered,
                BURST_WAIT.as_secs()
            );
        }
        let mut row = json!({"section": "mcp-peer", "system": peer.name, "transport": "stdio",
            "p50_us": figures.calls.p50, "p99_us": figures.calls.p99,
            "calls_per_s_1": figures.calls.one, "calls_per_s_16": figures.calls.sixteen,
            "cold_start_ms": figures.cold_start.as_secs_f64() * 1e3,
            "rss_idle_mib": mib(figures.rss_idle_kib),
            "rss_burst_mib": mib(figures.rss_burst_kib), "burst_calls": BURST,
            "burst_answered": figures.burst_answered});
        if let Some(toolhost) = measured.first() {
            let ratios = ratios(&figures, toolhost);
            print_ratios(&ratios);
            row["ratio_to_toolhost"] = json!({"p50": ratios[0], "p99": ratios[1],
                "calls_per_s_1": ratios[2], "calls_per_s_16": ratios[3],
                "cold_start": ratios[4], "rss_idle": ratios[5], "rss_burst": ratios[6]});
        }
        rows.push(row);
        measured.push(figures);
    }
    let mut measured = measured.into_iter().map(|figures| figures.calls);
    let toolhost = measured.next().unwrap();
    (toolhost, measured.next().unwrap())
}

/// Calls, cold start and memory of one server.
async fn measure_peer(peer: &Peer) -> PeerFigures {
    let mut starts = Vec::with_capacity(COLD_STARTS);
    for _ in 0..COLD_STARTS {
        let started = Instant::now();
        let client = StdioClient::spawn_calling((peer.start)(), peer.calc).await;
        let listed = client.request("tools/list", json!({})).await;
        starts.push(started.elapsed());
        let names: Vec<_> = listed["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|tool| tool["name"].as_str())
            .collect();
        assert!(names.contains(&peer.calc), "{}: {listed}", peer.name);
        client.close().await;
    }
    starts.sort();
    let cold_start = starts[COLD_STARTS / 2];

    let client = Arc::new(StdioClient::spawn_calling((peer.start)(), peer.calc).await);
    let calls = {
        let client = client.clone();
        measure(move |_| {
            let client = client.clone();
            async move { client.call_calc().await }
        })
        .await
    };
    let pid = client.pid();
    let rss_idle_kib = status_kib(pid, "VmRSS");
    // Writing 5 resets the peak (VmHWM) to the current RSS, so that the
    // peak read below is the burst's, not that of the start.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("/proc/PID/clear_refs");
    let answered = AtomicUsize::new(0);
    let (calling, counting) = (&client, &answered);
    let burst = (0..BURST).map(|_| async move {
        calling.call_calc().await;
        counting.fetch_add(1, Ordering::Relaxed);
    });
    let _ = tokio::time::timeout(BURST_WAIT, futures::future::join_all(burst)).await;
    let burst_answered = answered.load(Ordering::Relaxed);
    let rss_burst_kib = status_kib(pid, "VmHWM");
    Arc::into_inner(client)
        .expect("no call holds the client")
        .close()
        .await;
    PeerFigures {
        calls,
        cold_start,
        rss_idle_kib,
        rss_burst_kib,
        burst_answered,
    }
}

/// toolhost serving calc alone.
fn toolhost(scratch: &Path) -> Peer {
    let manifest = scratch.join("calc.toml");
    let calc = common::tool("calc");
    std::fs::write(
        &manifest,
        format!("[[tool]]\ncomponent = '{}'\n", calc.display()),
    )
    .unwrap();
    Peer {
        name: "toolhost serve".to_owned(),
        start: Box::new(move || {
            let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
            command
                .arg("--config")
                .arg(&manifest)
                .args(["serve", "--stdio"])
                .env("RUST_LOG", "error");
            command
        }),
        calc: "calc",
    }
}

/// hyper-mcp serving the calc plugin from a local file. Its log goes to a
/// scratch directory (it writes one per day under the user's config dir
/// otherwise), at the error level as toolhost's (its default logs every
/// request).
fn hyper_mcp(scratch: &Path) -> Peer {
    let (binary, version) = installed_hyper_mcp();
    let plugin = root()
        .join(PEERS)
        .join("extism-calc/wasm32-wasip1/release/extism_calc.wasm");
    assert!(
        plugin.is_file(),
        "{} is missing: run scripts/bench.sh, which builds it",
        plugin.display()
    );
    let plugin = plugin.canonicalize().unwrap();
    let config = scratch.join("hyper-mcp.json");
    let text = json!({"plugins": {"calc": {"url": format!("file://{}", plugin.display())}}});
    std::fs::write(&config, text.to_string()).unwrap();
    let logs = scratch.join("hyper-mcp-logs");
    Peer {
        name: format!("hyper-mcp {version}, Extism plugin"),
        start: Box::new(move || {
            let mut command = Command::new(&binary);
            command
                .arg("--config-file")
                .arg(&config)
                .env("RUST_LOG", "error")
                .env("HYPER_MCP_LOG_PATH", &logs);
            command
        }),
        // hyper-mcp names each tool after its plugin: PLUGIN-TOOL.
        calc: "calc-calc",
    }
}

/// The Python MCP SDK's MCPServer, as in the rows above.
fn python_mcp() -> Peer {
    let python = python();
    Peer {
        name: "Python MCPServer (mcp SDK)".to_owned(),
        start: Box::new(move || {
            let mut command = Command::new(&python);
            command
                .arg(root().join("host/benches/peers/mcp_calc_server.py"))
                .arg("--stdio");
            command
        }),
        calc: "calc",
    }
}

/// hyper-mcp's binary and version, as `cargo install --root` recorded them.
fn installed_hyper_mcp() -> (PathBuf, String) {
    let peers = root().join(PEERS);
    let binary = peers.join("bin/hyper-mcp");
    let installed = std::fs::read_to_string(peers.join(".crates.toml")).unwrap_or_default();
    // A line such as `"hyper-mcp 0.8.3 (registry+…)" = ["hyper-mcp"]`.
    let version = installed
        .lines()
        .find_map(|line| line.strip_prefix("\"hyper-mcp "))
        .and_then(|rest| rest.split_whitespace().next());
    match version {
        Some(version) if binary.is_file() => (binary, version.to_owned()),
        _ => panic!(
            "hyper-mcp is not installed in {}: run scripts/bench.sh, which installs it",
            peers.display()
        ),
    }
}

/// A `Vm…` line of /proc/PID/status, in KiB.
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc/PID/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|value| value.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{key} in /proc/{pid}/status"))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn print_row(name: &str, f: &PeerFigures) {
    println!(
        "  {name:<38} {:>9} {:>9} {:>9.0} {:>10.0} {:>7.0} ms {:>5.1} MiB {:>7.1} MiB",
        fmt_us(f.calls.p50),
        fmt_us(f.calls.p99),
        f.calls.one,
        f.calls.sixteen,
        f.cold_start.as_secs_f64() * 1e3,
        mib(f.rss_idle_kib),
        mib(f.rss_burst_kib),
    );
}

/// Each figure of `peer` divided by toolhost's, in the table's order.
fn ratios(peer: &PeerFigures, toolhost: &PeerFigures) -> [f64; 7] {
    [
        peer.calls.p50 / toolhost.calls.p50,
        peer.calls.p99 / toolhost.calls.p99,
        peer.calls.one / toolhost.calls.one,
        peer.calls.sixteen / toolhost.calls.sixteen,
        peer.cold_start.as_secs_f64() / toolhost.cold_start.as_secs_f64(),
        peer.rss_idle_kib as f64 / toolhost.rss_idle_kib as f64,
        peer.rss_burst_kib as f64 / toolhost.rss_burst_kib as f64,
    ]
}

fn print_ratios(r: &[f64; 7]) {
    println!(
        "    {:<36} {:>8.2}x {:>8.2}x {:>8.2}x {:>9.2}x {:>9.2}x {:>8.2}x {:>10.2}x",
        "÷ toolhost", r[0], r[1], r[2], r[3], r[4], r[5], r[6]
    );
}
