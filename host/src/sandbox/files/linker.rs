//! `wasi:filesystem` in the linker: the functions that wrap wasmtime-wasi's
//! own with the call's budget of handles, the disk quota and the refusal of
//! non-regular files, one function per import they shadow.

use std::future::Future;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::WasiFilesystemView as _;
use wasmtime_wasi::p2::bindings::filesystem::preopens::Host as _;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    Descriptor, DescriptorFlags, DescriptorType, DirectoryEntryStream, ErrorCode, HostDescriptor,
    HostDirectoryEntryStream, OpenFlags, PathFlags,
};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsResult};

use super::quota::ENTRY_COST;
use super::streams::{Closed, Ended, FileReader, FileWriter};
use crate::sandbox::state::State;

type Store<'a> = StoreContextMut<'a, State>;

/// What an import answers the guest: its `result<T, error-code>`, or a
/// trap.
type Answer<T> = wasmtime::Result<(Result<T, ErrorCode>,)>;

/// [`Answer`], once the host function's future is done.
type Later<'a, T> = Box<dyn Future<Output = Answer<T>> + Send + 'a>;

const PREOPENS: &str = "wasi:filesystem/preopens@0.2.12";
const TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Add `wasi:filesystem` to the linker with the budget, the quota and the
/// refusal of non-regular files around wasmtime-wasi's implementation. Call
/// after wasmtime-wasi's own `add_to_linker`: these shadow its definitions.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    linker
        .instance(PREOPENS)?
        .func_wrap("get-directories", get_directories)?;
    let mut types = linker.instance(TYPES)?;
    types.func_wrap_async("[method]descriptor.open-at", open_at)?;
    types.func_wrap_async("[method]descriptor.read-directory", read_directory)?;
    types.func_wrap_async("[method]descriptor.write", write)?;
    types.func_wrap_async("[method]descriptor.set-size", set_size)?;
    types.func_wrap("[method]descriptor.write-via-stream", write_via_stream)?;
    types.func_wrap("[method]descriptor.append-via-stream", append_via_stream)?;
    types.func_wrap("[method]descriptor.read-via-stream", read_via_stream)?;
    types.func_wrap_async("[method]descriptor.rename-at", rename_at)?;
    types.func_wrap_async("[method]descriptor.link-at", link_at)?;
    types.func_wrap_async(
        "[method]descriptor.create-directory-at",
        create_directory_at,
    )?;
    types.func_wrap_async("[method]descriptor.symlink-at", symlink_at)?;
    types.resource(
        "descriptor",
        ResourceType::host::<Descriptor>(),
        drop_descriptor,
    )?;
    types.resource(
        "directory-entry-stream",
        ResourceType::host::<DirectoryEntryStream>(),
        drop_listing,
    )?;
    linker.allow_shadowing(false);
    Ok(())
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

/// A preopened directory and its guest path.
type Preopen = (Resource<Descriptor>, String);

/// The preopened directories, each recorded as its grant's.
fn get_directories(mut store: Store<'_>, (): ()) -> wasmtime::Result<(Vec<Preopen>,)> {
    let state = store.data_mut();
    let directories = state.filesystem().get_directories()?;
    for (resource, guest) in &directories {
        if let Some(i) = state.files.dirs.iter().position(|d| d.guest == *guest) {
            state.files.grant_of.insert(resource.rep(), i);
        }
    }
    Ok((directories,))
}

/// Open a file or directory: only regular files, directories and links,
/// within the call's open files, a new file charged to the quota.
fn open_at(
    mut store: Store<'_>,
    (fd, path_flags, path, oflags, flags): (
        Resource<Descriptor>,
        PathFlags,
        String,
        OpenFlags,
        DescriptorFlags,
    ),
) -> Later<'_, Resource<Descriptor>> {
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
}

/// List a directory, within the call's listings.
fn read_directory(
    mut store: Store<'_>,
    (fd,): (Resource<Descriptor>,),
) -> Later<'_, Resource<DirectoryEntryStream>> {
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
}

