//! `serve` with registry components: a moved pin in the lock file picked up
//! by `--watch`, and the metrics that count pulls, cache hits and refused
//! verifications, each read exactly.

use std::time::Duration;

use toolhost::registry::{OciRef, Publication, Registry, Settings};

use super::{Server, calc, eventually, metric, toolhost};
use crate::util::component;

const NETWORK: &str = r#"toolhost_registry_components_total{source="network"}"#;
const CACHE: &str = r#"toolhost_registry_components_total{source="cache"}"#;
const VERIFY_FAILURES: &str = "toolhost_registry_verify_failures_total";

/// `series` in `text`, 0 when it is not there yet.
fn count(text: &str, series: &str) -> f64 {
    metric(text, series).unwrap_or(0.0)
}

#[tokio::test]
async fn watch_picks_up_a_moved_pin_in_the_lock_file_and_metrics_count_registry_components() {
    let registry = crate::registry_server::RegistryServer::start();
    let registry_addr = registry.address();
    let publisher = tempfile::tempdir().unwrap();
    let reference: OciRef = format!("oci://{registry_addr}/tools/moving:v")
        .parse()
        .unwrap();
    let publish = |file: &str| {
        let client = Registry::new(Settings::default(), publisher.path()).unwrap();
        let bytes = std::fs::read(component(file)).unwrap();
        let reference = reference.clone();
        async move {
            client
                .push(&reference, &bytes, &Publication::default())
                .await
                .unwrap()
        }
    };
    publish("calc").await;
    // A cache of the server's own: what it counts is what it fetched.
    let cache = tempfile::tempdir().unwrap();
    let env = [("TOOLHOST_CACHE_DIR", cache.path().to_str().unwrap())];
    let manifest = format!("[[tool]]\ncomponent = \"oci://{registry_addr}/tools/moving:v\"\n");
    let server = Server::start_with_env(&manifest, &["--watch"], &env);
    assert_eq!(server.tool_names().await, ["calc"]);
    let text = server.metrics().await;
    assert_eq!(count(&text, NETWORK), 1.0, "{text}");
    assert_eq!(count(&text, CACHE), 0.0, "{text}");
    // The tag moves; the server keeps its pin until the lock moves.
    publish("files").await;
    let updated = toolhost(&server.manifest, &["lock", "--update"])
        .output()
        .unwrap();
    assert!(
        updated.status.success(),
        "{}",
        String::from_utf8_lossy(&updated.stderr)
    );
    let watched = &server;
    let reloaded = eventually(Duration::from_secs(15), || async move {
        !watched.tool_names().await.iter().any(|n| n == "calc")
    })
    .await;
    assert!(
        reloaded,
        "the new pin was not loaded\nstderr:\n{}",
        server.stderr()
    );
    let text = server.metrics().await;
    assert_eq!(count(&text, NETWORK), 2.0, "{text}");
    assert_eq!(count(&text, CACHE), 0.0, "{text}");
    drop(server);
    // Started again on the same cache: the pinned component comes from it.
    let server = Server::start_with_env(&manifest, &["--watch"], &env);
    let text = server.metrics().await;
    assert_eq!(count(&text, CACHE), 1.0, "{text}");
    assert_eq!(count(&text, NETWORK), 0.0, "{text}");
    assert_eq!(count(&text, VERIFY_FAILURES), 0.0, "{text}");
    // A policy the component does not satisfy: the reload is refused and
    // counted, and the running version keeps serving.
    let (key, _) = toolhost::registry::verify::SigningKey::generate_p256().unwrap();
    let dir = server.manifest.parent().unwrap();
    std::fs::write(dir.join("team.pub"), key.public_key().to_pem()).unwrap();
    std::fs::write(
        &server.manifest,
        format!("[verify]\nkey = \"team.pub\"\n\n{manifest}"),
    )
    .unwrap();
    let waited = server
        .wait_for_metric(VERIFY_FAILURES, 1.0, Duration::from_secs(15))
        .await;
    assert!(
        waited.is_some(),
        "{}\n{}",
        server.metrics().await,
        server.stderr()
    );
    assert!(!server.tool_names().await.is_empty());
}

