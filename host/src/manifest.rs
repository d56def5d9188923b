//! `toolhost.toml`: the model endpoint, default limits, and each component
//! with its grants and limits.
//!
//! Parsed once, at load, into validated types; unknown keys, missing
//! components, malformed hosts and missing directories are errors that name
//! the file, the tool and the key. Relative paths are relative to the
//! manifest's directory.
//!
//! ```toml
//! [limits]
//! timeout = "5s"
//! memory = "64MiB"
//!
//! [[tool]]
//! component = "fetch.wasm"
//! allow_hosts = ["https://example.org"]
//! files = [{ host = "./data", guest = "/data", mode = "read-write", quota = "100MiB" }]
//! env = { UNITS = "metric" }
//! config = { api_key = { env = "WEATHER_KEY" } }
//! approval = "never"
//! limits = { timeout = "2s" }
//! stores = ["notes"]
//!
//! [store.notes]
//! backend = "embedded"          # or "redis://127.0.0.1:6379", or { env = "REDIS_URL" }
//! scope = "user"                # "global", or a key of the call's injected context
//! max_keys = 1000
//! max_bytes = "10MiB"
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::component::ComponentConfig;
use crate::limits::{Limits, RawLimits};
use crate::model::config::{
    ControlOverrides, ModelConfig, Overrides, Prices, Provider, ResponseFormat, ToolChoice,
};
use crate::stores::StoreConfig;
use lines::KeyLines;
pub(crate) use serve::MAX_SESSIONS;
pub use serve::{ServeSettings, SessionSettings};
use store::RawStore;
use tool::RawTool;

/// The manifest's file name, looked for in the working directory.
pub const DEFAULT_MANIFEST: &str = "toolhost.toml";

