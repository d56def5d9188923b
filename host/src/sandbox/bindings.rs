//! The bindings over `wit/`: one `bindgen!` per contract version the host
//! speaks. 0.2 (`wit/tool.wit`, 0.2.1) is current; 0.1 (`wit/v0.1/tool.wit`,
//! outside what guests' bindings read from `wit/`) is kept so components
//! built against it load and run unchanged. WASI types come from wasmtime-wasi and
//! wasmtime-wasi-http, so their host implementations plug in unchanged, and
//! both versions share them.
#![allow(missing_docs, missing_debug_implementations)]

/// `toolhost:tool@0.2.1` (which components built against 0.2.0 link to
/// unchanged), with `wasi:keyvalue`.
pub(crate) mod v0_2 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "toolbox",
        imports: {
            // Stores wait on disk or on Redis, and questions on a person.
            // (wasi:keyvalue's types come from here; its host functions are
            // `keyvalue/linker.rs`'s, which read arguments lazily.)
            "wasi:keyvalue": async | trappable,
            "toolhost:tool/host.ask": async,
            "toolhost:tool/host.ask-with-key": async,
        },
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
            "wasi:keyvalue/store.bucket": crate::sandbox::keyvalue::Bucket,
        },
    });
}

/// `toolhost:tool@0.1.0`: one text result, `log` and `config`.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        // `wit` first: 0.1 uses its WASI packages.
        path: ["../wit", "../wit/v0.1"],
        world: "toolhost:tool/toolbox@0.1.0",
        exports: { default: async },
        require_store_data_send: true,
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}
