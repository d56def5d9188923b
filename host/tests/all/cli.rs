//! The `toolhost` binary: commands, output and exit status.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::util::root;

fn toolhost(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(args)
        .current_dir(root())
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the toolhost binary runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn stdout_json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "exit {:?}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

const EXAMPLES: &str = "example-tools/toolhost.toml";

#[test]
fn call_prints_one_tool_message() {
    let output = toolhost(
        &[
            "call",
            "--config",
            EXAMPLES,
            "calc",
            r#"{"expression":"6*7"}"#,
        ],
        None,
    );
    let message = stdout_json(&output);
    assert_eq!(message["content"], "42");
    assert_eq!(message["role"], "tool");
    assert_eq!(message["is_error"], false);
}

#[test]
fn a_failed_call_still_exits_zero() {
    let output = toolhost(&["call", "--config", EXAMPLES, "calc", "{not json"], None);
    let message = stdout_json(&output);
    assert_eq!(message["is_error"], true);
    assert_eq!(message["error"]["type"], "invalid_arguments");
}

#[test]
fn batch_from_stdin_answers_every_id_in_order() {
    let batch = r#"[
        {"id":"a","type":"function","function":{"name":"calc","arguments":"{\"expression\":\"1+1\"}"}},
        {"id":"b","name":"nope","args":{}},
        {"id":"c","name":"convert_units","args":{"value":0,"from":"C","to":"F"}},
        {"id":"d","name":"word_count","args":{"text":"a b"}}
    ]"#;
    let output = toolhost(&["call", "--config", EXAMPLES, "--batch", "-"], Some(batch));
    let messages = stdout_json(&output);
    let ids: Vec<&str> = messages
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    assert_eq!(messages[0]["content"], "2");
    assert_eq!(messages[1]["error"]["type"], "unknown_tool");
    assert_eq!(messages[2]["content"], "0 C = 32 F");
    assert_eq!(messages[3]["is_error"], false);
}

/// Issue 24: the text and thinking blocks of an Anthropic
/// `response.content` array given to `call --batch` are no calls, and get
/// no answers.
#[test]
fn a_batch_of_anthropic_content_blocks_answers_its_tool_use_blocks_only() {
    let content = r#"[
        {"type":"thinking","thinking":"hm","signature":"s"},
        {"type":"text","text":"Adding."},
        {"type":"tool_use","id":"toolu_1","name":"calc","input":{"expression":"1+1"}},
        {"type":"text","text":"And one more."},
        {"name":"calc","arguments":{"expression":"2+2"}}
    ]"#;
    let output = toolhost(
        &[
            "call",
            "--config",
            EXAMPLES,
            "--format",
            "anthropic",
            "--batch",
            "-",
        ],
        Some(content),
    );
    let answers = stdout_json(&output);
    assert_eq!(
        answers,
        serde_json::json!([
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "2", "is_error": false},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "4", "is_error": false},
        ])
    );
}

/// Issue 24: `call --format openai` answers with OpenAI chat-completions
/// messages: one call is an array of its tool message (and the user
/// message with its images, if any); a batch is its tool messages, in
/// order, then one user message with every image.
#[test]
fn call_format_openai_answers_with_tool_messages_then_one_user_message() {
    let dir = probe_manifest();
    let config = dir.path().join("toolhost.toml");
    let config = config.to_str().unwrap();
    let one = stdout_json(&toolhost(
        &[
            "call",
            "--config",
            config,
            "--format",
            "openai",
            "echo",
            r#"{"text":"ab","times":2}"#,
        ],
        None,
    ));
    assert_eq!(
        one,
        serde_json::json!([{"role": "tool", "tool_call_id": "call_1", "content": "abab"}])
    );
    let batch = r#"[
        {"id":"m","name":"media","args":{"size":64}},
        {"id":"e","name":"echo","args":{"text":"x","times":1}},
        {"id":"n","name":"media","args":{"size":64}}
    ]"#;
    let answers = stdout_json(&toolhost(
        &[
            "call", "--config", config, "--format", "openai", "--batch", "-",
        ],
        Some(batch),
    ));
    let answers = answers.as_array().unwrap();
    let who: Vec<(&str, Option<&str>)> = answers
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["tool_call_id"].as_str()))
        .collect();
    assert_eq!(
        who,
        [
            ("tool", Some("m")),
            ("tool", Some("e")),
            ("tool", Some("n")),
            ("user", None)
        ]
    );
    assert_eq!(answers[3]["content"].as_array().unwrap().len(), 4);
}

