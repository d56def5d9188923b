//! The registry commands: `push` (publish a component in the CNCF Wasm
//! layout, its tools described in annotations), `pull` (fetch one by
//! digest, checked, into the cache or a file), `inspect` (what a component
//! is and asks for, without running or even downloading it) and `lock`
//! (pin the manifest's registry components in `toolhost.lock`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use serde_json::{Value, json};
use toolhost::printable::one_line;
use toolhost::registry::layout::{Descriptor, ImageManifest};
use toolhost::registry::layout::{IMPORTS_ANNOTATION, TOOLS_ANNOTATION};
use toolhost::registry::verify::{Policy, PublicKey, SigningKey};
use toolhost::registry::{OciRef, Publication, Registry, Settings};
use toolhost::wire::definitions::{self, Format};
use toolhost::{ComponentConfig, LockMode, Manifest, RegistryConfig, SandboxOptions, ToolHost};

use super::args::UsageError;
use super::output::out;
use super::output::print_json;

/// The OCI annotations `push` fills in.
const CREATED: &str = "org.opencontainers.image.created";
const DESCRIPTION: &str = "org.opencontainers.image.description";
const SOURCE: &str = "org.opencontainers.image.source";
const VERSION: &str = "org.opencontainers.image.version";

/// A reference from the command line.
pub(crate) fn reference(text: &str) -> anyhow::Result<OciRef> {
    text.parse()
        .map_err(|e: toolhost::registry::ReferenceError| anyhow::anyhow!(UsageError(e.to_string())))
}

/// The `[registry]` and `[verify]` tables of the manifest at `path` when
/// there is one (credentials, insecure hosts, the policy), else the
/// defaults. Only those tables are read: a tool entry whose file is
/// missing does not stop a push.
pub(crate) fn config(path: &Path) -> anyhow::Result<RegistryConfig> {
    Ok(Manifest::load_registry(path)?)
}

/// The registry client, keeping blobs in the cache directory (also with
/// `--no-cache`, which concerns compiled code), or, with none at all, in
/// a directory dropped at exit. Staged: a command keeps what it fetched
/// only by committing once it succeeded, so a refused one changes nothing.
fn registry(
    settings: Settings,
    options: &SandboxOptions,
) -> anyhow::Result<(Registry, Option<tempfile::TempDir>)> {
    let dir = options
        .cache_dir()
        .map(Path::to_path_buf)
        .or_else(toolhost::default_cache_dir);
    match dir {
        Some(dir) => Ok((Registry::new(settings, &dir)?.staged()?, None)),
        None => {
            let scratch = tempfile::tempdir().context("creating a scratch directory")?;
            let registry = Registry::new(settings, scratch.path())?.staged()?;
            Ok((registry, Some(scratch)))
        }
    }
}

/// What `toolhost push` was asked.
pub(crate) struct PushArgs {
    pub component: PathBuf,
    pub reference: String,
    pub annotations: Vec<String>,
    pub description: Option<String>,
    pub source: Option<String>,
}

/// `toolhost push FILE.wasm oci://REGISTRY/REPOSITORY:TAG`.
pub(crate) async fn push(
    args: PushArgs,
    settings: Settings,
    options: SandboxOptions,
) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.reference)?;
    let Some(tag) = reference.tag().map(str::to_owned) else {
        return Err(UsageError(format!(
            "{reference}: push needs a tag to publish under (oci://REGISTRY/REPOSITORY:TAG); the digest is what the push prints"
        ))
        .into());
    };
    if reference.digest().is_some() {
        return Err(UsageError(format!(
            "{reference}: push to a tag alone; the digest is computed from what is pushed"
        ))
        .into());
    }
    let bytes = std::fs::read(&args.component)
        .with_context(|| format!("reading {}", args.component.display()))?;
    // Loaded as a call would load it: a component whose tools do not load
    // is not published.
    let host =
        ToolHost::load_components(vec![ComponentConfig::new(&args.component)], options.clone())
            .await
            .with_context(|| {
                format!(
                    "{} does not load, so it is not pushed",
                    args.component.display()
                )
            })?;
    let publication = publication(&host, &args, &tag)?;
    let (registry, _scratch) = registry(settings, &options)?;
    let digest = registry.push(&reference, &bytes, &publication).await?;
    registry.commit()?;
    out!("{}", reference.pinned(digest));
    Ok(ExitCode::SUCCESS)
}

