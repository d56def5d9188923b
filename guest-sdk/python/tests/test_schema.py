"""Schemas derived from type hints and docstrings, and arguments converted back.

Run under plain CPython, without a component:
    python3 -m unittest discover -s guest-sdk/python/tests
"""

import dataclasses
import enum
import json
import os
import sys
import unittest
from typing import Annotated, Any, Literal, Optional, TypedDict

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from toolhost import Context, Schema, ToolError, _docs, _tools  # noqa: E402
from toolhost._schema import convert, schema_of  # noqa: E402


def declare(function, **options):
    """The spec `@tool` derives for `function`, without registering it."""
    return _tools._describe(
        function,
        **{
            "name": None, "title": None, "description": None, "read_only": False,
            "destructive": False, "idempotent": False, "open_world": False, "output": None,
            **options,
        },
    )


def input_schema(function, **options):
    return json.loads(declare(function, **options).spec.input_schema)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclasses.dataclass
class Point:
    """A point on the page.

    Attributes:
        x: Across, in points.
        y: Down, in points.
    """

    x: float
    y: float = 0.0


class Box(TypedDict, total=False):
    """A box."""

    width: Annotated[int, Schema(minimum=1)]
    label: str


@dataclasses.dataclass
class Node:
    children: "list[Node]"


class Movie(TypedDict):
    title: str
    year: int | None


class SchemaTest(unittest.TestCase):
    def test_scalars_are_required_and_closed(self):
        def f(s: str, i: int, x: float, b: bool):
            """Scalars."""

        self.assertEqual(
            input_schema(f),
            {
                "type": "object",
                "properties": {
                    "s": {"type": "string"},
                    "i": {"type": "integer"},
                    "x": {"type": "number"},
                    "b": {"type": "boolean"},
                },
                "required": ["s", "i", "x", "b"],
                "additionalProperties": False,
            },
        )

    def test_a_default_makes_a_parameter_optional_without_emitting_default(self):
        def f(text: str, separator: str = "-"):
            """Defaults."""

        schema = input_schema(f)
        self.assertEqual(schema["required"], ["text"])
        self.assertEqual(schema["properties"]["separator"], {"type": "string"})
        self.assertNotIn("default", json.dumps(schema))

    def test_optional_is_not_required_and_nullable(self):
        def f(a: Optional[str], b: int | None = None, c: list[str] | None = None):
            """Optionals."""

        schema = input_schema(f)
        self.assertEqual(schema["required"], [])
        self.assertEqual(schema["properties"]["a"], {"type": ["string", "null"]})
        self.assertEqual(schema["properties"]["b"], {"type": ["integer", "null"]})
        self.assertEqual(
            schema["properties"]["c"], {"type": ["array", "null"], "items": {"type": "string"}}
        )

    def test_a_nullable_enum_uses_any_of(self):
        self.assertEqual(
            schema_of(Literal["a", "b"] | None),
            {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
        )

    def test_unions_of_several_types_use_any_of(self):
        self.assertEqual(
            schema_of(int | str), {"anyOf": [{"type": "integer"}, {"type": "string"}]}
        )

    def test_literals_and_enums_are_enums(self):
        self.assertEqual(schema_of(Literal["km", "mi"]), {"type": "string", "enum": ["km", "mi"]})
        self.assertEqual(schema_of(Literal[1, 2]), {"type": "integer", "enum": [1, 2]})
        self.assertEqual(schema_of(Color), {"type": "string", "enum": ["red", "green"]})

    def test_lists_and_string_keyed_dicts(self):
        self.assertEqual(
            schema_of(list[list[int]]),
            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
        )
        self.assertEqual(
            schema_of(dict[str, float]),
            {"type": "object", "additionalProperties": {"type": "number"}},
        )
        with self.assertRaises(TypeError):
            schema_of(dict[int, str])

    def test_dataclasses_are_closed_objects_described_by_their_docstring(self):
        self.assertEqual(
            schema_of(Point),
            {
                "type": "object",
                "properties": {
                    "x": {"type": "number", "description": "Across, in points."},
                    "y": {"type": "number", "description": "Down, in points."},
                },
                "required": ["x"],
                "additionalProperties": False,
                "description": "A point on the page.",
            },
        )

    def test_a_dataclass_without_a_docstring_has_no_description(self):
        @dataclasses.dataclass
        class Bare:
            a: int

        self.assertNotIn("description", schema_of(Bare))

    def test_typed_dicts_follow_totality_and_optional(self):
        self.assertEqual(
            schema_of(Box),
            {
                "type": "object",
                "properties": {
                    "width": {"type": "integer", "minimum": 1},
                    "label": {"type": "string"},
                },
                "required": [],
                "additionalProperties": False,
                "description": "A box.",
            },
        )
        movie = schema_of(Movie)
        self.assertEqual(movie["required"], ["title"])
        self.assertNotIn("description", movie)

    def test_typed_dict_required_markers(self):
        from typing import NotRequired, Required

        class Partial(TypedDict, total=False):
            key: Required[Annotated[str, "The key."]]
            note: str

        class Mostly(TypedDict):
            key: str
            note: NotRequired[str]

        self.assertEqual(schema_of(Partial)["required"], ["key"])
        self.assertEqual(schema_of(Partial)["properties"]["key"], {"type": "string", "description": "The key."})
        self.assertEqual(schema_of(Mostly)["required"], ["key"])
        self.assertEqual(convert({"key": "k"}, Mostly, "arg"), {"key": "k"})

    def test_nested_objects(self):
        def f(points: list[Point], box: Box):
            """Nested."""

        schema = input_schema(f)
        self.assertEqual(schema["properties"]["points"]["items"]["required"], ["x"])
        self.assertEqual(schema["properties"]["box"]["properties"]["width"]["minimum"], 1)

    def test_annotated_adds_keywords_and_a_description(self):
        word = Annotated[str, Schema(minLength=1, maxLength=200), "A word."]
        self.assertEqual(
            schema_of(Annotated[list[word], Schema(maxItems=10)]),
            {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 200, "description": "A word."},
                "maxItems": 10,
            },
        )

    def test_annotated_description_wins_over_the_docstring(self):
        def f(a: Annotated[str, "From Annotated."]):
            """Precedence.

            Args:
                a: From the docstring.
            """

        self.assertEqual(input_schema(f)["properties"]["a"]["description"], "From Annotated.")

    def test_recursive_and_unsupported_types_fail_at_declaration(self):
        with self.assertRaisesRegex(TypeError, "refers to itself"):
            schema_of(Node)
        with self.assertRaisesRegex(TypeError, "bytes has no JSON Schema"):
            schema_of(bytes)

    def test_any_is_unconstrained(self):
        self.assertEqual(schema_of(Any), {})


