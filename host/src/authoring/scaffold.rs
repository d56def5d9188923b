//! `toolhost new NAME --lang LANG`: a folder holding one working tool.
//!
//! The folder holds the tool's source, `toolhost.toml`, `README.md` and
//! `build.sh` at the top (from the language's template beside its SDK in
//! `guest-sdk/`, e.g. `guest-sdk/python/template/`), the language's SDK
//! under `sdk/SDK/` (from `guest-sdk/SDK/`, without its templates and tests)
//! and the contract under `wit/`, all of the version this binary was built
//! with. The SDK sits two folders down, as in this repository, so its paths
//! to the contract (`../../wit`) hold in both. Its one tool is named after
//! the folder (`-` becomes `_`), takes `{"name": string}` and answers
//! `Hello, <name>!`, in every language alike.
//!
//! The folder is written beside its final place and renamed into it, so a
//! failure leaves nothing half-written.

use std::fmt;
use std::path::{Path, PathBuf};

use super::files;

/// A language `toolhost new` writes tools in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Language {
    /// Rust, with the `toolhost-guest` crate, built by cargo for `wasm32-wasip2`.
    Rust,
    /// Python, with the `toolhost` package, built by componentize-py.
    Python,
    /// TypeScript, with the JavaScript SDK, type-checked by tsc and built by componentize-js.
    TypeScript,
    /// JavaScript, with the JavaScript SDK, built by componentize-js.
    JavaScript,
    /// C, with the C SDK, built by clang for `wasm32-wasi` and `toolhost componentize`.
    C,
}

impl Language {
    /// Every language, in the order `--help` lists them.
    pub const ALL: [Self; 5] = [
        Self::Rust,
        Self::Python,
        Self::TypeScript,
        Self::JavaScript,
        Self::C,
    ];

    /// The name `--lang` takes, which also keys its template (see `host/build.rs`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::TypeScript => "typescript",
            Self::JavaScript => "javascript",
            Self::C => "c",
        }
    }

    /// Its SDK's folder, under `guest-sdk/` here and under `sdk/` in a new
    /// tool's folder.
    fn sdk(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Python => "python",
            Self::TypeScript | Self::JavaScript => "js",
            Self::C => "c",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A folder `toolhost new` wrote.
#[derive(Debug, Clone)]
pub struct Scaffold {
    /// The folder.
    pub dir: PathBuf,
    /// The name of its tool (the folder's name, `-` made `_`).
    pub tool: String,
    /// How many files it holds.
    pub files: usize,
}

/// Why no folder was written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScaffoldError {
    /// The name cannot name a tool, a Python module or a Rust crate.
    #[error(
        "{0:?} cannot name a tool: use a lower-case letter, then lower-case letters, digits, \
         `-` or `_`, at most 64 in all (e.g. `word-stats`)"
    )]
    BadName(String),
    /// The name is taken by the languages or their tools.
    #[error(
        "{0:?} is reserved (a Rust keyword, a standard crate or the SDK's own name): \
         choose another, e.g. `my-{0}`"
    )]
    Reserved(String),
    /// Something is already there.
    #[error("{} already exists: choose another name, or move it away first", .0.display())]
    Exists(PathBuf),
    /// Writing failed.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// What was being written.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// Write a new tool in `lang` into `dir`, whose last component names it.
