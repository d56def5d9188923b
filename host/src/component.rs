//! One component as the operator configured it: its file, what it may
//! touch ([`Grants`]) and use ([`Limits`]), when a person must approve its
//! calls, whether its results are reused, and what MCP clients must be able
//! to do to call it. Built from a manifest's `[[tool]]` entry, or in code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::grants::Grants;
use crate::limits::Limits;
use crate::registry::verify::Policy;
use crate::registry::{Digest, OciRef};

/// One `[[tool]]` entry: a component and what it may do.
#[derive(Debug, Clone)]
pub struct ComponentConfig {
    /// Where the component comes from: a file, or a registry.
    pub source: ComponentSource,
    /// The signatures a registry component must carry to be loaded.
    pub verify: Policy,
    /// What it may touch.
    pub grants: Grants,
    /// What it may use.
    pub limits: Limits,
    /// When a person must approve a call first.
    pub approval: Approval,
    /// How long results of its read-only, idempotent tools are reused for
    /// identical calls (default: never).
    pub cache: Option<Duration>,
    /// What an MCP client must be able to do for its tools to work (say,
    /// answer a tool's questions): a client that did not declare one of
    /// these is refused the call (MCP's `MissingRequiredClientCapability`,
    /// −32021) rather than the tool failing halfway.
    pub client_capabilities: BTreeSet<ClientCapability>,
    /// The scopes a caller of `toolhost serve` must hold to see and call
    /// its tools, when the server tells callers apart (`[serve.auth]`);
    /// `None`: `tools:NAME` for each tool NAME (which `tools:*` holds).
    pub scopes: Option<Vec<String>>,
    /// The operator's word on whether running its tools twice does harm,
    /// which overrides the tools' own hints: `Some(true)`, `toolhost
    /// serve` runs again a durable task whose replica died instead of
    /// marking it failed; `Some(false)`, it never does, whatever the hints
    /// say; `None`, each tool's `idempotent` hint decides.
    pub idempotent: Option<bool>,
    /// Whether a call of its tools becomes a durable task for an MCP client
    /// that declared the tasks extension (default: never).
    pub task_support: TaskSupport,
}

impl ComponentConfig {
    /// A component at `path` with no grants, default limits, no approval
    /// and no result cache.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self::from_source(ComponentSource::File(path.into()))
    }

    /// The component `reference` names in a registry, with no grants,
    /// default limits, no approval and no result cache. Loading pulls it
    /// (by digest, checked) unless the cache holds it.
    pub fn registry(reference: OciRef) -> Self {
        Self::from_source(ComponentSource::Registry(reference))
    }

    /// A component from `source`, with no grants, default limits, no
    /// approval and no result cache.
    pub fn from_source(source: ComponentSource) -> Self {
        Self {
            source,
            verify: Policy::None,
            grants: Grants::none(),
            limits: Limits::default(),
            approval: Approval::Never,
            cache: None,
            client_capabilities: BTreeSet::new(),
            scopes: None,
            idempotent: None,
            task_support: TaskSupport::Forbidden,
        }
    }

    /// Require MCP clients to have declared `capability` to call its tools.
    pub fn client_capability(mut self, capability: ClientCapability) -> Self {
        self.client_capabilities.insert(capability);
        self
    }

    /// Reuse the results of its read-only, idempotent tools for `ttl`.
    /// Loading refuses it for a component that may write or holds
    /// secrets, and for one without such tools.
    pub fn cache(mut self, ttl: Duration) -> Self {
        self.cache = Some(ttl);
        self
    }

    /// Require callers to hold `scopes` to see and call its tools (an empty
    /// list: any caller the server accepts).
    pub fn scopes(mut self, scopes: Vec<String>) -> Self {
        self.scopes = Some(scopes);
        self
    }

    /// Declare whether running its tools twice does harm, whatever their
    /// hints say (see [`ComponentConfig::idempotent`]).
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = Some(idempotent);
        self
    }

    /// Let calls of its tools become durable tasks (see [`TaskSupport`]).
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.task_support = support;
        self
    }

    /// The scopes a caller must hold to call its tool `name`.
    #[must_use]
    pub fn scopes_for(&self, name: &str) -> Vec<String> {
        self.scopes
            .clone()
            .unwrap_or_else(|| vec![format!("tools:{name}")])
    }

    /// Replace the grants.
    pub fn grants(mut self, grants: Grants) -> Self {
        self.grants = grants;
        self
    }

    /// Replace the limits.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Require signatures of a registry component: loading refuses it,
    /// before anything of it runs, unless they satisfy `policy`.
    pub fn verify(mut self, policy: Policy) -> Self {
        self.verify = policy;
        self
    }

    /// Replace the approval policy.
    pub fn approval(mut self, approval: Approval) -> Self {
        self.approval = approval;
        self
    }

    /// A short name for messages: the component's file name, or its
    /// repository with its tag (and digest, once pinned).
    pub fn label(&self) -> String {
        match &self.source {
            ComponentSource::File(path) => path.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            ),
            ComponentSource::Registry(reference) => short_reference(reference),
            ComponentSource::Pinned(pinned) => short_reference(&pinned.reference),
        }
    }

    /// The component's file, when it comes from one.
    pub fn path(&self) -> Option<&Path> {
        match &self.source {
            ComponentSource::File(path) => Some(path),
            _ => None,
        }
    }
}

