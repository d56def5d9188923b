//! [`Fixes`]: how the library's messages tell their reader to change a
//! setting.
//!
//! A message that refuses something names the fix ("raise the body limit").
//! The library knows its settings by its own names (the fields of
//! `serve::ServeConfig`, the `[model]` keys of the manifest), but the person
//! who reads the message changes them through a front end: the `toolhost`
//! binary's flags, or an embedder's own configuration. The front end that
//! owns those spellings sets them here, and the library's messages quote
//! them; the defaults name the library's own settings, so no message tells
//! an embedder's users about a flag they do not have.
//!
//! This module imports nothing of the crate: it is a leaf every layer may
//! use.

use std::borrow::Cow;

/// How each fix a message names is spelled for its reader, one field per
/// setting. Each field is the clause a message ends with, written in the
/// reader's terms; [`Fixes::default`] names the library's settings.
///
/// Built with [`Fixes::default`], then adjusted field by field:
///
/// ```
/// let mut fixes = toolhost::Fixes::default();
/// fixes.max_body = "raise `http.max_body` in app.yaml".into();
/// assert!(fixes.max_steps.contains("max_steps"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fixes {
    /// How to allow a larger HTTP request body (`ServeConfig::max_body`),
    /// ending "…(send fewer calls at once, or {max_body})".
    pub max_body: Cow<'static, str>,
    /// How to allow more calls in one `POST /v1/tool_calls`
    /// (`ServeConfig::max_batch`), ending "…(split the batch, or
    /// {max_batch})".
    pub max_batch: Cow<'static, str>,
    /// How the operator accepts another browser origin
    /// (`ServeConfig::allow_origins`), ending "requests from this Origin
    /// are not accepted; {allow_origins}".
    pub allow_origins: Cow<'static, str>,
    /// How to serve on another address when this one is taken
    /// (`Transport::Http`), ending "…(is another server using the port?
    /// {listen})".
    pub listen: Cow<'static, str>,
    /// What the setting that reloads changed files is called
    /// (`ServeConfig::watch`), in "cannot watch files for {watch}: …".
    pub watch: Cow<'static, str>,
    /// How to give the server a bearer token (`ServeConfig::token`), in
    /// "serving on … needs a bearer token: {token} (or listen on
    /// 127.0.0.1)".
    pub token: Cow<'static, str>,
    /// How the operator lets the server run calls that need approval
    /// without asking (`ServeConfig::approve_all`), in "tool '…' needs a
    /// person's approval and nobody could be asked; {approve_all}, or
    /// connect with an MCP client that supports elicitation".
    pub approve_all: Cow<'static, str>,
    /// How to give the agent loop more model calls (`max_steps` in
    /// `[model]`, [`LoopControls`](crate::model::config::LoopControls)),
    /// in "…To give it more steps, {max_steps}; …".
    pub max_steps: Cow<'static, str>,
}

impl Default for Fixes {
    /// Each fix in the library's terms: the `ServeConfig` field, or the
    /// `[model]` key and its `LoopControls` field.
    fn default() -> Self {
        Self {
            max_body: "raise `ServeConfig::max_body`".into(),
            max_batch: "raise `ServeConfig::max_batch`".into(),
            allow_origins: "the operator can allow it in `ServeConfig::allow_origins`".into(),
            listen: "choose another address for `Transport::Http`".into(),
            watch: "reloading (`ServeConfig::watch`)".into(),
            token: "set one in `ServeConfig::token`".into(),
            approve_all: "the operator can set `ServeConfig::approve_all`".into(),
            max_steps: "raise max_steps in [model] (`LoopControls::max_steps` in code)".into(),
        }
    }
}

impl Fixes {
    /// Every fix with the name of its field, in their order: for a front
    /// end that checks it spelled each one (a field added here is added to
    /// this list, or the crate does not compile).
    #[must_use]
    pub fn each(&self) -> [(&'static str, &str); 8] {
        let Self {
            max_body,
            max_batch,
            allow_origins,
            listen,
            watch,
            token,
            approve_all,
            max_steps,
        } = self;
        [
            ("max_body", max_body),
            ("max_batch", max_batch),
            ("allow_origins", allow_origins),
            ("listen", listen),
            ("watch", watch),
            ("token", token),
            ("approve_all", approve_all),
            ("max_steps", max_steps),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 25: the library's own spellings never name a `toolhost` flag.
    #[test]
    fn the_default_fixes_name_no_flag() {
        for (name, fix) in Fixes::default().each() {
            assert!(!fix.contains("--"), "{name}: {fix}");
            assert!(!fix.contains("toolhost"), "{name}: {fix}");
        }
    }
}
