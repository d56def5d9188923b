"""The component's export: the class componentize-py calls for `tool`.

componentize-py looks for a class named `Tool` in the app module, so an app
says `from toolhost import Tool` once. It implements the generated
`wit_world.exports.Tool` protocol without subclassing it, so that an app
also imports under plain CPython, for its tests.
"""

from __future__ import annotations

import traceback
from typing import Any

from . import _bindings, _host, _tools
from ._errors import ToolError
from ._output import Audio, Context, Image, Output, Resource, ResourceLink, Text


class Tool:
    """Exports every function decorated with `@tool` as this component's tools."""

    def tools(self) -> list[Any]:
        """The specs of the declared tools (`tool-spec`s)."""
        return [_spec(spec) for spec in _tools.specs()]

    def call(self, name: str, arguments: str, context: Any) -> Any:
        """Run a tool; every failure is returned as a tool error, never a trap."""
        wit = _bindings.require()
        cx = Context(context.call_id, context.deadline_ms, context.context)
        try:
            return _output(_tools.run(name, arguments, cx))
        except ToolError as e:
            error = e
        except BaseException as e:  # noqa: BLE001 - converting the output failed
            error = ToolError("internal", f"the tool failed: {type(e).__name__}: {e}")
            error.__cause__ = e
        if error.kind == "internal" and error.__cause__ is not None:
            # The model gets the exception's text; the operator the traceback.
            cause = error.__cause__
            try:
                _host.log.error(
                    _text("".join(traceback.format_exception(type(cause), cause, cause.__traceback__)))
                )
            except BaseException:  # noqa: BLE001 - the log is best effort; the answer is not
                pass
        raise wit.Err(
            wit.tool.ToolError(kind=_text(error.kind), message=_text(error.message), retryable=bool(error.retryable))
        )


def _text(value: object) -> str:
    """`value` as a string the contract takes: text, with what is not UTF-8
    (lone surrogates, from `os.listdir` or JSON) replaced. A string that is
    not would trap the instance as it is handed to the host, after `call`
    has returned, where nothing can catch it."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _maybe_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _spec(spec: _tools.Spec) -> Any:
    wit = _bindings.require().tool
    hints = wit.Hints(0)
    for flag, wanted in (
        (wit.Hints.READ_ONLY, spec.read_only),
        (wit.Hints.DESTRUCTIVE, spec.destructive),
        (wit.Hints.IDEMPOTENT, spec.idempotent),
        (wit.Hints.OPEN_WORLD, spec.open_world),
    ):
        if wanted:
            hints |= flag
    return wit.ToolSpec(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema,
        output_schema=spec.output_schema,
        hints=hints,
    )


def _output(output: Output) -> Any:
    wit = _bindings.require().tool
    return wit.ToolOutput(
        content=[_block(block) for block in output.content],
        structured=_maybe_text(output.structured),
        artifact=_maybe_text(output.artifact),
    )


def _block(block: object) -> Any:
    wit = _bindings.require().tool
    if isinstance(block, Text):
        return wit.ContentBlock_Text(_text(block.text))
    if isinstance(block, Image):
        return wit.ContentBlock_Image(wit.Media(mime_type=_text(block.mime_type), data=_bytes(block.data)))
    if isinstance(block, Audio):
        return wit.ContentBlock_Audio(wit.Media(mime_type=_text(block.mime_type), data=_bytes(block.data)))
    if isinstance(block, ResourceLink):
        return wit.ContentBlock_ResourceLink(
            wit.ResourceLink(
                uri=_text(block.uri),
                name=_text(block.name),
                mime_type=_maybe_text(block.mime_type),
                description=_maybe_text(block.description),
            )
        )
    if not isinstance(block, Resource):
        raise TypeError(f"a content block is Text, Image, Audio, ResourceLink or Resource, not {type(block).__name__}")
    contents = (
        wit.ResourceContents_Text(_text(block.text))
        if block.text is not None
        else wit.ResourceContents_Blob(_bytes(block.data or b""))
    )
    return wit.ContentBlock_Embedded(
        wit.EmbeddedResource(uri=_text(block.uri), mime_type=_maybe_text(block.mime_type), contents=contents)
    )


def _bytes(data: object) -> bytes:
    """Binary content as bytes; `bytes(5)` would be five zero bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"binary content must be bytes, not {type(data).__name__}")
    return bytes(data)
