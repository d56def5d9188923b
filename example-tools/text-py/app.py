"""Text tools for toolhost: `word_count` and `slugify`.

Pure computation: the component uses no WASI capability beyond what the
Python runtime itself needs, so it can be granted nothing.
"""

import json
import re
import unicodedata
from typing import Any, Callable

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import host
from wit_world.imports.toolhost_tool_types import (
    CallContext,
    Hints,
    ToolError,
    ToolOutput,
    ToolSpec,
)

# Both tools only compute on their arguments.
HINTS = Hints.READ_ONLY | Hints.IDEMPOTENT


def to_json(value: Any) -> str:
    # Compact: every byte of a schema ends up in the model's context.
    return json.dumps(value, separators=(",", ":"))


WORD_COUNT_INPUT = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The text to measure."},
    },
    "required": ["text"],
    "additionalProperties": False,
}

WORD_COUNT_OUTPUT = {
    "type": "object",
    "properties": {
        "words": {"type": "integer", "minimum": 0},
        "lines": {"type": "integer", "minimum": 0},
        "characters": {"type": "integer", "minimum": 0},
    },
    "required": ["words", "lines", "characters"],
    "additionalProperties": False,
}

SLUGIFY_INPUT = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "description": "The text to turn into a slug."},
        "separator": {
            "type": "string",
            "maxLength": 1,
            "default": "-",
            "description": "Placed between words; empty joins them directly.",
        },
    },
    "required": ["text"],
    "additionalProperties": False,
}


def invalid_input(message: str) -> Err:
    return Err(ToolError(kind="invalid_input", message=message, retryable=True))


def string_arg(args: dict, key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str):
        raise invalid_input(f"`{key}` must be a string.")
    return value


def word_count(args: dict) -> ToolOutput:
    text = string_arg(args, "text")
    counts = {
        "words": len(text.split()),
        "lines": len(text.splitlines()),
        # Code points, not bytes: what a person would call characters.
        "characters": len(text),
    }
    host.log(host.Level.DEBUG, f"word_count: {to_json(counts)}")
    return ToolOutput(
        content=(
            f"{counts['words']} words, {counts['lines']} lines, "
            f"{counts['characters']} characters."
        ),
        structured=to_json(counts),
        artifact=None,
    )


def slugify(args: dict) -> ToolOutput:
    text = string_arg(args, "text")
    separator = string_arg(args, "separator", "-")
    if len(separator) > 1:
        raise invalid_input("`separator` must be at most one character, e.g. \"-\".")

    # Fold accents to their base letters ("café" -> "cafe") and drop whatever
    # has no ASCII form, so slugs are safe in URLs and file names.
    ascii_text = (
        unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    )
    slug = separator.join(re.findall(r"[a-z0-9]+", ascii_text.lower()))
    host.log(host.Level.DEBUG, f"slugify: {len(text)} characters -> {slug!r}")
    if not slug:
        raise invalid_input(
            "The slug came out empty: only ASCII letters and digits are kept "
            "(accented letters are folded, e.g. \"é\" becomes \"e\"). Pass a text "
            "that contains at least one such letter or digit."
        )
    return ToolOutput(content=slug, structured=None, artifact=None)


TOOLS: dict[str, tuple[ToolSpec, Callable[[dict], ToolOutput]]] = {
    "word_count": (
        ToolSpec(
            name="word_count",
            description="Count the words, lines and characters of a text.",
            input_schema=to_json(WORD_COUNT_INPUT),
            output_schema=to_json(WORD_COUNT_OUTPUT),
            hints=HINTS,
        ),
        word_count,
    ),
    "slugify": (
        ToolSpec(
            name="slugify",
            description=(
                "Turn a text into a URL-safe slug: lowercase ASCII letters and "
                "digits joined by a separator, e.g. \"Hello, World!\" -> \"hello-world\"."
            ),
            input_schema=to_json(SLUGIFY_INPUT),
            output_schema=None,
            hints=HINTS,
        ),
        slugify,
    ),
}


class Tool(exports.Tool):
    def tools(self) -> list[ToolSpec]:
        return [spec for spec, _ in TOOLS.values()]

    def call(self, name: str, arguments: str, context: CallContext) -> ToolOutput:
        # A `result` error is returned by raising `Err(ToolError)`; any other
        # exception would trap the instance instead.
        entry = TOOLS.get(name)
        if entry is None:
            raise Err(
                ToolError(
                    kind="unknown_tool",
                    message=f"No tool named `{name}`; this component provides: "
                    f"{', '.join(TOOLS)}.",
                    retryable=False,
                )
            )
        # The host validated the arguments against the schema already; stay
        # defensive anyway, since a bad argument must not trap the instance.
        try:
            args: Any = json.loads(arguments)
        except ValueError as e:
            raise invalid_input(f"The arguments are not valid JSON: {e}.") from None
        if not isinstance(args, dict):
            raise invalid_input("The arguments must be a JSON object.")
        return entry[1](args)
