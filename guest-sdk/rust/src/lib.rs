//! Write [toolhost](https://github.com/toolhost/toolhost) tools in Rust.
//!
//! A tool is a typed arguments struct and a function. The SDK derives the
//! input JSON Schema from the struct (with [`schemars`]), deserializes the
//! model's arguments for you, and turns your [`ToolError`]s into the typed
//! errors the host sends back to the model. [`log`] and [`config`] are plain
//! functions, and [`http`] makes outgoing requests through `wasi:http`, which
//! the host allows only to the hosts the manifest grants.
//!
//! Built against contract `toolhost:tool@0.2.1`, it also offers:
//! - results of several [`Content`] blocks: text, images, audio, resource
//!   links and embedded resources ([`Output::with_image`] and friends);
//! - [`progress`] reports, shown to MCP clients and in `toolhost run`;
//! - [`ask`]ing the person a question mid-call, the answer typed by a
//!   struct of yours ([`ask_with_key`] names the question, so a client can
//!   answer it up front);
//! - the application's injected context ([`Context::context`]);
//! - key-value [`store`]s the manifest grants;
//! - calling the other [`tools`] the manifest grants (`call_tools`).
//!
//! Build with `cargo build --target wasm32-wasip2 --release`: the result is a
//! WebAssembly component the host loads directly.
//!
//! # Examples
//!
//! A complete tool component:
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//! use toolhost_guest::{Output, Tool, ToolError};
//!
//! /// Arguments of `greet`. Doc comments become the schema's descriptions,
//! /// which the model reads.
//! #[derive(Deserialize, JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct GreetArgs {
//!     /// Who to greet.
//!     name: String,
//!     /// How many exclamation marks, 0 to 5.
//!     #[serde(default)]
//!     #[schemars(range(max = 5))]
//!     emphasis: u8,
//! }
//!
//! fn greet(args: GreetArgs) -> Result<Output, ToolError> {
//!     if args.name.trim().is_empty() {
//!         return Err(ToolError::invalid_input("`name` is empty: say who to greet"));
//!     }
//!     let bangs = "!".repeat(args.emphasis.into());
//!     Ok(Output::text(format!("Hello, {}{bangs}", args.name)))
//! }
//!
//! toolhost_guest::export_tools! {
//!     Tool::new("greet", "Greet someone by name", greet).read_only().idempotent(),
//! }
//! # fn main() {
//! #     let out = greet(GreetArgs { name: "Ada".into(), emphasis: 2 }).unwrap();
//! #     assert_eq!(out.to_text(), "Hello, Ada!!");
//! # }
//! ```
//!
//! A handler may also take the call's [`Context`] as a second argument:
//! `fn fetch(args: FetchArgs, cx: &Context) -> Result<Output, ToolError>`.

#![deny(missing_docs)]

pub mod bindings;
pub mod http;
pub mod store;
pub mod tools;

use std::fmt;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use bindings::exports::toolhost::tool::tool as wit_tool;
use bindings::toolhost::tool::host;
use bindings::toolhost::tool::types as wit;

pub use bindings::toolhost::tool::host::{AskRefusal, Level};

/// Write `message` to the host's structured log, tagged with the call's ids.
///
/// Goes to the operator, never to the model. Prefer this over `eprintln!`:
/// the host keeps only the tail of a tool's stderr, for traps.
pub fn log(level: Level, message: &str) {
    host::log(level, message);
}

/// The value granted to this component under `key` in the manifest's
/// `config` table, or `None` when nothing is granted under that key.
///
/// Secrets live here (`config = { api_key = { env = "WEATHER_KEY" } }`): the
/// model never sees them, and the host never logs them.
pub fn config(key: &str) -> Option<String> {
    host::config(key)
}

/// Report progress on the call: `done` out of `total`, when known, with an
/// optional short message. MCP clients show it as a progress bar, and
/// `toolhost run` on its display. Reports whose `done` does not grow are
/// dropped, as are reports past the host's budget (1000 per call).
pub fn progress(done: f64, total: Option<f64>, message: Option<&str>) {
    host::progress(done, total, message);
}

