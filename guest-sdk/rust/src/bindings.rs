//! Generated bindings for the `toolbox` world in `wit/`, including the WASI
//! interfaces it uses. Tool authors rarely need these directly: the crate root
//! wraps them.
#![allow(missing_docs, missing_debug_implementations, unsafe_code)]

wit_bindgen::generate!({
    world: "toolbox",
    path: "../../wit",
    generate_all,
    pub_export_macro: true,
    export_macro_name: "__export_toolbox",
    default_bindings_module: "toolhost_guest::bindings",
});
