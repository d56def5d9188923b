//! Contract 0.2 between a running call and the application: injected
//! context, progress reports, questions to the person, and content blocks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use toolhost::CallOptions;
use toolhost::Grants;
use toolhost::wire::results::{Format, render};
use toolhost::{Answer, Asker, CallObserver, LogLevel, Progress, Question};
use toolhost::{ComponentConfig, ToolCall};
use toolhost::{ContentBlock, ErrorType};

use crate::util::{component, err, host, message, ok, probe_host, quick_limits};

fn call(tool: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new("call_1", tool, args)
}

#[tokio::test]
async fn injected_context_reaches_the_tool_and_only_from_the_application() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let env = CallOptions::default().context(json!({"user": "ada", "tenant": 7}));
    let seen = host.call(call("injected", json!({}))).options(&env).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&ok(&seen)).unwrap(),
        json!({"user": "ada", "tenant": 7})
    );
    let none = host.call(call("injected", json!({}))).await;
    assert_eq!(ok(&none), "(none)");
    // The model sees no context in the tool's definition.
    let spec = host.spec("injected").unwrap();
    assert!(
        !spec.input_schema.to_string().contains("context"),
        "{}",
        spec.input_schema
    );
}

/// Records what a call reports.
#[derive(Debug, Default)]
struct Recorder {
    progress: Mutex<Vec<Progress>>,
}

impl CallObserver for Recorder {
    fn wants(&self, _: LogLevel) -> bool {
        false
    }
    fn log(&self, _: LogLevel, _: &str) {}
    fn progress(&self, progress: &Progress) {
        self.progress.lock().unwrap().push(progress.clone());
    }
}

#[tokio::test]
async fn progress_reaches_the_observer_growing_and_tagged_with_the_call() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let recorder = Arc::new(Recorder::default());
    let env = CallOptions::default().observer(recorder.clone());
    ok(&host
        .call(call("report_progress", json!({"n": 3})))
        .options(&env)
        .await);
    let reports = recorder.progress.lock().unwrap().clone();
    let done: Vec<f64> = reports.iter().map(|p| p.done).collect();
    assert_eq!(
        done,
        [0.0, 1.0, 2.0, 3.0],
        "the report that went backwards is dropped"
    );
    assert!(
        reports
            .iter()
            .all(|p| p.total == Some(3.0) && p.call_id == "call_1" && p.tool == "report_progress")
    );
    assert_eq!(reports[2].message.as_deref(), Some("step 2"));
    // Without an observer the tool runs the same.
    ok(&host.call(call("report_progress", json!({"n": 3}))).await);
}

/// Answers every question with `answer`, after `delay`, and keeps them.
struct Scripted {
    answer: Answer,
    delay: Duration,
    asked: Mutex<Vec<Question>>,
}

impl Scripted {
    fn new(answer: Answer) -> Arc<Self> {
        Arc::new(Self {
            answer,
            delay: Duration::ZERO,
            asked: Mutex::default(),
        })
    }
}

impl Asker for Scripted {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        self.asked.lock().unwrap().push(question.clone());
        Box::pin(async move {
            tokio::time::sleep(self.delay).await;
            self.answer.clone()
        })
    }
}

#[tokio::test]
async fn a_tool_asks_and_gets_the_persons_answer() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let asker = Scripted::new(Answer::Accepted(json!({"confirm": true})));
    let env = CallOptions::default().asker(asker.clone());
    let outcome = host
        .call(call("ask_confirm", json!({"question": "Go?\u{1b}[2J"})))
        .options(&env)
        .await;
    assert_eq!(ok(&outcome), "confirm=true");
    let asked = asker.asked.lock().unwrap();
    assert_eq!(
        asked[0].message, "Go?[2J",
        "control characters never reach the person"
    );
    assert_eq!(asked[0].tool, "ask_confirm");
    assert_eq!(asked[0].schema["properties"]["confirm"]["type"], "boolean");
}

