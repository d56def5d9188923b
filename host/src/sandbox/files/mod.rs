//! Granted directories (`wasi:filesystem`): the grant, the per-call budget
//! of open handles, the disk quota, and their refusals.
//!
//! - **The grant** is a directory opened once, at load, and held: each call
//!   reopens that same directory through the held descriptor
//!   (`/proc/self/fd/N`), never by path, so swapping the path for a symlink
//!   after load widens nothing.
//! - **Open handles** are the process's descriptors, shared by every tool and
//!   the host itself. One call may hold [`MAX_OPEN_FILES`] open files at
//!   once — a file stays counted while its descriptor or any stream made
//!   from it lives — and every one also comes from its component's share of
//!   the process-wide pool (`budget`), which keeps a reserve for the host:
//!   one component can never starve another or the agent loop. Directory
//!   listings are read whole by wasmtime-wasi, so a call may hold only
//!   [`MAX_LISTINGS`] at once.
//! - **Only regular files and directories are opened.** A FIFO, socket or
//!   device in a granted directory is refused before it is opened: opening a
//!   FIFO blocks a host thread until a writer appears, past any deadline.
//!   (Should the host side swap a FIFO in between the check and the open,
//!   that one open can still block a blocking-pool thread; a tool cannot
//!   create FIFOs itself.)
//! - **Disk quota** (`quota`): a read-write grant may hold at most its quota (default
//!   [`crate::grants::DEFAULT_QUOTA`]) of files, counted across all calls. Writes are
//!   charged before they happen (stream writes in full, positional writes
//!   and `set-size` by the growth they cause, each new file or directory
//!   `quota::ENTRY_COST`); when the count would pass the quota the directory is
//!   measured again (at most once a second, by one call at a time), so
//!   overwrites and deletions are credited, and a write that still does not
//!   fit fails with `quota`. Renames and links between two grants are
//!   refused (`cross-device`): a file written under one grant's quota cannot
//!   be moved into another's.

mod linker;
mod quota;
mod streams;

use std::collections::HashMap;
use std::os::fd::AsRawFd as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

pub(crate) use self::linker::add_to_linker;
use self::quota::{DiskQuota, measure};
use super::budget::{FdPermit, FdShare};
use super::refusal::Refusals;
use crate::grants::{FileMode, Grants};

/// Files one call may hold open at once.
pub(crate) const MAX_OPEN_FILES: usize = 64;

/// Directory listings one call may hold at once: wasmtime-wasi reads a
/// listing whole into host memory.
pub(crate) const MAX_LISTINGS: usize = 4;

/// The granted directories of one component, opened at load, and its share
/// of the process's descriptors (for files and HTTP connections).
#[derive(Debug)]
pub(crate) struct ComponentFiles {
    dirs: Vec<Arc<GrantedDir>>,
    pub(crate) descriptors: Arc<FdShare>,
}

impl Default for ComponentFiles {
    fn default() -> Self {
        Self {
            dirs: Vec::new(),
            descriptors: FdShare::new(),
        }
    }
}

#[derive(Debug)]
struct GrantedDir {
    guest: String,
    mode: FileMode,
    /// Held from load: every call reopens this directory, not the path.
    handle: std::fs::File,
    /// The path as granted, for messages.
    host: PathBuf,
    quota: Option<DiskQuota>,
}

impl GrantedDir {
    /// A path that names the held directory itself.
    fn reopen_path(&self) -> PathBuf {
        let by_fd = PathBuf::from(format!("/proc/self/fd/{}", self.handle.as_raw_fd()));
        if by_fd.is_dir() {
            by_fd
        } else {
            self.host.clone()
        }
    }
}

impl ComponentFiles {
    /// Open and hold every granted directory, and measure what read-write
    /// ones already hold.
    ///
    /// # Errors
    ///
    /// When a granted directory cannot be opened.
    pub(crate) fn open(grants: &Grants) -> std::io::Result<Self> {
        let mut dirs = Vec::new();
        for grant in grants.files() {
            let handle = std::fs::File::open(&grant.host).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot open granted directory {}: {e}",
                        grant.host.display()
                    ),
                )
            })?;
            let mut dir = GrantedDir {
                guest: grant.guest.clone(),
                mode: grant.mode,
                handle,
                host: grant.host.clone(),
                quota: None,
            };
            // Fail closed: reopening by path would let a swapped path widen
            // the grant.
            if !dir.reopen_path().is_dir() {
                return Err(std::io::Error::other(format!(
                    "cannot reopen granted directory {} through its handle: toolhost needs /proc (Linux)",
                    dir.host.display()
                )));
            }
            if let Some(limit) = grant.quota {
                dir.quota = Some(DiskQuota::new(limit, measure(&dir.reopen_path())));
            }
            dirs.push(Arc::new(dir));
        }
        Ok(Self {
            dirs,
            descriptors: FdShare::new(),
        })
    }

    /// Grant the directories to one call.
    ///
    /// # Errors
    ///
    /// When a directory cannot be reopened, or the host has no descriptors
    /// to spare for it.
    pub(crate) fn grant(
        &self,
        wasi: &mut WasiCtxBuilder,
        refusals: Refusals,
    ) -> wasmtime::Result<CallFiles> {
        let mut preopens = Vec::with_capacity(self.dirs.len());
        for dir in &self.dirs {
            let permit = self.descriptors.try_acquire().ok_or_else(|| {
                wasmtime::format_err!("the host's descriptor reserve for tools is in use")
            })?;
            preopens.push(permit);
            let perms = match dir.mode {
                FileMode::ReadOnly => FsPerms::ReadOnly,
                FileMode::ReadWrite => FsPerms::ReadWrite,
            };
            wasi.preopened_dir(dir.reopen_path(), &dir.guest, perms)?;
        }
        Ok(CallFiles {
            dirs: self.dirs.clone(),
            descriptors: self.descriptors.clone(),
            grant_of: HashMap::new(),
            held: HashMap::new(),
            open: Arc::default(),
            listings: HashMap::new(),
            _preopens: preopens,
            refusals,
        })
    }
}

