"""Text tools for toolhost: `word_count`, `slugify` and `tally`.

`word_count` and `slugify` are pure computation: they use no WASI capability
beyond what the Python runtime itself needs. `tally` keeps counts in the
key-value store named `tally` (`wasi:keyvalue`) and reports its progress, so
it works only where the manifest grants that store (`stores = ["tally"]`,
with a `[store.tally]` table). Without the grant the SDK raises a
`permission_denied` error naming both lines, which toolhost, having recorded
the refusal, replaces with its own `capability_denied` message.

Written with the toolhost Python SDK (`guest-sdk/python/toolhost`): each
tool is a typed function, and its input schema comes from the type hints and
the docstring.
"""

import json
import re
import unicodedata
from typing import Annotated, TypedDict

# `Tool` is the component's export: componentize-py looks for it here.
from toolhost import Output, Schema, Tool, ToolError, log, progress, store, tool  # noqa: F401

# The key-value store `tally` opens: the manifest must grant it.
TALLY_STORE = "tally"
TALLY_MAX_WORDS = 1000


class WordCounts(TypedDict):
    words: Annotated[int, Schema(minimum=0)]
    lines: Annotated[int, Schema(minimum=0)]
    characters: Annotated[int, Schema(minimum=0)]


@tool(read_only=True, idempotent=True, output=WordCounts)
def word_count(text: str) -> Output:
    """Count the words, lines and characters of a text.

    Args:
        text: The text to measure.
    """
    counts = WordCounts(
        words=len(text.split()),
        lines=len(text.splitlines()),
        # Code points, not bytes: what a person would call characters.
        characters=len(text),
    )
    log.debug(f"word_count: {json.dumps(counts, separators=(',', ':'))}")
    return Output(
        f"{counts['words']} words, {counts['lines']} lines, {counts['characters']} characters.",
        structured=counts,
    )


@tool(read_only=True, idempotent=True)
def slugify(text: str, separator: Annotated[str, Schema(maxLength=1)]) -> str:
    """Turn a text into a URL-safe slug: lowercase ASCII letters and digits
    joined by a separator, e.g. "Hello, World!" -> "hello-world".

    Args:
        text: The text to turn into a slug.
        separator: Placed between words, usually "-"; empty joins them
            directly.
    """
    # Fold accents to their base letters ("café" -> "cafe") and drop whatever
    # has no ASCII form, so slugs are safe in URLs and file names.
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = separator.join(re.findall(r"[a-z0-9]+", ascii_text.lower()))
    log.debug(f"slugify: {len(text)} characters -> {slug!r}")
    if not slug:
        raise ToolError.invalid_input(
            "The slug came out empty: only ASCII letters and digits are kept "
            "(accented letters are folded, e.g. \"é\" becomes \"e\"). Pass a text "
            "that contains at least one such letter or digit."
        )
    return slug


Word = Annotated[str, Schema(minLength=1, maxLength=200), "A word; counted case-insensitively."]


class TallyCounts(TypedDict):
    counts: Annotated[
        dict[str, Annotated[int, Schema(minimum=1)]],
        "Each lowercased word's count after this call.",
    ]


# Not read-only (it writes to the store) nor idempotent (calling twice counts twice).
@tool(title="Tally words", output=TallyCounts)
def tally(words: Annotated[list[Word], Schema(maxItems=TALLY_MAX_WORDS)]) -> Output:
    """Count words in a running tally that persists between calls
    (case-insensitive), and return each given word's new total, e.g.
    "ada: 3, bob: 1".

    Args:
        words: The words to count, at most 1000; repeat a word to count it
            more than once.
    """
    # The new count of each word, in the order the words first appear.
    counts: dict[str, int] = {}
    with store.open(TALLY_STORE) as bucket:
        for i, word in enumerate(words):
            key = word.lower()
            # Counters are kept as decimal ASCII; `increment` returns the
            # new value, creating the key at `delta` when it is missing.
            counts[key] = bucket.increment(key, 1)
            progress(i + 1, len(words), f"counted {key}")

    log.debug(f"tally: {len(words)} words, {len(counts)} distinct")
    if not counts:
        return Output("No words to count.", structured=TallyCounts(counts={}))
    return Output(
        ", ".join(f"{word}: {count}" for word, count in counts.items()),
        structured=TallyCounts(counts=counts),
    )
