//! The agent loop against a scripted model server on 127.0.0.1 that speaks
//! the real OpenAI and Anthropic wire formats, streaming and not. Each test
//! scripts the server's answers turn by turn and checks exactly what was sent
//! back to the model.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use toolhost::Approval;
use toolhost::agent::{Agent, AgentEvent, AgentPolicy, RunEnd, Transcript};
use toolhost::model::config::{LoopControls, Provider};
use toolhost::model::{
    AnthropicClient, ClientSettings, Message, ModelClient, OpenAIClient, OpenAIResponsesClient,
};
use toolhost::{ApproveAll, Approver, ComponentConfig, RefuseAll, ToolHost};

use crate::util::*;

/// One scripted answer of the model server.
#[derive(Clone)]
pub(crate) enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// 200 with these server-sent events (`(event name, data)`).
    Events(Vec<(&'static str, String)>),
    /// These events, then the connection breaks mid-body.
    Cut(Vec<(&'static str, String)>),
    /// An error status, with `Retry-After` seconds if given.
    Status(u16, Option<u32>),
    /// No answer for a minute.
    Hang,
    /// A temporary redirect to this URL.
    Redirect(String),
}

#[derive(Default)]
pub(crate) struct Script {
    replies: Mutex<VecDeque<Reply>>,
    requests: Mutex<Vec<(HeaderMap, Value)>>,
}

impl Script {
    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .map(|(_, body)| body.clone())
            .collect()
    }
}

async fn answer(
    State(script): State<Arc<Script>>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    script.requests.lock().unwrap().push((headers, body.0));
    let reply = script
        .replies
        .lock()
        .unwrap()
        .pop_front()
        .expect("the test scripted enough replies");
    let sse = |events: Vec<(&'static str, String)>| {
        events
            .into_iter()
            .map(|(name, data)| {
                if name.is_empty() {
                    format!("data: {data}\n\n")
                } else {
                    format!("event: {name}\ndata: {data}\n\n")
                }
            })
            .collect::<Vec<_>>()
    };
    match reply {
        Reply::Json(value) => axum::Json(value).into_response(),
        Reply::Events(events) => (
            [("content-type", "text/event-stream")],
            sse(events).concat(),
        )
            .into_response(),
        Reply::Cut(events) => {
            let chunks = sse(events).into_iter().map(Ok::<_, std::io::Error>);
            // Pause so the head and first chunks are on the wire, then break.
            let broken = futures::stream::iter(chunks).chain(futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err(std::io::Error::other("connection cut by the test"))
            }));
            (
                [("content-type", "text/event-stream")],
                Body::from_stream(broken),
            )
                .into_response()
        }
        Reply::Status(code, retry_after) => {
            let mut response = (
                StatusCode::from_u16(code).unwrap(),
                format!("{{\"error\":\"scripted {code}\"}}"),
            )
                .into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", seconds.to_string().parse().unwrap());
            }
            response
        }
        Reply::Redirect(location) => {
            (StatusCode::TEMPORARY_REDIRECT, [("location", location)]).into_response()
        }
        Reply::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
    }
}

use futures::StreamExt as _;

/// A scripted model server; returns its base URL and the script.
pub(crate) async fn model_server(replies: Vec<Reply>) -> (String, Arc<Script>) {
    let script = Arc::new(Script {
        replies: Mutex::new(replies.into()),
        ..Script::default()
    });
    let router = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(answer))
        .route("/v1/messages", axum::routing::post(answer))
        .route("/v1/responses", axum::routing::post(answer))
        .with_state(script.clone());
    let server = serve(router).await;
    (format!("http://{}/v1", server.addr), script)
}

pub(crate) fn settings(base_url: &str, stream: bool) -> ClientSettings {
    ClientSettings {
        base_url: base_url.parse().unwrap(),
        model: "scripted".into(),
        api_key: Some("sk-test-key-1234".into()),
        stream,
        timeout: Duration::from_millis(1500),
    }
}

