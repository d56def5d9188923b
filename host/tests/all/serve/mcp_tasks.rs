//! MCP tasks on a real server's `/mcp` (the `io.modelcontextprotocol/tasks`
//! extension on 2026-07-28): a call answered with a task handle, read back
//! with `tasks/get` (and on the HTTP API: one store), cancelled, kept to its
//! principal, and a tool's question inside a task answered with
//! `tasks/update`.

use super::*;

/// Tokens of two static-token principals.
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";

const PRINCIPALS: &str = "[[serve.auth.token]]\nprincipal = \"alice\"\nenv = \"ALICE_TOKEN\"\n\
                          [[serve.auth.token]]\nprincipal = \"bob\"\nenv = \"BOB_TOKEN\"\n";

const TOKENS: [(&str, &str); 2] = [("ALICE_TOKEN", ALICE), ("BOB_TOKEN", BOB)];

/// How long a test waits for a task to reach a state on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

/// The probe, whose calls may become tasks, and calc, whose calls must.
fn manifest() -> String {
    format!(
        "[[tool]]\ncomponent = '{}'\nlimits = {{ timeout = \"120s\" }}\ntask_support = \"optional\"\n\n\
         [[tool]]\ncomponent = '{}'\ntask_support = \"required\"\n\n{PRINCIPALS}",
        component("probe").display(),
        component("calc").display(),
    )
}

fn start() -> Server {
    Server::start_with_env(&manifest(), &[], &TOKENS)
}

/// A 2026-07-28 request as the holder of `token`, declaring the tasks
/// extension (and elicitation, to be asked questions in a task) when
/// `tasks` says so.
async fn request(server: &Server, token: &str, tasks: bool, method: &str, params: Value) -> Value {
    let capabilities = if tasks {
        json!({"elicitation": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}})
    } else {
        json!({})
    };
    request_declaring(server, token, capabilities, method, params).await
}

/// A 2026-07-28 request as the holder of `token`, declaring `capabilities`.
async fn request_declaring(
    server: &Server,
    token: &str,
    capabilities: Value,
    method: &str,
    mut params: Value,
) -> Value {
    let mut meta = meta_2026();
    meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
    params["_meta"] = meta;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let authorization = format!("Bearer {token}");
    let mut headers = vec![
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
        ("authorization", authorization.as_str()),
    ];
    let name = params["name"]
        .as_str()
        .or(params["taskId"].as_str())
        .map(str::to_owned);
    if let Some(name) = &name {
        headers.push(("Mcp-Name", name.as_str()));
    }
    let response = server.mcp(&body, &headers).await;
    response.reply(1).clone()
}

