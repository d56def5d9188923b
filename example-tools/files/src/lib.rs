//! `read_file`, `list_dir`, `write_file`: files under the directories the
//! manifest grants (`files = [{ host = "./data", guest = "/data" }]`). Outside
//! them, and for writes to a read-only grant, WASI refuses and the tool says so.
//!
//! Build with `scripts/build-tools.sh`.

use std::fs;
use std::io::Write;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolhost_guest::{Output, Tool, ToolError};

/// Files larger than this are not read whole: the model cannot use them and
/// the tool's memory is limited.
const MAX_READ: u64 = 1024 * 1024;

/// Arguments naming one path.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PathArgs {
    /// Absolute path inside a granted directory, e.g. "/data/notes.txt".
    #[schemars(length(min = 1, max = 4096))]
    path: String,
}

/// Arguments of `write_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct WriteArgs {
    /// Absolute path inside a read-write granted directory.
    #[schemars(length(min = 1, max = 4096))]
    path: String,
    /// Text to write.
    content: String,
    /// True to append to the file; false or null to replace it.
    // Listed in `required` yet nullable, as OpenAI's strict mode wants every
    // argument (`required` alone would leave out the null).
    #[schemars(required, extend("type" = ["boolean", "null"]))]
    append: Option<bool>,
}

/// `list_dir`'s structured result: an object, as MCP requires of
/// `structuredContent`.
#[derive(Serialize, JsonSchema)]
struct Listing {
    /// The directory's entries, by name.
    entries: Vec<Entry>,
}

/// One entry of a directory listing.
#[derive(Serialize, JsonSchema)]
struct Entry {
    /// The file name, without its directory.
    name: String,
    /// `file`, `dir` or `symlink`.
    kind: &'static str,
    /// Size in bytes.
    size: u64,
}

fn read_file(args: PathArgs) -> Result<Output, ToolError> {
    let path = &args.path;
    let size = fs::metadata(path)
        .map_err(|e| ToolError::file(e, path))?
        .len();
    if size > MAX_READ {
        return Err(ToolError::invalid_input(format!(
            "{} is {size} bytes; this tool reads files up to {MAX_READ} bytes",
            args.path
        )));
    }
    let text = fs::read_to_string(path).map_err(|e| ToolError::file(e, path))?;
    Ok(Output::text(text))
}

fn list_dir(args: PathArgs) -> Result<Output, ToolError> {
    let path = &args.path;
    let file_error = |e| ToolError::file(e, path);
    let mut entries = Vec::new();
    for entry in fs::read_dir(path).map_err(file_error)? {
        let entry = entry.map_err(file_error)?;
        let meta = entry.metadata().map_err(file_error)?;
        let kind = if meta.is_dir() {
            "dir"
        } else if meta.is_symlink() {
            "symlink"
        } else {
            "file"
        };
        entries.push(Entry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind,
            size: meta.len(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let text = entries
        .iter()
        .map(|e| format!("{}\t{}\t{}", e.kind, e.size, e.name))
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Output::json(&Listing { entries }).with_content(text))
}

fn write_file(args: WriteArgs) -> Result<Output, ToolError> {
    let path = &args.path;
    let append = args.append.unwrap_or(false);
    let mut file = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(path)
        .map_err(|e| ToolError::file(e, path))?;
    file.write_all(args.content.as_bytes())
        .map_err(|e| ToolError::file(e, path))?;
    Ok(Output::text(format!(
        "wrote {} bytes to {}",
        args.content.len(),
        args.path
    )))
}

toolhost_guest::export_tools! {
    Tool::new("read_file", "Read a UTF-8 text file (up to 1 MiB)", read_file).read_only().idempotent(),
    Tool::new("list_dir", "List a directory: kind, size and name of each entry", list_dir)
        .output::<Listing>()
        .read_only()
        .idempotent(),
    Tool::new("write_file", "Write or append text to a file", write_file).destructive(),
}
