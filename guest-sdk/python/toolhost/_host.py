"""What the host offers beyond WASI: the log, config, progress, questions."""

from __future__ import annotations

import json
from typing import Any

from . import _bindings, _schema
from ._errors import Refused

_LEVELS = ("trace", "debug", "info", "warn", "error")


class _Log:
    """Write to the host's structured log, tagged with the call's ids.

    `log("info", "fetched 3 pages")`, or `log.info("fetched 3 pages")`;
    the levels are trace, debug, info, warn and error. The log goes to the
    operator, never to the model. Prefer it to `print`: the host keeps only
    the tail of a tool's output, for traps.
    """

    def __call__(self, level: str, message: str) -> None:
        if level not in _LEVELS:
            raise ValueError(f"log level {level!r} is not one of {', '.join(_LEVELS)}")
        host = _bindings.require().host
        host.log(host.Level[level.upper()], _text(message))

    def trace(self, message: str) -> None:
        """Log at level trace."""
        self("trace", message)

    def debug(self, message: str) -> None:
        """Log at level debug."""
        self("debug", message)

    def info(self, message: str) -> None:
        """Log at level info."""
        self("info", message)

    def warn(self, message: str) -> None:
        """Log at level warn."""
        self("warn", message)

    def error(self, message: str) -> None:
        """Log at level error."""
        self("error", message)


log = _Log()


def _text(value: object) -> str:
    """`value` as a string the host takes: what is not UTF-8 replaced, since
    a string that is not traps the instance as it is handed over."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def config(key: str) -> str | None:
    """The value granted to this component under `key`, or None.

    Granted in the manifest, `config = { units = "metric" }`; secrets too
    (`config = { api_key = { env = "WEATHER_KEY" } }`): the model never
    sees them and the host never logs them.
    """
    return _bindings.require().host.config(_text(key))


def progress(done: float, total: float | None = None, message: str | None = None) -> None:
    """Report progress: `done` out of `total` (when known), with a short message.

    MCP clients show it as a progress bar, `toolhost run` on its display.
    A report whose `done` does not grow is dropped, as are reports past the
    host's budget for the call.
    """
    _bindings.require().host.progress(
        float(done), None if total is None else float(total), None if message is None else _text(message)
    )


def ask(question: str, schema: Any, *, key: str | None = None) -> Any:
    """Ask the person a question mid-call and wait for the answer.

    `schema` is the answer's type, a dataclass or TypedDict whose fields
    are strings (a `Literal` for a choice), numbers or booleans; the answer
    comes back as that type. A dict is taken as the JSON Schema itself and
    the answer comes back as a dict. Waiting does not count against the
    call's timeout.

    `key` names the question (contract 0.2.1): the name clients see it by
    (an MCP input-required result's `inputRequests` key), so one that
    knows the tool can answer it in the call itself. It is 1 to 64 of
    `A-Z a-z 0-9 _ -`, not `q` and digits (the names questions asked
    without a key get), and names one question of a call.

    Raises `Refused` (a `ToolError`) when the person declines or dismisses
    the question, when nobody can be asked, or when the question (or its
    key) is not one the host can take.
    """
    wit = _bindings.require()
    answer_schema = schema if isinstance(schema, dict) else _schema.schema_of(schema)
    form = json.dumps(answer_schema, separators=(",", ":"))
    try:
        if key is None:
            answer = wit.host.ask(question, form)
        else:
            answer = wit.host.ask_with_key(key, question, form)
    except wit.Err as e:
        raise Refused(e.value.reason.name.lower(), e.value.message) from None
    parsed = json.loads(answer)
    if isinstance(schema, dict):
        return parsed
    try:
        return _schema.convert(parsed, schema, "answer")
    except Exception as e:
        raise Refused("invalid_question", f"the answer does not fit the type asked for: {e}") from None
