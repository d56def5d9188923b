"""What a handler returns, and what it may learn about its call."""

from __future__ import annotations

import dataclasses
import enum
import json
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class Text:
    """Text for the model."""

    text: str


@dataclass(frozen=True)
class Image:
    """An image, e.g. a chart rendered to PNG.

    `image/png`, `image/jpeg`, `image/gif` and `image/webp` reach every client.
    """

    data: bytes
    mime_type: str


@dataclass(frozen=True)
class Audio:
    """A sound, e.g. `audio/wav` bytes."""

    data: bytes
    mime_type: str


@dataclass(frozen=True)
class ResourceLink:
    """A link to a resource the client can open; its contents are not sent."""

    uri: str
    name: str
    mime_type: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class Resource:
    """A resource sent whole with the result: `text` or binary `data`."""

    uri: str
    text: str | None = None
    data: bytes | None = None
    mime_type: str | None = None

    def __post_init__(self) -> None:
        if (self.text is None) == (self.data is None):
            raise ValueError("a Resource holds either text or data")


#: One part of a result.
Content = Union[Text, Image, Audio, ResourceLink, Resource]
_CONTENT = (Text, Image, Audio, ResourceLink, Resource)


class Output:
    """A result of several parts: text, images, sound, links, resources.

    `Output("3 matches:", Image(png, "image/png"), structured={"matches": 3})`.
    A string stands for a text block. `structured` is JSON for clients that
    use structured output (declare its schema with `@tool(output=...)`);
    `artifact` is kept for the application and never sent to the model.
    Either may be any JSON-able value, dataclasses included; an artifact
    that is a string is passed on as it is.
    """

    def __init__(self, *content: str | Content, structured: Any = None, artifact: Any = None) -> None:
        blocks = []
        for block in content:
            if isinstance(block, str):
                block = Text(block)
            elif not isinstance(block, _CONTENT):
                raise TypeError(
                    f"an Output holds text and content blocks, not {type(block).__name__}"
                )
            blocks.append(block)
        #: The blocks the model reads and sees, in order.
        self.content: list[Content] = blocks
        #: The structured result as JSON text, or None.
        self.structured: str | None = None if structured is None else to_json(structured)
        #: The artifact as text, or None.
        self.artifact: str | None = (
            artifact if artifact is None or isinstance(artifact, str) else to_json(artifact)
        )

    def text(self) -> str:
        """The text blocks, joined by newlines: what a text-only client reads."""
        return "\n".join(block.text for block in self.content if isinstance(block, Text))

    def __repr__(self) -> str:
        return f"Output({self.content!r}, structured={self.structured!r}, artifact={self.artifact!r})"


@dataclass(frozen=True)
class Context:
    """Facts about the call in progress.

    A handler gets it by declaring a parameter of this type (any name):
    `def fetch(url: str, ctx: Context)`. It is not part of the schema.
    """

    #: The model's `tool_call_id` (or one the host made up).
    call_id: str
    #: Milliseconds the host gave this call when it started: a tool waiting
    #: on the network can give up in time to say why.
    deadline_ms: int
    #: JSON the application supplied with the call (a user, a tenant), never
    #: written by the model nor shown to it; None when there is none.
    context: str | None = None

    def context_json(self) -> Any:
        """`context` parsed as JSON; None when there is none or it is not JSON."""
        if self.context is None:
            return None
        try:
            return json.loads(self.context)
        except ValueError:
            return None


def to_json(value: Any) -> str:
    """`value` as compact JSON text; dataclasses become objects, enums their values.

    Compact because every byte of a result ends up in the model's context.
    """
    # NaN and Infinity are not JSON: refused here, not sent on as text no
    # client can parse.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"{type(value).__name__} is not JSON serializable")
