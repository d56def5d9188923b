//! `wasi:keyvalue` in the linker, one function per import, each reading its
//! arguments out of the guest only once their sizes are known to fit.
//!
//! What `bindgen!` generates lifts every argument into host memory before
//! the host function runs: a `set-many` whose thousand entries all point at
//! one buffer in the guest would have the host copy that buffer a thousand
//! times (up to wasmtime's 128 MiB per host call) before anything could
//! refuse it. Here the arguments arrive as handles into the guest's memory
//! (`WasmStr`, `WasmList`): the host counts a batch's entries, measures
//! each key and value and sums them, refuses what is past a bound, and only
//! then copies. A UTF-8 key is measured where it lies; a component built
//! with UTF-16 strings has each key transcoded once to be measured.

use std::future::Future;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType, WasmList, WasmStr};

use std::sync::Arc;

use super::{Access, Bucket, Part, batch_bytes_fit, batch_fits};
use crate::sandbox::bindings::v0_2::wasi::keyvalue::store;
use crate::sandbox::state::State;
use crate::stores::{Entry, Store};

type Cx<'a> = StoreContextMut<'a, State>;

/// What an import answers the guest: its `result<T, error>`, or a trap.
type Answer<'a, T> =
    Box<dyn Future<Output = wasmtime::Result<(Result<T, store::Error>,)>> + Send + 'a>;

/// A `Result<T, store::Error>`'s value, or the error answered to the guest.
macro_rules! or_answer {
    ($result:expr) => {
        match $result {
            Ok(value) => value,
            Err(error) => return Ok((Err(error),)),
        }
    };
}

/// [`or_answer`] for the helpers that answer `wasmtime::Result<Result<_>>`.
macro_rules! or_answer_inner {
    ($result:expr) => {
        match $result {
            Ok(value) => value,
            Err(error) => return Ok(Err(error)),
        }
    };
}

const STORE: &str = "wasi:keyvalue/store@0.2.0-draft";
const ATOMICS: &str = "wasi:keyvalue/atomics@0.2.0-draft";
const BATCH: &str = "wasi:keyvalue/batch@0.2.0-draft";

/// Add `wasi:keyvalue` (store, atomics, batch) to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    let mut instance = linker.instance(STORE)?;
    instance.resource("bucket", ResourceType::host::<Bucket>(), |mut cx, rep| {
        cx.data_mut()
            .table()
            .delete(Resource::<Bucket>::new_own(rep))?;
        Ok(())
    })?;
    instance.func_wrap_async("open", open)?;
    instance.func_wrap_async("[method]bucket.get", get)?;
    instance.func_wrap_async("[method]bucket.set", set)?;
    instance.func_wrap_async("[method]bucket.delete", delete)?;
    instance.func_wrap_async("[method]bucket.exists", exists)?;
    instance.func_wrap_async("[method]bucket.list-keys", list_keys)?;
    linker
        .instance(ATOMICS)?
        .func_wrap_async("increment", increment)?;
    let mut instance = linker.instance(BATCH)?;
    instance.func_wrap_async("get-many", get_many)?;
    instance.func_wrap_async("set-many", set_many)?;
    instance.func_wrap_async("delete-many", delete_many)?;
    Ok(())
}

/// The longest store name a guest can mean (names are at most 64
/// characters); a longer identifier is read only this far.
const NAME_BYTES: usize = 256;

