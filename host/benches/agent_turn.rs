//! Host overhead per agent turn: the time the loop adds beyond the model and
//! the tools.
//!
//! Run with `scripts/bench.sh`, or `cargo bench -p toolhost --bench agent_turn`
//! after `scripts/build-tools.sh`.
//!
//! A scripted model answers instantly, alternating a turn with one `calc`
//! call and a final text turn. Overhead per turn = (run time − time inside
//! tool calls − time inside the model endpoint) / model calls. Measured three
//! ways: a model client in process (the loop alone), the real OpenAI client
//! against an HTTP server on 127.0.0.1 (loop, JSON and HTTP), and the same
//! with every loop control on (tool choice, sampling, a per-turn cap, token
//! and cost budgets, a structured answer checked against its schema).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use serde_json::json;
use toolhost::agent::{Agent, AgentEvent, AgentPolicy};
use toolhost::model::config::{LoopControls, Prices, ResponseFormat, Sampling, ToolChoice};
use toolhost::model::{
    AssistantToolCall, ClientSettings, EventSink, Message, ModelClient, ModelError, ModelRequest,
    ModelResponse, OpenAIClient,
};
use toolhost::{ComponentConfig, RefuseAll, SandboxOptions, ToolHost};

mod common;

const TURNS: u32 = 6;
const RUNS: usize = 300;
/// The final answer: JSON, so the structured-answer variant can check it.
const ANSWER: &str = r#"{"product": 42}"#;

/// Answers instantly: a `calc` call until the last turn, then text.
struct Instant_;

impl ModelClient for Instant_ {
    fn complete<'a>(
        &'a self,
        request: ModelRequest<'a>,
        _: EventSink<'a>,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let turn = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count() as u32;
        Box::pin(async move { Ok(scripted(turn)) })
    }

    fn describe(&self) -> String {
        "in-process".into()
    }
}

fn scripted(turn: u32) -> ModelResponse {
    if turn + 1 < TURNS {
        ModelResponse {
            tool_calls: vec![AssistantToolCall {
                id: format!("call_{turn}"),
                name: "calc".into(),
                arguments: r#"{"expression": "6*7"}"#.into(),
            }],
            ..ModelResponse::default()
        }
    } else {
        ModelResponse {
            content: ANSWER.into(),
            ..ModelResponse::default()
        }
    }
}

/// Serves the same script over HTTP, timing its own work.
async fn http_model(server_nanos: Arc<AtomicU64>) -> String {
    let handler = move |body: axum::Json<serde_json::Value>| {
        let server_nanos = server_nanos.clone();
        async move {
            let started = Instant::now();
            let turn = body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "assistant")
                .count() as u32;
            let response = scripted(turn);
            let message = if response.tool_calls.is_empty() {
                json!({"role": "assistant", "content": response.content})
            } else {
                let c = &response.tool_calls[0];
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": c.id, "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}}]})
            };
            let reply = axum::Json(
                json!({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}),
            );
            server_nanos.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            reply
        }
    };
    let router = axum::Router::new().route("/v1/chat/completions", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    format!("http://{addr}/v1")
}

/// Median overhead per model call over `RUNS` runs.
async fn measure(agent: &Agent, server_nanos: &AtomicU64) -> (Duration, Duration) {
    let mut per_turn = Vec::with_capacity(RUNS);
    let mut tool_share = Duration::ZERO;
    for i in 0..RUNS + RUNS / 10 {
        server_nanos.store(0, Ordering::Relaxed);
        let started = Instant::now();
        let transcript = agent.run(vec![Message::user("compute")]).await;
        let total = started.elapsed();
        let tools: f64 = transcript
            .events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolResult { duration_ms, .. } => Some(*duration_ms),
                _ => None,
            })
            .sum();
        let tools = Duration::from_secs_f64(tools / 1e3);
        let server = Duration::from_nanos(server_nanos.load(Ordering::Relaxed));
        assert_eq!(transcript.final_text, ANSWER, "{:?}", transcript.end);
        if i >= RUNS / 10 {
            per_turn.push((total.saturating_sub(tools).saturating_sub(server)) / TURNS);
            tool_share += tools / TURNS;
        }
    }
    per_turn.sort();
    (per_turn[per_turn.len() / 2], tool_share / RUNS as u32)
}

fn main() {
    let runtime = common::runtime();
    runtime.block_on(async {
        let host = ToolHost::load_components(vec![ComponentConfig::new(common::tool("calc"))], SandboxOptions::default())
            .await
            .expect("calc loads");
        let policy = AgentPolicy::new(LoopControls { max_steps: TURNS, ..LoopControls::default() });
        let server_nanos = Arc::new(AtomicU64::new(0));

        let in_process = Agent::new(Arc::new(Instant_), host.clone(), Arc::new(RefuseAll), policy.clone());
        let (loop_only, tool) = measure(&in_process, &server_nanos).await;

        let base_url = http_model(server_nanos.clone()).await;
        let client = OpenAIClient::new(ClientSettings {
            base_url: base_url.parse().unwrap(),
            model: "bench".into(),
            api_key: None,
            stream: false,
            timeout: Duration::from_secs(10),
        })
        .unwrap();
        let client: Arc<dyn ModelClient> = Arc::new(client);
        let over_http = Agent::new(client.clone(), host.clone(), Arc::new(RefuseAll), policy.clone());
        let (with_http, _) = measure(&over_http, &server_nanos).await;

        let controlled = AgentPolicy::new(LoopControls {
            tool_choice: ToolChoice::Required,
            sampling: Sampling { temperature: Some(0.0), top_p: Some(0.9), seed: Some(7), stop: vec!["END".into()] },
            max_run_tokens: Some(1_000_000),
            max_run_cost: Some(100.0),
            prices: Some(Prices { input: 1.0, output: 2.0 }),
            response_format: Some(ResponseFormat {
                name: "answer".into(),
                schema: json!({"type": "object", "properties": {"product": {"type": "integer"}}, "required": ["product"]}),
                strict: false,
            }),
            ..policy.controls
        });
        let with_controls = Agent::new(client, host, Arc::new(RefuseAll), controlled);
        let (controls, _) = measure(&with_controls, &server_nanos).await;

        println!("agent loop: host overhead per turn (model and tool time excluded), median of {RUNS} runs of {TURNS} turns");
        println!("{:<52} {:>10} {:>10}", "", "overhead", "target");
        println!("{:<52} {:>7.1} µs {:>7} ms", "loop only (in-process model)", loop_only.as_secs_f64() * 1e6, "< 1");
        println!("{:<52} {:>7.1} µs {:>7} ms", "loop + OpenAI client over loopback HTTP", with_http.as_secs_f64() * 1e6, "< 1");
        println!("{:<52} {:>7.1} µs {:>7} ms", "  the same, every loop control on", controls.as_secs_f64() * 1e6, "< 1");
        println!("(for scale: the tool call itself took {:.1} µs per turn)", tool.as_secs_f64() * 1e6);
    });
}
