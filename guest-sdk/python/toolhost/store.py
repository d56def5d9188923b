"""Key-value stores through `wasi:keyvalue`: state that outlives a call.

The manifest declares a store (`[store.notes]`) and grants it per component
(`stores = ["notes"]`); without the grant, `open` raises a
`permission_denied` ToolError naming both lines. A store may be kept per
user or tenant (`scope = "user"`): the host then opens the namespace of the
call's injected context, and a tool never sees another user's keys. Quotas
are the operator's; a write past one is refused whole and changes nothing.

```
from toolhost import store

notes = store.open("notes")
notes.set("greeting", b"hello")
visits = notes.increment("visits")
notes.set_json("last", {"visits": visits})
```

Failures are ToolErrors: `permission_denied` (not granted), `quota_exceeded`,
`invalid_input` (too large, not a counter, not JSON, a listing cursor the host
forgot), `limit` (past a per-call bound), `unavailable` (retryable: trying
later may work; not retryable: another process holds the store's file),
`store` (other).
"""

from __future__ import annotations

import json
from typing import Any

from . import _bindings
from ._errors import ToolError


def open(name: str) -> Store:  # noqa: A001 - mirrors wasi:keyvalue's `open`
    """Open the store the manifest calls `name`.

    Raises a `permission_denied` ToolError when it is not granted to this
    component, or when it is scoped and the call's context lacks the key.
    """
    return Store(name, _call(name, _bindings.require().store.open, name))


class Store:
    """An open store; use `open(name)`. Values are bytes (or JSON, with the `_json` methods)."""

    def __init__(self, name: str, bucket: Any) -> None:
        #: The store's name in the manifest.
        self.name = name
        self._bucket = bucket

    def get(self, key: str) -> bytes | None:
        """The value under `key`, or None."""
        return _call(self.name, self._bucket.get, key)

    def set(self, key: str, value: bytes | str) -> None:
        """Set `key` to `value` (text is stored as UTF-8)."""
        if not isinstance(value, (str, bytes, bytearray, memoryview)):
            # bytes(5) would store five zero bytes.
            raise TypeError(f"a value is bytes or str, not {type(value).__name__}; use set_json for others")
        data = value.encode() if isinstance(value, str) else bytes(value)
        _call(self.name, self._bucket.set, key, data)

    def delete(self, key: str) -> None:
        """Delete `key`; nothing happens when there is none."""
        _call(self.name, self._bucket.delete, key)

    def exists(self, key: str) -> bool:
        """Whether `key` has a value."""
        return _call(self.name, self._bucket.exists, key)

    def keys(self) -> list[str]:
        """Every key, read page by page."""
        keys: list[str] = []
        cursor = None
        while True:
            page = _call(self.name, self._bucket.list_keys, cursor)
            keys.extend(page.keys)
            if page.cursor is None:
                return keys
            cursor = page.cursor

    def get_json(self, key: str) -> Any:
        """The value under `key` parsed as JSON, or None when there is none."""
        data = self.get(key)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise ToolError.invalid_input(f"the value of {key!r} in store {self.name!r} is not JSON: {e}") from None

    def set_json(self, key: str, value: Any) -> None:
        """Set `key` to `value` as compact JSON."""
        self.set(key, json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False))

    def increment(self, key: str, delta: int = 1) -> int:
        """Add `delta` to the counter under `key` (0 when there is none); return the new value.

        Counters are kept as decimal text; a value that is not one raises
        an `invalid_input` ToolError.
        """
        if isinstance(delta, bool) or not isinstance(delta, int) or not 0 <= delta < 2**63:
            raise ToolError.invalid_input(f"an increment is a whole number from 0 to 2**63-1, not {delta!r}")
        return _call(self.name, _bindings.require().atomics.increment, self._bucket, key, delta)

    def close(self) -> None:
        """Release the store now rather than when the call ends."""
        self._bucket.__exit__(None, None, None)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _call(name: str, operation: Any, *args: Any) -> Any:
    """`operation(*args)`, its `wasi:keyvalue` error raised as a ToolError."""
    try:
        return operation(*args)
    except _bindings.require().Err as e:
        raise _error(name, e.value) from None


def _error(name: str, error: Any) -> ToolError:
    if not isinstance(error, _bindings.require().store.Error_Other):
        return ToolError.permission_denied(
            f"the store {name!r} is not available to this tool: grant it in toolhost.toml "
            f'with stores = ["{name}"] on this component and a [store.{name}] table '
            "(a scoped store also needs its key in the call's context)"
        )
    # The host sends every other failure as `other("KIND: message")`.
    kind, _, message = error.value.partition(": ")
    if not message:
        kind, message = "", error.value
    if kind == "quota-exceeded":
        return ToolError("quota_exceeded", f"store {name!r}: quota exceeded: {message}")
    if kind in ("too-large", "not-a-counter", "invalid-cursor"):
        return ToolError.invalid_input(f"store {name!r}: {kind.replace('-', ' ')}: {message}")
    if kind == "limit":
        return ToolError("limit", f"store {name!r}: {message}")
    if kind == "unavailable":
        return ToolError.unavailable(f"store {name!r}: {message}")
    if kind == "in-use":
        return ToolError("unavailable", f"store {name!r}: in use by another process: {message}")
    return ToolError("store", f"store {name!r}: {error.value}")