fn open(mut cx: Cx<'_>, (identifier,): (WasmStr,)) -> Answer<'_, Resource<Bucket>> {
    Box::new(async move {
        let name = {
            let text = identifier.to_str(&cx)?;
            let cut = (0..=NAME_BYTES.min(text.len()))
                .rev()
                .find(|&i| text.is_char_boundary(i))
                .unwrap_or(0);
            text[..cut].to_owned()
        };
        Ok((cx.data_mut().kv_open(&name)?,))
    })
}

/// Key `key` of `store`, copied once its size is known to fit.
fn read_key(
    cx: &Cx<'_>,
    key: &WasmStr,
    store: &Store,
    access: Access,
) -> wasmtime::Result<Result<String, store::Error>> {
    let text = key.to_str(cx)?;
    Ok(cx
        .data()
        .stores
        .fits(store, Part::Key, text.len(), access)
        .map(|()| text.into_owned()))
}

/// A store, a namespace and a key.
type Keyed = (Arc<Store>, String, String);

/// What an operation on one key starts with: the operation counted, and
/// its bucket's store and namespace and its key, read once it fits.
fn keyed(
    cx: &mut Cx<'_>,
    bucket: &Resource<Bucket>,
    key: &WasmStr,
    access: Access,
) -> wasmtime::Result<Result<Keyed, store::Error>> {
    let (store, ns) = or_answer_inner!(cx.data_mut().kv_begin(bucket)?);
    let key = or_answer_inner!(read_key(cx, key, &store, access)?);
    Ok(Ok((store, ns, key)))
}

fn get(mut cx: Cx<'_>, (bucket, key): (Resource<Bucket>, WasmStr)) -> Answer<'_, Option<Vec<u8>>> {
    Box::new(async move {
        let (store, ns, key) = or_answer!(keyed(&mut cx, &bucket, &key, Access::Read)?);
        Ok((cx.data_mut().kv_get(&store, &ns, &key).await,))
    })
}

fn exists(mut cx: Cx<'_>, (bucket, key): (Resource<Bucket>, WasmStr)) -> Answer<'_, bool> {
    Box::new(async move {
        let (store, ns, key) = or_answer!(keyed(&mut cx, &bucket, &key, Access::Read)?);
        Ok((cx.data_mut().kv_exists(&store, &ns, &key).await,))
    })
}

fn delete(mut cx: Cx<'_>, (bucket, key): (Resource<Bucket>, WasmStr)) -> Answer<'_, ()> {
    Box::new(async move {
        // A key too long to be stored cannot be deleted either: not a
        // refusal of a capability.
        let (store, ns, key) = or_answer!(keyed(&mut cx, &bucket, &key, Access::Read)?);
        Ok((cx.data_mut().kv_delete_many(&store, &ns, vec![key]).await,))
    })
}

fn set(
    mut cx: Cx<'_>,
    (bucket, key, value): (Resource<Bucket>, WasmStr, WasmList<u8>),
) -> Answer<'_, ()> {
    Box::new(async move {
        let (store, ns, key) = or_answer!(keyed(&mut cx, &bucket, &key, Access::Write)?);
        let fits = cx
            .data()
            .stores
            .fits(&store, Part::Value, value.len(), Access::Write);
        or_answer!(fits);
        let value = value.as_le_slice(&cx).to_vec();
        Ok((cx
            .data_mut()
            .kv_set_many(&store, &ns, vec![(key, value)])
            .await,))
    })
}

fn list_keys(
    mut cx: Cx<'_>,
    (bucket, cursor): (Resource<Bucket>, Option<u64>),
) -> Answer<'_, store::KeyResponse> {
    Box::new(async move {
        let (store, ns) = or_answer!(cx.data_mut().kv_begin(&bucket)?);
        Ok((cx.data_mut().kv_list(&store, &ns, cursor).await,))
    })
}

fn increment(
    mut cx: Cx<'_>,
    (bucket, key, delta): (Resource<Bucket>, WasmStr, u64),
) -> Answer<'_, u64> {
    Box::new(async move {
        let (store, ns, key) = or_answer!(keyed(&mut cx, &bucket, &key, Access::Write)?);
        Ok((cx.data_mut().kv_increment(&store, &ns, &key, delta).await,))
    })
}

/// The handles of a batch's items, once their number fits: each a few
/// words, whatever it points at.
fn items<T: wasmtime::component::Lift>(
    cx: &mut Cx<'_>,
    list: &WasmList<T>,
    store: &Store,
) -> wasmtime::Result<Result<Vec<T>, store::Error>> {
    if let Err(e) = batch_fits(store, list.len()) {
        return Ok(Err(e));
    }
    let mut items = Vec::with_capacity(list.len());
    for i in 0..list.len() {
        // `get` lifts one item with a fresh allowance of wasmtime's hostcall
        // fuel: an item is a pointer and a length, never the data.
        items.push(
            list.get(&mut *cx, i)
                .expect("an index below the list's length")?,
        );
    }
    Ok(Ok(items))
}

/// A batch's keys, copied once each fits and all of them fit the batch's
/// bytes.
fn read_keys(
    cx: &mut Cx<'_>,
    list: &WasmList<WasmStr>,
    store: &Store,
) -> wasmtime::Result<Result<Vec<String>, store::Error>> {
    let keys = or_answer_inner!(items(cx, list, store)?);
    let mut total = 0usize;
    for key in &keys {
        let len = key.to_str(&*cx)?.len();
        or_answer_inner!(cx.data().stores.fits(store, Part::Key, len, Access::Read));
        total = total.saturating_add(len);
    }
    or_answer_inner!(batch_bytes_fit(total));
    Ok(Ok(keys
        .iter()
        .map(|key| Ok(key.to_str(&*cx)?.into_owned()))
        .collect::<wasmtime::Result<_>>()?))
}

fn get_many(
    mut cx: Cx<'_>,
    (bucket, keys): (Resource<Bucket>, WasmList<WasmStr>),
) -> Answer<'_, Vec<Option<Entry>>> {
    Box::new(async move {
        let (store, ns) = or_answer!(cx.data_mut().kv_begin(&bucket)?);
        let keys = or_answer!(read_keys(&mut cx, &keys, &store)?);
        Ok((cx.data_mut().kv_get_many(&store, &ns, keys).await,))
    })
}