pub(crate) fn policy() -> AgentPolicy {
    AgentPolicy {
        controls: controls(),
        base_delay: Duration::from_millis(10),
        ..AgentPolicy::default()
    }
}

/// The tests' loop controls: at most five steps.
pub(crate) fn controls() -> LoopControls {
    LoopControls {
        max_steps: 5,
        ..LoopControls::default()
    }
}

/// The tests' policy, with `controls`.
pub(crate) fn policy_of(controls: LoopControls) -> AgentPolicy {
    AgentPolicy {
        controls,
        ..policy()
    }
}

/// The probe and calc components, with short limits.
pub(crate) async fn tools(approval: Approval) -> ToolHost {
    let limits = quick_limits()
        .with_timeout(Duration::from_millis(300))
        .unwrap();
    host(vec![
        ComponentConfig::new(component("probe"))
            .limits(limits)
            .approval(approval),
        ComponentConfig::new(component("calc")),
    ])
    .await
}

async fn run(
    provider: Provider,
    stream: bool,
    replies: Vec<Reply>,
    prompt: &str,
) -> (Transcript, Arc<Script>) {
    run_with(
        provider,
        stream,
        replies,
        prompt,
        Approval::Never,
        Arc::new(RefuseAll),
        policy(),
    )
    .await
}

pub(crate) async fn run_with(
    provider: Provider,
    stream: bool,
    replies: Vec<Reply>,
    prompt: &str,
    approval: Approval,
    approver: Arc<dyn Approver>,
    policy: AgentPolicy,
) -> (Transcript, Arc<Script>) {
    let (base_url, script) = model_server(replies).await;
    let client: Arc<dyn ModelClient> = match provider {
        Provider::OpenAI => Arc::new(OpenAIClient::new(settings(&base_url, stream)).unwrap()),
        Provider::Anthropic => Arc::new(AnthropicClient::new(settings(&base_url, stream)).unwrap()),
        Provider::OpenAIResponses => {
            Arc::new(OpenAIResponsesClient::new(settings(&base_url, stream)).unwrap())
        }
        other => panic!("no test client for {other:?}"),
    };
    let agent = Agent::new(client, tools(approval).await, approver, policy);
    let transcript = agent.run(vec![Message::user(prompt)]).await;
    (transcript, script)
}

// --- OpenAI wire format ---------------------------------------------------

pub(crate) fn oa_calls(calls: &[(&str, &str, &str)]) -> Reply {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
        .collect();
    Reply::Json(
        json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "", "tool_calls": calls}}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20}}),
    )
}

