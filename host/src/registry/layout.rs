//! What registries hold: OCI image manifests, their descriptors, and the
//! layouts publishers use for a Wasm component — which layer of a manifest
//! is the component, and whether its bytes are one.
//!
//! Three layouts are read: the CNCF Wasm OCI artifact (`wkg oci push`,
//! wassette, `toolhost push`), Spin's (`spin registry push`) and the older
//! wasm-to-oci one. A manifest is parsed strictly enough that a surprise
//! is an error naming what was found, never a guess.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::digest::Digest;

/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// A Docker image manifest (schema 2), which older pushers write.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// An OCI image index: several manifests (say, one per platform).
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// A Docker manifest list.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The config of a CNCF Wasm OCI artifact.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The component layer of a CNCF Wasm OCI artifact.
pub const WASM_LAYER: &str = "application/wasm";
/// The Wasm layers of Spin and of wasm-to-oci.
const OTHER_WASM_LAYERS: [&str; 2] = [
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
];

/// The manifest types asked for, one `Accept` header each: registries
/// that read one comma-joined list differently all read separate headers.
pub(crate) const ACCEPTED_MANIFESTS: [&str; 4] =
    [OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST];

/// The OCI annotation naming a layer's file.
pub const TITLE: &str = "org.opencontainers.image.title";
/// The annotation `toolhost push` writes the tools' specs into, as the
/// JSON array `toolhost tools --format mcp` prints.
pub const TOOLS_ANNOTATION: &str = "dev.toolhost.tools.v1";
/// The annotation `toolhost push` writes the component's imports into:
/// what it asks of a host.
pub const IMPORTS_ANNOTATION: &str = "dev.toolhost.imports.v1";

/// Why a manifest or layer is not a component toolhost loads; the message
/// says what it is instead, and what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LayoutError(String);

/// A blob a manifest points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Descriptor {
    /// What the blob is.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Descriptor {
    /// A blob of `media_type` holding `bytes`.
    #[must_use]
    pub fn of(media_type: &str, bytes: &[u8]) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest: Digest::of(bytes),
            size: bytes.len() as u64,
            annotations: BTreeMap::new(),
        }
    }
}

/// An OCI (or Docker schema 2) image manifest.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ImageManifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's own type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// What the artifact is, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// Its config blob.
    pub config: Descriptor,
    /// Its layers.
    pub layers: Vec<Descriptor>,
    /// The manifest this one refers to (a signature's subject).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Descriptor>,
    /// Its annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// The config blob of a CNCF Wasm OCI artifact, as `wkg` reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WasmConfig {
    pub created: String,
    pub author: Option<String>,
    pub architecture: String,
    pub os: String,
    pub layer_digests: Vec<Digest>,
    pub component: Option<ComponentInfo>,
}

/// The imports and exports of a component, in a [`WasmConfig`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ComponentInfo {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
    pub target: Option<String>,
}

impl ImageManifest {
    /// Parse a manifest as a registry served it under `content_type`.
    ///
    /// # Errors
    ///
    /// What it is instead (an index, another kind of artifact, not JSON),
    /// and what to do.
    pub fn parse(bytes: &[u8], content_type: Option<&str>) -> Result<Self, LayoutError> {
        Self::parse_text(bytes, content_type).map_err(LayoutError)
    }

    fn parse_text(bytes: &[u8], content_type: Option<&str>) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Kind {
            media_type: Option<String>,
            manifests: Option<serde_json::Value>,
        }
        let kind: Kind =
            serde_json::from_slice(bytes).map_err(|e| format!("the manifest is not JSON: {e}"))?;
        let media_type = kind
            .media_type
            .as_deref()
            .or(content_type)
            .unwrap_or(OCI_MANIFEST);
        if kind.manifests.is_some() || media_type == OCI_INDEX || media_type == DOCKER_LIST {
            return Err(
                "it is an index of several manifests, and toolhost takes one component: reference one manifest of it by digest (oci://…@sha256:…)"
                    .into(),
            );
        }
        if media_type != OCI_MANIFEST && media_type != DOCKER_MANIFEST {
            return Err(format!(
                "it is a {}, not an image manifest ({OCI_MANIFEST})",
                shown(media_type)
            ));
        }
        let manifest: Self = serde_json::from_slice(bytes)
            .map_err(|e| format!("the manifest is not an OCI image manifest: {e}"))?;
        if manifest.schema_version != 2 {
            return Err(format!(
                "the manifest has schemaVersion {}; OCI image manifests have 2",
                manifest.schema_version
            ));
        }
        Ok(manifest)
    }

    /// The layer that is the component: the one layer of a Wasm media type.
    ///
    /// # Errors
    ///
    /// When there is none (naming the media types found), or several.
    pub fn component_layer(&self) -> Result<&Descriptor, LayoutError> {
        self.component_layer_text().map_err(LayoutError)
    }

    fn component_layer_text(&self) -> Result<&Descriptor, String> {
        let wasm: Vec<&Descriptor> = self
            .layers
            .iter()
            .filter(|l| l.media_type == WASM_LAYER || OTHER_WASM_LAYERS.contains(&&*l.media_type))
            .collect();
        match wasm.as_slice() {
            [layer] => Ok(layer),
            [] => Err(format!(
                "it has no Wasm layer (found: {}); a component is published as one {WASM_LAYER} layer (`toolhost push`, `wkg oci push`)",
                if self.layers.is_empty() {
                    "no layers".to_owned()
                } else {
                    listed(self.layers.iter().map(|l| shown(&l.media_type)))
                }
            )),
            several => Err(format!(
                "it has {} Wasm layers ({}); toolhost takes one component per reference",
                several.len(),
                listed(several.iter().map(|l| l.digest.to_string()))
            )),
        }
    }
}

