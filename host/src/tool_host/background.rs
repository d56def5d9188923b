//! Loading while serving: the components whose compiled code is cached,
//! and small ones, load before the host is returned; the others compile in
//! the background, smallest first and a few at a time, and each time one is
//! ready a new version of the tools (every component ready so far) is
//! handed out. `serve` answers `tools/list` at once with what is ready and
//! tells clients the list changed as each version arrives.
//!
//! Every version shares one engine, the instance bounds and each
//! component's concurrency gate and result cache, so a call keeps the
//! limits it would have under one host, whichever version it started on.
//! A component that calls tools (`call_tools`) joins only with the last
//! version, when every tool it may call is there: its description lists
//! them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::sync::{Semaphore, mpsc};

use super::{Base, LoadError, Part, Pinned, ToolHost, Tools, calling, describe};
use crate::component::{ComponentConfig, ComponentSource};
use crate::manifest::Manifest;
use crate::sandbox::SandboxOptions;
use crate::tool_host::LockMode;

/// How many components compile at once in the background at most.
/// Cranelift already spreads one component's functions over every core;
/// two at once fill the stretches where one compile runs on a single
/// thread, more would only share the cores out and hold more memory (a
/// Python component's compile holds hundreds of MiB).
const COMPILING_AT_ONCE: usize = 2;

/// The versions of the tools as the components loading in the background
/// become ready.
#[derive(Debug)]
pub struct Loading {
    versions: mpsc::UnboundedReceiver<Result<ToolHost, LoadError>>,
    pending: Arc<AtomicUsize>,
}

impl Loading {
    /// Nothing left to load.
    fn done() -> Self {
        let (_, versions) = mpsc::unbounded_channel();
        Self {
            versions,
            pending: Arc::default(),
        }
    }

    /// The next version of the tools: those of every component ready so
    /// far, in manifest order. The last version holds every component;
    /// `None` after it, or after an error (a component that does not
    /// compile, link or describe its tools, or tools that clash): then
    /// nothing more loads.
    pub async fn next(&mut self) -> Option<Result<ToolHost, LoadError>> {
        self.versions.recv().await
    }

    /// How many components are not in the latest version handed out yet
    /// (compiling, or waiting for their turn).
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }
}

impl ToolHost {
    /// Load `manifest` as [`ToolHost::load_manifest`] does, but return once
    /// the components whose compiled code is cached, and uncached ones up
    /// to `compile_now` bytes in all (in manifest order), are loaded. The
    /// rest compile in the background, smallest first, a few at a time:
    /// [`Loading::next`] hands out each new version of the tools.
    ///
    /// A manifest whose registry components were just pulled, or whose
    /// lock file changes, loads whole before this returns: its new layers
    /// are kept only if everything loads.
    ///
    /// # Errors
    ///
    /// A [`LoadError`] from pinning or from the components loaded before
    /// returning; the others' errors come from [`Loading::next`].
    pub async fn load_in_background(
        manifest: &Manifest,
        options: SandboxOptions,
        mode: &LockMode,
        compile_now: u64,
    ) -> Result<(Self, Pinned, Loading), LoadError> {
        let (mut pinned, fetched) = Self::pin_staged(manifest, &options, mode).await?;
        if pinned.changed || !fetched.staged_layers(&pinned.components).is_empty() {
            let (host, pinned) =
                Self::load_and_lock(manifest, options, mode, pinned, fetched).await?;
            return Ok((host, pinned, Loading::done()));
        }
        let mut components = std::mem::take(&mut pinned.components);
        // Nothing is staged: this only points pinned components at the
        // layers already in the blob store.
        fetched.commit(components.iter_mut())?;
        let base = Base::new(options, &components)?;
        let (now, later) = split(&base, &components, compile_now).await?;
        let mut parts: Vec<Option<Part>> = components.iter().map(|_| None).collect();
        let configs: Vec<ComponentConfig> = now.iter().map(|&i| components[i].clone()).collect();
        let compiled = super::compile_all(&base.sandbox, &configs).await;
        for ((i, config), joined) in now.into_iter().zip(configs).zip(compiled) {
            parts[i] = Some(describe(config, joined).await?);
        }
        let first = assemble(&base, &parts, later.is_empty())?;
        if later.is_empty() {
            return Ok((first, pinned, Loading::done()));
        }
        let pending = Arc::new(AtomicUsize::new(later.len()));
        let (send, versions) = mpsc::unbounded_channel();
        tokio::spawn(load_rest(
            base,
            components,
            parts,
            later,
            pending.clone(),
            send,
        ));
        Ok((first, pinned, Loading { versions, pending }))
    }
}

