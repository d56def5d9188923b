"""Write toolhost tools in Python (contract `toolhost:tool@0.2.1`).

A tool is a typed function. The SDK derives its input JSON Schema from the
type hints and the docstring, converts the model's arguments to those types,
and turns errors into the typed tool errors the host sends back to the
model. A complete component (`app.py`, built with componentize-py):

```
from toolhost import Tool, ToolError, tool  # Tool: the export componentize-py looks for

@tool(read_only=True, idempotent=True)
def greet(name: str, emphasis: int = 0) -> str:
    \"\"\"Greet someone by name.

    Args:
        name: Who to greet.
        emphasis: How many exclamation marks, 0 to 5.
    \"\"\"
    if not name.strip():
        raise ToolError.invalid_input("`name` is empty: say who to greet")
    return f"Hello, {name}" + "!" * emphasis
```

Also here: `Output` for results of several blocks (text, `Image`, `Audio`,
`ResourceLink`, `Resource`) and structured JSON; `Context`, the call's
facts, for a handler that declares a parameter of that type; `log`,
`config`, `progress` and `ask`; `http` for outgoing requests and `store`
for key-value stores, both limited to what the manifest grants; and
`file_error`, which explains a file refused by the grants.

Without componentize-py's bindings (plain CPython) an app still imports,
so its tools (the decorated functions, returned unchanged) and their
schemas can be tested there; only the calls to the host (`log`, `config`,
`progress`, `ask`, `http`, `store`) need the component.
"""

from . import http, store
from ._component import Tool
from ._errors import Refused, ToolError, file_error
from ._host import ask, config, log, progress
from ._output import Audio, Content, Context, Image, Output, Resource, ResourceLink, Text
from ._schema import Schema
from ._tools import tool

__all__ = [
    "Audio", "Content", "Context", "Image", "Output", "Refused", "Resource", "ResourceLink",
    "Schema", "Text", "Tool", "ToolError", "ask", "config", "file_error", "http", "log",
    "progress", "store", "tool",
]

