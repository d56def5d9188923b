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
//! - **Disk quota**: a read-write grant may hold at most its quota (default
//!   [`crate::grants::DEFAULT_QUOTA`]) of files, counted across all calls. Writes are
//!   charged before they happen (stream writes in full, positional writes
//!   and `set-size` by the growth they cause, each new file or directory
//!   [`ENTRY_COST`]); when the count would pass the quota the directory is
//!   measured again (at most once a second, by one call at a time), so
//!   overwrites and deletions are credited, and a write that still does not
//!   fit fails with `quota`. Renames and links between two grants are
//!   refused (`cross-device`): a file written under one grant's quota cannot
//!   be moved into another's.

use std::collections::HashMap;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::WasiFilesystemView as _;
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, DirectoryEntryStream, ErrorCode, HostDescriptor,
    HostDirectoryEntryStream, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, FsResult, InputStream, OutputStream, Pollable, StreamError,
};
use wasmtime_wasi::{FsPerms, WasiCtxBuilder};

use super::budget::{FdPermit, FdShare};
use super::refusal::Refusals;
use super::state::State;
use crate::grants::{FileMode, Grants};

/// Files one call may hold open at once.
pub(crate) const MAX_OPEN_FILES: usize = 64;

/// Directory listings one call may hold at once: wasmtime-wasi reads a
/// listing whole into host memory.
pub(crate) const MAX_LISTINGS: usize = 4;

/// What a new file, directory or link is charged against the quota: about
/// one block, so a tool cannot exhaust the disk's inodes with empty files.
const ENTRY_COST: u64 = 4096;

/// How often a full directory may be measured again to credit deletions and
/// overwrites: measuring walks the whole tree.
const RECOUNT_INTERVAL: Duration = Duration::from_secs(1);

/// Entries walked when measuring a directory; beyond it the tree counts as
/// full (a quota that large is better enforced by the file system).
const MAX_WALK: usize = 100_000;

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
                let used = measure(&dir.reopen_path());
                dir.quota = Some(DiskQuota {
                    limit,
                    used: AtomicU64::new(used),
                    last_recount: Mutex::new(Some(Instant::now())),
                });
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

fn charge(dir: &GrantedDir, bytes: u64, what: &str, refusals: &Refusals) -> Result<(), ErrorCode> {
    let Some(quota) = &dir.quota else {
        return Ok(());
    };
    if quota.try_charge(bytes, dir) {
        return Ok(());
    }
    refusals.deny(format!(
        "{what} in {}: past its disk quota of {} (raise `quota` on that files entry)",
        dir.guest,
        bytesize::ByteSize::b(quota.limit).display().iec()
    ));
    Err(ErrorCode::Quota)
}

#[derive(Debug)]
struct DiskQuota {
    limit: u64,
    /// An upper bound on what the directory holds.
    used: AtomicU64,
    last_recount: Mutex<Option<Instant>>,
}

impl DiskQuota {
    fn try_charge(&self, bytes: u64, dir: &GrantedDir) -> bool {
        let add = |used: u64| used.checked_add(bytes).filter(|&total| total <= self.limit);
        if self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, add)
            .is_ok()
        {
            return true;
        }
        // Over by the count: measure what is really there, at most once per
        // interval, so deletions and overwrites are credited.
        {
            // One measurement at a time: a second writer over the count is
            // refused rather than made to wait on a walk.
            let Ok(mut last) = self.last_recount.try_lock() else {
                return false;
            };
            if last.is_some_and(|at| at.elapsed() < RECOUNT_INTERVAL) {
                return false;
            }
            *last = Some(Instant::now());
            self.used
                .store(measure(&dir.reopen_path()), Ordering::Release);
        }
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, add)
            .is_ok()
    }
}