fn delete_many(
    mut cx: Cx<'_>,
    (bucket, keys): (Resource<Bucket>, WasmList<WasmStr>),
) -> Answer<'_, ()> {
    Box::new(async move {
        let (store, ns) = or_answer!(cx.data_mut().kv_begin(&bucket)?);
        let keys = or_answer!(read_keys(&mut cx, &keys, &store)?);
        Ok((cx.data_mut().kv_delete_many(&store, &ns, keys).await,))
    })
}

fn set_many(
    mut cx: Cx<'_>,
    (bucket, entries): (Resource<Bucket>, WasmList<(WasmStr, WasmList<u8>)>),
) -> Answer<'_, ()> {
    Box::new(async move {
        let (store, ns) = or_answer!(cx.data_mut().kv_begin(&bucket)?);
        let entries = or_answer!(read_entries(&mut cx, &entries, &store)?);
        Ok((cx.data_mut().kv_set_many(&store, &ns, entries).await,))
    })
}

/// A batch's entries, copied once each key and value fits and all of them
/// fit the batch's bytes.
fn read_entries(
    cx: &mut Cx<'_>,
    list: &WasmList<(WasmStr, WasmList<u8>)>,
    store: &Store,
) -> wasmtime::Result<Result<Vec<Entry>, store::Error>> {
    let entries = or_answer_inner!(items(cx, list, store)?);
    let mut total = 0usize;
    for (key, value) in &entries {
        let len = key.to_str(&*cx)?.len();
        let stores = &cx.data().stores;
        or_answer_inner!(stores.fits(store, Part::Key, len, Access::Write));
        or_answer_inner!(stores.fits(store, Part::Value, value.len(), Access::Write));
        total = total.saturating_add(len).saturating_add(value.len());
    }
    or_answer_inner!(batch_bytes_fit(total));
    let mut copied = Vec::with_capacity(entries.len());
    for (key, value) in &entries {
        copied.push((
            key.to_str(&*cx)?.into_owned(),
            value.as_le_slice(&*cx).to_vec(),
        ));
    }
    Ok(Ok(copied))
}
