//! Store probes that go around the SDK's manners: raw `list-keys` cursors,
//! counters with any delta, and batches whose entries all point at one
//! buffer, so that a list the guest holds in a few KiB names as many bytes
//! as the host would care to copy.

use schemars::JsonSchema;
use serde::Deserialize;
use toolhost_guest::bindings::wasi::keyvalue::{atomics, store as wit};
use toolhost_guest::{Output, ToolError};

fn failed(error: wit::Error) -> ToolError {
    ToolError::from(toolhost_guest::store::Error::from(error))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Page {
    store: String,
    /// The cursor to resume from; none starts at the first key.
    #[serde(default)]
    cursor: Option<u64>,
}

/// One `list-keys` page: how many keys, the first and last, and the cursor.
pub(crate) fn list_page(args: Page) -> Result<Output, ToolError> {
    let bucket = wit::open(&args.store).map_err(failed)?;
    let page = bucket.list_keys(args.cursor).map_err(failed)?;
    Ok(Output::text(format!(
        "keys={} first={} last={} cursor={}",
        page.keys.len(),
        page.keys.first().map_or("-", String::as_str),
        page.keys.last().map_or("-", String::as_str),
        page.cursor.map_or("none".to_owned(), |c| c.to_string()),
    )))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Incr {
    store: String,
    key: String,
    delta: u64,
}

/// `atomics.increment` with any delta; the new value.
pub(crate) fn incr(args: Incr) -> Result<Output, ToolError> {
    let bucket = wit::open(&args.store).map_err(failed)?;
    let value = atomics::increment(&bucket, &args.key, args.delta).map_err(failed)?;
    Ok(Output::text(value.to_string()))
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct Aliased {
    store: String,
    /// `set`, `get` or `delete`.
    op: String,
    /// Entries in the list.
    n: usize,
    /// Bytes of the one value every `set` entry points at, or of the one key
    /// every `get` and `delete` entry points at.
    size: usize,
}

/// A batch of `n` entries that share one buffer of `size` bytes.
pub(crate) fn aliased_batch(args: Aliased) -> Result<Output, ToolError> {
    let bucket = wit::open(&args.store).map_err(failed)?;
    match raw::batch(&args.op, bucket.handle(), args.n, args.size) {
        Ok(()) => Ok(Output::text("ok")),
        Err(message) => Err(ToolError::new("store", message)),
    }
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod raw {
    #[link(wasm_import_module = "wasi:keyvalue/batch@0.2.0-draft")]
    unsafe extern "C" {
        #[link_name = "set-many"]
        fn set_many(bucket: i32, list: i32, len: i32, ret: i32);
        #[link_name = "get-many"]
        fn get_many(bucket: i32, list: i32, len: i32, ret: i32);
        #[link_name = "delete-many"]
        fn delete_many(bucket: i32, list: i32, len: i32, ret: i32);
    }

    /// Where the host writes `result<_, error>` (or `result<list, error>`):
    /// the case at 0, the error's case at 4 and its string at 8 and 12.
    #[repr(C, align(4))]
    struct Ret([u8; 16]);

    fn word(bytes: &[u8], at: usize) -> usize {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
    }

    pub(super) fn batch(op: &str, bucket: u32, n: usize, size: usize) -> Result<(), String> {
        let shared = vec![b'v'; size.max(1)];
        let key: String = "k".repeat(size.max(1));
        // Distinct short keys for `set`, all cut from one string.
        let names: String = (0..n).map(|i| format!("{i:08}")).collect();
        let mut list: Vec<u32> = Vec::new();
        for i in 0..n {
            match op {
                "set" => list.extend([
                    names.as_ptr() as u32 + 8 * i as u32,
                    8,
                    shared.as_ptr() as u32,
                    size as u32,
                ]),
                _ => list.extend([key.as_ptr() as u32, size as u32]),
            }
        }
        let mut ret = Ret([0; 16]);
        let args = (
            bucket as i32,
            list.as_ptr() as i32,
            n as i32,
            ret.0.as_mut_ptr() as i32,
        );
        // SAFETY: the list and the buffers it points at live across the
        // call, and `ret` has the size and alignment the ABI asks.
        unsafe {
            match op {
                "set" => set_many(args.0, args.1, args.2, args.3),
                "get" => get_many(args.0, args.1, args.2, args.3),
                "delete" => delete_many(args.0, args.1, args.2, args.3),
                other => return Err(format!("no op {other:?}")),
            }
        }
        if ret.0[0] == 0 {
            return Ok(());
        }
        match ret.0[4] {
            0 => Err("no such store".into()),
            1 => Err("access denied".into()),
            _ => {
                let (ptr, len) = (word(&ret.0, 8), word(&ret.0, 12));
                // SAFETY: the host lowered an owned string there.
                let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
                Err(String::from_utf8_lossy(bytes).into_owned())
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod raw {
    pub(super) fn batch(_: &str, _: u32, _: usize, _: usize) -> Result<(), String> {
        unreachable!("the probe runs only as wasm")
    }
}
