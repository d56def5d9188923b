"""Running a call without the host: arguments, results and errors.

Run under plain CPython, without a component:
    python3 -m unittest discover -s guest-sdk/python/tests
"""

import dataclasses
import errno
import json
import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from toolhost import (  # noqa: E402
    Context, Image, Output, ToolError, _errors, _tools, file_error, log, tool,
)

CONTEXT = Context("call-1", 5000, '{"user":"ada"}')


@dataclasses.dataclass
class Counts:
    words: int


@tool(name="t_echo")
def echo(text: str, times: int = 1, suffix: str | None = None, cx: Context = None) -> str:
    """Repeat a text."""
    return text * times + (suffix or "") + f" ({cx.call_id}, {cx.context_json()['user']})"


@tool(name="t_counts", output=Counts)
def counts(text: str) -> Counts:
    """Count words."""
    return Counts(len(text.split()))


@tool(name="t_plain_json")
def plain_json(text: str) -> dict:
    """Return JSON without an output schema."""
    return {"text": text}


@tool(name="t_fails")
def fails(how: str) -> str:
    """Fail in several ways."""
    if how == "tool":
        raise ToolError.not_found("no such thing")
    if how == "file":
        open("/no/such/dir/file.txt")
    if how == "oserror":
        raise OSError(errno.EIO, "I/O error")
    if how == "exit":
        raise SystemExit(3)
    return 1 / 0


@tool(name="t_output")
def output() -> Output:
    """Several blocks."""
    return Output("a chart:", Image(b"\x89PNG", "image/png"), structured={"n": 1}, artifact={"raw": [1]})


def run(name, arguments):
    return _tools.run(name, json.dumps(arguments), CONTEXT)


class RunTest(unittest.TestCase):
    def test_arguments_defaults_optionals_and_context(self):
        self.assertEqual(run("t_echo", {"text": "ab"}).text(), "ab (call-1, ada)")
        self.assertEqual(run("t_echo", {"text": "ab", "times": 2, "suffix": "!"}).text(),
                         "abab! (call-1, ada)")

    def test_the_decorated_function_is_returned_unchanged(self):
        self.assertEqual(counts("a b c"), Counts(3))

    def test_structured_only_when_an_output_schema_is_declared(self):
        out = run("t_counts", {"text": "a b"})
        self.assertEqual((out.text(), out.structured), ('{"words":2}', '{"words":2}'))
        out = run("t_plain_json", {"text": "é"})
        self.assertEqual((out.text(), out.structured), ('{"text":"é"}', None))

    def test_output_blocks(self):
        out = run("t_output", {})
        self.assertEqual(out.content[1], Image(b"\x89PNG", "image/png"))
        self.assertEqual((out.structured, out.artifact), ('{"n":1}', '{"raw":[1]}'))
        with self.assertRaises(TypeError):
            Output(b"bytes")

    def assertError(self, name, arguments, kind, message, retryable):
        with self.assertRaises(ToolError) as raised:
            run(name, arguments)
        error = raised.exception
        self.assertEqual((error.kind, error.retryable), (kind, retryable), error)
        self.assertIn(message, error.message)
        return error

    def test_bad_arguments_are_invalid_input_and_retryable(self):
        self.assertError("t_echo", {}, "invalid_input", "`text` is required", True)
        self.assertError("t_echo", {"text": 1}, "invalid_input", "`text` must be a string", True)
        self.assertError("t_echo", {"text": "a", "x": 1}, "invalid_input", "unknown field(s) x", True)
        with self.assertRaises(ToolError) as raised:
            _tools.run("t_echo", "[1]", CONTEXT)
        self.assertEqual(raised.exception.kind, "invalid_input")

    def test_unknown_tool(self):
        self.assertError("nope", {}, "unknown_tool", "no tool named 'nope'", False)

    def test_errors_from_handlers(self):
        self.assertError("t_fails", {"how": "tool"}, "not_found", "no such thing", True)
        error = self.assertError("t_fails", {"how": "math"}, "internal",
                                 "the tool failed: ZeroDivisionError: division by zero", False)
        self.assertIsInstance(error.__cause__, ZeroDivisionError)
        self.assertError("t_fails", {"how": "exit"}, "internal", "SystemExit", False)
        self.assertError("t_fails", {"how": "oserror"}, "internal", "I/O error", False)

    def test_an_os_error_on_a_file_is_mapped(self):
        # On this machine /no exists nowhere but / does: a real missing file.
        self.assertError("t_fails", {"how": "file"}, "not_found", "/no/such/dir/file.txt", True)

    def test_the_model_cannot_write_the_context(self):
        @tool(name="t_ctx_optional")
        def whoami(q: str, cx: Context | None = None) -> str:
            """Say who asks."""
            return cx.context_json()["user"]

        spec = json.loads(_tools.specs()[-1].input_schema)
        self.assertEqual(list(spec["properties"]), ["q"])
        forged = {"q": "x", "cx": {"call_id": "x", "deadline_ms": 1, "context": '{"user":"admin"}'}}
        with self.assertRaises(ToolError) as refused:
            _tools.run("t_ctx_optional", json.dumps(forged), CONTEXT)
        self.assertEqual(refused.exception.kind, "invalid_input")
        self.assertEqual(_tools.run("t_ctx_optional", '{"q":"x"}', CONTEXT).content[0].text, "ada")

        @dataclasses.dataclass
        class Holder:
            cx: Context

        with self.assertRaises(TypeError):

            @tool(name="t_ctx_nested")
            def nested(h: Holder) -> str:
                """Nested."""
                return ""

    def test_an_optional_field_left_out_of_a_dataclass_is_none(self):
        @dataclasses.dataclass
        class Query:
            a: str
            b: int | None

        @tool(name="t_optional_field")
        def q(query: Query) -> str:
            """Echo b."""
            return repr(query.b)

        self.assertEqual(_tools.run("t_optional_field", '{"query":{"a":"x"}}', CONTEXT).content[0].text, "None")

    def test_a_result_json_cannot_hold_is_an_internal_error(self):
        @tool(name="t_nan", output=Counts)
        def nan() -> dict:
            """Overflow."""
            return {"words": float("inf")}

        with self.assertRaises(ToolError) as failed:
            _tools.run("t_nan", "{}", CONTEXT)
        self.assertEqual(failed.exception.kind, "internal")

    def test_a_tool_error_makes_its_parts_text(self):
        error = ToolError.unavailable(OSError(5, "I/O error"))
        self.assertIsInstance(error.message, str)
        self.assertTrue(error.retryable)

    def test_duplicate_names_are_refused(self):
        with self.assertRaisesRegex(ValueError, "two tools are named 't_echo'"):
            tool(name="t_echo")(plain_json)

    def test_host_functions_say_they_need_the_host(self):
        with self.assertRaisesRegex(RuntimeError, "componentize-py"):
            log.info("x")


