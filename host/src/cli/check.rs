//! `toolhost check`: the manifest and its components loaded, what each
//! tool may touch, and the warnings (with their fixes) of what models and
//! clients trip on.

use std::process::ExitCode;

use toolhost::authoring::lint;
use toolhost::{Manifest, ToolHost};

/// Print what each tool may touch and the lints; with `strict`, a warning
/// fails the check.
pub(crate) fn check(manifest: &Manifest, host: &ToolHost, strict: bool) -> ExitCode {
    print_check(manifest, host);
    let warnings = lint::lint(host.specs());
    for warning in &warnings {
        eprintln!("warning: {warning}");
    }
    if strict && !warnings.is_empty() {
        eprintln!(
            "error: {} warnings, and --strict makes them errors",
            warnings.len()
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Per component: its tools, and exactly what they may touch.
fn print_check(manifest: &Manifest, host: &ToolHost) {
    println!("{}: ok", manifest.path.display());
    let versions: std::collections::HashMap<_, _> = host
        .contract_versions()
        .map(|(config, version)| (config.path.clone(), version))
        .collect();
    for (config, tools, cache) in host.components() {
        println!("\n{} (compiled code: {cache:?})", config.path.display());
        if let Some(version) = versions.get(&config.path) {
            println!("  contract: toolhost:tool@{version}");
        }
        println!("  tools: {}", tools.join(", "));
        let cached: Vec<String> = tools
            .iter()
            .filter_map(|tool| {
                host.cache_ttl(tool)
                    .map(|ttl| format!("{tool} ({})", humantime::format_duration(ttl)))
            })
            .collect();
        if !cached.is_empty() {
            println!("  cached results: {}", cached.join(", "));
        }
        for line in toolhost::describe::component_lines(config) {
            println!("  {line}");
        }
    }
}