/// A batch is checked whole before any of its calls runs, wherever it
/// comes from: a regular file, stdin, or a pipe named as a path.
#[test]
fn a_batch_with_an_error_anywhere_runs_none_of_its_calls() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let config = dir.path().join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "[[tool]]\ncomponent = {:?}\nfiles = [{{ host = {:?}, guest = \"/data\", mode = \"read-write\" }}]\n",
            crate::util::component("files").display().to_string(),
            data.display().to_string(),
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let write = |name: &str| {
        format!(
            r#"{{"id":"{name}","name":"write_file","args":{{"path":"/data/{name}","content":"x","append":null}}}}"#
        )
    };
    let broken = format!("[{}, {}, {{oops]", write("first"), write("second"));
    let path = dir.path().join("broken.json");
    std::fs::write(&path, &broken).unwrap();
    for source in [path.to_str().unwrap(), "-", "/dev/stdin"] {
        let output = toolhost(
            &["call", "--config", config, "--yes", "--batch", source],
            Some(&broken),
        );
        assert!(!output.status.success(), "{source}");
        assert!(
            output.stdout.is_empty(),
            "{source}: {:?}",
            String::from_utf8_lossy(&output.stdout)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(": the batch is not JSON: key must be a string at line 1 column"),
            "{source}: {stderr}"
        );
        assert_eq!(
            std::fs::read_dir(&data).unwrap().count(),
            0,
            "{source}: a call ran"
        );
    }
    // The same batch, mended, runs every call, from each source.
    let mended = format!("[{}, {}]", write("first"), write("second"));
    std::fs::write(&path, &mended).unwrap();
    for source in [path.to_str().unwrap(), "-", "/dev/stdin"] {
        let messages = stdout_json(&toolhost(
            &["call", "--config", config, "--yes", "--batch", source],
            Some(&mended),
        ));
        assert_eq!(messages.as_array().unwrap().len(), 2, "{source}");
        assert_eq!(
            messages[1]["content"], "wrote 1 bytes to /data/second",
            "{source}"
        );
        std::fs::remove_file(data.join("first")).unwrap();
        std::fs::remove_file(data.join("second")).unwrap();
    }
}

#[test]
fn tools_prints_definitions_in_each_format() {
    let openai = stdout_json(&toolhost(&["tools", "--config", EXAMPLES], None));
    let names: Vec<&str> = openai
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "calc",
            "http_get",
            "read_file",
            "list_dir",
            "write_file",
            "word_count",
            "slugify",
            "tally",
            "convert_units",
            "base64_encode",
            "base64_decode"
        ]
    );
    let anthropic = stdout_json(&toolhost(
        &["tools", "--config", EXAMPLES, "--format", "anthropic"],
        None,
    ));
    assert_eq!(anthropic[0]["input_schema"]["type"], "object");
    let mcp = stdout_json(&toolhost(
        &["tools", "--config", EXAMPLES, "--format", "mcp"],
        None,
    ));
    assert_eq!(mcp[4]["annotations"]["destructiveHint"], true);
}

#[test]
fn check_prints_what_each_tool_may_touch() {
    let output = toolhost(&["check", "--config", EXAMPLES], None);
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains("grants: none (computes only"), "{text}");
    assert!(
        text.contains("http: may request https://example.org"),
        "{text}"
    );
    assert!(
        text.contains("files: may read ") && text.contains(" as /data"),
        "{text}"
    );
    assert!(
        text.contains("approval: asked before destructive tools"),
        "{text}"
    );
}

#[test]
fn a_bad_manifest_exits_one_naming_file_tool_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[tool]]\ncomponent = \"{}\"\nallow_hosts = [\"example.org\"]\n",
            crate::util::component("calc").display()
        ),
    )
    .unwrap();
    let output = toolhost(&["tools", "--config", manifest.to_str().unwrap()], None);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("toolhost.toml: tool #1"), "{stderr}");
    assert!(
        stderr.contains("`allow_hosts[0]`") && stderr.contains(r#"write "https://example.org""#),
        "{stderr}"
    );
}