/// Call `name` with `arguments` as alice, declaring tasks: the task's id.
async fn start_task(server: &Server, name: &str, arguments: Value) -> String {
    let reply = request(
        server,
        ALICE,
        true,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    let result = &reply["result"];
    assert_eq!(result["resultType"], "task", "{reply}");
    assert_eq!(result["status"], "working", "{reply}");
    assert!(result["pollIntervalMs"].as_u64().is_some(), "{reply}");
    result["taskId"].as_str().expect("a task id").to_owned()
}

/// `tasks/get` as `token`: the JSON-RPC reply.
async fn get(server: &Server, token: &str, id: &str) -> Value {
    request(server, token, true, "tasks/get", json!({"taskId": id})).await
}

/// Poll the task as alice until its status is `status`: the task then.
async fn wait_for(server: &Server, id: &str, status: &str) -> Value {
    let start = Instant::now();
    loop {
        let reply = get(server, ALICE, id).await;
        let task = &reply["result"];
        assert!(task.is_object(), "{reply}");
        if task["status"] == status {
            return task.clone();
        }
        assert!(
            !task["status"].as_str().is_some_and(|s| {
                ["completed", "failed", "cancelled"].contains(&s) && s != status
            }),
            "the task ended otherwise: {task}"
        );
        assert!(
            start.elapsed() < WAIT,
            "the task stayed {task}\nstderr:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn mcp_2026_a_task_completes_with_its_result_inline_and_is_the_http_apis_task_too() {
    let server = start();
    let id = start_task(&server, "sleep", json!({"n": 100})).await;
    let task = wait_for(&server, &id, "completed").await;
    assert_eq!(task["taskId"], id.as_str(), "{task}");
    assert_eq!(task["result"]["content"][0]["text"], "awake", "{task}");
    assert_eq!(task["result"]["isError"], false, "{task}");
    // One store: the HTTP API reads the same task for the same principal.
    let response = server
        .http
        .get(server.url(&format!("/v1/tasks/{id}")))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let http: Value = response.json().await.unwrap();
    assert_eq!(http["state"], "completed", "{http}");
}

#[tokio::test]
async fn mcp_2026_a_client_without_the_tasks_extension_gets_a_plain_result() {
    let server = start();
    let reply = request(
        &server,
        ALICE,
        false,
        "tools/call",
        json!({"name": "sleep", "arguments": {"n": 10}}),
    )
    .await;
    assert_eq!(reply["result"]["content"][0]["text"], "awake", "{reply}");
    assert!(reply["result"].get("taskId").is_none(), "{reply}");
    // Without the extension, tasks/* are refused as the extension asks.
    let reply = request(
        &server,
        ALICE,
        false,
        "tasks/get",
        json!({"taskId": "0123456789abcdef0123456789abcdef"}),
    )
    .await;
    assert_eq!(reply["error"]["code"], -32021, "{reply}");
}

#[tokio::test]
async fn mcp_2026_a_tool_that_requires_tasks_refuses_a_client_without_them() {
    let server = start();
    let call = json!({"name": "calc", "arguments": {"expression": "1+2"}});
    let reply = request(&server, ALICE, false, "tools/call", call.clone()).await;
    assert_eq!(reply["error"]["code"], -32021, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("io.modelcontextprotocol/tasks"), "{reply}");
    let id = start_task(&server, "calc", call["arguments"].clone()).await;
    let task = wait_for(&server, &id, "completed").await;
    assert_eq!(task["result"]["isError"], false, "{task}");
}

#[tokio::test]
async fn mcp_2026_another_principals_task_is_refused_like_an_unknown_id() {
    let server = start();
    let id = start_task(&server, "sleep", json!({"n": 60_000})).await;
    let unknown = "0123456789abcdef0123456789abcdef";
    let answers = json!({"r1q1": {"action": "accept", "content": {"confirm": true}}});
    for (method, params) in [
        ("tasks/get", json!({})),
        ("tasks/cancel", json!({})),
        ("tasks/update", json!({"inputResponses": answers})),
    ] {
        let ask = |task: &str| {
            let mut params = params.clone();
            params["taskId"] = json!(task);
            request(&server, BOB, true, method, params)
        };
        let theirs = ask(&id).await;
        let none = ask(unknown).await;
        assert!(theirs.get("error").is_some(), "{method}: {theirs}");
        // Exactly the answer an id that does not exist gets.
        assert_eq!(theirs, none, "{method}");
    }
    let task = wait_for(&server, &id, "working").await;
    assert!(task.get("result").is_none(), "bob changed nothing: {task}");
}

#[tokio::test]
async fn mcp_2026_tasks_cancel_stops_the_call_and_a_finished_task_cannot_be_cancelled() {
    let server = start();
    let id = start_task(&server, "sleep", json!({"n": 60_000})).await;
    let reply = request(&server, ALICE, true, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    let task = wait_for(&server, &id, "cancelled").await;
    assert!(task.get("result").is_none(), "{task}");
    let reply = request(&server, ALICE, true, "tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("already finished"),
        "{reply}"
    );
}

#[tokio::test]
async fn mcp_2026_a_question_inside_a_task_is_input_required_and_tasks_update_answers_it() {
    let server = start();
    let secretless = "Go ahead with the deploy?";
    let id = start_task(&server, "ask_confirm", json!({"question": secretless})).await;
    let task = wait_for(&server, &id, "input_required").await;
    let request_of = &task["inputRequests"]["r1q1"];
    assert_eq!(request_of["method"], "elicitation/create", "{task}");
    let message = request_of["params"]["message"].as_str().unwrap();
    assert!(message.contains("The tool 'ask_confirm' asks"), "{task}");
    assert!(message.contains(secretless), "{task}");
    assert_eq!(
        request_of["params"]["requestedSchema"]["properties"]["confirm"]["type"], "boolean",
        "{task}"
    );
    // An answer to a question never asked is ignored; a malformed one is refused.
    let bad = json!({"taskId": id, "inputResponses": {"r1q1": {"action": "maybe"}}});
    let reply = request(&server, ALICE, true, "tasks/update", bad).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let answer = json!({
        "taskId": id,
        "inputResponses": {
            "q9": {"action": "accept", "content": {"confirm": false}},
            "r1q1": {"action": "accept", "content": {"confirm": true}},
        }
    });
    let reply = request(&server, ALICE, true, "tasks/update", answer).await;
    assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
    let task = wait_for(&server, &id, "completed").await;
    assert_eq!(
        task["result"]["content"][0]["text"], "confirm=true",
        "{task}"
    );
}

/// Issue 28: a program in a task whose calls ask at once (code mode) has
/// its questions put one at a time, each answered in turn: neither
/// overwrites the other, nor the other's answer.
#[tokio::test]
async fn mcp_2026_questions_a_programs_calls_ask_at_once_in_a_task_are_asked_in_turn() {
    let manifest = format!(
        "[[tool]]\ncomponent = '{}'\ncall_tools = ['ask_confirm']\ntask_support = \"optional\"\n\
         limits = {{ timeout = \"120s\" }}\n\n\
         [[tool]]\ncomponent = '{}'\nlimits = {{ timeout = \"120s\" }}\n\n{PRINCIPALS}",
        component("probe-caller").display(),
        component("probe").display(),
    );
    let server = Server::start_with_env(&manifest, &[], &TOKENS);
    let calls = json!({"calls": [
        {"name": "ask_confirm", "arguments": {"question": "first?"}},
        {"name": "ask_confirm", "arguments": {"question": "second?"}},
    ]});
    let id = start_task(&server, "call_many", calls).await;
    let mut answered = Vec::new();
    for _ in 0..2 {
        // The next question: one pending at a time, never one answered.
        let start = Instant::now();
        let (key, message) = loop {
            let task = get(&server, ALICE, &id).await["result"].clone();
            let pending: Vec<(String, Value)> = task["inputRequests"]
                .as_object()
                .map(|requests| {
                    requests
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default();
            assert!(pending.len() <= 1, "one question at a time: {task}");
            if let Some((key, request)) = pending.into_iter().next()
                && !answered.contains(&key)
            {
                break (key, request["params"]["message"].to_string());
            }
            assert!(start.elapsed() < WAIT, "no next question: {task}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            message.contains("first?") || message.contains("second?"),
            "{message}"
        );
        let mut responses = serde_json::Map::new();
        responses.insert(
            key.clone(),
            json!({"action": "accept", "content": {"confirm": true}}),
        );
        let answer = json!({"taskId": id, "inputResponses": responses});
        let reply = request(&server, ALICE, true, "tasks/update", answer).await;
        assert_eq!(reply["result"]["resultType"], "complete", "{reply}");
        answered.push(key);
    }
    let task = wait_for(&server, &id, "completed").await;
    let text = task["result"]["content"][0]["text"].as_str().unwrap();
    let results: Value = serde_json::from_str(text).unwrap();
    assert_eq!(results[0]["ok"], "confirm=true", "{results}");
    assert_eq!(results[1]["ok"], "confirm=true", "{results}");
}

#[tokio::test]
async fn mcp_2026_a_declined_question_inside_a_task_reaches_the_tool_as_declined() {
    let server = start();
    let id = start_task(&server, "ask_confirm", json!({"question": "Proceed?"})).await;
    wait_for(&server, &id, "input_required").await;
    let decline = json!({"taskId": id, "inputResponses": {"r1q1": {"action": "decline"}}});
    let reply = request(&server, ALICE, true, "tasks/update", decline).await;
    assert!(reply.get("error").is_none(), "{reply}");
    let task = wait_for(&server, &id, "completed").await;
    assert_eq!(task["result"]["isError"], true, "{task}");
    let text = task["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("declined"), "{task}");
}

/// A `tools/call` of `ask_confirm` as the holder of `token`, declaring
/// elicitation, with `extra` params (an answer and its `requestState`).
async fn ask_confirm(server: &Server, token: &str, extra: Value) -> Value {
    let mut params = json!({"name": "ask_confirm", "arguments": {"question": "Ship it?"}});
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    let capabilities = json!({"elicitation": {}});
    request_declaring(server, token, capabilities, "tools/call", params).await
}

#[tokio::test]
async fn mcp_2026_a_question_in_a_plain_call_is_input_required_and_answered_by_calling_again() {
    let server = start();
    let reply = ask_confirm(&server, ALICE, json!({})).await;
    let result = &reply["result"];
    assert_eq!(result["resultType"], "input_required", "{reply}");
    let asked = &result["inputRequests"]["q1"];
    assert_eq!(asked["method"], "elicitation/create", "{reply}");
    let message = asked["params"]["message"].as_str().unwrap();
    assert!(
        message.contains("The tool 'ask_confirm' asks: Ship it?"),
        "{reply}"
    );
    let state = result["requestState"].as_str().expect("a requestState");
    assert_eq!(state.len(), 32, "128 random bits: {state}");
    let answer = json!({
        "requestState": state,
        "inputResponses": {"q1": {"action": "accept", "content": {"confirm": true}}},
    });
    let reply = ask_confirm(&server, ALICE, answer.clone()).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], "confirm=true",
        "{reply}"
    );
    // A requestState is good once.
    let again = ask_confirm(&server, ALICE, answer).await;
    assert_eq!(again["error"]["code"], -32602, "{again}");
}

/// A `tools/call` of the probe's `ask_json` (a yes/no form asked `times`
/// times, the i-th under `keys[i]`) as alice, declaring elicitation, with
/// `extra` params.
async fn ask_keyed(server: &Server, times: u32, keys: &[&str], extra: Value) -> Value {
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
    let arguments =
        json!({"question": "OK?", "schema": schema.to_string(), "times": times, "keys": keys});
    let mut params = json!({"name": "ask_json", "arguments": arguments});
    for (key, value) in extra.as_object().unwrap() {
        params[key] = value.clone();
    }
    let capabilities = json!({"elicitation": {}});
    request_declaring(server, ALICE, capabilities, "tools/call", params).await
}

fn yes() -> Value {
    json!({"action": "accept", "content": {"ok": true}})
}

/// SEP-2322: a fresh call may bring its answers up front. Each answers the
/// question asked under its key (the tool's, or `q<n>` for the n-th asked
/// without one), once; keys nobody asked under are ignored, whatever they
/// hold; a question nobody answered is input-required under its key.
#[tokio::test]
async fn mcp_2026_answers_given_up_front_answer_the_questions_of_their_keys() {
    let server = start();
    let answers = json!({"inputResponses": {
        "user_name": yes(),
        "q2": {"action": "decline"},
        "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}},
    }});
    let reply = ask_keyed(&server, 2, &["user_name"], answers).await;
    let result = &reply["result"];
    assert_eq!(result["resultType"], "complete", "{reply}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "answer: {\"ok\":true}", "{reply}");
    assert!(lines[1].starts_with("AskRefusal::Declined: "), "{reply}");
    // Only the first is answered up front: the second is asked, under q2.
    let reply = ask_keyed(
        &server,
        2,
        &["user_name"],
        json!({"inputResponses": {"user_name": yes()}}),
    )
    .await;
    let result = &reply["result"];
    assert_eq!(result["resultType"], "input_required", "{reply}");
    let asked: Vec<&String> = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(asked, ["q2"], "{reply}");
    // An answer under a key nobody asked under is no answer: re-asked.
    let reply = ask_keyed(
        &server,
        1,
        &["user_name"],
        json!({"inputResponses": {"wrong_key": yes()}}),
    )
    .await;
    let requests = &reply["result"]["inputRequests"];
    assert!(requests.get("user_name").is_some(), "{reply}");
    // A retry's answers answer the questions after the awaited one too.
    let state = reply["result"]["requestState"].as_str().unwrap();
    let retry = json!({"requestState": state, "inputResponses": {"user_name": yes()}});
    let reply = ask_keyed(&server, 1, &["user_name"], retry).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], "answer: {\"ok\":true}",
        "{reply}"
    );
}

/// A malformed answer is the request's error (−32602, naming the key and
/// the fix) before any work starts, whatever its key: a call never stops
/// partway for it, and a retry that carries one leaves its call waiting.
/// One that does not fit the form is the tool's to hear of, as any answer.
#[tokio::test]
async fn mcp_2026_a_malformed_answer_is_refused_before_any_work() {
    let server = start();
    for (key, bad) in [
        ("user_name", json!({"action": "maybe"})),
        ("unknown", json!(42)),
    ] {
        let reply = ask_keyed(
            &server,
            1,
            &["user_name"],
            json!({"inputResponses": {key: bad}}),
        )
        .await;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        let named = format!("inputResponses[{key:?}] is not an elicitation result");
        assert!(message.contains(&named), "{message}");
    }
    let reply = ask_keyed(&server, 1, &["user_name"], json!({})).await;
    let state = reply["result"]["requestState"].as_str().unwrap().to_owned();
    let retry = |extra: Value| json!({"requestState": state, "inputResponses": {"user_name": yes(), "later": extra}});
    let reply = ask_keyed(&server, 1, &["user_name"], retry(json!("nonsense"))).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let reply = ask_keyed(&server, 1, &["user_name"], retry(yes())).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], "answer: {\"ok\":true}",
        "the call still waited: {reply}"
    );
    let unfit = json!({"inputResponses": {"q1": {"action": "accept", "content": {"ok": "yes"}}}});
    let reply = ask_keyed(&server, 1, &[], unfit).await;
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("AskRefusal::Unavailable: the answer did not fit the schema"),
        "{reply}"
    );
}

/// A tool names a call's questions: a key the call used already, or a
/// malformed one, is refused `invalid-question` and nobody is asked.
#[tokio::test]
async fn mcp_2026_a_question_under_a_used_or_malformed_key_is_refused() {
    let server = start();
    let answers = json!({"inputResponses": {"again": yes()}});
    let reply = ask_keyed(&server, 3, &["again", "again", "not a key"], answers).await;
    let text = reply["result"]["content"][0]["text"].as_str().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "answer: {\"ok\":true}", "{reply}");
    assert!(
        lines[1].starts_with(
            "AskRefusal::InvalidQuestion: this call asked under the key \"again\" already"
        ),
        "{reply}"
    );
    assert!(
        lines[2].starts_with("AskRefusal::InvalidQuestion: a question's key is 1 to 64"),
        "{reply}"
    );
}

#[tokio::test]
async fn mcp_2026_a_request_state_is_its_principals_only_and_a_forged_one_is_refused() {
    let server = start();
    let reply = ask_confirm(&server, ALICE, json!({})).await;
    let state = reply["result"]["requestState"].as_str().unwrap().to_owned();
    let answer = |state: &str| {
        json!({
            "requestState": state,
            "inputResponses": {"q1": {"action": "accept", "content": {"confirm": true}}},
        })
    };
    let theirs = ask_confirm(&server, BOB, answer(&state)).await;
    let forged = ask_confirm(&server, BOB, answer("0123456789abcdef0123456789abcdef")).await;
    assert_eq!(theirs["error"]["code"], -32602, "{theirs}");
    // Exactly the answer a made-up state gets: nothing revealed.
    assert_eq!(theirs, forged);
    // Bob's try took nothing: alice's answer still reaches her call.
    let reply = ask_confirm(&server, ALICE, answer(&state)).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], "confirm=true",
        "{reply}"
    );
}

