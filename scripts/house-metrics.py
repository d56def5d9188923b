#!/usr/bin/env python3
"""Print the structure metrics of issue 25 ("the house, round 2") for a checkout of toolhost.

Usage:
    scripts/house-metrics.py [--list] [--root DIR] [--layer MODULE=LAYER ...]
                             [--cargo CMD] [--rustdoc-json FILE | --no-api]

It measures the checkout it lives in, or --root DIR (any toolhost tree, e.g. one made by
`git archive 64efe8b host/src README.md | tar -x -C /tmp/old`), and prints a Markdown
table whose column is headed by the checkout's commit (with a `+` when host/src or
README.md differ from it). --list prints what is behind each number. Python 3 standard
library only. Every number comes from the source of host/src, except the public API
numbers, which come from rustdoc's JSON output. At 11aab5a these rules give 2 cycles,
4 upward imports, 12 long files, 19 long functions, 317 public items, 181 public
fields, 0 of 32 enums non_exhaustive, 29 items with two or more paths, 7 functions
returning Result<_, String>, and 901 README lines.

How the source is read
----------------------
Each .rs file is blanked of comments (line, block, nested, doc) and of string,
byte-string, raw-string and char literals, keeping its line breaks, so a brace, a
`crate::` or a `fn` inside a comment or a string is never counted. Lifetimes ('a) are
told apart from char literals.

The files are found as rustc finds them: from lib.rs (the library, module `crate`) and
main.rs (the binary, module `main`) through every `mod x;` (x.rs or x/mod.rs, or its
`#[path]`). A file is the module of its path (serve/http/work.rs is `serve::http::work`,
serve/http/mod.rs is `serve::http`); the binary's own modules are `main::...`. A .rs
file no declaration reaches is not measured (--list names it). Test code is left out of
every number: an item under `#[cfg(test)]` (or `#[cfg(all(test, ...))]`), from its
attribute line to the end of the item (its matching `}` or its `;`), and so every file
such an item declares (manifest/tests.rs).

The numbers
-----------
1. Import cycles between modules. An edge A -> B is any path in A's code that names B:
   each path of a `use` tree, expanded, and each path in an expression or a type, that
   starts with `crate`, `self`, `super` (resolved from where it stands; an inline
   `mod x { ... }` counts as part of its file), `toolhost` (in the binary), a child
   module's name, or a name a `use` of the same file bound to a module. A path is
   attributed to the longest module prefix it names; when the next segment is a name
   that module only imports or re-exports (`use`, `pub use`), it is followed to the
   module that defines it (`crate::ToolHost` is an import of `dispatcher`). A path
   that names the module it is in is no edge.
   Cycles are counted between the parts of the architecture, the top-level modules of
   host/src, at the resolution of files: an edge between two modules under the same
   top-level module is left out (a parent and its children use each other all the
   time, `super::State`, `self::files::...`, and so do siblings such as sandbox::state
   and sandbox::files: Rust nesting makes that natural), and so is every edge of the
   crate root, which contains everything. The remaining graph's strongly connected
   components of more than one module hold every cycle; the number reported is the
   count of tangles, the blocks (biconnected components of the undirected graph) of
   those components. Cycles that share a single module are separate tangles: at
   11aab5a, dispatcher -> manifest -> model::config -> dispatcher and dispatcher ⇄
   wire::definitions meet only at dispatcher, so they are two, as issue 25 counts them.
   Every simple cycle lies inside one tangle, and each tangle needs its own fix.
   --list prints each tangle with its edges, the items each edge imports and where,
   its elementary cycles, and the fewest imports whose removal breaks them all (a
   minimum feedback arc set, by brute force: tangles are small; of several such sets,
   the one with the most upward imports), and then the cycles inside one top-level
   module, which are not counted.
2. Imports that point back up a layer. LAYERS below places every module in a layer
   (the longest matching module prefix wins), after DESIGN.md section 2; an edge from
   a module of a lower layer to one of a higher layer is an upward import. Counted per
   module pair (a pair may import several items on several lines: --list shows them).
   Every edge counts here, inside a top-level module too, so a module placed below its
   folder (a key such as "model::config") is held to it. A module no key matches stops
   the script: edit LAYERS when a module is added or renamed, or, to measure an old
   tree once, pass --layer formats=wire.
3. Files over 600 non-test lines. Non-test lines: every line of the file (blank lines,
   comments and doc comments included, as `wc -l` counts them) outside test code.
   This is the rule that gives issue 25's main.rs 1,469, sandbox/mod.rs 1,112 and
   dispatcher.rs 1,048: each is the line before the file's `#[cfg(test)]`.
4. Functions of 80 lines or more. Every `fn` with a body outside test code, from the
   line of its `fn` keyword to the line of its closing brace, inclusive (its doc
   comment and attributes are not counted); the body is found by brace matching on
   the blanked text. A nested fn is counted on its own and inside its outer one.
   Names are `Type::method` inside an `impl` or `trait` block.
5. Public API, from rustdoc's JSON for the toolhost library (default features), with
   `#[doc(hidden)]` items included: an embedder can name them all the same
   (`sandbox::baseline`). The walk starts at the crate root and follows public modules
   and public re-exports (`pub use`, globs included; re-exports of other crates' items
   are not ours and are skipped):
   - public items: every distinct item reached (module, function, struct, enum, union,
     trait, constant, static, type alias, macro), with the public items of the reached
     types' inherent impls (methods, associated constants and types) and the items of
     the reached traits. Not counted as items: enum variants, fields, trait impls, and
     re-exports themselves (a `pub use` is a second path, not a second item).
   - public fields: the `pub` fields of the reached structs (not enum variants'
     fields). Fields of structs an embedder cannot reach (`pub` fields of a private
     struct) are not public API and are not counted.
   - public enums: the reached enums, and how many are `#[non_exhaustive]`.
   - public items with more than one public path, and how many paths the most have.
   - public functions and methods whose return type is `Result<_, String>`.
   The JSON is made by `cargo doc --release --workspace --no-deps`, the command CI runs,
   with the same features, so nothing but the workspace's docs is rebuilt. RUSTDOC is
   set to this script, which runs the real rustdoc with `-Z unstable-options
   --output-format json --document-hidden-items` and RUSTC_BOOTSTRAP=1 for the toolhost
   library only, writing its JSON to a temporary directory (target/doc is shared by
   every checkout that shares the target directory). RUSTDOCFLAGS gets a cfg that is
   new on every run, so cargo always runs rustdoc and the JSON is this checkout's, as
   it is now; RUSTDOCFLAGS reach rustdoc alone, so no dependency is rebuilt. Pass
   --cargo "/work/bin/cargo-locked" (any command that takes cargo's arguments) to run
   it under a build lock, --rustdoc-json FILE to read a JSON made before (rustdoc JSON
   format 57, Rust 1.95; with --document-hidden-items for the same numbers), or
   --no-api to skip it.
6. README.md lines: lines of README.md at the top of the checkout, as `wc -l` counts.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# The layers of host/src, lowest first, after DESIGN.md section 2: "domain types
# (specs, names, limits, component config) -> sandbox (one module per capability) and
# stores -> the host facade (ToolHost) -> wire (every protocol shape, at the edge) ->
# model providers and the agent loop -> front ends (cli/, serve/)". Keys are module
# path prefixes (whole segments; the longest match wins); `crate` is lib.rs and `main`
# is main.rs. When a restructure renames or adds a module, edit this table: the
# script stops on a module it cannot place.
DOMAIN, SANDBOX, FACADE, WIRE, MODEL, FRONT = range(6)
LAYER_NAMES = {
    DOMAIN: "domain types",
    SANDBOX: "sandbox and stores",
    FACADE: "host facade",
    WIRE: "wire",
    MODEL: "model providers and agent loop",
    FRONT: "front ends",
}
LAYERS = {
    # Domain types: what a call, a grant, a limit, an outcome and a spec are.
    "tool_call": DOMAIN,
    "spec": DOMAIN,  # ToolSpec, Hints, name rules and size limits
    "component": DOMAIN,  # ComponentConfig, Approval, ClientCapability
    "grants": DOMAIN,  # validated Grants, part of a component's config
    "limits": DOMAIN,
    "outcome": DOMAIN,
    "arguments": DOMAIN,  # argument schemas: what a tool's input must be
    "observe": DOMAIN,  # what a call reports and asks (the observer and asker traits)
    "printable": DOMAIN,  # which characters a person may be shown
    "schema": DOMAIN,  # JSON Schema normalisation (integer formats)
    "duration": DOMAIN,  # the one parser of "5m", "30s", "100ms"
    "fixes": DOMAIN,  # how refusals spell the fix for each setting
    "durable_tasks": DOMAIN,  # [serve.tasks] parsed and checked; the store is serve::tasks
    "fair_shares": DOMAIN,  # [serve.limits] parsed and checked; the limiter is serve::fair
    # The [model] table and the loop controls: ModelConfig, LoopControls, BaseUrl. A leaf
    # under the model folder, beside the providers that read it, importing none of them.
    "model::config": DOMAIN,
    # Capabilities and the stores behind them.
    "sandbox": SANDBOX,
    "stores": SANDBOX,
    "result_cache": SANDBOX,
    # Components from OCI registries; what a reference and a digest are is domain.
    "registry": SANDBOX,
    "registry::reference": DOMAIN,
    "registry::digest": DOMAIN,
    # Signature checks over bytes the client fetched: no I/O, but beside the
    # client and store that feed them (and later keyless checks read files).
    "registry::verify": DOMAIN,  # signatures and policies: pure checks, no I/O
    "registry::lock": DOMAIN,
    # Who a caller is: tokens checked, issuers' key sets fetched (I/O, as registries do).
    "identity": SANDBOX,  # toolhost.lock: references and digests, no I/O  # the cache of read-only tools' results
    # The facade: loading, validating, approving and dispatching calls.
    "tool_host": FACADE,
    "manifest": FACADE,
    "describe": FACADE,  # a component's grants in words, for check and reload logs
    # Every protocol shape.
    "wire": WIRE,
    # Model providers and the loop.
    "model": MODEL,
    "agent": MODEL,
    # Front ends.
    "serve": FRONT,
    "serve::fair": FRONT,  # rate limits and concurrency caps per principal and tool
    "authoring": FRONT,  # `toolhost new`, `componentize` and `check`: only main.rs uses it
    "main": FRONT,
    "crate": FRONT,  # lib.rs: declares the modules and re-exports; above them all
}

LAYER_KEYS = {  # names for --layer
    "domain": DOMAIN,
    "sandbox": SANDBOX,
    "facade": FACADE,
    "wire": WIRE,
    "model": MODEL,
    "front": FRONT,
}

MAX_CYCLES = 100  # elementary cycles listed per component; there can be exponentially many

LONG_FILE = 600  # non-test lines; a file over this is reported
LONG_FN = 80  # lines; a function of this many or more is reported


class Fail(Exception):
    """A measurement that cannot be made; the message says what to do."""


# ---------------------------------------------------------------------------------------
# Reading Rust source


RAW_STRING = re.compile(r'(?:br|cr|r)(#*)"')


def blank(text: str) -> str:
    """Return `text` with comments and literals replaced by spaces, line breaks kept."""
    out = []
    i, n = 0, len(text)

    def keep_lines(s: str) -> str:
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(keep_lines(text[i:j]))
            i = j
        elif c in "bcr" and (m := RAW_STRING.match(text, i)) and not _ident_before(text, i):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(keep_lines(text[i:j]))
            i = j
        elif c == '"' or (c in "bc" and text.startswith('"', i + 1) and not _ident_before(text, i)):
            j = i + (1 if c == '"' else 2)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(keep_lines(text[i:j]))
            i = j
        elif c == "'" or (c == "b" and text.startswith("'", i + 1) and not _ident_before(text, i)):
            q = i if c == "'" else i + 1
            if text.startswith("\\", q + 1):  # '\n', '\u{1F600}', '\''
                j = q + 3
                while j < n and text[j] != "'":
                    j += 1
                j += 1
            elif q + 2 < n and text[q + 2] == "'":  # 'a'
                j = q + 3
            else:  # a lifetime or a label: keep it
                out.append(text[i : q + 1])
                i = q + 1
                continue
            out.append(keep_lines(text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    result = "".join(out)
    assert len(result) == len(text) and result.count("\n") == text.count("\n")
    return result


def _ident_before(text: str, i: int) -> bool:
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def match_close(code: str, i: int) -> int:
    """Index of the bracket closing the one at `code[i]` (code already blanked)."""
    opening = code[i]
    closing = {"{": "}", "(": ")", "[": "]"}[opening]
    depth = 0
    for j in range(i, len(code)):
        if code[j] == opening:
            depth += 1
        elif code[j] == closing:
            depth -= 1
            if depth == 0:
                return j
    raise Fail(f"unbalanced {opening!r} at offset {i}")


CFG_TEST = re.compile(r"#\s*\[\s*cfg\s*\(\s*(?:all\s*\(\s*)?test\b[^\]]*\]")


def item_end(code: str, i: int) -> int:
    """End (index of its `;` or closing `}`) of the item that starts at `code[i]`,
    skipping its attributes."""
    depth = 0
    j = i
    while j < len(code):
        c = code[j]
        if c == "#" and depth == 0:
            k = code.find("[", j)
            j = match_close(code, k) + 1
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == ";" and depth == 0:
            return j
        elif c == "{" and depth == 0:
            return match_close(code, j)
        j += 1
    raise Fail(f"no end for the item at offset {i}")


def line_of(code: str, i: int) -> int:
    return code.count("\n", 0, i) + 1


@dataclass
class SourceFile:
    path: Path  # relative to host/src
    text: str
    code: str  # `text` blanked of comments and literals
    test_spans: list[tuple[int, int]]  # character spans of test code
    module: tuple[str, ...] = ()  # the binary's modules start with "main"
    binary: bool = False  # part of the toolhost binary (main.rs and its modules)

    @property
    def name(self) -> str:
        return module_name(self.module)

    def in_test(self, i: int) -> bool:
        return any(a <= i <= b for a, b in self.test_spans)

    def lines(self) -> int:
        return self.text.count("\n") + (0 if self.text.endswith("\n") or not self.text else 1)

    def test_lines(self) -> set[int]:
        lines = set()
        for a, b in self.test_spans:
            lines.update(range(line_of(self.code, a), line_of(self.code, b) + 1))
        return lines

    def non_test_lines(self) -> int:
        return self.lines() - len(self.test_lines())


def module_name(module: tuple[str, ...]) -> str:
    return "::".join(module) if module else "crate"


def read_file(src: Path, path: Path) -> SourceFile:
    text = path.read_text(encoding="utf-8")
    code = blank(text)
    spans = [(m.start(), item_end(code, m.start())) for m in CFG_TEST.finditer(code)]
    return SourceFile(path.relative_to(src), text, code, spans)


MOD_DECL = re.compile(r"(?<![\w])mod\s+(\w+)\s*;")
PATH_ATTR = re.compile(  # `#[path = "..."]`, then maybe other attributes and `pub`, at the end
    r"#\s*\[\s*path\s*=\s*\"([^\"]*)\"\s*\]\s*(?:#\s*\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?$"
)


def read_tree(src: Path) -> tuple[list[SourceFile], list[Path]]:
    """The files the crates compile outside tests, found as rustc finds them: from
    lib.rs and main.rs through each `mod x;` not under `#[cfg(test)]`. Returns them
    sorted by path, and the .rs files no such declaration reaches."""
    found: dict[Path, SourceFile] = {}
    queue = []
    for root, module, binary in (("lib.rs", (), False), ("main.rs", ("main",), True)):
        if (src / root).exists():
            queue.append((src / root, module, binary))
    while queue:
        path, module, binary = queue.pop()
        f = read_file(src, path)
        f.module, f.binary = module, binary
        found[f.path] = f
        here = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.with_suffix("")
        for m in MOD_DECL.finditer(f.code):
            if f.in_test(m.start()):
                continue
            name = m.group(1)
            attr = PATH_ATTR.search(f.text[: m.start()])
            if attr:
                candidates = [path.parent / attr.group(1)]
            else:
                candidates = [here / f"{name}.rs", here / name / "mod.rs"]
            child = next((c for c in candidates if c.exists()), None)
            if child is None:
                raise Fail(f"{f.path}: `mod {name};` has no file ({', '.join(str(c) for c in candidates)})")
            queue.append((child, module + (name,), binary))
    orphans = sorted(p.relative_to(src) for p in src.rglob("*.rs") if p.relative_to(src) not in found)
    return sorted(found.values(), key=lambda f: str(f.path)), orphans


# ---------------------------------------------------------------------------------------
# The import graph


@dataclass
class Import:
    source: str  # module name
    target: str
    item: str  # what is named, as written
    where: str  # file:line


USE = re.compile(r"(?<![\w:#])use\s+(?=[\w:{])")
PATH = re.compile(r"(?<![\w:#'])(::\s*)?(\w+)((?:\s*::\s*\w+)+)")
INLINE_MOD = re.compile(r"(?<![\w])mod\s+(\w+)\s*\{")


def expand_use(tree: str) -> list[tuple[list[str], str]]:
    """Expand a use tree into (path segments, name bound) pairs; `*` binds ''."""
    tokens = re.findall(r"::|\{|\}|,|\*|\w+", tree)
    pos = 0

    def parse(prefix: list[str]) -> list[tuple[list[str], str]]:
        nonlocal pos
        segs = list(prefix)
        if pos < len(tokens) and tokens[pos] == "::" and not segs:
            segs.append("::")
            pos += 1
        while pos < len(tokens):
            t = tokens[pos]
            if t == "{":
                pos += 1
                out = []
                while pos < len(tokens) and tokens[pos] != "}":
                    if tokens[pos] == ",":
                        pos += 1
                        continue
                    out += parse(segs)
                pos += 1
                return out
            if t == "*":
                pos += 1
                return [(segs + ["*"], "")]
            if t == "::":
                pos += 1
                continue
            if t in (",", "}"):
                break
            # An identifier: a segment, or the last one (maybe with `as alias`).
            pos += 1
            if pos < len(tokens) and tokens[pos] == "::":
                segs.append(t)
                continue
            name = t
            if pos + 1 < len(tokens) and tokens[pos] == "as":
                name = tokens[pos + 1]
                pos += 2
            if t == "self":
                return [(segs, name if name != "self" else segs[-1])]
            return [(segs + [t], name)]
        return [(segs, segs[-1] if segs else "")]

    return parse([])


@dataclass
class Graph:
    files: list[SourceFile]
    modules: set[tuple[str, ...]] = field(default_factory=set)
    # Per module: name bound by a `use` (any visibility) -> absolute path.
    uses: dict[tuple[str, ...], dict[str, list[str]]] = field(default_factory=dict)
    imports: list[Import] = field(default_factory=list)
    _inline_mods: dict[Path, list[tuple[int, int, str]]] = field(default_factory=dict)

    def build(self) -> None:
        self.modules = {f.module for f in self.files}
        self.modules.add(())
        for f in self.files:
            self.uses[f.module] = {}
        # First the `use` declarations of every file (so re-exports can be followed),
        # then every path, resolved.
        for f in self.files:
            for segs, name, _, scope in self._uses(f):
                absolute = self._absolute(f, scope, segs, local=None)
                if absolute is not None and name and len(scope) == len(f.module):
                    self.uses[f.module][name] = absolute
        for f in self.files:
            local = {n: p for n, p in self.uses[f.module].items() if tuple(p) in self.modules}
            for segs, _, offset, scope in self._uses(f):
                self._add(f, scope, segs, offset, local)
            code = self._code_without_uses(f)
            for m in PATH.finditer(code):
                if f.in_test(m.start()) or m.group(1):
                    continue
                segs = [m.group(2)] + re.findall(r"\w+", m.group(3))
                self._add(f, self._scope(f, m.start()), segs, m.start(), local)

    def _uses(self, f: SourceFile):
        for m in USE.finditer(f.code):
            if f.in_test(m.start()):
                continue
            end = f.code.find(";", m.end())
            for segs, name in expand_use(f.code[m.end() : end]):
                yield segs, name, m.start(), self._scope(f, m.start())

    def _code_without_uses(self, f: SourceFile) -> str:
        code = f.code
        for m in USE.finditer(f.code):
            end = f.code.find(";", m.end())
            code = code[: m.start()] + " " * (end - m.start()) + code[end:]
        return code

    def _inline(self, f: SourceFile) -> list[tuple[int, int, str]]:
        """The file's inline modules: (start, end, name), outermost first."""
        if f.path not in self._inline_mods:
            self._inline_mods[f.path] = [
                (m.start(), match_close(f.code, m.end() - 1), m.group(1)) for m in INLINE_MOD.finditer(f.code)
            ]
        return self._inline_mods[f.path]

    def _scope(self, f: SourceFile, offset: int) -> tuple[str, ...]:
        """The module a position is in: its file's, plus inline modules around it."""
        return tuple(f.module) + tuple(name for a, b, name in self._inline(f) if a < offset < b)

    def _absolute(self, f, scope, segs, local) -> list[str] | None:
        """The crate-absolute path `segs` names from `scope`, or None (std, a dependency,
        a local variable)."""
        if not segs or segs[0] == "::":
            return None
        head, rest = segs[0], segs[1:]
        if head == "crate":
            return (["main"] if f.binary else []) + rest
        if head == "toolhost" and f.binary:
            return rest  # the binary's path into the library
        if head == "self":
            return list(scope) + rest
        if head == "super":
            base = list(scope)
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
            return base + segs
        if tuple(scope) + (head,) in self.modules or self._inline_child(f, head):
            return list(scope) + segs
        if local and head in local:
            return list(local[head]) + rest
        return None

    def _inline_child(self, f: SourceFile, name: str) -> bool:
        return any(n == name for _, _, n in self._inline(f))

    def resolve(self, absolute: list[str]) -> tuple[str, ...] | None:
        """The module that defines what `absolute` names, following `use`s."""
        for _ in range(20):
            k = len(absolute)
            while k and tuple(absolute[:k]) not in self.modules:
                k -= 1
            module = tuple(absolute[:k])
            if k < len(absolute):
                name = absolute[k]
                target = self.uses.get(module, {}).get(name)
                if target is not None and target != absolute:
                    absolute = target + absolute[k + 1 :]
                    continue
            return module
        return None

    def _add(self, f, scope, segs, offset, local) -> None:
        absolute = self._absolute(f, scope, segs, local)
        if absolute is None:
            return
        target = self.resolve(absolute)
        if target is None or target == f.module:
            return
        self.imports.append(
            Import(f.name, module_name(target), "::".join(segs), f"{f.path}:{line_of(f.code, offset)}")
        )

    def edges(self) -> dict[tuple[str, str], list[Import]]:
        out: dict[tuple[str, str], list[Import]] = {}
        for imp in self.imports:
            out.setdefault((imp.source, imp.target), []).append(imp)
        return out


