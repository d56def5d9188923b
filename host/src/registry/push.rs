//! Publishing a component in the CNCF Wasm OCI layout, the one `wkg`
//! pushes and pulls: one `application/wasm` layer, a
//! `application/vnd.wasm.config.v0+json` config, and — toolhost's addition,
//! in annotations so registry browsers show them — the tools' specs and
//! the component's imports.

use std::collections::BTreeMap;

use super::digest::Digest;
use super::layout::{
    ComponentInfo, Descriptor, ImageManifest, OCI_MANIFEST, TITLE, WASM_CONFIG, WASM_LAYER,
    WasmConfig, check_component,
};
use super::reference::OciRef;
use super::{Reason, Registry, RegistryError};

/// The most annotation text a manifest carries: registries cap manifests
/// at 4 MiB, and browsers show annotations whole.
pub const MAX_ANNOTATIONS: usize = 256 << 10;

/// What `toolhost push` publishes besides the bytes.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Publication {
    /// The file name, for the layer's title.
    pub file_name: String,
    /// The manifest's annotations (tool specs, imports, description …).
    pub annotations: BTreeMap<String, String>,
    /// The component's imports, as WIT names (`wasi:http/outgoing-handler@0.2.6`).
    pub imports: Vec<String>,
    /// Its exports.
    pub exports: Vec<String>,
    /// When it was made (RFC 3339), for the config.
    pub created: String,
}

impl Registry {
    /// Publish `component` at `reference` (a tag), in the CNCF layout.
    /// Returns the manifest's digest.
    ///
    /// # Errors
    ///
    /// When the bytes are not a component, the annotations are too large,
    /// or the registry refuses.
    pub async fn push(
        &self,
        reference: &OciRef,
        component: &[u8],
        publication: &Publication,
    ) -> Result<Digest, RegistryError> {
        let fail = |reason| RegistryError::new(reference, reason);
        check_component(component).map_err(|e| fail(Reason::Layout(e.to_string())))?;
        let annotation_bytes: usize = publication
            .annotations
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if annotation_bytes > MAX_ANNOTATIONS {
            return Err(fail(Reason::TooLarge {
                what: "the annotations (tool specs and imports)".into(),
                size: annotation_bytes as u64,
                max: MAX_ANNOTATIONS as u64,
                fix: "shorten the tools' descriptions or schemas",
            }));
        }
        let mut layer = Descriptor::of(WASM_LAYER, component);
        if !publication.file_name.is_empty() {
            layer
                .annotations
                .insert(TITLE.into(), publication.file_name.clone());
        }
        let config = WasmConfig {
            created: publication.created.clone(),
            author: None,
            architecture: "wasm".into(),
            os: "wasip2".into(),
            layer_digests: vec![layer.digest.clone()],
            component: Some(ComponentInfo {
                exports: publication.exports.clone(),
                imports: publication.imports.clone(),
                target: None,
            }),
        };
        let config = serde_json::to_vec(&config).expect("a config serialises");
        let manifest = ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.into()),
            artifact_type: None,
            config: Descriptor::of(WASM_CONFIG, &config),
            layers: vec![layer],
            subject: None,
            annotations: publication.annotations.clone(),
        };
        let client = self.client();
        client.upload(reference, component).await.map_err(fail)?;
        client.upload(reference, &config).await.map_err(fail)?;
        let bytes = serde_json::to_vec(&manifest).expect("a manifest serialises");
        let digest = Digest::of(&bytes);
        let tag = reference
            .tag()
            .map_or_else(|| digest.to_string(), str::to_owned);
        client
            .put_manifest(reference, &tag, bytes.clone(), OCI_MANIFEST)
            .await
            .map_err(fail)?;
        // What was pushed is what a load of it would pull: keep it.
        let _ = self.store().put(&bytes);
        let _ = self.store().put(component);
        Ok(digest)
    }
}
