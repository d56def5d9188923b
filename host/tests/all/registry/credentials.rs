//! Docker credential helpers, as `docker login` leaves them configured:
//! fake helpers (shell scripts on a PATH of the test's own) in front of a
//! real registry that wants a password.

use super::*;

/// A Docker config directory whose `config.json` is `config`, and a
/// directory of helpers for PATH; the env to run toolhost with.
struct Docker {
    dir: tempfile::TempDir,
}

impl Docker {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.json"), config).unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        Self { dir }
    }

    /// Install `docker-credential-NAME` running `script` (sh).
    fn helper(&self, name: &str, script: &str) {
        use std::os::unix::fs::PermissionsExt as _;
        let path = self
            .dir
            .path()
            .join("bin")
            .join(format!("docker-credential-{name}"));
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// What the helpers were given, as `given` scripts record it.
    fn given(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("given")).unwrap_or_default()
    }

    fn env(&self) -> Vec<(String, String)> {
        let path = format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        vec![
            (
                "DOCKER_CONFIG".into(),
                self.dir.path().display().to_string(),
            ),
            ("PATH".into(), path),
        ]
    }
}

/// Run toolhost in `scene` with `docker`'s config and helpers; its status
/// and stderr.
fn run(scene: &Scene, docker: &Docker, args: &[&str]) -> Output {
    let env = docker.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    scene.toolhost(args, &env)
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn credentials_from_a_docker_credential_helper_are_used_and_never_shown() {
    let registry = RegistryServer::start_with_password();
    let scene = Scene::new();
    let address = registry.address();
    let reference = format!("oci://{address}/private/calc:1");
    let calc = component("calc");
    // docker login with a credsStore leaves an empty entry beside it.
    let docker = Docker::new(&format!(
        r#"{{"auths": {{"{address}": {{}}}}, "credsStore": "fake"}}"#
    ));
    let given = docker.dir.path().join("given");
    docker.helper(
        "fake",
        &format!(
            "[ \"$1\" = get ] || exit 2\ncat > {}\nprintf '{{\"ServerURL\":\"%s\",\"Username\":\"toolhost\",\"Secret\":\"{PASSWORD}\"}}' \"$(cat {})\"",
            given.display(),
            given.display()
        ),
    );
    let pushed = run(
        &scene,
        &docker,
        &["push", calc.to_str().unwrap(), &reference],
    );
    let pinned = stdout(&pushed);
    assert_eq!(docker.given(), address, "the helper is given the server");
    let pulled = run(&scene, &docker, &["pull", pinned.trim()]);
    let text = format!("{}{}", stdout(&pulled), stderr(&pulled));
    assert!(!text.contains(PASSWORD), "{text}");
    // A helper for this host alone wins over the store.
    let docker = Docker::new(&format!(
        r#"{{"credsStore": "fake", "credHelpers": {{"{address}": "broken"}}}}"#
    ));
    docker.helper("broken", "cat >/dev/null\necho 'leak-s3cret-value'\nexit 3");
    let output = run(&scene, &docker, &["pull", &reference]);
    let error = stderr(&output);
    assert!(!output.status.success());
    assert!(
        error.contains("docker-credential-broken failed")
            && error.contains("password_env")
            && error.contains(&format!("credHelpers.{address}")),
        "{error}"
    );
    assert!(!error.contains("leak-s3cret"), "{error}");
}

#[test]
fn a_missing_hanging_or_empty_credential_helper_is_named_with_the_manifest_alternative() {
    let registry = RegistryServer::start_with_password();
    let scene = Scene::new();
    let address = registry.address();
    let reference = format!("oci://{address}/private/calc:1");
    let with_helper =
        |name: &str| Docker::new(&format!(r#"{{"credHelpers": {{"{address}": "{name}"}}}}"#));
    // Not installed.
    let docker = with_helper("absent-th-test");
    let output = run(&scene, &docker, &["pull", &reference]);
    let error = stderr(&output);
    assert!(!output.status.success());
    assert!(
        error.contains("docker-credential-absent-th-test is not on PATH")
            && error.contains("password_env"),
        "{error}"
    );
    // Holds nothing for this server: anonymous, so the registry's refusal
    // and its fix.
    let docker = with_helper("empty");
    docker.helper(
        "empty",
        "cat >/dev/null\necho 'credentials not found in native keychain'\nexit 1",
    );
    let output = run(&scene, &docker, &["pull", &reference]);
    let error = stderr(&output);
    assert!(error.contains("asks for credentials"), "{error}");
    // Hangs: given up on within half the registry timeout, and named.
    std::fs::write(scene.manifest_path(), "[registry]\ntimeout = \"4s\"\n").unwrap();
    let docker = with_helper("stuck");
    docker.helper("stuck", "exec sleep 60");
    let output = run(&scene, &docker, &["pull", &reference]);
    let error = stderr(&output);
    assert!(
        error.contains("docker-credential-stuck did not answer within 2s"),
        "{error}"
    );
}

/// Whether process `pid` is gone (or dead and not yet reaped: a zombie
/// runs nothing and holds no pipe).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn a_credential_helper_that_prints_too_much_is_killed_and_said_to_have() {
    let registry = RegistryServer::start_with_password();
    let scene = Scene::new();
    let address = registry.address();
    let reference = format!("oci://{address}/private/calc:1");
    // A deadline far beyond what the answer takes: an error naming it
    // would mean the helper was waited for, not read.
    std::fs::write(scene.manifest_path(), "[registry]\ntimeout = \"50s\"\n").unwrap();
    let docker = Docker::new(&format!(r#"{{"credHelpers": {{"{address}": "chatty"}}}}"#));
    let pid = docker.dir.path().join("pid");
    docker.helper(
        "chatty",
        &format!(
            "echo $$ > {}\ncat >/dev/null\nhead -c 300000 /dev/zero | tr '\\0' x\nsleep 60",
            pid.display()
        ),
    );
    let output = run(&scene, &docker, &["pull", &reference]);
    let error = stderr(&output);
    assert!(!output.status.success());
    assert!(
        error.contains("docker-credential-chatty printed more than 64 KiB")
            && error.contains("password_env"),
        "{error}"
    );
    assert!(!error.contains("did not answer"), "{error}");
    assert!(
        gone(&std::fs::read_to_string(&pid).unwrap()),
        "the helper is killed"
    );
}

#[test]
fn a_process_a_credential_helper_leaves_holding_its_output_neither_delays_nor_outlives_it() {
    let registry = RegistryServer::start_with_password();
    let scene = Scene::new();
    let address = registry.address();
    let reference = format!("oci://{address}/private/calc:1");
    std::fs::write(scene.manifest_path(), "[registry]\ntimeout = \"50s\"\n").unwrap();
    let publisher = Docker::new(&format!(r#"{{"credHelpers": {{"{address}": "plain"}}}}"#));
    publisher.helper(
        "plain",
        &format!(
            "cat >/dev/null\nprintf '{{\"Username\":\"toolhost\",\"Secret\":\"{PASSWORD}\"}}'"
        ),
    );
    let calc = component("calc");
    stdout(&run(
        &scene,
        &publisher,
        &["push", calc.to_str().unwrap(), &reference],
    ));
    // A helper that starts a sleeper (which keeps its standard output
    // open), then answers and exits: its answer is used at once, and the
    // sleeper is killed with it.
    let docker = Docker::new(&format!(r#"{{"credHelpers": {{"{address}": "forking"}}}}"#));
    let grandchild = docker.dir.path().join("grandchild");
    docker.helper(
        "forking",
        &format!(
            "cat >/dev/null\nsleep 60 &\necho $! > {}\nprintf '{{\"Username\":\"toolhost\",\"Secret\":\"{PASSWORD}\"}}'",
            grandchild.display()
        ),
    );
    let pulled = run(&scene, &docker, &["pull", &reference]);
    stdout(&pulled);
    assert!(gone(&std::fs::read_to_string(&grandchild).unwrap()));
    // The same, failing: its failure is said, not a timeout.
    let docker = Docker::new(&format!(
        r#"{{"credHelpers": {{"{address}": "forkfail"}}}}"#
    ));
    let grandchild = docker.dir.path().join("grandchild");
    docker.helper(
        "forkfail",
        &format!(
            "cat >/dev/null\nsleep 60 &\necho $! > {}\nexit 3",
            grandchild.display()
        ),
    );
    let output = run(&scene, &docker, &["pull", &reference]);
    let error = stderr(&output);
    assert!(!output.status.success());
    assert!(
        error.contains("docker-credential-forkfail failed (exit status: 3)"),
        "{error}"
    );
    assert!(!error.contains("did not answer"), "{error}");
    assert!(gone(&std::fs::read_to_string(&grandchild).unwrap()));
}