#[tokio::test]
async fn a_result_a_person_had_a_say_in_is_never_cached() {
    let host = host(vec![
        ComponentConfig::new(component("probe"))
            .limits(quick_limits())
            .cache(Duration::from_secs(60)),
    ])
    .await;
    for answer in [true, false] {
        let asker = Scripted::new(Answer::Accepted(json!({"confirm": answer})));
        let env = CallOptions::default().asker(asker.clone());
        let outcome = host
            .call(call("ask_cacheable", json!({"question": "Go?"})))
            .options(&env)
            .await;
        assert_eq!(ok(&outcome), format!("confirm={answer}"));
        assert!(
            !outcome.stats.cached,
            "asked again, not answered from the cache"
        );
        assert_eq!(outcome.stats.questions, 1);
        assert_eq!(asker.asked.lock().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn declined_and_cancelled_questions_are_typed_refusals() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    for (answer, kind) in [
        (Answer::Declined, "declined"),
        (Answer::Cancelled, "cancelled"),
    ] {
        let env = CallOptions::default().asker(Scripted::new(answer));
        let outcome = host
            .call(call("ask_confirm", json!({"question": "Go?"})))
            .options(&env)
            .await;
        assert_eq!(err(&outcome), ErrorType::ToolError);
        assert_eq!(outcome.result.unwrap_err().tool_kind.as_deref(), Some(kind));
    }
}

#[tokio::test]
async fn with_nobody_to_ask_a_question_is_refused_at_once() {
    let limits = quick_limits()
        .with_timeout(Duration::from_secs(30))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    // The default environment: nobody can be asked. The call must end in a
    // refusal long before its own 30 s timeout, never hang.
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        host.call(call("ask_confirm", json!({"question": "Anyone?"}))),
    )
    .await
    .expect("a question with nobody to ask is refused, not left waiting");
    assert_eq!(
        outcome.result.as_ref().unwrap_err().tool_kind.as_deref(),
        Some("unavailable")
    );
    assert!(
        message(&outcome).contains("nobody can be asked"),
        "{}",
        message(&outcome)
    );
}

#[tokio::test]
async fn waiting_for_an_answer_does_not_count_against_the_timeout() {
    let limits = quick_limits()
        .with_timeout(Duration::from_millis(500))
        .unwrap();
    let host = probe_host(Grants::none(), limits).await;
    let asker = Arc::new(Scripted {
        answer: Answer::Accepted(json!({"confirm": false})),
        delay: Duration::from_millis(1500),
        asked: Mutex::default(),
    });
    let env = CallOptions::default().asker(asker);
    let outcome = host
        .call(call("ask_confirm", json!({"question": "Slowly?"})))
        .options(&env)
        .await;
    assert_eq!(ok(&outcome), "confirm=false");
    // Nor against the check of its structured output, made after the wait.
    let structured = host
        .call(call("ask_structured", json!({"question": "Slowly?"})))
        .options(&env)
        .await;
    assert!(
        structured.result.is_ok(),
        "the output check must not time out: {structured:?}"
    );
    assert_eq!(
        structured.result.unwrap().structured,
        Some(json!({"port": 1, "name": "confirm=false"}))
    );
    // Without a question the clock runs as always.
    let slow = host
        .call(call("sleep", json!({"n": 1500})))
        .options(&env)
        .await;
    assert_eq!(err(&slow), ErrorType::Timeout);
}

#[tokio::test]
async fn an_answer_never_grants_a_capability() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let env =
        CallOptions::default().asker(Scripted::new(Answer::Accepted(json!({"confirm": true}))));
    let outcome = host
        .call(call(
            "ask_confirm",
            json!({"question": "May I open the store 'secrets'?", "then_open": "secrets"}),
        ))
        .options(&env)
        .await;
    assert_eq!(err(&outcome), ErrorType::CapabilityDenied);
    assert!(
        message(&outcome).contains("stores = [\"secrets\"]"),
        "{}",
        message(&outcome)
    );
}

#[tokio::test]
async fn answers_that_break_the_schema_and_schemas_no_client_can_show_are_refused() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let env =
        CallOptions::default().asker(Scripted::new(Answer::Accepted(json!({"confirm": "yes"}))));
    let outcome = host
        .call(call("ask_confirm", json!({"question": "Go?"})))
        .options(&env)
        .await;
    assert!(
        message(&outcome).contains("did not fit the schema"),
        "{}",
        message(&outcome)
    );
    let asker = Scripted::new(Answer::Accepted(json!({})));
    let env = CallOptions::default().asker(asker.clone());
    let badly = host.call(call("ask_badly", json!({}))).options(&env).await;
    assert!(
        ok(&badly).contains("InvalidQuestion: the answer schema must be an object schema"),
        "{}",
        ok(&badly)
    );
    assert!(
        asker.asked.lock().unwrap().is_empty(),
        "a bad question never reaches the person"
    );
}

