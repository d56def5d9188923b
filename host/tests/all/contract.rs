//! The contract: specs at load, and calls the host refuses before any tool
//! is instantiated.

use serde_json::json;
use toolhost::ErrorType;
use toolhost::Grants;
use toolhost::{ComponentConfig, ToolCall, ToolHost};

use crate::util::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn specs_carry_the_schema_derived_from_the_arguments_struct() {
    let host = host(vec![ComponentConfig::new(component("calc"))]).await;
    let spec = host.spec("calc").expect("calc is loaded");
    assert_eq!(spec.input_schema["type"], "object");
    assert_eq!(spec.input_schema["required"], json!(["expression"]));
    assert_eq!(
        spec.input_schema["properties"]["expression"]["type"],
        "string"
    );
    assert!(spec.hints.read_only && spec.hints.idempotent && !spec.hints.destructive);
    assert!(spec.output_schema.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tool_lists_the_available_ones() {
    let host = host(vec![ComponentConfig::new(component("calc"))]).await;
    let outcome = call(&host, "calculator", json!({})).await;
    assert_eq!(err(&outcome), ErrorType::UnknownTool);
    assert_eq!(
        message(&outcome),
        "no tool is named \"calculator\"; available tools: calc"
    );
    assert!(outcome.result.as_ref().unwrap_err().retryable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_are_not_json_are_invalid_and_never_run() {
    let host = host(vec![ComponentConfig::new(component("calc"))]).await;
    let outcome = host
        .call(ToolCall::with_raw_arguments(
            "c",
            "calc",
            "{\"expression\": 6*7}",
        ))
        .await;
    assert_eq!(err(&outcome), ErrorType::InvalidArguments);
    assert!(
        message(&outcome).starts_with("arguments are not valid JSON"),
        "{}",
        message(&outcome)
    );
    assert_eq!(outcome.stats.fuel_used, 0, "the tool must not have run");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments_that_break_the_schema_name_the_field() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let outcome = call(
        &host,
        "echo",
        json!({"text": "hi", "times": 0, "extra": true}),
    )
    .await;
    assert_eq!(err(&outcome), ErrorType::InvalidArguments);
    let message = message(&outcome);
    assert!(
        message.contains("at /times") && message.contains("minimum of 1"),
        "{message}"
    );
    assert!(message.contains("extra"), "{message}");
    assert_eq!(outcome.stats.fuel_used, 0, "the tool must not have run");
    let missing = call(&host, "echo", json!({"times": 2})).await;
    assert!(crate::util::message(&missing).contains("\"text\" is a required property"));
    assert_eq!(
        ok(&call(&host, "echo", json!({"text": "ab", "times": 2})).await),
        "abab"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_keep_the_tools_kind_and_retry_hint() {
    let host = host(vec![ComponentConfig::new(component("calc"))]).await;
    let outcome = call(&host, "calc", json!({"expression": "2 +"})).await;
    assert_eq!(err(&outcome), ErrorType::ToolError);
    let error = outcome.result.as_ref().unwrap_err();
    assert_eq!(error.tool_kind.as_deref(), Some("invalid_input"));
    assert!(error.retryable);
    assert_eq!(
        outcome.content(),
        "Error: tool 'calc' failed (invalid_input): the expression ends too early"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_context_reaches_the_tool() {
    let host = probe_host(Grants::none(), quick_limits()).await;
    let outcome = host
        .call(ToolCall::new("call_abc", "context", json!({})))
        .await;
    // The time left when the tool starts: the 5 s timeout less the few
    // microseconds spent checking the arguments.
    let content = ok(&outcome);
    let (id, left) = content.split_once(' ').unwrap();
    assert_eq!(id, "call_abc");
    let left: u64 = left.parse().unwrap();
    assert!((4900..=5000).contains(&left), "{content}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_tool_names_across_components_fail_the_load() {
    let result = ToolHost::load_components(
        vec![
            ComponentConfig::new(component("calc")),
            ComponentConfig::new(component("calc")),
        ],
        options(),
    )
    .await;
    let error = result.expect_err("two components provide calc").to_string();
    assert!(
        error.contains("tool name \"calc\" is already provided by calc.wasm"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_a_component_fails_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.wasm");
    std::fs::write(&path, b"\0asm not really").unwrap();
    let error = ToolHost::load_components(vec![ComponentConfig::new(&path)], options())
        .await
        .expect_err("garbage is not a component")
        .to_string();
    assert!(
        error.starts_with("broken.wasm: broken.wasm is not a valid component"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_tools_need_approval_when_the_manifest_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let grants = Grants::none()
        .file(dir.path(), "/data", toolhost::FileMode::ReadWrite)
        .unwrap();
    let config = ComponentConfig::new(component("files"))
        .grants(grants)
        .approval(toolhost::Approval::Destructive);
    let host = host(vec![config]).await;
    assert!(host.needs_approval("write_file") && !host.needs_approval("read_file"));
    let write = || {
        ToolCall::new(
            "w",
            "write_file",
            json!({"path": "/data/a.txt", "content": "x", "append": null}),
        )
    };
    let refused = host.call(write()).await;
    assert_eq!(err(&refused), ErrorType::DeniedByUser);
    assert!(!dir.path().join("a.txt").exists());
    let approved = host
        .call(write())
        .approver(std::sync::Arc::new(toolhost::ApproveAll))
        .await;
    assert_eq!(ok(&approved), "wrote 1 bytes to /data/a.txt");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_javascript_tools_speak_the_same_contract() {
    let host = host(vec![
        ComponentConfig::new(component("text-py"))
            .limits(quick_limits().with_memory(256 << 20).unwrap()),
        ComponentConfig::new(component("units-js"))
            .grants(Grants::none().config("precision", "2", false))
            .limits(quick_limits().with_memory(256 << 20).unwrap()),
    ])
    .await;
    let words = call(&host, "word_count", json!({"text": "one two three\nfour"})).await;
    let structured = words
        .result
        .as_ref()
        .expect("word_count succeeds")
        .structured
        .clone();
    assert_eq!(structured.unwrap()["words"], 4);
    let slug = call(
        &host,
        "slugify",
        json!({"text": "Hello, World!", "separator": "-"}),
    )
    .await;
    assert_eq!(ok(&slug), "hello-world");
    let empty = call(&host, "slugify", json!({"text": "!!!", "separator": "-"})).await;
    assert_eq!(err(&empty), ErrorType::ToolError);
    let km = ok(&call(
        &host,
        "convert_units",
        json!({"value": 10, "from": "km", "to": "mi"}),
    )
    .await);
    assert_eq!(km, "10 km = 6.21 mi");
    let bad = call(
        &host,
        "convert_units",
        json!({"value": 1, "from": "kg", "to": "m"}),
    )
    .await;
    assert_eq!(err(&bad), ErrorType::ToolError);
    assert_eq!(
        bad.result.unwrap_err().tool_kind.as_deref(),
        Some("invalid_input")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_tool_made_by_componentize_speaks_the_contract() {
    let host = host(vec![ComponentConfig::new(component("base64-c"))]).await;
    let spec = host.spec("base64_encode").expect("listed by tools()");
    assert!(spec.hints.read_only && spec.hints.idempotent);
    assert_eq!(spec.input_schema["required"], json!(["text"]));
    // Escapes, a NUL and a character outside the BMP reach the tool intact.
    let text = "a\"\\\u{0}é😀";
    let encoded = ok(&call(&host, "base64_encode", json!({ "text": text })).await);
    assert_eq!(encoded, "YSJcAMOp8J+YgA==");
    let decoded = ok(&call(&host, "base64_decode", json!({ "text": "aMOpbGxv" })).await);
    assert_eq!(decoded, "héllo");
    let bad = call(&host, "base64_decode", json!({"text": "a*b"})).await;
    let error = bad.result.unwrap_err();
    assert_eq!(error.tool_kind.as_deref(), Some("invalid_input"));
    assert!(
        error.retryable && error.message.contains("'*' at position 1"),
        "{error:?}"
    );
    for (text, expected) in [
        ("é", "byte 0xc3 at position 0"),
        ("QQ==QQ==", "data follows the padding"),
        ("QQQ=Q", "data follows the padding"),
        ("QQQQQ", "do not make whole groups of four"),
    ] {
        let bad = call(&host, "base64_decode", json!({ "text": text })).await;
        let error = bad.result.unwrap_err();
        assert!(error.message.contains(expected), "{text}: {error:?}");
    }
    // Bytes that are not text are refused by the tool, never passed on as a
    // string the canonical ABI would trap on.
    let binary = call(&host, "base64_decode", json!({"text": "wMA="})).await;
    assert_eq!(
        binary.result.unwrap_err().tool_kind.as_deref(),
        Some("invalid_input")
    );
}

/// Approves after a pause, like a person reading the prompt.
struct SlowApprover;

impl toolhost::Approver for SlowApprover {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a toolhost::ToolSpec,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_waiting_for_approval_is_not_counted_as_tool_time() {
    let config = ComponentConfig::new(component("calc")).approval(toolhost::Approval::Always);
    let host = host(vec![config]).await;
    let outcome = host
        .call(ToolCall::new("a", "calc", json!({"expression": "1"})))
        .approver(std::sync::Arc::new(SlowApprover))
        .await;
    assert_eq!(ok(&outcome), "1");
    assert!(
        outcome.stats.approval_wait >= std::time::Duration::from_millis(300),
        "{:?}",
        outcome.stats
    );
    assert!(
        outcome.stats.duration < std::time::Duration::from_millis(250),
        "{:?}",
        outcome.stats
    );
}

/// Issue 24: structured output that does not fit the tool's output schema
/// never reaches a client as a success: MCP clients must be able to trust
/// `structuredContent` to fit `outputSchema`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_output_that_does_not_fit_its_output_schema_is_a_tool_error() {
    use toolhost::wire::results::{Format, render};

    let host = probe_host(Grants::none(), quick_limits()).await;
    let spec = host.spec("structured").expect("the probe declares it");
    // The declared `u16` is listed by its bounds, not an unknown format.
    let port = &spec.output_schema.as_ref().unwrap()["properties"]["port"];
    assert_eq!(
        port,
        &json!({"type": "integer", "minimum": 0, "maximum": 65535})
    );

    let fits = call(
        &host,
        "structured",
        json!({"value": {"port": 8080, "name": "web"}}),
    )
    .await;
    let structured = fits.result.as_ref().expect("fits").structured.clone();
    assert_eq!(structured, Some(json!({"port": 8080, "name": "web"})));
    assert_eq!(render(&fits, Some(spec), Format::Mcp)["isError"], false);

    for (value, place) in [
        (json!({"port": 70000, "name": "web"}), "at /port"),
        (json!({"port": "80", "name": "web"}), "at /port"),
        (json!({"port": 80}), "\"name\" is a required property"),
        (json!([80, "web"]), "not of type \"object\""),
    ] {
        let outcome = call(&host, "structured", json!({ "value": value })).await;
        let error = outcome.result.as_ref().expect_err("does not fit");
        assert_eq!(error.kind, ErrorType::ToolError, "{value}");
        assert_eq!(
            error.tool_kind.as_deref(),
            Some("invalid_output"),
            "{value}"
        );
        assert!(!error.retryable);
        assert!(error.message.contains(place), "{value}: {}", error.message);
        let mcp = render(&outcome, Some(spec), Format::Mcp);
        assert_eq!(mcp["isError"], true, "{mcp}");
        assert!(mcp.get("structuredContent").is_none(), "{mcp}");
        assert_eq!(
            mcp["_meta"]["toolhost/error"]["tool_kind"],
            "invalid_output"
        );
    }
}
