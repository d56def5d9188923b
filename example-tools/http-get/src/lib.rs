//! `http_get`: fetch a URL and return its status and text. Needs `allow_hosts`:
//! the host refuses every origin the manifest does not grant, redirects included.
//!
//! Build with `scripts/build-tools.sh`.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Context, Output, Tool, ToolError, http};

/// Arguments of `http_get`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    /// Absolute http:// or https:// URL.
    #[schemars(length(min = 8, max = 2048))]
    url: String,
    /// Return at most this many characters of the body; null for 4000.
    // Listed in `required` yet nullable, as OpenAI's strict mode wants every
    // argument (`required` alone would leave out the null).
    #[schemars(required, range(min = 1, max = 100_000), extend("type" = ["integer", "null"]))]
    max_chars: Option<usize>,
}

/// The characters of the body returned when `max_chars` is null.
const DEFAULT_MAX_CHARS: usize = 4000;

/// Structured result of `http_get`.
#[derive(Serialize, JsonSchema)]
struct GetResult {
    status: u16,
    content_type: Option<String>,
    /// The body, cut to `max_chars`.
    body: String,
    truncated: bool,
}

fn http_get(args: GetArgs, cx: &Context) -> Result<Output, ToolError> {
    // Leave a little of the host's deadline to report a slow server ourselves.
    let budget = Duration::from_millis(cx.deadline_ms().saturating_sub(100).max(100));
    let response = http::Request::get(&args.url).timeout(budget).send()?;
    let text = response.text();
    let max_chars = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS);
    let truncated = text.chars().count() > max_chars;
    let body: String = text.chars().take(max_chars).collect();
    let result = GetResult {
        status: response.status(),
        content_type: response.header("content-type").map(str::to_owned),
        body,
        truncated,
    };
    let summary = format!(
        "HTTP {}{}\n\n{}",
        result.status,
        if truncated { " (body truncated)" } else { "" },
        result.body
    );
    Ok(Output::json(&result).with_content(summary))
}

toolhost_guest::export_tools! {
    Tool::new("http_get", "Fetch a web page or API over HTTP(S) GET and return its status and body text", http_get)
        .output::<GetResult>()
        .read_only()
        .open_world(),
}
