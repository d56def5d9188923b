//! Run a tool from your own program, with grants and limits made in code
//! instead of a manifest.
//!
//! ```sh
//! scripts/build-tools.sh --rust      # builds target/tools/files.wasm
//! cargo run --release --example run_a_tool [-- path/to/files.wasm]
//! ```
//!
//! The component may read one directory (a temporary one, mounted at
//! `/data`), for at most two seconds and 32 MiB per call; everything else
//! (other paths, the network, the environment) it is refused.

use std::time::Duration;

use anyhow::Context as _;
use serde_json::json;
use toolhost::{
    ComponentConfig, ErrorType, FileMode, Grants, Limits, SandboxOptions, ToolCall, ToolHost,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let component = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/tools/files.wasm".to_owned());
    let data = tempfile::tempdir()?;
    std::fs::write(data.path().join("hello.txt"), "Hello from the host")?;

    // Deny by default: this component gets one read-only directory.
    let grants = Grants::none().file(data.path(), "/data", FileMode::ReadOnly)?;
    let limits = Limits::default()
        .with_timeout(Duration::from_secs(2))?
        .with_memory(32 << 20)?;
    let config = ComponentConfig::new(&component)
        .grants(grants)
        .limits(limits);
    let host = ToolHost::load_components(vec![config], SandboxOptions::default())
        .await
        .with_context(|| {
            format!("loading {component} (build it with scripts/build-tools.sh --rust)")
        })?;
    for spec in host.specs() {
        println!("tool {}: {}", spec.name, spec.description);
    }

    // A call inside the grant.
    let read = |id: &str, path: &str| ToolCall::new(id, "read_file", json!({ "path": path }));
    let outcome = host.call(read("1", "/data/hello.txt")).await;
    println!("read_file /data/hello.txt -> {}", outcome.content());
    anyhow::ensure!(!outcome.is_error(), "the granted read failed: {outcome:?}");

    // A call outside it: refused, with a typed reason, and the host goes on.
    let outcome = host.call(read("2", "/etc/passwd")).await;
    let kind = outcome.result.as_ref().err().map(|e| e.kind);
    println!("read_file /etc/passwd -> {kind:?}: {}", outcome.content());
    anyhow::ensure!(
        matches!(
            kind,
            Some(ErrorType::ToolError | ErrorType::CapabilityDenied)
        ),
        "a path outside the grant was not refused: {outcome:?}"
    );
    Ok(())
}