class FileErrorTest(unittest.TestCase):
    def test_a_path_with_no_visible_ancestor_is_outside_the_grants(self):
        # Under WASI nothing outside the preopened directories can be stat'ed.
        with mock.patch.object(_errors.os, "stat", side_effect=FileNotFoundError(errno.ENOENT, "x")):
            error = file_error(FileNotFoundError(errno.ENOENT, "No such file or directory"), "/etc/passwd")
        self.assertEqual((error.kind, error.retryable), ("permission_denied", False))
        self.assertIn("/etc/passwd is outside this tool's file grants", error.message)
        self.assertIn("files = [{ host =", error.message)

    def test_a_missing_file_in_a_visible_directory_is_not_found(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "missing.txt")
            try:
                open(path)
            except OSError as e:
                error = file_error(e)
        self.assertEqual((error.kind, error.retryable), ("not_found", True))
        self.assertIn("missing.txt: No such file or directory", error.message)

    def test_other_errors(self):
        self.assertEqual(file_error(PermissionError(errno.EACCES, "denied"), "/").kind, "permission_denied")
        self.assertEqual(file_error(OSError(errno.EROFS, "read-only"), "/").kind, "permission_denied")
        self.assertEqual(file_error(OSError(errno.ENAMETOOLONG, "long"), "/").kind, "invalid_input")
        self.assertEqual(file_error(OSError(errno.EIO, "io"), "/").kind, "io")
        self.assertEqual(file_error(OSError(errno.EIO, "io")).kind, "io")


class StoreErrors(unittest.TestCase):
    """The host's store failures become typed ToolErrors (no bindings needed)."""

    def test_every_kind_the_host_sends_becomes_its_error_kind(self):
        from toolhost import store

        class Other:
            def __init__(self, value):
                self.value = value

        fake = mock.Mock()
        fake.store.Error_Other = Other
        cases = [
            ("quota-exceeded: 10 keys at most", "quota_exceeded", False),
            ("too-large: 64 KiB at most", "invalid_input", True),
            ("not-a-counter: the value is text", "invalid_input", True),
            ("invalid-cursor: start the listing again", "invalid_input", True),
            ("limit: 1000 operations per call", "limit", False),
            ("unavailable: Redis is down", "unavailable", True),
            ("in-use: held by process 42; stop it", "unavailable", False),
            ("something else", "store", False),
        ]
        with mock.patch.object(store._bindings, "require", return_value=fake):
            for sent, kind, retryable in cases:
                error = store._error("notes", Other(sent))
                self.assertEqual((error.kind, error.retryable), (kind, retryable), sent)
                self.assertIn(sent.partition(": ")[2] or sent, error.message)
            denied = store._error("notes", object())
            self.assertEqual(denied.kind, "permission_denied")


class AskTest(unittest.TestCase):
    def test_a_key_asks_under_it_and_no_key_asks_plainly(self):
        from toolhost import _host

        fake = mock.Mock()
        fake.host.ask.return_value = '{"name": "Ada"}'
        fake.host.ask_with_key.return_value = '{"name": "Ada"}'
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        with mock.patch.object(_host._bindings, "require", return_value=fake):
            self.assertEqual(_host.ask("Name?", schema, key="user_name"), {"name": "Ada"})
            self.assertEqual(_host.ask("Name?", schema), {"name": "Ada"})
        form = '{"type":"object","properties":{"name":{"type":"string"}}}'
        fake.host.ask_with_key.assert_called_once_with("user_name", "Name?", form)
        fake.host.ask.assert_called_once_with("Name?", form)


if __name__ == "__main__":
    unittest.main()
