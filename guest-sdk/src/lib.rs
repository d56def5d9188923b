//! Write [toolhost](https://github.com/toolhost/toolhost) tools in Rust.
//!
//! A tool is a typed arguments struct and a function. The SDK derives the
//! input JSON Schema from the struct (with [`schemars`]), deserializes the
//! model's arguments for you, and turns your [`ToolError`]s into the typed
//! errors the host sends back to the model. [`log`] and [`config`] are plain
//! functions, and [`http`] makes outgoing requests through `wasi:http`, which
//! the host allows only to the hosts the manifest grants.
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
//! #     assert_eq!(out.content, "Hello, Ada!!");
//! # }
//! ```
//!
//! A handler may also take the call's [`Context`] as a second argument:
//! `fn fetch(args: FetchArgs, cx: &Context) -> Result<Output, ToolError>`.

#![deny(missing_docs)]

pub mod bindings;
pub mod http;

use std::fmt;
use std::marker::PhantomData;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;

use bindings::exports::toolhost::tool::tool as wit_tool;
use bindings::toolhost::tool::host;
use bindings::toolhost::tool::types as wit;

pub use bindings::toolhost::tool::host::Level;

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

/// Facts about the call in progress.
#[derive(Debug, Clone)]
pub struct Context {
    call_id: String,
    deadline_ms: u64,
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
}

/// A successful tool result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// Text for the model.
    pub content: String,
    /// JSON for clients that use structured output (MCP `structuredContent`).
    pub structured: Option<String>,
    /// Kept for the application, never sent to the model.
    pub artifact: Option<String>,
}

impl Output {
    /// A plain-text result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            ..Self::default()
        }
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
            content: json.clone(),
            structured: Some(json),
            artifact: None,
        }
    }

    /// Replace the model's text, keeping any structured result.
    pub fn with_content(mut self, content: impl Into<String>) -> Self {
        self.content = content.into();
        self
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
    /// File errors become typed tool errors. A file outside the granted
    /// directories, or a write to a read-only one, is `permission_denied` or
    /// `not_found` depending on how WASI refused it.
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
            description: self.description.clone(),
            input_schema: (self.input_schema)().to_string(),
            output_schema: self.output_schema.map(|schema| schema().to_string()),
            hints: self.hints,
        }
    }
}

fn schema_of<T: JsonSchema>() -> serde_json::Value {
    schemars::schema_for!(T).to_value()
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
                content: out.content,
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
