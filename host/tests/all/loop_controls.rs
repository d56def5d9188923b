//! The agent loop's controls, against the scripted model server of
//! `agent.rs`: what each provider is sent (tool choice, parallel calls,
//! sampling, a response format) and how the loop behaves (a per-turn cap,
//! token and cost budgets, a structured answer, cached results), plus the
//! Responses API wire format and a kept-alive connection the server closed.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use toolhost::Approval;
use toolhost::agent::{Agent, AgentEvent, AgentPolicy, RunEnd};
use toolhost::model::config::{
    LoopControls, Prices, Provider, ResponseFormat, Sampling, ToolChoice,
};
use toolhost::model::{Message, ModelClient, OpenAIClient};
use toolhost::{ComponentConfig, RefuseAll};

use crate::agent::*;
use crate::util::*;

async fn run_policy(
    provider: Provider,
    stream: bool,
    replies: Vec<Reply>,
    policy: AgentPolicy,
) -> (toolhost::agent::Transcript, Arc<Script>) {
    run_with(
        provider,
        stream,
        replies,
        "go",
        Approval::Never,
        Arc::new(RefuseAll),
        policy,
    )
    .await
}

fn sampling() -> Sampling {
    Sampling {
        temperature: Some(0.0),
        top_p: Some(0.5),
        seed: Some(7),
        stop: vec!["STOP".into()],
    }
}