/// Issue 24: every example tool passes `check --strict`; integer formats
/// clients do not know (`uint`, from schemars) are gone from what is
/// listed, replaced by their bounds.
#[test]
fn every_example_passes_check_strict_with_no_unknown_integer_format() {
    for manifest in [
        EXAMPLES,
        "example-tools/state.toml",
        "example-tools/demo.toml",
    ] {
        let strict = toolhost(&["check", "--strict", "--config", manifest], None);
        let stderr = String::from_utf8_lossy(&strict.stderr);
        assert!(strict.status.success(), "{manifest}:\n{stderr}");
        assert!(!stderr.contains("warning:"), "{manifest}:\n{stderr}");
    }
    let mcp = stdout_json(&toolhost(
        &["tools", "--config", EXAMPLES, "--format", "mcp"],
        None,
    ));
    let text = mcp.to_string();
    for format in ["uint", "int8", "int16", "int128"] {
        assert!(
            !text.contains(&format!(r#""format":"{format}"#)),
            "{format} in {text}"
        );
    }
    let http_get = mcp
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "http_get")
        .unwrap();
    let max_chars = &http_get["inputSchema"]["properties"]["max_chars"];
    assert_eq!(max_chars["minimum"], 1, "{max_chars}");
    assert_eq!(max_chars["maximum"], 100_000, "{max_chars}");
    let status = &http_get["outputSchema"]["properties"]["status"];
    assert_eq!(
        (&status["minimum"], &status["maximum"]),
        (&serde_json::json!(0), &serde_json::json!(65535)),
        "{status}"
    );
}

#[test]
fn check_warns_of_what_models_and_clients_trip_on_and_strict_fails() {
    let dir = probe_manifest();
    let config = dir.path().join("toolhost.toml");
    let config = config.to_str().unwrap();
    let output = toolhost(&["check", "--config", config], None);
    assert!(output.status.success(), "warnings alone do not fail");
    let stderr = String::from_utf8(output.stderr).unwrap();
    // The probe's optional arguments with defaults, which strict mode
    // refuses.
    for expected in [
        "warning: tool put: input schema has optional properties at / (",
        "warning: tool put: input schema has `default` at /properties/size",
        "warning: tool panic: description \"Panic\" is too short",
    ] {
        assert!(stderr.contains(expected), "no {expected:?} in:\n{stderr}");
    }
    let strict = toolhost(&["check", "--strict", "--config", config], None);
    assert_eq!(strict.status.code(), Some(1));
    let stderr = String::from_utf8(strict.stderr).unwrap();
    assert!(stderr.contains("--strict makes them errors"), "{stderr}");
}

#[test]
fn call_component_runs_a_component_with_only_the_flags_grants() {
    let calc = crate::util::component("calc");
    let output = toolhost(
        &[
            "call",
            "--component",
            calc.to_str().unwrap(),
            "calc",
            r#"{"expression":"2+3"}"#,
            "--verbose",
        ],
        None,
    );
    assert_eq!(stdout_json(&output)["content"], "5");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("calc: success in ") && stderr.contains(" ms, fuel "),
        "{stderr}"
    );

    // Files: nothing without --dir; read-only with it.
    let files = crate::util::component("files");
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("a.txt"), "granted").unwrap();
    let read = |extra: &[&str]| {
        let mut args = vec![
            "call",
            "--component",
            files.to_str().unwrap(),
            "read_file",
            r#"{"path":"/data/a.txt"}"#,
        ];
        args.extend_from_slice(extra);
        stdout_json(&toolhost(&args, None))
    };
    let refused = read(&[]);
    assert_eq!(refused["is_error"], true);
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("outside this tool's file grants"),
        "{refused}"
    );
    let dir = format!("{}:/data:ro", data.path().display());
    assert_eq!(read(&["--dir", &dir])["content"], "granted");
}

