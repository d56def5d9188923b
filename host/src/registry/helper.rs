//! Docker credential helpers (`credsStore`, `credHelpers` in Docker's
//! `config.json`): `docker-credential-NAME get`, given the server on its
//! standard input, answers `{"ServerURL", "Username", "Secret"}` on its
//! standard output. Run only when a registry asks for credentials, bounded
//! in time and output; what it prints never reaches a log or a message.

use std::process::Stdio;
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};

use super::auth::Credentials;

/// The longest a helper may take: long enough for a keychain that asks
/// the user to unlock it, short enough that a stuck helper is named rather
/// than mistaken for a registry that hangs (the caller also keeps it under
/// half the registry timeout).
pub(crate) const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// The most of a helper's output (and of its error output) read: its
/// answer is a few hundred bytes (a token a few kilobytes); more is a
/// helper gone wrong, killed.
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
        // A group of its own, so that what it starts (and leaves holding
        // its output) is killed with it.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                fail("is not on PATH (install it, or fix credsStore / credHelpers)".into())
            }
            _ => fail(format!("could not be started ({e})")),
        })?;
    // Killed on every way out: answered, overflowed, timed out, dropped.
    let group = Group(child.id().and_then(|id| Pid::from_raw(id.try_into().ok()?)));
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(fail("could not be given its input".into()));
    };
    let run = async {
        // A helper that exits without reading its input is its own affair.
        let _ = stdin.write_all(ask.server.as_bytes()).await;
        drop(stdin);
        read_while_running(&mut child, &group, stdout, stderr).await
    };
    let limit = timeout.min(HELPER_TIMEOUT);
    let Ok(ran) = tokio::time::timeout(limit, run).await else {
        return Err(fail(format!(
            "did not answer within {}",
            humantime::format_duration(limit)
        )));
    };
    let Some((out, err, status)) = ran else {
        return Err(fail(format!("printed more than {} KiB", MAX_OUTPUT >> 10)));
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

/// A helper's process group, killed when dropped (and when it exits: what
/// it left running is not waited for).
struct Group(Option<Pid>);

impl Group {
    fn kill(&self) {
        if let Some(group) = self.0 {
            // Gone already is fine.
            let _ = kill_process_group(group, Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The helper's standard output and error, each read as it comes (a helper
/// that prints much must not block on a full pipe) and at most
/// [`MAX_OUTPUT`], and how it exited; `None` as soon as either is over the
/// cap. Once it has exited, its group is killed, so that a process it left
/// behind holding the pipes does not keep them open.
async fn read_while_running(
    child: &mut tokio::process::Child,
    group: &Group,
    mut stdout: impl AsyncRead + Unpin,
    mut stderr: impl AsyncRead + Unpin,
) -> Option<(Vec<u8>, Vec<u8>, std::io::Result<std::process::ExitStatus>)> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut out_open, mut err_open) = (true, true);
    let mut status = None;
    let (mut out_chunk, mut err_chunk) = ([0u8; 8192], [0u8; 8192]);
    while out_open || err_open || status.is_none() {
        tokio::select! {
            read = stdout.read(&mut out_chunk), if out_open => match read {
                Ok(0) | Err(_) => out_open = false,
                Ok(n) => out.extend_from_slice(&out_chunk[..n]),
            },
            read = stderr.read(&mut err_chunk), if err_open => match read {
                Ok(0) | Err(_) => err_open = false,
                Ok(n) => err.extend_from_slice(&err_chunk[..n]),
            },
            waited = child.wait(), if status.is_none() => {
                status = Some(waited);
                group.kill();
            },
        }
        if out.len() as u64 > MAX_OUTPUT || err.len() as u64 > MAX_OUTPUT {
            return None;
        }
    }
    let status = status.expect("the loop ends only once the helper exited");
    Some((out, err, status))
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