def same_part(a: str, b: str) -> bool:
    """Whether an edge between modules `a` and `b` stays inside one top-level module
    (or touches the crate root, which contains them all)."""
    return "crate" in (a, b) or a.split("::")[0] == b.split("::")[0]


def blocks(comp: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """The biconnected components of a strongly connected component, taken as an
    undirected graph (Hopcroft and Tarjan), each sorted."""
    adj = {n: set() for n in comp}
    for a, b in edges:
        if a in comp and b in comp:
            adj[a].add(b)
            adj[b].add(a)
    depth, low, stack, out = {}, {}, [], []

    def visit(v, parent, d):
        depth[v] = low[v] = d
        for w in sorted(adj[v]):
            if w == parent:
                continue
            if w not in depth:
                stack.append((v, w))
                visit(w, v, d + 1)
                low[v] = min(low[v], low[w])
                if low[w] >= depth[v]:
                    block = set()
                    while True:
                        e = stack.pop()
                        block.update(e)
                        if e == (v, w):
                            break
                    out.append(sorted(block))
            elif depth[w] < depth[v]:
                stack.append((v, w))
                low[v] = min(low[v], depth[w])

    visit(comp[0], None, 0)
    return sorted(out)


def strongly_connected(nodes, edges) -> list[list[str]]:
    """Tarjan's algorithm; components of more than one node, each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    succ = {n: sorted({b for a, b in edges if a == n}) for n in nodes}

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return sorted(out)


def acyclic(nodes, edges) -> bool:
    return not strongly_connected(nodes, edges)


def feedback_arcs(comp: list[str], edges: set[tuple[str, str]], upward) -> list[tuple[str, str]] | None:
    """The fewest edges of a component whose removal leaves it acyclic (of several
    such sets, the one with the most upward imports), or None when the component has
    too many edges to try their subsets."""
    inner = sorted((a, b) for a, b in edges if a in comp and b in comp)
    if len(inner) > 20:
        return None
    for k in range(1, len(inner) + 1):
        cuts = [cut for cut in itertools.combinations(inner, k) if acyclic(comp, set(inner) - set(cut))]
        if cuts:
            return list(max(cuts, key=lambda cut: sum(1 for e in cut if upward(e))))
    return inner


def elementary_cycles(comp: list[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """Each simple cycle of a component once, starting at its smallest module."""
    succ = {n: sorted(b for a, b in edges if a == n and b in comp) for n in comp}
    cycles = []

    def walk(start, v, path, seen):
        for w in succ[v]:
            if len(cycles) >= MAX_CYCLES:
                return
            if w == start:
                cycles.append(path + [start])
            elif w > start and w not in seen:
                walk(start, w, path + [w], seen | {w})

    for start in comp:
        if len(cycles) < MAX_CYCLES:
            walk(start, start, [start], {start})
    return cycles[:MAX_CYCLES]


def layer_of(module: str) -> int:
    parts = module.split("::")
    for k in range(len(parts), 0, -1):
        key = "::".join(parts[:k])
        if key in LAYERS:
            return LAYERS[key]
    raise Fail(
        f"module `{module}` has no layer: add it (or a prefix of it) to LAYERS in {Path(__file__).name}"
    )


# ---------------------------------------------------------------------------------------
# Long functions

FN = re.compile(r"(?<![\w])fn\s+(\w+)")
IMPL = re.compile(r"(?<![\w])(impl|trait)\b")


def owners(code: str) -> list[tuple[int, int, str]]:
    """Spans of `impl` and `trait` blocks, with the type (or trait) they are for."""
    spans = []
    for m in IMPL.finditer(code):
        before = code[: m.start()].rstrip()
        if m.group(1) == "impl" and before and before[-1] not in ";{}]" and not before.endswith("unsafe"):
            continue  # `impl Trait` in a type
        brace = m.end()
        depth = 0
        while brace < len(code):
            c = code[brace]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif c == ";" and depth == 0:
                break
            elif c == "{" and depth == 0:
                break
            brace += 1
        if brace >= len(code) or code[brace] != "{":
            continue
        header = " ".join(code[m.end() : brace].split())
        if m.group(1) == "trait":
            name = re.match(r"\s*(\w+)", header).group(1)
        else:
            header = re.sub(r"^<.*?>\s+(?=[\w&(:])", "", header) if header.startswith("<") else header
            target = re.split(r"\bfor\b", header)[-1] if re.search(r"\bfor\b", header) else header
            target = re.split(r"\bwhere\b", target)[0]
            target = re.sub(r"<.*", "", target).strip()
            name = target.split("::")[-1].strip("&' ") or "?"
        spans.append((brace, match_close(code, brace), name))
    return spans


@dataclass
class Function:
    name: str
    file: str
    line: int
    lines: int


def functions(f: SourceFile) -> list[Function]:
    code = f.code
    blocks = owners(code)
    out = []
    for m in FN.finditer(code):
        if f.in_test(m.start()):
            continue
        j, depth = m.end(), 0
        while j < len(code):
            c = code[j]
            if c in "([":
                depth += 1
            elif c in ")]":
                depth -= 1
            elif depth == 0 and c in ";{":
                break
            j += 1
        if j >= len(code) or code[j] != "{":
            continue  # a declaration without a body
        end = match_close(code, j)
        owner = [name for a, b, name in blocks if a < m.start() < b]
        name = (owner[-1] + "::" if owner else "") + m.group(1)
        first = line_of(code, m.start())
        out.append(Function(name, str(f.path), first, line_of(code, end) - first + 1))
    return out


# ---------------------------------------------------------------------------------------
# Public API (rustdoc JSON)

RUSTDOC_FLAGS = ["-Z", "unstable-options", "--output-format", "json", "--document-hidden-items"]
WRAPPER_ENV = "HOUSE_METRICS_RUSTDOC"  # the real rustdoc, when this script runs as RUSTDOC
OUT_ENV = "HOUSE_METRICS_OUT"  # where the toolhost library's JSON goes


def rustdoc_wrapper(argv: list[str]) -> None:
    """Run as RUSTDOC by cargo: the toolhost library gets JSON, written to this run's
    own directory; every other crate is documented as it always is."""
    real = os.environ[WRAPPER_ENV]
    args = argv[1:]
    env = dict(os.environ)

    def value(flag):
        return args[args.index(flag) + 1] if flag in args[:-1] else None

    if value("--crate-name") == "toolhost" and value("--crate-type") == "lib" and "-o" in args[:-1]:
        args[args.index("-o") + 1] = os.environ[OUT_ENV]
        args += RUSTDOC_FLAGS
        env["RUSTC_BOOTSTRAP"] = "1"
    os.execvpe(real, [real] + args, env)


def build_rustdoc_json(root: Path, cargo: str, out: Path) -> tuple[Path, float]:
    """Document the workspace as CI does, with the toolhost library as JSON in `out`.

    RUSTDOCFLAGS carries a cfg that differs on every run, so cargo always runs
    rustdoc for the workspace's crates (a few seconds) and never hands back a JSON
    made from other sources: a target directory shared by several checkouts would
    otherwise hold whichever was documented last. RUSTDOCFLAGS reach rustdoc only,
    so no dependency is rebuilt.
    """
    env = dict(os.environ)
    env[WRAPPER_ENV] = os.environ.get("RUSTDOC", "rustdoc")
    env["RUSTDOC"] = str(Path(__file__).resolve())
    env[OUT_ENV] = str(out)
    run = f"house_metrics_run_{time.time_ns()}"  # cargo splits RUSTDOCFLAGS at spaces
    flags = [os.environ.get("RUSTDOCFLAGS", ""), f"--cfg={run}", f"--check-cfg=cfg({run})"]
    env["RUSTDOCFLAGS"] = " ".join(f for f in flags if f)
    command = cargo.split() + ["doc", "--release", "--workspace", "--no-deps"]
    print(f"# rustdoc JSON: RUSTDOC={env['RUSTDOC']} {' '.join(command)}", file=sys.stderr)
    started = time.monotonic()
    result = subprocess.run(command, cwd=root, env=env, stdout=sys.stderr)
    took = time.monotonic() - started
    if result.returncode != 0:
        raise Fail(f"`{' '.join(command)}` failed (exit {result.returncode}); see its output above")
    json_file = out / "toolhost.json"
    if not json_file.exists():
        raise Fail(f"cargo ran no rustdoc for the toolhost library ({json_file} is missing)")
    return json_file, took


@dataclass
class Api:
    kinds: dict[int, str] = field(default_factory=dict)  # each public item: its kind
    paths: dict[int, list[str]] = field(default_factory=dict)  # every public path of each
    owner: dict[int, int] = field(default_factory=dict)  # a type's or trait's member -> it
    fields: list[tuple[int, str]] = field(default_factory=list)  # (struct, field name)
    enums: list[tuple[int, bool]] = field(default_factory=list)  # (enum, non_exhaustive)
    string_errors: list[int] = field(default_factory=list)
    hidden: set[int] = field(default_factory=set)  # #[doc(hidden)] here or above
    canonical: dict[int, str] = field(default_factory=dict)  # rustdoc's own path

    def name(self, i: int) -> str:
        """The path an item is listed by: rustdoc's own path for it when that path is
        public, else the longest public one (the defining module's, usually)."""
        if i in self.owner:
            return f"{self.name(self.owner[i])}::{self.paths[i][0].rsplit('::', 1)[1]}"
        if self.canonical.get(i) in self.paths[i]:
            return self.canonical[i]
        return max(self.paths[i], key=lambda p: (len(p.split("::")), p))


RUSTDOC_FORMAT = 57  # the rustdoc JSON format this reads (Rust 1.95)


def public_api(doc: dict) -> Api:
    """Walk the crate's public API in rustdoc's JSON (see the docstring)."""
    if doc.get("format_version") != RUSTDOC_FORMAT:
        print(
            f"house-metrics: rustdoc JSON format {doc.get('format_version')}, written for {RUSTDOC_FORMAT}:"
            " check the public API numbers against --list",
            file=sys.stderr,
        )
    index = doc["index"]
    api = Api()

    def item(i):
        return index.get(str(i))

    def kind(it):
        return next(iter(it["inner"]))

    def hidden(it):
        return any("doc(hidden)" in str(a).replace(" ", "") for a in it.get("attrs", []))

    def add(i, it, path, under_hidden, owner=None):
        api.paths.setdefault(i, [])
        if path not in api.paths[i]:
            api.paths[i].append(path)
        if i in api.kinds:
            return
        k = kind(it)
        api.kinds[i] = k
        if owner is not None:
            api.owner[i] = owner
        known = doc["paths"].get(str(i))
        if known and known.get("crate_id") == 0:
            api.canonical[i] = "::".join(known["path"])
        under_hidden = under_hidden or hidden(it)
        if under_hidden:
            api.hidden.add(i)
        inner = it["inner"][k]
        if k == "module":
            walk(it, path, under_hidden)
        elif k == "function":
            if returns_string_error(it):
                api.string_errors.append(i)
        elif k == "struct":
            shape = inner["kind"] if isinstance(inner["kind"], dict) else {}
            fids = shape.get("plain", {}).get("fields", [])
            fids += [f for f in shape.get("tuple", []) if f is not None]
            for fid in fids:
                fi = item(fid)
                if fi and fi["visibility"] == "public":
                    api.fields.append((i, fi["name"]))
            members(i, inner["impls"], path, under_hidden)
        elif k == "enum":
            attrs = " ".join(str(a) for a in it.get("attrs", []))
            api.enums.append((i, "non_exhaustive" in attrs))
            members(i, inner["impls"], path, under_hidden)
        elif k == "union":
            members(i, inner["impls"], path, under_hidden)
        elif k == "trait":
            for mid in inner["items"]:
                mi = item(mid)
                if mi:
                    add(mid, mi, f"{path}::{mi['name']}", under_hidden, owner=i)

    def members(owner, impls, path, under_hidden):
        """The public items of a type's inherent impls (not of its trait impls)."""
        for iid in impls:
            imp = item(iid)
            if not imp or imp["inner"]["impl"]["trait"] is not None:
                continue
            if imp["inner"]["impl"].get("is_synthetic") or imp["inner"]["impl"].get("blanket_impl"):
                continue
            for mid in imp["inner"]["impl"]["items"]:
                mi = item(mid)
                if mi and mi["visibility"] == "public":
                    add(mid, mi, f"{path}::{mi['name']}", under_hidden, owner=owner)

    def returns_string_error(it):
        out = it["inner"]["function"]["sig"]["output"] or {}
        rp = out.get("resolved_path")
        if not rp or rp["path"].split("::")[-1] != "Result":
            return False
        args = ((rp.get("args") or {}).get("angle_bracketed") or {}).get("args") or []
        if len(args) != 2:
            return False
        err = args[1].get("type", {}).get("resolved_path", {})
        return err.get("path", "").split("::")[-1] == "String"

    def walk(module, path, under_hidden):
        for cid in module["inner"]["module"]["items"]:
            child = item(cid)
            if not child or child["visibility"] != "public":
                continue
            if kind(child) == "use":
                use = child["inner"]["use"]
                target = item(use["id"]) if use["id"] is not None else None
                if target is None:
                    continue  # a re-export of another crate's item
                if use["is_glob"]:
                    if kind(target) == "module":
                        walk(target, path, under_hidden or hidden(child))
                    continue
                add(use["id"], target, f"{path}::{use['name']}", under_hidden or hidden(child))
            else:
                add(cid, child, f"{path}::{child['name']}", under_hidden)

    root = item(doc["root"])
    walk(root, root["name"], False)
    return api


# ---------------------------------------------------------------------------------------
# Report


def git_head(root: Path) -> str:
    """The checkout's commit, with a `+` when host/src or README.md differ from it."""
    def git(*args):
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    try:
        if Path(git("rev-parse", "--show-toplevel")).resolve() != root:
            return "now"
        dirty = git("status", "--porcelain", "--", "host/src", "README.md")
        return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "now"


@dataclass
class Report:
    """Everything measured in one tree."""

    head: str
    files: list[SourceFile]
    orphans: list[Path]
    edges: dict[tuple[str, str], list[Import]]
    layers: dict[str, int]
    cycle_edges: set[tuple[str, str]]
    tangles: list[list[str]]
    cuts: list[list[tuple[str, str]] | None]
    inner_edges: set[tuple[str, str]]
    upward: list[tuple[str, str]]
    long_files: list[tuple[int, str]]
    long_fns: list[Function]
    readme_lines: int | None
    api: Api | None
    api_note: str

    def tangle_edges(self, t: list[str]) -> list[tuple[str, str]]:
        return sorted(e for e in self.cycle_edges if e[0] in t and e[1] in t)

    def many_paths(self) -> dict[int, list[str]]:
        return {i: p for i, p in self.api.paths.items() if len(p) > 1} if self.api else {}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", action="store_true", help="print the details behind each number")
    here = Path(__file__).resolve().parent.parent
    parser.add_argument("--root", type=Path, default=here, help="the tree to measure (default: this checkout)")
    parser.add_argument("--cargo", default="cargo", help="the cargo command, e.g. /work/bin/cargo-locked")
    parser.add_argument(
        "--layer",
        action="append",
        default=[],
        metavar="MODULE=LAYER",
        help=f"place a module LAYERS does not know (e.g. formats=wire); LAYER: {', '.join(LAYER_KEYS)}",
    )
    api_source = parser.add_mutually_exclusive_group()
    api_source.add_argument("--rustdoc-json", type=Path, help="read this rustdoc JSON instead of building it")
    api_source.add_argument("--no-api", action="store_true", help="skip the public API numbers")
    return parser.parse_args()


def measure(args: argparse.Namespace) -> Report:
    for extra in args.layer:
        module, _, name = extra.partition("=")
        if name not in LAYER_KEYS or not module:
            raise Fail(f"--layer {extra}: write MODULE=LAYER, LAYER one of {', '.join(LAYER_KEYS)}")
        LAYERS[module] = LAYER_KEYS[name]
    root = args.root.resolve()
    src = root / "host" / "src"
    if not src.is_dir():
        raise Fail(f"{src} is not a directory: pass --root, the top of a toolhost checkout")
    files, orphans = read_tree(src)

    graph = Graph(files)
    graph.build()
    edges = graph.edges()
    nodes = sorted({f.name for f in files})
    layers = {n: layer_of(n) for n in nodes}
    cycle_edges = {e for e in edges if not same_part(*e)}
    tangles = [b for comp in strongly_connected(nodes, cycle_edges) for b in blocks(comp, cycle_edges)]
    cuts = [feedback_arcs(t, cycle_edges, lambda e: layers[e[0]] < layers[e[1]]) for t in tangles]

    sizes = [(f.non_test_lines(), str(f.path)) for f in files]
    fns = [fn for f in files for fn in functions(f)]
    readme = root / "README.md"

    api, api_note = None, "skipped (--no-api)"
    if args.rustdoc_json:
        api = public_api(json.loads(args.rustdoc_json.read_text(encoding="utf-8")))
        api_note = f"from {args.rustdoc_json}"
    elif not args.no_api:
        with tempfile.TemporaryDirectory(prefix="house-metrics-") as out:
            path, took = build_rustdoc_json(root, args.cargo, Path(out))
            api = public_api(json.loads(path.read_text(encoding="utf-8")))
        api_note = f"rustdoc JSON made in {took:.0f} s (waiting for a build lock included)"

    return Report(
        head=git_head(root),
        files=files,
        orphans=orphans,
        edges=edges,
        layers=layers,
        cycle_edges=cycle_edges,
        tangles=tangles,
        cuts=cuts,
        inner_edges={e for e in edges if same_part(*e) and "crate" not in e},
        upward=sorted(e for e in edges if layers[e[0]] < layers[e[1]]),
        long_files=sorted((size for size in sizes if size[0] > LONG_FILE), reverse=True),
        long_fns=sorted((fn for fn in fns if fn.lines >= LONG_FN), key=lambda f: (-f.lines, f.file, f.line)),
        readme_lines=readme.read_text(encoding="utf-8").count("\n") if readme.exists() else None,
        api=api,
        api_note=api_note,
    )


def arrows(pairs) -> str:
    return "; ".join(f"{a} -> {b}" for a, b in pairs)


def first_five(parts: list[str]) -> str:
    return "; ".join(parts[:5]) + (" …" if len(parts) > 5 else "")


def print_table(r: Report) -> None:
    def tangle(t):
        cycles = elementary_cycles(t, set(r.tangle_edges(t)))
        if len(cycles) == 1:
            return " -> ".join(cycles[0])
        return f"{', '.join(t)} ({len(cycles)} cycles)"

    rows = [
        ("import cycles between modules", f"{len(r.tangles)}", "; ".join(tangle(t) for t in r.tangles)),
        ("imports that point back up a layer", f"{len(r.upward)}", arrows(r.upward)),
        (
            f"files over {LONG_FILE} non-test lines",
            f"{len(r.long_files)}",
            first_five([f"{p} {n:,}" for n, p in r.long_files]),
        ),
        (
            f"functions of {LONG_FN} lines or more",
            f"{len(r.long_fns)}",
            first_five([f"{fn.file} `{fn.name}` {fn.lines}" for fn in r.long_fns]),
        ),
    ]
    if r.api:
        api, many = r.api, r.many_paths()
        marked = sum(1 for _, m in api.enums if m)
        most = sorted((i for i in many if len(many[i]) > 2), key=api.name)
        rows += [
            (
                "public items / public fields / public enums marked `#[non_exhaustive]`",
                f"{len(api.kinds)} / {len(api.fields)} / {marked} of {len(api.enums)}",
                f"{len(api.hidden)} of the items #[doc(hidden)]" if api.hidden else "",
            ),
            (
                "public items with more than one public path",
                f"{len(many)}",
                ", ".join(f"{api.name(i).rsplit('::', 1)[1]} {len(many[i])} paths" for i in most),
            ),
            ("public functions returning `Result<_, String>`", f"{len(api.string_errors)}", ""),
        ]
    else:
        rows.append(("public items / fields / enums", "—", r.api_note))
    rows.append(("README.md lines", f"{r.readme_lines:,}" if r.readme_lines is not None else "—", ""))

    print(f"| in `host/src` | {r.head} | details |")
    print("|---|---|---|")
    for what, value, detail in rows:
        print(f"| {what} | {value} | {detail} |")
    if r.api:
        print(f"\npublic API: {r.api_note}")


def print_structure(r: Report) -> None:
    print("\n## Files measured")
    print(f"  {len(r.files)} files reached from lib.rs and main.rs through `mod` declarations")
    for p in r.orphans:
        print(f"  not measured (test-only, or declared by no `mod`): {p}")

    print("\n## Import cycles between top-level modules (one tangle each)")
    for t, cut in zip(r.tangles, r.cuts):
        print(f"\ntangle: {', '.join(t)}")
        for e in r.tangle_edges(t):
            print(f"  {e[0]} -> {e[1]}{'   [a fewest cut]' if cut and e in cut else ''}")
            for imp in r.edges[e]:
                print(f"      {imp.item}  ({imp.where})")
        for cycle in elementary_cycles(t, set(r.tangle_edges(t))):
            print(f"  cycle: {' -> '.join(cycle)}")
        if cut is None:
            print("  imports to remove to break it: too many edges to search")
        else:
            print(f"  fewest imports to remove to break it: {len(cut)} (e.g. {arrows(cut)})")

    print("\n## Cycles inside one top-level module (not counted)")
    for comp in strongly_connected(sorted(r.layers), r.inner_edges):
        inner = {e for e in r.inner_edges if e[0] in comp and e[1] in comp}
        print(f"\n{', '.join(comp)}")
        for cycle in elementary_cycles(comp, inner):
            print(f"  cycle: {' -> '.join(cycle)}")

    print("\n## Imports that point back up a layer")
    for layer in sorted(set(r.layers.values())):
        modules = [n for n in sorted(r.layers) if r.layers[n] == layer]
        print(f"  layer {layer} ({LAYER_NAMES[layer]}): {', '.join(modules)}")
    for e in r.upward:
        print(f"\n{e[0]} (layer {r.layers[e[0]]}) -> {e[1]} (layer {r.layers[e[1]]})")
        for imp in r.edges[e]:
            print(f"    {imp.item}  ({imp.where})")

    print(f"\n## Files over {LONG_FILE} non-test lines")
    for n, p in r.long_files:
        print(f"  {n:6,}  {p}")

    print(f"\n## Functions of {LONG_FN} lines or more")
    for fn in r.long_fns:
        print(f"  {fn.lines:5}  {fn.file}:{fn.line}  {fn.name}")


def print_api(api: Api, many: dict[int, list[str]]) -> None:
    print("\n## Public items with more than one public path")
    for i in sorted(many, key=api.name):
        others = ", ".join(p for p in sorted(many[i]) if p != api.name(i))
        print(f"  {api.kinds[i]:10} {api.name(i)}: {others}")

    print("\n## Public enums (* = #[non_exhaustive])")
    for path, marked in sorted((api.name(i), m) for i, m in api.enums):
        print(f"  {'*' if marked else ' '} {path}")

    print("\n## Public functions returning Result<_, String>")
    for path in sorted(api.name(i) for i in api.string_errors):
        print(f"  {path}")

    print("\n## Public items that are #[doc(hidden)], or inside a hidden module")
    for path in sorted(api.name(i) for i in api.hidden):
        print(f"  {path}")

    print("\n## Public fields, by struct")
    by_struct: dict[str, list[str]] = {}
    for i, name in api.fields:
        by_struct.setdefault(api.name(i), []).append(name)
    for struct, fields in sorted(by_struct.items()):
        print(f"  {len(fields):3} {struct}: {', '.join(fields)}")

    print("\n## Public items by kind")
    kinds: dict[str, int] = {}
    for k in api.kinds.values():
        kinds[k] = kinds.get(k, 0) + 1
    for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4} {k}")


def main() -> int:
    if os.environ.get(WRAPPER_ENV):
        rustdoc_wrapper(sys.argv)  # cargo runs this script as RUSTDOC; does not return
    args = parse_args()
    report = measure(args)
    print_table(report)
    if args.list:
        print_structure(report)
        if report.api:
            print_api(report.api, report.many_paths())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as error:
        print(f"house-metrics: {error}", file=sys.stderr)
        sys.exit(2)
