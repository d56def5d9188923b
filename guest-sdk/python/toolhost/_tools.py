"""The `@tool` decorator, the component's list of tools, and running a call.

Everything here is plain Python: the component glue (`_component`) turns
the results into the contract's types, so this part runs under CPython too,
in the SDK's tests and in a tool author's.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import typing
from dataclasses import dataclass
from typing import Any, Callable

from . import _docs, _schema
from ._errors import ToolError, file_error
from ._output import _CONTENT, Context, Output, to_json

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Spec:
    """What the host is told about a tool (the contract's `tool-spec`)."""

    name: str
    title: str | None
    description: str
    input_schema: str
    output_schema: str | None
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool


@dataclass(frozen=True)
class _Tool:
    spec: Spec
    function: Callable[..., Any]
    # (name, type, required) of the arguments the model passes.
    fields: list[tuple[str, Any, bool]]
    # The parameter that receives the Context, if the handler takes one.
    context_param: str | None
    # Optional parameters without a default: None when not given.
    none_if_absent: tuple[str, ...]


# The tools of this component, by name, in the order they were declared.
_tools: dict[str, _Tool] = {}


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    destructive: bool = False,
    idempotent: bool = False,
    open_world: bool = False,
    output: Any = None,
) -> Any:
    """Make a function a tool of this component; use bare or with options.

    ```
    @tool(read_only=True)
    def greet(name: str, excited: bool = False) -> str:
        \"\"\"Greet someone by name.

        Args:
            name: Who to greet.
            excited: End with an exclamation mark.
        \"\"\"
    ```

    The input schema comes from the type hints (str, int, float, bool,
    list[T], dict[str, T], T | None, Literal, Enum, dataclasses, TypedDicts;
    `Annotated[T, Schema(...)]` adds keywords): a parameter with a default,
    or typed `T | None`, is optional. The docstring's summary is the tool's description and its
    `Args:` (or `:param x:`) entries the arguments' descriptions. A
    parameter typed `Context` gets the call's context and is not an
    argument. The arguments are converted to the hinted types (dataclasses
    built) before the call.

    Options: `name` (default: the function's name), `title` for people,
    `description` (default: the docstring's summary), the hints
    `read_only`, `destructive` (with `approval = "destructive"` the host
    asks before running it), `idempotent` and `open_world`, and `output`:
    the type (dataclass, TypedDict) or JSON Schema (a dict) of the
    structured result. A return annotation that is a dataclass or
    TypedDict declares it too.

    The function is returned unchanged, so it can still be called directly.
    A tool that cannot be described (a parameter without a type, a type
    with no JSON form, a duplicate name) raises `TypeError` or
    `ValueError` at import, which fails the build with that message.
    """
    options = dict(
        name=name, title=title, description=description, read_only=read_only,
        destructive=destructive, idempotent=idempotent, open_world=open_world, output=output,
    )

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        entry = _describe(function, **options)
        if entry.spec.name in _tools:
            raise ValueError(f"two tools are named {entry.spec.name!r}; give one a name=")
        _tools[entry.spec.name] = entry
        return function

    return register(function) if function is not None else register


def specs() -> list[Spec]:
    """The specs of every tool declared so far, in order."""
    return [entry.spec for entry in _tools.values()]


