"""Outgoing HTTP through `wasi:http`.

The host allows a request only to the origins the manifest grants the
component (`allow_hosts = ["https://api.example.org"]`); any other is
refused with a `permission_denied` ToolError that names the origin and the
line to add. Redirects are followed (up to `max_redirects`), each hop
checked by the host again, so a redirect cannot lead out of the grants.

```
from toolhost import http

page = http.get("https://example.org/").text()
created = http.post("https://api.example.org/items", json={"name": "x"})
if created.status >= 400:
    ...
```

Failures are ToolErrors: `permission_denied` (origin not granted),
`invalid_input` (a URL that is not absolute http(s)), `unavailable`
(connection, DNS, timeout, a body over `max_body`, too many redirects).
"""

from __future__ import annotations

import json as _json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

from . import _bindings
from ._errors import ToolError

#: Response bodies larger than this are refused unless a request raises
#: `max_body`: a tool's memory is limited, and a runaway download should
#: fail with a clear error rather than an out-of-memory trap.
DEFAULT_MAX_BODY = 8 * 1024 * 1024

#: How many redirects a request follows by default.
DEFAULT_MAX_REDIRECTS = 5

# `blocking_write_and_flush` takes at most 4096 bytes per call.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024


@dataclass
class Response:
    """A response with its whole body read."""

    #: The HTTP status code.
    status: int
    #: Every header as `(name, value)`, in the order received.
    headers: list[tuple[str, str]] = field(default_factory=list)
    #: The body's bytes.
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header `name` (case-insensitive), or None."""
        name = name.lower()
        return next((v for n, v in self.headers if n.lower() == name), None)

    def text(self) -> str:
        """The body as UTF-8 text, invalid sequences replaced with U+FFFD."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises a ToolError `unavailable` when it is not JSON: the service
        answered something else than the tool expects.
        """
        try:
            return _json.loads(self.body)
        except ValueError as e:
            raise ToolError.unavailable(f"the response (status {self.status}) is not JSON: {e}") from None


def request(
    method: str,
    url: str,
    headers: dict[str, str] | list[tuple[str, str]] | None = None,
    body: bytes | str | None = None,
    timeout: float | None = None,
    *,
    json: Any = None,
    max_body: int = DEFAULT_MAX_BODY,
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
) -> Response:
    """Send `method url` and read the whole response.

    `headers` is a dict or a list of pairs; `body` bytes or text (sent as
    UTF-8); `json` a value sent as a JSON body with its content type.
    `timeout` (seconds) bounds connecting and the wait for the first byte;
    the host's deadline for the call applies regardless. A response of
    any status is returned: check `status`.
    """
    pairs = list(headers.items()) if isinstance(headers, dict) else list(headers or [])
    if json is not None:
        if body is not None:
            raise ValueError("pass body= or json=, not both")
        body = _json.dumps(json, separators=(",", ":"), allow_nan=False)
        if not any(name.lower() == "content-type" for name, _ in pairs):
            pairs.append(("content-type", "application/json"))
    if body is not None and not isinstance(body, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"body must be bytes or str, not {type(body).__name__}")
    payload = body.encode() if isinstance(body, str) else bytes(body or b"")
    method = method.upper()
    for _ in range(max_redirects + 1):
        response = _send_once(method, url, pairs, payload, timeout, max_body)
        location = response.header("location") if response.status in (301, 302, 303, 307, 308) else None
        if location is None or max_redirects == 0:
            return response
        next_url = urljoin(url, location)
        # Credentials go only where they were meant to: to another origin,
        # as browsers and curl do, they are dropped.
        if _origin(next_url) != _origin(url):
            pairs = [(n, v) for n, v in pairs if n.lower() not in _CREDENTIALS]
        url = next_url
        # 303 always, and 301/302 after POST by long-standing practice, become
        # GET, and the body and what describes it are dropped.
        if response.status == 303 or (response.status in (301, 302) and method == "POST"):
            method, payload = "GET", b""
            pairs = [(n, v) for n, v in pairs if not n.lower().startswith("content-")]
    raise ToolError.unavailable(f"too many redirects (more than {max_redirects}), last to {url}")


# Headers that carry credentials: sent to the origin they were given for only.
_CREDENTIALS = ("authorization", "cookie", "proxy-authorization")


def _origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, the default port made explicit."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def get(url: str, headers: dict[str, str] | None = None, timeout: float | None = None, **options: Any) -> Response:
    """`GET url`; see `request` for the options."""
    return request("GET", url, headers, None, timeout, **options)


def post(
    url: str,
    body: bytes | str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float | None = None,
    **options: Any,
) -> Response:
    """`POST url` with `body` (or `json=`); see `request` for the options."""
    return request("POST", url, headers, body, timeout, **options)


def _send_once(
    method: str,
    url: str,
    headers: list[tuple[str, str]],
    body: bytes,
    timeout: float | None,
    max_body: int,
) -> Response:
    bindings = _bindings.require()
    Err, Ok, wasi = bindings.Err, bindings.Ok, bindings.http

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError.invalid_input(f"invalid URL {url!r}: only absolute http:// and https:// URLs are supported")
    if not parts.hostname:
        raise ToolError.invalid_input(f"invalid URL {url!r}: it has no host")
    if "@" in parts.netloc:
        raise ToolError.invalid_input(
            f"invalid URL {url!r}: credentials in the URL are not sent; use an Authorization header"
        )
    origin = f"{parts.scheme}://{parts.netloc}"
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

    if body or method in ("POST", "PUT", "PATCH"):
        if not any(name.lower() == "content-length" for name, _ in headers):
            # A known length: many servers refuse chunked uploads.
            headers = [*headers, ("content-length", str(len(body)))]
    try:
        fields = wasi.Fields.from_list([(name, value.encode()) for name, value in headers])
    except Err as e:
        raise ToolError.invalid_input(f"a request header was refused: {_name(e.value)}") from None
    request = wasi.OutgoingRequest(fields)
    methods = {
        "GET": wasi.Method_Get, "HEAD": wasi.Method_Head, "POST": wasi.Method_Post,
        "PUT": wasi.Method_Put, "DELETE": wasi.Method_Delete, "PATCH": wasi.Method_Patch,
        "OPTIONS": wasi.Method_Options,
    }
    scheme = wasi.Scheme_Https() if parts.scheme == "https" else wasi.Scheme_Http()
    try:
        request.set_method(methods[method]() if method in methods else wasi.Method_Other(method))
        request.set_scheme(scheme)
        request.set_authority(parts.netloc)
        request.set_path_with_query(path)
    except Err:
        raise ToolError.invalid_input(f"invalid request {method} {url!r}: the host refused it") from None

    options = wasi.RequestOptions()
    if timeout is not None:
        nanos = int(timeout * 1e9)
        # The host may refuse to honour these; its deadline still applies.
        for setter in (options.set_connect_timeout, options.set_first_byte_timeout):
            try:
                setter(nanos)
            except Err:
                pass

    outgoing = request.body()
    try:
        pending = bindings.outgoing_handler.handle(request, options)
    except Err as e:
        raise _error_code(origin, e.value) from None
    # The body is written after `handle`, while the host sends the request:
    # written before, a body larger than the stream's buffer would wait for
    # a reader that never comes.
    failure = _write_body(outgoing, body, origin)
    with pending:
        with pending.subscribe() as ready:
            ready.block()
        outcome = pending.get()
    # Ready after block(): Ok(Ok(response)), Ok(Err(code)), or Err if taken twice.
    assert isinstance(outcome, Ok)
    # The request's own error says more than the body's (a refused connection
    # also fails the write).
    if isinstance(outcome.value, Err):
        raise _error_code(origin, outcome.value.value)
    if failure is not None:
        raise failure
    response = outcome.value.value

    with response:
        status = response.status()
        with response.headers() as fields:
            received = [(name, value.decode("utf-8", "replace")) for name, value in fields.entries()]
        incoming = response.consume()
        data, failure = _read_body(incoming, origin, max_body)
        # The body is the response's child: finished before the response is dropped.
        with wasi.IncomingBody.finish(incoming):
            pass
    if failure is not None:
        raise failure
    return Response(status, received, data)


def _write_body(outgoing: Any, body: bytes, origin: str) -> ToolError | None:
    """Write and finish the request's body; return what stopped it, if anything."""
    bindings = _bindings.require()
    with outgoing.write() as stream:
        for start in range(0, len(body), _WRITE_CHUNK):
            try:
                stream.blocking_write_and_flush(body[start:start + _WRITE_CHUNK])
            except bindings.Err as e:
                failure = ToolError.unavailable(
                    f"request to {origin} failed writing the body: {_stream_error(e.value)}"
                )
                break
        else:
            failure = None
    if failure is not None:
        # Dropped unfinished, the body tells the host the request is incomplete.
        outgoing.__exit__(None, None, None)
        return failure
    try:
        bindings.http.OutgoingBody.finish(outgoing, None)
    except bindings.Err as e:
        return _error_code(origin, e.value)
    return None


