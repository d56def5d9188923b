//! Components from an OCI registry, against a real one (Debian's
//! `docker-registry`, distribution 2.8) and, for what a real registry does
//! not do on purpose (hang, lie about sizes, redirect elsewhere), a hostile
//! HTTP server on 127.0.0.1.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::json;
use toolhost::registry::{Digest, Lock, OciRef, Publication, Registry, Settings};
use toolhost::{ComponentConfig, LoadError, LockMode, Manifest, SandboxOptions, ToolHost};

use crate::registry_server::{PASSWORD, RegistryServer};
use crate::util::{call, component, ok};

mod credentials;
mod independent;
mod locking;
mod referrers;
mod settings;

/// A manifest directory and a cache of its own, so that what a test
/// fetches is what it fetched, not what another test left.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    /// A scene whose cache directory exists, as a user's does.
    fn new() -> Self {
        let scene = Self {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir(scene.cache()).unwrap();
        scene
    }

    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn options(&self) -> SandboxOptions {
        SandboxOptions::default().with_cache_dir(Some(self.cache()))
    }

    fn manifest_path(&self) -> PathBuf {
        self.dir.path().join("toolhost.toml")
    }

    fn lock_path(&self) -> PathBuf {
        self.dir.path().join("toolhost.lock")
    }

    /// Write the manifest and read it back.
    fn manifest(&self, text: &str) -> Manifest {
        std::fs::write(self.manifest_path(), text).unwrap();
        Manifest::load(&self.manifest_path()).unwrap()
    }

    /// A manifest of one registry tool.
    fn one_tool(&self, reference: &str, extra: &str) -> Manifest {
        self.manifest(&format!("{extra}\n[[tool]]\ncomponent = \"{reference}\"\n"))
    }

    async fn load(&self, manifest: &Manifest, mode: LockMode) -> Result<ToolHost, LoadError> {
        ToolHost::load_manifest(manifest, self.options(), &mode)
            .await
            .map(|(host, _)| host)
    }

    /// Why loading fails (it must), the cache and the lock file left as
    /// they were.
    async fn load_error(&self, manifest: &Manifest, mode: LockMode) -> String {
        let (cache, lock) = (self.cache(), self.lock_path());
        assert_unchanged_async(&[&cache, &lock], async {
            match self.load(manifest, mode).await {
                Ok(_) => panic!("{} loaded", manifest.path.display()),
                Err(e) => e.to_string(),
            }
        })
        .await
    }

    /// The stderr of `toolhost ARGS`, which must fail and leave the cache
    /// and the lock file as they were.
    fn refused(&self, args: &[&str], env: &[(&str, &str)]) -> String {
        let (cache, lock) = (self.cache(), self.lock_path());
        let output = assert_unchanged(&[&cache, &lock], || self.toolhost(args, env));
        assert!(!output.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&output.stderr).into_owned()
    }

    /// The publisher's cache: a cache of its own, so that what the
    /// scene's loads find in theirs is what they fetched.
    fn publisher_cache(&self) -> PathBuf {
        self.dir.path().join("publisher")
    }

    /// `toolhost ARGS` as the publisher runs it, with its own cache.
    fn as_publisher(&self, args: &[&str]) -> Output {
        let cache = self.publisher_cache();
        self.toolhost(args, &[("TOOLHOST_CACHE_DIR", cache.to_str().unwrap())])
    }

    /// `toolhost push COMPONENT REFERENCE` as the publisher: the reference
    /// pinned to what was pushed (`oci://…@sha256:…`).
    fn publish(&self, component: &Path, reference: &str) -> String {
        stdout(&self.as_publisher(&["push", component.to_str().unwrap(), reference]))
            .trim()
            .to_owned()
    }

    /// Write a manifest of one tool, `reference`, under `[verify] key = KEY`.
    fn verified_by(&self, key: &str, reference: &str) {
        std::fs::write(
            self.manifest_path(),
            format!("[verify]\nkey = \"{key}\"\n\n[[tool]]\ncomponent = \"{reference}\"\n"),
        )
        .unwrap();
    }

    /// The `toolhost` binary, in the scene's directory with its cache.
    fn toolhost(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(args)
            .current_dir(self.dir.path())
            .env("TOOLHOST_CACHE_DIR", self.cache())
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .output()
            .expect("the toolhost binary runs")
    }
}

/// Every directory and file under `paths` (each a directory or a file, or
/// absent: a cache directory, a lock file), with a digest of each file's
/// contents. Every failure path compares one taken before with one taken
/// after, through [`assert_unchanged`], [`Scene::load_error`] or
/// [`Scene::refused`].
///
/// Left out: the empty `KEY.lock` files the compiled-code cache takes
/// turns on (hosts starting together compile once). Trying to compile
/// leaves one, and it holds nothing: no code, no blob, no pin.
pub(crate) fn cache_snapshot(paths: &[&Path]) -> std::collections::BTreeMap<PathBuf, String> {
    fn walk(path: &Path, into: &mut std::collections::BTreeMap<PathBuf, String>) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if meta.len() == 0 && path.extension().is_some_and(|e| e == "lock") {
            return;
        }
        if meta.is_dir() {
            into.insert(path.to_owned(), "directory".into());
            let mut entries: Vec<_> = std::fs::read_dir(path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            entries.sort();
            for entry in entries {
                walk(&entry, into);
            }
        } else {
            let digest = Digest::of(&std::fs::read(path).unwrap_or_default());
            into.insert(path.to_owned(), digest.to_string());
        }
    }
    let mut into = std::collections::BTreeMap::new();
    for path in paths {
        walk(path, &mut into);
    }
    into
}

/// Run `work`, asserting that it left everything under `paths` byte for
/// byte as it was: bad input changes nothing.
fn assert_unchanged<T>(paths: &[&Path], work: impl FnOnce() -> T) -> T {
    let before = cache_snapshot(paths);
    let result = work();
    assert_eq!(cache_snapshot(paths), before, "changed under {paths:?}");
    result
}

/// [`assert_unchanged`] for async work.
async fn assert_unchanged_async<T>(
    paths: &[&Path],
    work: impl std::future::Future<Output = T>,
) -> T {
    let before = cache_snapshot(paths);
    let result = work.await;
    assert_eq!(cache_snapshot(paths), before, "changed under {paths:?}");
    result
}

/// Publish `file` at `reference` through the library; its manifest digest.
async fn push(cache: &Path, reference: &str, file: &Path) -> Digest {
    let registry = Registry::new(Settings::default(), cache).unwrap();
    let reference: OciRef = reference.parse().unwrap();
    registry
        .push(
            &reference,
            &std::fs::read(file).unwrap(),
            &Publication::default(),
        )
        .await
        .unwrap()
}