class DocstringTest(unittest.TestCase):
    def test_google_style(self):
        docs = _docs.parse(
            """Count the words of a text,
            over two lines.

            A second paragraph.

            Args:
                text (str): The text
                    to measure.
                limit: At most this many.

            Returns:
                The count.
            """
        )
        self.assertEqual(docs.summary, "Count the words of a text, over two lines.\n\nA second paragraph.")
        self.assertEqual(docs.arguments, {"text": "The text to measure.", "limit": "At most this many."})

    def test_sphinx_style(self):
        docs = _docs.parse(
            """Fetch a page.

            :param url: The page's address,
                absolute.
            :param int retries: How often to retry.
            :returns: The page.
            :raises ValueError: never.
            """
        )
        self.assertEqual(docs.summary, "Fetch a page.")
        self.assertEqual(docs.arguments, {"url": "The page's address, absolute.", "retries": "How often to retry."})

    def test_no_docstring(self):
        self.assertEqual(_docs.parse(None), _docs.Docs())


class DeclarationTest(unittest.TestCase):
    def test_description_and_argument_docs_come_from_the_docstring(self):
        def word_count(text: str):
            """Count the words, lines and characters of a text.

            Args:
                text: The text to measure.
            """

        spec = declare(word_count).spec
        self.assertEqual(spec.name, "word_count")
        self.assertEqual(spec.description, "Count the words, lines and characters of a text.")
        self.assertEqual(
            spec.input_schema,
            '{"type":"object","properties":{"text":{"type":"string","description":'
            '"The text to measure."}},"required":["text"],"additionalProperties":false}',
        )

    def test_options_override_and_hint(self):
        def f(a: str):
            """Docstring."""

        spec = declare(f, name="other", title="Other", description="Said here.", read_only=True,
                       open_world=True).spec
        self.assertEqual((spec.name, spec.title, spec.description), ("other", "Other", "Said here."))
        self.assertEqual((spec.read_only, spec.destructive, spec.idempotent, spec.open_world),
                         (True, False, False, True))

    def test_the_context_parameter_is_not_an_argument(self):
        def f(url: str, ctx: Context):
            """Context."""

        entry = declare(f)
        self.assertEqual(list(json.loads(entry.spec.input_schema)["properties"]), ["url"])
        self.assertEqual(entry.context_param, "ctx")

    def test_output_schema_from_the_return_type_or_the_option(self):
        def f() -> Movie:
            """Returns a movie."""

        def g() -> dict:
            """Declares its output."""

        self.assertEqual(json.loads(declare(f).spec.output_schema)["required"], ["title"])
        self.assertEqual(json.loads(declare(g, output=Point).spec.output_schema)["required"], ["x"])
        self.assertNotIn("description", json.loads(declare(g, output=Point).spec.output_schema))
        self.assertEqual(declare(g, output={"type": "object"}).spec.output_schema, '{"type":"object"}')
        with self.assertRaisesRegex(TypeError, "output= must be"):
            declare(g, output=list[int])

    def test_mistakes_fail_at_declaration_naming_the_fix(self):
        def untyped(a):
            """Untyped."""

        def undocumented(a: str):
            pass

        def variadic(*a: str):
            """Variadic."""

        with self.assertRaisesRegex(TypeError, "'a' needs a type hint"):
            declare(untyped)
        with self.assertRaisesRegex(ValueError, "has no description"):
            declare(undocumented)
        with self.assertRaisesRegex(TypeError, "plain named parameter"):
            declare(variadic)
        with self.assertRaisesRegex(ValueError, "must match"):
            declare(untyped, name="a b")


