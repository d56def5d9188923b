//! The `{{tool}}` tool. Build with `./build.sh`; try it with
//! `toolhost call --config toolhost.toml {{tool}} '{"name":"Ada"}'`.

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_guest::{Output, Tool, ToolError};

/// The arguments. Doc comments become the schema's descriptions, which the
/// model reads; the schema itself is derived from this struct.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Who to greet.
    name: String,
}

fn hello(args: Args) -> Result<Output, ToolError> {
    if args.name.trim().is_empty() {
        return Err(ToolError::invalid_input("`name` is empty: say who to greet"));
    }
    Ok(Output::text(format!("Hello, {}!", args.name)))
}

toolhost_guest::export_tools! {
    Tool::new("{{tool}}", "Greet someone by name", hello).read_only().idempotent(),
}