/// Publish a manifest of any layout by hand, as other tools would: each
/// blob uploaded, then the manifest under `tag`. Its digest.
pub(crate) async fn push_raw(
    address: &str,
    repository: &str,
    tag: &str,
    config: (&str, &[u8]),
    layers: &[(&str, &[u8])],
) -> Digest {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let base = format!("http://{address}/v2/{repository}");
    let descriptor = |media: &str, bytes: &[u8]| json!({"mediaType": media, "digest": Digest::of(bytes).to_string(), "size": bytes.len()});
    let mut blobs = vec![config.1.to_vec()];
    blobs.extend(layers.iter().map(|(_, b)| b.to_vec()));
    for blob in &blobs {
        let started = http
            .post(format!("{base}/blobs/uploads/"))
            .send()
            .await
            .unwrap();
        assert!(started.status().is_success(), "{}", started.status());
        let location = started.headers()["location"].to_str().unwrap().to_owned();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("http://{address}{location}")
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let put = http
            .put(format!("{url}{separator}digest={}", Digest::of(blob)))
            .body(blob.clone())
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "{}", put.status());
    }
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor(config.0, config.1),
        "layers": layers.iter().map(|(media, bytes)| descriptor(media, bytes)).collect::<Vec<_>>(),
    });
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let put = http
        .put(format!("{base}/manifests/{tag}"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(bytes.clone())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.text().await.unwrap());
    Digest::of(&bytes)
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn a_pushed_component_is_pinned_called_and_then_called_with_the_registry_gone() {
    let mut registry = RegistryServer::start();
    let scene = Scene::new();
    let calc = component("calc");
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    let pushed = stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &[]));
    let digest = pushed.trim().rsplit_once('@').unwrap().1.to_owned();
    std::fs::write(
        scene.manifest_path(),
        format!("[[tool]]\ncomponent = \"{reference}\"\n"),
    )
    .unwrap();
    let call = ["call", "calc", r#"{"expression":"6*7"}"#];
    let answer: serde_json::Value =
        serde_json::from_str(&stdout(&scene.toolhost(&call, &[]))).unwrap();
    assert_eq!(answer["content"], "42");
    let lock = std::fs::read_to_string(scene.lock_path()).unwrap();
    assert!(lock.contains(&digest), "{lock}");
    assert!(lock.contains(&reference), "{lock}");
    // What runs is the file pushed, byte for byte.
    let layer = Digest::of(&std::fs::read(&calc).unwrap());
    let kept = scene.cache().join("blobs/sha256").join(layer.hex());
    assert_eq!(std::fs::read(kept).unwrap(), std::fs::read(&calc).unwrap());
    // The registry gone, the pinned component still loads and runs.
    registry.stop();
    let answer: serde_json::Value =
        serde_json::from_str(&stdout(&scene.toolhost(&call, &[]))).unwrap();
    assert_eq!(answer["content"], "42");
    assert_eq!(std::fs::read_to_string(scene.lock_path()).unwrap(), lock);
    // `check` says where it came from.
    let checked = stdout(&scene.toolhost(&["check"], &[]));
    assert!(
        checked.contains(&digest) && checked.contains(&layer.to_string()),
        "{checked}"
    );
}

#[test]
fn wkg_and_toolhost_read_each_others_pushes() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let calc = component("calc");
    let wkg = |args: &[&str]| {
        let output = Command::new("wkg")
            .args(args)
            .current_dir(scene.dir.path())
            .output()
            .expect(
                "wkg runs: install it with `cargo install wkg --locked` (scripts/setup.sh does)",
            );
        assert!(
            output.status.success(),
            "wkg {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let address = registry.address();
    // wkg publishes, toolhost loads and calls.
    wkg(&[
        "oci",
        "push",
        "--insecure",
        &address,
        &format!("{address}/wkg/calc:1"),
        calc.to_str().unwrap(),
    ]);
    let reference = format!("oci://{address}/wkg/calc:1");
    let call = [
        "call",
        "--component",
        &reference,
        "calc",
        r#"{"expression":"2+3"}"#,
    ];
    let answer: serde_json::Value =
        serde_json::from_str(&stdout(&scene.toolhost(&call, &[]))).unwrap();
    assert_eq!(answer["content"], "5");
    // A component named on the command line has no lock file to write: a
    // project's own toolhost.lock in the working directory is left alone.
    assert!(
        !scene.lock_path().exists(),
        "call --component wrote a lock file"
    );
    // toolhost publishes, wkg fetches the same bytes.
    let reference = format!("oci://{address}/toolhost/calc:1");
    stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &[]));
    wkg(&[
        "oci",
        "pull",
        "--insecure",
        &address,
        &format!("{address}/toolhost/calc:1"),
        "-o",
        "pulled.wasm",
    ]);
    assert_eq!(
        std::fs::read(scene.dir.path().join("pulled.wasm")).unwrap(),
        std::fs::read(&calc).unwrap()
    );
    // And `inspect` shows what toolhost's push described, without running it.
    let inspected: serde_json::Value = serde_json::from_str(&stdout(
        &scene.toolhost(&["inspect", "--json", &reference], &[]),
    ))
    .unwrap();
    assert_eq!(inspected["tools"][0]["name"], "calc");
    assert!(
        inspected["imports"].as_array().unwrap().len() > 3,
        "{inspected}"
    );
}

#[tokio::test]
async fn spins_layout_loads() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let calc = std::fs::read(component("calc")).unwrap();
    let digest = push_raw(
        &registry.address(),
        "spin/calc",
        "1",
        ("application/vnd.oci.image.config.v1+json", b"{}"),
        &[
            (
                "application/vnd.fermyon.spin.application.v1+config",
                b"{\"spin_manifest_version\":2}",
            ),
            ("application/vnd.wasm.content.layer.v1+wasm", &calc),
        ],
    )
    .await;
    let reference: OciRef = format!("oci://{}/spin/calc@{digest}", registry.address())
        .parse()
        .unwrap();
    let host =
        ToolHost::load_components(vec![ComponentConfig::registry(reference)], scene.options())
            .await
            .unwrap();
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "6*7"})).await),
        "42"
    );
}

#[tokio::test]
async fn a_blob_altered_in_the_registry_is_refused_and_nothing_is_kept() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let calc = component("calc");
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    let publisher = tempfile::tempdir().unwrap();
    push(publisher.path(), &reference, &calc).await;
    // One byte flipped where the registry keeps the layer: same size, so
    // only the digest can tell.
    let layer = Digest::of(&std::fs::read(&calc).unwrap());
    let stored = registry.blob_file(layer.hex());
    let mut bytes = std::fs::read(&stored).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&stored, bytes).unwrap();
    let manifest = scene.one_tool(&reference, "");
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(error.contains(&reference), "{error}");
    assert!(error.contains(&format!("should be {layer}")), "{error}");
    assert!(error.contains("hashes to"), "{error}");
    assert!(
        !scene
            .cache()
            .join("blobs/sha256")
            .join(layer.hex())
            .exists()
    );
    assert!(!scene.lock_path().exists(), "a failed load writes no lock");
}

