//! Contract 0.2 between a running call and the application: injected
//! context, progress reports, questions to the person, and content blocks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::json;
use toolhost::dispatcher::CallEnv;
use toolhost::grants::Grants;
use toolhost::observe::{Answer, Asker, CallObserver, LogLevel, Progress, Question};
use toolhost::outcome::{ContentBlock, ErrorType};
use toolhost::wire::results::{Format, render};
use toolhost::{ComponentConfig, ToolCall};

use crate::util::{component, err, host, message, ok, probe_host, quick_limits};

fn call(tool: &str, args: serde_json::Value) -> ToolCall {
    ToolCall::new("call_1", tool, args)
}

#[tokio::test]
async fn injected_context_reaches_the_tool_and_only_from_the_application() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let env = CallEnv::default().context(json!({"user": "ada", "tenant": 7}));
    let seen = host.call_in(call("injected", json!({})), &env).await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&ok(&seen)).unwrap(),
        json!({"user": "ada", "tenant": 7})
    );
    let none = host
        .call_in(call("injected", json!({})), &CallEnv::default())
        .await;
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
    let env = CallEnv::default().observer(recorder.clone());
    ok(&host
        .call_in(call("report_progress", json!({"n": 3})), &env)
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
    let env = CallEnv::default().asker(asker.clone());
    let outcome = host
        .call_in(
            call("ask_confirm", json!({"question": "Go?\u{1b}[2J"})),
            &env,
        )
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
        let env = CallEnv::default().asker(asker.clone());
        let outcome = host
            .call_in(call("ask_cacheable", json!({"question": "Go?"})), &env)
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
        let env = CallEnv::default().asker(Scripted::new(answer));
        let outcome = host
            .call_in(call("ask_confirm", json!({"question": "Go?"})), &env)
            .await;
        assert_eq!(err(&outcome), ErrorType::ToolError);
        assert_eq!(outcome.result.unwrap_err().tool_kind.as_deref(), Some(kind));
    }
}

#[tokio::test]
async fn with_nobody_to_ask_a_question_is_refused_at_once() {
    let mut limits = quick_limits();
    limits.timeout = Duration::from_secs(30);
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
    let mut limits = quick_limits();
    limits.timeout = Duration::from_millis(500);
    let host = probe_host(Grants::none(), limits).await;
    let asker = Arc::new(Scripted {
        answer: Answer::Accepted(json!({"confirm": false})),
        delay: Duration::from_millis(1500),
        asked: Mutex::default(),
    });
    let env = CallEnv::default().asker(asker);
    let outcome = host
        .call_in(call("ask_confirm", json!({"question": "Slowly?"})), &env)
        .await;
    assert_eq!(ok(&outcome), "confirm=false");
    // Without a question the clock runs as always.
    let slow = host.call_in(call("sleep", json!({"n": 1500})), &env).await;
    assert_eq!(err(&slow), ErrorType::Timeout);
}

#[tokio::test]
async fn an_answer_never_grants_a_capability() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let env = CallEnv::default().asker(Scripted::new(Answer::Accepted(json!({"confirm": true}))));
    let outcome = host
        .call_in(
            call(
                "ask_confirm",
                json!({"question": "May I open the store 'secrets'?", "then_open": "secrets"}),
            ),
            &env,
        )
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
    let env = CallEnv::default().asker(Scripted::new(Answer::Accepted(json!({"confirm": "yes"}))));
    let outcome = host
        .call_in(call("ask_confirm", json!({"question": "Go?"})), &env)
        .await;
    assert!(
        message(&outcome).contains("did not fit the schema"),
        "{}",
        message(&outcome)
    );
    let asker = Scripted::new(Answer::Accepted(json!({})));
    let env = CallEnv::default().asker(asker.clone());
    let badly = host.call_in(call("ask_badly", json!({})), &env).await;
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
        .call(call(
            "media",
            json!({"size": toolhost::sandbox::MAX_MEDIA + 1}),
        ))
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

#[tokio::test]
async fn components_built_against_contract_0_1_load_and_run_unchanged() {
    let host = host(vec![
        ComponentConfig::new(component("probe-v0_1"))
            .grants(Grants::none().config("suffix", "!", false)),
        ComponentConfig::new(component("probe")),
    ])
    .await;
    let versions: Vec<_> = host.contract_versions().map(|(_, v)| v).collect();
    assert_eq!(versions, ["0.1.0", "0.2.0"]);
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