#[tokio::test]
async fn content_blocks_keep_their_order_and_map_to_each_format() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let outcome = host.call(call("media", json!({"size": 64}))).await;
    let output = outcome.result.as_ref().expect("success");
    assert!(matches!(&output.content[0], ContentBlock::Text(t) if t == "a picture"));
    assert!(
        matches!(&output.content[1], ContentBlock::Image(m) if m.mime_type == "image/png" && m.data.len() == 64)
    );
    assert!(
        matches!(&output.content[2], ContentBlock::ResourceLink(l) if l.uri == "https://example.org/r")
    );
    let mcp = render(&outcome, None, Format::Mcp);
    assert_eq!(mcp["content"][1]["type"], "image");
    assert_eq!(mcp["content"][2]["type"], "resource_link");
    let anthropic = render(&outcome, None, Format::Anthropic);
    assert_eq!(anthropic["content"][1]["source"]["media_type"], "image/png");
    let message = render(&outcome, None, Format::ToolMessage);
    assert_eq!(message["content"][1]["type"], "image");
}

#[tokio::test]
async fn an_image_carrying_a_secret_is_withheld() {
    let grants = Grants::none().config("secret", "sk-live-0123456789abcdef", true);
    let host = probe_host(grants, quick_limits()).await;
    let outcome = host.call(call("media", json!({"leak": true}))).await;
    let output = outcome.result.as_ref().expect("success");
    assert!(
        output
            .to_text()
            .contains("[image withheld: it contained a secret]"),
        "{:?}",
        output.content
    );
    assert!(
        !output
            .content
            .iter()
            .any(|b| matches!(b, ContentBlock::Image(_)))
    );
    assert!(!format!("{:?}", output.content).contains("0123456789abcdef"));
}

#[tokio::test]
async fn media_past_the_result_limit_is_replaced_by_a_note() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let outcome = host
        .call(call("media", json!({"size": toolhost::MAX_MEDIA + 1})))
        .await;
    // The guest's 32 MiB memory limit may refuse the allocation first;
    // either way nothing past the limit reaches the model.
    match &outcome.result {
        Ok(output) => {
            assert!(
                output.to_text().contains("[image dropped:"),
                "{:?}",
                output.content
            );
            assert!(
                !output
                    .content
                    .iter()
                    .any(|b| matches!(b, ContentBlock::Image(_)))
            );
        }
        Err(e) => assert_eq!(e.kind, ErrorType::MemoryExhausted),
    }
}