/// Each case is refused into a cache and a lock that already hold another
/// tool, and leaves both byte for byte as they were: a layer that is a
/// component by its header but does not compile included (it is checked
/// only by compiling it, so what pulled it stays staged until then).
#[tokio::test]
async fn layers_that_are_not_components_are_refused_by_what_they_are() {
    let registry = RegistryServer::start();
    let calc = std::fs::read(component("calc")).unwrap();
    let good = format!("oci://{}/good/calc:1", registry.address());
    let publisher = tempfile::tempdir().unwrap();
    push(publisher.path(), &good, &component("calc")).await;
    let garbage = [&b"\0asm\x0d\0\x01\0"[..], &[0xa5; 64]].concat();
    let cases: [(&str, &[u8], &str); 6] = [
        (
            "application/octet-stream",
            b"\0asm\x0d\0\x01\0",
            "no Wasm layer (found: application/octet-stream)",
        ),
        (
            "application/wasm",
            b"\0asm\x01\0\0\0",
            "core Wasm module, not a component",
        ),
        (
            "application/wasm",
            b"#!/bin/sh\nrm -rf /\n",
            "not WebAssembly",
        ),
        // A media type that would clear the screen is shown inert.
        (
            "text/plain\u{1b}[2J\u{1b}[H",
            b"x",
            "no Wasm layer (found: text/plain[2J[H)",
        ),
        // A component's preamble, then nothing a component is made of.
        ("application/wasm", &garbage, "is not a valid component"),
        // A real component cut in half.
        (
            "application/wasm",
            &calc[..calc.len() / 2],
            "is not a valid component",
        ),
    ];
    for (i, (media, bytes, expected)) in cases.into_iter().enumerate() {
        let scene = Scene::new();
        scene
            .load(&scene.one_tool(&good, ""), LockMode::Write)
            .await
            .unwrap();
        assert!(scene.lock_path().exists());
        let tag = format!("case{i}");
        let digest = push_raw(
            &registry.address(),
            "odd/layer",
            &tag,
            ("application/vnd.wasm.config.v0+json", b"{}"),
            &[(media, bytes)],
        )
        .await;
        let reference = format!("oci://{}/odd/layer:{tag}", registry.address());
        let manifest = scene.one_tool(&reference, "");
        let error = scene.load_error(&manifest, LockMode::Write).await;
        assert!(error.contains(expected), "{media}: {error}");
        assert!(
            error.contains(&digest.to_string()) || error.contains(digest.short()),
            "{error}"
        );
        if expected != "is not a valid component" {
            continue;
        }
        assert!(error.contains(&format!("odd/layer:{tag}")), "{error}");
        // `toolhost lock` compiles what it pins, and `call --component`
        // loads as a manifest does: neither keeps it.
        let (cache, lock) = (scene.cache(), scene.lock_path());
        let pinned = assert_unchanged_async(&[&cache, &lock], async {
            ToolHost::pin(&manifest, &scene.options(), &LockMode::Write).await
        })
        .await;
        let error = pinned.unwrap_err().to_string();
        assert!(error.contains(expected), "lock: {error}");
        let error = scene.refused(&["call", "--component", &reference, "calc", "{}"], &[]);
        assert!(error.contains(expected), "call --component: {error}");
        // Nothing staged is left behind either.
        let staged: Vec<_> = std::fs::read_dir(scene.cache())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".pulling-"))
            .collect();
        assert!(staged.is_empty(), "{staged:?}");
    }
}

/// A layer that compiles and links but is refused at load (its `tools()`
/// traps, or lists one name twice) leaves the compile cache, the blob store
/// and the lock byte for byte as they were, compiled code included, though
/// compiling it made an entry; and so does a good new layer loaded beside
/// it, refused with it. What the cache held before (calc's layer and code)
/// stays.
#[tokio::test]
async fn a_layer_that_compiles_but_does_not_load_leaves_no_compiled_code() {
    let registry = RegistryServer::start();
    let address = registry.address();
    let publisher = tempfile::tempdir().unwrap();
    let good = format!("oci://{address}/good/calc:1");
    let fresh = format!("oci://{address}/good/qr:1");
    push(publisher.path(), &good, &component("calc")).await;
    push(publisher.path(), &fresh, &component("qr")).await;
    let cases = [("probe-trap", "trap"), ("probe-dup", "echo")];
    for (probe, expected) in cases {
        let scene = Scene::new();
        scene
            .load(&scene.one_tool(&good, ""), LockMode::Write)
            .await
            .unwrap();
        let compiled = |scene: &Scene| {
            std::fs::read_dir(scene.cache())
                .unwrap()
                .filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "cwasm")
                })
                .count()
        };
        assert_eq!(compiled(&scene), 1, "calc's code is cached");
        let reference = format!("oci://{address}/refused/{probe}:1");
        push(publisher.path(), &reference, &component(probe)).await;
        let manifest = scene.manifest(&format!(
            "[[tool]]\ncomponent = \"{good}\"\n\n[[tool]]\ncomponent = \"{fresh}\"\n\n\
             [[tool]]\ncomponent = \"{reference}\"\n"
        ));
        let error = scene.load_error(&manifest, LockMode::Write).await;
        assert!(
            error.contains(&format!("refused/{probe}:1")) && error.contains(expected),
            "{probe}: {error}"
        );
        // The same through `call --component`, which loads without a
        // manifest (and so without a lock).
        let error = scene.refused(&["call", "--component", &reference, "echo", "{}"], &[]);
        assert!(error.contains(expected), "{probe}: {error}");
        assert_eq!(compiled(&scene), 1, "{probe}: only calc's code is cached");
        // An entry that was there before a refused load stays: the good
        // components load from it, with nothing compiled again.
        let host = scene
            .load(&scene.one_tool(&good, ""), LockMode::Write)
            .await
            .unwrap();
        assert!(
            host.components()
                .all(|(_, _, status)| status == toolhost::CacheStatus::Hit),
            "{probe}: calc's code was kept"
        );
    }
}