///
/// # Errors
///
/// [`ScaffoldError::BadName`] when the folder's name cannot name a tool,
/// [`ScaffoldError::Exists`] when `dir` exists, and [`ScaffoldError::Io`]
/// when writing fails (nothing is left behind then).
pub fn create(dir: &Path, lang: Language) -> Result<Scaffold, ScaffoldError> {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !valid_name(&name) {
        return Err(ScaffoldError::BadName(name));
    }
    if RESERVED.contains(&name.replace('-', "_").as_str()) {
        return Err(ScaffoldError::Reserved(name));
    }
    if dir.symlink_metadata().is_ok() {
        return Err(ScaffoldError::Exists(dir.to_path_buf()));
    }
    let tool = name.replace('-', "_");
    let files = plan(lang, &name, &tool);

    let parent = match dir.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ScaffoldError::Io { path, source }
    };
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}-"))
        .tempdir_in(&parent)
        .map_err(io(&parent))?;
    for (relative, contents) in &files {
        let path = staging.path().join(relative);
        if let Some(folder) = path.parent() {
            std::fs::create_dir_all(folder).map_err(io(folder))?;
        }
        std::fs::write(&path, contents).map_err(io(&path))?;
        if relative.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&path))?;
        }
    }
    // A folder that appeared meanwhile is not replaced: rename(2) of a
    // directory onto a non-empty one fails.
    if dir.symlink_metadata().is_ok() {
        return Err(ScaffoldError::Exists(dir.to_path_buf()));
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, dir) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(io(dir)(e));
    }
    Ok(Scaffold {
        dir: dir.to_path_buf(),
        tool,
        files: files.len(),
    })
}

/// `^[a-z][a-z0-9_-]{0,63}$`: a tool name that is also a Rust package, an
/// npm package (lower case only), a Python module and a file name once `-`
/// is `_`. The same rule for every language, so a tool can change language
/// and keep its name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        && name.len() <= 64
}

/// Names (with `-` as `_`) that cargo refuses for a package, or that would
/// clash with the SDK a scaffold depends on.
const RESERVED: &[&str] = &[
    // Rust keywords, 2024 edition, reserved ones included.
    "abstract",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "const",
    "continue",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "pub",
    "ref",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
    // Crates of Rust's own.
    "alloc",
    "core",
    "proc_macro",
    "std",
    "test",
    // The SDKs.
    "toolhost",
    "toolhost_guest",
];

/// The toolhost binary making the folder, for a build that needs toolhost
/// (C's `toolhost componentize`) to find it when it is not on PATH, as
/// after `cargo build`: written to the folder's `.toolhost`, which its
/// `.gitignore` leaves out (the path means nothing on another machine, and
/// names the user). None when the program is not toolhost (an embedder
/// calling [`create`]).
fn this_toolhost() -> Option<String> {
    let exe = std::env::current_exe()
        .ok()
        .filter(|exe| exe.file_stem().is_some_and(|stem| stem == "toolhost"))?;
    exe.to_str().map(|exe| format!("{exe}\n"))
}

