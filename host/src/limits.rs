//! Resource limits of a tool call: fuel, wall-clock deadline, memory, output
//! size and concurrency.
//!
//! Every component gets the manifest's `[limits]` defaults, overridden key by
//! key by its own `limits = { … }`.

use std::time::Duration;

use serde::Deserialize;

/// The limits one call of a tool runs under.
///
/// Built from [`Limits::default`] with checked setters, so a limit no call
/// could run under (a zero timeout or concurrency, memory under one wasm
/// page) is refused where it is set, never met at call time:
///
/// ```
/// use std::time::Duration;
/// use toolhost::Limits;
///
/// let limits = Limits::default()
///     .with_timeout(Duration::from_secs(2))?
///     .with_memory(32 << 20)?
///     .with_max_concurrency(4)?;
/// assert_eq!(limits.timeout(), Duration::from_secs(2));
/// assert!(Limits::default().with_max_concurrency(0).is_err());
/// # Ok::<(), toolhost::LimitsError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the whole call, instantiation and waiting on I/O
    /// included. Exceeding it ends the call with `timeout`.
    pub(crate) timeout: Duration,
    /// Units of fuel (roughly, wasm instructions) the call may use. Running
    /// out ends the call with `fuel_exhausted`.
    pub(crate) fuel: u64,
    /// Bytes of linear memory and table storage for the whole instance, all
    /// memories together. A refused growth ends the call with
    /// `memory_exhausted` if the tool fails because of it.
    pub(crate) memory: u64,
    /// Bytes of output (content and structured each) sent on to the model;
    /// longer output is truncated with a visible marker.
    pub(crate) max_output: usize,
    /// Calls of this component that may run at once; more wait their turn.
    pub(crate) max_concurrency: usize,
    /// Bytes of arguments (as JSON text) a call may carry; more is refused
    /// as `invalid_arguments` before it is parsed.
    pub(crate) max_arguments: usize,
    /// Instances of the component made ahead of its calls and kept ready,
    /// so a call pays for running, not for instantiating. Each is still
    /// used for exactly one call and then discarded. Each one held ready
    /// keeps one slot of the instance pool and its memory (see
    /// `docs/performance.md`).
    pub(crate) ready: ReadyInstances,
}

/// How many instances of a component are made ahead of its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReadyInstances {
    /// Two, unless instantiating the component is so quick (most Rust and C
    /// tools) that handing it to a background task costs a call more than
    /// it saves; then none. The default.
    Auto,
    /// Exactly this many, however quick instantiating is; 0 makes every
    /// instance when its call arrives.
    Exactly(usize),
}

impl ReadyInstances {
    /// How many to keep at most, and whether that depends on measuring.
    pub(crate) fn most(self) -> (usize, bool) {
        match self {
            Self::Auto => (AUTO_READY, true),
            Self::Exactly(n) => (n, false),
        }
    }
}

/// What `ready = "auto"` keeps where it pays: one for the call that comes,
/// one for the call that comes while the first is replaced.
const AUTO_READY: usize = 2;

impl Default for Limits {
    /// Defaults that let an ordinary tool run and stop a runaway one quickly:
    /// 5 s, 2e9 fuel (about a second of compute), 64 MiB, 32 KiB of output,
    /// 16 concurrent calls, 256 KiB of arguments, instances made ahead
    /// where that pays ([`ReadyInstances::Auto`]).
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            fuel: 2_000_000_000,
            memory: 64 * 1024 * 1024,
            max_output: 32 * 1024,
            max_concurrency: 16,
            max_arguments: 256 * 1024,
            ready: ReadyInstances::Auto,
        }
    }
}

/// `[limits]` or a tool's `limits = { … }` as written: every key optional.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    pub timeout: Option<String>,
    pub fuel: Option<u64>,
    pub memory: Option<ByteSize>,
    pub max_output: Option<ByteSize>,
    pub max_concurrency: Option<usize>,
    pub max_arguments: Option<ByteSize>,
    pub ready: Option<RawReady>,
}

/// `ready` as written: a count or `"auto"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawReady {
    Count(usize),
    Word(String),
}

/// A size written as a number of bytes or a string like `"64MiB"`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub(crate) enum ByteSize {
    Bytes(u64),
    Text(String),
}

impl ByteSize {
    pub(crate) fn bytes(&self) -> Result<u64, String> {
        match self {
            Self::Bytes(n) => Ok(*n),
            Self::Text(text) => text
                .parse::<bytesize::ByteSize>()
                .map(|size| size.as_u64())
                .map_err(|_| format!("{text:?} is not a size; write e.g. \"64MiB\" or \"32KiB\"")),
        }
    }
}