/// The host speaks 0.2.1, and components built against 0.1.0 and 0.2.0
/// load and run unchanged beside one built against it. (`probe-v0_2_0` is
/// built against `wit/v0.2.0`, the contract as 0.2.0 published it.)
#[tokio::test]
async fn components_built_against_older_contracts_load_and_run_unchanged() {
    let host = host(vec![
        ComponentConfig::new(component("probe-v0_1"))
            .grants(Grants::none().config("suffix", "!", false)),
        ComponentConfig::new(component("probe")),
        ComponentConfig::new(component("probe-v0_2_0")),
    ])
    .await;
    let versions: Vec<_> = host.contract_versions().map(|(_, v)| v).collect();
    assert_eq!(versions, ["0.1.0", "0.2.1", "0.2.0"]);
    let echoed = host.call(call("echo_0_2_0", json!({"ask": false}))).await;
    assert_eq!(ok(&echoed), r#"{"ask":false}"#);
    // Its `ask` is 0.2.0's, linked to 0.2.1's host: nobody here to ask.
    let asked = host.call(call("echo_0_2_0", json!({"ask": true}))).await;
    assert!(ok(&asked).starts_with("refused: "), "{}", ok(&asked));
    let spec = host.spec("old_echo").unwrap();
    assert_eq!(spec.title, "Old echo", "0.1 has no title: one is derived");
    assert!(spec.hints.read_only);
    let outcome = host.call(call("old_echo", json!({"text": "hi"}))).await;
    assert_eq!(ok(&outcome), r#"{"text":"hi"}!"#);
    assert_eq!(
        outcome.result.as_ref().unwrap().artifact.as_deref(),
        Some("from 0.1")
    );
    let failed = host.call(call("old_echo", json!({"text": "fail"}))).await;
    assert_eq!(
        failed.result.unwrap_err().tool_kind.as_deref(),
        Some("asked_to_fail")
    );
}

// Asking a person safely: what a tool shows a person is masked and
// printable, names and choices are shown as written or refused, a call has
// one budget of questions, and a question an MCP client was shown is
// withdrawn when the call stops waiting for it.

const SECRET: &str = "sk-live-0123456789abcdef";

fn secret_grants() -> Grants {
    Grants::none().config("secret", SECRET, true)
}

fn ask_json(question: &str, schema: &serde_json::Value) -> ToolCall {
    call(
        "ask_json",
        json!({"question": question, "schema": schema.to_string()}),
    )
}

#[tokio::test]
async fn a_question_reaches_the_person_masked_printable_and_with_a_form_made_safe() {
    let host = probe_host(secret_grants(), quick_limits()).await;
    let asker = Scripted::new(Answer::Accepted(json!({"pick": "keep", "note": "x"})));
    let env = CallOptions::default().asker(asker.clone());
    let schema = json!({"type": "object", "properties": {
        "pick": {"type": "string", "title": format!("Key {SECRET}"),
                 "description": "Choose\u{202e}txt.exe",
                 "oneOf": [{"const": "keep", "title": "Keep\u{200b}"}, {"const": "wipe", "title": "Wipe"}]},
        "note": {"type": "string", "default": format!("{SECRET}\u{e0041}"), "x-leak": SECRET}},
        "$comment": SECRET});
    let question = format!("Use {SECRET}?\u{1b}[2J\u{e0041}\u{e0042}\nReally?");
    let outcome = host.call(ask_json(&question, &schema)).options(&env).await;
    assert_eq!(ok(&outcome), r#"answer: {"note":"x","pick":"keep"}"#);
    let asked = asker.asked.lock().unwrap();
    assert_eq!(asked[0].message, "Use [redacted]?[2J\nReally?");
    assert_eq!(
        asked[0].schema,
        json!({"type": "object", "properties": {
            "pick": {"type": "string", "title": "Key [redacted]", "description": "Choosetxt.exe",
                     "oneOf": [{"const": "keep", "title": "Keep"}, {"const": "wipe", "title": "Wipe"}]},
            "note": {"type": "string", "default": "[redacted]"}}})
    );
}

#[tokio::test]
async fn a_name_or_choice_not_shown_as_written_is_refused_before_anyone_is_asked() {
    let host = probe_host(secret_grants(), quick_limits()).await;
    let asker = Scripted::new(Answer::Accepted(json!({})));
    let env = CallOptions::default().asker(asker.clone());
    for (schema, expected) in [
        (
            json!({"type": "object", "properties": {
                "pick": {"type": "string", "enum": ["keep", "wipe\u{200b}"]}}}),
            r#"InvalidQuestion: property "pick": the choice "wipe\u200b" would not be shown as written"#,
        ),
        (
            json!({"type": "object", "properties": {"ok\u{202e}": {"type": "boolean"}}}),
            r#"InvalidQuestion: the property name "ok\u202e" would not be shown as written"#,
        ),
        (
            json!({"type": "object", "properties": {
                "pick": {"type": "string", "oneOf": [{"const": SECRET}, {"const": "no"}]}}}),
            r#"InvalidQuestion: property "pick": the choice "[redacted]" holds a secret"#,
        ),
        (
            json!({"type": "object", "properties": {
                "pick": {"type": "string", "oneOf": [{"const": "keep", "title": "Keep"},
                                                     {"const": "wipe", "title": "keep\u{2060}"}]}}}),
            r#"InvalidQuestion: property "pick": two choices would look the same to the person"#,
        ),
    ] {
        let outcome = host.call(ask_json("Go?", &schema)).options(&env).await;
        assert!(ok(&outcome).contains(expected), "{}", ok(&outcome));
        assert!(!ok(&outcome).contains(SECRET));
    }
    assert!(asker.asked.lock().unwrap().is_empty(), "nobody was asked");
}

#[tokio::test]
async fn a_call_asks_at_most_eight_questions() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let asker = Scripted::new(Answer::Accepted(json!({"ok": true})));
    let env = CallOptions::default().asker(asker.clone());
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    let outcome = host
        .call(call(
            "ask_json",
            json!({"question": "Again?", "schema": schema.to_string(), "times": 9}),
        ))
        .options(&env)
        .await;
    let lines: Vec<String> = ok(&outcome).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 9);
    assert!(
        lines[..8].iter().all(|l| l == r#"answer: {"ok":true}"#),
        "{lines:?}"
    );
    assert!(
        lines[8].ends_with("InvalidQuestion: a call may ask at most 8 questions"),
        "{lines:?}"
    );
    assert_eq!(outcome.stats.questions, 8);
    assert_eq!(asker.asked.lock().unwrap().len(), 8);
}

/// `toolhost replay`'s display of a transcript whose tool and model text
/// tries to pose as the host's prompts.
#[test]
fn the_display_shows_tool_and_model_text_on_lines_of_its_own() {
    let forged = "\n? run calc with {}? [y/N] ";
    let events = [
        json!({"type": "tool_call_started", "id": "c", "name": "calc",
               "arguments": json!({"x": format!("a\u{202e}b{forged}")}).to_string()}),
        json!({"type": "tool_progress", "id": "c", "name": "calc", "done": 1, "total": null,
               "message": forged}),
        json!({"type": "tool_result", "duration_ms": 1.0,
               "message": {"name": "calc",
                           "content": "\u{1b}[2Jok\u{2028}? run calc with {}? [y/N] \nsecond line"}}),
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.jsonl");
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
        .arg("replay")
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let shown = String::from_utf8(output.stdout).unwrap();
    // The forged prompt appears only inside the host's own lines.
    for line in shown.lines().filter(|l| l.contains("run calc")) {
        assert!(
            ["→ calc ", "  … calc ", "← calc "]
                .iter()
                .any(|own| line.starts_with(own)),
            "{line:?} could pass for a prompt\n{shown}"
        );
    }
    assert_eq!(
        shown.lines().filter(|l| l.contains("run calc")).count(),
        3,
        "{shown}"
    );
    assert!(
        !shown
            .chars()
            .any(|c| (c.is_control() && c != '\n') || toolhost::printable::is_hidden(c)),
        "{shown:?}"
    );
    assert!(shown.contains(r"a\u202eb\n? run calc"), "{shown}");
    assert!(
        shown.contains("  … calc 1 ⏎? run calc with {}? [y/N]"),
        "{shown}"
    );
}

/// `toolhost serve --stdio` with an MCP client of 2025-11-25 that answers
/// elicitation: JSON-RPC lines in, lines out.
struct McpClient {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
    /// Messages read while waiting for another.
    backlog: Vec<serde_json::Value>,
    _dir: tempfile::TempDir,
}

impl McpClient {
    /// Serve the probe (whose `secret` config value is [`SECRET`]) with
    /// `extra` added to its manifest entry, and initialize.
    fn start(extra: &str) -> Self {
        use std::io::BufRead as _;
        use std::process::Stdio;
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("toolhost.toml");
        std::fs::write(
            &manifest,
            format!(
                "[[tool]]\ncomponent = '{}'\nconfig = {{ secret = {{ env = \"PROBE_SECRET\" }} }}\n{extra}\n",
                component("probe").display()
            ),
        )
        .unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .arg("--config")
            .arg(&manifest)
            .args(["serve", "--stdio"])
            .env(
                "TOOLHOST_CACHE_DIR",
                crate::util::root().join("target/test-cache"),
            )
            .env("RUST_LOG", "warn")
            .env("PROBE_SECRET", SECRET)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the toolhost binary runs");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut client = Self {
            child,
            stdin,
            lines,
            backlog: Vec::new(),
            _dir: dir,
        };
        client.send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "toolhost-tests", "version": "1"}}}),
        );
        client.next("the answer to initialize", |m| m["id"] == 1);
        client.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        client
    }

    fn send(&mut self, message: &serde_json::Value) {
        use std::io::Write as _;
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The first message `matches` accepts (from those read while waiting
    /// for others, then new ones), within 60 s.
    fn next(
        &mut self,
        what: &str,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        if let Some(at) = self.backlog.iter().position(&matches) {
            return self.backlog.remove(at);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what}; the server sent {:#?}", self.backlog));
            let message: serde_json::Value = serde_json::from_str(&line).unwrap();
            if matches(&message) {
                return message;
            }
            self.backlog.push(message);
        }
    }

    /// The next `elicitation/create` request.
    fn elicitation(&mut self) -> serde_json::Value {
        self.next("elicitation/create", |m| {
            m["method"] == "elicitation/create"
        })
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_mcp_client_gets_the_question_made_safe_and_progress_on_one_line() {
    let mut client = McpClient::start("");
    let schema = json!({"type": "object", "properties": {
        "ok": {"type": "boolean", "title": format!("Use {SECRET}\u{200b}?"),
               "description": "evil\u{202e}txt.exe"}}, "$comment": SECRET});
    client.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "ask_json", "_meta": {"progressToken": "p"},
        "arguments": {"question": format!("Use {SECRET}?\u{1b}[2J\u{e0041}\nReally?"),
                      "schema": schema.to_string(),
                      "progress": format!("step\n? run calc with {{}}? [y/N] {SECRET}")}}}),
    );
    let progress = client.next("progress", |m| m["method"] == "notifications/progress");
    assert_eq!(
        progress["params"]["message"],
        "step⏎? run calc with {}? [y/N] [redacted]"
    );
    let asked = client.elicitation();
    assert_eq!(
        asked["params"]["message"],
        "The tool 'ask_json' asks: Use [redacted]?[2J\nReally?"
    );
    assert_eq!(
        asked["params"]["requestedSchema"],
        json!({"type": "object", "properties": {
            "ok": {"type": "boolean", "title": "Use [redacted]?", "description": "eviltxt.exe"}}})
    );
    assert!(!asked.to_string().contains("0123456789"), "{asked}");
    client.send(&json!({"jsonrpc": "2.0", "id": asked["id"],
                        "result": {"action": "accept", "content": {"ok": true}}}));
    let result = client.next("the call's result", |m| m["id"] == 2);
    assert_eq!(
        result["result"]["content"][0]["text"], r#"answer: {"ok":true}"#,
        "{result}"
    );
}