/// Write at an offset, every byte charged to the quota.
fn write(
    mut store: Store<'_>,
    (fd, buffer, offset): (Resource<Descriptor>, Vec<u8>, u64),
) -> Later<'_, u64> {
    Box::new(async move {
        let state = store.data_mut();
        // Every byte written is charged, as for streams: charging only
        // growth past the end would let writes into a sparse hole go free.
        // Overwrites are credited when the directory is measured again.
        let bytes = buffer.len() as u64;
        if let Err(code) = state.files.charge(fd.rep(), bytes, "writing a file") {
            return Ok((Err(code),));
        }
        Ok((guest(state.filesystem().write(fd, buffer, offset).await)?,))
    })
}

/// Set a file's size, its growth charged to the quota.
fn set_size(mut store: Store<'_>, (fd, new_size): (Resource<Descriptor>, u64)) -> Later<'_, ()> {
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
}

fn write_via_stream(
    mut store: Store<'_>,
    (fd, offset): (Resource<Descriptor>, u64),
) -> Answer<Resource<DynOutputStream>> {
    Ok((writer(store.data_mut(), fd, Some(offset))?,))
}

fn append_via_stream(
    mut store: Store<'_>,
    (fd,): (Resource<Descriptor>,),
) -> Answer<Resource<DynOutputStream>> {
    Ok((writer(store.data_mut(), fd, None)?,))
}

/// An output stream on `fd` at `offset` (appending when `None`), wrapped
/// so that it keeps its file counted as open and charges the quota.
fn writer(
    state: &mut State,
    fd: Resource<Descriptor>,
    offset: Option<u64>,
) -> wasmtime::Result<Result<Resource<DynOutputStream>, ErrorCode>> {
    let rep = fd.rep();
    // Fail closed: a descriptor of no known grant gets no writer.
    let Some(dir) = state.files.dir_of(rep).cloned() else {
        return Ok(Err(ErrorCode::BadDescriptor));
    };
    let stream = match offset {
        None => state.filesystem().append_via_stream(fd),
        Some(offset) => state.filesystem().write_via_stream(fd, offset),
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
}

/// An input stream on `fd`, wrapped so that it keeps its file counted as
/// open.
fn read_via_stream(
    mut store: Store<'_>,
    (fd, offset): (Resource<Descriptor>, u64),
) -> Answer<Resource<DynInputStream>> {
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
}

// A rename or link between two grants would move bytes written under one
// quota into another: refused, as across devices.

fn rename_at(
    mut store: Store<'_>,
    (fd, old, new_fd, new): (Resource<Descriptor>, String, Resource<Descriptor>, String),
) -> Later<'_, ()> {
    Box::new(async move {
        let state = store.data_mut();
        if let Err(code) = state.files.same_grant(fd.rep(), new_fd.rep()) {
            return Ok((Err(code),));
        }
        Ok((guest(
            state.filesystem().rename_at(fd, old, new_fd, new).await,
        )?,))
    })
}

fn link_at(
    mut store: Store<'_>,
    (fd, flags, old, new_fd, new): (
        Resource<Descriptor>,
        PathFlags,
        String,
        Resource<Descriptor>,
        String,
    ),
) -> Later<'_, ()> {
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
}

fn create_directory_at(
    mut store: Store<'_>,
    (fd, path): (Resource<Descriptor>, String),
) -> Later<'_, ()> {
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
}

fn symlink_at(
    mut store: Store<'_>,
    (fd, old, new): (Resource<Descriptor>, String, String),
) -> Later<'_, ()> {
    Box::new(async move {
        let state = store.data_mut();
        if let Err(code) = state.files.charge(fd.rep(), ENTRY_COST, "creating a link") {
            return Ok((Err(code),));
        }
        Ok((guest(state.filesystem().symlink_at(fd, old, new).await)?,))
    })
}

/// A descriptor dropped: its file no longer counts as open (once its
/// streams are gone too).
fn drop_descriptor(mut store: Store<'_>, rep: u32) -> wasmtime::Result<()> {
    let state = store.data_mut();
    state.files.held.remove(&rep);
    state.files.grant_of.remove(&rep);
    HostDescriptor::drop(&mut state.filesystem(), Resource::new_own(rep))
}

/// A listing dropped: it no longer counts against the call's listings.
fn drop_listing(mut store: Store<'_>, rep: u32) -> wasmtime::Result<()> {
    let state = store.data_mut();
    state.files.listings.remove(&rep);
    HostDirectoryEntryStream::drop(&mut state.filesystem(), Resource::new_own(rep))
}
