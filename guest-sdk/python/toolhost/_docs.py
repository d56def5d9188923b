"""Docstrings read for the schema: the summary and each argument's description.

Two styles are understood, because they are the two most Python code uses:
Google's sections (`Args:` with `name: text` or `name (type): text` items)
and Sphinx fields (`:param name: text`). Everything before the first section
or field is the summary.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

# Section headers that end the summary. Only the argument sections are read.
_ARGUMENT_SECTIONS = {"args", "arguments", "parameters", "params", "attributes"}
_OTHER_SECTIONS = {
    "returns", "return", "yields", "yield", "raises", "raise", "examples",
    "example", "note", "notes", "warning", "warnings", "see also", "todo",
    "keyword args", "keyword arguments", "other parameters",
}
_SECTION = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_GOOGLE_ITEM = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
# `:param url: text` or `:param str url: text`: the name is the field's last word.
_SPHINX_FIELD = re.compile(r"^:(\w+)((?:\s+[^:\s]+)*)\s*:\s*(.*)$")
_SPHINX_PARAM = {"param", "parameter", "arg", "argument", "key", "keyword", "ivar", "var"}


@dataclass
class Docs:
    """What a docstring says: a summary, and a description per name."""

    summary: str = ""
    arguments: dict[str, str] = field(default_factory=dict)


def parse(docstring: str | None) -> Docs:
    """Split `docstring` into its summary and its argument descriptions.

    The summary keeps paragraph breaks and joins the lines of a paragraph
    with spaces, so a wrapped sentence reads as one line in the schema.
    """
    if not docstring:
        return Docs()
    lines = inspect.cleandoc(docstring).splitlines()
    docs = Docs()
    summary: list[str] = []
    in_sections = False
    i = 0
    while i < len(lines):
        line = lines[i]
        header = _SECTION.match(line)
        if header and _is_section(header.group(1)):
            in_sections = True
            i = _read_section(lines, i, docs, header.group(1).lower())
            continue
        if line.startswith(":") and _SPHINX_FIELD.match(line):
            in_sections = True
            i = _read_sphinx_field(lines, i, docs)
            continue
        # Text after the first section belongs to no argument and is not
        # part of the summary.
        if not in_sections:
            summary.append(line)
        i += 1
    docs.summary = _paragraphs(summary)
    return docs


def _is_section(name: str) -> bool:
    name = name.lower()
    return name in _ARGUMENT_SECTIONS or name in _OTHER_SECTIONS


def _read_section(lines: list[str], start: int, docs: Docs, name: str) -> int:
    """Read the section whose header is at `start`; return the line after it."""
    i = start + 1
    item_indent: int | None = None
    current: str | None = None
    while i < len(lines):
        line = lines[i]
        if line.strip() and _indent(line) == 0:
            break  # the next section, or text after the sections
        if not line.strip():
            i += 1
            continue
        if item_indent is None:
            item_indent = _indent(line)
        if name in _ARGUMENT_SECTIONS:
            item = _GOOGLE_ITEM.match(line.strip()) if _indent(line) == item_indent else None
            if item:
                current = item.group(1)
                docs.arguments[current] = item.group(2).strip()
            elif current is not None:
                docs.arguments[current] = _join(docs.arguments[current], line.strip())
        i += 1
    return i


def _read_sphinx_field(lines: list[str], start: int, docs: Docs) -> int:
    """Read the `:field ...:` at `start` and its indented continuation lines."""
    match = _SPHINX_FIELD.match(lines[start])
    assert match is not None
    kind, words, text = match.group(1), match.group(2).split(), match.group(3).strip()
    i = start + 1
    while i < len(lines) and lines[i].strip() and _indent(lines[i]) > 0:
        text = _join(text, lines[i].strip())
        i += 1
    if kind in _SPHINX_PARAM and words:
        docs.arguments[words[-1]] = text
    return i


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(text: str, more: str) -> str:
    return f"{text} {more}" if text else more


def _paragraphs(lines: list[str]) -> str:
    paragraphs: list[str] = []
    current: list[str] = []
    for line in lines + [""]:
        if line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    return "\n\n".join(paragraphs)
