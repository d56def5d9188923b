//! Durable tasks on a real server (`POST /v1/tool_calls?async=1`,
//! `GET`/`DELETE /v1/tasks/ID`): read back, kept to their principal,
//! bounded per principal and in time, and shared by replicas on a real
//! Redis, where a killed replica's task fails (or, for an idempotent
//! tool, runs again once) on another.

use super::*;
use crate::redis_server::RedisServer;

/// Tokens of two static-token principals.
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";
/// The token of a principal that may read `/metrics`.
const OPS: &str = "ops-token-0123456789abcdef";

/// Two static-token principals, alice and bob, and ops, who reads the
/// metrics.
const TWO_PRINCIPALS: &str = "[[serve.auth.token]]\nprincipal = \"alice\"\nenv = \"ALICE_TOKEN\"\n\
                              [[serve.auth.token]]\nprincipal = \"bob\"\nenv = \"BOB_TOKEN\"\n\
                              [[serve.auth.token]]\nprincipal = \"ops\"\nenv = \"OPS_TOKEN\"\n\
                              scopes = [\"metrics:read\"]\n";

/// The tokens [`TWO_PRINCIPALS`] reads.
const TOKENS: [(&str, &str); 3] = [
    ("ALICE_TOKEN", ALICE),
    ("BOB_TOKEN", BOB),
    ("OPS_TOKEN", OPS),
];

/// Poll `/metrics` as ops until `series` reads `want`, for up to [`WAIT`].
async fn wait_for_metric_as_ops(server: &Server, series: &str, want: f64) -> bool {
    eventually(WAIT, || async {
        let response = server
            .http
            .get(server.url("/metrics"))
            .bearer_auth(OPS)
            .send()
            .await
            .unwrap();
        metric(&response.text().await.unwrap(), series) == Some(want)
    })
    .await
}

/// How long a test waits for a task to reach a state: long enough for a
/// loaded machine, and for a lease of a few seconds to run out.
const WAIT: Duration = Duration::from_secs(60);

/// Probe limits under which `sleep` may sleep a minute.
const SLEEPY_PROBE: &str = r#"{ timeout = "120s" }"#;

/// calc and the probe (`idempotent` on its entry when asked), then
/// `serve`.
fn tasks_manifest(idempotent: bool, serve: &str) -> String {
    format!(
        "[[tool]]\ncomponent = '{}'\n\n[[tool]]\ncomponent = '{}'\nlimits = {SLEEPY_PROBE}\n\
         idempotent = {idempotent}\n\n{serve}\n",
        component("calc").display(),
        component("probe").display(),
    )
}

fn sleep_call(id: &str, ms: u64) -> Value {
    json!({"id": id, "name": "sleep", "args": {"n": ms}})
}

/// A request as the holder of `token`, if any.
fn as_caller(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

/// `POST /v1/tool_calls?async=1` with `batch`: the status and the body.
async fn start_tasks(server: &Server, token: Option<&str>, batch: &Value) -> (StatusCode, Value) {
    let request = server
        .http
        .post(server.url("/v1/tool_calls?async=1"))
        .json(batch);
    let response = as_caller(request, token).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")),
    )
}

/// Start one task, which must be accepted: its id.
async fn start_one(server: &Server, token: Option<&str>, call: Value) -> String {
    let (status, body) = start_tasks(server, token, &json!([call])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body[0]["state"], "working", "{body}");
    body[0]["id"].as_str().unwrap().to_owned()
}

/// `METHOD /v1/tasks/ID`: the status and the body.
async fn task_request(
    server: &Server,
    method: reqwest::Method,
    token: Option<&str>,
    id: &str,
) -> (StatusCode, Value) {
    let request = server
        .http
        .request(method, server.url(&format!("/v1/tasks/{id}")));
    let response = as_caller(request, token).send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}")),
    )
}