/// Why a question got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Declined, cancelled, nobody to ask, or an invalid question.
    pub reason: AskRefusal,
    /// The host's words, for the log or the model.
    pub message: String,
}

impl From<host::Refused> for Refused {
    fn from(refused: host::Refused) -> Self {
        Self {
            reason: refused.reason,
            message: refused.message,
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refused {}

impl From<Refused> for ToolError {
    /// A question without an answer becomes the tool's error: `declined`
    /// and `cancelled` are the person's choice (not retryable), no one to
    /// ask is `unavailable`, and a bad question is the tool's bug.
    fn from(refused: Refused) -> Self {
        match refused.reason {
            AskRefusal::Declined => Self::new(
                "declined",
                format!("the person declined: {}", refused.message),
            ),
            AskRefusal::Cancelled => Self::new(
                "cancelled",
                format!("the person dismissed the question: {}", refused.message),
            ),
            AskRefusal::Unavailable => Self::new(
                "unavailable",
                format!("nobody could be asked: {}", refused.message),
            ),
            AskRefusal::InvalidQuestion => Self::new("invalid_question", refused.message),
        }
    }
}

/// Ask the person a question mid-call and wait for the answer, typed as
/// `T`: a struct whose fields are strings, numbers or booleans (an `enum`
/// of unit variants for a choice). Its doc comments become the form's
/// labels. Waiting does not count against the call's timeout.
///
/// # Errors
///
/// [`Refused`] when the person declines or dismisses the question, when
/// nobody can be asked (no terminal, a client without elicitation), or
/// when `T` is not a form the host can show.
///
/// ```no_run
/// use schemars::JsonSchema;
/// use serde::Deserialize;
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Confirm {
///     /// Delete them?
///     confirm: bool,
/// }
///
/// # fn run() -> Result<(), toolhost_guest::ToolError> {
/// let answer: Confirm = toolhost_guest::ask("Delete the 3 old reports?")?;
/// if !answer.confirm {
///     return Err(toolhost_guest::ToolError::new("declined", "kept the reports"));
/// }
/// # Ok(()) }
/// ```
pub fn ask<T: DeserializeOwned + JsonSchema>(question: &str) -> Result<T, Refused> {
    typed(ask_json(question, &form_of::<T>())?)
}

/// [`ask`], under `key`: the name clients see the question by (an MCP
/// input-required result's `inputRequests` key), so one that knows the
/// tool can answer it in the call itself. `key` is 1 to 64 of
/// `A-Z a-z 0-9 _ -`, not `q` and digits (the names [`ask`] gives), and
/// names one question of a call.
///
/// # Errors
///
/// As [`ask`]; `invalid-question` for a malformed key, or one this call
/// asked under already.
pub fn ask_with_key<T: DeserializeOwned + JsonSchema>(
    key: &str,
    question: &str,
) -> Result<T, Refused> {
    typed(ask_json_with_key(key, question, &form_of::<T>())?)
}

/// The form `T` describes, as the answer schema of a question.
fn form_of<T: JsonSchema>() -> String {
    let mut schema = schema_of::<T>();
    if let Some(object) = schema.as_object_mut() {
        // Only the form itself: clients show `title` as the form's heading.
        object.remove("$schema");
        object.remove("title");
    }
    schema.to_string()
}

/// The answer `answer` (JSON text) as a `T`.
fn typed<T: DeserializeOwned>(answer: String) -> Result<T, Refused> {
    serde_json::from_str(&answer).map_err(|e| Refused {
        reason: AskRefusal::InvalidQuestion,
        message: format!("the answer does not fit the type asked for: {e}"),
    })
}

/// [`ask`] with the answer's JSON Schema written by hand; returns the
/// answer as JSON text.
///
/// # Errors
///
/// As [`ask`].
pub fn ask_json(question: &str, answer_schema: &str) -> Result<String, Refused> {
    host::ask(question, answer_schema).map_err(Refused::from)
}

/// [`ask_json`], under `key` (see [`ask_with_key`]).
///
/// # Errors
///
/// As [`ask_with_key`].
pub fn ask_json_with_key(
    key: &str,
    question: &str,
    answer_schema: &str,
) -> Result<String, Refused> {
    host::ask_with_key(key, question, answer_schema).map_err(Refused::from)
}

/// Facts about the call in progress.
#[derive(Debug, Clone)]
pub struct Context {
    call_id: String,
    deadline_ms: u64,
    context: Option<String>,
}

impl Context {
    /// The model's `tool_call_id` for this call.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// Milliseconds the host gave this call when it started: a tool that waits
    /// on the network can give up in time to say why.
    pub fn deadline_ms(&self) -> u64 {
        self.deadline_ms
    }

    /// The context the application supplied with the call, as JSON text
    /// (a user, a tenant, a session): never written by the model, never
    /// shown to it. `None` when the application supplied none.
    pub fn context(&self) -> Option<&str> {
        self.context.as_deref()
    }

    /// [`Context::context`] read as `T`; `None` when there is none or it
    /// does not fit `T`.
    pub fn context_as<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(self.context.as_deref()?).ok()
    }
}

/// One part of a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// Text for the model.
    Text(String),
    /// An image, e.g. `image/png` bytes.
    Image {
        /// Its media type.
        mime_type: String,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// A sound, e.g. `audio/wav` bytes.
    Audio {
        /// Its media type.
        mime_type: String,
        /// Its bytes.
        data: Vec<u8>,
    },
    /// A link to a resource the client can open; its contents are not sent.
    ResourceLink {
        /// Where it is.
        uri: String,
        /// What it is called.
        name: String,
        /// Its media type, when known.
        mime_type: Option<String>,
        /// What it is, for the model.
        description: Option<String>,
    },
    /// A text resource sent whole.
    TextResource {
        /// Its URI.
        uri: String,
        /// Its media type, when known.
        mime_type: Option<String>,
        /// Its text.
        text: String,
    },
    /// A binary resource sent whole.
    BlobResource {
        /// Its URI.
        uri: String,
        /// Its media type, when known.
        mime_type: Option<String>,
        /// Its bytes.
        data: Vec<u8>,
    },
}

impl From<Content> for wit::ContentBlock {
    fn from(content: Content) -> Self {
        match content {
            Content::Text(text) => Self::Text(text),
            Content::Image { mime_type, data } => Self::Image(wit::Media { mime_type, data }),
            Content::Audio { mime_type, data } => Self::Audio(wit::Media { mime_type, data }),
            Content::ResourceLink {
                uri,
                name,
                mime_type,
                description,
            } => Self::ResourceLink(wit::ResourceLink {
                uri,
                name,
                mime_type,
                description,
            }),
            Content::TextResource {
                uri,
                mime_type,
                text,
            } => Self::Embedded(wit::EmbeddedResource {
                uri,
                mime_type,
                contents: wit::ResourceContents::Text(text),
            }),
            Content::BlobResource {
                uri,
                mime_type,
                data,
            } => Self::Embedded(wit::EmbeddedResource {
                uri,
                mime_type,
                contents: wit::ResourceContents::Blob(data),
            }),
        }
    }
}

impl From<wit::ContentBlock> for Content {
    fn from(block: wit::ContentBlock) -> Self {
        match block {
            wit::ContentBlock::Text(text) => Self::Text(text),
            wit::ContentBlock::Image(m) => Self::Image {
                mime_type: m.mime_type,
                data: m.data,
            },
            wit::ContentBlock::Audio(m) => Self::Audio {
                mime_type: m.mime_type,
                data: m.data,
            },
            wit::ContentBlock::ResourceLink(link) => Self::ResourceLink {
                uri: link.uri,
                name: link.name,
                mime_type: link.mime_type,
                description: link.description,
            },
            wit::ContentBlock::Embedded(resource) => match resource.contents {
                wit::ResourceContents::Text(text) => Self::TextResource {
                    uri: resource.uri,
                    mime_type: resource.mime_type,
                    text,
                },
                wit::ResourceContents::Blob(data) => Self::BlobResource {
                    uri: resource.uri,
                    mime_type: resource.mime_type,
                    data,
                },
            },
        }
    }
}

/// A successful tool result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// What the model reads and sees, in order.
    pub content: Vec<Content>,
    /// JSON for clients that use structured output (MCP `structuredContent`).
    pub structured: Option<String>,
    /// Kept for the application, never sent to the model.
    pub artifact: Option<String>,
}

impl Output {
    /// A plain-text result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text(content.into())],
            ..Self::default()
        }
    }