/// A layer in the store that no longer hashes to its digest (swapped or
/// damaged on disk) is refused when compiled, never compiled: the bytes
/// compiled are the bytes hashed, read once.
#[tokio::test]
async fn a_stored_layer_changed_on_disk_is_refused_and_not_compiled() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    push(&scene.publisher_cache(), &reference, &component("calc")).await;
    let manifest = scene.one_tool(&reference, "");
    scene.load(&manifest, LockMode::Write).await.unwrap();
    // No compiled code to fall back on, and another valid component where
    // the layer is kept.
    for entry in std::fs::read_dir(scene.cache()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "cwasm" || e == "sum") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let layer = Digest::of(&std::fs::read(component("calc")).unwrap());
    let kept = scene.cache().join("blobs/sha256").join(layer.hex());
    std::fs::write(&kept, std::fs::read(component("files")).unwrap()).unwrap();
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(error.contains("changed on disk"), "{error}");
    assert!(error.contains(&layer.to_string()), "{error}");
}

/// `push`, `pull`, `inspect`, `sign` and `lock` that fail leave a cache
/// and a lock file that already hold something byte for byte as they were
/// (`inspect` keeps the manifest it showed, but only when it showed it).
#[tokio::test]
async fn registry_commands_that_fail_leave_the_cache_and_the_lock_as_they_were() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let (a_private, _) = key_pair(scene.dir.path(), "a");
    let (_, b_public) = key_pair(scene.dir.path(), "b");
    let calc = component("calc");
    let address = registry.address();
    let reference = format!("oci://{address}/tools/calc:1");
    // The scene's own cache fills: a push, a lock, a pull.
    let pinned = stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &[]));
    let pinned = pinned.trim();
    scene.one_tool(&reference, "");
    stdout(&scene.toolhost(&["lock"], &[]));
    stdout(&scene.toolhost(&["pull", &reference], &[]));
    assert!(scene.lock_path().exists());
    // A file that is no component, and one that is by its header only.
    let junk = scene.dir.path().join("junk.wasm");
    std::fs::write(&junk, b"#!/bin/sh\n").unwrap();
    let half = scene.dir.path().join("half.wasm");
    let bytes = std::fs::read(&calc).unwrap();
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let other = format!("oci://{address}/tools/other:1");
    for file in [&junk, &half] {
        let error = scene.refused(&["push", file.to_str().unwrap(), &other], &[]);
        assert!(error.contains("is not pushed"), "{error}");
    }
    // A tag the registry does not have.
    let missing = format!("oci://{address}/tools/calc:missing");
    for command in ["pull", "inspect"] {
        let error = scene.refused(&[command, &missing], &[]);
        assert!(error.contains("calc:missing"), "{command}: {error}");
    }
    scene.one_tool(&missing, "");
    let error = scene.refused(&["lock"], &[]);
    assert!(error.contains("calc:missing"), "lock: {error}");
    // A signature policy the component does not meet (it is unsigned).
    let error = scene.refused(
        &["pull", "--key", b_public.to_str().unwrap(), &reference],
        &[],
    );
    assert!(error.contains("no signature found"), "{error}");
    // A manifest that is no component: inspect shows nothing, keeps nothing.
    let odd = push_raw(
        &address,
        "odd/inspect",
        "1",
        ("application/vnd.wasm.config.v0+json", b"{}"),
        &[("application/octet-stream", b"x")],
    )
    .await;
    let error = scene.refused(&["inspect", &format!("oci://{address}/odd/inspect:1")], &[]);
    assert!(
        error.contains(&odd.to_string()) && error.contains("not a component"),
        "{error}"
    );
    // Signing at a registry that is not there, and a digest it does not have.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let digest = pinned.rsplit_once('@').unwrap().1;
    let key = a_private.to_str().unwrap();
    let unreachable = format!("oci://{nowhere}/tools/calc@{digest}");
    let error = scene.refused(&["sign", "--key", key, &unreachable], &[]);
    assert!(error.contains(&nowhere.to_string()), "{error}");
    let absent = format!("oci://{address}/tools/calc@sha256:{}", "0".repeat(64));
    scene.refused(&["sign", "--key", key, &absent], &[]);
}

#[tokio::test]
async fn a_layer_over_the_cap_is_refused_before_it_is_downloaded() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    push(&scene.cache(), &reference, &component("calc")).await;
    let fresh = Scene::new();
    let manifest = fresh.one_tool(&reference, "[registry]\nmax_component = \"64KiB\"");
    let error = fresh.load_error(&manifest, LockMode::Write).await;
    assert!(error.contains("over the cap of 65536"), "{error}");
    assert!(error.contains("max_component"), "{error}");
}

#[tokio::test]
async fn a_moved_tag_keeps_its_pinned_digest_until_the_lock_is_updated() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let reference = format!("oci://{}/tools/moving:stable", registry.address());
    let first = push(&scene.publisher_cache(), &reference, &component("calc")).await;
    let manifest = scene.one_tool(&reference, "");
    let host = scene.load(&manifest, LockMode::Write).await.unwrap();
    assert!(host.specs().any(|s| s.name == "calc"));
    let lock = std::fs::read_to_string(scene.lock_path()).unwrap();
    assert!(lock.contains(&first.to_string()));
    // The tag moves to another component.
    let second = push(&scene.publisher_cache(), &reference, &component("files")).await;
    assert_ne!(first, second);
    let manifest = Manifest::load(&scene.manifest_path()).unwrap();
    // The pinned build runs, from the cache: nothing of the moved tag is
    // fetched, and the cache and the lock stay byte for byte as they were.
    let (cache, lock_path) = (scene.cache(), scene.lock_path());
    let host = assert_unchanged_async(&[&cache, &lock_path], async {
        scene.load(&manifest, LockMode::Write).await.unwrap()
    })
    .await;
    assert!(
        host.specs().any(|s| s.name == "calc"),
        "the pinned build runs"
    );
    assert_eq!(std::fs::read_to_string(scene.lock_path()).unwrap(), lock);
    // `--locked` too.
    assert_unchanged_async(&[&cache, &lock_path], async {
        scene.load(&manifest, LockMode::Locked).await.unwrap()
    })
    .await;
    // Updating moves the pin, and says from where.
    let pinned = ToolHost::pin(&manifest, &scene.options(), &LockMode::Update(Vec::new()))
        .await
        .unwrap();
    assert!(pinned.changed);
    assert_eq!(pinned.report[0].moved_from.as_ref(), Some(&first));
    // Updating a reference the manifest does not name is a mistake, said.
    let typo: OciRef = format!("oci://{}/tools/movin:stable", registry.address())
        .parse()
        .unwrap();
    let error = assert_unchanged_async(&[&cache, &lock_path], async {
        ToolHost::pin(&manifest, &scene.options(), &LockMode::Update(vec![typo]))
            .await
            .unwrap_err()
            .to_string()
    })
    .await;
    assert!(
        error.contains("not a component of this manifest"),
        "{error}"
    );
    assert_eq!(pinned.report[0].pin.manifest, second);
}