async fn get_task(server: &Server, token: Option<&str>, id: &str) -> (StatusCode, Value) {
    task_request(server, reqwest::Method::GET, token, id).await
}

/// Poll the task on `server` until `done` holds of it, for up to [`WAIT`]:
/// the task then.
async fn wait_for_task(
    server: &Server,
    token: Option<&str>,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let (status, task) = get_task(server, token, id).await;
        assert_eq!(status, StatusCode::OK, "{task}");
        if done(&task) {
            return task;
        }
        assert!(
            start.elapsed() < WAIT,
            "the task stayed {task}\nstderr:\n{}",
            server.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn state_is(state: &'static str) -> impl Fn(&Value) -> bool {
    move |task: &Value| task["state"] == state
}

#[tokio::test]
async fn a_task_started_completes_and_is_read_back_in_its_format() {
    let server = Server::start(&tasks_manifest(false, ""), &[]);
    let (status, started) = start_tasks(
        &server,
        None,
        &json!([calc("c1", "6*7"), calc("c2", "1/0")]),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let ids: Vec<&str> = started
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{started}");
    assert_eq!(started[0]["tool_call_id"], "c1");
    assert_eq!(started[1]["tool"], "calc");
    for id in &ids {
        assert_eq!(id.len(), 32, "128 bits in hex: {id}");
    }
    let done = wait_for_task(&server, None, ids[0], state_is("completed")).await;
    assert_eq!(done["result"]["content"], "42", "{done}");
    assert_eq!(done["result"]["tool_call_id"], "c1", "{done}");
    // A tool's error is an answer: the task completed, its answer an error.
    let failed_call = wait_for_task(&server, None, ids[1], state_is("completed")).await;
    assert_eq!(failed_call["result"]["is_error"], true, "{failed_call}");
    // ?format= applies to the task's answer.
    let id = start_one_in(&server, "?async=1&format=anthropic", calc("a", "2+2")).await;
    let done = wait_for_task(&server, None, &id, state_is("completed")).await;
    assert_eq!(done["result"]["type"], "tool_result", "{done}");
    assert_eq!(done["result"]["content"], "4", "{done}");
    // Tasks' calls are counted like any call, and tasks by event.
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"toolhost_tasks_total{event="started",store="memory"}"#
        ),
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"toolhost_tasks_total{event="completed",store="memory"}"#
        ),
        // A tool's error is an answer kept: completed too.
        Some(3.0),
        "{metrics}"
    );
    assert_eq!(
        metric(
            &metrics,
            r#"toolhost_tool_calls_total{tool="calc",outcome="success",front_end="http"}"#
        ),
        Some(2.0),
        "{metrics}"
    );
}

async fn start_one_in(server: &Server, query: &str, call: Value) -> String {
    let response = server.tool_calls(query, &json!([call])).await;
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let body: Value = response.json().await.unwrap();
    body[0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_bad_async_value_and_unknown_ids_are_refused_clearly() {
    let server = Server::start(&tasks_manifest(false, ""), &[]);
    let (kind, message) = refused(
        server
            .tool_calls("?async=maybe", &json!([calc("c", "1")]))
            .await,
        StatusCode::BAD_REQUEST,
    )
    .await;
    assert_eq!(kind, "invalid_request");
    assert!(message.contains("?async=1"), "{message}");
    let (status, body) = get_task(&server, None, "0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["type"], "not_found", "{body}");
    let (status, _) = task_request(&server, reqwest::Method::DELETE, None, "nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn another_principals_task_is_not_found_and_cannot_be_cancelled() {
    let server = Server::start_with_env(&tasks_manifest(false, TWO_PRINCIPALS), &[], &TOKENS);
    let id = start_one(&server, Some(ALICE), sleep_call("s", 60_000)).await;
    let (_, unknown) = get_task(&server, Some(BOB), "0123456789abcdef0123456789abcdef").await;
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, body) = task_request(&server, method.clone(), Some(BOB), &id).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {body}");
        // The same answer as an id that does not exist: nothing revealed.
        assert_eq!(body, unknown, "{method}");
    }
    let (status, task) = get_task(&server, Some(ALICE), &id).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        task["state"], "working",
        "bob's DELETE changed nothing: {task}"
    );
    // Its owner cancels it: the call stops, and the task says so.
    let (status, task) = task_request(&server, reqwest::Method::DELETE, Some(ALICE), &id).await;
    assert_eq!(status, StatusCode::OK, "{task}");
    assert_eq!(task["state"], "cancelled", "{task}");
    let stopped = wait_for_metric_as_ops(&server, "toolhost_instances_in_flight", 0.0).await;
    assert!(stopped, "the cancelled call kept running");
    let (status, body) = task_request(&server, reqwest::Method::DELETE, Some(ALICE), &id).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{body}"
    );
}

