//! `wasi:http` in the linker, with the host's bounds on what a tool can
//! make it hold: the request setters that would store a string of any
//! length refuse long ones, and header fields are bounded per `fields`
//! handle (see the module docs of `http` for what one call can pin).

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi_http::p2::HeaderResult;
use wasmtime_wasi_http::p2::bindings::http::types as wit;
use wasmtime_wasi_http::{FieldMapError, WasiHttpCtx, WasiHttpView};

use crate::sandbox::state::State;

/// The most the header fields of one `fields` handle (or one request's or
/// response's headers) may hold, as wasmtime-wasi-http counts it: name and
/// value bytes plus 72 bytes per field for `HeaderMap`'s own entries.
/// Proxies commonly accept 8 to 16 KiB of request headers on the wire
/// (nginx, Node.js, Apache); 32 KiB leaves room for 16 KiB of them in about
/// 200 fields. wasmtime-wasi-http's default (128 KiB) let one call pin
/// 32 MiB in header maps alone.
pub(super) const FIELD_SIZE_LIMIT: usize = 32 << 10;

/// The longest method a request may name. Standard methods are at most 7
/// bytes; the `http` crate accepts extension methods of any length.
const MAX_METHOD: usize = 32;

/// The longest path-with-query a request may carry: what common servers
/// accept in a request line (nginx and Apache, 8 KiB).
const MAX_PATH_WITH_QUERY: usize = 8 << 10;

/// The longest authority (`user@host:port`): a DNS name is at most 253
/// bytes.
const MAX_AUTHORITY: usize = 512;

/// The `wasi:http/types` instance wasmtime-wasi-http registers (its WIT,
/// like `wit/deps/http`, is 0.2.12). Older 0.2 imports resolve to it too.
const TYPES: &str = "wasi:http/types@0.2.12";

/// The `wasi:http` context for one call: header fields are bounded by
/// [`FIELD_SIZE_LIMIT`].
pub(crate) fn context() -> WasiHttpCtx {
    let mut ctx = WasiHttpCtx::new();
    ctx.set_field_size_limit(FIELD_SIZE_LIMIT);
    ctx
}

/// Add `wasi:http` to the linker, with the host's bounds on it: the request
/// setters that would store a string of any length refuse long ones, and a
/// `fields` mutation past [`FIELD_SIZE_LIMIT`] is refused with an error
/// instead of a trap (the refusal is what the call reports if it fails).
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    linker.allow_shadowing(true);
    let bounded = bound_types(linker);
    linker.allow_shadowing(false);
    bounded
}

type Store<'a> = StoreContextMut<'a, State>;

/// What a request setter answers: `Err(())` for a value refused.
type Set = wasmtime::Result<(Result<(), ()>,)>;

/// What a `fields` mutation answers.
type FieldsAnswer<T> = wasmtime::Result<(Result<T, wit::HeaderError>,)>;

/// Replace the unbounded `wasi:http/types` functions with checked wrappers
/// around wasmtime-wasi-http's own.
fn bound_types(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    let mut types = linker.instance(TYPES)?;
    types.func_wrap("[method]outgoing-request.set-method", set_method)?;
    types.func_wrap(
        "[method]outgoing-request.set-path-with-query",
        set_path_with_query,
    )?;
    types.func_wrap("[method]outgoing-request.set-authority", set_authority)?;
    types.func_wrap("[method]fields.append", fields_append)?;
    types.func_wrap("[method]fields.set", fields_set)?;
    types.func_wrap("[static]fields.from-list", fields_from_list)?;
    Ok(())
}

/// A method, refused past [`MAX_METHOD`] bytes.
fn set_method(
    mut store: Store<'_>,
    (request, method): (Resource<wit::OutgoingRequest>, wit::Method),
) -> Set {
    if let wit::Method::Other(name) = &method
        && name.len() > MAX_METHOD
    {
        too_long(&store, "method", name.len(), MAX_METHOD);
        return Ok((Err(()),));
    }
    let mut view = store.data_mut().http();
    wit::HostOutgoingRequest::set_method(&mut view, request, method).map(|r| (r,))
}

/// A path and query, refused past [`MAX_PATH_WITH_QUERY`] bytes.
fn set_path_with_query(
    mut store: Store<'_>,
    (request, path): (Resource<wit::OutgoingRequest>, Option<String>),
) -> Set {
    let len = path.as_ref().map_or(0, String::len);
    if len > MAX_PATH_WITH_QUERY {
        too_long(&store, "path-with-query", len, MAX_PATH_WITH_QUERY);
        return Ok((Err(()),));
    }
    let mut view = store.data_mut().http();
    wit::HostOutgoingRequest::set_path_with_query(&mut view, request, path).map(|r| (r,))
}

/// An authority, refused past [`MAX_AUTHORITY`] bytes.
fn set_authority(
    mut store: Store<'_>,
    (request, authority): (Resource<wit::OutgoingRequest>, Option<String>),
) -> Set {
    let len = authority.as_ref().map_or(0, String::len);
    if len > MAX_AUTHORITY {
        too_long(&store, "authority", len, MAX_AUTHORITY);
        return Ok((Err(()),));
    }
    let mut view = store.data_mut().http();
    wit::HostOutgoingRequest::set_authority(&mut view, request, authority).map(|r| (r,))
}

fn fields_append(
    mut store: Store<'_>,
    (fields, name, value): (Resource<wit::Fields>, String, Vec<u8>),
) -> FieldsAnswer<()> {
    let appended = wit::HostFields::append(&mut store.data_mut().http(), fields, name, value);
    fields_result(&store, appended).map(|r| (r,))
}

fn fields_set(
    mut store: Store<'_>,
    (fields, name, values): (Resource<wit::Fields>, String, Vec<Vec<u8>>),
) -> FieldsAnswer<()> {
    let set = wit::HostFields::set(&mut store.data_mut().http(), fields, name, values);
    fields_result(&store, set).map(|r| (r,))
}

fn fields_from_list(
    mut store: Store<'_>,
    (entries,): (Vec<(String, Vec<u8>)>,),
) -> FieldsAnswer<Resource<wit::Fields>> {
    let made = wit::HostFields::from_list(&mut store.data_mut().http(), entries);
    fields_result(&store, made).map(|r| (r,))
}

/// Record that a request part was refused for its length.
fn too_long(store: &Store<'_>, what: &str, len: usize, max: usize) {
    store.data().refusals.exhaust(format!(
        "an HTTP request {what} of {len} bytes (the host keeps at most {max})"
    ));
}

/// A `fields` mutation's result for the guest: over the size limit is an
/// ordinary error (wasmtime-wasi-http would trap), recorded as the call's
/// exhausted budget.
fn fields_result<T>(
    store: &Store<'_>,
    result: HeaderResult<T>,
) -> wasmtime::Result<Result<T, wit::HeaderError>> {
    let error = match result {
        Ok(value) => return Ok(Ok(value)),
        Err(error) => error,
    };
    match error.downcast() {
        Ok(code) => Ok(Err(code)),
        Err(trap) => match trap.downcast_ref::<FieldMapError>() {
            Some(FieldMapError::TotalSizeTooBig | FieldMapError::TooManyFields) => {
                store.data().refusals.exhaust(format!(
                    "HTTP header fields over {} KiB in one set",
                    FIELD_SIZE_LIMIT >> 10
                ));
                Ok(Err(wit::HeaderError::InvalidSyntax))
            }
            _ => Err(trap),
        },
    }
}
