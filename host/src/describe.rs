//! What a component may touch, in words: one line per grant, limit and
//! policy. `toolhost check` prints these lines; a reload (`serve --watch`)
//! logs the lines that changed, tool by tool, so an operator sees exactly
//! what a new manifest gives or takes away before it serves a call.

use std::collections::{BTreeMap, BTreeSet};

use crate::component::{Approval, ComponentConfig};
use crate::grants::FileMode;
use crate::stores::{Backend, Scope};
use crate::tool_host::ToolHost;

/// What `config` may touch and use, a line each, as `toolhost check`
/// prints them (without the indent).
pub fn component_lines(config: &ComponentConfig) -> Vec<String> {
    let mut lines = grant_lines(config);
    lines.push(limit_line(config));
    lines.push(format!("approval: {}", approval(config.approval)));
    if !config.client_capabilities.is_empty() {
        let names: Vec<&str> = config
            .client_capabilities
            .iter()
            .map(|c| c.name())
            .collect();
        lines.push(format!(
            "MCP clients: must declare {} to call it",
            names.join(", ")
        ));
    }
    lines
}

fn grant_lines(config: &ComponentConfig) -> Vec<String> {
    let grants = &config.grants;
    let mut lines = Vec::new();
    if grants.is_none() {
        lines.push(
            "grants: none (computes only: no files, network, environment or config)".to_owned(),
        );
    }
    for file in grants.files() {
        let access = match file.mode {
            FileMode::ReadOnly => "read",
            FileMode::ReadWrite => "read and write",
        };
        let quota = file.quota.map_or_else(String::new, |quota| {
            format!(" (quota {})", bytesize::ByteSize::b(quota).display().iec())
        });
        lines.push(format!(
            "files: may {access} {} as {}{quota}",
            file.host.display(),
            file.guest
        ));
    }
    for pattern in grants.hosts().patterns() {
        lines.push(format!("http: may request {pattern}"));
    }
    if grants.hosts().patterns().is_empty() {
        lines.push("http: none".to_owned());
    }
    for (name, _) in grants.env_vars() {
        lines.push(format!("env: sees {name}"));
    }
    for store in grants.stores() {
        lines.push(store_line(store));
    }
    for (key, secret) in grants.config_keys() {
        let secret = if secret {
            " (secret, masked in output and logs)"
        } else {
            ""
        };
        lines.push(format!("config: may read {key}{secret}"));
    }
    lines
}

fn store_line(store: &crate::stores::StoreConfig) -> String {
    let size = |bytes: u64| bytesize::ByteSize::b(bytes).display().iec().to_string();
    let backend = match &store.backend {
        Backend::Embedded { path } => format!("embedded, {}", path.display()),
        Backend::Redis { url, prefix } => format!(
            "redis at {}, keys under {prefix}:{}:",
            crate::stores::redacted(url),
            store.name
        ),
    };
    let scope = match &store.scope {
        Scope::Global => "one namespace for every call".to_owned(),
        Scope::ContextKey(key) => format!("a namespace per `{key}` of the call's context"),
    };
    let quota = &store.quota;
    format!(
        "store: may read and write {} ({backend}; {scope}; at most {} keys and {} per namespace, \
         {} namespaces and {} in all)",
        store.name,
        quota.max_keys,
        size(quota.max_bytes),
        quota.max_namespaces,
        size(quota.max_store_bytes),
    )
}

fn limit_line(config: &ComponentConfig) -> String {
    let limits = &config.limits;
    let size = |bytes: u64| bytesize::ByteSize::b(bytes).display().iec().to_string();
    format!(
        "limits: timeout {}, fuel {}, memory {}, output {}, arguments {}, concurrency {}, ready {}",
        humantime::format_duration(limits.timeout),
        limits.fuel,
        size(limits.memory),
        size(limits.max_output as u64),
        size(limits.max_arguments as u64),
        limits.max_concurrency,
        match limits.ready {
            crate::limits::ReadyInstances::Auto => "auto".to_owned(),
            crate::limits::ReadyInstances::Exactly(n) => n.to_string(),
        }
    )
}

fn approval(approval: Approval) -> &'static str {
    match approval {
        Approval::Never => "never asked",
        Approval::Always => "asked before every call",
        Approval::Destructive => "asked before destructive tools",
    }
}

/// What one tool may touch after a reload, against before.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// A tool that was not served before, and what it may touch.
    Added(Vec<String>),
    /// A tool no longer served.
    Removed,
    /// A tool served before and after, whose grants, limits or policy
    /// changed: the lines gone and the lines new.
    Changed {
        /// Lines `check` printed before and no longer does.
        gone: Vec<String>,
        /// Lines `check` prints now and did not before.
        new: Vec<String>,
    },
}

/// Every tool whose grants, limits or policy differ between `old` and
/// `new`, by name.
pub fn changes(old: &ToolHost, new: &ToolHost) -> BTreeMap<String, Change> {
    // In `check`'s order: a component's lines are shared by its tools.
    let lines_by_tool = |host: &ToolHost| -> BTreeMap<String, std::rc::Rc<Vec<String>>> {
        host.components()
            .flat_map(|(config, tools, _)| {
                let lines = std::rc::Rc::new(component_lines(config));
                tools.iter().map(move |tool| (tool.clone(), lines.clone()))
            })
            .collect()
    };
    let (before, after) = (lines_by_tool(old), lines_by_tool(new));
    let missing_from = |lines: &[String], other: &[String]| -> Vec<String> {
        let other: BTreeSet<&String> = other.iter().collect();
        lines
            .iter()
            .filter(|l| !other.contains(l))
            .cloned()
            .collect()
    };
    let mut changes = BTreeMap::new();
    for (tool, lines) in &after {
        match before.get(tool) {
            None => {
                changes.insert(tool.clone(), Change::Added(lines.to_vec()));
            }
            Some(old) if old != lines => {
                changes.insert(
                    tool.clone(),
                    Change::Changed {
                        gone: missing_from(old, lines),
                        new: missing_from(lines, old),
                    },
                );
            }
            Some(_) => {}
        }
    }
    for tool in before.keys().filter(|tool| !after.contains_key(*tool)) {
        changes.insert(tool.clone(), Change::Removed);
    }
    changes
}