impl Limits {
    /// These limits with the keys set in `raw` replaced. Errors name the key.
    pub(crate) fn overridden_by(&self, raw: &RawLimits) -> Result<Self, (&'static str, String)> {
        let mut limits = *self;
        if let Some(timeout) = &raw.timeout {
            let parsed = crate::duration::parse(timeout).map_err(|_| {
                (
                    "timeout",
                    format!("{timeout:?} is not a duration; write e.g. \"5s\" or \"500ms\""),
                )
            })?;
            limits = limits.with_timeout(parsed)?;
        }
        if let Some(fuel) = raw.fuel {
            limits = limits.with_fuel(fuel)?;
        }
        if let Some(memory) = &raw.memory {
            limits = limits.with_memory(memory.bytes().map_err(|e| ("memory", e))?)?;
        }
        if let Some(max_output) = &raw.max_output {
            let bytes = max_output.bytes().map_err(|e| ("max_output", e))?;
            limits = limits.with_max_output(usize::try_from(bytes).unwrap_or(usize::MAX))?;
        }
        if let Some(max_arguments) = &raw.max_arguments {
            let bytes = max_arguments.bytes().map_err(|e| ("max_arguments", e))?;
            limits = limits.with_max_arguments(usize::try_from(bytes).unwrap_or(usize::MAX))?;
        }
        if let Some(max_concurrency) = raw.max_concurrency {
            limits = limits.with_max_concurrency(max_concurrency)?;
        }
        if let Some(ready) = &raw.ready {
            let ready = match ready {
                RawReady::Word(word) if word == "auto" => Some(ReadyInstances::Auto),
                RawReady::Count(n) => Some(ReadyInstances::Exactly(*n)),
                RawReady::Word(_) => None,
            };
            limits = ready
                .ok_or_else(LimitsError::ready)
                .and_then(|ready| limits.with_ready(ready))?;
        }
        Ok(limits)
    }
}

/// A limit no call could run under, refused where it was set: the key (as
/// the manifest's `[limits]` names it) and what is wrong with the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
#[non_exhaustive]
pub struct LimitsError {
    /// The limit, as `[limits]` names it (`timeout`, `memory`, …).
    pub key: &'static str,
    /// What is wrong and the range it must be in.
    pub message: String,
}

impl LimitsError {
    fn new(key: &'static str, message: impl Into<String>) -> Self {
        Self {
            key,
            message: message.into(),
        }
    }

    fn ready() -> Self {
        Self::new(
            "ready",
            format!(
                "must be \"auto\" or a count from 0 to {MAX_READY} (0 makes every instance at call time)"
            ),
        )
    }
}

impl From<LimitsError> for (&'static str, String) {
    fn from(error: LimitsError) -> Self {
        (error.key, error.message)
    }
}

impl Limits {
    /// Wall-clock time for the whole call, instantiation and waiting on
    /// I/O included. Exceeding it ends the call with `timeout`.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Units of fuel (roughly, wasm instructions) the call may use.
    /// Running out ends the call with `fuel_exhausted`.
    pub fn fuel(&self) -> u64 {
        self.fuel
    }

    /// Bytes of linear memory and table storage for the whole instance.
    pub fn memory(&self) -> u64 {
        self.memory
    }

    /// Bytes of output (content and structured each) sent on to the
    /// model; longer output is truncated with a visible marker.
    pub fn max_output(&self) -> usize {
        self.max_output
    }

    /// Calls of this component that may run at once; more wait their turn.
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// Bytes of arguments (as JSON text) a call may carry; more is refused
    /// as `invalid_arguments` before it is parsed.
    pub fn max_arguments(&self) -> usize {
        self.max_arguments
    }

    /// Instances of the component made ahead of its calls and kept ready.
    pub fn ready(&self) -> ReadyInstances {
        self.ready
    }

    /// These limits with the timeout `timeout`.
    ///
    /// # Errors
    ///
    /// Zero, or longer than [`MAX_TIMEOUT`].
    pub fn with_timeout(mut self, timeout: Duration) -> Result<Self, LimitsError> {
        if timeout.is_zero() {
            return Err(LimitsError::new("timeout", "must be longer than zero"));
        }
        if timeout > MAX_TIMEOUT {
            return Err(LimitsError::new(
                "timeout",
                format!(
                    "must be at most {}",
                    humantime::format_duration(MAX_TIMEOUT)
                ),
            ));
        }
        self.timeout = timeout;
        Ok(self)
    }

    /// These limits with `fuel` units of fuel.
    ///
    /// # Errors
    ///
    /// Zero.
    pub fn with_fuel(mut self, fuel: u64) -> Result<Self, LimitsError> {
        if fuel == 0 {
            return Err(LimitsError::new("fuel", "must be at least 1"));
        }
        self.fuel = fuel;
        Ok(self)
    }

    /// These limits with `memory` bytes of memory.
    ///
    /// # Errors
    ///
    /// Under one wasm page (64 KiB) or over 4 GiB.
    pub fn with_memory(mut self, memory: u64) -> Result<Self, LimitsError> {
        if memory < MIN_MEMORY {
            return Err(LimitsError::new(
                "memory",
                format!("must be at least {MIN_MEMORY} bytes (one wasm page)"),
            ));
        }
        if memory > MAX_MEMORY {
            return Err(LimitsError::new(
                "memory",
                format!("must be at most {MAX_MEMORY} bytes (4 GiB)"),
            ));
        }
        self.memory = memory;
        Ok(self)
    }

