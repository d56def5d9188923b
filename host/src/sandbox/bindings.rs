//! The one `bindgen!` over `wit/`. WASI types come from wasmtime-wasi and
//! wasmtime-wasi-http, so their host implementations plug in unchanged.
#![allow(missing_docs, missing_debug_implementations)]

wasmtime::component::bindgen!({
    path: "../wit",
    world: "toolbox",
    exports: { default: async },
    require_store_data_send: true,
    with: {
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
    },
});