/// The annotations and config of a push: the tools as MCP lists them, the
/// imports, and the OCI fields.
fn publication(host: &ToolHost, args: &PushArgs, tag: &str) -> anyhow::Result<Publication> {
    let tools: Vec<Value> = host
        .specs()
        .map(|s| definitions::tool_definition(s, Format::Mcp))
        .collect();
    let (_, imports, exports) = host
        .component_worlds()
        .next()
        .context("the component loaded no world")?;
    let mut annotations = BTreeMap::new();
    annotations.insert(TOOLS_ANNOTATION.to_owned(), serde_json::to_string(&tools)?);
    annotations.insert(
        IMPORTS_ANNOTATION.to_owned(),
        serde_json::to_string(imports)?,
    );
    let created = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    annotations.insert(CREATED.to_owned(), created.clone());
    annotations.insert(VERSION.to_owned(), tag.to_owned());
    let description = args.description.clone().or_else(|| {
        let mut specs = host.specs();
        match (specs.next(), specs.next()) {
            (Some(only), None) => Some(only.description.clone()),
            _ => None,
        }
    });
    if let Some(description) = description {
        annotations.insert(DESCRIPTION.to_owned(), description);
    }
    if let Some(source) = &args.source {
        annotations.insert(SOURCE.to_owned(), source.clone());
    }
    for pair in &args.annotations {
        let (key, value) = pair
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| UsageError(format!("--annotation {pair:?}: expected KEY=VALUE")))?;
        annotations.insert(key.to_owned(), value.to_owned());
    }
    let mut publication = Publication::default();
    publication.file_name = args
        .component
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    publication.annotations = annotations;
    publication.imports = imports.to_vec();
    publication.exports = exports.to_vec();
    publication.created = created;
    Ok(publication)
}