    /// These limits with at most `bytes` of output.
    ///
    /// # Errors
    ///
    /// Under 256 bytes: too little for the truncation marker.
    pub fn with_max_output(mut self, bytes: usize) -> Result<Self, LimitsError> {
        if bytes < MIN_OUTPUT {
            return Err(LimitsError::new(
                "max_output",
                format!("must be between {MIN_OUTPUT} bytes and the address space"),
            ));
        }
        self.max_output = bytes;
        Ok(self)
    }

    /// These limits with at most `bytes` of arguments.
    ///
    /// # Errors
    ///
    /// Under 2 bytes (`{}`) or over 64 MiB.
    pub fn with_max_arguments(mut self, bytes: usize) -> Result<Self, LimitsError> {
        if !(MIN_ARGUMENTS..=MAX_ARGUMENTS).contains(&bytes) {
            return Err(LimitsError::new(
                "max_arguments",
                format!("must be between {MIN_ARGUMENTS} bytes and {MAX_ARGUMENTS} bytes (64 MiB)"),
            ));
        }
        self.max_arguments = bytes;
        Ok(self)
    }

    /// These limits with at most `calls` of the component at once.
    ///
    /// # Errors
    ///
    /// Zero (no call could ever run), or over 65,536.
    pub fn with_max_concurrency(mut self, calls: usize) -> Result<Self, LimitsError> {
        if !(1..=MAX_CONCURRENCY).contains(&calls) {
            return Err(LimitsError::new(
                "max_concurrency",
                format!("must be between 1 and {MAX_CONCURRENCY}"),
            ));
        }
        self.max_concurrency = calls;
        Ok(self)
    }

    /// These limits with `ready` instances made ahead of calls.
    ///
    /// # Errors
    ///
    /// More than 64.
    pub fn with_ready(mut self, ready: ReadyInstances) -> Result<Self, LimitsError> {
        if matches!(ready, ReadyInstances::Exactly(n) if n > MAX_READY) {
            return Err(LimitsError::ready());
        }
        self.ready = ready;
        Ok(self)
    }
}

/// The longest a call may run: a day is past any tool's need, and far
/// below the deadline arithmetic's overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// One wasm page: no instance with a memory can run in less.
const MIN_MEMORY: u64 = 64 * 1024;
/// The most a 32-bit linear memory can address.
const MAX_MEMORY: u64 = 4 * 1024 * 1024 * 1024;
/// Room for the truncation marker and a little text.
const MIN_OUTPUT: usize = 256;
/// Far more calls of one component at once than one host can run.
const MAX_CONCURRENCY: usize = 65_536;
/// Instances one component may keep ready: each holds a pool slot and its
/// memory, and a handful already hides instantiation from one caller.
const MAX_READY: usize = 64;
/// `{}` and a little more.
const MIN_ARGUMENTS: usize = 2;
/// Far more than any model writes in one call; the host parses and checks
/// arguments before the tool runs, so this bounds that work.
const MAX_ARGUMENTS: usize = 64 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(toml: &str) -> RawLimits {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn overrides_only_the_keys_given() {
        let limits = Limits::default()
            .overridden_by(&raw(r#"timeout = "250ms"
memory = "128MiB"
max_output = 1024"#))
            .unwrap();
        assert_eq!(limits.timeout, Duration::from_millis(250));
        assert_eq!(limits.memory, 128 * 1024 * 1024);
        assert_eq!(limits.max_output, 1024);
        assert_eq!(limits.fuel, Limits::default().fuel);
    }

    #[test]
    fn bad_values_name_the_key_and_the_fix() {
        let err = Limits::default()
            .overridden_by(&raw(r#"timeout = "soon""#))
            .unwrap_err();
        assert_eq!(err.0, "timeout");
        assert!(err.1.contains("\"5s\""), "{}", err.1);
        let err = Limits::default()
            .overridden_by(&raw(r#"memory = "lots""#))
            .unwrap_err();
        assert_eq!(err.0, "memory");
        let err = Limits::default()
            .overridden_by(&raw("max_concurrency = 0"))
            .unwrap_err();
        assert_eq!(err.0, "max_concurrency");
        let err = Limits::default()
            .overridden_by(&raw(r#"memory = "8GiB""#))
            .unwrap_err();
        assert!(err.1.contains("4 GiB"));
        let err = Limits::default()
            .overridden_by(&raw("ready = 65"))
            .unwrap_err();
        assert_eq!(err.0, "ready");
        assert!(err.1.contains("from 0 to 64"), "{}", err.1);
        let err = Limits::default()
            .overridden_by(&raw(r#"ready = "lots""#))
            .unwrap_err();
        assert!(err.1.contains(r#""auto""#), "{}", err.1);
        let ready = |toml: &str| Limits::default().overridden_by(&raw(toml)).unwrap().ready;
        assert_eq!(ready("ready = 0"), ReadyInstances::Exactly(0));
        assert_eq!(ready(r#"ready = "auto""#), ReadyInstances::Auto);
        assert_eq!(Limits::default().ready, ReadyInstances::Auto);
    }
}