/// The folder's files, relative path to contents: the contract, the SDK
/// (without its templates), then the template, whose files win over the
/// SDK's (the Rust SDK's manifest is the template's, standing alone outside
/// this workspace).
fn plan(lang: Language, name: &str, tool: &str) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    for (path, bytes) in files::WIT {
        out.insert(format!("wit/{path}"), bytes.to_vec());
    }
    let sdk = lang.sdk();
    for (path, bytes) in files::SDK {
        if let Some(rest) = path.strip_prefix(sdk).and_then(|p| p.strip_prefix('/')) {
            out.insert(format!("sdk/{sdk}/{rest}"), bytes.to_vec());
        }
    }
    for (path, bytes) in files::TEMPLATES {
        if let Some(rest) = path
            .strip_prefix(lang.as_str())
            .and_then(|p| p.strip_prefix('/'))
        {
            let text = String::from_utf8_lossy(bytes)
                .replace("{{name}}", name)
                .replace("{{tool}}", tool);
            out.insert(rest.to_owned(), text.into_bytes());
        }
    }
    if lang == Language::C
        && let Some(toolhost) = this_toolhost()
    {
        out.insert(".toolhost".to_owned(), toolhost.into_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_cannot_name_a_tool_are_refused() {
        for bad in [
            "",
            "1st",
            "-x",
            "a b",
            "a/b",
            "ü",
            &"x".repeat(65),
            ".",
            "Hello",
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        for good in ["a", "word-stats", "hello_2", &"x".repeat(64)] {
            assert!(valid_name(good), "{good:?}");
        }
        let parent = tempfile::tempdir().unwrap();
        for reserved in ["match", "test", "toolhost-guest", "gen"] {
            assert!(
                matches!(
                    create(&parent.path().join(reserved), Language::Rust),
                    Err(ScaffoldError::Reserved(_))
                ),
                "{reserved}"
            );
        }
    }

    #[test]
    fn every_language_has_a_template_sdk_and_the_contract() {
        for lang in Language::ALL {
            let files = plan(lang, "my-tool", "my_tool");
            for needed in ["build.sh", "toolhost.toml", "README.md", "wit/tool.wit"] {
                assert!(files.contains_key(needed), "{lang}: no {needed}");
            }
            let sdk = format!("sdk/{}/", lang.sdk());
            assert!(
                files.keys().any(|path| path.starts_with(&sdk)),
                "{lang}: no SDK"
            );
            let manifest = String::from_utf8_lossy(&files["toolhost.toml"]).into_owned();
            assert!(
                manifest.contains("my_tool.wasm") && !manifest.contains("{{"),
                "{lang}: {manifest}"
            );
            let build = String::from_utf8_lossy(&files["build.sh"]).into_owned();
            assert!(!build.contains("{{"), "{lang}: {build}");
            assert!(
                !files
                    .keys()
                    .any(|p| p.contains("node_modules") || p.contains("__pycache__")),
                "{lang}: build leftovers embedded"
            );
        }
    }

    /// The templates live beside the SDKs in `guest-sdk/`; a new tool's
    /// `sdk/` holds its SDK alone, and its top its own language's template.
    #[test]
    fn a_new_folder_holds_its_sdk_and_its_own_template_only() {
        for (lang, source, sdk_file) in [
            (Language::Rust, "src/lib.rs", "sdk/rust/src/lib.rs"),
            (
                Language::Python,
                "app.py",
                "sdk/python/toolhost/__init__.py",
            ),
            (Language::TypeScript, "tool.ts", "sdk/js/toolhost/index.ts"),
            (Language::JavaScript, "tool.js", "sdk/js/toolhost/index.ts"),
            (Language::C, "tool.c", "sdk/c/build.sh"),
        ] {
            let files = plan(lang, "my-tool", "my_tool");
            assert!(files.contains_key(source), "{lang}: no {source}");
            assert!(files.contains_key(sdk_file), "{lang}: no {sdk_file}");
            let stray: Vec<_> = files
                .keys()
                .filter(|path| {
                    path.split('/')
                        .any(|part| part == "template" || part.starts_with("template-"))
                })
                .collect();
            assert!(stray.is_empty(), "{lang}: templates copied: {stray:?}");
        }
        let typescript = plan(Language::TypeScript, "my-tool", "my_tool");
        assert!(!typescript.contains_key("tool.js") && typescript.contains_key("tsconfig.json"));
        let javascript = plan(Language::JavaScript, "my-tool", "my_tool");
        assert!(!javascript.contains_key("tool.ts") && javascript.contains_key("jsconfig.json"));
        // The Rust SDK's manifest is the template's, which stands alone.
        let rust = plan(Language::Rust, "my-tool", "my_tool");
        let manifest = String::from_utf8_lossy(&rust["sdk/rust/Cargo.toml"]).into_owned();
        assert!(!manifest.contains(".workspace"), "{manifest}");
    }

    #[test]
    fn an_existing_folder_is_never_replaced() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("taken");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("mine.txt"), "keep").unwrap();
        assert!(matches!(
            create(&dir, Language::Python),
            Err(ScaffoldError::Exists(_))
        ));
        assert_eq!(
            std::fs::read_to_string(dir.join("mine.txt")).unwrap(),
            "keep"
        );
        let entries: Vec<_> = std::fs::read_dir(parent.path()).unwrap().collect();
        assert_eq!(entries.len(), 1, "no staging folder is left behind");
    }

    #[test]
    fn a_new_folder_holds_the_tool_named_after_it() {
        let parent = tempfile::tempdir().unwrap();
        let made = create(&parent.path().join("word-stats"), Language::C).unwrap();
        assert_eq!(made.tool, "word_stats");
        let build = made.dir.join("build.sh");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&build).unwrap().permissions().mode() & 0o111,
            0o111,
            "build.sh is executable"
        );
        assert!(made.dir.join("wit/deps").is_dir());
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
    }
}
