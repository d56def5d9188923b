//! The OCI 1.1 referrers API where a registry has one (distribution 2.8
//! has not: these registries are scripted servers holding what a real one
//! was given), and the referrers tag where a registry answers the API with
//! anything but an image index.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Response, StatusCode};

use super::*;

/// What a scripted registry serves: path → (content type, bytes).
type Served = HashMap<String, (String, Vec<u8>)>;

/// Copy manifest `name` (a digest or tag) of `repository` at `address`,
/// with the blobs it names, into `served`; its bytes.
async fn copy_manifest(
    address: &str,
    repository: &str,
    name: &str,
    served: &mut Served,
) -> Vec<u8> {
    let http = reqwest::Client::new();
    let base = format!("http://{address}/v2/{repository}");
    let accept =
        "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";
    let response = http
        .get(format!("{base}/manifests/{name}"))
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{name}: {}",
        response.status()
    );
    let media = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let bytes = response.bytes().await.unwrap().to_vec();
    let manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let blobs = manifest["layers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(manifest.get("config"));
    for blob in blobs {
        let digest = blob["digest"].as_str().unwrap();
        let body = http
            .get(format!("{base}/blobs/{digest}"))
            .send()
            .await
            .unwrap();
        let body = body.bytes().await.unwrap().to_vec();
        served.insert(
            format!("/v2/{repository}/blobs/{digest}"),
            ("application/octet-stream".into(), body),
        );
    }
    for path in [name.to_owned(), Digest::of(&bytes).to_string()] {
        served.insert(
            format!("/v2/{repository}/manifests/{path}"),
            (media.clone(), bytes.clone()),
        );
    }
    bytes
}

/// A component signed with a key bundle in a real registry, copied: the
/// served paths, the component's digest, and the referrers index (read
/// from the referrers tag).
fn signed_bundle(scene: &Scene, key: &Path) -> (Served, Digest, serde_json::Value) {
    let registry = RegistryServer::start();
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    let calc = component("calc");
    // The publisher has a cache of its own: what the scene's loads find is
    // what they fetched from the scripted registry.
    let publisher = tempfile::tempdir().unwrap();
    let publisher = [("TOOLHOST_CACHE_DIR", publisher.path().to_str().unwrap())];
    let pinned = stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &publisher));
    let pinned = pinned.trim();
    let signed = scene.toolhost(
        &["sign", "--bundle", "--key", key.to_str().unwrap(), pinned],
        &publisher,
    );
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    let digest: Digest = pinned.rsplit_once('@').unwrap().1.parse().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut served = Served::new();
        let address = registry.address();
        copy_manifest(&address, "tools/calc", &digest.to_string(), &mut served).await;
        let tag = format!("sha256-{}", digest.hex());
        let index = copy_manifest(&address, "tools/calc", &tag, &mut served).await;
        let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
        for entry in index["manifests"].as_array().unwrap() {
            copy_manifest(
                &address,
                "tools/calc",
                entry["digest"].as_str().unwrap(),
                &mut served,
            )
            .await;
        }
        (served, digest, index)
    })
}

/// A scripted registry serving `served`, and answering the referrers API
/// with `referrers`.
async fn scripted(
    served: Served,
    referrers: impl Fn() -> Response<Body> + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let served = Arc::new(served);
    let referrers = Arc::new(referrers);
    hostile::serve("127.0.0.1", move |path| {
        if path.contains("/referrers/") {
            return referrers();
        }
        match served.get(path) {
            Some((media, bytes)) => Response::builder()
                .header("content-type", media.as_str())
                .body(Body::from(bytes.clone()))
                .unwrap(),
            None => hostile::status(StatusCode::NOT_FOUND),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_referrers_api_is_read_where_it_answers_an_index_and_skips_a_junk_referrer() {
    let scene = Scene::new();
    let (private, public) = key_pair(scene.dir.path(), "team");
    let (mut served, digest, mut index) = {
        let scene = &scene;
        let private = private.clone();
        tokio::task::block_in_place(|| signed_bundle(scene, &private))
    };
    // Only the API knows the bundle: the referrers tag is gone.
    served.retain(|path, _| !path.ends_with(&format!("sha256-{}", digest.hex())));
    // A referrer anyone could have pushed, that names nothing served, first.
    let junk = json!({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "digest": Digest::of(b"junk").to_string(), "size": 4,
                      "artifactType": "application/vnd.dev.sigstore.bundle.v0.3+json"});
    index["manifests"].as_array_mut().unwrap().insert(0, junk);
    let index = serde_json::to_vec(&index).unwrap();
    let address = scripted(served, move || {
        Response::builder()
            .header("content-type", "application/vnd.oci.image.index.v1+json")
            .body(Body::from(index.clone()))
            .unwrap()
    })
    .await;
    let reference = format!("oci://{address}/tools/calc@{digest}");
    let manifest = scene.one_tool(&reference, "[verify]\nkey = \"team.pub\"\n");
    let host = scene.load(&manifest, LockMode::Write).await.unwrap();
    assert_eq!(
        ok(&call(&host, "calc", json!({"expression": "6*7"})).await),
        "42"
    );
    assert!(public.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_without_the_referrers_api_falls_back_to_the_referrers_tag() {
    for (status, body) in [
        (StatusCode::METHOD_NOT_ALLOWED, ""),
        (StatusCode::BAD_REQUEST, ""),
        (StatusCode::NOT_IMPLEMENTED, ""),
        (StatusCode::OK, "<html>a registry's front page</html>"),
    ] {
        let scene = Scene::new();
        let (private, _) = key_pair(scene.dir.path(), "team");
        let (served, digest, _) = {
            let scene = &scene;
            tokio::task::block_in_place(|| signed_bundle(scene, &private))
        };
        let address = scripted(served, move || {
            Response::builder()
                .status(status)
                .header("content-type", "text/html")
                .body(Body::from(body))
                .unwrap()
        })
        .await;
        let reference = format!("oci://{address}/tools/calc@{digest}");
        let manifest = scene.one_tool(&reference, "[verify]\nkey = \"team.pub\"\n");
        let host = scene
            .load(&manifest, LockMode::Write)
            .await
            .unwrap_or_else(|e| panic!("{status}: {e}"));
        assert!(host.specs().any(|s| s.name == "calc"), "{status}");
    }
}
