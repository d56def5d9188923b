//! `toolhost componentize CORE.wasm -o TOOL.wasm`: a core WebAssembly module
//! made into a tool component.
//!
//! For languages whose compilers emit core modules against WASI preview 1
//! (C with wasi-libc, and others). The module implements the contract's
//! exports with the canonical ABI (as wit-bindgen's C bindings do); this
//! embeds the `toolbox` world of the contract this binary carries, and
//! adapts its preview 1 imports to WASI 0.2 with the reactor adapter of the
//! same wasmtime release the host runs on, so the two always agree.

use wasi_preview1_component_adapter_provider::{
    WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

use super::files;

/// The world every tool component targets.
const WORLD: &str = "toolbox";

/// Why a module could not be made a component.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ComponentizeError {
    /// The input is a component already.
    #[error("the input is already a component: load it as it is")]
    AlreadyComponent,
    /// The input is not WebAssembly.
    #[error(
        "the input is not a WebAssembly module (it starts {0:02x?}): pass the .wasm the compiler wrote"
    )]
    NotWasm(Vec<u8>),
    /// The module does not fit the contract.
    #[error(
        "the module does not fit the toolbox world: {0:#}. It must export the contract's \
         functions with the canonical ABI, as wit-bindgen's bindings for wit/ do, and be \
         built as a reactor (clang -mexec-model=reactor)"
    )]
    Encode(anyhow::Error),
}

/// A tool component made of core module `module`, against the contract in
/// folder `wit` (a scaffold's own `wit/`, which its bindings were made
/// from), or the one this binary carries.
///
/// # Errors
///
/// [`ComponentizeError`] when `module` is not a core module or does not
/// implement the contract.
pub fn componentize(
    module: &[u8],
    wit: Option<&std::path::Path>,
) -> Result<Vec<u8>, ComponentizeError> {
    match module.get(..8) {
        Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {}
        Some([0, b'a', b's', b'm', _, _, 1, 0]) => return Err(ComponentizeError::AlreadyComponent),
        _ => {
            return Err(ComponentizeError::NotWasm(
                module.iter().take(8).copied().collect(),
            ));
        }
    }
    let (resolve, world) = contract(wit).map_err(ComponentizeError::Encode)?;
    let mut module = module.to_vec();
    wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .map_err(ComponentizeError::Encode)?;
    ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .and_then(|encoder| {
            encoder.adapter(
                WASI_SNAPSHOT_PREVIEW1_ADAPTER_NAME,
                WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
            )
        })
        .and_then(|mut encoder| encoder.encode())
        .map_err(ComponentizeError::Encode)
}

/// The contract in folder `wit`, or the one this binary carries, parsed,
/// and its `toolbox` world.
fn contract(wit: Option<&std::path::Path>) -> anyhow::Result<(Resolve, wit_parser::WorldId)> {
    let mut resolve = Resolve::default();
    let (package, _) = match wit {
        Some(dir) => resolve
            .push_dir(dir)
            .map_err(|e| e.context(format!("reading the contract in {}", dir.display())))?,
        None => {
            // wit-parser reads packages and their `deps/` from a folder.
            let dir = tempfile::tempdir()?;
            for (path, bytes) in files::WIT {
                let path = dir.path().join(path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(path, bytes)?;
            }
            resolve.push_dir(dir.path())?
        }
    };
    let world = resolve.select_world(&[package], Some(WORLD))?;
    Ok((resolve, world))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_not_a_core_module_is_refused_with_the_reason() {
        assert!(matches!(
            componentize(b"#!/bin/sh\n", None),
            Err(ComponentizeError::NotWasm(_))
        ));
        let component = [0, b'a', b's', b'm', 0x0d, 0, 1, 0];
        assert!(matches!(
            componentize(&component, None),
            Err(ComponentizeError::AlreadyComponent)
        ));
    }

    #[test]
    fn a_module_without_the_exports_is_refused_naming_the_contract() {
        // The smallest valid module: no exports at all.
        let empty = [0, b'a', b's', b'm', 1, 0, 0, 0];
        let error = componentize(&empty, None).unwrap_err().to_string();
        assert!(error.contains("toolbox world"), "{error}");
    }

    #[test]
    fn the_carried_contract_parses_and_a_missing_folder_is_named() {
        contract(None).unwrap();
        let error = contract(Some(std::path::Path::new("/nonexistent/wit"))).unwrap_err();
        assert!(
            format!("{error:#}").contains("/nonexistent/wit"),
            "{error:#}"
        );
    }
}