#[tokio::test]
async fn a_flood_past_max_per_principal_is_429_and_starts_nothing() {
    let serve = format!("{TWO_PRINCIPALS}[serve.tasks]\nmax_per_principal = 2\n");
    let server = Server::start_with_env(&tasks_manifest(false, &serve), &[], &TOKENS);
    let first = start_one(&server, Some(ALICE), sleep_call("a", 60_000)).await;
    // A batch that would go past the bound starts none of its calls.
    let (status, body) = start_tasks(
        &server,
        Some(ALICE),
        &json!([sleep_call("b", 60_000), sleep_call("c", 60_000)]),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["type"], "too_many_tasks", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("max_per_principal"), "{message}");
    assert!(
        message.contains("nothing of this request was started"),
        "{message}"
    );
    let second = start_one(&server, Some(ALICE), sleep_call("b", 60_000)).await;
    let (status, _) = start_tasks(&server, Some(ALICE), &json!([calc("c", "1")])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // Alice's bound is hers: bob still starts tasks.
    start_one(&server, Some(BOB), calc("bob", "1")).await;
    let running = wait_for_metric_as_ops(&server, "toolhost_instances_in_flight", 2.0).await;
    assert!(running, "alice's two sleeps never ran");
    // A task cancelled no longer counts.
    let (status, _) = task_request(&server, reqwest::Method::DELETE, Some(ALICE), &first).await;
    assert_eq!(status, StatusCode::OK);
    start_one(&server, Some(ALICE), calc("d", "1")).await;
    let (_, task) = get_task(&server, Some(ALICE), &second).await;
    assert_eq!(task["state"], "working", "{task}");
}

#[tokio::test]
async fn a_finished_task_is_forgotten_after_its_ttl() {
    let server = Server::start(&tasks_manifest(false, "[serve.tasks]\nttl = \"1s\"\n"), &[]);
    let id = start_one(&server, None, calc("c", "1+1")).await;
    wait_for_task(&server, None, &id, state_is("completed")).await;
    let forgotten = eventually(WAIT, || async {
        get_task(&server, None, &id).await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert!(forgotten, "the task outlived its ttl");
}

/// `[serve.tasks]` on `redis`, with `extra` keys.
fn on_redis(extra: &str) -> String {
    format!("[serve.tasks]\nredis = {{ env = \"TASKS_REDIS\" }}\n{extra}")
}

#[tokio::test]
async fn a_task_started_on_one_replica_is_read_and_cancelled_on_another() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = tasks_manifest(false, &on_redis(""));
    let one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    let id = start_one(&one, None, calc("c", "6*7")).await;
    let done = wait_for_task(&two, None, &id, state_is("completed")).await;
    assert_eq!(done["result"]["content"], "42", "{done}");
    // A task running on one is cancelled through the other: its call stops
    // at its replica's next renewal.
    let long = start_one(&one, None, sleep_call("s", 60_000)).await;
    let running = one
        .wait_for_metric("toolhost_instances_in_flight", 1.0, WAIT)
        .await;
    assert!(running.is_some(), "{}", one.stderr());
    let (status, task) = task_request(&two, reqwest::Method::DELETE, None, &long).await;
    assert_eq!(status, StatusCode::OK, "{task}");
    let stopped = one
        .wait_for_metric("toolhost_instances_in_flight", 0.0, WAIT)
        .await;
    assert!(
        stopped.is_some(),
        "the call cancelled elsewhere kept running"
    );
    let (_, task) = get_task(&one, None, &long).await;
    assert_eq!(task["state"], "cancelled", "{task}");
}

#[tokio::test]
async fn a_finished_task_is_forgotten_by_redis_after_its_ttl() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let server = Server::start_with_env(
        &tasks_manifest(false, &on_redis("ttl = \"1s\"\n")),
        &[],
        &env,
    );
    let id = start_one(&server, None, calc("c", "6*7")).await;
    wait_for_task(&server, None, &id, state_is("completed")).await;
    let forgotten = eventually(WAIT, || async {
        get_task(&server, None, &id).await.0 == StatusCode::NOT_FOUND
    })
    .await;
    assert!(forgotten, "the task outlived its ttl in Redis");
}

/// Start a minute's sleep on `one` and kill it (SIGKILL) mid-call: the
/// task's id.
async fn killed_mid_task(one: &mut Server, ms: u64) -> String {
    let id = start_one(one, None, sleep_call("s", ms)).await;
    let running = one
        .wait_for_metric("toolhost_instances_in_flight", 1.0, WAIT)
        .await;
    assert!(running.is_some(), "{}", one.stderr());
    one.child.kill().unwrap();
    one.child.wait().unwrap();
    id
}

#[tokio::test]
async fn a_killed_replicas_task_fails_on_another_after_its_lease() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = tasks_manifest(false, &on_redis("lease = \"1s\"\n"));
    let mut one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    let id = killed_mid_task(&mut one, 60_000).await;
    let failed = wait_for_task(&two, None, &id, |t| t["state"] != "working").await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert_eq!(failed["error"]["type"], "task_failed", "{failed}");
    assert_eq!(
        failed["error"]["message"],
        "the server running this task stopped before it finished; the call may or may not have \
         taken effect: check before running it again",
        "{failed}"
    );
    // Not idempotent: never run again.
    let metrics = two.metrics().await;
    assert_eq!(
        metric(&metrics, "toolhost_instances_in_flight"),
        Some(0.0),
        "{metrics}"
    );
}