#[test]
fn a_question_whose_call_is_cancelled_is_withdrawn_from_the_mcp_client() {
    let mut client = McpClient::start("");
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    client.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "ask_json", "arguments": {"question": "Go?", "schema": schema.to_string()}}}),
    );
    let asked = client.elicitation();
    client.send(
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 2, "reason": "the user moved on"}}),
    );
    let withdrawn = client.next("the question withdrawn", |m| {
        m["method"] == "notifications/cancelled" && m["params"]["requestId"] == asked["id"]
    });
    assert!(
        withdrawn["params"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("withdrawn")),
        "{withdrawn}"
    );
}

#[test]
fn an_mcp_approval_shows_the_arguments_exactly_with_nothing_invisible() {
    let mut client = McpClient::start("approval = \"always\"");
    let text = "hi\u{202e}\n? [y/N] \u{200b}";
    client.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": text, "times": 1}}}),
    );
    let asked = client.elicitation();
    let message = asked["params"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"Arguments: {"text":"hi\u202e\n? [y/N] \u200b","times":1}"#)
            || message.contains(r#"Arguments: {"times":1,"text":"hi\u202e\n? [y/N] \u200b"}"#),
        "{message}"
    );
    assert!(
        !message
            .chars()
            .any(|c| c.is_control() || toolhost::printable::is_hidden(c)),
        "{message:?}"
    );
    client.send(&json!({"jsonrpc": "2.0", "id": asked["id"],
                        "result": {"action": "accept", "content": {"approve": true}}}));
    let result = client.next("the call's result", |m| m["id"] == 2);
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert_eq!(result["result"]["content"][0]["text"], text, "{result}");
}