#[test]
fn call_component_flags_that_cannot_grant_are_usage_errors() {
    let calc = crate::util::component("calc");
    let calc = calc.to_str().unwrap();
    for (flag, value, expected) in [
        (
            "--allow-host",
            "example.org",
            "--allow-host \"example.org\"",
        ),
        (
            "--dir",
            "/nonexistent-dir:/data",
            "--dir \"/nonexistent-dir:/data\"",
        ),
        ("--dir", "no-guest-path", "expected HOST:GUEST[:ro|rw]"),
        ("--dir", "./data:/data:RW", "write ro or rw"),
        ("--timeout", "0s", "--timeout: must be longer than zero"),
        ("--timeout", "1000d", "--timeout: must be at most"),
        ("--memory", "1KiB", "--memory: must be at least"),
        ("--fuel", "0", "--fuel: must be at least 1"),
        ("--env", "NOEQUALS", "expected KEY=VALUE"),
        ("--config-value", "=x", "expected KEY=VALUE"),
    ] {
        let output = toolhost(
            &["call", "--component", calc, flag, value, "calc", "{}"],
            None,
        );
        assert_eq!(output.status.code(), Some(2), "{flag} {value}");
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(stderr.contains(expected), "{flag} {value}: {stderr}");
    }
    // Grant flags need --component.
    let output = toolhost(
        &["call", "--config", EXAMPLES, "--dir", "a:/b", "calc", "{}"],
        None,
    );
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn new_writes_a_tool_folder_once_and_refuses_bad_names() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("word-stats");
    let dir_text = dir.to_str().unwrap();
    let output = toolhost(&["new", dir_text, "--lang", "python"], None);
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        stdout.contains("the tool word_stats") && stdout.contains("build.sh"),
        "{stdout}"
    );
    let manifest = std::fs::read_to_string(dir.join("toolhost.toml")).unwrap();
    assert!(manifest.contains("word_stats.wasm"), "{manifest}");

    let again = toolhost(&["new", dir_text, "--lang", "c"], None);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    let bad = parent.path().join("2fast");
    let output = toolhost(&["new", bad.to_str().unwrap(), "--lang", "rust"], None);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot name a tool"));
    assert!(!bad.exists());
}

#[test]
fn componentize_refuses_what_is_not_a_core_module() {
    let calc = crate::util::component("calc");
    let out = tempfile::tempdir().unwrap();
    let output = toolhost(
        &[
            "componentize",
            calc.to_str().unwrap(),
            "-o",
            out.path().join("x.wasm").to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("already a component"));
}

#[test]
fn usage_errors_exit_two() {
    let output = toolhost(&["call", "--config", EXAMPLES], None);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn a_trap_logs_the_guests_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[tool]]\ncomponent = \"{}\"\n",
            crate::util::component("probe").display()
        ),
    )
    .unwrap();
    let output = toolhost(
        &["call", "--config", manifest.to_str().unwrap(), "panic"],
        None,
    );
    let message = stdout_json(&output);
    assert_eq!(message["error"]["type"], "trap");
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("probe: about to panic"), "{stderr}");
    assert!(stderr.contains("probe panicked on purpose"), "{stderr}");
}

/// A manifest with only the probe, in a temporary directory.
fn probe_manifest() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let probe = crate::util::component("probe");
    std::fs::write(
        dir.path().join("toolhost.toml"),
        format!("[[tool]]\ncomponent = {:?}\n", probe.display().to_string()),
    )
    .unwrap();
    dir
}

fn toolhost_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(args)
        .current_dir(root())
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("the toolhost binary runs")
}

#[test]
fn a_failed_call_logs_the_wasm_trap_not_a_host_backtrace() {
    let dir = probe_manifest();
    let config = dir.path().join("toolhost.toml");
    let output = toolhost_with_env(
        &["call", "--config", config.to_str().unwrap(), "panic"],
        &[("RUST_BACKTRACE", "1"), ("NO_COLOR", "1")],
    );
    let message = stdout_json(&output);
    assert_eq!(message["error"]["type"], "trap");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("tool failed"), "{stderr}");
    assert!(stderr.contains("wasm backtrace"), "{stderr}");
    assert!(
        !stderr.to_lowercase().contains("stack backtrace") && !stderr.contains("tokio::runtime"),
        "a host Rust backtrace was logged: {stderr}"
    );
    assert!(stderr.len() < 16 * 1024, "{} bytes of stderr", stderr.len());
}

#[test]
fn guest_log_lines_cannot_forge_log_lines() {
    let dir = probe_manifest();
    let config = dir.path().join("toolhost.toml");
    let output = toolhost_with_env(
        &[
            "call",
            "--config",
            config.to_str().unwrap(),
            "log_flood",
            r#"{"n":3}"#,
        ],
        &[("RUST_LOG", "toolhost::guest=info"), ("NO_COLOR", "1")],
    );
    stdout_json(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("forged").count(), 3, "{stderr}");
    for line in stderr.lines() {
        assert!(!line.starts_with("ERROR fake"), "a forged line: {line}");
        assert!(!line.contains('\u{1b}'), "an escape sequence: {line:?}");
    }
}

