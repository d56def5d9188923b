#!/usr/bin/env python3
"""A scripted OpenAI chat-completions endpoint on 127.0.0.1, for running the
agent-loop example in CI without a model: the first turn calls `calc`, the turn
after a tool result answers with that result. Speaks the real wire format,
streamed (SSE) or not, as the request asks.

    .ci/scripted-model.py PORT_FILE     # writes the port it listens on, serves until killed
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def reply(request: dict) -> dict:
    """The assistant message for this conversation."""
    results = [m for m in request.get("messages", []) if m.get("role") == "tool"]
    if not results:
        call = {"id": "call_1", "type": "function",
                "function": {"name": "calc", "arguments": json.dumps({"expression": "1234*5678"})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    content = results[-1].get("content")
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": "assistant", "content": f"1234 * 5678 = {text}"}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
        message = reply(body)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if body.get("stream"):
            delta = dict(message)
            if "tool_calls" in delta:
                delta["tool_calls"] = [dict(c, index=i) for i, c in enumerate(delta["tool_calls"])]
            chunks = [
                {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
                {"choices": [], "usage": usage},
            ]
            data = "".join(f"data: {json.dumps(dict(c, id='x', object='chat.completion.chunk'))}\n\n" for c in chunks)
            data += "data: [DONE]\n\n"
            self.answer(data.encode(), "text/event-stream")
        else:
            answer = {"id": "x", "object": "chat.completion",
                      "choices": [{"index": 0, "message": message, "finish_reason": finish}], "usage": usage}
            self.answer(json.dumps(answer).encode(), "application/json")

    def answer(self, data: bytes, content_type: str):
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()
