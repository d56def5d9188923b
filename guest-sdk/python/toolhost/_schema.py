"""JSON Schema from Python type hints, and JSON values converted back to them.

The schemas are compact and closed (`additionalProperties: false`), list the
fields that must be given in `required`, and never carry `default` or a
`format`: OpenAI's strict mode refuses both. An optional field (`T | None`)
is also nullable, so a caller that must list every field (strict mode) can
pass `null` for it.

Supported: `str`, `int`, `float`, `bool`, `list[T]`, `dict[str, T]`,
`T | None` and other unions, `Literal[...]`, `enum.Enum`, dataclasses,
`TypedDict`s, `typing.Any`, and `Annotated[T, ...]` carrying a description
(a string) or extra keywords (`Schema(...)`).
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Literal, Union

from . import _docs
from ._errors import ToolError

_NONE = type(None)
# `Required` / `NotRequired` wrap TypedDict fields (Python 3.11+).
_REQUIRED_MARKERS = tuple(
    marker for marker in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None))
    if marker is not None
)


class Schema(dict):
    """JSON Schema keywords added to a type's derived schema, inside `Annotated`.

    Spelled as in JSON Schema: `Annotated[str, Schema(maxLength=1)]`,
    `Annotated[int, Schema(minimum=0)]`. A plain string in `Annotated` is
    the description: `Annotated[str, "Who to greet."]`.
    """

    def __init__(self, **keywords: Any) -> None:
        super().__init__(keywords)


def schema_of(tp: Any, description: str | None = None) -> dict:
    """The JSON Schema of values of type `tp`.

    Raises `TypeError` for a type with no JSON form (say, `bytes` or a
    recursive dataclass), naming it, so a mistake fails the build.
    """
    return _schema(tp, description, ())


def object_schema(
    fields: list[tuple[str, Any, bool]], descriptions: dict[str, str], seen: tuple = ()
) -> dict:
    """A closed object schema of `fields`, each `(name, type, required)`."""
    properties = {
        name: _schema(tp, descriptions.get(name), seen) for name, tp, _ in fields
    }
    schema: dict = {"type": "object", "properties": properties}
    schema["required"] = [name for name, _, required in fields if required]
    schema["additionalProperties"] = False
    return schema


def is_optional(tp: Any) -> bool:
    """Whether `tp` admits `None` (`T | None`, `Optional[T]`)."""
    tp = _strip(tp)[0]
    return _is_union(tp) and _NONE in typing.get_args(tp)


def is_object_type(tp: Any) -> bool:
    """Whether `tp` is a dataclass or a TypedDict: a JSON object with fields."""
    tp = _strip(tp)[0]
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or typing.is_typeddict(tp))


def _schema(tp: Any, description: str | None, seen: tuple) -> dict:
    tp, extra = _strip(tp)
    if extra.get("description") is None and description:
        extra["description"] = description
    schema = _bare_schema(tp, seen)
    schema.update(extra)
    return schema


def strip(tp: Any) -> Any:
    """`tp` without `Annotated[...]` and without `| None`, when one type is left."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if _is_union(tp):
        rest = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        if len(rest) == 1:
            return strip(rest[0])
    return tp


def refers_to(tp: Any, target: type) -> bool:
    """Whether `target` appears anywhere in type hint `tp`."""
    if tp is target:
        return True
    return any(refers_to(arg, target) for arg in typing.get_args(tp) if not isinstance(arg, str))


