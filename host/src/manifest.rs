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
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::component::{Approval, ClientCapability, ComponentConfig};
use crate::grants::{FileMode, Grants};
use crate::limits::{ByteSize, Limits, RawLimits};
use crate::model::config::{ModelConfig, Prices, Provider, ResponseFormat, Sampling, ToolChoice};
use crate::stores::StoreConfig;
use store::RawStore;

/// The manifest's file name, looked for in the working directory.
pub const DEFAULT_FILE: &str = "toolhost.toml";

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
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            return Err(err(
                "base_url",
                format!(
                    "{:?} must start with http:// or https://, e.g. \"http://127.0.0.1:8080/v1\"",
                    self.base_url
                ),
            ));
        }
        let defaults = ModelConfig::openai(&self.base_url, &self.model);
        let timeout = match &self.timeout {
            Some(text) => humantime::parse_duration(text).map_err(|_| {
                err(
                    "timeout",
                    format!("{text:?} is not a duration; write e.g. \"120s\""),
                )
            })?,
            None => defaults.timeout,
        };
        let max_steps = self.max_steps.unwrap_or(defaults.max_steps);
        let parallel_tool_calls = self.parallel_tool_calls.unwrap_or(true);
        let config = ModelConfig {
            provider: self.provider,
            api_key_env: self.api_key_env,
            max_steps,
            max_tokens: self.max_tokens.unwrap_or(defaults.max_tokens),
            stream: self.stream.unwrap_or(defaults.stream),
            timeout,
            max_retries: self.max_retries.unwrap_or(defaults.max_retries),
            tool_choice: self
                .tool_choice
                .as_deref()
                .map_or(ToolChoice::Auto, ToolChoice::parse),
            tool_choice_steps: self.tool_choice_steps.unwrap_or(1),
            parallel_tool_calls,
            max_tool_calls_per_turn: match self.max_tool_calls_per_turn {
                Some(n) => NonZeroU32::new(n)
                    .ok_or_else(|| err("max_tool_calls_per_turn", "must be at least 1".into()))?,
                None => crate::model::config::default_calls_per_turn(parallel_tool_calls),
            },
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                seed: self.seed,
                stop: self.stop,
            },
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
            system: self.system,
            ..defaults
        };
        config.check().map_err(|(key, message)| err(key, message))?;
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
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    err(
                        "schema_file",
                        format!("cannot read {}: {e}", path.display()),
                    )
                })?;
                serde_json::from_str(&text).map_err(|e| {
                    err(
                        "schema_file",
                        format!("{} is not JSON: {e}", path.display()),
                    )
                })?
            }
            _ => {
                return Err(err(
                    "schema",
                    "give exactly one of schema = { … } (inline) or schema_file = \"answer.schema.json\"".into(),
                ));
            }
        };
        let name = self.name.unwrap_or_else(|| "final_answer".to_owned());
        let format = ResponseFormat {
            name,
            schema,
            strict: self.strict.unwrap_or(false),
        };
        Ok(format)
    }
}

/// A manifest that cannot be loaded. The message names the file, the tool and
/// the key, and says what to change.
#[derive(Debug, thiserror::Error)]
pub struct ManifestError {
    file: PathBuf,
    tool: Option<String>,
    key: Option<String>,
    message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
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
            tool: None,
            key: None,
            message: message.into(),
        }
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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTool {
    component: PathBuf,
    #[serde(default)]
    allow_hosts: Vec<String>,
    #[serde(default)]
    files: Vec<RawFile>,
    #[serde(default)]
    env: BTreeMap<String, RawValue>,
    #[serde(default)]
    config: BTreeMap<String, RawValue>,
    #[serde(default)]
    approval: Approval,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    stores: Vec<String>,
    cache: Option<String>,
    #[serde(default)]
    client_capabilities: std::collections::BTreeSet<ClientCapability>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    host: PathBuf,
    guest: String,
    #[serde(default)]
    mode: FileMode,
    /// For read-write grants: the most the directory may hold.
    quota: Option<ByteSize>,
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
        }
    }

    /// Read and validate the manifest at `path`.
    ///
    /// # Errors
    ///
    /// A [`ManifestError`] naming file, tool and key when the file cannot be
    /// read or any entry is invalid.
    pub fn load(path: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ManifestError::file(
                path,
                format!("cannot read it ({e}); pass --config or create {DEFAULT_FILE}"),
            )
        })?;
        Self::parse(path, &text, &|name| std::env::var(name).ok())
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
        let components = raw
            .tool
            .into_iter()
            .enumerate()
            .map(|(i, tool)| tool.validate(path, base, i, &limits, &stores, lookup_env))
            .collect::<Result<_, _>>()?;
        let model = raw.model.map(|m| m.validate(path)).transpose()?;
        Ok(Self {
            path: path.to_owned(),
            model,
            limits,
            components,
            stores,
        })
    }
}