/// What `toolhost pull` was asked.
pub(crate) struct PullArgs {
    pub reference: String,
    pub output: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// `toolhost pull oci://… [-o FILE] [--key KEY.pub]`: pulled by digest
/// into the cache, every blob checked, the signature too under `--key` or
/// else the policy the manifest gives the reference (a `[[tool]]` entry's
/// own `verify`, else `[verify]`), before anything is kept; the digests
/// printed.
pub(crate) async fn pull(
    args: PullArgs,
    config: RegistryConfig,
    options: SandboxOptions,
) -> anyhow::Result<ExitCode> {
    let reference = reference(&args.reference)?;
    let output = args.output.as_deref();
    let policy = match &args.key {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let key = PublicKey::from_pem(&text).with_context(|| path.display().to_string())?;
            Policy::Key {
                path: path.clone(),
                key,
            }
        }
        None => config.policy_for(&reference)?.clone(),
    };
    let (registry, _scratch) = registry(config.registry, &options)?;
    let digest = registry.resolve(&reference).await?;
    let verdict = registry.verify(&reference, &digest, &policy).await?;
    let pulled = registry.pull(&reference, &digest).await?;
    // Written before the pull is kept: a file that cannot be written
    // leaves the cache as it was, like any other failure.
    if let Some(output) = output {
        std::fs::copy(&pulled.blob, output)
            .with_context(|| format!("writing {}", output.display()))?;
    }
    registry.commit()?;
    let kept = registry.store().path(&pulled.layer.digest);
    print_json(&json!({
        "reference": pulled.reference.to_string(),
        "manifest": pulled.digest.to_string(),
        "layer": pulled.layer.digest.to_string(),
        "size": pulled.layer.size,
        "media_type": pulled.layer.media_type,
        "path": output.map_or(kept, Path::to_path_buf),
        "signer": verdict.map(|v| v.signer),
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// `toolhost inspect oci://…`: the manifest alone, read.
pub(crate) async fn inspect(
    text: &str,
    as_json: bool,
    settings: Settings,
    options: SandboxOptions,
) -> anyhow::Result<ExitCode> {
    let reference = reference(text)?;
    let (registry, _scratch) = registry(settings, &options)?;
    let digest = registry.resolve(&reference).await?;
    let (manifest, _) = registry.manifest(&reference, &digest).await?;
    let layer = manifest.component_layer().map_err(|e| {
        anyhow::anyhow!("{}: not a component: {e}", reference.pinned(digest.clone()))
    })?;
    registry.commit()?;
    let annotation = |key: &str| -> Value {
        manifest
            .annotations
            .get(key)
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or(Value::Null)
    };
    let summary = json!({
        "reference": reference.pinned(digest.clone()).to_string(),
        "manifest": digest.to_string(),
        "layer": {"digest": layer.digest.to_string(), "size": layer.size, "media_type": layer.media_type},
        "annotations": manifest.annotations,
        "tools": annotation(TOOLS_ANNOTATION),
        "imports": annotation(IMPORTS_ANNOTATION),
    });
    if as_json {
        print_json(&summary)?;
        return Ok(ExitCode::SUCCESS);
    }
    print_inspected(&summary, &manifest, layer);
    Ok(ExitCode::SUCCESS)
}

/// `inspect`'s human form of `summary`.
fn print_inspected(summary: &Value, manifest: &ImageManifest, layer: &Descriptor) {
    // Everything below comes from the publisher: shown as one printable
    // line each, so that no value can move the cursor or hide a line.
    let line = |text: &str| one_line(text, 300);
    out!("{}", summary["reference"].as_str().unwrap_or_default());
    out!(
        "  layer: {} ({} bytes, {})",
        layer.digest,
        layer.size,
        line(&layer.media_type)
    );
    for key in [CREATED, VERSION, DESCRIPTION, SOURCE] {
        if let Some(value) = manifest.annotations.get(key) {
            out!(
                "  {}: {}",
                key.rsplit('.').next().unwrap_or(key),
                line(value)
            );
        }
    }
    match summary["tools"].as_array() {
        Some(tools) => {
            out!("  tools (as the publisher declares them; loading checks them):");
            for tool in tools {
                let name = tool["name"].as_str().unwrap_or("?");
                let description = tool["description"].as_str().unwrap_or("");
                let arguments: Vec<&str> = tool["inputSchema"]["properties"]
                    .as_object()
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                out!(
                    "    {}({}): {}",
                    line(name),
                    line(&arguments.join(", ")),
                    line(description)
                );
            }
        }
        None => out!("  tools: not described (not pushed by toolhost); load it to see them"),
    }
    if let Some(imports) = summary["imports"].as_array() {
        out!(
            "  imports (as the publisher declares them; the sandbox grants only what the manifest says):"
        );
        for import in imports {
            out!("    {}", line(import.as_str().unwrap_or("?")));
        }
    }
}

/// Where `toolhost sign` puts the signature.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SignatureKind {
    /// A layer of the cosign `sha256-<digest>.sig` manifest.
    Cosign,
    /// A Sigstore bundle attached as an OCI referrer (`--bundle`).
    Bundle,
}

/// `toolhost sign --key KEY.pem [--bundle] oci://…@sha256:…`.
pub(crate) async fn sign(
    text: &str,
    key: &Path,
    kind: SignatureKind,
    settings: Settings,
    options: SandboxOptions,
) -> anyhow::Result<ExitCode> {
    let reference = reference(text)?;
    let Some(digest) = reference.digest().cloned() else {
        return Err(UsageError(format!(
            "{reference}: sign a digest (oci://…@sha256:…, as `toolhost push` prints it), not a tag: a tag can move between looking and signing"
        ))
        .into());
    };
    let pem = std::fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?;
    let signing = SigningKey::from_pem(&pem).with_context(|| key.display().to_string())?;
    let (registry, _scratch) = registry(settings, &options)?;
    let added = match kind {
        SignatureKind::Cosign => registry.sign(&reference, &digest, &signing).await?,
        SignatureKind::Bundle => registry.sign_bundle(&reference, &digest, &signing).await?,
    };
    registry.commit()?;
    let public = signing.public_key();
    if added {
        let how = match kind {
            SignatureKind::Cosign => "",
            SignatureKind::Bundle => " (a Sigstore bundle, attached as a referrer)",
        };
        eprintln!("signed {reference} with {} ({public}){how}", key.display());
    } else {
        eprintln!(
            "{reference} is already signed by {} ({public})",
            key.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `toolhost lock [--update [REF]…]`: pin the manifest's registry
/// components and write `toolhost.lock` when it changed.
pub(crate) async fn lock(
    manifest: &Manifest,
    update: Option<Vec<String>>,
    locked: bool,
    options: SandboxOptions,
) -> anyhow::Result<ExitCode> {
    // `--locked --update` re-resolves too, and refuses to write what moved.
    let mode = match update {
        None if locked => LockMode::Locked,
        Some(references) => LockMode::Update(
            references
                .iter()
                .map(|text| reference(text))
                .collect::<anyhow::Result<_>>()?,
        ),
        None => LockMode::Write,
    };
    let pinned = ToolHost::pin(manifest, &options, &mode).await?;
    for report in &pinned.report {
        let pin = &report.pin;
        match &report.moved_from {
            Some(before) => eprintln!("{}: {before} → {}", pin.reference, pin.manifest),
            None => eprintln!("{}: {}", pin.reference, pin.manifest),
        }
    }
    let path = manifest
        .lock_path()
        .context("this manifest has no file, so no lock file")?;
    if pinned.changed {
        if locked {
            let moves: Vec<String> = pinned
                .report
                .iter()
                .filter_map(|r| {
                    let before = r.moved_from.as_ref()?;
                    Some(format!(
                        "{} moved {before} → {}",
                        r.pin.reference, r.pin.manifest
                    ))
                })
                .collect();
            let what = match moves.is_empty() {
                true => "it would change".to_owned(),
                false => moves.join("; "),
            };
            anyhow::bail!(
                "{}: {what}; --locked writes nothing, so it is left as it was (run the same `toolhost lock` without --locked to write it)",
                path.display()
            );
        }
        pinned
            .write_lock(manifest)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    } else {
        eprintln!("{} is up to date", path.display());
    }
    Ok(ExitCode::SUCCESS)
}
