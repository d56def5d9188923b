//! `toolhost new` and `toolhost componentize`: what tool authors start
//! from, and a C tool's core module made a component.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use toolhost::authoring::{componentize, scaffold};

use super::args::UsageError;
use super::output::out;

/// `toolhost new`: write the folder and say what to do next.
pub(crate) fn new_tool(
    dir: &std::path::Path,
    lang: scaffold::Language,
) -> anyhow::Result<ExitCode> {
    let made = match scaffold::create(dir, lang) {
        Ok(made) => made,
        Err(
            e @ (scaffold::ScaffoldError::BadName(_)
            | scaffold::ScaffoldError::Reserved(_)
            | scaffold::ScaffoldError::Exists(_)),
        ) => {
            return Err(UsageError(e.to_string()).into());
        }
        Err(e) => return Err(e.into()),
    };
    let dir = made.dir.display();
    out!(
        "created {dir}/ ({lang}, {} files): the tool {}",
        made.files,
        made.tool
    );
    out!("next:");
    out!("  {dir}/build.sh");
    out!(
        "  toolhost call --config {dir}/toolhost.toml {} '{{\"name\":\"Ada\"}}'",
        made.tool
    );
    out!("then read {dir}/README.md: arguments, errors, config, HTTP, stores");
    Ok(ExitCode::SUCCESS)
}

/// `toolhost componentize`: `module` (a core module built against the
/// contract's bindings) made a tool component at `output`.
pub(crate) fn componentize(
    module: &Path,
    output: &Path,
    wit: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let bytes = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let component =
        componentize::componentize(&bytes, wit).with_context(|| module.display().to_string())?;
    std::fs::write(output, component).with_context(|| format!("writing {}", output.display()))?;
    Ok(ExitCode::SUCCESS)
}
