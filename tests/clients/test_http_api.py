"""`toolhost serve --listen`'s plain HTTP API, with httpx: POST /v1/tool_calls
in every call shape it reads, GET /v1/tools in every format, /metrics,
/healthz, and the guards in front of them."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from conftest import metric_samples

TOOL_MESSAGE_KEYS = {"role", "tool_call_id", "name", "content", "is_error", "status", "error", "artifact"}


@pytest.fixture(scope="module")
def http(http_server: str) -> Iterator[httpx.Client]:
    # trust_env=False: no proxy from the environment between us and loopback.
    with httpx.Client(base_url=http_server, timeout=30.0, trust_env=False) as client:
        yield client


def post_calls(http: httpx.Client, body: Any, format: str | None = None) -> list[dict[str, Any]]:
    params = {"format": format} if format else None
    response = http.post("/v1/tool_calls", json=body, params=params)
    assert response.status_code == 200, response.text
    answers = response.json()
    assert isinstance(answers, list)
    return answers


def calc_openai(call_id: str, expression: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "calc", "arguments": json.dumps({"expression": expression})},
    }


def assert_success(message: dict[str, Any], call_id: str, content: str, value: float | None = None) -> None:
    assert TOOL_MESSAGE_KEYS <= message.keys(), message
    assert message["role"] == "tool"
    assert message["tool_call_id"] == call_id
    assert message["content"] == content
    assert message["is_error"] is False
    assert message["status"] == "success"
    assert message["error"] is None
    if value is not None:
        assert message["structured"] == {"value": value}


def assert_failure(message: dict[str, Any], call_id: str, error_type: str) -> dict[str, Any]:
    assert TOOL_MESSAGE_KEYS <= message.keys(), message
    assert message["role"] == "tool"
    assert message["tool_call_id"] == call_id
    assert message["is_error"] is True
    assert message["status"] == "error"
    error = message["error"]
    assert error["type"] == error_type, error
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["retryable"], bool)
    assert message["content"].startswith("Error: "), message["content"]
    return error


def test_healthz(http: httpx.Client) -> None:
    response = http.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["tools"] >= 2  # calc and the probe's tools


def test_openai_tool_calls(http: httpx.Client) -> None:
    answers = post_calls(http, [calc_openai("call_a", "6*7"), calc_openai("call_b", "1/0")])
    assert len(answers) == 2
    assert_success(answers[0], "call_a", "42", 42)
    assert answers[0]["name"] == "calc"
    assert answers[0]["artifact"] is None
    error = assert_failure(answers[1], "call_b", "tool_error")
    assert error["tool_kind"] == "invalid_input"
    assert error["retryable"] is True
    assert answers[1]["name"] == "calc"


def test_langchain_tool_calls(http: httpx.Client) -> None:
    answers = post_calls(
        http,
        [
            {"id": "lc_1", "name": "calc", "args": {"expression": "2^10"}, "type": "tool_call"},
            {"id": "lc_2", "name": "echo", "args": {"text": "ab", "times": 2}},
        ],
    )
    assert_success(answers[0], "lc_1", "1024", 1024)
    assert_success(answers[1], "lc_2", "abab")
    assert answers[1]["name"] == "echo"


def test_anthropic_tool_use_blocks(http: httpx.Client) -> None:
    body = [
        {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {"expression": "6*7"}},
        {"type": "tool_use", "id": "toolu_2", "name": "calc", "input": {"expression": "1/0"}},
    ]
    as_messages = post_calls(http, body)
    assert_success(as_messages[0], "toolu_1", "42", 42)
    assert_failure(as_messages[1], "toolu_2", "tool_error")
    blocks = post_calls(http, body, format="anthropic")
    # Exactly what the Messages API takes back, no other keys.
    assert blocks[0] == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42", "is_error": False}
    assert set(blocks[1]) == {"type", "tool_use_id", "content", "is_error"}
    assert blocks[1]["tool_use_id"] == "toolu_2"
    assert blocks[1]["is_error"] is True
    assert blocks[1]["content"] == as_messages[1]["content"]


def test_anthropic_assistant_message(http: httpx.Client) -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me compute both."},
            {"type": "tool_use", "id": "toolu_a", "name": "calc", "input": {"expression": "1+1"}},
            {"type": "tool_use", "id": "toolu_b", "name": "calc", "input": {"expression": "3*3"}},
        ],
    }
    blocks = post_calls(http, message, format="anthropic")
    assert [(b["tool_use_id"], b["content"], b["is_error"]) for b in blocks] == [
        ("toolu_a", "2", False),
        ("toolu_b", "9", False),
    ]


def test_openai_assistant_message(http: httpx.Client) -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [calc_openai("c1", "5-8"), calc_openai("c2", "7%4")]}
    answers = post_calls(http, message)
    assert_success(answers[0], "c1", "-3", -3)
    assert_success(answers[1], "c2", "3", 3)


def test_order_is_kept_whatever_finishes_first(http: httpx.Client) -> None:
    answers = post_calls(
        http,
        [
            {"id": "slow", "name": "sleep", "args": {"n": 400}},
            {"id": "fast", "name": "calc", "args": {"expression": "6*7"}},
        ],
    )
    assert [a["tool_call_id"] for a in answers] == ["slow", "fast"]
    assert_success(answers[0], "slow", "awake")
    assert_success(answers[1], "fast", "42", 42)


def test_every_failure_is_a_200_with_its_typed_error(http: httpx.Client) -> None:
    answers = post_calls(
        http,
        [
            {"id": "e1", "name": "no_such_tool", "args": {}},
            {"id": "e2", "name": "calc", "args": {"expr": "1"}},
            {"id": "e3", "type": "function", "function": {"name": "calc", "arguments": "{not json"}},
            {"id": "e4", "name": "spin", "args": {}},
            {"id": "e5", "name": "calc", "args": {"expression": "6*7"}},
        ],
    )
    assert len(answers) == 5
    error = assert_failure(answers[0], "e1", "unknown_tool")
    assert "calc" in error["message"]  # it names the tools that exist
    assert "expression" in assert_failure(answers[1], "e2", "invalid_arguments")["message"]
    assert_failure(answers[2], "e3", "invalid_arguments")
    assert assert_failure(answers[3], "e4", "timeout")["retryable"] is True
    assert_success(answers[4], "e5", "42", 42)


def test_a_malformed_call_in_a_batch_is_answered_in_place(http: httpx.Client) -> None:
    answers = post_calls(http, [calc_openai("ok_1", "1+2"), {"foo": 1}, calc_openai("ok_3", "2+2")])
    assert len(answers) == 3
    assert_success(answers[0], "ok_1", "3", 3)
    assert answers[1]["is_error"] is True
    assert answers[1]["error"]["type"] == "invalid_arguments"
    assert "tool call #2" in answers[1]["error"]["message"]
    assert_success(answers[2], "ok_3", "4", 4)


def assert_request_error(response: httpx.Response, status: int, *fix: str) -> None:
    """A refused request: `status`, a JSON error whose message says what to send instead."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"], error
    for words in fix:
        assert words in error["message"], error["message"]