#[tokio::test]
async fn an_idempotent_tools_task_is_run_again_once_by_another_replica() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = tasks_manifest(true, &on_redis("lease = \"1s\"\n"));
    let mut one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    let three = Server::start_with_env(&text, &[], &env);
    let id = killed_mid_task(&mut one, 2_000).await;
    // Two replicas poll at once: one of them takes the task over.
    let (a, b) = tokio::join!(
        wait_for_task(&two, None, &id, state_is("completed")),
        wait_for_task(&three, None, &id, state_is("completed")),
    );
    assert_eq!(a["result"]["content"], "awake", "{a}");
    assert_eq!(a, b);
    let series = r#"toolhost_tool_calls_total{tool="sleep",outcome="success",front_end="http"}"#;
    let runs: f64 = [&two, &three]
        .into_iter()
        .map(|server| async { metric(&server.metrics().await, series).unwrap_or(0.0) })
        .collect::<futures::future::JoinAll<_>>()
        .await
        .into_iter()
        .sum();
    assert_eq!(runs, 1.0, "run again exactly once");
}

#[tokio::test]
async fn sigterm_lets_a_task_finish_within_the_drain_and_leaves_a_longer_one_to_its_lease() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = tasks_manifest(false, &on_redis("lease = \"1s\"\n"));
    let two = Server::start_with_env(&text, &[], &env);
    for (drain, ms, want) in [("30s", 1_500, "completed"), ("1s", 60_000, "failed")] {
        let mut one = Server::start_with_env(&text, &["--drain", drain], &env);
        let id = start_one(&one, None, sleep_call("s", ms)).await;
        let running = one
            .wait_for_metric("toolhost_instances_in_flight", 1.0, WAIT)
            .await;
        assert!(running.is_some(), "{}", one.stderr());
        let pid = rustix::process::Pid::from_child(&one.child);
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        let exit = wait_exit_async(&mut one.child, WAIT).await;
        assert_eq!(exit.and_then(|s| s.code()), Some(0), "{}", one.stderr());
        let task = wait_for_task(&two, None, &id, |t| t["state"] != "working").await;
        assert_eq!(task["state"], want, "drain {drain}: {task}");
    }
}

