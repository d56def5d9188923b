//! Golden tests: each `testdata/NAME.toml` is loaded and the outcome compared
//! with `testdata/NAME.expected`. Run with `UPDATE_EXPECT=1` to rewrite the
//! expected files after an intended change, then review the diff.

use std::path::Path;

use super::Manifest;

fn env(name: &str) -> Option<String> {
    match name {
        "PRESENT_SECRET" => Some("s3cret-value".to_owned()),
        "PRESENT_SECRET_URL" => Some("redis://:pw@127.0.0.1:6379/2".to_owned()),
        _ => None,
    }
}

fn describe(manifest: &Manifest) -> String {
    let mut out = format!(
        "limits: {:?}\nmodel: {:?}\n",
        manifest.limits, manifest.model
    );
    if let Some(oauth) = &manifest.serve.auth.oauth {
        out += &format!(
            "serve.auth: audience {}, algorithms {:?}, leeway {:?}\n",
            oauth.audience(),
            oauth.algorithms(),
            oauth.leeway()
        );
        for (issuer, jwks) in oauth.issuers() {
            out += &format!("  issuer {issuer} keys {jwks}\n");
        }
    }
    for (key, source) in &manifest.serve.auth.context {
        out += &format!("  context.{key} = {source:?}\n");
    }
    if manifest.serve.sessions != super::SessionSettings::default() {
        out += &format!("sessions: {:?}\n", manifest.serve.sessions);
    }
    if manifest.serve.tasks != crate::durable_tasks::TaskPolicy::default() {
        out += &format!("serve.tasks: {:?}\n", manifest.serve.tasks);
    }
    for c in &manifest.components {
        if let Some(idempotent) = c.idempotent {
            out += &format!("tool {}: idempotent = {idempotent}\n", c.label());
        }
        out += &format!(
            "tool {}: approval {:?}, cache {:?}, timeout {:?}, memory {}\n  hosts: {:?}\n  files: {:?}\n  env: {:?}\n  config: {:?}\n",
            c.label(),
            c.approval,
            c.cache,
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
                .map(|f| (f.guest.as_str(), f.mode.to_string(), f.quota))
                .collect::<Vec<_>>(),
            c.grants.env_vars(),
            c.grants.config_keys().collect::<Vec<_>>(),
        );
        for store in c.grants.stores() {
            out += &format!("  store: {store:?}\n");
        }
        if let Some(calls) = c.grants.tool_calls() {
            out += &format!("  call_tools: {calls:?}\n");
        }
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

/// Where the property tests pretend the manifest lives: beside `dummy.wasm`
/// and `data/`, so that generated grants can get as far as being granted.
fn testdata_manifest() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/manifest/testdata/generated.toml")
}

#[test]
fn deeply_nested_toml_is_an_error_not_a_crash() {
    let depth = 100_000;
    for text in [
        format!("x = {}{}", "[".repeat(depth), "]".repeat(depth)),
        format!("x = {}1{}", "{a = ".repeat(depth), "}".repeat(depth)),
        format!("{} = 1", vec!["a"; depth].join(".")),
        format!("[{}]", vec!["a"; depth].join(".")),
        format!(
            "[[tool]]\ncomponent = \"dummy.wasm\"\nenv = {}{}",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    ] {
        assert!(Manifest::parse(&testdata_manifest(), &text, &env).is_err());
    }
}

mod properties {
    use proptest::prelude::*;
    use proptest::strategy::BoxedStrategy;
    use toml::{Table, Value};

    use super::{Manifest, env, testdata_manifest};

    /// Lines a manifest is made of, right and wrong, to shuffle into text.
    const LINES: &[&str] = &[
        "[limits]",
        "[[tool]]",
        "[model]",
        "[tool]",
        "[limits.extra]",
        "component = \"dummy.wasm\"",
        "component = \"nowhere.wasm\"",
        "component = 5",
        "allow_hosts = [\"https://example.org\", \"http://[::1]:*\"]",
        "allow_hosts = \"https://example.org\"",
        "files = [{ host = \"data\", guest = \"/data\", mode = \"read-write\" }]",
        "files = [{ host = \"data\", guest = \"/data\", mode = \"read-write\", quota = \"1KiB\" }]",
        "files = [{ host = \"data\", guest = \"/\" }, { host = \"data\", guest = \"//\" }]",
        "env = { UNITS = \"metric\" }",
        "config = { key = { env = \"PRESENT_SECRET\" }, other = { env = \"ABSENT\" } }",
        "approval = \"destructive\"",
        "limits = { timeout = \"0s\" }",
        "timeout = \"5s\"",
        "timeout = \"99999999999999999999999s\"",
        "memory = \"64MiB\"",
        "memory = 18446744073709551615",
        "max_output = 255",
        "max_arguments = \"1 EiB\"",
        "max_concurrency = 0",
        "fuel = -1",
        "base_url = \"http://127.0.0.1:8080/v1\"",
        "model = \"qwen\"",
        "provider = \"anthropic\"",
        "max_steps = 0",
        "",
        "# comment",
        "=",
        "[",
        "\"",
    ];

    /// Durations and sizes that are fine where they belong.
    const AMOUNTS: &[&str] = &["5s", "500ms", "1s 2ms", "64MiB", "64KiB", "1", "100000"];

    /// Durations and sizes, wrong and at the edges.
    const EDGE_AMOUNTS: &[&str] = &[
        "0s",
        "1ns",
        "18446744073709551615s",
        "18446744073709551616s",
        "99999999999999999999999999s",
        "584942417355years",
        "-1s",
        "1.5s",
        "soon",
        "",
        "0",
        "8GiB",
        "1e400 B",
        "18446744073709551615 EiB",
        "99999999999999999999999 B",
        ".5 k",
        "1 EiB",
        "huge",
    ];

    /// `allow_hosts` entries that are fine.
    const HOSTS: &[&str] = &[
        "https://example.org",
        "http://127.0.0.1:8081",
        "https://*.example.org",
        "http://*:*",
        "http://[::1]:8080",
        "http://[::1]",
        "HTTPS://A.ORG:*",
    ];

    /// `allow_hosts` entries, wrong and at the edges.
    const EDGE_HOSTS: &[&str] = &[
        "https://[::1",
        "https://]:1",
        "https://a:99999",
        "https://a:0",
        "https://*.",
        "https://*.*.a",
        "https://:",
        "https://",
        "example.org",
        "ftp://example.org",
        "https://a/b",
        "https://é.org:1",
        "",
    ];

    /// Everything else a string in the manifest might be.
    const WORDS: &[&str] = &[
        "",
        "dummy.wasm",
        "nowhere.wasm",
        "data",
        "./data",
        "data/",
        "/data",
        "/",
        "//",
        "relative",
        "read-only",
        "read-write",
        "rw",
        "never",
        "always",
        "destructive",
        "openai",
        "anthropic",
        "qwen",
        "http://127.0.0.1:8080/v1",
        "PRESENT_SECRET",
        "ABSENT_SECRET",
        "UNITS",
        "\u{0}",
        "é",
    ];

    /// Integers at the edges of the types the manifest reads them into.
    const INTEGERS: &[i64] = &[
        0,
        1,
        -1,
        255,
        256,
        65_536,
        4_294_967_296,
        i64::MAX,
        i64::MIN,
    ];

    /// Keys from every table of the manifest, for tables of random shape.
    const KEYS: &[&str] = &[
        "limits",
        "tool",
        "model",
        "component",
        "allow_hosts",
        "files",
        "env",
        "config",
        "approval",
        "host",
        "guest",
        "mode",
        "quota",
        "timeout",
        "fuel",
        "memory",
        "max_output",
        "max_concurrency",
        "max_arguments",
        "ready",
        "provider",
        "base_url",
        "api_key_env",
        "max_steps",
        "max_tokens",
        "stream",
        "max_retries",
        "UNITS",
        "api_key",
    ];

    fn pick(words: &'static [&'static str]) -> BoxedStrategy<Value> {
        prop::sample::select(words)
            .prop_map(|w| Value::String(w.to_owned()))
            .boxed()
    }

    /// Mostly one of `good`; now and then one of `edge`, or any string.
    fn mostly(
        good: &'static [&'static str],
        edge: &'static [&'static str],
    ) -> BoxedStrategy<Value> {
        prop_oneof![
            16 => pick(good),
            1 => pick(edge),
            1 => ".{0,12}".prop_map(Value::String),
        ]
        .boxed()
    }

    fn integer() -> BoxedStrategy<Value> {
        prop_oneof![
            16 => (1..100_000i64).prop_map(Value::Integer),
            1 => prop::sample::select(INTEGERS).prop_map(Value::Integer),
            1 => any::<i64>().prop_map(Value::Integer),
        ]
        .boxed()
    }

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(KEYS).prop_map(str::to_owned),
            1 => "[a-zA-Z_]{0,6}",
        ]
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            pick(AMOUNTS),
            pick(EDGE_AMOUNTS),
            pick(HOSTS),
            pick(EDGE_HOSTS),
            pick(WORDS),
            integer(),
            any::<f64>().prop_map(Value::Float),
            any::<bool>().prop_map(Value::Boolean),
        ]
    }

    /// Any TOML value, a few levels deep, made of plausible keys and words.
    fn value() -> BoxedStrategy<Value> {
        scalar()
            .prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::btree_map(key(), inner, 0..5)
                        .prop_map(|map| Value::Table(map.into_iter().collect())),
                ]
            })
            .boxed()
    }

    /// A value of the type `key` takes, mostly; of any type sometimes.
    fn value_for(key: &str) -> BoxedStrategy<Value> {
        let typed = match key {
            "component" => mostly(&["dummy.wasm", "./dummy.wasm"], WORDS),
            "allow_hosts" => prop::collection::vec(mostly(HOSTS, EDGE_HOSTS), 0..4)
                .prop_map(Value::Array)
                .boxed(),
            "files" => prop::collection::vec(table(&["host", "guest"], &["mode", "quota"]), 0..3)
                .prop_map(Value::Array)
                .boxed(),
            "env" | "config" => prop::collection::btree_map(
                prop_oneof![Just("UNITS".to_owned()), "[a-zA-Z_]{0,6}"],
                prop_oneof![
                    pick(WORDS),
                    mostly(&["PRESENT_SECRET"], WORDS).prop_map(|name| {
                        Value::Table(Table::from_iter([("env".to_owned(), name)]))
                    }),
                ],
                0..3,
            )
            .prop_map(|map| Value::Table(map.into_iter().collect()))
            .boxed(),
            "limits" => limits(),
            "timeout" => mostly(&["5s", "500ms", "1s 2ms"], EDGE_AMOUNTS),
            "memory" | "max_output" | "max_arguments" | "quota" => prop_oneof![
                3 => mostly(&["64MiB", "64KiB", "1000000"], EDGE_AMOUNTS),
                1 => integer(),
            ]
            .boxed(),
            "fuel" | "max_concurrency" | "ready" | "max_steps" | "max_tokens" | "max_retries" => {
                integer()
            }
            "stream" => any::<bool>().prop_map(Value::Boolean).boxed(),
            "host" => mostly(&["data", "./data", "data/"], WORDS),
            "guest" => mostly(&["/data", "/out", "/", "/data/"], WORDS),
            "mode" => mostly(&["read-only", "read-write"], WORDS),
            "approval" => mostly(&["never", "always", "destructive"], WORDS),
            "provider" => mostly(&["openai", "anthropic"], WORDS),
            "base_url" => mostly(&["http://127.0.0.1:8080/v1", "https://api.example"], HOSTS),
            _ => mostly(WORDS, EDGE_AMOUNTS),
        };
        prop_oneof![24 => typed, 1 => value()].boxed()
    }

    /// A table with `required` keys (mostly) and some of `optional`, each
    /// value mostly of its key's type, and now and then a key of its own.
    fn table(
        required: &'static [&'static str],
        optional: &'static [&'static str],
    ) -> BoxedStrategy<Value> {
        let entries: Vec<_> = required
            .iter()
            .map(|key| (key, 0.97))
            .chain(optional.iter().map(|key| (key, 0.5)))
            .map(|(&key, chance)| {
                prop::option::weighted(
                    chance,
                    value_for(key).prop_map(move |v| (key.to_owned(), v)),
                )
            })
            .collect();
        (entries, prop::option::weighted(0.05, (key(), value())))
            .prop_map(|(entries, extra)| {
                Value::Table(entries.into_iter().flatten().chain(extra).collect())
            })
            .boxed()
    }

    fn limits() -> BoxedStrategy<Value> {
        table(
            &[],
            &[
                "timeout",
                "fuel",
                "memory",
                "max_output",
                "max_concurrency",
                "max_arguments",
                "ready",
            ],
        )
    }

    fn manifest() -> impl Strategy<Value = Table> {
        let tool = table(
            &["component"],
            &[
                "allow_hosts",
                "files",
                "env",
                "config",
                "approval",
                "limits",
            ],
        );
        let model = table(
            &["base_url", "model"],
            &[
                "provider",
                "api_key_env",
                "max_steps",
                "max_tokens",
                "stream",
                "timeout",
                "max_retries",
            ],
        );
        (
            prop::option::weighted(0.5, prop_oneof![9 => limits(), 1 => value()]),
            prop::option::weighted(
                0.9,
                prop_oneof![
                    9 => prop::collection::vec(tool, 1..3).prop_map(Value::Array),
                    1 => value(),
                ],
            ),
            prop::option::weighted(0.4, prop_oneof![9 => model, 1 => value()]),
            prop::option::weighted(0.05, (key(), value())),
        )
            .prop_map(|(limits, tools, model, extra)| {
                [("limits", limits), ("tool", tools), ("model", model)]
                    .into_iter()
                    .filter_map(|(key, value)| Some((key.to_owned(), value?)))
                    .chain(extra)
                    .collect()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn parse_never_panics_on_arbitrary_text(text in any::<String>()) {
            let _ = Manifest::parse(&testdata_manifest(), &text, &env);
        }

        #[test]
        fn parse_never_panics_on_shuffled_manifest_lines(
            lines in prop::collection::vec(prop::sample::select(LINES), 0..16)
        ) {
            let _ = Manifest::parse(&testdata_manifest(), &lines.join("\n"), &env);
        }

        #[test]
        fn parse_never_panics_on_generated_manifests(root in manifest()) {
            // Some generated tables have no TOML spelling; those are not
            // manifests at all.
            let Ok(text) = toml::to_string(&root) else { return Ok(()) };
            if let Err(e) = Manifest::parse(&testdata_manifest(), &text, &env) {
                prop_assert!(!e.to_string().is_empty());
            }
        }
    }
}

#[test]
fn the_registry_tables_alone_still_refuse_a_misspelt_table_and_skip_the_others() {
    let path = Path::new("/nowhere/toolhost.toml");
    let misspelt = "[verfiy]\nkey = \"keys/tools.pub\"\n";
    let err = Manifest::parse_registry(path, misspelt)
        .unwrap_err()
        .to_string();
    assert!(err.contains("verfiy"), "{err}");
    // The other tables are not looked into: a tool whose file is missing,
    // or limits that would not validate, do not stop a registry command.
    let others = "[limits]\ntimeout = \"never\"\n[[tool]]\ncomponent = \"missing.wasm\"\n\
                  [model]\nmodel = \"m\"\n[serve]\n[store.s]\nbackend = \"memory\"\n";
    let config = Manifest::parse_registry(path, others).unwrap();
    assert!(matches!(
        config.verify,
        crate::registry::verify::Policy::None
    ));
}

/// The top-level keys a table type accepts, as serde lists them when it
/// refuses an unknown one.
fn top_level_keys<T: serde::de::DeserializeOwned>() -> std::collections::BTreeSet<String> {
    let Err(error) = toml::from_str::<T>("no_such_key = 1\n") else {
        panic!("an unknown key was accepted");
    };
    let error = error.to_string();
    let (_, expected) = error
        .split_once("expected one of ")
        .unwrap_or_else(|| panic!("{error}"));
    expected
        .lines()
        .next()
        .unwrap_or_default()
        .split(", ")
        .map(|key| key.trim().trim_matches('`').to_owned())
        .collect()
}

#[test]
fn the_registry_tables_alone_accept_exactly_the_top_level_keys_of_a_manifest() {
    let full = top_level_keys::<super::RawManifest>();
    let alone = top_level_keys::<super::registry::RawRegistryOnly>();
    assert!(
        full.contains("registry") && full.contains("tool"),
        "{full:?}"
    );
    assert_eq!(full, alone, "RawRegistryOnly must list RawManifest's keys");
}

#[test]
fn registry_validation_errors_read_alone_name_the_line() {
    let path = Path::new("/nowhere/toolhost.toml");
    let cases = [
        (
            "[limits]\n\n[registry]\ntimeout = \"never\"\n",
            "toolhost.toml:4: `registry.timeout`",
        ),
        (
            "[registry]\nmax_component = \"0B\"\n",
            "toolhost.toml:2: `registry.max_component`",
        ),
        (
            "# a comment\n[registry.host.\"ghcr.io\"]\nusername = \"bot\"\n",
            "toolhost.toml:2: `registry.host.\"ghcr.io\"`",
        ),
        ("\n\nverify = \"sometimes\"\n", "toolhost.toml:3: `verify`"),
    ];
    for (text, expected) in cases {
        let alone = Manifest::parse_registry(path, text)
            .unwrap_err()
            .to_string();
        assert!(alone.contains(expected), "{alone}");
        // And the same in the whole manifest.
        let whole = Manifest::parse(path, text, &env).unwrap_err().to_string();
        assert!(whole.contains(expected), "{whole}");
    }
}
