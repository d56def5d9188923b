//! Resource limits of a tool call: fuel, wall-clock deadline, memory, output
//! size and concurrency.
//!
//! Every component gets the manifest's `[limits]` defaults, overridden key by
//! key by its own `limits = { … }`.

use std::time::Duration;

use serde::Deserialize;

/// The limits one call of a tool runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall-clock time for the whole call, instantiation and waiting on I/O
    /// included. Exceeding it ends the call with `timeout`.
    pub timeout: Duration,
    /// Units of fuel (roughly, wasm instructions) the call may use. Running
    /// out ends the call with `fuel_exhausted`.
    pub fuel: u64,
    /// Bytes of linear memory and table storage for the whole instance, all
    /// memories together. A refused growth ends the call with
    /// `memory_exhausted` if the tool fails because of it.
    pub memory: u64,
    /// Bytes of output (content and structured each) sent on to the model;
    /// longer output is truncated with a visible marker.
    pub max_output: usize,
    /// Calls of this component that may run at once; more wait their turn.
    pub max_concurrency: usize,
    /// Bytes of arguments (as JSON text) a call may carry; more is refused
    /// as `invalid_arguments` before it is parsed.
    pub max_arguments: usize,
    /// Instances of the component made ahead of its calls and kept ready,
    /// so a call pays for running, not for instantiating. Each is still
    /// used for exactly one call and then discarded. Each one held ready
    /// keeps one slot of the instance pool and its memory (see the README's
    /// Performance section).
    pub ready: ReadyInstances,
}

/// How many instances of a component are made ahead of its calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
#[derive(Debug, Clone, Deserialize)]
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
            limits.timeout = crate::duration::parse(timeout).map_err(|_| {
                (
                    "timeout",
                    format!("{timeout:?} is not a duration; write e.g. \"5s\" or \"500ms\""),
                )
            })?;
        }
        let memory = match &raw.memory {
            Some(memory) => Some(memory.bytes().map_err(|e| ("memory", e))?),
            None => None,
        };
        limits = limits.with_call_limits(
            raw.timeout.as_ref().map(|_| limits.timeout),
            raw.fuel,
            memory,
        )?;
        if let Some(max_output) = &raw.max_output {
            let bytes = max_output.bytes().map_err(|e| ("max_output", e))?;
            limits.max_output = usize::try_from(bytes)
                .ok()
                .filter(|&n| n >= MIN_OUTPUT)
                .ok_or((
                    "max_output",
                    format!("must be between {MIN_OUTPUT} bytes and the address space"),
                ))?;
        }
        if let Some(max_arguments) = &raw.max_arguments {
            let bytes = max_arguments.bytes().map_err(|e| ("max_arguments", e))?;
            limits.max_arguments = usize::try_from(bytes)
                .ok()
                .filter(|&n| (MIN_ARGUMENTS..=MAX_ARGUMENTS).contains(&n))
                .ok_or((
                    "max_arguments",
                    format!(
                        "must be between {MIN_ARGUMENTS} bytes and {MAX_ARGUMENTS} bytes (64 MiB)"
                    ),
                ))?;
        }
        if let Some(max_concurrency) = raw.max_concurrency {
            if !(1..=MAX_CONCURRENCY).contains(&max_concurrency) {
                return Err((
                    "max_concurrency",
                    format!("must be between 1 and {MAX_CONCURRENCY}"),
                ));
            }
            limits.max_concurrency = max_concurrency;
        }
        if let Some(ready) = &raw.ready {
            limits.ready = match ready {
                RawReady::Word(word) if word == "auto" => ReadyInstances::Auto,
                RawReady::Count(n) if *n <= MAX_READY => ReadyInstances::Exactly(*n),
                _ => {
                    return Err((
                        "ready",
                        format!(
                            "must be \"auto\" or a count from 0 to {MAX_READY} (0 makes every instance at call time)"
                        ),
                    ));
                }
            };
        }
        Ok(limits)
    }
}

impl Limits {
    /// These limits with the timeout, fuel and memory given replaced, each
    /// checked as the manifest's are (what `toolhost call --component`'s
    /// flags set).
    ///
    /// # Errors
    ///
    /// The key and what is wrong with its value: a zero or longer than
    /// [`MAX_TIMEOUT`] timeout, zero fuel, memory under one wasm page or
    /// over 4 GiB.
    pub fn with_call_limits(
        mut self,
        timeout: Option<Duration>,
        fuel: Option<u64>,
        memory: Option<u64>,
    ) -> Result<Self, (&'static str, String)> {
        if let Some(timeout) = timeout {
            if timeout.is_zero() {
                return Err(("timeout", "must be longer than zero".into()));
            }
            if timeout > MAX_TIMEOUT {
                return Err((
                    "timeout",
                    format!(
                        "must be at most {}",
                        humantime::format_duration(MAX_TIMEOUT)
                    ),
                ));
            }
            self.timeout = timeout;
        }
        if let Some(fuel) = fuel {
            if fuel == 0 {
                return Err(("fuel", "must be at least 1".into()));
            }
            self.fuel = fuel;
        }
        if let Some(memory) = memory {
            if memory < MIN_MEMORY {
                return Err((
                    "memory",
                    format!("must be at least {MIN_MEMORY} bytes (one wasm page)"),
                ));
            }
            if memory > MAX_MEMORY {
                return Err((
                    "memory",
                    format!("must be at most {MAX_MEMORY} bytes (4 GiB)"),
                ));
            }
            self.memory = memory;
        }
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
