//! Environment variables and config values: the grant, and its refusal
//! (a key that was not granted reads as absent, never as the host's own).
//!
//! The host's environment is never inherited: a tool sees exactly the
//! variables its manifest entry sets. Config values (`config(key)`) are read
//! on demand; secret ones are masked wherever tool text leaves the sandbox
//! (`secrets`).

use wasmtime_wasi::WasiCtxBuilder;

use crate::grants::Grants;

/// Set exactly the granted environment variables.
pub(crate) fn grant(wasi: &mut WasiCtxBuilder, grants: &Grants) {
    for (name, value) in grants.env_vars() {
        wasi.env(name, value);
    }
}

/// The value granted under config `key`, or `None`.
pub(crate) fn config(grants: &Grants, key: &str) -> Option<String> {
    grants.config_value(key).map(str::to_owned)
}