#[tokio::test]
async fn mcp_2026_a_client_that_declares_no_elicitation_gets_a_plain_result_when_a_tool_asks() {
    let server = start();
    let reply = request(
        &server,
        ALICE,
        false,
        "tools/call",
        json!({"name": "ask_confirm", "arguments": {"question": "Ship it?"}}),
    )
    .await;
    let result = &reply["result"];
    assert!(result.get("requestState").is_none(), "{reply}");
    assert_eq!(result["isError"], true, "nobody could be asked: {reply}");
}

#[tokio::test]
async fn mcp_2026_a_task_whose_client_declares_no_elicitation_is_never_input_required() {
    let server = start();
    let tasks_only = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let params = json!({"name": "ask_confirm", "arguments": {"question": "Proceed?"}});
    let reply = request_declaring(&server, ALICE, tasks_only, "tools/call", params).await;
    let id = reply["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    // Nobody can be asked: the tool hears so at once, and the task ends,
    // rather than waiting minutes on a question its client never sees.
    let done = wait_for(&server, &id, "completed").await;
    let text = done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("unavailable"), "{done}");
}

/// Poll `/healthz` until the server says it is draining.
async fn wait_draining(server: &Server) {
    let start = Instant::now();
    loop {
        let response = server
            .http
            .get(server.url("/healthz"))
            .send()
            .await
            .unwrap();
        let health: Value = response.json().await.unwrap();
        if health["status"] == "draining" {
            return;
        }
        assert!(start.elapsed() < WAIT, "never drained: {health}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Regression: a draining server refused every JSON-RPC request, so a call
/// waiting for its person's answer could only be cut off at the end of the
/// drain, and a task could not even be read. What finishes work under way
/// passes now, and the server exits 0 once it is done.
#[tokio::test]
async fn mcp_2026_a_draining_server_takes_the_answers_and_task_reads_that_finish_work() {
    let mut server = Server::start_with_env(&manifest(), &["--drain", "120s"], &TOKENS);
    // A plain call waiting for its answer, and a task waiting for one.
    let reply = ask_confirm(&server, ALICE, json!({})).await;
    let state = reply["result"]["requestState"]
        .as_str()
        .unwrap_or_else(|| panic!("input required: {reply}"))
        .to_owned();
    let id = start_task(&server, "ask_confirm", json!({"question": "Deploy?"})).await;
    wait_for(&server, &id, "input_required").await;
    super::hostile::sigterm(&server.child);
    wait_draining(&server).await;
    // New work is refused.
    let fresh = ask_confirm(&server, ALICE, json!({})).await;
    assert_eq!(fresh["error"]["code"], -32000, "{fresh}");
    // The task is read, and answered.
    let task = get(&server, ALICE, &id).await;
    assert_eq!(task["result"]["status"], "input_required", "{task}");
    let answer = json!({"taskId": id, "inputResponses": {
        "r1q1": {"action": "accept", "content": {"confirm": true}}}});
    let reply = request(&server, ALICE, true, "tasks/update", answer).await;
    assert!(reply.get("error").is_none(), "{reply}");
    // The waiting call gets its answer, and answers with the tool's result.
    let answer = json!({
        "requestState": state,
        "inputResponses": {"q1": {"action": "accept", "content": {"confirm": true}}},
    });
    let reply = ask_confirm(&server, ALICE, answer).await;
    assert_eq!(
        reply["result"]["content"][0]["text"], "confirm=true",
        "{reply}"
    );
    let exit = wait_exit_async(&mut server.child, WAIT).await;
    assert_eq!(exit.and_then(|s| s.code()), Some(0), "{}", server.stderr());
}