    /// A result of one image.
    pub fn image(mime_type: impl Into<String>, data: Vec<u8>) -> Self {
        Self::default().with_image(mime_type, data)
    }

    /// A structured result: `value` as JSON, both as the model's text and as
    /// `structured`.
    ///
    /// # Panics
    ///
    /// Panics if `value` cannot be serialized to JSON (a map with non-string
    /// keys, a failing `Serialize` impl): that is a bug in the tool.
    pub fn json(value: &impl Serialize) -> Self {
        let json = serde_json::to_string(value).expect("tool output must serialize to JSON");
        Self {
            content: vec![Content::Text(json.clone())],
            structured: Some(json),
            artifact: None,
        }
    }

    /// The text blocks, joined by newlines: what a text-only client reads.
    pub fn to_text(&self) -> String {
        self.content
            .iter()
            .filter_map(|c| match c {
                Content::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Replace the model's content with one text, keeping any structured
    /// result.
    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = vec![Content::Text(content.into())];
        self
    }

    /// Add a block.
    pub fn with(mut self, content: Content) -> Self {
        self.content.push(content);
        self
    }

    /// Add text.
    pub fn with_text(self, text: impl Into<String>) -> Self {
        self.with(Content::Text(text.into()))
    }

    /// Add an image (`image/png`, `image/jpeg`, `image/gif` or
    /// `image/webp` reach every client).
    pub fn with_image(self, mime_type: impl Into<String>, data: Vec<u8>) -> Self {
        self.with(Content::Image {
            mime_type: mime_type.into(),
            data,
        })
    }

    /// Add a sound.
    pub fn with_audio(self, mime_type: impl Into<String>, data: Vec<u8>) -> Self {
        self.with(Content::Audio {
            mime_type: mime_type.into(),
            data,
        })
    }

    /// Add a link to a resource.
    pub fn with_link(
        self,
        uri: impl Into<String>,
        name: impl Into<String>,
        description: Option<String>,
    ) -> Self {
        self.with(Content::ResourceLink {
            uri: uri.into(),
            name: name.into(),
            mime_type: None,
            description,
        })
    }

    /// Attach data for the application that the model never sees.
    pub fn with_artifact(mut self, artifact: impl Into<String>) -> Self {
        self.artifact = Some(artifact.into());
        self
    }
}

impl From<String> for Output {
    fn from(content: String) -> Self {
        Self::text(content)
    }
}

impl From<&str> for Output {
    fn from(content: &str) -> Self {
        Self::text(content)
    }
}

/// A failure the tool reports: the host sends it to the model as a
/// `tool_error` with this kind, message and retry hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// Short machine-readable class, e.g. `not_found`.
    pub kind: String,
    /// What went wrong, written for the model: say what to change.
    pub message: String,
    /// Whether calling again (perhaps with other arguments) can succeed.
    pub retryable: bool,
}

impl ToolError {
    /// A failure of class `kind`, not retryable unless [`ToolError::retryable`] says so.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            message: message.into(),
            retryable: false,
        }
    }

    /// Set whether a retry can help.
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// The arguments are well-formed but make no sense: the model should fix them.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new("invalid_input", message).retryable(true)
    }

    /// What the arguments name does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new("not_found", message).retryable(true)
    }

    /// Something the tool depends on failed; trying later may work.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new("unavailable", message).retryable(true)
    }

    /// The tool was refused something (a file, a host) by its grants.
    pub fn permission_denied(message: impl Into<String>) -> Self {
        Self::new("permission_denied", message)
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<std::io::Error> for ToolError {
    /// File errors become typed tool errors. Prefer [`ToolError::file`],
    /// which names the path and tells a path outside the tool's grants from
    /// one that does not exist.
    fn from(error: std::io::Error) -> Self {
        use std::io::ErrorKind;
        let message = error.to_string();
        match error.kind() {
            ErrorKind::NotFound => Self::not_found(message),
            ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => {
                Self::permission_denied(message)
            }
            ErrorKind::InvalidInput | ErrorKind::InvalidFilename => Self::invalid_input(message),
            _ => Self::new("io", message),
        }
    }
}

impl ToolError {
    /// A file error on `path`, worded for the model.
    ///
    /// WASI reports a path outside every directory the manifest grants as
    /// not found (`os error 44`), which would send the model looking for a
    /// file that may well exist. When neither the path nor any directory
    /// above it can be seen, the path is outside the grants: that is
    /// `permission_denied`, not retryable, and the message says so and how
    /// to grant it. Otherwise the error is as [`From<std::io::Error>`] makes
    /// it, with the path in the message.
    ///
    /// ```no_run
    /// # use toolhost_guest::ToolError;
    /// fn read(path: &str) -> Result<String, ToolError> {
    ///     std::fs::read_to_string(path).map_err(|e| ToolError::file(e, path))
    /// }
    /// ```
    pub fn file(error: std::io::Error, path: impl AsRef<std::path::Path>) -> Self {
        let path = path.as_ref();
        if !within_grants(path) {
            return Self::permission_denied(format!(
                "{} is outside this tool's file grants: use a path under a directory the \
                 tool is granted, or grant one in toolhost.toml \
                 (files = [{{ host = \"./data\", guest = \"/data\", mode = \"read-only\" }}])",
                path.display()
            ));
        }
        let mut error = Self::from(error);
        error.message = format!("{}: {}", path.display(), error.message);
        if error.kind == "permission_denied" {
            error.message.push_str(
                " (a write to a read-only grant? grant mode = \"read-write\" in toolhost.toml)",
            );
        }
        error
    }
}

/// Whether `path`, or a directory above it, can be seen: inside WASI, only
/// what the manifest grants can. `..` is resolved in the text first, as
/// WASI does, so `/data/../etc` is not inside `/data`.
fn within_grants(path: &std::path::Path) -> bool {
    use std::path::Component;
    // A relative path is relative to the working directory.
    let full = match std::env::current_dir() {
        Ok(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_path_buf(),
    };
    let mut normal = std::path::PathBuf::new();
    for component in full.components() {
        match component {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            other => normal.push(other),
        }
    }
    normal
        .ancestors()
        .filter(|dir| !dir.as_os_str().is_empty())
        .any(|dir| std::fs::symlink_metadata(dir).is_ok())
}

impl From<http::Error> for ToolError {
    fn from(error: http::Error) -> Self {
        match &error {
            http::Error::Denied { .. } => Self::permission_denied(error.to_string()),
            http::Error::InvalidUrl { .. } => Self::invalid_input(error.to_string()),
            _ => Self::unavailable(error.to_string()),
        }
    }
}

/// A tool: its name, description, hints and handler.
///
/// Build one with [`Tool::new`] and list it in [`export_tools!`].
pub struct Tool {
    name: String,
    title: Option<String>,
    description: String,
    hints: wit::Hints,
    input_schema: fn() -> serde_json::Value,
    output_schema: Option<fn() -> serde_json::Value>,
    run: Box<RunFn>,
}

/// Deserializes the arguments JSON and runs the handler.
type RunFn = dyn Fn(&str, &Context) -> Result<Output, ToolError>;

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .field("hints", &self.hints)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// A tool named `name` (`^[A-Za-z0-9_-]{1,64}$`) that runs `handler`.
    ///
    /// `handler` takes the deserialized arguments, and optionally the call's
    /// [`Context`]; its input schema is derived from the arguments type.
    pub fn new<A, M>(
        name: impl Into<String>,
        description: impl Into<String>,
        handler: impl Handler<A, M> + 'static,
    ) -> Self
    where
        A: DeserializeOwned + JsonSchema,
    {
        Self {
            name: name.into(),
            title: None,
            description: description.into(),
            hints: wit::Hints::empty(),
            input_schema: schema_of::<A>,
            output_schema: None,
            run: Box::new(move |arguments, cx| {
                let args: A = serde_json::from_str(arguments).map_err(|e| {
                    ToolError::invalid_input(format!("arguments do not fit the schema: {e}"))
                })?;
                handler.call(args, cx)
            }),
        }
    }

    /// A title for people (MCP clients show it); without one, the host
    /// derives it from the name.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// Declare the schema of [`Output::structured`] (MCP `outputSchema`).
    pub fn output<T: JsonSchema>(mut self) -> Self {
        self.output_schema = Some(schema_of::<T>);
        self
    }

    /// Hint: the tool changes nothing outside its own instance.
    pub fn read_only(mut self) -> Self {
        self.hints |= wit::Hints::READ_ONLY;
        self
    }

    /// Hint: the tool may delete or overwrite data. With
    /// `approval = "destructive"` the host asks before running it.
    pub fn destructive(mut self) -> Self {
        self.hints |= wit::Hints::DESTRUCTIVE;
        self
    }

    /// Hint: calling twice with the same arguments does what calling once does.
    pub fn idempotent(mut self) -> Self {
        self.hints |= wit::Hints::IDEMPOTENT;
        self
    }

    /// Hint: the tool talks to the world outside the host.
    pub fn open_world(mut self) -> Self {
        self.hints |= wit::Hints::OPEN_WORLD;
        self
    }

    fn spec(&self) -> wit::ToolSpec {
        wit::ToolSpec {
            name: self.name.clone(),
            title: self.title.clone(),
            description: self.description.clone(),
            input_schema: (self.input_schema)().to_string(),
            output_schema: self.output_schema.map(|schema| schema().to_string()),
            hints: self.hints,
        }
    }
}

/// `T`'s JSON Schema, as the host and every client can read it: schemars'
/// defaults (draft 2020-12), with its integer `format`s that clients do not
/// know replaced by the bounds they stand for ([`IntegerFormats`]).
fn schema_of<T: JsonSchema>() -> serde_json::Value {
    schemars::generate::SchemaSettings::default()
        .with_transform(IntegerFormats)
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value()
}

/// Replaces the integer `format`s schemars writes for Rust's integer types
/// (`uint8`, `uint16`, `uint32`, `uint64`, `uint128`, `uint`, `int8`,
/// `int16`, `int128`, `int`) by the `minimum` and `maximum` they stand for,
/// keeping a tighter bound of the schema's own (from `range(…)`). Clients
/// do not know those formats: the MCP TypeScript SDK warns on every
/// listing, and strict validators refuse the schema. `int32` and `int64`
/// (OpenAPI's, which clients know) are kept. The host does the same to
/// every component's schemas when it loads them; doing it here keeps the
/// schemas a tool describes itself with exactly what the host shows.
#[derive(Debug, Clone, Copy)]
struct IntegerFormats;

impl schemars::transform::Transform for IntegerFormats {
    fn transform(&mut self, schema: &mut schemars::Schema) {
        if let Some(object) = schema.as_object_mut()
            && let Some((minimum, maximum)) = object
                .get("format")
                .and_then(serde_json::Value::as_str)
                .and_then(integer_bounds)
        {
            object.remove("format");
            if let Some(minimum) = minimum {
                tighten(object, "minimum", minimum, std::cmp::Ordering::Greater);
            }
            if let Some(maximum) = maximum {
                tighten(object, "maximum", maximum, std::cmp::Ordering::Less);
            }
        }
        schemars::transform::transform_subschemas(self, schema);
    }
}

/// The bounds of the integer type schemars names `format`; a 128-bit type's
/// bounds beyond 64 bits are left out (JSON numbers do not carry them
/// exactly), and its deserialization checks them.
fn integer_bounds(format: &str) -> Option<(Option<i128>, Option<i128>)> {
    let range = |min: i128, max: i128| Some((Some(min), Some(max)));
    match format {
        "int8" => range(i8::MIN.into(), i8::MAX.into()),
        "int16" => range(i16::MIN.into(), i16::MAX.into()),
        "int" => range(isize::MIN as i128, isize::MAX as i128),
        "uint8" => range(0, u8::MAX.into()),
        "uint16" => range(0, u16::MAX.into()),
        "uint32" => range(0, u32::MAX.into()),
        "uint64" => range(0, u64::MAX.into()),
        "uint" => range(0, usize::MAX as i128),
        "uint128" => Some((Some(0), None)),
        "int128" => Some((None, None)),
        _ => None,
    }
}

/// Set `keyword` to `bound` unless the schema's own bound is tighter
/// (compares as `tighter` against it).
fn tighten(
    object: &mut serde_json::Map<String, serde_json::Value>,
    keyword: &str,
    bound: i128,
    tighter: std::cmp::Ordering,
) {
    // Exactly for integers, as `f64` for other numbers; anything else (a
    // schema error) is left for the host to report.
    let keep_own = object.get(keyword).is_some_and(|own| {
        match own
            .as_i64()
            .map(i128::from)
            .or_else(|| own.as_u64().map(i128::from))
        {
            Some(own) => bound.cmp(&own) != tighter,
            None => own
                .as_f64()
                .is_none_or(|own| (bound as f64).partial_cmp(&own) != Some(tighter)),
        }
    });
    if !keep_own {
        let number = i64::try_from(bound)
            .map(serde_json::Number::from)
            .or_else(|_| u64::try_from(bound).map(serde_json::Number::from));
        if let Ok(number) = number {
            object.insert(keyword.to_owned(), number.into());
        }
    }
}

/// A function that can handle a tool call: `fn(A) -> Result<O, E>` or
/// `fn(A, &Context) -> Result<O, E>`, where `O: Into<Output>` and
/// `E: Into<ToolError>`. `M` only tells the two shapes apart.
pub trait Handler<A, M> {
    /// Run the tool.
    fn call(&self, args: A, cx: &Context) -> Result<Output, ToolError>;
}

/// Marker for handlers that take only their arguments.
#[derive(Debug)]
pub struct ArgsOnly(PhantomData<()>);

/// Marker for handlers that also take the [`Context`].
#[derive(Debug)]
pub struct WithContext(PhantomData<()>);

impl<A, O, E, F> Handler<A, ArgsOnly> for F
where
    F: Fn(A) -> Result<O, E>,
    O: Into<Output>,
    E: Into<ToolError>,
{
    fn call(&self, args: A, _cx: &Context) -> Result<Output, ToolError> {
        self(args).map(Into::into).map_err(Into::into)
    }
}

impl<A, O, E, F> Handler<A, WithContext> for F
where
    F: Fn(A, &Context) -> Result<O, E>,
    O: Into<Output>,
    E: Into<ToolError>,
{
    fn call(&self, args: A, cx: &Context) -> Result<Output, ToolError> {
        self(args, cx).map(Into::into).map_err(Into::into)
    }
}

/// Export the listed [`Tool`]s as this crate's component.
///
/// Use it once, at the crate root of a `cdylib` built for `wasm32-wasip2`.
/// See the [crate docs](crate) for a complete example.
#[macro_export]
macro_rules! export_tools {
    ($($tool:expr),+ $(,)?) => {
        // The generated exports are `unsafe` FFI glue: keep them out of the
        // tool crate's own `unsafe_code` lint.
        #[allow(unsafe_code)]
        const _: () = {
            struct __ToolhostComponent;

            impl $crate::__private::Provider for __ToolhostComponent {
                fn tools() -> ::std::vec::Vec<$crate::Tool> {
                    ::std::vec![$($tool),+]
                }
            }

            $crate::bindings::__export_toolbox!(__ToolhostComponent with_types_in $crate::bindings);
        };
    };
}

#[doc(hidden)]
pub mod __private {
    /// Implemented by [`export_tools!`](crate::export_tools).
    pub trait Provider {
        fn tools() -> Vec<crate::Tool>;
    }
}

impl<P: __private::Provider> wit_tool::Guest for P {
    fn tools() -> Vec<wit::ToolSpec> {
        P::tools().iter().map(Tool::spec).collect()
    }

    fn call(
        name: String,
        arguments: String,
        context: wit::CallContext,
    ) -> Result<wit::ToolOutput, wit::ToolError> {
        let cx = Context {
            call_id: context.call_id,
            deadline_ms: context.deadline_ms,
            context: context.context,
        };
        let tools = P::tools();
        let result = match tools.iter().find(|tool| tool.name == name) {
            Some(tool) => (tool.run)(&arguments, &cx),
            None => Err(ToolError::new(
                "unknown_tool",
                format!("this component has no tool named {name:?}"),
            )),
        };
        result
            .map(|out| wit::ToolOutput {
                content: out.content.into_iter().map(Into::into).collect(),
                structured: out.structured,
                artifact: out.artifact,
            })
            .map_err(|e| wit::ToolError {
                kind: e.kind,
                message: e.message,
                retryable: e.retryable,
            })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every Rust integer type, as a tool's arguments may hold them.
    #[derive(serde::Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Integers {
        a: u8,
        b: u16,
        c: u32,
        d: u64,
        e: usize,
        f: u128,
        g: i8,
        h: i16,
        i: i32,
        j: i64,
        k: isize,
        l: i128,
        m: Option<u16>,
        #[schemars(range(min = 1, max = 100))]
        n: u32,
        o: Vec<u8>,
        p: f64,
    }

    /// Issue 24: schemars' `uint16`, `uint64` … made the MCP TypeScript
    /// SDK warn on every listing.
    #[test]
    fn schemas_carry_no_integer_format_clients_do_not_know() {
        let schema = schema_of::<Integers>();
        let property = |name: &str| schema["properties"][name].clone();
        let bounded = |min: serde_json::Value, max: serde_json::Value| json!({"type": "integer", "minimum": min, "maximum": max});
        assert_eq!(property("a"), bounded(json!(0), json!(255)));
        assert_eq!(property("b"), bounded(json!(0), json!(65535)));
        assert_eq!(property("c"), bounded(json!(0), json!(u32::MAX)));
        assert_eq!(property("d"), bounded(json!(0), json!(u64::MAX)));
        assert_eq!(property("e"), bounded(json!(0), json!(usize::MAX)));
        assert_eq!(property("f"), json!({"type": "integer", "minimum": 0}));
        assert_eq!(property("g"), bounded(json!(-128), json!(127)));
        assert_eq!(property("h"), bounded(json!(-32768), json!(32767)));
        assert_eq!(property("k"), bounded(json!(isize::MIN), json!(isize::MAX)));
        assert_eq!(property("l"), json!({"type": "integer"}));
        assert_eq!(
            property("m"),
            json!({"type": ["integer", "null"], "minimum": 0, "maximum": 65535})
        );
        // A tighter range of the field's own is kept.
        assert_eq!(property("n"), bounded(json!(1), json!(100)));
        assert_eq!(property("o")["items"], bounded(json!(0), json!(255)));
        // What clients know stays: OpenAPI's int32 and int64, and number
        // formats.
        assert_eq!(property("i")["format"], "int32");
        assert_eq!(property("j")["format"], "int64");
        assert_eq!(property("p")["format"], "double");
    }
}
