//! Golden tests: each `testdata/NAME.toml` is loaded and the outcome compared
//! with `testdata/NAME.expected`. Run with `UPDATE_EXPECT=1` to rewrite the
//! expected files after an intended change, then review the diff.

use std::path::Path;

use super::Manifest;

fn env(name: &str) -> Option<String> {
    (name == "PRESENT_SECRET").then(|| "s3cret-value".to_owned())
}

fn describe(manifest: &Manifest) -> String {
    let mut out = format!(
        "limits: {:?}\nmodel: {:?}\n",
        manifest.limits, manifest.model
    );
    for c in &manifest.components {
        out += &format!(
            "tool {}: approval {:?}, timeout {:?}, memory {}\n  hosts: {:?}\n  files: {:?}\n  env: {:?}\n  config: {:?}\n",
            c.label(),
            c.approval,
            c.limits.timeout,
            c.limits.memory,
            c.grants
                .hosts()
                .patterns()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            c.grants
                .files()
                .iter()
                .map(|f| (f.guest.as_str(), f.mode.to_string()))
                .collect::<Vec<_>>(),
            c.grants.env_vars(),
            c.grants.config_keys().collect::<Vec<_>>(),
        );
    }
    out
}

#[test]
fn manifests_load_or_fail_as_expected() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/manifest/testdata");
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let mut cases = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect::<Vec<_>>();
    cases.sort();
    assert!(
        cases.len() >= 8,
        "golden cases went missing from {}",
        dir.display()
    );
    let mut failures = Vec::new();
    for case in cases {
        let text = std::fs::read_to_string(&case).unwrap();
        let actual = match Manifest::parse(&case, &text, &env) {
            Ok(manifest) => describe(&manifest),
            Err(e) => format!("error: {e}\n"),
        };
        let actual = actual.replace(&format!("{}/", dir.display()), "");
        let expected_path = case.with_extension("expected");
        if update {
            std::fs::write(&expected_path, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if expected != actual {
            failures.push(format!(
                "{}:\n--- expected\n{expected}--- actual\n{actual}",
                case.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