/// A validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    /// Where it was read from.
    pub path: PathBuf,
    /// The `[model]` table, for `toolhost run`.
    pub model: Option<ModelConfig>,
    /// The `[limits]` defaults.
    pub limits: Limits,
    /// The `[[tool]]` entries, in order.
    pub components: Vec<ComponentConfig>,
    /// The `[store.NAME]` tables, by name.
    pub stores: BTreeMap<String, StoreConfig>,
    /// The `[registry]` table: how registry components are pulled.
    pub registry: crate::registry::Settings,
    /// The top-level `[verify]` policy, the default of every registry
    /// component (already applied to [`Manifest::components`]; kept to
    /// say which of them opt out).
    pub verify: crate::registry::verify::Policy,
    /// `toolhost.lock` beside the manifest, when there is one: the digests
    /// its registry components are pinned to.
    pub lock: Option<crate::registry::Lock>,
    /// The `[serve]` table: who may call `toolhost serve`.
    pub serve: ServeSettings,
    /// Read from a file (whose directory holds its lock file).
    from_file: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    #[serde(default)]
    provider: Provider,
    base_url: String,
    model: String,
    api_key_env: Option<String>,
    max_steps: Option<u32>,
    max_tokens: Option<u32>,
    stream: Option<bool>,
    timeout: Option<String>,
    max_retries: Option<u32>,
    tool_choice: Option<String>,
    tool_choice_steps: Option<u32>,
    parallel_tool_calls: Option<bool>,
    max_tool_calls_per_turn: Option<u32>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<i64>,
    #[serde(default)]
    stop: Vec<String>,
    max_run_tokens: Option<u64>,
    max_run_cost: Option<f64>,
    prices: Option<RawPrices>,
    response_format: Option<RawResponseFormat>,
    system: Option<String>,
    code_mode: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrices {
    input: f64,
    output: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResponseFormat {
    name: Option<String>,
    schema: Option<toml::Value>,
    schema_file: Option<PathBuf>,
    strict: Option<bool>,
}

impl RawModel {
    fn validate(self, file: &Path) -> Result<ModelConfig, ManifestError> {
        let err = |key: &str, message: String| {
            ManifestError::file(file, format!("`model.{key}`: {message}"))
        };
        let base_url = self
            .base_url
            .parse()
            .map_err(|e: crate::model::config::BaseUrlError| err("base_url", e.to_string()))?;
        let mut config = ModelConfig::new(self.provider, base_url, self.model);
        if let Some(text) = &self.timeout {
            config.timeout = crate::duration::parse(text).map_err(|_| {
                err(
                    "timeout",
                    format!("{text:?} is not a duration; write e.g. \"120s\""),
                )
            })?;
        }
        config.api_key_env = self.api_key_env;
        config.stream = self.stream.unwrap_or(config.stream);
        config.system = self.system;
        let controls = ControlOverrides {
            max_steps: self.max_steps,
            max_tokens: self.max_tokens,
            max_retries: self.max_retries,
            tool_choice: self.tool_choice.as_deref().map(ToolChoice::parse),
            tool_choice_steps: self.tool_choice_steps,
            parallel_tool_calls: self.parallel_tool_calls,
            max_tool_calls_per_turn: self.max_tool_calls_per_turn,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            stop: Some(self.stop),
            max_run_tokens: self.max_run_tokens,
            max_run_cost: self.max_run_cost,
            prices: self.prices.map(|p| Prices {
                input: p.input,
                output: p.output,
            }),
            response_format: self
                .response_format
                .map(|raw| raw.validate(file))
                .transpose()?,
            code_mode: self.code_mode,
        };
        config
            .apply(Overrides {
                controls,
                ..Overrides::default()
            })
            .map_err(|e| err(e.key(), e.message().to_owned()))?;
        Ok(config)
    }
}

impl RawResponseFormat {
    fn validate(self, file: &Path) -> Result<ResponseFormat, ManifestError> {
        let err = |key: &str, message: String| {
            ManifestError::file(file, format!("`model.response_format.{key}`: {message}"))
        };
        let schema = match (self.schema, self.schema_file) {
            (Some(schema), None) => serde_json::to_value(schema)
                .map_err(|e| err("schema", format!("cannot be read as JSON: {e}")))?,
            (None, Some(path)) => {
                let path = file.parent().unwrap_or(Path::new(".")).join(path);
                ResponseFormat::read_schema(&path).map_err(|e| err("schema_file", e.to_string()))?
            }
            _ => {
                return Err(err(
                    "schema",
                    "give exactly one of schema = { … } (inline) or schema_file = \"answer.schema.json\"".into(),
                ));
            }
        };
        let mut format = ResponseFormat::new(schema);
        if let Some(name) = self.name {
            format.name = name;
        }
        format.strict = self.strict.unwrap_or(false);
        Ok(format)
    }
}

/// A manifest that cannot be loaded. The message names the file, the tool and
/// the key, and says what to change.
#[derive(Debug, thiserror::Error)]
pub struct ManifestError {
    file: PathBuf,
    line: Option<usize>,
    tool: Option<String>,
    key: Option<String>,
    message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(tool) = &self.tool {
            write!(f, ": {tool}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ": `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl ManifestError {
    /// An error about `file` as a whole.
    pub(crate) fn file(file: &Path, message: impl Into<String>) -> Self {
        Self {
            file: file.to_owned(),
            line: None,
            tool: None,
            key: None,
            message: message.into(),
        }
    }

    /// The same error, said to be at `line` of the file (when known).
    pub(crate) fn at_line(mut self, line: Option<usize>) -> Self {
        self.line = line;
        self
    }

    /// An error about key `key` of tool `tool` in `file`.
    pub(crate) fn tool(
        file: &Path,
        tool: &str,
        key: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            file: file.to_owned(),
            line: None,
            tool: Some(tool.to_owned()),
            key: key.map(str::to_owned),
            message: message.into(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    model: Option<RawModel>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    tool: Vec<RawTool>,
    #[serde(default)]
    store: BTreeMap<String, RawStore>,
    #[serde(default)]
    registry: registry::RawRegistry,
    verify: Option<registry::RawVerify>,
    #[serde(default)]
    serve: serve::RawServe,
}

/// A manifest's `[registry]` and `[verify]` tables, and the policies of its
/// registry tools, read by [`Manifest::load_registry`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RegistryConfig {
    /// The `[registry]` table: timeout, cap, credentials, plain HTTP,
    /// blob redirects.
    pub registry: crate::registry::Settings,
    /// The top-level `[verify]` policy (`Policy::None` without one).
    pub verify: crate::registry::verify::Policy,
    /// Where it was read from.
    path: PathBuf,
    /// Each `[[tool]]` entry naming a registry component: its number (from
    /// 1), its reference and its policy (its own `verify`, else
    /// `[verify]`).
    tools: Vec<(
        usize,
        crate::registry::OciRef,
        crate::registry::verify::Policy,
    )>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            registry: crate::registry::Settings::default(),
            verify: crate::registry::verify::Policy::None,
            path: PathBuf::new(),
            tools: Vec::new(),
        }
    }
}

impl RegistryConfig {
    /// The policy a command that pulls `reference` by itself (`pull`,
    /// `call --component`) applies, as loading the manifest would: that of
    /// the `[[tool]]` entries naming the same reference (their own
    /// `verify`, else `[verify]`), else `[verify]`.
    ///
    /// # Errors
    ///
    /// When entries naming the reference ask for different policies: a
    /// load checks each, a lone pull could honour only one, so it refuses
    /// and names them.
    pub fn policy_for(
        &self,
        reference: &crate::registry::OciRef,
    ) -> Result<&crate::registry::verify::Policy, ManifestError> {
        let same = |other: &crate::registry::OciRef| {
            other.api_registry() == reference.api_registry()
                && other.api_repository() == reference.api_repository()
                && other.tag() == reference.tag()
                && other.digest() == reference.digest()
        };
        let mut matching = self.tools.iter().filter(|(_, other, _)| same(other));
        let Some((first, _, policy)) = matching.next() else {
            return Ok(&self.verify);
        };
        if let Some((other, _, _)) = matching.find(|(_, _, other)| other != policy) {
            return Err(ManifestError::file(
                &self.path,
                format!(
                    "tool #{first} and tool #{other} both name {reference} with different verify policies; loading the manifest checks both, but a command given the reference alone cannot choose between them: give both entries the same verify, or pass --key"
                ),
            ));
        }
        Ok(policy)
    }
}

/// A literal value, or `{ env = "NAME" }` to read it from the host's
/// environment at load (a secret: masked in logs and output).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawValue {
    Literal(String),
    FromEnv(FromEnv),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FromEnv {
    env: String,
}

impl Manifest {
    /// A manifest of `components` alone, with default limits, no model and
    /// no stores: what `toolhost call --component` runs.
    pub fn of_components(components: Vec<ComponentConfig>) -> Self {
        Self {
            path: PathBuf::from("(command line)"),
            model: None,
            limits: Limits::default(),
            components,
            stores: BTreeMap::new(),
            registry: crate::registry::Settings::default(),
            verify: crate::registry::verify::Policy::None,
            lock: None,
            serve: ServeSettings::default(),
            from_file: false,
        }
    }

    /// Where this manifest's lock file is (whether or not it exists);
    /// `None` for a manifest of components given in code or on the command
    /// line, which has no lock file and never writes one.
    #[must_use]
    pub fn lock_path(&self) -> Option<PathBuf> {
        self.from_file.then(|| registry::lock_path(&self.path))
    }

    /// Read and validate the manifest at `path`.
    ///
    /// ```no_run
    /// # async fn run() -> anyhow::Result<()> {
    /// let manifest = toolhost::Manifest::load("toolhost.toml".as_ref())?;
    /// let host = toolhost::ToolHost::load(&manifest).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`ManifestError`] naming file, tool and key when the file cannot be
    /// read or any entry is invalid.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ManifestError::file(path, format!("cannot read it ({e})")))?;
        Self::parse(path, &text, &|name| std::env::var(name).ok())
    }

    /// Read only the `[registry]` and `[verify]` tables of the manifest at
    /// `path` (every other key is left unread, so a tool entry whose file
    /// is missing is no error here); the defaults when there is no file.
    ///
    /// # Errors
    ///
    /// A [`ManifestError`] naming the file (and, for TOML syntax, the line)
    /// and the key, when the file cannot be read or those tables are
    /// invalid.
    pub fn load_registry(path: &Path) -> Result<RegistryConfig, ManifestError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(RegistryConfig::default());
            }
            Err(e) => return Err(ManifestError::file(path, format!("cannot read it ({e})"))),
        };
        Self::parse_registry(path, &text)
    }

    /// Validate the `[registry]` and `[verify]` tables of manifest `text`
    /// as if read from `path`.
    ///
    /// # Errors
    ///
    /// As [`Manifest::load_registry`].
    pub fn parse_registry(path: &Path, text: &str) -> Result<RegistryConfig, ManifestError> {
        let raw: registry::RawRegistryOnly = toml::from_str(text)
            .map_err(|e| ManifestError::file(path, e.to_string().trim_end().to_owned()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let lines = KeyLines::new(text);
        let registry = raw.registry.validate(path, &lines)?;
        let verify = validate_verify(raw.verify, path, base, &lines)?;
        let mut tools = Vec::new();
        for (index, tool) in raw.tool.into_iter().enumerate() {
            // A file (or a reference that does not parse, which the full
            // load refuses) has no policy to apply.
            let Some(reference) = tool
                .component
                .as_deref()
                .and_then(|c| c.parse::<crate::registry::OciRef>().ok())
            else {
                continue;
            };
            let policy = match tool.verify {
                Some(raw) => raw.validate(base).map_err(|e| {
                    let name = format!("tool #{} ({reference})", index + 1);
                    ManifestError::tool(path, &name, Some("verify"), e)
                })?,
                None => verify.clone(),
            };
            tools.push((index + 1, reference, policy));
        }
        Ok(RegistryConfig {
            registry,
            verify,
            path: path.to_owned(),
            tools,
        })
    }

    /// Validate manifest `text` as if read from `path`, taking `{ env = … }`
    /// values from `lookup_env`.
    ///
    /// # Errors
    ///
    /// As [`Manifest::load`].
    pub fn parse(
        path: &Path,
        text: &str,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ManifestError> {
        let raw: RawManifest = toml::from_str(text)
            .map_err(|e| ManifestError::file(path, e.to_string().trim_end().to_owned()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let limits = Limits::default()
            .overridden_by(&raw.limits)
            .map_err(|(key, e)| ManifestError::file(path, format!("`limits.{key}`: {e}")))?;
        let stores = store::validate(raw.store, path, base, lookup_env)?;
        let lines = KeyLines::new(text);
        let verify = validate_verify(raw.verify, path, base, &lines)?;
        let components = raw
            .tool
            .into_iter()
            .enumerate()
            .map(|(i, tool)| {
                let defaults = tool::Defaults {
                    limits: &limits,
                    verify: &verify,
                };
                tool.validate(path, base, i, &defaults, &stores, lookup_env)
            })
            .collect::<Result<_, _>>()?;
        let model = raw.model.map(|m| m.validate(path)).transpose()?;
        let registry = raw.registry.validate(path, &lines)?;
        let lock = registry::read_lock(path)?;
        let serve = raw.serve.validate(path, base, lookup_env)?;
        Ok(Self {
            path: path.to_owned(),
            model,
            limits,
            components,
            stores,
            registry,
            verify,
            lock,
            serve,
            from_file: true,
        })
    }
}

/// The top-level `[verify]` policy of the manifest at `path`.
fn validate_verify(
    raw: Option<registry::RawVerify>,
    path: &Path,
    base: &Path,
    lines: &KeyLines<'_>,
) -> Result<crate::registry::verify::Policy, ManifestError> {
    raw.map(|v| v.validate(base))
        .transpose()
        .map_err(|e| {
            ManifestError::file(path, format!("`verify`: {e}")).at_line(lines.line(&["verify"]))
        })
        .map(|policy| policy.unwrap_or(crate::registry::verify::Policy::None))
}

/// An error about one key of a table (a tool, a store), made of the key and
/// the message: the validation functions of one table share it.
type KeyError<'a> = dyn Fn(&str, String) -> ManifestError + 'a;

impl RawValue {
    /// The value and whether it is a secret.
    fn resolve(
        self,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(String, bool), String> {
        match self {
            Self::Literal(value) => Ok((value, false)),
            Self::FromEnv(FromEnv { env }) => {
                lookup_env(&env).map(|value| (value, true)).ok_or_else(|| {
                    format!(
                        "environment variable {env} is not set; export it before starting toolhost"
                    )
                })
            }
        }
    }
}

mod lines;
mod registry;
mod serve;
mod store;
#[cfg(test)]
mod tests;
mod tool;
