//! `--locked` and `toolhost lock --update` where the lock cannot hold: a
//! component on the command line (no lock file), a pinned manifest the
//! registry no longer has, a tag that moved under `--locked --update`.

use super::*;

#[test]
fn locked_call_component_by_digest_needs_no_lock_and_by_tag_says_why() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    let calc = component("calc");
    let pinned = stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &[]));
    let pinned = pinned.trim();
    let args = |component: &str| {
        scene.toolhost(
            &[
                "--locked",
                "call",
                "--component",
                component,
                "calc",
                r#"{"expression":"6*7"}"#,
            ],
            &[],
        )
    };
    let called = stdout(&args(pinned));
    assert!(called.contains("42"), "{called}");
    assert!(
        !scene.lock_path().exists(),
        "the command line writes no lock"
    );
    let refused = args(&reference);
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success());
    assert!(
        stderr.contains(&reference)
            && stderr.contains("no toolhost.lock")
            && stderr.contains("name it by digest"),
        "{stderr}"
    );
}

/// DELETE the manifest `digest` of `repository` from the registry at
/// `address` (distribution answers 202 when deleting is enabled).
async fn delete_manifest(address: &str, repository: &str, digest: &Digest) {
    let response = reqwest::Client::new()
        .delete(format!(
            "http://{address}/v2/{repository}/manifests/{digest}"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status().as_u16(),
        202,
        "{:?}",
        response.text().await
    );
}

#[tokio::test]
async fn a_pinned_manifest_the_registry_deleted_names_the_pin_and_the_update() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let publisher = tempfile::tempdir().unwrap();
    let reference = format!("oci://{}/tools/moving:stable", registry.address());
    let first = push(publisher.path(), &reference, &component("calc")).await;
    let manifest = scene.one_tool(&reference, "");
    scene.load(&manifest, LockMode::Write).await.unwrap();
    let lock = std::fs::read(scene.lock_path()).unwrap();
    // The tag moves, and the old manifest is deleted.
    let second = push(publisher.path(), &reference, &component("files")).await;
    delete_manifest(&registry.address(), "tools/moving", &first).await;
    // A load from a fresh cache: the pin is all it has.
    let fresh = Scene::new();
    std::fs::copy(scene.manifest_path(), fresh.manifest_path()).unwrap();
    std::fs::write(fresh.lock_path(), &lock).unwrap();
    let manifest = Manifest::load(&fresh.manifest_path()).unwrap();
    let error = fresh.load_error(&manifest, LockMode::Write).await;
    assert!(
        error.contains(&format!("toolhost.lock pins {first} for {reference}"))
            && error.contains("no longer has it")
            && error.contains(&format!("toolhost lock --update {reference}")),
        "{error}"
    );
    assert_eq!(std::fs::read(fresh.lock_path()).unwrap(), lock);
    // `--locked lock --update` re-resolves, says what moved, writes nothing.
    let output = fresh.toolhost(&["--locked", "lock", "--update"], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success());
    assert!(
        stderr.contains(&format!("{reference} moved {first} → {second}")),
        "{stderr}"
    );
    assert_eq!(std::fs::read(fresh.lock_path()).unwrap(), lock);
    // Without --locked, the update is written.
    let output = fresh.toolhost(&["lock", "--update", &reference], &[]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let written = std::fs::read_to_string(fresh.lock_path()).unwrap();
    assert!(written.contains(&second.to_string()), "{written}");
}