class ConvertTest(unittest.TestCase):
    def assertInvalid(self, value, tp, message):
        with self.assertRaises(ToolError) as raised:
            convert(value, tp, "arg")
        self.assertEqual((raised.exception.kind, raised.exception.retryable), ("invalid_input", True))
        self.assertIn(message, raised.exception.message)

    def test_scalars(self):
        self.assertEqual(convert("a", str, "arg"), "a")
        self.assertEqual(convert(2.0, int, "arg"), 2)
        self.assertIsInstance(convert(2, float, "arg"), float)
        self.assertInvalid(True, int, "`arg` must be an integer, not a boolean")
        self.assertInvalid(2.5, int, "must be an integer, not a number")
        self.assertInvalid(1, str, "must be a string, not an integer")
        self.assertInvalid("x", float, "must be a number, not a string")

    def test_dataclasses_are_built_recursively(self):
        self.assertEqual(convert([{"x": 1}, {"x": 2, "y": 3}], list[Point], "arg"),
                         [Point(1.0, 0.0), Point(2.0, 3.0)])
        self.assertInvalid([{"x": 1}, {"y": 1}], list[Point], "`arg[1].x` is required")
        self.assertInvalid({"x": 1, "z": 2}, Point, "`arg` has unknown field(s) z")
        self.assertInvalid({"x": "1"}, Point, "`arg.x` must be a number")

    def test_typed_dicts_literals_enums_and_unions(self):
        self.assertEqual(convert({"title": "Up", "year": None}, Movie, "arg"), {"title": "Up", "year": None})
        self.assertEqual(convert("mi", Literal["km", "mi"], "arg"), "mi")
        self.assertInvalid("ft", Literal["km", "mi"], 'one of "km", "mi"')
        self.assertInvalid(1, Literal[True], "one of True")
        self.assertIs(convert("red", Color, "arg"), Color.RED)
        self.assertIsNone(convert(None, Optional[int], "arg"))
        self.assertEqual(convert("a", int | str, "arg"), "a")
        self.assertInvalid([], int | None, "must be an integer or null, not an array")

    def test_dicts(self):
        self.assertEqual(convert({"a": 1}, dict[str, int], "arg"), {"a": 1})
        self.assertInvalid({"a": "x"}, dict[str, int], "`arg.a` must be an integer")


if __name__ == "__main__":
    unittest.main()
