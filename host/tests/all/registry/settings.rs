//! The `[registry]` and `[verify]` tables reach every command that talks to
//! a registry (`push`, `pull`, `sign`, `inspect`, `call --component`), and
//! only those tables are read for them.

use super::*;

/// A manifest whose `[registry]` table holds the credentials, beside a tool
/// entry whose file is missing: the registry commands read the table and
/// nothing else.
fn credentials_manifest(scene: &Scene, registry: &RegistryServer, extra: &str) {
    std::fs::write(
        scene.manifest_path(),
        format!(
            "{extra}\n[registry.host.\"{}\"]\nusername = \"toolhost\"\npassword_env = \"REGISTRY_PASSWORD\"\n\n\
             [[tool]]\ncomponent = \"not-built-yet.wasm\"\n",
            registry.address()
        ),
    )
    .unwrap();
}

#[test]
fn registry_commands_read_the_registry_and_verify_tables_of_the_manifest_alone() {
    let registry = RegistryServer::start_with_password();
    let scene = Scene::new();
    let (private, _) = key_pair(scene.dir.path(), "team");
    let calc = component("calc");
    let reference = format!("oci://{}/private/calc:1", registry.address());
    let password = [("REGISTRY_PASSWORD", PASSWORD)];
    credentials_manifest(&scene, &registry, "");
    // push: the missing tool file is not its business.
    let pinned = stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &password));
    assert!(pinned.contains("@sha256:"), "{pinned}");
    let inspected = stdout(&scene.toolhost(&["inspect", "--json", &reference], &password));
    assert!(inspected.contains("calc"), "{inspected}");
    // call --component takes the credentials from ./toolhost.toml.
    let called = stdout(&scene.toolhost(
        &[
            "call",
            "--component",
            &reference,
            "calc",
            r#"{"expression":"6*7"}"#,
        ],
        &password,
    ));
    assert!(called.contains("42"), "{called}");
    // With a [verify] policy, call --component and pull refuse the
    // unsigned component, and pull writes nothing.
    credentials_manifest(&scene, &registry, "[verify]\nkey = \"team.pub\"\n");
    let refused = scene.toolhost(
        &[
            "call",
            "--component",
            &reference,
            "calc",
            r#"{"expression":"6*7"}"#,
        ],
        &password,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success());
    assert!(stderr.contains("no signature found"), "{stderr}");
    let out = scene.dir.path().join("calc.wasm");
    let refused = scene.toolhost(
        &["pull", "-o", out.to_str().unwrap(), &reference],
        &password,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success());
    assert!(stderr.contains("no signature found"), "{stderr}");
    assert!(!out.exists(), "a refused pull writes nothing");
    // sign reads the credentials too; signed, both load under the policy.
    let signed = scene.toolhost(
        &["sign", "--key", private.to_str().unwrap(), pinned.trim()],
        &password,
    );
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    let called = stdout(&scene.toolhost(
        &[
            "call",
            "--component",
            &reference,
            "calc",
            r#"{"expression":"6*7"}"#,
        ],
        &password,
    ));
    assert!(called.contains("42"), "{called}");
    let pulled = stdout(&scene.toolhost(
        &["pull", "-o", out.to_str().unwrap(), &reference],
        &password,
    ));
    assert!(pulled.contains("team.pub"), "{pulled}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&calc).unwrap());
    // --key overrides the manifest's policy for call --component.
    let (_, other) = key_pair(scene.dir.path(), "other");
    let refused = scene.toolhost(
        &[
            "call",
            "--component",
            &reference,
            "--key",
            other.to_str().unwrap(),
            "calc",
            "{}",
        ],
        &password,
    );
    let stderr = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success());
    assert!(
        stderr.contains("none by") && stderr.contains("other.pub"),
        "{stderr}"
    );
}

#[test]
fn a_bad_registry_table_stops_the_registry_commands_naming_file_key_and_fix() {
    let scene = Scene::new();
    let calc = component("calc");
    std::fs::write(
        scene.manifest_path(),
        "[registry]\ntimeout = \"soon\"\n\n[[tool]]\ncomponent = \"missing.wasm\"\n",
    )
    .unwrap();
    let output = scene.toolhost(
        &["push", calc.to_str().unwrap(), "oci://127.0.0.1:9/t/calc:1"],
        &[],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success());
    assert!(
        stderr.contains("toolhost.toml")
            && stderr.contains("`registry.timeout`")
            && stderr.contains("write e.g. \"60s\""),
        "{stderr}"
    );
    // A key the table does not know: the TOML error names the line.
    std::fs::write(
        scene.manifest_path(),
        "[[tool]]\ncomponent = \"missing.wasm\"\n\n[registry]\ntimeuot = \"5s\"\n",
    )
    .unwrap();
    let output = scene.toolhost(
        &[
            "call",
            "--component",
            "oci://127.0.0.1:9/t/calc:1",
            "calc",
            "{}",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success());
    assert!(
        stderr.contains("toolhost.toml") && stderr.contains("line 5") && stderr.contains("timeuot"),
        "{stderr}"
    );
}

#[test]
fn check_says_a_tool_that_opts_out_of_the_verify_policy_does_and_warns() {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    key_pair(scene.dir.path(), "team");
    let reference = format!("oci://{}/tools/calc:1", registry.address());
    let calc = component("calc");
    stdout(&scene.toolhost(&["push", calc.to_str().unwrap(), &reference], &[]));
    std::fs::write(
        scene.manifest_path(),
        format!("[verify]\nkey = \"team.pub\"\n\n[[tool]]\ncomponent = \"{reference}\"\nverify = \"none\"\n"),
    )
    .unwrap();
    let output = scene.toolhost(&["check"], &[]);
    let checked = stdout(&output);
    assert!(
        checked.contains(
            "signature: not checked: this tool opts out (`verify = \"none\"` overrides [verify])"
        ),
        "{checked}"
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        stderr.contains(&format!("warning: {reference}@sha256:"))
            && stderr.contains("opts out of [verify] (verify = \"none\")"),
        "{stderr}"
    );
    assert!(!scene.toolhost(&["check", "--strict"], &[]).status.success());
    // With no [verify] at all, nothing is overridden and nothing warned;
    // the hosts blob downloads may be redirected to are shown.
    scene.one_tool(
        &reference,
        &format!(
            "[registry.host.\"{}\"]\nblob_redirects = [\"cdn.example\"]\n",
            registry.address()
        ),
    );
    let output = scene.toolhost(&["check"], &[]);
    let checked = stdout(&output);
    assert!(
        checked.contains("not checked (no verify policy)"),
        "{checked}"
    );
    assert!(
        checked.contains("blob downloads may be redirected to (HTTPS, no credentials): cdn.example (blob_redirects)"),
        "{checked}"
    );
    assert!(!String::from_utf8_lossy(&output.stderr).contains("opts out"));
}