#[tokio::test]
async fn locked_refuses_a_lock_that_would_change_before_any_network() {
    let scene = Scene::new();
    // Nothing listens here: with --locked, the error comes first.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let reference = format!("oci://{nowhere}/tools/calc:1");
    let manifest = scene.one_tool(&reference, "");
    let error = scene.load(&manifest, LockMode::Locked).await.unwrap_err();
    assert!(matches!(error, LoadError::Locked(_)), "{error}");
    assert!(
        error
            .to_string()
            .contains(&format!("{reference} would be pinned")),
        "{error}"
    );
    // An entry the manifest no longer names is a change too.
    let hex = "a".repeat(64);
    std::fs::write(
        scene.lock_path(),
        format!(
            "version = 1\n[[component]]\nreference = \"{reference}\"\nmanifest = \"sha256:{hex}\"\nlayer = \"sha256:{hex}\"\nsize = 1\nmedia_type = \"application/wasm\"\n\
             [[component]]\nreference = \"oci://{nowhere}/tools/old:1\"\nmanifest = \"sha256:{hex}\"\nlayer = \"sha256:{hex}\"\nsize = 1\nmedia_type = \"application/wasm\"\n"
        ),
    )
    .unwrap();
    let manifest = Manifest::load(&scene.manifest_path()).unwrap();
    let error = scene.load_error(&manifest, LockMode::Locked).await;
    assert!(error.contains("tools/old:1 would be removed"), "{error}");
    // With no registry component left at all, the stale lock is a change too.
    std::fs::write(
        scene.manifest_path(),
        format!(
            "[[tool]]\ncomponent = \"{}\"\n",
            component("calc").display()
        ),
    )
    .unwrap();
    let manifest = Manifest::load(&scene.manifest_path()).unwrap();
    let error = scene.load_error(&manifest, LockMode::Locked).await;
    assert!(error.contains("would be removed"), "{error}");
    scene.one_tool(&reference, "");
    // And the CLI's --locked says so and exits non-zero.
    let output = scene.toolhost(&["--locked", "tools"], &[]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("toolhost.lock would change"));
}

#[tokio::test]
async fn a_lock_edited_into_nonsense_is_refused_with_its_line_and_no_network() {
    let scene = Scene::new();
    std::fs::write(
        scene.lock_path(),
        "version = 1\n[[component]]\nreference = \"oci://127.0.0.1:9/t/c:1\"\nmanifest = \"sha256:xyz\"\n",
    )
    .unwrap();
    std::fs::write(
        scene.manifest_path(),
        "[[tool]]\ncomponent = \"oci://127.0.0.1:9/t/c:1\"\n",
    )
    .unwrap();
    let error = Manifest::load(&scene.manifest_path())
        .unwrap_err()
        .to_string();
    assert!(error.contains("toolhost.lock:4:"), "{error}");
    let error = scene.refused(&["tools"], &[]);
    assert!(error.contains("toolhost.lock:4:"), "{error}");
    assert!(error.contains("`manifest`"), "{error}");
    assert!(error.contains("toolhost lock"), "{error}");
}

#[tokio::test]
async fn a_lock_pinning_another_layer_than_the_manifest_names_is_refused() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    push(&scene.cache(), &reference, &component("calc")).await;
    let manifest = scene.one_tool(&reference, "");
    scene.load(&manifest, LockMode::Write).await.unwrap();
    // Point the pin at another blob the store also holds.
    let lock = Lock::parse(&std::fs::read_to_string(scene.lock_path()).unwrap()).unwrap();
    let pin = lock.pins().next().unwrap();
    let other = Digest::of(b"another layer");
    let edited = std::fs::read_to_string(scene.lock_path()).unwrap().replace(
        &format!("layer = \"{}\"", pin.layer),
        &format!("layer = \"{other}\""),
    );
    std::fs::write(scene.lock_path(), edited).unwrap();
    let manifest = Manifest::load(&scene.manifest_path()).unwrap();
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(
        error.contains(&format!("names the layer {}", pin.layer)),
        "{error}"
    );
    assert!(
        error.contains(&format!("toolhost.lock pins {other}")),
        "{error}"
    );
}

#[test]
fn credentials_come_from_the_manifest_or_docker_config_and_are_never_shown() {
    let registry = RegistryServer::start_with_password();
    let scene = Scene::new();
    let calc = component("calc");
    let calc = calc.to_str().unwrap();
    let reference = format!("oci://{}/private/calc:1", registry.address());
    // None: refused, with the fix.
    let output = scene.toolhost(&["push", calc, &reference], &[]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success());
    assert!(
        stderr.contains("asks for credentials") && stderr.contains("password_env"),
        "{stderr}"
    );
    // The manifest names the user and the variable.
    std::fs::write(
        scene.manifest_path(),
        format!(
            "[registry.host.\"{}\"]\nusername = \"toolhost\"\npassword_env = \"REGISTRY_PASSWORD\"\n",
            registry.address()
        ),
    )
    .unwrap();
    let output = scene.toolhost(
        &["push", calc, &reference],
        &[("REGISTRY_PASSWORD", PASSWORD)],
    );
    stdout(&output);
    // A wrong password is refused, and never printed.
    let output = scene.toolhost(
        &["push", calc, &reference],
        &[("REGISTRY_PASSWORD", "wrong-pw-123")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success());
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    assert!(!stderr.contains("wrong-pw-123"), "{stderr}");
    // Docker's config.json, without a manifest.
    std::fs::remove_file(scene.manifest_path()).unwrap();
    let docker = scene.dir.path().join("docker");
    std::fs::create_dir(&docker).unwrap();
    let auth = base64_of(&format!("toolhost:{PASSWORD}"));
    std::fs::write(
        docker.join("config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            registry.address()
        ),
    )
    .unwrap();
    let output = scene.toolhost(
        &["pull", &reference],
        &[("DOCKER_CONFIG", docker.to_str().unwrap())],
    );
    let pulled = stdout(&output);
    assert!(
        !pulled.contains(PASSWORD) && !String::from_utf8_lossy(&output.stderr).contains(PASSWORD)
    );
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A registry that misbehaves on purpose, one way per test.
mod hostile {
    use std::net::SocketAddr;

    use axum::body::Body;
    use axum::http::{Response, StatusCode};

    /// Serve `answer` for every request on a free port of `ip`.
    pub async fn serve(
        ip: &str,
        answer: impl Fn(&str) -> Response<Body> + Clone + Send + Sync + 'static,
    ) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let address = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
            let answer = answer.clone();
            async move { answer(request.uri().path()) }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        address
    }

    pub fn status(code: StatusCode) -> Response<Body> {
        Response::builder()
            .status(code)
            .body(Body::empty())
            .unwrap()
    }
}

#[tokio::test]
async fn a_manifest_over_the_cap_is_refused_whether_or_not_its_length_is_declared() {
    use axum::body::Body;
    use axum::http::Response;
    let huge = vec![b' '; 5 << 20];
    let declared = huge.clone();
    let address = hostile::serve("127.0.0.1", move |_| {
        Response::builder()
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(Body::from(declared.clone()))
            .unwrap()
    })
    .await;
    let scene = Scene::new();
    let manifest = scene.one_tool(&format!("oci://{address}/big/manifest:1"), "");
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(
        error.contains("the manifest is 5242880 bytes, over the cap of 4194304"),
        "{error}"
    );
    // Streamed with no length: cut off once past the cap.
    let address = hostile::serve("127.0.0.1", move |_| {
        let chunks = huge
            .chunks(64 << 10)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>();
        Response::builder()
            .body(Body::from_stream(futures::stream::iter(chunks)))
            .unwrap()
    })
    .await;
    let manifest = scene.one_tool(&format!("oci://{address}/big/manifest:1"), "");
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(error.contains("over the cap of 4194304"), "{error}");
}

#[tokio::test]
async fn a_registry_that_hangs_is_given_up_on_at_the_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Accepts, reads nothing, answers nothing.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let scene = Scene::new();
    let manifest = scene.one_tool(
        &format!("oci://{address}/slow/tool:1"),
        "[registry]\ntimeout = \"1s\"",
    );
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(
        error.contains("did not finish answering within 1s"),
        "{error}"
    );
    assert!(error.contains(&address.to_string()), "{error}");
}