#[tokio::test]
async fn a_batch_the_limiter_refuses_is_429_and_keeps_no_task() {
    let serve = "[serve.limits]\nper_principal = { concurrency = 2 }\n\
                 [serve.tasks]\nmax_per_principal = 3\n";
    let server = Server::start(&tasks_manifest(false, serve), &[]);
    let first = start_one(&server, None, sleep_call("a", 60_000)).await;
    // Two more would be three calls at once, past the cap of 2: refused,
    // like a synchronous batch, and neither task is kept.
    let (status, body) = start_tasks(
        &server,
        None,
        &json!([sleep_call("b", 60_000), sleep_call("c", 60_000)]),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["type"], "rate_limited", "{body}");
    let (status, _) = task_request(&server, reqwest::Method::DELETE, None, &first).await;
    assert_eq!(status, StatusCode::OK);
    // The cancelled call gives back its concurrency slot once its instance
    // has stopped, a moment after the DELETE is answered: wait for what
    // the server reports, not for a time.
    let stopped = server
        .wait_for_metric("toolhost_instances_in_flight", 0.0, Duration::from_secs(20))
        .await;
    assert!(
        stopped.is_some(),
        "the cancelled call still runs\n{}",
        server.stderr()
    );
    // Had the refused two been kept, these two would pass the bound of 3
    // (`too_many_tasks`). The slot itself is given back just after the
    // instance stops: a concurrency refusal meanwhile is tried again.
    let batch = json!([calc("d", "1"), calc("e", "2")]);
    let (mut status, mut body) = start_tasks(&server, None, &batch).await;
    for _ in 0..100 {
        if status != StatusCode::TOO_MANY_REQUESTS || body["error"]["type"] != "rate_limited" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        (status, body) = start_tasks(&server, None, &batch).await;
    }
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

#[tokio::test]
async fn a_task_store_that_cannot_be_reached_is_503_and_runs_nothing() {
    // A port nobody listens on: taken, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://127.0.0.1:{port}");
    let server = Server::start_with_env(
        &tasks_manifest(false, &on_redis("")),
        &[],
        &[("TASKS_REDIS", url.as_str())],
    );
    let (status, body) = start_tasks(&server, None, &json!([calc("c", "1")])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["type"], "unavailable", "{body}");
    let metrics = server.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"toolhost_tool_calls_total{tool="calc",outcome="success",front_end="http"}"#
        ),
        None,
        "{metrics}"
    );
    let (status, _) = get_task(&server, None, "0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test]
async fn tasks_in_a_file_outlive_their_server_and_a_task_it_was_running_fails_after_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tasks.redb");
    let serve = format!(
        "[serve.tasks]\npath = '{}'\nlease = \"1s\"\n",
        file.display()
    );
    let text = tasks_manifest(false, &serve);
    let mut first = Server::start(&text, &[]);
    let done = start_one(&first, None, calc("c", "6*7")).await;
    wait_for_task(&first, None, &done, state_is("completed")).await;
    // The file is this server's: a second one refuses to start, saying why.
    let manifest = dir.path().join("toolhost.toml");
    std::fs::write(&manifest, &text).unwrap();
    let output = toolhost(&manifest, &["serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("another process holds this task file"),
        "{stderr}"
    );
    let id = killed_mid_task(&mut first, 60_000).await;
    let second = Server::start(&text, &[]);
    let kept = wait_for_task(&second, None, &done, state_is("completed")).await;
    assert_eq!(kept["result"]["content"], "42", "{kept}");
    let failed = wait_for_task(&second, None, &id, |t| t["state"] != "working").await;
    assert_eq!(failed["state"], "failed", "{failed}");
}

#[tokio::test]
async fn an_answer_over_max_result_is_kept_as_an_error_saying_so() {
    let server = Server::start(
        &tasks_manifest(false, "[serve.tasks]\nmax_result = \"1KiB\"\n"),
        &[],
    );
    let big = json!({"id": "big", "name": "output", "args": {"n": 4000}});
    let small = json!({"id": "small", "name": "output", "args": {"n": 10}});
    let (status, started) = start_tasks(&server, None, &json!([big, small])).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let big = started[0]["id"].as_str().unwrap();
    let small = started[1]["id"].as_str().unwrap();
    let done = wait_for_task(&server, None, big, state_is("completed")).await;
    assert_eq!(done["result"]["is_error"], true, "{done}");
    assert_eq!(
        done["result"]["error"]["type"], "memory_exhausted",
        "{done}"
    );
    let message = done["result"]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("more than the 1024 a task keeps") && message.contains("max_result"),
        "{message}"
    );
    let done = wait_for_task(&server, None, small, state_is("completed")).await;
    assert_eq!(done["result"]["content"], "xxxxxxxxxx", "{done}");
}