impl RawTool {
    fn validate(
        self,
        file: &Path,
        base: &Path,
        index: usize,
        defaults: &Limits,
        stores: &BTreeMap<String, StoreConfig>,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ComponentConfig, ManifestError> {
        let component = base.join(&self.component);
        let name = format!("tool #{} ({})", index + 1, self.component.display());
        let err = |key: &str, message: String| ManifestError::tool(file, &name, Some(key), message);
        if !component.is_file() {
            return Err(err(
                "component",
                format!(
                    "{} does not exist; build it (scripts/build-tools.sh) or fix the path, which is relative to the manifest",
                    component.display()
                ),
            ));
        }
        let mut grants = Grants::none();
        for (i, pattern) in self.allow_hosts.iter().enumerate() {
            grants = grants
                .allow_host(pattern)
                .map_err(|e| err(&format!("allow_hosts[{i}]"), e.to_string()))?;
        }
        for (i, f) in self.files.iter().enumerate() {
            let key = format!("files[{i}]");
            grants = grants
                .file(base.join(&f.host), &f.guest, f.mode)
                .map_err(|e| err(&key, e.to_string()))?;
            if let Some(quota) = &f.quota {
                let bytes = quota.bytes().map_err(|e| err(&format!("{key}.quota"), e))?;
                grants = grants
                    .quota(&f.guest, bytes)
                    .map_err(|e| err(&format!("{key}.quota"), e.to_string()))?;
            }
        }
        for (key, value) in self.env {
            let (value, _) = value
                .resolve(lookup_env)
                .map_err(|e| err(&format!("env.{key}"), e))?;
            grants = grants.env(key, value);
        }
        for (key, value) in self.config {
            let (value, secret) = value
                .resolve(lookup_env)
                .map_err(|e| err(&format!("config.{key}"), e))?;
            grants = grants.config(key, value, secret);
        }
        for (i, store) in self.stores.iter().enumerate() {
            let Some(granted) = stores.get(store) else {
                let known = stores
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(err(
                    &format!("stores[{i}]"),
                    if known.is_empty() {
                        format!(
                            "no store is named {store:?}; declare it with a [store.{store}] table"
                        )
                    } else {
                        format!(
                            "no store is named {store:?} (declared: {known}); declare it with a [store.{store}] table"
                        )
                    },
                ));
            };
            grants = grants.store(granted.clone());
        }
        let limits = defaults
            .overridden_by(&self.limits)
            .map_err(|(key, e)| err(&format!("limits.{key}"), e))?;
        let cache = match &self.cache {
            None => None,
            Some(text) => match humantime::parse_duration(text) {
                Ok(ttl) if !ttl.is_zero() && ttl <= crate::result_cache::MAX_TTL => Some(ttl),
                _ => {
                    return Err(err(
                        "cache",
                        format!(
                            "{text:?} is not a duration between 1s and 24h; write e.g. cache = \"5m\""
                        ),
                    ));
                }
            },
        };
        Ok(ComponentConfig {
            path: component,
            grants,
            limits,
            approval: self.approval,
            cache,
            client_capabilities: self.client_capabilities,
        })
    }
}

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

mod store;
#[cfg(test)]
mod tests;