pub(crate) fn oa_text(text: &str) -> Reply {
    Reply::Json(
        json!({"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 150, "completion_tokens": 5}}),
    )
}

pub(crate) fn oa_chunk(delta: Value, finish: Option<&str>) -> (&'static str, String) {
    (
        "",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string(),
    )
}

pub(crate) fn oa_stream_text(text: &str) -> Vec<(&'static str, String)> {
    let mut events: Vec<_> = text
        .split_inclusive(' ')
        .map(|piece| oa_chunk(json!({"content": piece}), None))
        .collect();
    events.push(oa_chunk(json!({}), Some("stop")));
    events.push((
        "",
        json!({"choices": [], "usage": {"prompt_tokens": 150, "completion_tokens": 5}}).to_string(),
    ));
    events.push(("", "[DONE]".into()));
    events
}

pub(crate) fn tool_messages(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_parallel_calls_are_all_answered_in_order_before_the_next_model_call() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![
            oa_calls(&[
                ("call_a", "calc", r#"{"expression": "6*7"}"#),
                ("call_b", "echo", r#"{"text": "hi", "times": 2}"#),
                ("call_c", "panic", "{}"),
            ]),
            oa_text("6*7 is 42."),
        ],
        "compute",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(transcript.final_text, "6*7 is 42.");
    let bodies = script.bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(
        bodies[0]["tools"].as_array().unwrap().len(),
        tools(Approval::Never).await.specs().count(),
        "every tool of the probe and calc"
    );
    let second = &bodies[1]["messages"];
    assert_eq!(second[1]["role"], "assistant");
    assert_eq!(second[1]["content"], Value::Null);
    assert_eq!(second[1]["tool_calls"][2]["function"]["name"], "panic");
    assert_eq!(
        tool_messages(&bodies[1]),
        [
            ("call_a".to_owned(), "42".to_owned()),
            ("call_b".to_owned(), "hihi".to_owned()),
            (
                "call_c".to_owned(),
                "Error: tool 'panic' crashed: panicked".to_owned()
            ),
        ]
    );
    assert_eq!(transcript.usage.input_tokens, 250);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_stream_with_a_reused_index_split_arguments_and_text_in_one_turn() {
    let mut turn = vec![
        oa_chunk(json!({"role": "assistant", "content": "Let me "}), None),
        oa_chunk(json!({"content": "compute."}), None),
    ];
    // Like llama.cpp and some vLLM versions: every call of the batch at index 0.
    for (id, expression) in [("x1", "1+1"), ("x2", "2*3")] {
        turn.push(oa_chunk(json!({"tool_calls": [{"index": 0, "id": id, "type": "function", "function": {"name": "calc", "arguments": "{\n  \"expr"}}]}), None));
        turn.push(oa_chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": format!("ession\": \"{expression}\"\n}}")}}]}), None));
    }
    turn.push(oa_chunk(json!({}), Some("tool_calls")));
    turn.push(("", "[DONE]".into()));
    let (transcript, script) = run(
        Provider::OpenAI,
        true,
        vec![
            Reply::Events(turn),
            Reply::Events(oa_stream_text("2 and 6.")),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.final_text, "2 and 6.");
    let bodies = script.bodies();
    assert_eq!(bodies[0]["stream"], true);
    assert_eq!(bodies[1]["messages"][1]["content"], "Let me compute.");
    assert_eq!(
        tool_messages(&bodies[1]),
        [
            ("x1".to_owned(), "2".to_owned()),
            ("x2".to_owned(), "6".to_owned())
        ]
    );
    let deltas = transcript
        .events
        .iter()
        .filter(|e| matches!(e, AgentEvent::TextDelta { .. }))
        .count();
    assert_eq!(
        deltas, 0,
        "text deltas are streamed to listeners, not kept in the transcript"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_arguments_and_unknown_tools_go_back_to_the_model() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![
            oa_calls(&[
                ("m1", "calc", "{\"expression\": 6*7"),
                ("m2", "echo", r#"{"text": 5}"#),
                ("m3", "weather", "{}"),
            ]),
            oa_calls(&[("m4", "calc", r#"{"expression": "6*7"}"#)]),
            oa_text("42"),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let bodies = script.bodies();
    assert_eq!(
        bodies.len(),
        3,
        "the model was asked again after the bad calls"
    );
    let answers = tool_messages(&bodies[1]);
    assert!(
        answers[0]
            .1
            .starts_with("Error: tool 'calc' got invalid arguments: arguments are not valid JSON"),
        "{}",
        answers[0].1
    );
    assert!(
        answers[1].1.contains("\"times\" is a required property"),
        "{}",
        answers[1].1
    );
    assert!(
        answers[2]
            .1
            .starts_with("Error: tool 'weather' does not exist"),
        "{}",
        answers[2].1
    );
    let fuel: Vec<u64> = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { fuel, .. } => Some(*fuel),
            _ => None,
        })
        .collect();
    assert_eq!(&fuel[..3], [0, 0, 0], "no tool ran for a bad call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_times_out_is_answered_with_the_reason() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![
            oa_calls(&[("t1", "sleep", r#"{"n": 60000}"#)]),
            oa_text("too slow"),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(
        tool_messages(&script.bodies()[1])[0].1,
        "Error: tool 'sleep' timed out after 300ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_retried_with_backoff() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![
            Reply::Status(429, Some(0)),
            Reply::Status(500, None),
            Reply::Status(503, None),
            oa_text("finally"),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(transcript.final_text, "finally");
    assert_eq!(script.bodies().len(), 4);
    let retries: Vec<u32> = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelRetry { attempt, .. } => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(retries, [1, 2, 3]);
    assert!(
        transcript
            .events
            .iter()
            .any(|e| matches!(e, AgentEvent::ModelCall { retries: 3, .. }))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_and_a_hung_endpoint_are_retried() {
    let cut = oa_stream_text("this answer never ends")
        .into_iter()
        .take(2)
        .collect();
    let (transcript, script) = run(
        Provider::OpenAI,
        true,
        vec![
            Reply::Cut(cut),
            Reply::Hang,
            Reply::Events(oa_stream_text("whole answer")),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(transcript.final_text, "whole answer");
    assert_eq!(script.bodies().len(), 3);
    let errors: Vec<String> = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ModelRetry { error, .. } => Some(error.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(errors[0].contains("stream"), "{errors:?}");
    assert!(
        errors[1].contains("timed out") || errors[1].contains("timeout"),
        "{errors:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_that_keeps_failing_ends_the_run_with_its_transcript() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![Reply::Status(503, None); 5],
        "keep this prompt",
    )
    .await;
    assert_eq!(script.bodies().len(), 5, "one try and four retries");
    assert!(
        matches!(&transcript.end, RunEnd::ModelFailed { error } if error.contains("503")),
        "{:?}",
        transcript.end
    );
    assert_eq!(transcript.messages, [Message::user("keep this prompt")]);
    assert!(matches!(
        transcript.events.last(),
        Some(AgentEvent::Finished { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_key_is_not_retried_and_says_where_the_key_comes_from() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![Reply::Status(401, None)],
        "go",
    )
    .await;
    assert_eq!(script.bodies().len(), 1);
    assert!(
        matches!(&transcript.end, RunEnd::ModelFailed { error } if error.contains("api_key_env")),
        "{:?}",
        transcript.end
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_budget_ends_an_endless_tool_loop() {
    let policy = policy_of(LoopControls {
        max_steps: 3,
        ..controls()
    });
    let replies = (0..3)
        .map(|i| oa_calls(&[(&*format!("s{i}"), "counter", "{}")]))
        .collect::<Vec<_>>();
    let (transcript, script) = run_with(
        Provider::OpenAI,
        false,
        replies,
        "loop",
        Approval::Never,
        Arc::new(RefuseAll),
        policy,
    )
    .await;
    assert_eq!(transcript.end, RunEnd::StepBudget);
    assert!(
        transcript.final_text.contains("max_steps = 3"),
        "{}",
        transcript.final_text
    );
    assert_eq!(script.bodies().len(), 3);
    // Every call was answered, the last one too.
    assert!(
        matches!(transcript.messages.last(), Some(Message::Tool { tool_call_id, .. }) if tool_call_id == "s2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_refused_and_granted() {
    let replies = || {
        vec![
            oa_calls(&[
                ("w1", "wipe", "{}"),
                ("e1", "echo", r#"{"text": "x", "times": 1}"#),
            ]),
            oa_text("ok"),
        ]
    };
    let (_, refused) = run_with(
        Provider::OpenAI,
        false,
        replies(),
        "go",
        Approval::Destructive,
        Arc::new(RefuseAll),
        policy(),
    )
    .await;
    let answers = tool_messages(&refused.bodies()[1]);
    assert!(
        answers[0].1.starts_with("Error: tool 'wipe' was not run:"),
        "{}",
        answers[0].1
    );
    assert_eq!(
        answers[1].1, "x",
        "a tool without the destructive hint runs unasked"
    );
    let (_, approved) = run_with(
        Provider::OpenAI,
        false,
        replies(),
        "go",
        Approval::Destructive,
        Arc::new(ApproveAll),
        policy(),
    )
    .await;
    assert_eq!(tool_messages(&approved.bodies()[1])[0].1, "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_key_is_sent_but_never_recorded() {
    let (transcript, script) = run(Provider::OpenAI, false, vec![oa_text("hi")], "go").await;
    let headers = &script.requests.lock().unwrap()[0].0;
    assert_eq!(headers["authorization"], "Bearer sk-test-key-1234");
    let recorded = serde_json::to_string(&transcript).unwrap();
    assert!(!recorded.contains("sk-test-key-1234"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirecting_endpoint_does_not_get_to_send_the_key_elsewhere() {
    let elsewhere = text_server("collecting keys").await;
    let (transcript, script) = run(
        Provider::Anthropic,
        false,
        vec![Reply::Redirect(elsewhere.url("/"))],
        "go",
    )
    .await;
    assert_eq!(script.bodies().len(), 1);
    assert_eq!(elsewhere.hits(), 0, "the redirect was not followed");
    assert!(
        matches!(&transcript.end, RunEnd::ModelFailed { error } if error.contains("307")),
        "{:?}",
        transcript.end
    );
}

// --- Anthropic wire format ------------------------------------------------

pub(crate) fn an_tool_uses(calls: &[(&str, &str, Value)]) -> Reply {
    let mut content = vec![json!({"type": "text", "text": "Using tools."})];
    content.extend(calls.iter().map(
        |(id, name, input)| json!({"type": "tool_use", "id": id, "name": name, "input": input}),
    ));
    Reply::Json(
        json!({"type": "message", "role": "assistant", "content": content, "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 20}}),
    )
}

pub(crate) fn an_text(text: &str) -> Reply {
    Reply::Json(
        json!({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "usage": {"input_tokens": 120, "output_tokens": 4}}),
    )
}

pub(crate) fn last_message(body: &Value) -> Value {
    body["messages"].as_array().unwrap().last().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_tool_results_come_back_in_one_user_message_first() {
    let (transcript, script) = run(
        Provider::Anthropic,
        false,
        vec![
            an_tool_uses(&[
                ("toolu_1", "calc", json!({"expression": "6*7"})),
                ("toolu_2", "unreachable", json!({})),
            ]),
            an_text("42, and the other one crashed."),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let bodies = script.bodies();
    assert_eq!(bodies[0]["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(bodies[1]["messages"][1]["content"][1]["type"], "tool_use");
    let results = last_message(&bodies[1]);
    assert_eq!(results["role"], "user");
    let blocks = results["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(
        blocks[0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "42", "is_error": false})
    );
    assert_eq!(blocks[1]["tool_use_id"], "toolu_2");
    assert_eq!(blocks[1]["is_error"], true);
    assert!(
        blocks[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("Error: tool 'unreachable' crashed: wasm trap")
    );
    assert_eq!(
        transcript.usage.input_tokens, 220,
        "cached prompt tokens count as input"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_stream_with_late_block_stops_is_assembled() {
    let event = |name: &'static str, data: Value| (name, data.to_string());
    // As llama.cpp sends it: no `input` on tool_use starts, every block
    // stopped only at the end.
    let turn = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 50, "output_tokens": 0}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Computing."}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "tu_a", "name": "calc"}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"expres"}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "tu_b", "name": "counter"}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "sion\": \"2^8\"}"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 2}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ];
    let last = vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 80, "output_tokens": 0}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "256"}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ];
    let (transcript, script) = run(
        Provider::Anthropic,
        true,
        vec![Reply::Events(turn), Reply::Events(last)],
        "go",
    )
    .await;
    assert_eq!(transcript.final_text, "256");
    let bodies = script.bodies();
    let assistant = &bodies[1]["messages"][1];
    assert_eq!(
        assistant["content"][0],
        json!({"type": "text", "text": "Computing."})
    );
    assert_eq!(
        assistant["content"][1]["input"],
        json!({"expression": "2^8"})
    );
    assert_eq!(assistant["content"][2]["input"], json!({}));
    let results = last_message(&bodies[1]);
    assert_eq!(results["content"][0]["content"], "256");
    assert_eq!(results["content"][1]["content"], "1");
    assert_eq!(
        script.requests.lock().unwrap()[0].0["x-api-key"],
        "sk-test-key-1234"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_overload_mid_stream_is_retried() {
    let overloaded = vec![
        ("message_start", json!({"type": "message_start", "message": {"usage": {}}}).to_string()),
        ("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}).to_string()),
    ];
    let fine = vec![
        ("message_start", json!({"type": "message_start", "message": {"usage": {}}}).to_string()),
        ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "ok"}}).to_string()),
        ("message_stop", json!({"type": "message_stop"}).to_string()),
    ];
    let (transcript, script) = run(
        Provider::Anthropic,
        true,
        vec![Reply::Events(overloaded), Reply::Events(fine)],
        "go",
    )
    .await;
    assert_eq!(transcript.final_text, "ok");
    assert_eq!(script.bodies().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_gets_images_in_a_user_message_after_all_of_the_turns_tool_messages() {
    let (transcript, script) = run(
        Provider::OpenAI,
        false,
        vec![
            oa_calls(&[
                ("call_1", "media", r#"{"size": 64}"#),
                ("call_2", "calc", r#"{"expression": "1+1"}"#),
            ]),
            oa_text("A picture and 2."),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let messages = script.bodies()[1]["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "user"]);
    // The tool message carries text only, naming what follows.
    assert_eq!(
        messages[2]["content"],
        "a picture\n[image: image/png, 64 B]\n[resource r: https://example.org/r (a resource)]"
    );
    let parts = messages[4]["content"].as_array().unwrap();
    assert_eq!(parts[0]["text"], "Image returned by tool call call_1:");
    assert!(
        parts[1]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBORw0K"),
        "{}",
        parts[1]
    );
    // The transcript keeps every block.
    let recorded = serde_json::to_value(&transcript.messages[2]).unwrap();
    assert_eq!(recorded["blocks"][1]["type"], "image", "{recorded}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gets_images_inside_the_tool_result() {
    let (transcript, script) = run(
        Provider::Anthropic,
        false,
        vec![
            an_tool_uses(&[("toolu_1", "media", json!({"size": 64}))]),
            an_text("A picture."),
        ],
        "go",
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let results = last_message(&script.bodies()[1]);
    let content = &results["content"][0]["content"];
    assert_eq!(content[0], json!({"type": "text", "text": "a picture"}));
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["source"]["type"], "base64");
    assert_eq!(content[1]["source"]["media_type"], "image/png");
    assert_eq!(content[2]["type"], "text", "links read as text: {content}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_questions_become_run_events_and_context_reaches_tools() {
    use toolhost::{Answer, Asker, Question};
    struct Yes;
    impl Asker for Yes {
        fn ask<'a>(&'a self, _: &'a Question) -> futures::future::BoxFuture<'a, Answer> {
            Box::pin(async { Answer::Accepted(json!({"confirm": true})) })
        }
    }
    let (base_url, script) = model_server(vec![
        oa_calls(&[
            ("call_1", "report_progress", r#"{"n": 2}"#),
            ("call_2", "ask_confirm", r#"{"question": "Proceed?"}"#),
            ("call_3", "injected", "{}"),
        ]),
        oa_text("Done."),
    ])
    .await;
    let client = Arc::new(OpenAIClient::new(settings(&base_url, false)).unwrap());
    let agent = Agent::new(
        client,
        tools(Approval::Never).await,
        Arc::new(RefuseAll),
        policy(),
    )
    .with_asker(Arc::new(Yes))
    .with_context(json!({"user": "ada"}));
    let transcript = agent.run(vec![Message::user("go")]).await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let progress: Vec<f64> = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolProgress { id, done, .. } if id == "call_1" => Some(*done),
            _ => None,
        })
        .collect();
    assert_eq!(progress, [0.0, 1.0, 2.0]);
    assert!(transcript.events.iter().any(
        |e| matches!(e, AgentEvent::ToolAsked { id, question, .. } if id == "call_2" && question == "Proceed?")
    ));
    let answers = tool_messages(&script.bodies()[1]);
    assert_eq!(answers[1].1, "confirm=true");
    assert_eq!(answers[2].1, r#"{"user":"ada"}"#);
    // The model never sees the context: not in any request.
    assert!(!script.bodies()[0].to_string().contains("ada"));
}