/// The README's "Share tools through a registry": its five commands in
/// order, as written, in the directory of a manifest of the shape it
/// describes (`[verify] key = "keys/tools.pub"`, a `[[tool]]` naming
/// `oci://…/acme/calc:1`). Two things differ, and only because a test
/// needs them to: the registry is a local one (plain HTTP, allowed for
/// loopback) instead of ghcr.io, and `serve` listens on port 0 instead of
/// 8787.
#[tokio::test]
async fn the_readmes_five_tool_sharing_commands_publish_pin_verify_and_serve_a_tool() {
    let registry = crate::registry_server::RegistryServer::start();
    let reference = format!("oci://{}/acme/calc:1", registry.address());
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let env = [("TOOLHOST_CACHE_DIR", cache.path().to_str().unwrap())];
    let (key, pem) = toolhost::registry::verify::SigningKey::generate_p256().unwrap();
    std::fs::write(dir.path().join("signing.pem"), pem).unwrap();
    std::fs::create_dir(dir.path().join("keys")).unwrap();
    std::fs::write(dir.path().join("keys/tools.pub"), key.public_key().to_pem()).unwrap();
    std::fs::write(
        dir.path().join("toolhost.toml"),
        format!("[verify]\nkey = \"keys/tools.pub\"\n\n[[tool]]\ncomponent = \"{reference}\"\n"),
    )
    .unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(args)
            .current_dir(dir.path())
            .env("RUST_LOG", "warn")
            .envs(env)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "toolhost {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap()
    };
    let calc_wasm = component("calc");
    let pushed = run(&["push", calc_wasm.to_str().unwrap(), &reference]);
    let pinned = pushed.trim();
    let digest = pinned
        .strip_prefix(&format!("{reference}@"))
        .unwrap_or_else(|| panic!("push printed {pushed}"));
    run(&["sign", "--key", "signing.pem", pinned]);
    run(&["lock"]);
    let lock = std::fs::read_to_string(dir.path().join("toolhost.lock")).unwrap();
    assert!(lock.contains(digest), "{lock}");
    let checked = run(&["check", "--locked"]);
    assert!(
        checked.contains(digest) && checked.contains("signed by keys/tools.pub"),
        "{checked}"
    );
    let server = Server::start_in(dir, &["serve", "--locked", "--listen", "127.0.0.1:0"], &env);
    assert_eq!(server.tool_names().await, ["calc"]);
    let answers = server
        .answers("", &serde_json::json!([calc("a", "6*7")]))
        .await;
    assert_eq!(answers[0]["content"], "42", "{answers:?}");
}

const RELOADS_OK: &str = r#"toolhost_reloads_total{result="ok"}"#;
const RELOADS_FAILED: &str = r#"toolhost_reloads_total{result="failed"}"#;