fn forced(choice: ToolChoice) -> AgentPolicy {
    policy_of(LoopControls {
        tool_choice: choice,
        parallel_tool_calls: false,
        max_tool_calls_per_turn: NonZeroU32::MIN,
        sampling: sampling(),
        ..controls()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_gets_tool_choice_for_the_first_step_only_and_sampling_unchanged() {
    let replies = vec![
        oa_calls(&[("c1", "calc", r#"{"expression":"2*3"}"#)]),
        oa_text("6"),
    ];
    let (transcript, script) = run_policy(
        Provider::OpenAI,
        false,
        replies,
        forced(ToolChoice::Required),
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let bodies = script.bodies();
    assert_eq!(bodies[0]["tool_choice"], "required");
    assert_eq!(bodies[0]["parallel_tool_calls"], false);
    assert_eq!(bodies[0]["temperature"], 0.0);
    assert_eq!(bodies[0]["top_p"], 0.5);
    assert_eq!(bodies[0]["seed"], 7);
    assert_eq!(bodies[0]["stop"], json!(["STOP"]));
    // After the first step the model may answer: auto, which is not sent.
    assert!(bodies[1].get("tool_choice").is_none(), "{}", bodies[1]);
    assert_eq!(bodies[1]["parallel_tool_calls"], false);

    let (_, script) = run_policy(
        Provider::OpenAI,
        false,
        vec![oa_text("no")],
        forced(ToolChoice::Tool("calc".into())),
    )
    .await;
    assert_eq!(
        script.bodies()[0]["tool_choice"],
        json!({"type": "function", "function": {"name": "calc"}})
    );
    let (_, script) = run_policy(
        Provider::OpenAI,
        false,
        vec![oa_text("fine")],
        AgentPolicy::default(),
    )
    .await;
    let body = &script.bodies()[0];
    for key in [
        "tool_choice",
        "parallel_tool_calls",
        "temperature",
        "seed",
        "stop",
        "response_format",
    ] {
        assert!(
            body.get(key).is_none(),
            "{key} is sent only when set: {body}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gets_its_own_tool_choice_and_no_seed() {
    let (_, script) = run_policy(
        Provider::Anthropic,
        false,
        vec![an_text("ok")],
        forced(ToolChoice::Required),
    )
    .await;
    let body = &script.bodies()[0];
    assert_eq!(
        body["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": true})
    );
    assert_eq!(body["temperature"], 0.0);
    assert_eq!(body["top_p"], 0.5);
    assert_eq!(body["stop_sequences"], json!(["STOP"]));
    assert!(body.get("seed").is_none() && body.get("stop").is_none());

    for (choice, expected) in [
        (
            ToolChoice::Tool("calc".into()),
            json!({"type": "tool", "name": "calc", "disable_parallel_tool_use": true}),
        ),
        (ToolChoice::None, json!({"type": "none"})),
        (
            ToolChoice::Auto,
            json!({"type": "auto", "disable_parallel_tool_use": true}),
        ),
    ] {
        let (_, script) = run_policy(
            Provider::Anthropic,
            false,
            vec![an_text("ok")],
            forced(choice),
        )
        .await;
        assert_eq!(script.bodies()[0]["tool_choice"], expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_call_turn_runs_the_first_n_and_answers_every_id_in_order() {
    let ids: Vec<String> = (0..500).map(|i| format!("c{i}")).collect();
    let calls: Vec<(&str, &str, &str)> = ids
        .iter()
        .map(|id| (id.as_str(), "calc", r#"{"expression":"1+1"}"#))
        .collect();
    let policy = policy_of(LoopControls {
        max_tool_calls_per_turn: NonZeroU32::new(16).unwrap(),
        ..controls()
    });
    let (transcript, script) = run_policy(
        Provider::OpenAI,
        false,
        vec![oa_calls(&calls), oa_text("2")],
        policy,
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    let answers = tool_messages(&script.bodies()[1]);
    assert_eq!(answers.len(), 500, "every id is answered");
    for (i, (id, content)) in answers.iter().enumerate() {
        assert_eq!(id, &ids[i], "in the model's order");
        if i < 16 {
            assert_eq!(content, "2");
        } else {
            assert!(
                content.contains("was not run") && content.contains("max_tool_calls_per_turn"),
                "{content}"
            );
        }
    }
    let refused: Vec<&Value> = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { message, .. } => message.error.as_ref(),
            _ => None,
        })
        .map(|error| serde_json::to_value(error).unwrap())
        .collect::<Vec<_>>()
        .leak()
        .iter()
        .collect();
    assert_eq!(refused.len(), 484);
    assert_eq!(refused[0]["type"], "denied_by_user");
    assert_eq!(refused[0]["retryable"], true, "a later turn may call it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_budget_ends_the_run_cleanly_and_spend_is_estimated() {
    // Each scripted call spends 100 tokens in and 20 out.
    let policy = policy_of(LoopControls {
        max_run_tokens: Some(200),
        prices: Some(Prices {
            input: 1.0,
            output: 2.0,
        }),
        ..controls()
    });
    let replies = vec![
        oa_calls(&[("a", "calc", r#"{"expression":"1"}"#)]),
        oa_calls(&[("b", "calc", r#"{"expression":"2"}"#)]),
    ];
    let (transcript, script) = run_policy(Provider::OpenAI, false, replies, policy).await;
    assert_eq!(
        transcript.end,
        RunEnd::TokenBudget {
            used: 240,
            limit: 200
        }
    );
    let bodies = script.bodies();
    assert_eq!(bodies.len(), 2, "no model call once the budget is spent");
    assert_eq!(
        bodies[0]["max_tokens"], 200,
        "at most what the budget leaves"
    );
    assert_eq!(bodies[1]["max_tokens"], 80);
    assert!(
        transcript.final_text.contains("max_run_tokens"),
        "{}",
        transcript.final_text
    );
    // The transcript is whole: the last call was answered.
    assert!(
        matches!(transcript.messages.last(), Some(Message::Tool { tool_call_id, .. }) if tool_call_id == "b")
    );
    let per_call = (100.0 * 1.0 + 20.0 * 2.0) / 1e6;
    assert!((transcript.cost_usd.unwrap() - 2.0 * per_call).abs() < 1e-12);
    assert!(transcript.events.iter().any(
        |e| matches!(e, AgentEvent::ModelCall { cost_usd: Some(c), .. } if (c - per_call).abs() < 1e-12)
    ));

    let policy = policy_of(LoopControls {
        max_run_cost: Some(per_call / 2.0),
        prices: Some(Prices {
            input: 1.0,
            output: 2.0,
        }),
        ..controls()
    });
    let replies = vec![oa_calls(&[("a", "calc", r#"{"expression":"1"}"#)])];
    let (transcript, script) = run_policy(Provider::OpenAI, false, replies, policy).await;
    assert!(
        matches!(transcript.end, RunEnd::CostBudget { spent, .. } if (spent - per_call).abs() < 1e-12),
        "{:?}",
        transcript.end
    );
    assert_eq!(script.bodies().len(), 1);
}

fn answer_format() -> ResponseFormat {
    ResponseFormat {
        name: "final_answer".into(),
        schema: json!({
            "type": "object",
            "properties": {"product": {"type": "integer"}},
            "required": ["product"],
            "additionalProperties": false,
        }),
        strict: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_structured_answer_that_fails_validation_is_sent_back_once() {
    let policy = policy_of(LoopControls {
        response_format: Some(answer_format()),
        ..controls()
    });
    let replies = vec![
        oa_text("It is 42."),
        oa_text("```json\n{\"product\": 42}\n```"),
    ];
    let (transcript, script) = run_policy(Provider::OpenAI, false, replies, policy.clone()).await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(transcript.answer, Some(json!({"product": 42})));
    let bodies = script.bodies();
    assert_eq!(
        bodies[0]["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "final_answer", "schema": answer_format().schema, "strict": true}})
    );
    let told = last_message(&bodies[1]);
    assert_eq!(told["role"], "user");
    assert!(
        told["content"].as_str().unwrap().contains("not JSON"),
        "{told}"
    );

    // Wrong twice: reported, not sent back again.
    let replies = vec![
        oa_text("{\"product\": \"x\"}"),
        oa_text("{\"product\": 4.5}"),
    ];
    let (transcript, script) = run_policy(Provider::OpenAI, false, replies, policy).await;
    assert!(
        matches!(&transcript.end, RunEnd::InvalidAnswer { error } if error.contains("product")),
        "{:?}",
        transcript.end
    );
    assert_eq!(transcript.answer, None);
    assert_eq!(script.bodies().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_gives_a_structured_answer_through_a_forced_tool() {
    let policy = policy_of(LoopControls {
        response_format: Some(answer_format()),
        ..controls()
    });
    let replies = vec![
        an_tool_uses(&[("t1", "final_answer", json!({"product": "six"}))]),
        an_tool_uses(&[
            ("t2", "calc", json!({"expression": "2*3"})),
            ("t3", "final_answer", json!({"product": 6})),
        ]),
        an_tool_uses(&[("t4", "final_answer", json!({"product": 6}))]),
    ];
    let (transcript, script) = run_policy(Provider::Anthropic, false, replies, policy).await;
    assert_eq!(
        transcript.end,
        RunEnd::Answered,
        "{}",
        transcript.final_text
    );
    assert_eq!(transcript.answer, Some(json!({"product": 6})));
    let bodies = script.bodies();
    let tools = bodies[0]["tools"].as_array().unwrap();
    assert_eq!(tools.last().unwrap()["name"], "final_answer");
    assert_eq!(
        tools.last().unwrap()["input_schema"],
        answer_format().schema
    );
    assert_eq!(bodies[0]["tool_choice"], json!({"type": "any"}));
    // The wrong answer came back as a failed tool_result naming the field.
    let results = last_message(&bodies[1]);
    assert_eq!(results["content"][0]["tool_use_id"], "t1");
    assert_eq!(results["content"][0]["is_error"], true);
    // Given beside another call, the answer waits; the other call runs.
    let results = last_message(&bodies[2])["content"].clone();
    assert_eq!(results[0]["content"], "6");
    assert_eq!(results[1]["is_error"], true);
    assert!(results[1]["content"].as_str().unwrap().contains("alone"));
    // The accepted answer is answered too: every id has its result.
    assert!(
        matches!(transcript.messages.last(), Some(Message::Tool { tool_call_id, is_error: false, .. }) if tool_call_id == "t4")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_does_not_fit_the_tools_or_the_endpoint_asks_nothing() {
    for (provider, policy, fix) in [
        (
            Provider::OpenAI,
            policy_of(LoopControls {
                tool_choice: ToolChoice::Tool("no_such_tool".into()),
                ..controls()
            }),
            "calc",
        ),
        (
            Provider::OpenAI,
            policy_of(LoopControls {
                response_format: Some(ResponseFormat {
                    name: "calc".into(),
                    ..answer_format()
                }),
                ..controls()
            }),
            "another name",
        ),
        // The Responses API takes no fewer than 16 output tokens a call: a
        // policy that allows fewer could never ask it anything.
        (
            Provider::OpenAIResponses,
            policy_of(LoopControls {
                max_tokens: 8,
                ..controls()
            }),
            "at least 16",
        ),
        (
            Provider::OpenAIResponses,
            policy_of(LoopControls {
                max_run_tokens: Some(10),
                ..controls()
            }),
            "at least 16",
        ),
        (
            Provider::OpenAI,
            policy_of(LoopControls {
                max_tokens: 0,
                ..controls()
            }),
            "at least 1",
        ),
    ] {
        let (transcript, script) = run_policy(provider, false, vec![], policy).await;
        assert!(
            matches!(&transcript.end, RunEnd::Misconfigured { error } if error.contains(fix)),
            "{:?}",
            transcript.end
        );
        assert!(script.bodies().is_empty());
        assert!(matches!(
            transcript.events.last(),
            Some(AgentEvent::Finished { .. })
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_budget_message_says_what_the_model_was_doing() {
    let policy = policy_of(LoopControls {
        max_steps: 2,
        ..controls()
    });
    let replies = vec![
        oa_calls(&[("a", "calc", "{}"), ("b", "echo", r#"{"text":"x"}"#)]),
        oa_calls(&[("c", "calc", "{}")]),
    ];
    let (transcript, _) = run_policy(Provider::OpenAI, false, replies, policy).await;
    assert_eq!(transcript.end, RunEnd::StepBudget);
    let text = &transcript.final_text;
    assert!(text.contains("calc ×2, echo ×1"), "{text}");
    // Issue 25: the library names its own setting; only the binary, which
    // has the flag, names `--max-steps` (`cli::run_without_yes…` below).
    assert!(
        text.contains("raise max_steps in [model] (`LoopControls::max_steps` in code)"),
        "{text}"
    );
    assert!(!text.contains("--"), "no flag of the binary: {text}");
}

/// Issue 25: a front end spells the step-budget fix in its own terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_budget_message_spells_the_fix_as_the_front_end_sets_it() {
    let (base_url, _script) = model_server(vec![oa_calls(&[("a", "calc", "{}")])]).await;
    let client = Arc::new(OpenAIClient::new(settings(&base_url, false)).unwrap());
    let mut fixes = toolhost::Fixes::default();
    fixes.max_steps = "raise `agent.steps` in app.yaml".into();
    let policy = policy_of(LoopControls {
        max_steps: 1,
        ..controls()
    });
    let agent = Agent::new(
        client,
        tools(Approval::Never).await,
        Arc::new(RefuseAll),
        policy,
    )
    .with_fixes(fixes);
    let transcript = agent.run(vec![Message::user("go")]).await;
    assert_eq!(transcript.end, RunEnd::StepBudget);
    let text = &transcript.final_text;
    assert!(
        text.contains("To give it more steps, raise `agent.steps` in app.yaml;"),
        "{text}"
    );
    assert!(!text.contains("max_steps in [model]"), "{text}");
}

// --- Result caching ---------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cached_second_call_never_instantiates_the_tool() {
    let server = text_server("fresh").await;
    let grants = toolhost::Grants::none()
        .allow_host(&server.origin())
        .unwrap();
    let host = host(vec![
        ComponentConfig::new(component("probe"))
            .grants(grants)
            .limits(quick_limits())
            .cache(Duration::from_secs(60)),
    ])
    .await;
    assert_eq!(
        host.cache_ttl("fetch_cacheable"),
        Some(Duration::from_secs(60))
    );
    assert_eq!(host.cache_ttl("fetch"), None, "not declared idempotent");
    let url = json!({"name": server.url("/")});
    let call = |id: &str, tool: &str, context: Option<Value>| {
        let host = host.clone();
        let call = toolhost::ToolCall::new(id, tool, url.clone());
        async move {
            let mut env = toolhost::CallOptions::default();
            if let Some(context) = context {
                env = env.context(context);
            }
            host.call(call).options(&env).await
        }
    };
    let first = call("1", "fetch_cacheable", None).await;
    assert_eq!(ok(&first), "200 fresh");
    assert!(!first.stats.cached && first.stats.fuel_used > 0);
    let second = call("2", "fetch_cacheable", None).await;
    assert_eq!(ok(&second), "200 fresh");
    assert!(second.stats.cached, "answered from the cache");
    assert_eq!(second.stats.fuel_used, 0, "the tool never ran");
    assert_eq!(second.call_id, "2", "under its own id");
    assert_eq!(server.hits(), 1);
    // Another user's context is another key; uncached tools always run.
    let other = call("3", "fetch_cacheable", Some(json!({"user": "bob"}))).await;
    assert!(!other.stats.cached);
    call("4", "fetch", None).await;
    call("5", "fetch", None).await;
    assert_eq!(server.hits(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_marks_cached_results_in_its_transcript() {
    let server = text_server("fresh").await;
    let grants = toolhost::Grants::none()
        .allow_host(&server.origin())
        .unwrap();
    let tools = host(vec![
        ComponentConfig::new(component("probe"))
            .grants(grants)
            .limits(quick_limits())
            .cache(Duration::from_secs(60)),
    ])
    .await;
    let args = json!({"name": server.url("/")}).to_string();
    let (base_url, _script) = model_server(vec![
        oa_calls(&[("a", "fetch_cacheable", &args)]),
        oa_calls(&[("b", "fetch_cacheable", &args)]),
        oa_text("done"),
    ])
    .await;
    let client: Arc<dyn ModelClient> =
        Arc::new(OpenAIClient::new(settings(&base_url, false)).unwrap());
    let agent = Agent::new(client, tools, Arc::new(RefuseAll), policy());
    let transcript = agent.run(vec![Message::user("twice")]).await;
    let cached: Vec<bool> = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::ToolResult { cached, .. } => Some(*cached),
            _ => None,
        })
        .collect();
    assert_eq!(cached, [false, true]);
    assert_eq!(server.hits(), 1);
    let line = serde_json::to_value(&transcript.events).unwrap();
    assert!(line.to_string().contains("\"cached\":true"));
}

#[tokio::test]
async fn caching_is_refused_for_components_that_write_or_hold_secrets() {
    let store = toolhost::stores::StoreConfig {
        name: "s".into(),
        backend: toolhost::stores::Backend::Embedded {
            path: std::env::temp_dir().join("toolhost-cache-refusal.redb"),
        },
        scope: toolhost::stores::Scope::Global,
        quota: toolhost::stores::Quota::default(),
    };
    let cases = [
        (toolhost::Grants::none().store(store), "granted a store"),
        (
            toolhost::Grants::none().config("key", "s3cret-value", true),
            "given secrets",
        ),
    ];
    for (grants, why) in cases {
        let error = toolhost::ToolHost::load_components(
            vec![
                ComponentConfig::new(component("probe"))
                    .grants(grants)
                    .cache(Duration::from_secs(60)),
            ],
            options(),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            error.contains(why) && error.contains("remove cache"),
            "{error}"
        );
    }
    let error = toolhost::ToolHost::load_components(
        vec![ComponentConfig::new(component("probe-v0_1")).cache(Duration::from_secs(60))],
        options(),
    )
    .await
    .map(|_| ())
    .unwrap_err()
    .to_string();
    assert!(error.contains("read-only and idempotent"), "{error}");
}

// --- The Responses API --------------------------------------------------------

fn rs_function_call(call_id: &str, name: &str, arguments: &str) -> Reply {
    Reply::Json(json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"},
        ],
        "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60},
    }))
}

fn rs_stream_text(text: &str) -> Reply {
    let event = |value: Value| {
        let kind: &'static str = value["type"].as_str().unwrap().to_owned().leak();
        (kind, value.to_string())
    };
    Reply::Events(vec![
        event(
            json!({"type": "response.created", "response": {"id": "resp_2", "status": "in_progress", "output": []}}),
        ),
        event(
            json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        ),
        event(
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": &text[..3]}),
        ),
        event(
            json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": &text[3..]}),
        ),
        event(
            json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0, "content_index": 0, "text": text}),
        ),
        event(
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": [{"type": "output_text", "text": text}]}}),
        ),
        event(
            json!({"type": "response.completed", "response": {"id": "resp_2", "status": "completed", "output": [], "usage": {"input_tokens": 70, "output_tokens": 4}}}),
        ),
    ])
}

fn rs_stream_calls() -> Reply {
    let event = |value: Value| {
        let kind: &'static str = value["type"].as_str().unwrap().to_owned().leak();
        (kind, value.to_string())
    };
    let added = |index: u64, id: &str, call_id: &str| {
        event(
            json!({"type": "response.output_item.added", "output_index": index,
            "item": {"type": "function_call", "id": id, "call_id": call_id, "name": "calc", "arguments": "", "status": "in_progress"}}),
        )
    };
    let delta = |index: u64, id: &str, piece: &str| {
        event(
            json!({"type": "response.function_call_arguments.delta", "item_id": id, "output_index": index, "delta": piece}),
        )
    };
    Reply::Events(vec![
        event(
            json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        ),
        event(
            json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_9", "summary": []}}),
        ),
        added(1, "fc_a", "call_a"),
        added(2, "fc_b", "call_b"),
        delta(1, "fc_a", "{\"expression\":"),
        delta(2, "fc_b", "{\"expression\":\"3*3\"}"),
        delta(1, "fc_a", "\"2*2\"}"),
        event(
            json!({"type": "response.function_call_arguments.done", "item_id": "fc_a", "output_index": 1, "arguments": "{\"expression\":\"2*2\"}"}),
        ),
        event(
            json!({"type": "response.output_item.done", "output_index": 1, "item": {"type": "function_call", "id": "fc_a", "call_id": "call_a", "name": "calc", "arguments": "{\"expression\":\"2*2\"}", "status": "completed"}}),
        ),
        event(
            json!({"type": "response.output_item.done", "output_index": 2, "item": {"type": "function_call", "id": "fc_b", "call_id": "call_b", "name": "calc", "arguments": "{\"expression\":\"3*3\"}", "status": "completed"}}),
        ),
        event(
            json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [], "usage": {"input_tokens": 50, "output_tokens": 12}}}),
        ),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_api_calls_come_back_as_function_call_outputs_after_the_items_verbatim() {
    let policy = policy_of(LoopControls {
        sampling: sampling(),
        response_format: None,
        tool_choice: ToolChoice::Tool("calc".into()),
        ..controls()
    });
    let replies = vec![
        rs_function_call("call_1", "calc", r#"{"expression":"6*7"}"#),
        Reply::Json(json!({
            "status": "completed",
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "42"}]}],
            "usage": {"input_tokens": 80, "output_tokens": 2},
        })),
    ];
    let run = |replies, policy| {
        run_with(
            Provider::OpenAIResponses,
            false,
            replies,
            "go",
            Approval::Never,
            Arc::new(RefuseAll),
            policy,
        )
    };
    let (transcript, script) = run(replies, policy).await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(transcript.final_text, "42");
    assert_eq!(transcript.usage.input_tokens, 130);
    let bodies = script.bodies();
    let first = &bodies[0];
    assert_eq!(first["input"], json!([{"role": "user", "content": "go"}]));
    assert_eq!(first["tools"][0]["type"], "function");
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "calc" && t["parameters"]["type"] == "object")
    );
    assert_eq!(
        first["tool_choice"],
        json!({"type": "function", "name": "calc"})
    );
    assert_eq!(first["temperature"], 0.0);
    assert!(first.get("seed").is_none() && first.get("stop").is_none());
    assert_eq!(first["max_output_tokens"], 1024);
    let input = bodies[1]["input"].as_array().unwrap();
    assert_eq!(
        input[1],
        json!({"type": "reasoning", "id": "rs_1", "summary": []})
    );
    // The output items go back verbatim: the call keeps its item id.
    assert_eq!(
        input[2],
        json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "calc", "arguments": "{\"expression\":\"6*7\"}", "status": "completed"})
    );
    assert_eq!(
        input[3],
        json!({"type": "function_call_output", "call_id": "call_1", "output": "42"})
    );

    // Streamed: interleaved argument deltas of two calls, then text.
    let policy = policy_of(LoopControls {
        response_format: Some(answer_format()),
        ..controls()
    });
    let (transcript, script) = run_with(
        Provider::OpenAIResponses,
        true,
        vec![rs_stream_calls(), rs_stream_text("{\"product\": 13}")],
        "go",
        Approval::Never,
        Arc::new(RefuseAll),
        policy,
    )
    .await;
    assert_eq!(
        transcript.end,
        RunEnd::Answered,
        "{}",
        transcript.final_text
    );
    assert_eq!(transcript.answer, Some(json!({"product": 13})));
    let bodies = script.bodies();
    assert_eq!(bodies[0]["stream"], true);
    assert_eq!(bodies[0]["text"]["format"]["type"], "json_schema");
    assert_eq!(bodies[0]["text"]["format"]["name"], "final_answer");
    let input = bodies[1]["input"].as_array().unwrap();
    let kinds: Vec<&str> = input
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "reasoning",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output"
        ]
    );
    assert_eq!(input[2]["arguments"], "{\"expression\":\"2*2\"}");
    assert_eq!(input[2]["id"], "fc_a");
    assert_eq!(input[3]["id"], "fc_b");
    assert_eq!(
        input[4],
        json!({"type": "function_call_output", "call_id": "call_a", "output": "4"})
    );
    assert_eq!(
        input[5],
        json!({"type": "function_call_output", "call_id": "call_b", "output": "9"})
    );
    let deltas: String = transcript
        .events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Message {
                message: Message::Assistant { content, .. },
            } => Some(content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, "{\"product\": 13}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_stream_that_fails_or_stops_early_is_retried() {
    let failed = Reply::Events(vec![(
        "response.failed",
        json!({"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}}}).to_string(),
    )]);
    let cut = Reply::Events(vec![(
        "response.created",
        json!({"type": "response.created", "response": {"status": "in_progress"}}).to_string(),
    )]);
    let (transcript, script) = run_with(
        Provider::OpenAIResponses,
        true,
        vec![failed, cut, rs_stream_text("fine now")],
        "go",
        Approval::Never,
        Arc::new(RefuseAll),
        policy(),
    )
    .await;
    assert_eq!(transcript.end, RunEnd::Answered);
    assert_eq!(transcript.final_text, "fine now");
    assert_eq!(script.bodies().len(), 3);
}

// --- Connections ----------------------------------------------------------------

/// A model server that answers each connection's first request (keeping it
/// alive), and closes the connection when a second request arrives on it,
/// as a server that closed an idle connection does in the race with its
/// reuse, or, after `close_after`, as a server that worked on the request
/// and failed. Counts requests read.
async fn closing_server(answer: Value, close_after: Duration) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let count = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let count = count.clone();
            let body = answer.to_string();
            tokio::spawn(async move {
                let mut served = 0;
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 16 * 1024];
                loop {
                    let Ok(n) = socket.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buffer.extend_from_slice(&chunk[..n]);
                    // Whole request: headers and a body of Content-Length.
                    let text = String::from_utf8_lossy(&buffer).to_string();
                    let Some(end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let length: usize = text[..end]
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    if buffer.len() < end + 4 + length {
                        continue;
                    }
                    buffer.clear();
                    count.fetch_add(1, Ordering::SeqCst);
                    served += 1;
                    if served > 1 {
                        tokio::time::sleep(close_after).await;
                        return; // Closed without an answer.
                    }
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\r\n{body}",
                        body.len()
                    );
                    if socket.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}/v1"), requests)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_is_reopened_without_a_retry() {
    let (transcript, requests) = run_against_closing_server(Duration::ZERO).await;
    // Three model calls, each after the first on a connection the server
    // then closed: every one reconnected quietly, none counted as a retry.
    assert_eq!(
        transcript.end,
        RunEnd::StepBudget,
        "{}",
        transcript.final_text
    );
    assert!(
        !transcript
            .events
            .iter()
            .any(|e| matches!(e, AgentEvent::ModelRetry { .. })),
        "no retry was counted"
    );
    assert_eq!(requests, 5, "3 answered, 2 sent on closed connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_that_failed_after_the_server_read_it_is_not_sent_again_quietly() {
    // The server may have worked on (and billed) it: whether to send it
    // again is the retry policy's call, here none.
    let (transcript, requests) = run_against_closing_server(Duration::from_secs(1)).await;
    assert!(
        matches!(transcript.end, RunEnd::ModelFailed { .. }),
        "{:?}",
        transcript.end
    );
    assert_eq!(requests, 2, "the second was sent once");
}

/// A run of at most 3 steps, without retries, against [`closing_server`]
/// answering a call each time; with the requests the server read.
async fn run_against_closing_server(close_after: Duration) -> (toolhost::agent::Transcript, usize) {
    let answer = json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "calc", "arguments": "{\"expression\":\"1\"}"}}]}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1}});
    let (base_url, requests) = closing_server(answer, close_after).await;
    let client: Arc<dyn ModelClient> =
        Arc::new(OpenAIClient::new(settings(&base_url, false)).unwrap());
    let policy = policy_of(LoopControls {
        max_steps: 3,
        max_retries: 0,
        ..controls()
    });
    let agent = Agent::new(
        client,
        tools(Approval::Never).await,
        Arc::new(RefuseAll),
        policy,
    );
    let transcript = agent.run(vec![Message::user("go")]).await;
    (transcript, requests.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_error_body_is_read_only_as_far_as_its_message_needs() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sent = Arc::new(AtomicUsize::new(0));
    let count = sent.clone();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 64 * 1024];
        let _ = socket.read(&mut request).await;
        let head = "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n";
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let first = format!("{{\"error\":\"the model is melting\"}}{}", "x".repeat(100));
        let filler = "y".repeat(64 * 1024);
        let mut piece = first;
        // Until the host hangs up.
        loop {
            let chunk = format!("{:x}\r\n{piece}\r\n", piece.len());
            if socket.write_all(chunk.as_bytes()).await.is_err() {
                return;
            }
            count.fetch_add(piece.len(), Ordering::SeqCst);
            piece.clone_from(&filler);
        }
    });
    let settings = toolhost::model::ClientSettings {
        // Long enough for the first 64 KiB many times over; a host that read
        // on would meet this timeout instead, with no body to show.
        timeout: Duration::from_secs(5),
        ..settings(&format!("http://{addr}"), false)
    };
    let client: Arc<dyn ModelClient> = Arc::new(OpenAIClient::new(settings).unwrap());
    let policy = policy_of(LoopControls {
        max_retries: 0,
        ..controls()
    });
    let agent = Agent::new(
        client,
        tools(Approval::Never).await,
        Arc::new(RefuseAll),
        policy,
    );
    let transcript = agent.run(vec![Message::user("go")]).await;
    let RunEnd::ModelFailed { error } = &transcript.end else {
        panic!("{:?}", transcript.end);
    };
    assert!(
        error.contains("500") && error.contains("the model is melting"),
        "{error}"
    );
    assert!(
        error.len() < 2_000,
        "the message is clipped: {} bytes",
        error.len()
    );
    // Far less than the body the endpoint would have sent: the host
    // stopped reading (what is left sits in the sockets' buffers).
    assert!(
        sent.load(Ordering::SeqCst) < 16 << 20,
        "{} bytes sent",
        sent.load(Ordering::SeqCst)
    );
}