def run(name: str, arguments: str, context: Context) -> Output:
    """Run tool `name` with `arguments` (JSON text) and return its output.

    Every failure is a `ToolError`: an unknown name is `unknown_tool`,
    arguments that do not fit are `invalid_input` (retryable), an `OSError`
    on a file is mapped by `file_error`, and any other exception is
    `internal`, with the exception as its `__cause__` for the log.
    """
    entry = _tools.get(name)
    if entry is None:
        raise ToolError(
            "unknown_tool",
            f"this component has no tool named {name!r}; it has: {', '.join(_tools) or 'none'}",
        )
    try:
        parsed = json.loads(arguments)
    except ValueError as e:
        raise ToolError.invalid_input(f"the arguments are not valid JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise ToolError.invalid_input("the arguments must be a JSON object")
    try:
        kwargs = _schema.convert_fields(parsed, entry.fields, "")
        for param in entry.none_if_absent:
            kwargs.setdefault(param, None)
        if entry.context_param is not None:
            kwargs[entry.context_param] = context
        return _output(entry, entry.function(**kwargs))
    except ToolError:
        raise
    except OSError as e:
        if e.filename is None:
            raise _internal(e) from e
        raise file_error(e, e.filename) from e
    except BaseException as e:  # noqa: BLE001 - a handler's bug must not trap
        raise _internal(e) from e


def _internal(error: BaseException) -> ToolError:
    return ToolError("internal", f"the tool failed: {type(error).__name__}: {error}")


def _output(entry: _Tool, value: Any) -> Output:
    """A handler's return value as an Output."""
    if isinstance(value, Output):
        return value
    if value is None:
        return Output()
    if isinstance(value, str):
        return Output(value)
    if isinstance(value, _CONTENT):
        return Output(value)
    if isinstance(value, (bytes, bytearray)):
        raise TypeError("a tool returned bytes; return Output(Image(data, mime_type)) or text")
    text = to_json(value)
    structured = _is_object(value) and entry.spec.output_schema is not None
    return Output(text, structured=value if structured else None)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    )


def _describe(
    function: Callable[..., Any],
    *,
    name: str | None,
    title: str | None,
    description: str | None,
    read_only: bool,
    destructive: bool,
    idempotent: bool,
    open_world: bool,
    output: Any,
) -> _Tool:
    tool_name = name or function.__name__
    if not _NAME.match(tool_name):
        raise ValueError(f"tool name {tool_name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
    docs = _docs.parse(function.__doc__)
    description = description or docs.summary
    if not description:
        raise ValueError(
            f"tool {tool_name!r} has no description: give the function a docstring "
            "(the model reads it to choose the tool) or pass description="
        )
    if inspect.iscoroutinefunction(function):
        raise TypeError(
            f"tool {tool_name!r} is `async def`: a tool is a plain function (the call itself "
            "blocks on I/O; there is no event loop to await in)"
        )
    hints = typing.get_type_hints(function, include_extras=True)
    fields: list[tuple[str, Any, bool]] = []
    context_param = None
    none_if_absent = []
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} must be a plain named parameter"
            )
        if param.name not in hints:
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} needs a type hint; "
                "the input schema is derived from it"
            )
        hint = hints[param.name]
        # `Context`, however spelled (`Context | None`, `Annotated[Context, ...]`),
        # is the call's own: never an argument the model could write.
        if _schema.refers_to(hint, Context):
            if _schema.strip(hint) is not Context:
                raise TypeError(
                    f"tool {tool_name!r}: parameter {param.name!r}: annotate the call's "
                    "context as plain `Context` (it is always given)"
                )
            context_param = param.name
            continue
        optional = _schema.is_optional(hint)
        if optional and param.default is param.empty:
            none_if_absent.append(param.name)
        required = param.default is param.empty and not optional
        fields.append((param.name, hint, required))
    input_schema = _schema.object_schema(fields, docs.arguments)

    if output is None and _schema.is_object_type(hints.get("return")):
        output = hints["return"]
    output_schema = None
    if isinstance(output, dict):
        output_schema = output
    elif output is not None:
        if not _schema.is_object_type(output):
            raise TypeError(
                f"tool {tool_name!r}: output= must be a dataclass, a TypedDict or a JSON "
                "Schema dict (a structured result is a JSON object)"
            )
        output_schema = _schema.schema_of(output)
        # The tool's description already says what it returns.
        output_schema.pop("description", None)

    spec = Spec(
        name=tool_name,
        title=title,
        description=description,
        input_schema=to_json(input_schema),
        output_schema=None if output_schema is None else to_json(output_schema),
        read_only=read_only,
        destructive=destructive,
        idempotent=idempotent,
        open_world=open_world,
    )
    return _Tool(spec, function, fields, context_param, tuple(none_if_absent))