/// `serve --watch` reloads that fail — the lock file edited into
/// nonsense, the manifest naming a layer that is not a component, or one
/// that compiles and then traps in `tools()` — each leave the cache
/// (compiled code and blobs) and `toolhost.lock` byte for byte as they
/// were, and the old tools serving. The test waits for each failure on
/// `toolhost_reloads_total{result="failed"}`, counted once the reload has
/// given up and cleaned up.
#[tokio::test]
async fn a_failed_reload_changes_no_cache_and_no_lock_and_keeps_serving() {
    let registry = crate::registry_server::RegistryServer::start();
    let address = registry.address();
    let publisher = tempfile::tempdir().unwrap();
    let push = |reference: String, file: &str| {
        let client = Registry::new(Settings::default(), publisher.path()).unwrap();
        let bytes = std::fs::read(component(file)).unwrap();
        async move {
            let reference: OciRef = reference.parse().unwrap();
            client
                .push(&reference, &bytes, &Publication::default())
                .await
                .unwrap()
        }
    };
    let calc_ref = format!("oci://{address}/tools/calc:1");
    let trap_ref = format!("oci://{address}/tools/trap:1");
    push(calc_ref.clone(), "calc").await;
    push(trap_ref.clone(), "probe-trap").await;
    crate::registry::push_raw(
        &address,
        "tools/script",
        "1",
        ("application/vnd.wasm.config.v0+json", b"{}"),
        &[("application/wasm", b"#!/bin/sh\nrm -rf /\n")],
    )
    .await;
    let script_ref = format!("oci://{address}/tools/script:1");
    let cache = tempfile::tempdir().unwrap();
    let env = [("TOOLHOST_CACHE_DIR", cache.path().to_str().unwrap())];
    let manifest = format!("[[tool]]\ncomponent = \"{calc_ref}\"\n");
    let server = Server::start_with_env(&manifest, &["--watch"], &env);
    assert_eq!(server.tool_names().await, ["calc"]);
    let lock = server.manifest.with_file_name("toolhost.lock");
    let pinned = std::fs::read(&lock).unwrap();
    let watched = &server;
    // Wait until `series` counts `want`; generous, as a build machine may
    // be slow: nothing is asserted about how long it took.
    let counted = async |series: &str, want: f64| {
        let reached = eventually(Duration::from_secs(60), || async move {
            count(&watched.metrics().await, series) >= want
        })
        .await;
        assert!(
            reached,
            "{series} did not reach {want}\n{}\nstderr:\n{}",
            watched.metrics().await,
            watched.stderr()
        );
    };
    // Still serving what it served, and the cache and lock as they were.
    let unchanged = async |before: &std::collections::BTreeMap<std::path::PathBuf, String>| {
        assert_eq!(watched.tool_names().await, ["calc"]);
        let answers = watched
            .answers("", &serde_json::json!([calc("a", "6*7")]))
            .await;
        assert_eq!(answers[0]["content"], "42", "{answers:?}");
        let after = crate::registry::cache_snapshot(&[cache.path(), &lock]);
        assert_eq!(
            &after, before,
            "a failed reload changed the cache or the lock"
        );
    };

    // The lock edited into nonsense: refused, and not rewritten.
    let nonsense = b"version = 1\n[[component]]\nreference = 42\n";
    let before = crate::registry::cache_snapshot(&[cache.path()]);
    std::fs::write(&lock, nonsense).unwrap();
    counted(RELOADS_FAILED, 1.0).await;
    let mut before = before;
    before.extend(crate::registry::cache_snapshot(&[&lock]));
    unchanged(&before).await;
    assert_eq!(std::fs::read(&lock).unwrap(), nonsense);
    // Put back, it reloads.
    std::fs::write(&lock, &pinned).unwrap();
    counted(RELOADS_OK, 1.0).await;

    // A new reference whose layer is not a component, then one that
    // compiles and traps in tools(): nothing of either is kept.
    for (reference, failures) in [(&script_ref, 2.0), (&trap_ref, 3.0)] {
        let before = crate::registry::cache_snapshot(&[cache.path(), &lock]);
        std::fs::write(
            &server.manifest,
            format!("{manifest}\n[[tool]]\ncomponent = \"{reference}\"\n"),
        )
        .unwrap();
        counted(RELOADS_FAILED, failures).await;
        unchanged(&before).await;
        assert_eq!(std::fs::read(&lock).unwrap(), pinned, "{reference}");
        // That failure was this change's, and the only one.
        let text = server.metrics().await;
        assert_eq!(count(&text, RELOADS_FAILED), failures, "{text}");
        let repository = reference.rsplit_once(&format!("{address}/")).unwrap().1;
        assert!(server.stderr().contains(repository), "{}", server.stderr());
    }
    assert!(
        server.stderr().contains("reload failed"),
        "{}",
        server.stderr()
    );
}