def _bare_schema(tp: Any, seen: tuple) -> dict:
    from ._output import Context  # a cycle at import time otherwise

    if tp is Context:
        raise TypeError(
            "Context is the call's own, given by the host: it cannot be part of the "
            "arguments the model writes"
        )
    if tp is Any:
        return {}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        return _union_schema(args, seen)
    if origin is Literal:
        return _enum_schema(list(args))
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum_schema([member.value for member in tp])
    if tp is list or origin is list:
        schema: dict = {"type": "array"}
        if args:
            schema["items"] = _schema(args[0], None, seen)
        return schema
    if tp is dict or origin is dict:
        schema = {"type": "object"}
        if args:
            if args[0] is not str:
                raise TypeError(f"{_name(tp)}: JSON object keys are strings, use dict[str, ...]")
            schema["additionalProperties"] = _schema(args[1], None, seen)
        return schema
    if is_object_type(tp):
        if tp in seen:
            raise TypeError(f"{_name(tp)} refers to itself; recursive types have no schema here")
        docs = _docs.parse(_own_doc(tp))
        schema = object_schema(_fields(tp), docs.arguments, seen + (tp,))
        if docs.summary:
            schema["description"] = docs.summary
        return schema
    raise TypeError(
        f"{_name(tp)} has no JSON Schema here; use str, int, float, bool, list[T], "
        "dict[str, T], T | None, Literal[...], an Enum, a dataclass or a TypedDict"
    )


def _union_schema(args: tuple, seen: tuple) -> dict:
    members = [arg for arg in args if arg is not _NONE]
    nullable = len(members) < len(args)
    if len(members) == 1:
        schema = _schema(members[0], None, seen)
        if not nullable:
            return schema
        # A type list reads better than anyOf, and strict mode takes both.
        if isinstance(schema.get("type"), str) and "enum" not in schema:
            schema["type"] = [schema["type"], "null"]
            return schema
        return {"anyOf": [schema, {"type": "null"}]}
    any_of = [_schema(member, None, seen) for member in members]
    if nullable:
        any_of.append({"type": "null"})
    return {"anyOf": any_of}


def _enum_schema(values: list) -> dict:
    json_types = {_json_type(value) for value in values}
    schema: dict = {}
    if len(json_types) == 1:
        schema["type"] = json_types.pop()
    schema["enum"] = values
    return schema


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    raise TypeError(f"{value!r} is not a JSON scalar; Literal and Enum values must be")


def _fields(tp: type) -> list[tuple[str, Any, bool]]:
    """The `(name, type, required)` of each field of a dataclass or TypedDict."""
    hints = typing.get_type_hints(tp, include_extras=True)
    if dataclasses.is_dataclass(tp):
        fields = []
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            has_default = (
                f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            )
            hint = hints[f.name]
            fields.append((f.name, hint, not has_default and not is_optional(hint)))
        return fields
    required_keys = tp.__required_keys__
    return [
        (name, hint, name in required_keys and not is_optional(hint))
        for name, hint in hints.items()
    ]


def _own_doc(tp: type) -> str | None:
    """`tp`'s docstring, without the signature dataclasses make up for it."""
    doc = tp.__doc__
    if doc and dataclasses.is_dataclass(tp) and doc.startswith(f"{tp.__name__}("):
        return None
    if doc and typing.is_typeddict(tp) and doc == dict.__doc__:
        return None
    return doc


def _strip(tp: Any) -> tuple[Any, dict]:
    """`tp` without `Annotated` and `Required` wrappers, and what they added."""
    extra: dict = {}
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            base, *metadata = typing.get_args(tp)
            for item in metadata:
                if isinstance(item, str):
                    extra.setdefault("description", item)
                elif isinstance(item, Schema):
                    for key, value in item.items():
                        extra.setdefault(key, value)
            tp = base
        elif _REQUIRED_MARKERS and origin in _REQUIRED_MARKERS:
            tp = typing.get_args(tp)[0]
        else:
            return tp, extra


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType)


def _name(tp: Any) -> str:
    return getattr(tp, "__qualname__", None) or repr(tp)


# Converting arguments -----------------------------------------------------


