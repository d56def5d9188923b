//! `[[tool]]` entries: a component with its grants, limits, approval and
//! cache, checked at load.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::registry::RawVerify;
use super::{KeyError, ManifestError, RawValue};
use crate::component::{Approval, ClientCapability, ComponentConfig, ComponentSource, TaskSupport};
use crate::grants::{FileMode, Grants, ToolCalls};
use crate::limits::{ByteSize, Limits, RawLimits};
use crate::registry::verify::Policy;
use crate::stores::StoreConfig;

/// A `[[tool]]` entry as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTool {
    component: String,
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
    client_capabilities: BTreeSet<ClientCapability>,
    verify: Option<RawVerify>,
    scopes: Option<Vec<String>>,
    idempotent: Option<bool>,
    #[serde(default)]
    task_support: TaskSupport,
    /// A list of tool names and patterns, or a table of the list
    /// (`tools`) and the budget (`max_calls`, `concurrency`).
    call_tools: Option<toml::Value>,
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

/// What the manifest sets for every tool, which an entry may override.
pub(super) struct Defaults<'a> {
    /// `[limits]`.
    pub limits: &'a Limits,
    /// `[verify]`, for registry components.
    pub verify: &'a Policy,
}

impl RawTool {
    /// The component `index` (from 0) of the manifest at `file`, with its
    /// grants, its limits and policy over `defaults` and its cache.
    pub(super) fn validate(
        self,
        file: &Path,
        base: &Path,
        index: usize,
        defaults: &Defaults<'_>,
        stores: &BTreeMap<String, StoreConfig>,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ComponentConfig, ManifestError> {
        let name = format!("tool #{} ({})", index + 1, self.component);
        let err = |key: &str, message: String| ManifestError::tool(file, &name, Some(key), message);
        let source = component_source(&self.component, base).map_err(|e| err("component", e))?;
        let verify = match (self.verify, &source) {
            (Some(_), ComponentSource::File(_)) => {
                return Err(err(
                    "verify",
                    "signatures are checked on registry components (oci://…); a file on this disk is trusted as it is, so remove verify here".into(),
                ));
            }
            (Some(raw), _) => raw.validate(base).map_err(|e| err("verify", e))?,
            (None, ComponentSource::File(_)) => Policy::None,
            (None, _) => defaults.verify.clone(),
        };
        let grants = grant_hosts(Grants::none(), &self.allow_hosts, &err)?;
        let grants = grant_files(grants, base, &self.files, &err)?;
        let grants = grant_env(grants, self.env, lookup_env, &err)?;
        let grants = grant_config(grants, self.config, lookup_env, &err)?;
        let grants = grant_stores(grants, &self.stores, stores, &err)?;
        let grants = match self.call_tools {
            Some(raw) => grants.call_tools(grant_calls(raw).map_err(|e| err("call_tools", e))?),
            None => grants,
        };
        let limits = defaults
            .limits
            .overridden_by(&self.limits)
            .map_err(|(key, e)| err(&format!("limits.{key}"), e))?;
        let cache = self
            .cache
            .as_deref()
            .map(|text| cache_ttl(text, &err))
            .transpose()?;
        if let Some(scope) = self
            .scopes
            .iter()
            .flatten()
            .find(|s| s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            return Err(err(
                "scopes",
                format!(
                    "{scope:?} is not a scope: a scope is one word without spaces, e.g. \"notes:write\""
                ),
            ));
        }
        Ok(ComponentConfig {
            source,
            verify,
            grants,
            limits,
            approval: self.approval,
            cache,
            client_capabilities: self.client_capabilities,
            scopes: self.scopes,
            idempotent: self.idempotent,
            task_support: self.task_support,
        })
    }
}

/// Where `component` (as the manifest writes it) comes from: a registry
/// reference, or a file relative to the manifest's directory `base` that
/// exists.
fn component_source(component: &str, base: &Path) -> Result<ComponentSource, String> {
    if component.starts_with(crate::registry::SCHEME) {
        return component
            .parse()
            .map(ComponentSource::Registry)
            .map_err(|e: crate::registry::ReferenceError| e.to_string());
    }
    let path = base.join(component);
    if !path.is_file() {
        return Err(format!(
            "{} does not exist; build it (scripts/build-tools.sh) or fix the path, which is relative to the manifest (or write a registry reference, oci://REGISTRY/REPOSITORY:TAG)",
            path.display()
        ));
    }
    Ok(ComponentSource::File(path))
}

/// `grants` with a tool's `allow_hosts`.
fn grant_hosts(
    mut grants: Grants,
    allow_hosts: &[String],
    err: &KeyError<'_>,
) -> Result<Grants, ManifestError> {
    for (i, pattern) in allow_hosts.iter().enumerate() {
        grants = grants
            .allow_host(pattern)
            .map_err(|e| err(&format!("allow_hosts[{i}]"), e.to_string()))?;
    }
    Ok(grants)
}

/// `grants` with a tool's `files`, each with its quota; host paths are
/// relative to `base`.
fn grant_files(
    mut grants: Grants,
    base: &Path,
    files: &[RawFile],
    err: &KeyError<'_>,
) -> Result<Grants, ManifestError> {
    for (i, f) in files.iter().enumerate() {
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
    Ok(grants)
}

/// `grants` with a tool's `env`, each value resolved.
fn grant_env(
    mut grants: Grants,
    env: BTreeMap<String, RawValue>,
    lookup_env: &dyn Fn(&str) -> Option<String>,
    err: &KeyError<'_>,
) -> Result<Grants, ManifestError> {
    for (key, value) in env {
        let (value, _) = value
            .resolve(lookup_env)
            .map_err(|e| err(&format!("env.{key}"), e))?;
        grants = grants.env(key, value);
    }
    Ok(grants)
}

/// `grants` with a tool's `config`, each value resolved, and a secret
/// where it was read from the environment.
fn grant_config(
    mut grants: Grants,
    config: BTreeMap<String, RawValue>,
    lookup_env: &dyn Fn(&str) -> Option<String>,
    err: &KeyError<'_>,
) -> Result<Grants, ManifestError> {
    for (key, value) in config {
        let (value, secret) = value
            .resolve(lookup_env)
            .map_err(|e| err(&format!("config.{key}"), e))?;
        grants = grants.config(key, value, secret);
    }
    Ok(grants)
}

/// `grants` with the stores a tool names, each one of the manifest's
/// `declared` stores.
fn grant_stores(
    mut grants: Grants,
    names: &[String],
    declared: &BTreeMap<String, StoreConfig>,
    err: &KeyError<'_>,
) -> Result<Grants, ManifestError> {
    for (i, store) in names.iter().enumerate() {
        let Some(granted) = declared.get(store) else {
            return Err(err(&format!("stores[{i}]"), unknown_store(store, declared)));
        };
        grants = grants.store(granted.clone());
    }
    Ok(grants)
}

/// A tool's `call_tools`, checked: a list of names and patterns, or a
/// table of the list and the budget.
fn grant_calls(raw: toml::Value) -> Result<ToolCalls, String> {
    const FORMS: &str = "write call_tools = [\"calc\", \"convert_*\"], or call_tools = { tools = [\"calc\"], max_calls = 50, concurrency = 8 }";
    let names = |value: &toml::Value| -> Result<Vec<String>, String> {
        value
            .as_array()
            .and_then(|names| {
                names
                    .iter()
                    .map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .ok_or_else(|| format!("the tools must be a list of names; {FORMS}"))
    };
    let count = |table: &toml::Table, key: &str| -> Result<Option<u32>, String> {
        match table.get(key) {
            None => Ok(None),
            Some(value) => value
                .as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| format!("{key} must be a whole number; {FORMS}")),
        }
    };
    let (tools, max_calls, concurrency) = match &raw {
        toml::Value::Array(_) => (names(&raw)?, None, None),
        toml::Value::Table(table) => {
            if let Some(unknown) = table
                .keys()
                .find(|k| !["tools", "max_calls", "concurrency"].contains(&k.as_str()))
            {
                return Err(format!("unknown key {unknown:?}; {FORMS}"));
            }
            let tools = table
                .get("tools")
                .ok_or_else(|| format!("the table names no tools; {FORMS}"))?;
            (
                names(tools)?,
                count(table, "max_calls")?,
                count(table, "concurrency")?,
            )
        }
        _ => return Err(FORMS.to_owned()),
    };
    let mut calls = ToolCalls::new(tools).map_err(|e| e.to_string())?;
    if let Some(most) = max_calls {
        calls = calls.max_calls(most).map_err(|e| e.to_string())?;
    }
    if let Some(most) = concurrency {
        calls = calls.concurrency(most).map_err(|e| e.to_string())?;
    }
    Ok(calls)
}

/// Why `store` is not a store a tool may name, and how to declare it.
fn unknown_store(store: &str, declared: &BTreeMap<String, StoreConfig>) -> String {
    let known = declared
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if known.is_empty() {
        format!("no store is named {store:?}; declare it with a [store.{store}] table")
    } else {
        format!(
            "no store is named {store:?} (declared: {known}); declare it with a [store.{store}] table"
        )
    }
}

/// A tool's `cache` time to live: a duration from 1 s to the cache's
/// longest.
fn cache_ttl(text: &str, err: &KeyError<'_>) -> Result<std::time::Duration, ManifestError> {
    match crate::duration::parse(text) {
        Ok(ttl) if !ttl.is_zero() && ttl <= crate::result_cache::MAX_TTL => Ok(ttl),
        _ => Err(err(
            "cache",
            format!("{text:?} is not a duration between 1s and 24h; write e.g. cache = \"5m\""),
        )),
    }
}