#[test]
fn under_a_low_descriptor_limit_hoarding_calls_leave_the_host_its_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("notes.txt"), "granted").unwrap();
    let config = dir.path().join("toolhost.toml");
    std::fs::write(
        &config,
        format!(
            "[limits]\ntimeout = \"20s\"\n\n[[tool]]\ncomponent = {:?}\nfiles = [{{ host = {:?}, guest = \"/data\" }}]\n\n[[tool]]\ncomponent = {:?}\n",
            crate::util::component("probe").display().to_string(),
            data.display().to_string(),
            crate::util::component("calc").display().to_string(),
        ),
    )
    .unwrap();
    let mut calls: Vec<Value> = (0..12)
        .map(|i| {
            serde_json::json!({"id": format!("h{i}"), "name": "hold_files",
                "args": {"path": "/data/notes.txt", "n": 1000, "hold_ms": 500}})
        })
        .collect();
    calls.push(serde_json::json!({"id": "calc", "name": "calc", "args": {"expression": "6*7"}}));
    let batch = dir.path().join("batch.json");
    std::fs::write(&batch, serde_json::to_string(&calls).unwrap()).unwrap();
    // The common default of 1024 is too generous to show anything with 12
    // calls; 256 (soft and hard, so toolhost cannot raise it) leaves tools a
    // pool of 128.
    let output = Command::new("sh")
        .arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .args(["call", "--config", config.to_str().unwrap(), "--batch"])
        .arg(&batch)
        .current_dir(root())
        .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let messages = stdout_json(&output);
    let messages = messages.as_array().unwrap();
    assert_eq!(messages.len(), 13);
    assert_eq!(messages[12]["content"], "42", "{:?}", messages[12]);
    let opened: Vec<u64> = messages[..12]
        .iter()
        .map(|m| {
            let content = m["content"].as_str().unwrap();
            let count = content.strip_prefix("opened ").unwrap_or("0;");
            count.split(';').next().unwrap().parse().unwrap()
        })
        .collect();
    assert!(opened.iter().all(|&n| n <= 64), "{opened:?}");
    // The pool for a limit of 256 is 128, less one per call for its granted
    // directory.
    assert!(opened.iter().sum::<u64>() <= 128, "{opened:?}");
}