/// Registry text as a message may show it: one printable line, clipped.
fn shown(text: &str) -> String {
    crate::printable::one_line(text, 100)
}

/// The first few of `items`, and how many more.
fn listed(items: impl ExactSizeIterator<Item = String>) -> String {
    const SHOWN: usize = 8;
    let total = items.len();
    let mut text = items.take(SHOWN).collect::<Vec<_>>().join(", ");
    if total > SHOWN {
        text.push_str(&format!(" and {} more", total - SHOWN));
    }
    text
}

/// Check that `bytes` (the start of a layer will do) are a Wasm component,
/// before anything compiles them.
///
/// # Errors
///
/// What they are instead: a core module (and how to make it a component),
/// or not Wasm at all.
pub fn check_component(bytes: &[u8]) -> Result<(), LayoutError> {
    check_component_text(bytes).map_err(LayoutError)
}

fn check_component_text(bytes: &[u8]) -> Result<(), String> {
    match bytes.get(..8) {
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => Ok(()),
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Err(
            "the layer is a core Wasm module, not a component: make it one (`toolhost componentize`, or build for wasm32-wasip2) and push that"
                .into(),
        ),
        _ => Err("the layer is not WebAssembly (no \\0asm header)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(layers: &[&str]) -> Vec<u8> {
        let layers: Vec<Descriptor> = layers
            .iter()
            .map(|media| Descriptor::of(media, media.as_bytes()))
            .collect();
        serde_json::to_vec(&ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.into()),
            artifact_type: None,
            config: Descriptor::of(WASM_CONFIG, b"{}"),
            layers,
            subject: None,
            annotations: BTreeMap::new(),
        })
        .unwrap()
    }

    #[test]
    fn each_publishers_wasm_layer_is_found() {
        for media in [WASM_LAYER, OTHER_WASM_LAYERS[0], OTHER_WASM_LAYERS[1]] {
            let parsed = ImageManifest::parse(&manifest(&[media]), None).unwrap();
            assert_eq!(parsed.component_layer().unwrap().media_type, media);
        }
        // Spin's other layers are beside the Wasm one, and ignored.
        let spin = manifest(&[
            "application/vnd.fermyon.spin.application.v1+config",
            OTHER_WASM_LAYERS[0],
            "application/vnd.wasm.content.layer.v1+data",
        ]);
        let parsed = ImageManifest::parse(&spin, None).unwrap();
        assert_eq!(
            parsed.component_layer().unwrap().media_type,
            OTHER_WASM_LAYERS[0]
        );
    }

    #[test]
    fn a_manifest_without_one_wasm_layer_names_what_it_found() {
        let none = ImageManifest::parse(&manifest(&["application/octet-stream"]), None).unwrap();
        let error = none.component_layer().unwrap_err().to_string();
        assert!(error.contains("application/octet-stream"), "{error}");
        let two =
            ImageManifest::parse(&manifest(&[WASM_LAYER, OTHER_WASM_LAYERS[0]]), None).unwrap();
        assert!(
            two.component_layer()
                .unwrap_err()
                .to_string()
                .contains("2 Wasm layers")
        );
    }

    #[test]
    fn an_index_or_another_artifact_is_refused_by_name() {
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(
            ImageManifest::parse(index, None)
                .unwrap_err()
                .to_string()
                .contains("index")
        );
        let helm = br#"{"schemaVersion":2,"mediaType":"application/vnd.cncf.helm.chart"}"#;
        assert!(
            ImageManifest::parse(helm, None)
                .unwrap_err()
                .to_string()
                .contains("helm")
        );
        assert!(
            ImageManifest::parse(b"<html>", None)
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
    }

    #[test]
    fn component_bytes_are_told_from_modules_and_other_files() {
        assert!(check_component(b"\0asm\x0d\0\x01\0rest").is_ok());
        assert!(
            check_component(b"\0asm\x01\0\0\0")
                .unwrap_err()
                .to_string()
                .contains("core Wasm module")
        );
        assert!(
            check_component(b"PK\x03\x04zip!")
                .unwrap_err()
                .to_string()
                .contains("not WebAssembly")
        );
        assert!(check_component(b"").is_err());
    }
}
