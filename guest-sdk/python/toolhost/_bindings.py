"""The componentize-py bindings of contract `toolhost:tool@0.2.1`, when present.

componentize-py builds a component by importing the app and snapshotting
it: a module first imported later, during a call, is not in the component.
So every binding module the SDK uses is imported here, at import. Under
plain CPython (tests) there are no bindings; the schema, the conversions
and the tools' own code still work, and `require()` names the problem for
the rest.
"""

from __future__ import annotations

from types import SimpleNamespace

try:
    import componentize_py_types
    from wit_world.imports import (
        atomics,
        host,
        outgoing_handler,
        store,
        streams,
        toolhost_tool_types,
        wasi_http_types,
    )
except ImportError as e:
    _missing: ImportError | None = e
    _modules = None
else:
    _missing = None
    _modules = SimpleNamespace(
        Err=componentize_py_types.Err,
        Ok=componentize_py_types.Ok,
        atomics=atomics,
        host=host,
        outgoing_handler=outgoing_handler,
        store=store,
        streams=streams,
        tool=toolhost_tool_types,
        http=wasi_http_types,
    )


def require() -> SimpleNamespace:
    """The bindings: `Err`, `Ok`, and the interfaces the SDK uses.

    Raises `RuntimeError` outside a component, e.g. when a test calls a
    handler that logs or opens a store: stub the SDK function there.
    """
    if _modules is None:
        raise RuntimeError(
            "this needs the toolhost host: it works inside a component built with "
            f"componentize-py 0.25.1 (the bindings could not be imported: {_missing})"
        )
    return _modules
