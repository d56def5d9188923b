//! `toolhost check`: the manifest and its components loaded, what each
//! tool may touch, and the warnings (with their fixes) of what models and
//! clients trip on.

use std::process::ExitCode;

use super::output::out;
use toolhost::authoring::lint;
use toolhost::registry::verify::Policy;
use toolhost::{ComponentConfig, ComponentSource, Manifest, ToolHost};

/// Print what each tool may touch and the lints; with `strict`, a warning
/// fails the check.
pub(crate) fn check(manifest: &Manifest, host: &ToolHost, strict: bool) -> ExitCode {
    print_check(manifest, host);
    let mut warnings: Vec<String> = lint::lint(host.specs())
        .iter()
        .map(ToString::to_string)
        .collect();
    warnings.extend(opt_outs(manifest, host));
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

/// Whether `config` is a registry component that opts out of the
/// manifest's `[verify]` policy with `verify = "none"`.
fn opts_out(manifest: &Manifest, config: &ComponentConfig) -> bool {
    matches!(config.source, ComponentSource::Pinned(_))
        && config.verify == Policy::None
        && manifest.verify != Policy::None
}

/// A warning per registry component that opts out of `[verify]`: it runs
/// unsigned where the manifest asks for signatures.
fn opt_outs(manifest: &Manifest, host: &ToolHost) -> Vec<String> {
    host.components()
        .filter(|(config, _, _)| opts_out(manifest, config))
        .filter_map(|(config, _, _)| match &config.source {
            ComponentSource::Pinned(pinned) => Some(format!(
                "{} opts out of [verify] (verify = \"none\"), so its signature is not checked; remove that line to require the manifest's policy",
                pinned.reference
            )),
            // `opts_out` holds only for pinned components.
            _ => None,
        })
        .collect()
}

/// Where a component comes from: its file, or its reference with the
/// digests it is pinned to and who signed it (or why nobody checked).
fn source_line(manifest: &Manifest, config: &ComponentConfig) -> String {
    match &config.source {
        ComponentSource::File(path) => path.display().to_string(),
        ComponentSource::Pinned(pinned) => {
            let mut line = format!("{}\n  layer: {}", pinned.reference, pinned.layer);
            match &pinned.signer {
                Some(signer) => {
                    line.push_str(&format!("\n  signature: verified, signed by {signer}"))
                }
                None if opts_out(manifest, config) => line.push_str(
                    "\n  signature: not checked: this tool opts out (`verify = \"none\"` overrides [verify])",
                ),
                None => line.push_str("\n  signature: not checked (no verify policy)"),
            }
            let redirects: Vec<String> = manifest
                .registry
                .blob_redirects(&pinned.reference)
                .into_iter()
                .map(|(host, built_in)| match built_in {
                    true => format!("{host} (built in)"),
                    false => format!("{host} (blob_redirects)"),
                })
                .collect();
            if !redirects.is_empty() {
                line.push_str(&format!(
                    "\n  blob downloads may be redirected to (HTTPS, no credentials): {}",
                    redirects.join(", ")
                ));
            }
            line
        }
        other => format!("{other:?}"),
    }
}

/// Per component: its tools, and exactly what they may touch.
fn print_check(manifest: &Manifest, host: &ToolHost) {
    out!("{}: ok", manifest.path.display());
    let versions: std::collections::HashMap<_, _> = host
        .contract_versions()
        .map(|(config, version)| (config.source.clone(), version))
        .collect();
    for (config, tools, cache) in host.components() {
        // The source's first line (its file or reference) carries the
        // compiled code's status; a registry component's digests and signer
        // follow on lines of their own.
        let source = source_line(manifest, config);
        let (first, rest) = source.split_once('\n').unwrap_or((&source, ""));
        out!("\n{first} (compiled code: {cache:?})");
        if !rest.is_empty() {
            out!("{rest}");
        }
        if let Some(version) = versions.get(&config.source) {
            out!("  contract: toolhost:tool@{version}");
        }
        out!("  tools: {}", tools.join(", "));
        let cached: Vec<String> = tools
            .iter()
            .filter_map(|tool| {
                host.cache_ttl(tool)
                    .map(|ttl| format!("{tool} ({})", humantime::format_duration(ttl)))
            })
            .collect();
        if !cached.is_empty() {
            out!("  cached results: {}", cached.join(", "));
        }
        for line in toolhost::describe::component_lines(config) {
            out!("  {line}");
        }
    }
}