#[tokio::test]
async fn redirects_are_followed_within_the_registry_and_refused_to_another_host() {
    use axum::body::Body;
    use axum::http::{Response, StatusCode};
    let calc = std::fs::read(component("calc")).unwrap();
    let layer = Digest::of(&calc);
    let config = b"{}".to_vec();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": Digest::of(&config).to_string(), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer.to_string(), "size": calc.len()}],
    }))
    .unwrap();
    let digest = Digest::of(&manifest);
    // Where blobs really are: /static/… on `blobs_at`.
    let serve_static = {
        let calc = calc.clone();
        move |path: &str| {
            if path.starts_with("/static/") {
                Response::builder().body(Body::from(calc.clone())).unwrap()
            } else {
                hostile::status(StatusCode::NOT_FOUND)
            }
        }
    };
    let registry_on = |blobs_at: Option<std::net::SocketAddr>| {
        let manifest = manifest.clone();
        let serve_static = serve_static.clone();
        move |path: &str| {
            if path.contains("/manifests/") {
                return Response::builder()
                    .header("content-type", "application/vnd.oci.image.manifest.v1+json")
                    .body(Body::from(manifest.clone()))
                    .unwrap();
            }
            if path.contains("/blobs/") {
                let location = match blobs_at {
                    Some(other) => format!("http://{other}/static/blob"),
                    None => "/static/blob".to_owned(),
                };
                return Response::builder()
                    .status(StatusCode::TEMPORARY_REDIRECT)
                    .header("location", location)
                    .body(Body::empty())
                    .unwrap();
            }
            serve_static(path)
        }
    };
    // Within the registry (a path on the same host and port): followed.
    let same = hostile::serve("127.0.0.1", registry_on(None)).await;
    let scene = Scene::new();
    let manifest_file = scene.one_tool(&format!("oci://{same}/tools/calc@{digest}"), "");
    let host = scene.load(&manifest_file, LockMode::Write).await.unwrap();
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "6*7"})).await),
        "42"
    );
    // To another host (127.0.0.2 is another host to the client): refused.
    let cdn = hostile::serve("127.0.0.2", serve_static.clone()).await;
    let other = hostile::serve("127.0.0.1", registry_on(Some(cdn))).await;
    let scene = Scene::new();
    let manifest_file = scene.one_tool(&format!("oci://{other}/tools/calc@{digest}"), "");
    let error = scene.load_error(&manifest_file, LockMode::Write).await;
    assert!(
        error.contains(&format!("redirected to another host, {cdn}")),
        "{error}"
    );
    assert!(error.contains("blob_redirects"), "{error}");
    assert!(
        !scene
            .cache()
            .join("blobs/sha256")
            .join(layer.hex())
            .exists()
    );
}

/// A key pair written into `dir` as NAME.pem (private, PKCS#8) and
/// NAME.pub (public, what cosign.pub holds).
fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (key, pem) = toolhost::registry::verify::SigningKey::generate_p256().unwrap();
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub"));
    std::fs::write(&private, pem).unwrap();
    std::fs::write(&public, key.public_key().to_pem()).unwrap();
    (private, public)
}

