//! `serve --watch`: reload the manifest and its components when they change.
//!
//! The new version loads beside the running one; only when every component
//! has loaded is it swapped in, in one step, so a call sees either the old
//! tools or the new ones, never a mix. Calls already running finish on the
//! version they started with. A version that fails to load is logged and
//! the old one keeps serving. MCP clients are told the tool list changed.
//!
//! Directories are watched rather than files: editors and build tools
//! replace a file by renaming a new one over it, which a watch on the old
//! file would miss.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use super::{ServeError, Shared};
use crate::describe::Change;
use crate::manifest::Manifest;
use crate::sandbox::SandboxOptions;
use crate::tool_host::{LoadError, LockMode, Pinned, ToolHost};

/// How long the files must stay quiet before a reload: a build writes a
/// component in several steps, and an editor saves in more than one.
const QUIET: Duration = Duration::from_millis(300);

/// The longest a reload waits for the files to settle.
const SETTLE_AT_MOST: Duration = Duration::from_secs(3);

/// How many times one change is read again when the files moved during
/// the read.
const RELOADS_PER_CHANGE: usize = 3;

/// Watches until dropped.
#[derive(Debug)]
pub struct Watcher {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Start watching `manifest` and its components, reloading into `shared`.
///
/// # Errors
///
/// When the platform cannot watch files.
pub fn watch(
    manifest: Manifest,
    options: SandboxOptions,
    lock_mode: LockMode,
    shared: Shared,
) -> Result<Watcher, ServeError> {
    let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<PathBuf>();
    let mut watcher: RecommendedWatcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Ok(event) = event
                && !event.kind.is_access()
            {
                for path in event.paths {
                    let _ = changed.send(path);
                }
            }
        })
        .map_err(|e| {
            ServeError::Transport(format!(
                "cannot watch files for {}: {e}",
                shared.fixes().watch
            ))
        })?;
    let manifest_path = absolute(&manifest.path);
    // What identities were read at start, to say when a reload changes them.
    let fixed_at_start = read_at_start(&manifest);
    let mut watched = Watched::default();
    watched.update(&mut watcher, &manifest_path, &manifest);
    let task = tokio::spawn(async move {
        // Keep the watcher alive as long as the task.
        let mut watcher = watcher;
        while let Some(path) = changes.recv().await {
            if !watched.files.contains(&path) {
                continue;
            }
            // Let the writes settle: wait until no watched file changes for
            // QUIET, but no longer than SETTLE_AT_MOST (other files in the
            // same directory, a log being written, never hold it up).
            let settled_by = tokio::time::Instant::now() + SETTLE_AT_MOST;
            let mut quiet_until = tokio::time::Instant::now() + QUIET;
            while let Ok(Some(changed)) =
                tokio::time::timeout_at(quiet_until.min(settled_by), changes.recv()).await
            {
                if watched.files.contains(&changed) {
                    quiet_until = tokio::time::Instant::now() + QUIET;
                }
            }
            tracing::info!(path = %path.display(), "a watched file changed; reloading");
            // A write still landing while the reload reads (a writer
            // stalled between truncating a file and filling it) has had its
            // events consumed above: compare what the files were before
            // the read with what they are after, and read again if they
            // moved, a few times at most (later changes bring new events).
            for _ in 0..RELOADS_PER_CHANGE {
                // The lock file is left out: a reload may write it itself.
                let lock = manifest.lock_path().map(|p| absolute(&p));
                let before = Fingerprint::of_all_but(&watched.files, lock.as_deref());
                let reloaded = reload(&manifest_path, &options, &lock_mode).await;
                if let Some(new) = take(&shared, reloaded, &fixed_at_start) {
                    watched.update(&mut watcher, &manifest_path, &new);
                }
                if before.still_current() {
                    break;
                }
                tracing::info!("a watched file changed while reloading; reloading again");
            }
        }
    });
    Ok(Watcher { task })
}

/// Swap in what a reload loaded, or log why it failed; the manifest, when
/// the new version was swapped in.
fn take(
    shared: &Shared,
    reloaded: Result<(Manifest, ToolHost, Pinned), ServeError>,
    fixed_at_start: &str,
) -> Option<Manifest> {
    match reloaded {
        Ok((manifest, host, pinned)) => {
            shared.metrics().registry(&pinned.report);
            swap_in(shared, host, &manifest, fixed_at_start).then_some(manifest)
        }
        Err(e) => {
            shared.metrics().reload(false);
            if matches!(e, ServeError::Load(LoadError::Verify(_))) {
                shared.metrics().verify_failure();
            }
            tracing::error!(error = %format!("{e:#}"), "reload failed; the previous version keeps serving");
            None
        }
    }
}

/// What of `manifest` is read only at start (`[serve.auth]`,
/// `[serve.sessions]`, `[serve.tasks]`), to say when a reload changed it.
/// (Their `Debug` hides secrets; the text is compared, never shown.)
fn read_at_start(manifest: &Manifest) -> String {
    format!(
        "{:?} {:?} {:?}",
        manifest.serve.auth, manifest.serve.sessions, manifest.serve.tasks
    )
}