def convert(value: Any, tp: Any, path: str) -> Any:
    """`value` (parsed JSON) as type `tp`: dataclasses built, enums looked up.

    Raises `ToolError("invalid_input", ..., retryable=True)` naming `path`
    when the value does not fit. The host checks arguments against the
    schema before the call, so this guards against schemas the SDK could
    not express, and against callers that skip the check.
    """
    tp = _strip(tp)[0]
    if tp is Any:
        return value
    if tp is str:
        return _expect(value, str, path, "a string")
    if tp is bool:
        return _expect(value, bool, path, "a boolean")
    if tp is int:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, bool):
            raise _mismatch(path, "an integer", value)
        return _expect(value, int, path, "an integer")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _mismatch(path, "a number", value)
        return float(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_union(tp):
        return _convert_union(value, args, path)
    if origin is Literal:
        for allowed in args:
            if type(value) is type(allowed) and value == allowed:
                return allowed
        raise _mismatch(path, "one of " + ", ".join(_show(a) for a in args), value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        for member in tp:
            if type(value) is type(member.value) and value == member.value:
                return member
        raise _mismatch(path, "one of " + ", ".join(_show(m.value) for m in tp), value)
    if tp is list or origin is list:
        items = _expect(value, list, path, "an array")
        if not args:
            return items
        return [convert(item, args[0], f"{path}[{i}]") for i, item in enumerate(items)]
    if tp is dict or origin is dict:
        entries = _expect(value, dict, path, "an object")
        if not args:
            return entries
        return {key: convert(item, args[1], f"{path}.{key}") for key, item in entries.items()}
    if is_object_type(tp):
        return convert_object(value, tp, path)
    raise TypeError(f"{_name(tp)} cannot be converted from JSON")


def convert_object(value: Any, tp: type, path: str) -> Any:
    """A JSON object as dataclass or TypedDict `tp`."""
    entries = _expect(value, dict, path, "an object")
    kwargs = convert_fields(entries, _fields(tp), path)
    # An optional field (`T | None`) without a default may be left out by
    # the model, yet the class needs a value: None, as it says.
    if dataclasses.is_dataclass(tp):
        missing = [
            f.name
            for f in dataclasses.fields(tp)
            if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
    else:
        missing = list(getattr(tp, "__required_keys__", ()))
    for name in missing:
        kwargs.setdefault(name, None)
    return tp(**kwargs)


def convert_fields(
    entries: dict, fields: list[tuple[str, Any, bool]], path: str
) -> dict:
    """The converted values of `entries`, checked against `fields`.

    An optional field that is absent is left out, so the Python default
    applies; unknown and missing fields are refused, naming them.
    """
    known = {name for name, _, _ in fields}
    unknown = sorted(set(entries) - known)
    if unknown:
        where = f"`{path}` has" if path else "the arguments have"
        raise ToolError.invalid_input(
            f"{where} unknown field(s) {', '.join(unknown)}; "
            f"the fields are: {', '.join(sorted(known)) or 'none'}"
        )
    result = {}
    for name, tp, required in fields:
        here = f"{path}.{name}" if path else name
        if name in entries:
            result[name] = convert(entries[name], tp, here)
        elif required:
            raise ToolError.invalid_input(f"`{here}` is required")
    return result


def _convert_union(value: Any, args: tuple, path: str) -> Any:
    if value is None:
        if _NONE in args:
            return None
    for member in args:
        if member is _NONE:
            continue
        try:
            return convert(value, member, path)
        except ToolError:
            continue
    expected = " or ".join(_describe(member) for member in args)
    raise _mismatch(path, expected, value)


def _describe(tp: Any) -> str:
    if tp is _NONE:
        return "null"
    schema = schema_of(tp)
    kind = schema.get("type")
    return {"string": "a string", "integer": "an integer", "number": "a number",
            "boolean": "a boolean", "array": "an array", "object": "an object",
            "null": "null"}.get(kind if isinstance(kind, str) else "", _name(tp))


def _expect(value: Any, kind: type, path: str, expected: str) -> Any:
    if not isinstance(value, kind):
        raise _mismatch(path, expected, value)
    return value


def _mismatch(path: str, expected: str, value: Any) -> ToolError:
    return ToolError.invalid_input(f"`{path}` must be {expected}, not {_json_kind(value)}")


def _json_kind(value: Any) -> str:
    try:
        return {"string": "a string", "integer": "an integer", "number": "a number",
                "boolean": "a boolean", "null": "null"}[_json_type(value)]
    except TypeError:
        return "an array" if isinstance(value, list) else "an object"


def _show(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else repr(value)
