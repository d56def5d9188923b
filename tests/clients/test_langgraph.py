"""A LangGraph agent whose tools are toolhost's, loaded through
langchain-mcp-adapters over stdio and over Streamable HTTP.

The graph is LangGraph's own agent loop, a StateGraph of a model node and a
ToolNode with `tools_condition` between them. The chat model is scripted (no
API key, no network): it first asks for two calls at once, `calc("6*7")` and
`calc("1/0")`, and answers once it has read both results.

What langchain-mcp-adapters 0.3 does with toolhost's results:
- success: the MCP content blocks become the ToolMessage's content (a list
  of LangChain text blocks, `"42"` here), `structuredContent` its artifact
  (`{"structured_content": {...}}`), `status="success"`;
- `isError: true`: the adapter raises a ToolException subclass that its own
  `handle_tool_error` turns back into the content blocks, so the ToolMessage
  has `status="error"` and toolhost's error text: ToolNode itself never sees
  an exception, whatever its `handle_tool_errors`. The typed error in `_meta`
  does not reach the ToolMessage.
- `MultiServerMCPClient.get_tools()` opens a new MCP session for every tool
  call (a new `toolhost serve --stdio` process over stdio), the adapters'
  default; `client.session(...)` with `load_mcp_tools` keeps one open.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

# Tracing would send every run to LangSmith over the network.
for _name in ("LANGSMITH_TRACING", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING", "LANGCHAIN_TRACING_V2"):
    os.environ[_name] = "false"

from conftest import serve_stdio_args  # noqa: E402
from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import BaseTool  # noqa: E402
from langchain_mcp_adapters.client import MultiServerMCPClient  # noqa: E402
from langchain_mcp_adapters.tools import load_mcp_tools  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.runtime import Runtime  # noqa: E402

pytestmark = pytest.mark.anyio

FINAL_ANSWER = "6*7 is 42; 1/0 has no value."


class ScriptedChatModel(BaseChatModel):
    """A chat model that plays a script: two parallel calc calls, then an answer.

    It records the messages of every turn, so a test can check what the model
    was shown.
    """

    seen: list[list[BaseMessage]] = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        self.seen.append(list(messages))
        if not any(isinstance(m, ToolMessage) for m in messages):
            return AIMessage(
                content="",
                tool_calls=[
                    {"name": "calc", "args": {"expression": "6*7"}, "id": "call_ok", "type": "tool_call"},
                    {"name": "calc", "args": {"expression": "1/0"}, "id": "call_bad", "type": "tool_call"},
                ],
            )
        return AIMessage(content=FINAL_ANSWER)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._generate(messages, stop, None, **kwargs)


def agent(model: BaseChatModel, tools: list[BaseTool]) -> Any:
    """LangGraph's agent loop: model, then the tools it asked for, until it stops asking."""

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await model.bind_tools(tools).ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


def text(message: ToolMessage) -> str:
    """A ToolMessage's text, whether its content is a string or content blocks."""
    if isinstance(message.content, str):
        return message.content
    return "".join(block["text"] for block in message.content if block.get("type") == "text")


def connection(transport: str, toolhost: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    if transport == "stdio":
        return {"transport": "stdio", "command": str(toolhost), "args": serve_stdio_args()}
    return {"transport": "streamable_http", "url": request.getfixturevalue("mcp_url")}


@asynccontextmanager
async def toolhost_tools(client: MultiServerMCPClient, per_call_sessions: bool) -> AsyncIterator[list[BaseTool]]:
    if per_call_sessions:
        yield await client.get_tools()
    else:
        async with client.session("toolhost") as session:
            yield await load_mcp_tools(session, server_name="toolhost")


@pytest.mark.parametrize("per_call_sessions", [True, False], ids=["session-per-call", "one-session"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_agent_with_toolhost_tools(
    transport: str, per_call_sessions: bool, toolhost: Path, request: pytest.FixtureRequest
) -> None:
    client = MultiServerMCPClient({"toolhost": connection(transport, toolhost, request)})
    model = ScriptedChatModel()
    model.seen = []
    async with toolhost_tools(client, per_call_sessions) as tools:
        by_name = {t.name: t for t in tools}
        assert {"calc", "echo", "spin"} <= by_name.keys()
        # The MCP annotations arrive as the tool's metadata.
        assert by_name["calc"].metadata and by_name["calc"].metadata["readOnlyHint"] is True
        final = await agent(model, tools).ainvoke({"messages": [HumanMessage("What are 6*7 and 1/0?")]})

    messages = final["messages"]
    assert isinstance(messages[-1], AIMessage) and messages[-1].content == FINAL_ANSWER
    results = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
    assert set(results) == {"call_ok", "call_bad"}

    ok = results["call_ok"]
    assert ok.status == "success"
    assert ok.name == "calc"
    assert text(ok) == "42"
    assert ok.artifact == {"structured_content": {"value": 42}}

    bad = results["call_bad"]
    assert bad.status == "error"
    assert bad.name == "calc"
    assert text(bad).startswith("Error: tool 'calc' failed (invalid_input)"), text(bad)
    assert bad.artifact is None

    # The model's second turn was shown both results, in the order it asked.
    second_turn = model.seen[-1]
    assert [m.tool_call_id for m in second_turn if isinstance(m, ToolMessage)] == ["call_ok", "call_bad"]


async def test_timeout_and_invalid_arguments_reach_the_model_as_errors(
    toolhost: Path, request: pytest.FixtureRequest
) -> None:
    """The tools on their own, as ToolNode runs them: every failure is a ToolMessage with status error."""
    client = MultiServerMCPClient({"toolhost": connection("http", toolhost, request)})
    async with toolhost_tools(client, per_call_sessions=False) as tools:
        node = ToolNode(tools)
        calls = [
            {"name": "spin", "args": {}, "id": "t1", "type": "tool_call"},
            {"name": "calc", "args": {"expr": "1"}, "id": "t2", "type": "tool_call"},
            {"name": "echo", "args": {"text": "hi", "times": 2}, "id": "t3", "type": "tool_call"},
        ]
        # Outside a graph, ToolNode needs the Runtime a graph would inject
        # (see host/benches/peers/toolnode.py).
        output = await node.ainvoke({"messages": [AIMessage(content="", tool_calls=calls)]}, runtime=Runtime())
    messages = {m.tool_call_id: m for m in output["messages"]}
    assert messages["t1"].status == "error" and "timed out" in text(messages["t1"])
    assert messages["t2"].status == "error" and "invalid arguments" in text(messages["t2"])
    assert messages["t3"].status == "success" and text(messages["t3"]) == "hihi"