/// Swap `host`, loaded from `manifest`, in for the running version, unless
/// the identity settings the server started with refuse it (a store scoped
/// by a key they do not bind); log what changed, and say when what is set
/// up at start (`[serve.auth]`, `[serve.sessions]`, `[serve.tasks]`; as
/// it was then: `fixed_at_start`) changed, which takes a restart. Whether
/// it was swapped in.
fn swap_in(shared: &Shared, host: ToolHost, manifest: &Manifest, fixed_at_start: &str) -> bool {
    let tools = host.specs().count();
    let old = shared.host();
    if let Err(e) = shared.replace(host.clone()) {
        shared.metrics().reload(false);
        tracing::error!(error = %e, "reload refused; the previous version keeps serving");
        return false;
    }
    log_changes(&old, &host);
    if read_at_start(manifest) != fixed_at_start {
        tracing::warn!(
            "[serve.auth], [serve.sessions] or [serve.tasks] changed; identities, sessions and the task store are set up at start: restart the server to use the new settings"
        );
    }
    shared.metrics().reload(true);
    tracing::warn!(tools, "reloaded: new calls use the new version");
    true
}

/// Log, tool by tool, what the new version may touch that the old one
/// could not, and the reverse, in `toolhost check`'s words.
fn log_changes(old: &ToolHost, new: &ToolHost) {
    for (tool, change) in crate::describe::changes(old, new) {
        match change {
            Change::Added(lines) => {
                tracing::warn!(%tool, grants = %lines.join("; "), "reload adds a tool");
            }
            Change::Removed => tracing::warn!(%tool, "reload removes a tool"),
            Change::Changed { gone, new } => {
                for line in gone {
                    tracing::warn!(%tool, was = %line, "reload takes away");
                }
                for line in new {
                    tracing::warn!(%tool, now = %line, "reload grants");
                }
            }
        }
    }
}

async fn reload(
    path: &Path,
    options: &SandboxOptions,
    lock_mode: &LockMode,
) -> Result<(Manifest, ToolHost, Pinned), ServeError> {
    let manifest = Manifest::load(path)?;
    let (host, pinned) = ToolHost::load_manifest(&manifest, options.clone(), lock_mode).await?;
    Ok((manifest, host, pinned))
}

/// The files whose changes trigger a reload, and the directories watched
/// for them.
#[derive(Default)]
struct Watched {
    files: BTreeSet<PathBuf>,
    dirs: BTreeSet<PathBuf>,
}

impl Watched {
    fn update(
        &mut self,
        watcher: &mut RecommendedWatcher,
        manifest_path: &Path,
        manifest: &Manifest,
    ) {
        // The lock file too: a changed pin is a changed component. A
        // reload that writes it changes nothing the next one would.
        let files: BTreeSet<PathBuf> = std::iter::once(manifest_path.to_path_buf())
            .chain(manifest.lock_path().map(|p| absolute(&p)))
            .chain(
                manifest
                    .components
                    .iter()
                    .filter_map(|c| c.path().map(absolute)),
            )
            .collect();
        let dirs: BTreeSet<PathBuf> = files
            .iter()
            .filter_map(|f| f.parent().map(Path::to_path_buf))
            .collect();
        for gone in self.dirs.difference(&dirs) {
            let _ = watcher.unwatch(gone);
        }
        for dir in dirs.difference(&self.dirs) {
            if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot watch this directory; changes in it will not reload");
            }
        }
        self.files = files;
        self.dirs = dirs;
    }
}

/// What each watched file was (its stamp, or absent) when a reload began
/// to read them.
#[derive(Debug, PartialEq, Eq)]
struct Fingerprint(Vec<(PathBuf, Option<Seen>)>);

/// A file's length and modification time.
type Seen = (u64, Option<std::time::SystemTime>);

impl Fingerprint {
    /// The fingerprint of `files` other than `left_out`.
    fn of_all_but(files: &BTreeSet<PathBuf>, left_out: Option<&Path>) -> Self {
        let files = files
            .iter()
            .filter(|f| Some(f.as_path()) != left_out)
            .cloned()
            .collect();
        Self::of(&files)
    }

    fn of(files: &BTreeSet<PathBuf>) -> Self {
        Self(
            files
                .iter()
                .map(|f| {
                    let seen = std::fs::metadata(f)
                        .ok()
                        .map(|m| (m.len(), m.modified().ok()));
                    (f.clone(), seen)
                })
                .collect(),
        )
    }

    /// Whether the same files are still what they were.
    fn still_current(&self) -> bool {
        let files = self.0.iter().map(|(f, _)| f.clone()).collect();
        Self::of(&files) == *self
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fingerprint_sees_a_rewrite_a_new_file_and_a_removal() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("toolhost.toml");
        let lock = dir.path().join("toolhost.lock");
        std::fs::write(&manifest, "a").unwrap();
        let files = BTreeSet::from([manifest.clone(), lock.clone()]);
        let seen = Fingerprint::of(&files);
        assert!(seen.still_current());
        // Same length, later time: what a stalled writer leaves behind.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&manifest, "b").unwrap();
        assert!(!seen.still_current());
        let seen = Fingerprint::of(&files);
        std::fs::write(&lock, "").unwrap();
        assert!(!seen.still_current());
        let seen = Fingerprint::of(&files);
        std::fs::remove_file(&manifest).unwrap();
        assert!(!seen.still_current());
    }
}
