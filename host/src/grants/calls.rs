//! The grant to call other tools (`call_tools`): which tools, how many
//! calls per call of the caller, and how many at once.

use std::fmt;

/// Calls per call of the caller when the manifest does not say.
pub const DEFAULT_MAX_CALLS: u32 = 50;
/// The most calls per call of the caller a manifest may allow.
pub const MOST_CALLS: u32 = 1_000;
/// Calls running at once per call of the caller when the manifest does not say.
pub const DEFAULT_CONCURRENCY: u32 = 8;
/// The most calls at once a manifest may allow.
pub const MOST_CONCURRENCY: u32 = 64;

/// Which tools a component may call (`call_tools` in the manifest), and its
/// budget per call.
///
/// A pattern is a tool name, or a name with `*` standing for any run of
/// characters (`convert_*`, `*`). A tool that is itself granted
/// `call_tools` is never callable: a code tool cannot call a code tool.
///
/// ```
/// use toolhost::ToolCalls;
///
/// # fn main() -> Result<(), toolhost::GrantError> {
/// let calls = ToolCalls::new(["calc", "convert_*"])?.max_calls(20)?;
/// assert!(calls.allows("convert_units"));
/// assert!(!calls.allows("http_get"));
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ToolCalls {
    patterns: Vec<String>,
    max_calls: u32,
    concurrency: u32,
}

impl ToolCalls {
    /// Allow calls of the tools `patterns` match, with the default budget.
    ///
    /// # Errors
    ///
    /// When there is no pattern, or one is not a tool name with `*`s.
    pub fn new<I, S>(patterns: I) -> Result<Self, super::GrantError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let patterns: Vec<String> = patterns.into_iter().map(Into::into).collect();
        if patterns.is_empty() {
            return Err(super::GrantError(
                "call_tools names no tool; list the tools it may call, e.g. [\"calc\", \"convert_*\"], or remove it".into(),
            ));
        }
        if let Some(bad) = patterns.iter().find(|p| !valid_pattern(p)) {
            return Err(super::GrantError(format!(
                "{bad:?} is not a tool name or pattern: a name is 1 to 64 of A-Z a-z 0-9 _ -, and * stands for any run of them (e.g. \"convert_*\")"
            )));
        }
        Ok(Self {
            patterns,
            max_calls: DEFAULT_MAX_CALLS,
            concurrency: DEFAULT_CONCURRENCY,
        })
    }

    /// Allow at most `calls` calls per call of the caller (1 to
    /// 1,000; default 50).
    ///
    /// # Errors
    ///
    /// When `calls` is out of that range.
    pub fn max_calls(mut self, calls: u32) -> Result<Self, super::GrantError> {
        if !(1..=MOST_CALLS).contains(&calls) {
            return Err(super::GrantError(format!(
                "max_calls = {calls}: write 1 to {MOST_CALLS} calls per call of the tool"
            )));
        }
        self.max_calls = calls;
        Ok(self)
    }

    /// Run at most `calls` of them at once (1 to 64;
    /// default 8).
    ///
    /// # Errors
    ///
    /// When `calls` is out of that range.
    pub fn concurrency(mut self, calls: u32) -> Result<Self, super::GrantError> {
        if !(1..=MOST_CONCURRENCY).contains(&calls) {
            return Err(super::GrantError(format!(
                "concurrency = {calls}: write 1 to {MOST_CONCURRENCY} calls at once"
            )));
        }
        self.concurrency = calls;
        Ok(self)
    }

    /// Whether a pattern matches tool `name` (whether it is a tool that
    /// calls tools is the host's to check).
    pub fn allows(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| matches(p, name))
    }

    /// The patterns, as granted.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Calls allowed per call of the caller.
    pub fn calls(&self) -> u32 {
        self.max_calls
    }

    /// Calls allowed to run at once.
    pub fn at_once(&self) -> u32 {
        self.concurrency
    }
}

impl fmt::Debug for ToolCalls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolCalls")
            .field("patterns", &self.patterns)
            .field("max_calls", &self.max_calls)
            .field("concurrency", &self.concurrency)
            .finish()
    }
}

fn valid_pattern(pattern: &str) -> bool {
    let name = pattern.replace('*', "");
    (1..=64).contains(&pattern.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Whether `pattern` (with `*` for any run of characters) matches all of
/// `name`.
fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    // `split` yields at least one part.
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_names() {
        for (pattern, name, expected) in [
            ("calc", "calc", true),
            ("calc", "calculator", false),
            ("calc", "xcalc", false),
            ("convert_*", "convert_units", true),
            ("convert_*", "convert_", true),
            ("convert_*", "unconvert_units", false),
            ("*", "anything", true),
            ("*_count", "word_count", true),
            ("*_count", "word_counts", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxcyyb", false),
            ("a*a", "a", false),
        ] {
            assert_eq!(matches(pattern, name), expected, "{pattern} vs {name}");
        }
    }

    #[test]
    fn bad_grants_are_refused_with_the_fix() {
        let none: [&str; 0] = [];
        let e = ToolCalls::new(none).unwrap_err().to_string();
        assert!(e.contains("names no tool"), "{e}");
        let e = ToolCalls::new(["calc tool"]).unwrap_err().to_string();
        assert!(e.contains("not a tool name or pattern"), "{e}");
        let e = ToolCalls::new(["calc"])
            .unwrap()
            .max_calls(0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 1000"), "{e}");
        let e = ToolCalls::new(["calc"])
            .unwrap()
            .concurrency(65)
            .unwrap_err()
            .to_string();
        assert!(e.contains("1 to 64"), "{e}");
    }
}