/// A manifest with the calc and http-get tools and a scripted, non-streaming
/// model at `base_url`.
fn scripted_manifest(base_url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let tools = root().join("target/tools");
    std::fs::write(
        dir.path().join("toolhost.toml"),
        format!(
            "[model]\nbase_url = {base_url:?}\nmodel = \"scripted\"\nstream = false\n\n\
             [[tool]]\ncomponent = {:?}\n\n[[tool]]\ncomponent = {:?}\nallow_hosts = [\"https://example.org\"]\n",
            tools.join("calc.wasm"),
            tools.join("http-get.wasm"),
        ),
    )
    .unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_transcript_replays_exactly_as_the_run_showed_it() {
    use crate::agent::{model_server, oa_calls, oa_text};
    let (base_url, _script) = model_server(vec![
        oa_calls(&[
            ("c1", "calc", r#"{"expression":"6*7"}"#),
            (
                "c2",
                "http_get",
                r#"{"url":"http://169.254.169.254/latest/meta-data/","max_chars":null}"#,
            ),
        ]),
        oa_text("The product is 42, and the fetch was refused."),
    ])
    .await;
    let dir = scripted_manifest(&base_url);
    let config = dir.path().join("toolhost.toml");
    let transcript = dir.path().join("run.jsonl");
    let (config, transcript) = (
        config.display().to_string(),
        transcript.display().to_string(),
    );
    let run = {
        let (config, transcript) = (config.clone(), transcript.clone());
        tokio::task::spawn_blocking(move || {
            toolhost(
                &[
                    "run",
                    "--config",
                    &config,
                    "--transcript",
                    &transcript,
                    "go",
                ],
                None,
            )
        })
        .await
        .unwrap()
    };
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let shown = String::from_utf8(run.stdout).unwrap();
    // Not streamed, the answer still shows; so do both results.
    assert!(shown.contains("The product is 42"), "{shown}");
    assert!(shown.contains("← calc ✓"), "{shown}");
    assert!(shown.contains("← http_get ✗ capability_denied"), "{shown}");
    let replay = toolhost(&["replay", &transcript], None);
    assert!(
        replay.status.success(),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(String::from_utf8(replay.stdout).unwrap(), shown);
    let summary = |stderr: &[u8]| {
        String::from_utf8_lossy(stderr)
            .lines()
            .find(|l| l.contains("model calls"))
            .map(str::to_owned)
    };
    assert_eq!(summary(&replay.stderr), summary(&run.stderr));
    assert!(summary(&run.stderr).is_some());

    std::fs::write(&transcript, "{\"type\":\"finished\"}\nnot json\n").unwrap();
    let bad = toolhost(&["replay", &transcript], None);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("run.jsonl:2: not a transcript event"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

#[test]
fn loop_flags_out_of_range_or_naming_no_tool_are_usage_errors() {
    let dir = scripted_manifest("http://127.0.0.1:9/v1");
    let config = dir.path().join("toolhost.toml").display().to_string();
    let cases: [(&[&str], &str); 4] = [
        (&["--temperature", "5"], "temperature"),
        (
            &[
                "--parallel-tool-calls",
                "false",
                "--max-tool-calls-per-turn",
                "3",
            ],
            "max_tool_calls_per_turn",
        ),
        (&["--max-run-cost", "1"], "prices"),
        (&["--tool-choice", "no_such_tool"], "no loaded tool"),
    ];
    for (flags, named) in cases {
        let mut args = vec!["run", "--config", &config];
        args.extend_from_slice(flags);
        args.push("go");
        let output = toolhost(&args, None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(named), "{flags:?}: {stderr}");
    }
}

/// Issue 25: `--base-url` is checked as the manifest's `base_url` is, and a
/// duration flag reads durations as the manifest does: both are usage
/// errors that quote the value and show the form.
#[test]
fn a_bad_base_url_or_duration_flag_is_a_usage_error_that_shows_the_form() {
    let dir = scripted_manifest("http://127.0.0.1:9/v1");
    let config = dir.path().join("toolhost.toml").display().to_string();
    for (args, expected) in [
        (
            vec![
                "run",
                "--config",
                &config,
                "--base-url",
                "127.0.0.1:8080/v1",
                "go",
            ],
            "\"127.0.0.1:8080/v1\" must start with http:// or https://",
        ),
        (
            vec!["run", "--config", &config, "--base-url", "http://", "go"],
            "\"http://\" is not a URL",
        ),
        (
            vec!["serve", "--config", EXAMPLES, "--stdio", "--drain", "soon"],
            "\"soon\" is not a duration",
        ),
    ] {
        let output = toolhost(&args, None);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(stderr.contains("e.g. \""), "{args:?}: {stderr}");
    }
}

/// Issue 25: the library names its own settings in the fixes it reports,
/// and the binary spells each as the flag its users pass: the step budget
/// (`--max-steps`) and calls that need approval (`--yes`), in `run` and in
/// `call`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_spells_the_fixes_as_its_flags() {
    use crate::agent::{model_server, oa_calls};
    let call = ("c1", "calc", r#"{"expression":"6*7"}"#);
    let (base_url, _script) = model_server(vec![oa_calls(&[call]), oa_calls(&[call])]).await;
    let dir = scripted_manifest(&base_url);
    let config = dir.path().join("toolhost.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    // calc, the first tool, asks approval for every call.
    let text = text.replacen("calc.wasm\"\n", "calc.wasm\"\napproval = \"always\"\n", 1);
    std::fs::write(&config, text).unwrap();
    let config = config.display().to_string();
    let run = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            toolhost(
                &[
                    "run",
                    "--config",
                    &config,
                    "--json",
                    "--max-steps",
                    "1",
                    "go",
                ],
                None,
            )
        })
        .await
        .unwrap()
    };
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("raise max_steps in [model] or pass --max-steps"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "needs a person's approval and nobody could be asked; the operator can pass --yes"
        ),
        "{stdout}"
    );
    let called = toolhost(
        &[
            "call",
            "--config",
            &config,
            "calc",
            r#"{"expression":"6*7"}"#,
        ],
        None,
    );
    let stdout = String::from_utf8_lossy(&called.stdout);
    assert!(called.status.success(), "{stdout}");
    assert!(stdout.contains("denied_by_user"), "{stdout}");
    assert!(stdout.contains("the operator can pass --yes"), "{stdout}");
}

#[test]
fn a_reader_that_goes_away_is_no_panic() {
    // `toolhost check | head -1`: the reader is gone before the output is
    // written. The command still ends as it would, quietly.
    for args in [
        ["check", "--config", EXAMPLES],
        ["tools", "--config", EXAMPLES],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .args(args)
            .current_dir(root())
            .env("TOOLHOST_CACHE_DIR", root().join("target/test-cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            output.status.success(),
            "{args:?}: {:?}\n{stderr}",
            output.status
        );
    }
}

/// `toolhost call --config MANIFEST calc 6*7` with `env` set and `unset`
/// removed (nothing else of the test cache): its output.
fn call_calc(
    manifest: &std::path::Path,
    env: &[(&str, &std::path::Path)],
    unset: &[&str],
) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost"));
    command
        .args(["call", "--config"])
        .arg(manifest)
        .args(["calc", r#"{"expression":"6*7"}"#])
        .current_dir(root())
        .env("RUST_LOG", "warn")
        .env_remove("TOOLHOST_CACHE_DIR");
    for (name, value) in env {
        command.env(name, value);
    }
    for name in unset {
        command.env_remove(name);
    }
    command.output().expect("the toolhost binary runs")
}

/// A manifest with calc, by absolute path, in a directory of its own.
fn calc_manifest() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("toolhost.toml");
    let calc = root().join("target/tools/calc.wasm");
    std::fs::write(
        &manifest,
        format!("[[tool]]\ncomponent = '{}'\n", calc.display()),
    )
    .unwrap();
    (dir, manifest)
}

/// Issue 29: a compile says so on stderr, once, and stdout carries only
/// the answer; a warm cache says nothing.
#[test]
fn compiling_is_said_on_stderr_on_a_cold_cache_only() {
    let (_dir, manifest) = calc_manifest();
    let cache = tempfile::tempdir().unwrap();
    let env = [("TOOLHOST_CACHE_DIR", cache.path())];
    let cold = call_calc(&manifest, &env, &[]);
    let stderr = String::from_utf8_lossy(&cold.stderr);
    assert_eq!(
        stderr
            .matches("toolhost: compiling calc.wasm (first run, about ")
            .count(),
        1,
        "stderr: {stderr}"
    );
    assert_eq!(stdout_json(&cold)["content"], "42");
    let warm = call_calc(&manifest, &env, &[]);
    let stderr = String::from_utf8_lossy(&warm.stderr);
    assert!(!stderr.contains("compiling"), "stderr: {stderr}");
    assert_eq!(warm.stdout, cold.stdout);
}

/// Issue 29: without HOME (nor XDG_CACHE_HOME, nor TOOLHOST_CACHE_DIR),
/// as some MCP clients start servers, compiled code is cached in a
/// private directory beside the manifest, and the second start compiles
/// nothing.
#[test]
fn without_home_the_cache_is_kept_beside_the_manifest() {
    use std::os::unix::fs::PermissionsExt as _;
    let (dir, manifest) = calc_manifest();
    let unset = ["HOME", "XDG_CACHE_HOME"];
    let first = call_calc(&manifest, &[], &unset);
    assert_eq!(stdout_json(&first)["content"], "42");
    assert!(String::from_utf8_lossy(&first.stderr).contains("compiling calc.wasm (first run"));
    let beside = dir.path().join(toolhost::BESIDE_MANIFEST);
    let mode = std::fs::metadata(&beside).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{}", beside.display());
    let second = call_calc(&manifest, &[], &unset);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!stderr.contains("compiling"), "stderr: {stderr}");
    assert_eq!(stdout_json(&second)["content"], "42");
}

/// With `--no-cache` every run compiles, and says why.
#[test]
fn without_a_cache_every_run_says_it_compiles() {
    let (_dir, manifest) = calc_manifest();
    let output = Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .args(["--no-cache", "call", "--config"])
        .arg(&manifest)
        .args(["calc", r#"{"expression":"1+1"}"#])
        .current_dir(root())
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("toolhost: compiling calc.wasm (no compile cache, about "),
        "stderr: {stderr}"
    );
    assert_eq!(stdout_json(&output)["content"], "2");
}