#[test]
fn a_signed_component_loads_under_its_key_and_is_refused_under_another() {
    let mut registry = RegistryServer::start();
    let scene = Scene::new();
    let (a_private, a_public) = key_pair(scene.dir.path(), "a");
    let (b_private, b_public) = key_pair(scene.dir.path(), "b");
    let calc = component("calc");
    let reference = format!("oci://{}/signed/calc:1", registry.address());
    let pinned = scene.publish(&calc, &reference);
    let digest = pinned.rsplit_once('@').unwrap().1.to_owned();
    // Unsigned: refused under a policy, naming the reference, the digest and the fix.
    scene.verified_by("b.pub", &reference);
    let stderr = scene.refused(&["tools"], &[]);
    assert!(
        stderr.contains("no signature found") && stderr.contains(&digest),
        "{stderr}"
    );
    assert!(stderr.contains("toolhost sign --key"), "{stderr}");
    // Signed by a, the policy wants b: refused, and nothing downloaded.
    let sign = |key: &Path| scene.as_publisher(&["sign", "--key", key.to_str().unwrap(), &pinned]);
    let signed = sign(&a_private);
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    let stderr = scene.refused(&["tools"], &[]);
    assert!(
        stderr.contains(&digest)
            && stderr.contains("1 signature(s)")
            && stderr.contains("none by b.pub"),
        "{stderr}"
    );
    let layer = Digest::of(&std::fs::read(&calc).unwrap());
    assert!(
        !scene
            .cache()
            .join("blobs/sha256")
            .join(layer.hex())
            .exists(),
        "a refused component is not downloaded"
    );
    assert!(!scene.lock_path().exists());
    // A co-signer adds b's signature; a's stays, and signing again adds nothing.
    assert!(sign(&b_private).status.success());
    let again = sign(&b_private);
    assert!(String::from_utf8_lossy(&again.stderr).contains("already signed"));
    let output = scene.toolhost(&["call", "calc", r#"{"expression":"1+2"}"#], &[]);
    let answer: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(answer["content"], "3");
    // Under a's key too, per tool; `check` names the signer.
    std::fs::write(
        scene.manifest_path(),
        format!("[verify]\nkey = \"b.pub\"\n\n[[tool]]\ncomponent = \"{reference}\"\nverify = {{ key = \"a.pub\" }}\n"),
    )
    .unwrap();
    let checked = stdout(&scene.toolhost(&["check"], &[]));
    assert!(checked.contains("signed by a.pub"), "{checked}");
    // With the registry gone, the signatures verify again from the cache.
    registry.stop();
    let checked = stdout(&scene.toolhost(&["check"], &[]));
    assert!(checked.contains("signed by a.pub"), "{checked}");
    drop(registry);
    // `pull --key` checks the same way, without a manifest.
    let registry = RegistryServer::start();
    let reference = format!("oci://{}/signed/calc:1", registry.address());
    let pinned = scene.publish(&calc, &reference);
    stdout(&scene.as_publisher(&["sign", "--key", a_private.to_str().unwrap(), &pinned]));
    std::fs::remove_file(scene.manifest_path()).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let fresh_cache = [("TOOLHOST_CACHE_DIR", fresh.path().to_str().unwrap())];
    let pulled = stdout(&scene.toolhost(
        &["pull", "--key", a_public.to_str().unwrap(), &reference],
        &fresh_cache,
    ));
    assert!(pulled.contains("a.pub"), "{pulled}");
    let refused = assert_unchanged(&[fresh.path()], || {
        scene.toolhost(
            &["pull", "--key", b_public.to_str().unwrap(), &reference],
            &fresh_cache,
        )
    });
    let call_refused = assert_unchanged(&[fresh.path()], || {
        scene.toolhost(
            &[
                "call",
                "--component",
                &reference,
                "--key",
                b_public.to_str().unwrap(),
                "calc",
                "{}",
            ],
            &fresh_cache,
        )
    });
    assert!(!call_refused.status.success());
    assert!(String::from_utf8_lossy(&call_refused.stderr).contains("none by"));
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("none by"));
    // And a tag is refused for signing: it can move.
    let by_tag = scene.as_publisher(&["sign", "--key", a_private.to_str().unwrap(), &reference]);
    assert!(String::from_utf8_lossy(&by_tag.stderr).contains("sign a digest"));
}

/// cosign 3's default for `sign --key`: a Sigstore bundle signed by the key,
/// attached as an OCI referrer (here through the referrers tag: distribution
/// 2.8 has no referrers API), written by `toolhost sign --bundle`.
#[test]
fn a_component_signed_by_a_key_bundle_loads_under_that_key_and_is_refused_under_another() {
    let mut registry = RegistryServer::start();
    let scene = Scene::new();
    let (a_private, _) = key_pair(scene.dir.path(), "a");
    let (b_private, _) = key_pair(scene.dir.path(), "b");
    let calc = component("calc");
    let reference = format!("oci://{}/bundled/calc:1", registry.address());
    let pinned = scene.publish(&calc, &reference);
    let digest = pinned.rsplit_once('@').unwrap().1.to_owned();
    let sign = |key: &Path| {
        let output =
            scene.as_publisher(&["sign", "--bundle", "--key", key.to_str().unwrap(), &pinned]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let signed = sign(&a_private);
    assert!(signed.contains("Sigstore bundle"), "{signed}");
    assert!(sign(&a_private).contains("already signed"));
    let policy = |key: &str| scene.verified_by(key, &reference);
    // Signed by a's bundle, the policy wants b: refused, naming the
    // bundle, the key and the fix, and nothing downloaded.
    policy("b.pub");
    let stderr = scene.refused(&["call", "calc", r#"{"expression":"1+2"}"#], &[]);
    assert!(
        stderr.contains(&digest)
            && stderr.contains("1 Sigstore bundle(s)")
            && stderr.contains("none accepted under b.pub")
            && stderr.contains("signed by another key"),
        "{stderr}"
    );
    let layer = Digest::of(&std::fs::read(&calc).unwrap());
    assert!(
        !scene
            .cache()
            .join("blobs/sha256")
            .join(layer.hex())
            .exists(),
        "a refused component is not downloaded"
    );
    // Under a's key, the bundle is the signature: no .sig tag exists.
    policy("a.pub");
    let output = scene.toolhost(&["call", "calc", r#"{"expression":"1+2"}"#], &[]);
    let answer: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(answer["content"], "3");
    // b co-signs with a bundle of its own; a's stays listed beside it.
    sign(&b_private);
    policy("b.pub");
    let checked = stdout(&scene.toolhost(&["check"], &[]));
    assert!(checked.contains("signed by b.pub"), "{checked}");
    policy("a.pub");
    let checked = stdout(&scene.toolhost(&["check"], &[]));
    assert!(checked.contains("signed by a.pub"), "{checked}");
    // With the registry gone, the remembered bundle verifies again from the cache.
    registry.stop();
    let checked = stdout(&scene.toolhost(&["check"], &[]));
    assert!(checked.contains("signed by a.pub"), "{checked}");
    let output = scene.toolhost(&["call", "calc", r#"{"expression":"2+2"}"#], &[]);
    let answer: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(answer["content"], "4");
}

#[test]
fn verify_policies_that_cannot_hold_are_manifest_errors() {
    let scene = Scene::new();
    let calc = component("calc");
    let cases = [
        (
            format!(
                "[[tool]]\ncomponent = \"{}\"\nverify = {{ key = \"k.pub\" }}\n",
                calc.display()
            ),
            "a file on this disk is trusted as it is",
        ),
        (
            "[verify]\nkey = \"missing.pub\"\n".to_owned(),
            "cannot read",
        ),
        (
            "[verify]\nidentity = \"me@example.org\"\n".to_owned(),
            "never any signer",
        ),
        (
            "[verify]\nkey = \"k.pub\"\nidentity = \"me@example.org\"\n".to_owned(),
            "not both",
        ),
        ("verify = \"maybe\"\n".to_owned(), "not a policy"),
    ];
    std::fs::write(scene.dir.path().join("k.pub"), "not a key").unwrap();
    for (text, expected) in cases {
        std::fs::write(scene.manifest_path(), &text).unwrap();
        let error = Manifest::load(&scene.manifest_path())
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
    // A trusted root that does not parse: a load error naming the file and
    // where in it, before any network.
    std::fs::write(scene.dir.path().join("root.json"), "{\"mediaType\": \"application/vnd.dev.sigstore.trustedroot+json;version=0.1\", \"tlogs\": [").unwrap();
    std::fs::write(
        scene.manifest_path(),
        "[verify]\nidentity = \"me@example.org\"\nissuer = \"https://accounts.example.org\"\ntrusted_root = \"root.json\"\n",
    )
    .unwrap();
    let error = Manifest::load(&scene.manifest_path())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("root.json") && error.contains("trusted root"),
        "{error}"
    );
    let error = scene.refused(&["tools"], &[]);
    assert!(error.contains("root.json"), "{error}");
    std::fs::write(scene.dir.path().join("root.json"), "{\"mediaType\": \"application/vnd.dev.sigstore.trustedroot+json;version=0.1\", \"certificateAuthorities\": []}").unwrap();
    let error = Manifest::load(&scene.manifest_path())
        .unwrap_err()
        .to_string();
    assert!(error.contains("tlogs"), "{error}");
    std::fs::write(scene.manifest_path(), "[verify]\nkey = \"k.pub\"\n").unwrap();
    let error = Manifest::load(&scene.manifest_path())
        .unwrap_err()
        .to_string();
    assert!(error.contains("k.pub"), "{error}");
}

#[tokio::test]
async fn a_registry_that_sends_its_body_a_byte_at_a_time_is_given_up_on_at_the_timeout() {
    use axum::body::Body;
    use axum::http::Response;
    let address = hostile::serve("127.0.0.1", |_| {
        let drip = futures::stream::unfold(0u32, |n| async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            Some((Ok::<_, std::io::Error>(vec![b' ']), n + 1))
        });
        Response::builder()
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(Body::from_stream(drip))
            .unwrap()
    })
    .await;
    let scene = Scene::new();
    let manifest = scene.one_tool(
        &format!("oci://{address}/drip/tool:1"),
        "[registry]\ntimeout = \"1s\"",
    );
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(error.contains("within 1s"), "{error}");
}

#[tokio::test]
async fn credentials_never_go_to_a_plain_http_token_service_on_another_host() {
    use axum::http::{Response, StatusCode};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let asked = std::sync::Arc::new(AtomicUsize::new(0));
    let token_service = {
        let asked = asked.clone();
        hostile::serve("127.0.0.2", move |_| {
            asked.fetch_add(1, Ordering::SeqCst);
            hostile::status(StatusCode::OK)
        })
        .await
    };
    let registry = hostile::serve("127.0.0.1", move |_| {
        Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .header(
                "www-authenticate",
                format!(r#"Bearer realm="http://{token_service}/token",service="x""#),
            )
            .body(axum::body::Body::empty())
            .unwrap()
    })
    .await;
    let scene = Scene::new();
    let manifest_text = format!(
        "[registry.host.\"{registry}\"]\nusername = \"bot\"\npassword_env = \"PATH\"\n\n[[tool]]\ncomponent = \"oci://{registry}/t/c:1\"\n"
    );
    let manifest = scene.manifest(&manifest_text);
    let error = scene.load_error(&manifest, LockMode::Write).await;
    assert!(error.contains("over HTTPS only"), "{error}");
    assert_eq!(
        asked.load(Ordering::SeqCst),
        0,
        "the token service was asked"
    );
}

#[test]
fn pull_and_call_component_apply_the_policy_of_the_tool_entry_naming_the_reference() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let (a_private, _) = key_pair(scene.dir.path(), "a");
    key_pair(scene.dir.path(), "b");
    let calc = component("calc");
    let reference = format!("oci://{}/entry/calc:1", registry.address());
    let pinned = scene.publish(&calc, &reference);
    stdout(&scene.as_publisher(&["sign", "--key", a_private.to_str().unwrap(), &pinned]));
    let entry = |key: &str| {
        format!("[[tool]]\ncomponent = \"{reference}\"\nverify = {{ key = \"{key}\" }}\n")
    };
    let pull = ["pull", reference.as_str()];
    let call = [
        "call",
        "--component",
        reference.as_str(),
        "calc",
        r#"{"expression":"6*7"}"#,
    ];
    // No [verify] at all: the entry's policy is the one, and a's signature
    // does not meet it.
    std::fs::write(scene.manifest_path(), entry("b.pub")).unwrap();
    for command in [&pull[..], &call[..]] {
        let error = scene.refused(command, &[]);
        assert!(error.contains("none by b.pub"), "{command:?}: {error}");
    }
    // The entry's policy wins over [verify], as a load of the manifest has it.
    std::fs::write(
        scene.manifest_path(),
        format!("[verify]\nkey = \"b.pub\"\n\n{}", entry("a.pub")),
    )
    .unwrap();
    let pulled = stdout(&scene.toolhost(&pull, &[]));
    assert!(pulled.contains("a.pub"), "{pulled}");
    let answer: serde_json::Value =
        serde_json::from_str(&stdout(&scene.toolhost(&call, &[]))).unwrap();
    assert_eq!(answer["content"], "42");
    // Two entries naming it with different policies: refused, naming both.
    std::fs::write(
        scene.manifest_path(),
        format!("{}\n{}", entry("a.pub"), entry("b.pub")),
    )
    .unwrap();
    for command in [&pull[..], &call[..]] {
        let error = scene.refused(command, &[]);
        assert!(
            error.contains("tool #1 and tool #2")
                && error.contains(&reference)
                && error.contains("different verify policies"),
            "{command:?}: {error}"
        );
    }
    // The same policy twice is one policy.
    std::fs::write(
        scene.manifest_path(),
        format!("{}\n{}", entry("a.pub"), entry("a.pub")),
    )
    .unwrap();
    stdout(&scene.toolhost(&pull, &[]));
}

/// Two signers attaching bundles at the same moment, through the referrers
/// tag (distribution 2.8 has no referrers API): each re-reads the index it
/// wrote and merges again when the other replaced it, so both stay listed.
/// Two signers on one machine (one cache) take turns writing the
/// referrers tag, so both signatures are kept. (Signers on two machines
/// are kept by reading the tag back and merging again, which narrows the
/// race the registry's lack of compare-and-swap leaves but cannot close
/// it; that is not asserted here.)
#[test]
fn two_signers_writing_the_referrers_tag_at_once_are_both_kept() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let (a_private, _) = key_pair(scene.dir.path(), "a");
    let (b_private, _) = key_pair(scene.dir.path(), "b");
    let calc = component("calc");
    let reference = format!("oci://{}/cosigned/calc:1", registry.address());
    let pinned = scene.publish(&calc, &reference);
    let cache = tempfile::tempdir().unwrap();
    let signer = |key: &Path| {
        Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(["sign", "--bundle", "--key", key.to_str().unwrap(), &pinned])
            .current_dir(scene.dir.path())
            .env("TOOLHOST_CACHE_DIR", cache.path())
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let a = signer(&a_private);
    let b = signer(&b_private);
    for child in [a, b] {
        let output = child.wait_with_output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    for key in ["a.pub", "b.pub"] {
        scene.verified_by(key, &reference);
        let fresh = tempfile::tempdir().unwrap();
        let checked = stdout(&scene.toolhost(
            &["check"],
            &[("TOOLHOST_CACHE_DIR", fresh.path().to_str().unwrap())],
        ));
        assert!(checked.contains(&format!("signed by {key}")), "{checked}");
    }
}
