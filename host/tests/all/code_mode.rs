//! Code mode end to end: the code tool (`builtin-tools/code`, `run_code`)
//! runs programs whose functions are the tools its grant names, through the
//! host's dispatcher. Each bad input of issue 28 ends in its typed outcome,
//! with a message that says what happened, and changes nothing.

use std::time::Duration;

use serde_json::{Value, json};
use toolhost::{ComponentConfig, ErrorType, Grants, Limits, Outcome, ToolCalls, ToolHost};

use crate::util::*;

/// Limits a JavaScript component runs under: the engine needs more memory
/// and fuel than a Rust tool, and interprets (10,000 calls in one program
/// cost about 1.2 billion fuel on its side).
fn js_limits() -> Limits {
    quick_limits()
        .with_memory(256 << 20)
        .unwrap()
        .with_fuel(5_000_000_000)
        .unwrap()
        .with_timeout(Duration::from_secs(30))
        .unwrap()
}

/// The code tool granted `calls`, beside calc and units-js.
async fn code_host(calls: ToolCalls, limits: Limits) -> ToolHost {
    host(vec![
        ComponentConfig::new(component("code"))
            .grants(Grants::none().call_tools(calls))
            .limits(limits),
        ComponentConfig::new(component("calc")).limits(quick_limits()),
        ComponentConfig::new(component("units-js")).limits(js_limits()),
    ])
    .await
}

/// The code tool granted calc and convert_units, with the default budget.
async fn calc_host() -> ToolHost {
    code_host(
        ToolCalls::new(["calc", "convert_units"]).unwrap(),
        js_limits(),
    )
    .await
}

async fn run(host: &ToolHost, code: &str) -> Outcome {
    call(host, "run_code", json!({ "code": code })).await
}

/// The value the program returned; panics when it failed.
#[track_caller]
fn result(outcome: &Outcome) -> Value {
    match &outcome.result {
        Ok(output) => output.structured.as_ref().expect("structured output")["result"].clone(),
        Err(e) => panic!("expected success, got {e:?}"),
    }
}

/// The console lines of a successful run.
#[track_caller]
fn logs(outcome: &Outcome) -> Vec<String> {
    let output = outcome.result.as_ref().expect("success");
    serde_json::from_value(output.structured.as_ref().unwrap()["logs"].clone()).unwrap()
}