/// `toolhost run` as a chat over a pipe: the messages were all written
/// before the first prompt, and the one stdin reader, started at that
/// prompt, gives each chat prompt the next of them (typed-ahead lines are
/// discarded only before a prompt for an answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_over_a_pipe_reads_each_message_in_turn() {
    use std::io::Write as _;
    use std::process::Stdio;

    use crate::agent::{model_server, oa_text};
    let (base_url, script) =
        model_server(vec![oa_text("first answer"), oa_text("second answer")]).await;
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(
        &manifest,
        format!(
            "[model]\nbase_url = {base_url:?}\nmodel = \"scripted\"\nstream = false\n\n[[tool]]\ncomponent = {:?}\n",
            component("probe")
        ),
    )
    .unwrap();
    let output = tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toolhost"))
            .arg("--config")
            .arg(&manifest)
            .arg("run")
            .env(
                "TOOLHOST_CACHE_DIR",
                crate::util::root().join("target/test-cache"),
            )
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the toolhost binary runs");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"hello\nand again\n/exit\n").unwrap();
        drop(stdin);
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stdout.contains("first answer") && stdout.contains("second answer"),
        "{stdout}"
    );
    let asked: Vec<String> = script
        .bodies()
        .iter()
        .map(|body| body["messages"].to_string())
        .collect();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[1].contains("and again"), "{asked:?}");
    assert_eq!(stderr.matches("you> ").count(), 3, "{stderr}");
}
