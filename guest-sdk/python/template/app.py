"""The {{tool}} tool: greets someone by name.

Each function decorated with `@tool` is a tool of this component. Its input
schema comes from the type hints, and its descriptions from the docstring:
the model reads both. Build with ./build.sh; see README.md for arguments,
errors, config, HTTP and key-value stores.
"""

# `Tool` is the component's export: componentize-py looks for it here.
from toolhost import Tool, tool  # noqa: F401


@tool(name="{{tool}}", read_only=True, idempotent=True)
def greet(name: str) -> str:
    """Greet someone by name: answers "Hello, <name>!".

    Args:
        name: Who to greet.
    """
    return f"Hello, {name}!"