/// `acme/calc:1.2@sha256:1a2b3c4d5e6f` (the registry left out; it is in
/// the full reference).
fn short_reference(reference: &OciRef) -> String {
    let mut label = reference.repository().to_owned();
    if let Some(tag) = reference.tag() {
        label = format!("{label}:{tag}");
    }
    if let Some(digest) = reference.digest() {
        label = format!("{label}@sha256:{}", digest.short());
    }
    label
}

/// Where a component comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ComponentSource {
    /// A file on this disk.
    File(PathBuf),
    /// A registry reference, not pulled yet: loading resolves and pulls
    /// it, and checks its signature policy.
    Registry(OciRef),
    /// A registry component pulled and checked: its layer, kept in the
    /// blob store, is what runs.
    Pinned(Box<PinnedComponent>),
}

/// A registry component as loading pinned it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct PinnedComponent {
    /// The reference, with the manifest digest it resolved to.
    pub reference: OciRef,
    /// The digest of its component layer: what is compiled and run.
    pub layer: Digest,
    /// Where the layer is kept. Compiling it hashes it again and refuses
    /// it unless it is `layer`.
    pub blob: PathBuf,
    /// Who signed it, when a policy asked.
    pub signer: Option<String>,
}

impl PinnedComponent {
    /// A pinned component.
    pub fn new(reference: OciRef, layer: Digest, blob: PathBuf) -> Self {
        Self {
            reference,
            layer,
            blob,
            signer: None,
        }
    }
}

/// When a call needs a person's approval before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Approval {
    /// Never ask. The default.
    #[default]
    Never,
    /// Ask for every call.
    Always,
    /// Ask for tools whose spec carries the `destructive` hint.
    Destructive,
}

/// Whether calls of a component's tools from MCP clients become durable
/// tasks (the `io.modelcontextprotocol/tasks` extension): the manifest's
/// `task_support`, named as MCP names a tool's `execution.taskSupport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum TaskSupport {
    /// Calls answer in their request. The default.
    #[default]
    Forbidden,
    /// A call from a client that declared the tasks extension becomes a
    /// task; other clients' calls answer in their request.
    Optional,
    /// Calls must be tasks: a client that did not declare the tasks
    /// extension is refused the call (−32021), rather than holding a
    /// request open for as long as the call runs.
    Required,
}

/// Something an MCP client declares it can do (its `capabilities` at
/// `initialize`, or a 2026-07-28 request's `_meta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ClientCapability {
    /// Answer questions put to the person (`elicitation/create`).
    Elicitation,
    /// Ask its own model for a completion (`sampling/createMessage`).
    Sampling,
    /// Tell the server its roots (`roots/list`).
    Roots,
}

impl ClientCapability {
    /// The capability's name in MCP.
    pub fn name(self) -> &'static str {
        match self {
            Self::Elicitation => "elicitation",
            Self::Sampling => "sampling",
            Self::Roots => "roots",
        }
    }
}
