"""Text tools for toolhost: `word_count`, `slugify` and `tally`.

`word_count` and `slugify` are pure computation: they use no WASI capability
beyond what the Python runtime itself needs. `tally` keeps counts in the
key-value store named `tally` (`wasi:keyvalue`) and reports its progress, so
it works only where the manifest grants that store (`stores = ["tally"]`,
with a `[store.tally]` table). Without the grant it returns a `store_denied`
error, which toolhost, having recorded the refusal, replaces with its own
`capability_denied` message naming the missing grant.
"""

import json
import re
import unicodedata
from typing import Any, Callable

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import atomics, host, store
from wit_world.imports.toolhost_tool_types import (
    CallContext,
    ContentBlock_Text,
    Hints,
    ToolError,
    ToolOutput,
    ToolSpec,
)

# `word_count` and `slugify` only compute on their arguments.
HINTS = Hints.READ_ONLY | Hints.IDEMPOTENT

# The key-value store `tally` opens: the manifest must grant it.
TALLY_STORE = "tally"
TALLY_MAX_WORDS = 1000


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


def text_output(text: str, structured: str | None = None) -> ToolOutput:
    # A result is a list of content blocks; these tools return one text block.
    return ToolOutput(
        content=[ContentBlock_Text(text)], structured=structured, artifact=None
    )


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
    return text_output(
        f"{counts['words']} words, {counts['lines']} lines, "
        f"{counts['characters']} characters.",
        structured=to_json(counts),
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
    return text_output(slug)


def store_error(error: store.Error) -> Err:
    # Store failures other than a denial come as `other("KIND: message")`.
    if isinstance(error, store.Error_Other):
        kind, _, message = error.value.partition(": ")
        if not message:
            kind, message = "", error.value
        if kind == "quota-exceeded":
            return Err(ToolError(kind="quota_exceeded", message=message, retryable=False))
        if kind in ("unavailable", "limit"):
            return Err(ToolError(kind=kind, message=message, retryable=kind == "unavailable"))
        return Err(ToolError(kind="store", message=error.value, retryable=False))
    return Err(
        ToolError(
            kind="store_denied",
            message=f"The store '{TALLY_STORE}' is not available to this tool: it "
            f"must be granted in toolhost.toml (stores = [\"{TALLY_STORE}\"] on this "
            f"component, with a [store.{TALLY_STORE}] table), and when the store is "
            "scoped, the call's context must carry the scope key.",
            retryable=False,
        )
    )


def tally(args: dict) -> ToolOutput:
    words = args.get("words")
    if not isinstance(words, list) or not all(
        isinstance(w, str) and w for w in words
    ):
        raise invalid_input("`words` must be an array of non-empty strings.")
    if len(words) > TALLY_MAX_WORDS:
        raise invalid_input(f"`words` may hold at most {TALLY_MAX_WORDS} words.")

    try:
        bucket = store.open(TALLY_STORE)
    except Err as e:
        raise store_error(e.value) from None

    # The new count of each word, in the order the words first appear.
    counts: dict[str, int] = {}
    with bucket:
        for i, word in enumerate(words):
            key = word.lower()
            try:
                # Counters are kept as decimal ASCII; `increment` returns the
                # new value, creating the key at `delta` when it is missing.
                counts[key] = atomics.increment(bucket, key, 1)
            except Err as e:
                raise store_error(e.value) from None
            host.progress(float(i + 1), float(len(words)), f"counted {key}")

    host.log(host.Level.DEBUG, f"tally: {len(words)} words, {len(counts)} distinct")
    if not counts:
        return text_output("No words to count.", structured=to_json({"counts": {}}))
    return text_output(
        ", ".join(f"{word}: {count}" for word, count in counts.items()),
        structured=to_json({"counts": counts}),
    )


TALLY_INPUT = {
    "type": "object",
    "properties": {
        "words": {
            "type": "array",
            "items": {
                "type": "string",
                "minLength": 1,
                "maxLength": 200,
                "description": "A word; counted case-insensitively.",
            },
            "maxItems": TALLY_MAX_WORDS,
            "description": f"The words to count, at most {TALLY_MAX_WORDS}; "
            "repeat a word to count it more than once.",
        },
    },
    "required": ["words"],
    "additionalProperties": False,
}

TALLY_OUTPUT = {
    "type": "object",
    "properties": {
        "counts": {
            "type": "object",
            "additionalProperties": {"type": "integer", "minimum": 1},
            "description": "Each lowercased word's count after this call.",
        },
    },
    "required": ["counts"],
    "additionalProperties": False,
}


TOOLS: dict[str, tuple[ToolSpec, Callable[[dict], ToolOutput]]] = {
    "word_count": (
        ToolSpec(
            name="word_count",
            title=None,
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
            title=None,
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
    "tally": (
        ToolSpec(
            name="tally",
            title="Tally words",
            description=(
                "Count words in a running tally that persists between calls "
                "(case-insensitive), and return each given word's new total, "
                "e.g. \"ada: 3, bob: 1\"."
            ),
            input_schema=to_json(TALLY_INPUT),
            output_schema=to_json(TALLY_OUTPUT),
            # Writes to the store, and calling twice counts twice.
            hints=Hints(0),
        ),
        tally,
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