def test_malformed_requests_are_4xx_naming_the_fix(http: httpx.Client) -> None:
    json_header = {"content-type": "application/json"}
    assert_request_error(http.post("/v1/tool_calls", content=b"{not json", headers=json_header), 400, "JSON")
    assert_request_error(http.post("/v1/tool_calls", content=b"42", headers=json_header), 400, "JSON array")
    assert_request_error(
        http.post("/v1/tool_calls", content=b"[]", headers={"content-type": "text/plain"}), 415, "application/json"
    )
    assert_request_error(http.post("/v1/tool_calls", json=[], params={"format": "xml"}), 400, "anthropic")


def test_empty_batch(http: httpx.Client) -> None:
    assert post_calls(http, []) == []


@pytest.mark.parametrize("format", [None, "openai", "anthropic", "mcp"])
def test_tools(http: httpx.Client, format: str | None) -> None:
    response = http.get("/v1/tools", params={"format": format} if format else None)
    assert response.status_code == 200, response.text
    definitions = response.json()
    if format in (None, "openai"):
        by_name = {d["function"]["name"]: d for d in definitions}
        calc = by_name["calc"]
        assert calc["type"] == "function"
        assert calc["function"]["description"]
        schema = calc["function"]["parameters"]
    elif format == "anthropic":
        by_name = {d["name"]: d for d in definitions}
        calc = by_name["calc"]
        assert calc["description"]
        schema = calc["input_schema"]
    else:
        by_name = {d["name"]: d for d in definitions}
        calc = by_name["calc"]
        schema = calc["inputSchema"]
        assert calc["outputSchema"]["type"] == "object"
        assert calc["annotations"]["readOnlyHint"] is True
    assert {"calc", "echo", "spin"} <= by_name.keys()
    assert schema["type"] == "object"
    assert schema["properties"]["expression"]["type"] == "string"


def test_tools_unknown_format(http: httpx.Client) -> None:
    assert_request_error(http.get("/v1/tools", params={"format": "xml"}), 400, "openai")


def calls_counter(text: str) -> dict[tuple[str, str], float]:
    """The tool-calls counter's samples from Prometheus/OpenMetrics text, by (tool, outcome)."""
    counts: dict[tuple[str, str], float] = {}
    for name, labels, value in metric_samples(text):
        if re.fullmatch(r"toolhost_\w*calls\w*_total", name) and "tool" in labels and "outcome" in labels:
            key = (labels["tool"], labels["outcome"])
            counts[key] = counts.get(key, 0.0) + value
    return counts


def test_metrics_count_calls_by_tool_and_outcome(http: httpx.Client) -> None:
    before = calls_counter(http.get("/metrics").text)
    post_calls(http, [calc_openai("m1", "6*7"), calc_openai("m2", "1/0"), {"id": "m3", "name": "made_up", "args": {}}])
    response = http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(("text/plain", "application/openmetrics-text"))
    after = calls_counter(response.text)
    assert after, f"no calls counter with tool and outcome labels in:\n{response.text[:2000]}"
    assert after[("calc", "success")] >= before.get(("calc", "success"), 0) + 1
    assert after[("calc", "tool_error")] >= before.get(("calc", "tool_error"), 0) + 1
    # A made-up name is not a label value of its own.
    assert not any(tool == "made_up" for tool, _ in after)
    assert "# TYPE" in response.text


def test_dns_rebinding_and_foreign_origins_are_refused(http: httpx.Client) -> None:
    calls = [calc_openai("g1", "1+1")]
    assert_request_error(http.post("/v1/tool_calls", json=calls, headers={"host": "evil.example"}), 403)
    assert_request_error(http.post("/v1/tool_calls", json=calls, headers={"origin": "https://evil.example"}), 403)
    assert_request_error(http.get("/v1/tools", headers={"host": "evil.example:80"}), 403)
    # A loopback browser origin is fine.
    ok = http.post("/v1/tool_calls", json=calls, headers={"origin": "http://localhost:3000"})
    assert ok.status_code == 200, ok.text


def test_unknown_route(http: httpx.Client) -> None:
    assert_request_error(http.get("/v2/nothing"), 404, "/v1/tool_calls")