/// The files side of one call: which grant each descriptor belongs to, and
/// the handles it holds.
pub(crate) struct CallFiles {
    dirs: Vec<Arc<GrantedDir>>,
    descriptors: Arc<FdShare>,
    /// The grant (index into `dirs`) of each descriptor the tool holds.
    grant_of: HashMap<u32, usize>,
    /// Descriptors this call opened; streams made from one share its entry.
    held: HashMap<u32, Arc<OpenFile>>,
    /// Files open now, counted until the last holder of each goes.
    open: Arc<AtomicUsize>,
    /// Directory listings held now, each with its descriptor.
    listings: HashMap<u32, FdPermit>,
    _preopens: Vec<FdPermit>,
    refusals: Refusals,
}

/// One open file of a call: a descriptor from the component's share, and a
/// place in the call's count, both given back when the descriptor and every
/// stream made from it are gone.
struct OpenFile {
    _permit: FdPermit,
    open: Arc<AtomicUsize>,
}

impl Drop for OpenFile {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl CallFiles {
    /// No directories: for `tools()`.
    pub(crate) fn none(files: &ComponentFiles, refusals: Refusals) -> Self {
        Self {
            dirs: Vec::new(),
            descriptors: files.descriptors.clone(),
            grant_of: HashMap::new(),
            held: HashMap::new(),
            open: Arc::default(),
            listings: HashMap::new(),
            _preopens: Vec::new(),
            refusals,
        }
    }

    /// A descriptor from the component's share, or the refusal.
    fn descriptor(&self) -> Result<FdPermit, ErrorCode> {
        self.descriptors.try_acquire().ok_or_else(|| {
            self.refusals.deny(
                "opening a file: the host's descriptor reserve for tools is in use; retry shortly",
            );
            ErrorCode::InsufficientMemory
        })
    }

    /// One more open file for this call, or the refusal.
    fn take_file(&mut self) -> Result<Arc<OpenFile>, ErrorCode> {
        if self.open.load(Ordering::Acquire) >= MAX_OPEN_FILES {
            self.refusals.deny(format!(
                "opening more than {MAX_OPEN_FILES} files at once (the per-call limit; close some, and their streams, first)"
            ));
            return Err(ErrorCode::InsufficientMemory);
        }
        let permit = self.descriptor()?;
        self.open.fetch_add(1, Ordering::AcqRel);
        Ok(Arc::new(OpenFile {
            _permit: permit,
            open: self.open.clone(),
        }))
    }

    /// One more directory listing for this call, or the refusal.
    fn take_listing(&mut self) -> Result<FdPermit, ErrorCode> {
        if self.listings.len() >= MAX_LISTINGS {
            self.refusals.deny(format!(
                "holding more than {MAX_LISTINGS} directory listings at once (the per-call limit; finish one first)"
            ));
            return Err(ErrorCode::InsufficientMemory);
        }
        self.descriptor()
    }

    fn dir_of(&self, rep: u32) -> Option<&Arc<GrantedDir>> {
        self.grant_of.get(&rep).map(|&i| &self.dirs[i])
    }

    /// Refuses an operation between descriptors of two different grants.
    fn same_grant(&self, a: u32, b: u32) -> Result<(), ErrorCode> {
        match (self.grant_of.get(&a), self.grant_of.get(&b)) {
            (Some(x), Some(y)) if x == y => Ok(()),
            _ => Err(ErrorCode::CrossDevice),
        }
    }

    /// Charge `bytes` to the quota of descriptor `rep`'s grant.
    fn charge(&self, rep: u32, bytes: u64, what: &str) -> Result<(), ErrorCode> {
        let Some(dir) = self.dir_of(rep) else {
            // Every descriptor comes from a preopen or open-at, both
            // recorded; an unknown one fails closed.
            return Err(ErrorCode::Io);
        };
        charge(dir, bytes, what, &self.refusals)
    }
}

/// Charge `bytes` to `dir`'s quota, if it has one; past it, the refusal
/// (`quota`). `what` says what the tool was doing, for the refusal.
fn charge(dir: &GrantedDir, bytes: u64, what: &str, refusals: &Refusals) -> Result<(), ErrorCode> {
    let Some(quota) = &dir.quota else {
        return Ok(());
    };
    if quota.try_charge(bytes, || dir.reopen_path()) {
        return Ok(());
    }
    refusals.deny(format!(
        "{what} in {}: past its disk quota of {} (raise `quota` on that files entry)",
        dir.guest,
        bytesize::ByteSize::b(quota.limit()).display().iec()
    ));
    Err(ErrorCode::Quota)
}
