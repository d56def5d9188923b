//! A guest probe that calls other tools (`toolhost:tool/tools`), for the
//! host's code-mode tests: one call, a list at once, the same call many
//! times, and lists that only a hostile guest would pass. Never shipped;
//! built by `scripts/build-tools.sh`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolhost_guest::tools::{self, CallFailed};
use toolhost_guest::{Output, Tool, ToolError};

#[derive(Deserialize, JsonSchema)]
struct OneCall {
    name: String,
    /// Any JSON value: the host refuses what is not an object that fits.
    arguments: Value,
}

#[derive(Deserialize, JsonSchema)]
struct Calls {
    calls: Vec<OneCall>,
}

#[derive(Deserialize, JsonSchema)]
struct Repeat {
    name: String,
    arguments: Value,
    n: u32,
    /// One list of `n` calls rather than `n` calls one after another.
    #[serde(default)]
    at_once: bool,
    /// Bytes the caller holds (written, so its memory grows) while it calls.
    #[serde(default)]
    hold: u32,
}

#[derive(Deserialize, JsonSchema)]
struct Huge {
    name: String,
    /// How many entries the list has, all pointing at one arguments buffer.
    n: u32,
    /// The size of that buffer.
    bytes: u32,
    /// When set, the name is this many `x`s instead of `name` (a name too
    /// long for the call's own arguments).
    #[serde(default)]
    name_bytes: u32,
    /// The one key of the shared arguments (`pad` when not given).
    #[serde(default)]
    key: Option<String>,
    /// Point the last entry's arguments at bytes that are not UTF-8.
    #[serde(default)]
    bad_last: bool,
}

/// Each result as JSON: `{"ok": TEXT, "structured": …}` or `{"err": KIND, "message": …}`.
fn described(result: Result<Output, CallFailed>) -> Value {
    match result {
        Ok(output) => json!({"ok": output.to_text(), "structured": output.structured}),
        Err(e) => json!({"err": e.kind, "message": e.message, "retryable": e.retryable}),
    }
}

fn call_one(args: OneCall) -> Result<Output, ToolError> {
    Ok(Output::text(
        described(tools::call(&args.name, &args.arguments)).to_string(),
    ))
}

fn call_many(args: Calls) -> Result<Output, ToolError> {
    let calls: Vec<(&str, Value)> = args
        .calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.clone()))
        .collect();
    let results: Vec<Value> = tools::call_all(&calls).into_iter().map(described).collect();
    Ok(Output::text(Value::Array(results).to_string()))
}

/// `n` calls; answers how many succeeded and the kinds of the failures.
fn call_repeat(args: Repeat) -> Result<Output, ToolError> {
    let held = std::hint::black_box(vec![1u8; args.hold as usize]);
    let results: Vec<Result<Output, CallFailed>> = if args.at_once {
        let calls: Vec<(&str, Value)> = (0..args.n)
            .map(|_| (args.name.as_str(), args.arguments.clone()))
            .collect();
        tools::call_all(&calls)
    } else {
        (0..args.n)
            .map(|_| tools::call(&args.name, &args.arguments))
            .collect()
    };
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let mut kinds: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.kind.clone()))
        .collect();
    kinds.dedup();
    let first_error = results
        .iter()
        .find_map(|r| r.as_ref().err().map(|e| e.message.clone()));
    Ok(Output::text(
        json!({"ok": ok, "kinds": kinds, "first_error": first_error, "held": held.len()})
            .to_string(),
    ))
}

/// A list of `n` calls whose entries all point at one name and one
/// `bytes`-long arguments buffer, passed through the raw import: what the
/// generated bindings (which own each string) cannot build.
fn call_huge(args: Huge) -> Result<Output, ToolError> {
    let key = args.key.as_deref().unwrap_or("pad");
    let shared = format!("{{\"{key}\":\"{}\"}}", "x".repeat(args.bytes as usize));
    let name = if args.name_bytes > 0 {
        "x".repeat(args.name_bytes as usize)
    } else {
        args.name.clone()
    };
    let (results, refused, first, last) =
        raw::call_tools(&name, &shared, args.n as usize, args.bad_last);
    Ok(Output::text(
        json!({"results": results, "refused": refused, "first_error": first, "last_error": last})
            .to_string(),
    ))
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod raw {
    #[link(wasm_import_module = "toolhost:tool/tools@0.2.1")]
    unsafe extern "C" {
        #[link_name = "call-tools"]
        fn call_tools_raw(list: i32, len: i32, ret: i32);
    }

    /// Where the host writes the `list<result<tool-output, tool-error>>`.
    #[repr(C, align(4))]
    struct Ret([u8; 8]);

    /// One `result<tool-output, tool-error>`: its case at 0, and for an
    /// error, its kind's string at 4 and 8 and its message's at 12 and 16.
    const RESULT_SIZE: usize = 36;

    fn word(at: usize) -> usize {
        // SAFETY: `at` is a 4-aligned address the host wrote.
        unsafe { (at as *const u32).read() as usize }
    }

    fn text(at: usize) -> String {
        let (ptr, len) = (word(at), word(at + 4));
        // SAFETY: the host wrote a string of `len` bytes at `ptr`.
        let bytes = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        String::from_utf8_lossy(bytes).into_owned()
    }

    /// Pass `n` entries that share `name` and `arguments`: how many results
    /// came back, how many were errors, and the first error.
    pub(super) fn call_tools(
        name: &str,
        arguments: &str,
        n: usize,
        bad_last: bool,
    ) -> (usize, usize, Option<String>, Option<String>) {
        const NOT_UTF8: [u8; 2] = [0xff, 0xfe];
        let entry = [
            name.as_ptr() as u32,
            name.len() as u32,
            arguments.as_ptr() as u32,
            arguments.len() as u32,
        ];
        let mut list: Vec<[u32; 4]> = vec![entry; n];
        if let (true, Some(last)) = (bad_last, list.last_mut()) {
            last[2] = NOT_UTF8.as_ptr() as u32;
            last[3] = NOT_UTF8.len() as u32;
        }
        let mut ret = Ret([0; 8]);
        // SAFETY: the list's entries point at strings that outlive the call.
        unsafe { call_tools_raw(list.as_ptr() as i32, n as i32, ret.0.as_mut_ptr() as i32) };
        let (results, len) = (
            u32::from_le_bytes(ret.0[0..4].try_into().unwrap()) as usize,
            u32::from_le_bytes(ret.0[4..8].try_into().unwrap()) as usize,
        );
        let mut refused = 0;
        let mut first = None;
        let mut last = None;
        for i in 0..len {
            let at = results + i * RESULT_SIZE;
            // SAFETY: within the list the host wrote.
            if unsafe { (at as *const u8).read() } == 1 {
                refused += 1;
                last = Some(format!("{}: {}", text(at + 4), text(at + 12)));
                if first.is_none() {
                    first.clone_from(&last);
                }
            }
        }
        (len, refused, first, last)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod raw {
    pub(super) fn call_tools(
        _: &str,
        _: &str,
        _: usize,
        _: bool,
    ) -> (usize, usize, Option<String>, Option<String>) {
        unreachable!("a guest probe")
    }
}

toolhost_guest::export_tools! {
    Tool::new("call_one", "Call one tool", call_one),
    Tool::new("call_many", "Call a list of tools at once", call_many),
    Tool::new("call_repeat", "Call one tool n times", call_repeat),
    Tool::new("call_huge", "Pass one list of n calls sharing one arguments buffer", call_huge),
}
