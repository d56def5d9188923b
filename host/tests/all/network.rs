//! Outgoing HTTP beyond the origin check: where a granted name may lead
//! (never into the host or its network through a wildcard or another
//! name), how many connections a call may hold, and how much host memory a
//! tool can pin through the `wasi:http` types with no grant at all.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use toolhost::ErrorType;
use toolhost::Grants;

use crate::util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_grant_reaches_no_spelling_of_loopback() {
    let server = text_server("loopback").await;
    let port = server.addr.port();
    let grants = Grants::none().allow_host("http://*:*").unwrap();
    let host = probe_host(grants, quick_limits()).await;
    for spelling in [
        "127.0.0.1",
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "[::ffff:127.0.0.1]",
        "localhost",
    ] {
        let url = format!("{spelling}:{port}");
        let outcome = call(&host, "fetch_raw", json!({"name": url})).await;
        assert_eq!(
            err(&outcome),
            ErrorType::CapabilityDenied,
            "{url}: {outcome:?}"
        );
        assert!(
            message(&outcome).contains(spelling),
            "{url}: {}",
            message(&outcome)
        );
    }
    assert_eq!(
        server.hits(),
        0,
        "no spelling of loopback may reach the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_reaching_loopback_is_told_how_to_allow_it() {
    let server = text_server("loopback").await;
    let grants = Grants::none().allow_host("http://*:*").unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let url = format!("http://localhost:{}/", server.addr.port());
    let outcome = call(&host, "fetch", json!({"name": url})).await;
    let message = message(&outcome);
    assert!(
        message.contains("localhost resolves to 127.0.0.1, a loopback address")
            && message.contains(&format!("\"http://localhost:{}\"", server.addr.port())),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_localhost_grant_reaches_loopback() {
    let server = text_server("hello localhost").await;
    let grants = Grants::none()
        .allow_host(&format!("http://localhost:{}", server.addr.port()))
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let url = format!("http://localhost:{}/", server.addr.port());
    assert_eq!(
        ok(&call(&host, "fetch", json!({"name": url})).await),
        "200 hello localhost"
    );
    assert_eq!(server.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_naming_an_address_reaches_it() {
    let server = text_server("hello by address").await;
    let grants = Grants::none().allow_host(&server.origin()).unwrap();
    let host = probe_host(grants, quick_limits()).await;
    assert_eq!(
        ok(&call(&host, "fetch", json!({"name": server.url("/")})).await),
        "200 hello by address"
    );
    // The same address spelled otherwise is another host. (The SDK's client
    // reads `127.1` as browsers do, so the spelling goes unread.)
    let authority = format!("127.1:{}", server.addr.port());
    let outcome = call(&host, "fetch_raw", json!({"name": authority})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert_eq!(server.hits(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subdomain_wildcard_does_not_match_a_short_address() {
    let server = text_server("loopback").await;
    let grants = Grants::none().allow_host("http://*.1:*").unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let url = format!("http://127.1:{}/", server.addr.port());
    let outcome = call(&host, "fetch", json!({"name": url})).await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert!(
        message(&outcome).contains("wildcards never match an IP address"),
        "{}",
        message(&outcome)
    );
    assert_eq!(server.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_server_without_tls_fails_as_tls() {
    let server = text_server("plain").await;
    let grants = Grants::none()
        .allow_host(&format!("https://127.0.0.1:{}", server.addr.port()))
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let url = format!("https://127.0.0.1:{}/", server.addr.port());
    let outcome = call(&host, "fetch", json!({"name": url})).await;
    assert_eq!(err(&outcome), ErrorType::ToolError, "{outcome:?}");
    assert!(message(&outcome).contains("Tls"), "{}", message(&outcome));
    assert_eq!(server.hits(), 0, "a TLS hello is not an HTTP request");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_holds_at_most_eight_connections() {
    let (addr, accepted) = silent_server().await;
    let grants = Grants::none()
        .allow_host(&format!("http://{addr}"))
        .unwrap();
    let host = probe_host(grants, quick_limits()).await;
    let outcome = call(
        &host,
        "fan_out",
        json!({"authority": addr.to_string(), "n": 12}),
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied, "{outcome:?}");
    assert!(
        message(&outcome).contains("more than 8 HTTP connections at once"),
        "{}",
        message(&outcome)
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 8);
    // The connections closed with the call: the next call gets its own eight.
    let outcome = call(
        &host,
        "fan_out",
        json!({"authority": addr.to_string(), "n": 8}),
    )
    .await;
    assert_eq!(ok(&outcome), "8 waiting, 0 refused: []");
    assert_eq!(accepted.load(Ordering::SeqCst), 16);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_request_parts_are_refused_without_a_grant() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    for (part, bytes, expected) in [
        ("method", 32, "accepted"),
        ("method", 33, "refused"),
        ("method", 1 << 20, "refused"),
        ("path", 8 << 10, "accepted"),
        ("path", (8 << 10) + 1, "refused"),
        ("path", 1 << 20, "refused"),
        ("authority", 512, "accepted"),
        ("authority", 513, "refused"),
        ("header", 16 << 10, "accepted"),
        ("header", 1 << 20, "refused"),
    ] {
        let outcome = call(&host, "request_part", json!({"part": part, "bytes": bytes})).await;
        assert_eq!(ok(&outcome), expected, "{part} of {bytes} bytes");
    }
}

/// Runs [`hoard_in_a_process_of_its_own`] in a child process: the host's
/// RSS is the measure, and other tests in this process would blur it.
#[test]
fn hoarding_wasi_http_objects_is_bounded() {
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "network::hoard_in_a_process_of_its_own",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&child.stdout);
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(child.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}\n{stderr}");
    eprintln!(
        "{}",
        stdout
            .lines()
            .filter(|l| l.starts_with("hoard:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by hoarding_wasi_http_objects_is_bounded, in a process of its own"]
async fn hoard_in_a_process_of_its_own() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    // Warm up: the component's code and a first instance are mapped.
    ok(&call(&host, "echo", json!({"text": "x", "times": 1})).await);
    let before = rss();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(before));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                peak.fetch_max(rss(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let outcome = call(&host, "hoard", json!({"rounds": 80, "mib": 1})).await;
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let growth = peak.load(Ordering::SeqCst).saturating_sub(before);
    println!("hoard: host RSS grew by {} KiB: {outcome:?}", growth >> 10);
    assert_eq!(err(&outcome), ErrorType::MemoryExhausted, "{outcome:?}");
    assert!(growth < 64 << 20, "host RSS grew by {} MiB", growth >> 20);
}

/// This process's resident set, in bytes.
fn rss() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kib << 10
}