/// Bytes held under `root`: the disk blocks files use (a sparse file counts
/// what it really holds) plus [`ENTRY_COST`] per entry, without following
/// symbolic links.
fn measure(root: &Path) -> u64 {
    let mut total = 0u64;
    let mut walked = 0usize;
    let mut pending = vec![root.to_owned()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            walked += 1;
            if walked > MAX_WALK {
                return u64::MAX;
            }
            let Ok(meta) = entry.metadata() else { continue };
            total = total.saturating_add(ENTRY_COST);
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.blocks().saturating_mul(512));
            }
        }
    }
    total
}

/// A file's output stream: it keeps its file counted as open while it
/// lives, and charges its grant's quota before each write.
struct FileWriter {
    inner: DynOutputStream,
    /// For a read-write grant with a quota.
    quota: Option<Arc<GrantedDir>>,
    refusals: Refusals,
    _file: Option<Arc<OpenFile>>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileWriter {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

impl FileWriter {
    fn charge(&self, bytes: usize) -> Result<(), StreamError> {
        match &self.quota {
            Some(dir) => {
                charge(dir, bytes as u64, "writing a file", &self.refusals).map_err(|_| {
                    StreamError::LastOperationFailed(
                        std::io::Error::from_raw_os_error(libc::EDQUOT).into(),
                    )
                })
            }
            None => Ok(()),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for FileWriter {
    fn write(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.charge(bytes.len())?;
        self.inner.write(bytes)
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> Result<(), StreamError> {
        self.charge(bytes.len())?;
        self.inner.blocking_write_and_flush(bytes).await
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        self.inner.check_write()
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

/// A file's input stream: it keeps its file counted as open while it lives.
struct FileReader {
    inner: DynInputStream,
    _file: Option<Arc<OpenFile>>,
}

#[wasmtime_wasi::async_trait]
impl Pollable for FileReader {
    async fn ready(&mut self) {
        self.inner.ready().await;
    }
}

#[wasmtime_wasi::async_trait]
impl InputStream for FileReader {
    fn read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        self.inner.read(size)
    }

    async fn blocking_read(&mut self, size: usize) -> Result<Bytes, StreamError> {
        self.inner.blocking_read(size).await
    }

    fn skip(&mut self, nelem: usize) -> Result<usize, StreamError> {
        self.inner.skip(nelem)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await;
    }
}

/// `Ok(Ok(value))`, or the error code the guest sees; anything that is not
/// an error code traps, as in wasmtime-wasi.
fn guest<T>(result: FsResult<T>) -> wasmtime::Result<Result<T, ErrorCode>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(error) => Ok(Err(error.downcast()?)),
    }
}

fn borrow<T: 'static>(resource: &Resource<T>) -> Resource<T> {
    Resource::new_borrow(resource.rep())
}

type Store<'a> = StoreContextMut<'a, State>;

/// Add `wasi:filesystem` to the linker with the budget, the quota and the
/// refusal of non-regular files around wasmtime-wasi's implementation. Call
/// after wasmtime-wasi's own `add_to_linker`: these shadow its definitions.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    {
        let mut preopens = linker.instance("wasi:filesystem/preopens@0.2.12")?;
        preopens.func_wrap("get-directories", |mut store: Store<'_>, (): ()| {
            let state = store.data_mut();
            let directories = state.filesystem().get_directories()?;
            for (resource, guest) in &directories {
                if let Some(i) = state.files.dirs.iter().position(|d| d.guest == *guest) {
                    state.files.grant_of.insert(resource.rep(), i);
                }
            }
            Ok((directories,))
        })?;
    }
    let mut types = linker.instance("wasi:filesystem/types@0.2.12")?;
    types.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: Store<'_>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                let parent = fd.rep();
                let existing = state
                    .filesystem()
                    .stat_at(borrow(&fd), path_flags, path.clone())
                    .await
                    .ok();
                match existing.as_ref().map(|stat| stat.type_) {
                    None
                    | Some(
                        DescriptorType::RegularFile
                        | DescriptorType::Directory
                        | DescriptorType::SymbolicLink,
                    ) => {}
                    Some(_) => {
                        state.files.refusals.deny(format!(
                            "opening {path:?}: it is not a regular file or directory (FIFOs, sockets and devices are never opened)"
                        ));
                        return Ok((Err(ErrorCode::Access),));
                    }
                }
                // The handle first: a refused open charges nothing.
                let file = match state.files.take_file() {
                    Ok(file) => file,
                    Err(code) => return Ok((Err(code),)),
                };
                if existing.is_none()
                    && oflags.contains(OpenFlags::CREATE)
                    && let Err(code) = state.files.charge(parent, ENTRY_COST, "creating a file")
                {
                    return Ok((Err(code),));
                }
                let opened = guest(
                    state
                        .filesystem()
                        .open_at(fd, path_flags, path, oflags, flags)
                        .await,
                )?;
                if let Ok(child) = &opened {
                    state.files.held.insert(child.rep(), file);
                    if let Some(&grant) = state.files.grant_of.get(&parent) {
                        state.files.grant_of.insert(child.rep(), grant);
                    }
                }
                Ok((opened,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.read-directory",
        |mut store: Store<'_>, (fd,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let state = store.data_mut();
                let permit = match state.files.take_listing() {
                    Ok(permit) => permit,
                    Err(code) => return Ok((Err(code),)),
                };
                let listing = guest(state.filesystem().read_directory(fd).await)?;
                if let Ok(stream) = &listing {
                    state.files.listings.insert(stream.rep(), permit);
                }
                Ok((listing,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store: Store<'_>, (fd, buffer, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                // Every byte written is charged, as for streams: charging
                // only growth past the end would let writes into a sparse
                // hole go free. Overwrites are credited when the directory
                // is measured again.
                let bytes = buffer.len() as u64;
                if let Err(code) = state.files.charge(fd.rep(), bytes, "writing a file") {
                    return Ok((Err(code),));
                }
                Ok((guest(state.filesystem().write(fd, buffer, offset).await)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-size",
        |mut store: Store<'_>, (fd, new_size): (Resource<Descriptor>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                let size = match state.filesystem().stat(borrow(&fd)).await {
                    Ok(stat) => stat.size,
                    Err(e) => return Ok((guest::<()>(Err(e))?,)),
                };
                let growth = new_size.saturating_sub(size);
                if let Err(code) = state.files.charge(fd.rep(), growth, "growing a file") {
                    return Ok((Err(code),));
                }
                Ok((guest(state.filesystem().set_size(fd, new_size).await)?,))
            })
        },
    )?;
    for (name, append) in [
        ("[method]descriptor.write-via-stream", false),
        ("[method]descriptor.append-via-stream", true),
    ] {
        let open = move |state: &mut State,
                         fd: Resource<Descriptor>,
                         offset: u64|
              -> wasmtime::Result<Result<Resource<DynOutputStream>, ErrorCode>> {
            let rep = fd.rep();
            // Fail closed: a descriptor of no known grant gets no writer.
            let Some(dir) = state.files.dir_of(rep).cloned() else {
                return Ok(Err(ErrorCode::BadDescriptor));
            };
            let stream = if append {
                state.filesystem().append_via_stream(fd)
            } else {
                state.filesystem().write_via_stream(fd, offset)
            };
            let opened = guest(stream)?;
            if let Ok(stream) = &opened {
                let file = state.files.held.get(&rep).cloned();
                let refusals = state.files.refusals.clone();
                let quota = dir.quota.is_some().then_some(dir);
                let slot: &mut DynOutputStream = state.table().get_mut(stream)?;
                let inner = std::mem::replace(slot, Box::new(Closed));
                *slot = Box::new(FileWriter {
                    inner,
                    quota,
                    refusals,
                    _file: file,
                });
            }
            Ok(opened)
        };
        if append {
            types.func_wrap(
                name,
                move |mut store: Store<'_>, (fd,): (Resource<Descriptor>,)| {
                    Ok((open(store.data_mut(), fd, 0)?,))
                },
            )?;
        } else {
            types.func_wrap(
                name,
                move |mut store: Store<'_>, (fd, offset): (Resource<Descriptor>, u64)| {
                    Ok((open(store.data_mut(), fd, offset)?,))
                },
            )?;
        }
    }
    types.func_wrap(
        "[method]descriptor.read-via-stream",
        |mut store: Store<'_>, (fd, offset): (Resource<Descriptor>, u64)| {
            let state = store.data_mut();
            let rep = fd.rep();
            let opened = guest(state.filesystem().read_via_stream(fd, offset))?;
            if let Ok(stream) = &opened
                && let Some(file) = state.files.held.get(&rep).cloned()
            {
                let slot: &mut DynInputStream = state.table().get_mut(stream)?;
                let inner = std::mem::replace(slot, Box::new(Ended));
                *slot = Box::new(FileReader {
                    inner,
                    _file: Some(file),
                });
            }
            Ok((opened,))
        },
    )?;
    // A rename or link between two grants would move bytes written under
    // one quota into another: refused, as across devices.
    types.func_wrap_async(
        "[method]descriptor.rename-at",
        |mut store: Store<'_>,
         (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = state.files.same_grant(fd.rep(), new_fd.rep()) {
                    return Ok((Err(code),));
                }
                Ok((guest(state.filesystem().rename_at(fd, old, new_fd, new).await)?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.link-at",
        |mut store: Store<'_>,
         (fd, flags, old, new_fd, new): (
            Resource<Descriptor>,
            PathFlags,
            String,
            Resource<Descriptor>,
            String,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = state.files.same_grant(fd.rep(), new_fd.rep()) {
                    return Ok((Err(code),));
                }
                if let Err(code) = state.files.charge(fd.rep(), ENTRY_COST, "creating a link") {
                    return Ok((Err(code),));
                }
                Ok((guest(
                    state
                        .filesystem()
                        .link_at(fd, flags, old, new_fd, new)
                        .await,
                )?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        |mut store: Store<'_>, (fd, path): (Resource<Descriptor>, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = state
                    .files
                    .charge(fd.rep(), ENTRY_COST, "creating a directory")
                {
                    return Ok((Err(code),));
                }
                Ok((guest(
                    state.filesystem().create_directory_at(fd, path).await,
                )?,))
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.symlink-at",
        |mut store: Store<'_>, (fd, old, new): (Resource<Descriptor>, String, String)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Err(code) = state.files.charge(fd.rep(), ENTRY_COST, "creating a link") {
                    return Ok((Err(code),));
                }
                Ok((guest(state.filesystem().symlink_at(fd, old, new).await)?,))
            })
        },
    )?;
    types.resource(
        "descriptor",
        ResourceType::host::<Descriptor>(),
        |mut store, rep| {
            let state = store.data_mut();
            state.files.held.remove(&rep);
            state.files.grant_of.remove(&rep);
            HostDescriptor::drop(&mut state.filesystem(), Resource::new_own(rep))
        },
    )?;
    types.resource(
        "directory-entry-stream",
        ResourceType::host::<DirectoryEntryStream>(),
        |mut store, rep| {
            let state = store.data_mut();
            state.files.listings.remove(&rep);
            HostDirectoryEntryStream::drop(&mut state.filesystem(), Resource::new_own(rep))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Stands in for an input stream for the instant it is being wrapped.
struct Ended;

#[wasmtime_wasi::async_trait]
impl Pollable for Ended {
    async fn ready(&mut self) {}
}

impl InputStream for Ended {
    fn read(&mut self, _: usize) -> Result<Bytes, StreamError> {
        Err(StreamError::Closed)
    }
}

/// Stands in for an output stream for the instant it is being wrapped.
struct Closed;

#[wasmtime_wasi::async_trait]
impl Pollable for Closed {
    async fn ready(&mut self) {}
}

impl OutputStream for Closed {
    fn write(&mut self, _: Bytes) -> Result<(), StreamError> {
        Err(StreamError::Closed)
    }
    fn flush(&mut self) -> Result<(), StreamError> {
        Err(StreamError::Closed)
    }
    fn check_write(&mut self) -> Result<usize, StreamError> {
        Err(StreamError::Closed)
    }
}