def _read_body(incoming: Any, origin: str, limit: int) -> tuple[bytes, ToolError | None]:
    """The body's bytes, or what stopped the read (returned, not raised, so
    the caller can release the body in order first)."""
    bindings = _bindings.require()
    data = bytearray()
    with incoming.stream() as stream:
        while True:
            try:
                chunk = stream.blocking_read(_READ_CHUNK)
            except bindings.Err as e:
                if isinstance(e.value, bindings.streams.StreamError_Closed):
                    return bytes(data), None
                return b"", ToolError.unavailable(
                    f"request to {origin} failed reading the body: {_stream_error(e.value)}"
                )
            if len(data) + len(chunk) > limit:
                return b"", ToolError.unavailable(
                    f"the response from {origin} is larger than the {limit}-byte limit; "
                    "raise max_body= if the tool needs it"
                )
            data += chunk


def _error_code(origin: str, code: Any) -> ToolError:
    """The ToolError for a `wasi:http` error code."""
    if isinstance(code, _bindings.require().http.ErrorCode_HttpRequestDenied):
        return ToolError.permission_denied(
            f"request to {origin} denied: this tool is not granted that origin; add it to "
            f'the tool\'s allow_hosts in toolhost.toml, e.g. allow_hosts = ["{origin}"]'
        )
    return ToolError.unavailable(f"request to {origin} failed: {_name(code)}")


def _stream_error(error: Any) -> str:
    failed = getattr(error, "value", None)
    return failed.to_debug_string() if failed is not None else _name(error)


def _name(value: Any) -> str:
    """`ErrorCode_ConnectionRefused()` as `connection refused`, with any payload."""
    kind = type(value).__name__.split("_", 1)[-1]
    words = re.sub(r"(?<!^)(?=[A-Z])", " ", kind).lower()
    payload = getattr(value, "value", None)
    return f"{words} ({payload})" if payload is not None else words