/// The code tool's own error kind (`program_error`, or an uncaught call's
/// kind) and its message; panics unless the run failed with a tool error.
#[track_caller]
fn tool_error(outcome: &Outcome) -> (String, String) {
    let error = outcome.result.as_ref().expect_err("expected an error");
    assert_eq!(error.kind, ErrorType::ToolError, "{error:?}");
    (
        error.tool_kind.clone().unwrap_or_default(),
        error.message.clone(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_calls_the_granted_tools_in_parallel_and_returns_json() {
    let host = calc_host().await;
    let outcome = run(
        &host,
        "const exprs = ['6*7', '2^10', '1/4'];\n\
         const values = await Promise.all(exprs.map((expression) => tools.calc({ expression })));\n\
         const km = await tools.convert_units({ value: 10, from: 'km', to: 'm' });\n\
         console.log('done');\n\
         return { values: values.map((v) => v.value), km: km.value };",
    )
    .await;
    assert_eq!(
        result(&outcome),
        json!({ "values": [42, 1024, 0.25], "km": 10000 })
    );
    assert_eq!(logs(&outcome), ["done"]);
    let text = ok(&outcome);
    assert!(
        text.starts_with(r#"{"values":[42,1024,0.25],"km":10000}"#),
        "{text}"
    );
    assert!(text.contains("console output:\ndone"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_codes_description_fits_openais_cap_and_its_code_argument_declares_the_tools() {
    let host = calc_host().await;
    let spec = host.spec("run_code").unwrap();
    // OpenAI refuses a request whose tool description is over 1,024
    // characters; argument descriptions have no cap.
    assert!(
        spec.description.chars().count() <= 1024,
        "{} characters",
        spec.description.chars().count()
    );
    assert!(
        spec.description
            .ends_with("declared, as TypeScript, in the description of its `code` argument."),
        "{}",
        spec.description
    );
    let code = spec.input_schema["properties"]["code"]["description"]
        .as_str()
        .unwrap();
    assert!(code.contains("declare const tools: {"), "{code}");
    assert!(code.contains("  calc(args: {"), "{code}");
    assert!(code.contains("  convert_units(args: {"), "{code}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_not_awaited_is_named_and_its_failure_is_not_dropped() {
    let host = calc_host().await;
    let (kind, message) = tool_error(
        &run(
            &host,
            "const r = tools.calc({ expression: '6*7' });\nconsole.log(r.value);\nreturn r.value;",
        )
        .await,
    );
    assert_eq!(kind, "invalid_result");
    assert!(
        message.contains("The program called tools.calc without await (once)"),
        "{message}"
    );
    let (kind, message) =
        tool_error(&run(&host, "tools.calc({ expression: '6*' });\nreturn 1;").await);
    assert_eq!(kind, "invalid_input");
    assert!(message.contains("Nothing awaited this call"), "{message}");
    // Awaited, but by a function nothing waited for.
    let (kind, message) = tool_error(
        &run(
            &host,
            "let t = 0;\n['1', '6*'].forEach(async (e) => { t += (await tools.calc({ expression: e })).value; });\nreturn t;",
        )
        .await,
    );
    assert_eq!(kind, "invalid_input");
    assert!(
        message.contains("The program returned before this call ended"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_awaiting_a_promise_that_never_settles_is_told_so() {
    let host = calc_host().await;
    let outcome = run(&host, "await new Promise(() => {});\nreturn 1;").await;
    let error = outcome.result.as_ref().expect_err("it cannot succeed");
    assert_eq!(error.kind, ErrorType::Trap, "{error:?}");
    assert!(
        error
            .message
            .contains("awaited a promise that never settles"),
        "{error:?}"
    );
    // The next run is unaffected.
    assert_eq!(result(&run(&host, "return 2;").await), json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_and_function_expressions_run() {
    let host = calc_host().await;
    let ts = run(
        &host,
        "interface Calc { value: number }\n\
         const r = (await tools.calc({ expression: '6*7' })) as Calc;\n\
         return r.value satisfies number;",
    )
    .await;
    assert_eq!(result(&ts), json!(42));
    let arrow = run(
        &host,
        "async () => (await tools.calc({ expression: '1+1' })).value",
    )
    .await;
    assert_eq!(result(&arrow), json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syntax_error_names_its_line() {
    let host = calc_host().await;
    let (kind, message) = tool_error(&run(&host, "const a = 1;\nreturn a +* 2;").await);
    assert_eq!(kind, "syntax_error");
    assert!(message.contains("at line 2, column"), "{message}");
    // The line is quoted, so the model sees what to fix.
    assert!(message.ends_with(": `return a +* 2;`"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_loops_forever_runs_out_of_fuel() {
    let host = calc_host().await;
    let outcome = run(&host, "while (true) {}").await;
    let kind = err(&outcome);
    assert!(
        matches!(kind, ErrorType::FuelExhausted | ErrorType::Timeout),
        "{kind:?}"
    );
    // The instance is gone, not the tool: the next run works.
    assert_eq!(result(&run(&host, "return 1").await), json!(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_allocates_without_end_runs_out_of_memory() {
    let host = calc_host().await;
    // Buffers grow the instance's memory until the host's limit refuses.
    let outcome = run(
        &host,
        "const hoard = [];\nwhile (true) hoard.push(new Uint8Array(1 << 24));",
    )
    .await;
    assert_eq!(
        err(&outcome),
        ErrorType::MemoryExhausted,
        "{:?}",
        outcome.result
    );
    assert_eq!(result(&run(&host, "return 1").await), json!(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_is_a_program_error() {
    let host = calc_host().await;
    let (kind, message) = tool_error(
        &run(
            &host,
            "function down(n) { return down(n + 1) + 1; }\nreturn down(0);",
        )
        .await,
    );
    assert_eq!(kind, "program_error");
    assert!(
        message.contains("InternalError: too much recursion (line 1)"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_keeps_the_first_lines_and_counts_the_rest() {
    let host = calc_host().await;
    let outcome = run(
        &host,
        "for (let i = 0; i < 20000; i++) console.log('line ' + i);\nreturn 'done';",
    )
    .await;
    assert_eq!(result(&outcome), json!("done"));
    let lines = logs(&outcome);
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[0], "line 0");
    assert_eq!(lines[200], "… 19800 more lines dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_are_not_errors_are_described() {
    let host = calc_host().await;
    for (code, expected) in [
        ("throw 42", "the program threw the number 42, not an Error"),
        ("throw null", "the program threw null, not an Error"),
        (
            "throw { toString() { throw 1; } }",
            "the program threw the object {}, not an Error",
        ),
        (
            "throw { toJSON() { throw 1; } }",
            "the program threw an object that cannot be shown, not an Error",
        ),
        (
            "throw new Proxy({}, { get() { throw 1; }, getPrototypeOf() { throw 2; } })",
            "the program threw a value that cannot be inspected (a Proxy that throws), not an Error",
        ),
        (
            "throw new TypeError('bad')",
            "the program threw TypeError: bad (line 1)",
        ),
    ] {
        let (kind, message) = tool_error(&run(&host, code).await);
        assert_eq!(kind, "program_error", "{code}");
        assert!(message.starts_with(expected), "{code}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_that_are_not_json_are_refused_with_their_path() {
    let host = calc_host().await;
    for (code, expected) in [
        (
            "const a = { n: 1 }; a.self = a; return a;",
            "result.self is a cycle",
        ),
        (
            "return { big: 2n ** 64n };",
            "result.big is a BigInt (18446744073709551616n)",
        ),
        (
            "return { items: [1, 2, 3, () => 1] };",
            "result.items[3] is a function",
        ),
        (
            "const x = 1;",
            "the program returned nothing: end it with `return VALUE`",
        ),
        ("return [undefined];", "result[0] is undefined"),
        (
            "return tools.calc({ expression: '1' }).then((r) => ({ r, p: Promise.resolve(1) }));",
            "result.p is a Promise",
        ),
    ] {
        let (kind, message) = tool_error(&run(&host, code).await);
        assert_eq!(kind, "invalid_result", "{code}");
        assert!(message.contains(expected), "{code}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_are_typed_errors_the_program_can_catch() {
    let host = code_host(ToolCalls::new(["calc"]).unwrap(), js_limits()).await;
    let outcome = run(
        &host,
        "const attempts = [\n\
           () => tools.convert_units({ value: 1, from: 'km', to: 'm' }),\n\
           () => tools.no_such_tool({}),\n\
           () => tools.calc({ expression: 42 }),\n\
           () => tools.calc([1, 2]),\n\
         ];\n\
         const out = [];\n\
         for (const attempt of attempts) {\n\
           try { await attempt(); out.push('called'); }\n\
           catch (e) { out.push(`${e.name} ${e.kind ?? ''}`.trim()); }\n\
         }\n\
         return out;",
    )
    .await;
    assert_eq!(
        result(&outcome),
        json!([
            "ToolCallError capability_denied",
            "ToolCallError unknown_tool",
            "ToolCallError invalid_arguments",
            "TypeError"
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncaught_refusal_is_the_runs_error_naming_the_tool() {
    let host = code_host(ToolCalls::new(["calc"]).unwrap(), js_limits()).await;
    let (kind, message) = tool_error(
        &run(
            &host,
            "await tools.convert_units({ value: 1, from: 'km', to: 'm' });\nreturn 1;",
        )
        .await,
    );
    assert_eq!(kind, "capability_denied");
    assert!(
        message.starts_with("tools.convert_units failed (capability_denied): "),
        "{message}"
    );
    assert!(
        message.contains("The program did not catch it; it can"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_code_tool_cannot_call_a_code_tool() {
    let host = code_host(ToolCalls::new(["*"]).unwrap(), js_limits()).await;
    let outcome = run(
        &host,
        "try { await tools.run_code({ code: 'return 1' }); return 'called'; } catch (e) { return e.kind; }",
    )
    .await;
    assert_eq!(result(&outcome), json!("capability_denied"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_budget_are_budget_exhausted() {
    let calls = ToolCalls::new(["calc"]).unwrap().max_calls(5).unwrap();
    let host = code_host(calls, js_limits()).await;
    let outcome = run(
        &host,
        "const kinds = [];\n\
         for (let i = 0; i < 8; i++) {\n\
           try { await tools.calc({ expression: String(i) }); kinds.push('ok'); }\n\
           catch (e) { kinds.push(e.kind); }\n\
         }\n\
         return kinds;",
    )
    .await;
    assert_eq!(
        result(&outcome),
        json!([
            "ok",
            "ok",
            "ok",
            "ok",
            "ok",
            "budget_exhausted",
            "budget_exhausted",
            "budget_exhausted"
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_promise_all_gets_the_budget_and_no_more() {
    let host = calc_host().await;
    let outcome = run(
        &host,
        "const calls = Array.from({ length: 10000 }, (_, i) => tools.calc({ expression: String(i) }));\n\
         const settled = await Promise.allSettled(calls);\n\
         const count = (kind) => settled.filter((s) => (s.status === 'fulfilled' ? 'ok' : s.reason.kind) === kind).length;\n\
         return { ok: count('ok'), budget_exhausted: count('budget_exhausted') };",
    )
    .await;
    assert_eq!(
        result(&outcome),
        json!({ "ok": 50, "budget_exhausted": 9950 })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escapes_fail_with_errors_that_say_why() {
    let host = calc_host().await;
    let (kind, message) = tool_error(&run(&host, "await import('/etc/passwd');\nreturn 1;").await);
    assert_eq!(kind, "syntax_error");
    assert!(
        message.starts_with("import is not available in run_code"),
        "{message}"
    );

    let outcome = run(
        &host,
        "const tryIt = (f) => { try { return String(f()); } catch (e) { return `${e.name}: ${e.message}`; } };\n\
         return {\n\
           eval: tryIt(() => eval('typeof tools + \" \" + (1 + 1)')),\n\
           evalImport: tryIt(() => eval('import(\"x\")')),\n\
           functionImport: tryIt(() => new Function('return import(\"x\")')),\n\
           require: tryIt(() => require('fs')),\n\
           fetch: tryIt(() => fetch('http://127.0.0.1/')),\n\
           setTimeout: tryIt(() => setTimeout(() => 1, 10)),\n\
           setInterval: tryIt(() => setInterval(() => 1, 10)),\n\
           now: tryIt(() => Date.now()),\n\
           webAssembly: typeof WebAssembly,\n\
         };",
    )
    .await;
    let escapes = result(&outcome);
    assert_eq!(escapes["eval"], "undefined 2");
    for key in ["evalImport", "functionImport"] {
        assert!(
            escapes[key]
                .as_str()
                .unwrap()
                .starts_with("SyntaxError: import is not available in run_code"),
            "{key}: {escapes}"
        );
    }
    assert_eq!(escapes["require"], "ReferenceError: require is not defined");
    assert!(
        escapes["fetch"]
            .as_str()
            .unwrap()
            .starts_with("Error: fetch is not available in run_code: the program has no network"),
        "{escapes}"
    );
    for key in ["setTimeout", "setInterval"] {
        assert!(
            escapes[key]
                .as_str()
                .unwrap()
                .contains("is not available in run_code: there are no timers"),
            "{key}: {escapes}"
        );
    }
    assert!(
        escapes["now"]
            .as_str()
            .unwrap()
            .contains("there is no clock"),
        "{escapes}"
    );
    assert_eq!(escapes["webAssembly"], "undefined");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cannot_read_another_runs_state() {
    let host = calc_host().await;
    let first = run(
        &host,
        "globalThis.secret = 'run 1';\nObject.prototype.polluted = true;\nreturn typeof globalThis.secret;",
    )
    .await;
    assert_eq!(result(&first), json!("string"));
    let second = run(
        &host,
        "return [typeof globalThis.secret, typeof {}.polluted];",
    )
    .await;
    assert_eq!(result(&second), json!(["undefined", "undefined"]));
}
