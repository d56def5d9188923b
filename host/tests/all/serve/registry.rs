//! `serve` with registry components: a moved pin in the lock file picked up
//! by `--watch`, and the metrics that count pulls, cache hits and refused
//! verifications, each read exactly.

use std::time::Duration;

use toolhost::registry::{OciRef, Publication, Registry, Settings};

use super::{Server, eventually, metric, toolhost};
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