#[tokio::test]
async fn without_auth_one_address_cannot_take_every_task_slot() {
    let server = Server::start(
        &tasks_manifest(false, "[serve.tasks]\nmax_per_principal = 1\n"),
        &[],
    );
    start_one(&server, None, sleep_call("a", 60_000)).await;
    let (status, body) = start_tasks(&server, None, &json!([sleep_call("b", 60_000)])).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("counted per client address"), "{message}");
    // Another address of the loopback network is another client: its
    // slot is its own.
    let other = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let response = other
        .post(server.url("/v1/tool_calls?async=1"))
        .json(&json!([calc("c", "1+1")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
}

/// Pause every client of `redis` (commands wait, as on a stalled server)
/// for `ms`.
async fn pause_redis(url: &str, ms: u64) {
    let client = ::redis::Client::open(url).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let () = ::redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(ms)
        .arg("ALL")
        .query_async(&mut connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_replica_cut_off_from_redis_past_its_lease_stops_its_call_before_another_fails_it() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = tasks_manifest(false, &on_redis("lease = \"1s\"\n"));
    let one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    let id = start_one(&one, None, sleep_call("s", 60_000)).await;
    let running = one
        .wait_for_metric("toolhost_instances_in_flight", 1.0, WAIT)
        .await;
    assert!(running.is_some(), "{}", one.stderr());
    // Three leases without a renewal: the replica stops the call itself.
    pause_redis(&url, 3_000).await;
    let fenced = one
        .wait_for_metric(
            r#"toolhost_tasks_total{event="fenced",store="redis"}"#,
            1.0,
            WAIT,
        )
        .await;
    assert!(fenced.is_some(), "{}", one.stderr());
    let stopped = one
        .wait_for_metric("toolhost_instances_in_flight", 0.0, WAIT)
        .await;
    assert!(stopped.is_some(), "the fenced call kept running");
    // Once Redis answers (503 until then), the task is failed wherever it
    // is read, saying the call may have taken effect; nothing runs it
    // twice.
    let answered = eventually(WAIT, || async {
        let (status, task) = get_task(&two, None, &id).await;
        status == StatusCode::OK && task["state"] != "working"
    })
    .await;
    assert!(answered, "{}", two.stderr());
    let (_, failed) = get_task(&two, None, &id).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("may or may not have taken effect"),
        "{message}"
    );
    let (_, again) = get_task(&one, None, &id).await;
    assert_eq!(again["state"], "failed", "{again}");
}

#[tokio::test]
async fn cancelling_a_dead_replicas_idempotent_task_does_not_run_it_again() {
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = tasks_manifest(true, &on_redis("lease = \"1s\"\n"));
    let mut one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    let id = killed_mid_task(&mut one, 60_000).await;
    // Past the lease, without reading it first.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (status, task) = task_request(&two, reqwest::Method::DELETE, None, &id).await;
    assert_eq!(status, StatusCode::OK, "{task}");
    assert_eq!(task["state"], "cancelled", "{task}");
    let metrics = two.metrics().await;
    assert_eq!(
        metric(
            &metrics,
            r#"toolhost_tasks_total{event="rerun",store="redis"}"#
        ),
        None,
        "{metrics}"
    );
    assert_eq!(metric(&metrics, "toolhost_instances_in_flight"), Some(0.0));
}

#[tokio::test]
async fn a_rerun_is_refused_when_its_owner_no_longer_holds_the_tools_scope() {
    let redis = RedisServer::start();
    let url = redis.url();
    let tasks = on_redis("lease = \"1s\"\n");
    let env = [
        ("TASKS_REDIS", url.as_str()),
        TOKENS[0],
        TOKENS[1],
        TOKENS[2],
    ];
    let mut one = Server::start_with_env(
        &tasks_manifest(true, &format!("{TWO_PRINCIPALS}{tasks}")),
        &[],
        &env,
    );
    // The second replica runs a newer configuration: alice may call calc
    // only.
    let narrowed = TWO_PRINCIPALS.replace(
        "env = \"ALICE_TOKEN\"\n",
        "env = \"ALICE_TOKEN\"\nscopes = [\"tools:calc\"]\n",
    );
    let two = Server::start_with_env(
        &tasks_manifest(true, &format!("{narrowed}{tasks}")),
        &[],
        &env,
    );
    let id = start_one(&one, Some(ALICE), sleep_call("s", 2_000)).await;
    let running = wait_for_metric_as_ops(&one, "toolhost_instances_in_flight", 1.0).await;
    assert!(running, "{}", one.stderr());
    one.child.kill().unwrap();
    one.child.wait().unwrap();
    let failed = wait_for_task(&two, Some(ALICE), &id, |t| t["state"] != "working").await;
    assert_eq!(failed["state"], "failed", "{failed}");
    let message = failed["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("running it again was refused") && message.contains("tools:sleep"),
        "{message}"
    );
}

#[tokio::test]
async fn idempotent_false_on_the_entry_overrides_the_tools_hint() {
    // A listener that never answers: the fetch waits until killed.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let redis = RedisServer::start();
    let url = redis.url();
    let env = [("TASKS_REDIS", url.as_str())];
    let text = format!(
        "[[tool]]\ncomponent = '{}'\nallow_hosts = [\"http://127.0.0.1:{port}\"]\n\
         limits = {SLEEPY_PROBE}\nidempotent = false\n\n{}",
        component("probe").display(),
        on_redis("lease = \"1s\"\n"),
    );
    let mut one = Server::start_with_env(&text, &[], &env);
    let two = Server::start_with_env(&text, &[], &env);
    let call = json!({"id": "f", "name": "fetch_cacheable",
                      "args": {"name": format!("http://127.0.0.1:{port}/")}});
    let id = start_one(&one, None, call).await;
    let running = one
        .wait_for_metric("toolhost_instances_in_flight", 1.0, WAIT)
        .await;
    assert!(running.is_some(), "{}", one.stderr());
    one.child.kill().unwrap();
    one.child.wait().unwrap();
    // Hinted idempotent, but the operator said no: failed, not run again.
    let failed = wait_for_task(&two, None, &id, |t| t["state"] != "working").await;
    assert_eq!(failed["state"], "failed", "{failed}");
    drop(silent);
}