/// The indices of `components` to load now (cached, or small enough to fit
/// in `compile_now` bytes of compiling), and the others, smallest first.
async fn split(
    base: &Base,
    components: &[ComponentConfig],
    compile_now: u64,
) -> Result<(Vec<usize>, Vec<usize>), LoadError> {
    let sandbox = base.sandbox.clone();
    let configs = components.to_vec();
    // Hashing a large component to find its cache entry reads it: off the
    // async threads.
    let cached_and_sizes = tokio::task::spawn_blocking(move || {
        configs
            .iter()
            .map(|c| (sandbox.is_cached(c), size(c)))
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| LoadError::Engine(format!("looking up the compile cache panicked: {e}")))?;
    let mut budget = compile_now;
    let mut now = Vec::new();
    let mut later = Vec::new();
    for (i, (cached, size)) in cached_and_sizes.into_iter().enumerate() {
        if cached {
            now.push(i);
        } else if size <= budget {
            budget -= size;
            now.push(i);
        } else {
            later.push((size, i));
        }
    }
    later.sort_unstable();
    Ok((now, later.into_iter().map(|(_, i)| i).collect()))
}

/// The size of `config`'s component in bytes (0 when it cannot be read:
/// loading it says why).
fn size(config: &ComponentConfig) -> u64 {
    let path = match &config.source {
        ComponentSource::File(path) => path,
        ComponentSource::Pinned(pinned) => &pinned.blob,
        _ => return 0,
    };
    std::fs::metadata(path).map_or(0, |m| m.len())
}

/// The tools of the components in `parts` that are ready, in manifest
/// order; those that call tools only when `complete`.
fn assemble(base: &Base, parts: &[Option<Part>], complete: bool) -> Result<ToolHost, LoadError> {
    let mut tools = Tools::default();
    for part in parts.iter().flatten() {
        if complete || part.config.grants.tool_calls().is_none() {
            tools.add(part)?;
        }
    }
    calling::resolve(&mut tools, base.max_in_flight)?;
    Ok(base.host(tools))
}

/// Compile the components `later` names, smallest first and at most
/// [`COMPILING_AT_ONCE`] at a time, and send a new version of the tools as
/// each is ready, until all are or one fails (its error is sent last), or
/// nobody listens any more.
async fn load_rest(
    base: Base,
    components: Vec<ComponentConfig>,
    mut parts: Vec<Option<Part>>,
    later: Vec<usize>,
    pending: Arc<AtomicUsize>,
    send: mpsc::UnboundedSender<Result<ToolHost, LoadError>>,
) {
    let turns = Arc::new(Semaphore::new(COMPILING_AT_ONCE));
    // The semaphore is fair: compiles start in the order queued here.
    let mut compiles: FuturesUnordered<_> = later
        .into_iter()
        .map(|i| {
            let turns = turns.clone();
            let sandbox = base.sandbox.clone();
            let config = components[i].clone();
            async move {
                let _turn = turns.acquire_owned().await.expect("never closed");
                let compiled = tokio::task::spawn_blocking(move || {
                    let started = std::time::Instant::now();
                    let loaded = sandbox.load(&config);
                    (loaded, started.elapsed())
                })
                .await;
                (i, compiled)
            }
        })
        .collect();
    while let Some((i, compiled)) = compiles.next().await {
        let version = describe(components[i].clone(), compiled)
            .await
            .and_then(|part| {
                parts[i] = Some(part);
                let left = pending.load(Ordering::Acquire) - 1;
                let version = assemble(&base, &parts, left == 0);
                pending.store(left, Ordering::Release);
                version
            });
        let failed = version.is_err();
        if send.send(version).is_err() || failed {
            return;
        }
    }
}
