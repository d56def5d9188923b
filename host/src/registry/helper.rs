//! Docker credential helpers (`credsStore`, `credHelpers` in Docker's
//! `config.json`): `docker-credential-NAME get`, given the server on its
//! standard input, answers `{"ServerURL", "Username", "Secret"}` on its
//! standard output. Run only when a registry asks for credentials, bounded
//! in time and output; what it prints never reaches a log or a message.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::auth::Credentials;

/// The longest a helper may take: long enough for a keychain that asks
/// the user to unlock it, short enough that a stuck helper is named rather
/// than mistaken for a registry that hangs (the caller also keeps it under
/// half the registry timeout).
pub(crate) const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of a helper's output read: its answer is a few hundred bytes
/// (a token a few kilobytes); more is a helper gone wrong.
const MAX_OUTPUT: u64 = 64 << 10;

/// What the helpers of docker-credential-helpers print when they hold
/// nothing for the server: no credentials, not a failure.
const NOT_FOUND: &str = "credentials not found";

/// Which helper to ask, for which server, and for which registry.
pub(crate) struct Ask<'a> {
    /// The helper's name: `docker-credential-{helper}` is run.
    pub helper: &'a str,
    /// What the helper is given on its standard input.
    pub server: &'a str,
    /// The registry as references write it, for the fix.
    pub registry: &'a str,
    /// Where the helper was named, for messages.
    pub source: &'a str,
}

/// The credentials `ask.helper` holds for `ask.server`, `None` when it
/// holds none, within `timeout`.
///
/// # Errors
///
/// A message naming the helper and the manifest alternative when the
/// helper is missing, fails, hangs, or answers nonsense.
pub(crate) async fn get(ask: &Ask<'_>, timeout: Duration) -> Result<Option<Credentials>, String> {
    let program = format!("docker-credential-{}", ask.helper);
    let fail = |what: String| {
        format!(
            "{}: the credential helper {program} {what}; give the credentials in the manifest instead ([registry.host.\"{}\"] username = \"…\", password_env = \"VAR\")",
            ask.source, ask.registry
        )
    };
    // A name from a config file, never a path or an option.
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if ask.helper.is_empty() || !ask.helper.chars().all(plain) || ask.helper.starts_with('.') {
        return Err(fail("has a name that is not a plain program name".into()));
    }
    let mut child = tokio::process::Command::new(&program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                fail("is not on PATH (install it, or fix credsStore / credHelpers)".into())
            }
            _ => fail(format!("could not be started ({e})")),
        })?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(fail("could not be given its input".into()));
    };
    let run = async {
        // A helper that exits without reading its input is its own affair.
        let _ = stdin.write_all(ask.server.as_bytes()).await;
        drop(stdin);
        let (out, err) = tokio::join!(capped(stdout), capped(stderr));
        let status = child.wait().await;
        (out, err, status)
    };
    let limit = timeout.min(HELPER_TIMEOUT);
    let Ok((out, err, status)) = tokio::time::timeout(limit, run).await else {
        return Err(fail(format!(
            "did not answer within {}",
            humantime::format_duration(limit)
        )));
    };
    let (Some(out), Some(err)) = (out, err) else {
        return Err(fail(format!("printed more than {MAX_OUTPUT} bytes")));
    };
    let says = |needle: &str| {
        String::from_utf8_lossy(&out).contains(needle)
            || String::from_utf8_lossy(&err).contains(needle)
    };
    match status {
        Ok(status) if status.success() => {}
        Ok(_) if says(NOT_FOUND) => return Ok(None),
        // Its output is not shown: it may hold the secret.
        Ok(status) => {
            return Err(fail(format!(
                "failed ({status}); run `echo {} | {program} get` to see why",
                ask.server
            )));
        }
        Err(e) => return Err(fail(format!("could not be waited for ({e})"))),
    }
    parse(&out).map_err(fail)
}

/// A helper's answer, read into credentials.
fn parse(out: &[u8]) -> Result<Option<Credentials>, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Answer {
        #[serde(default)]
        username: String,
        #[serde(default)]
        secret: String,
    }
    // Never `{e}`: serde's message can quote the secret.
    let answer: Answer = serde_json::from_slice(out).map_err(|_| {
        "answered something that is not its JSON ({\"Username\", \"Secret\"})".to_owned()
    })?;
    if answer.secret.is_empty() {
        return Ok(None);
    }
    if answer.username == "<token>" {
        return Err(
            "holds an identity token (an OAuth refresh token), which toolhost does not exchange"
                .into(),
        );
    }
    Ok(Some(Credentials {
        username: answer.username,
        password: answer.secret,
        source: String::new(),
    }))
}

/// All of `reader`, or `None` when it is over [`MAX_OUTPUT`].
async fn capped(reader: impl AsyncRead + Unpin) -> Option<Vec<u8>> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_OUTPUT + 1)
        .read_to_end(&mut bytes)
        .await
        .ok()?;
    (bytes.len() as u64 <= MAX_OUTPUT).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_helpers_answer_is_read_and_its_secret_never_quoted() {
        let found = parse(br#"{"ServerURL":"ghcr.io","Username":"bot","Secret":"s3cret"}"#)
            .unwrap()
            .unwrap();
        assert_eq!((&*found.username, &*found.password), ("bot", "s3cret"));
        assert!(parse(br#"{"Username":"","Secret":""}"#).unwrap().is_none());
        let error = parse(br#"{"Username":"<token>","Secret":"refresh-s3cret"}"#).unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
        let error = parse(br#"{"Username": 7, "Secret": "s3cret"}"#).unwrap_err();
        assert!(!error.contains("s3cret"), "{error}");
    }
}
