#!/usr/bin/env python3
"""The toolhost library's public API as one sorted text file, host/public-api.txt.

    scripts/public-api.py            # write host/public-api.txt from this checkout
    scripts/public-api.py --check    # fail (exit 1, with the diff) when it differs

Semver discipline for the embedder's crate: every public item (module, type,
field, variant, function with its signature, method, trait item, constant) is one
line, so a change to what embedders can name shows up in review as a change to
this file, and CI (`.ci/run`) fails until the file is updated on purpose. Items
marked #[doc(hidden)] are not API and are left out.

The API is read from rustdoc's JSON for the library with default features, made
as scripts/house-metrics.py makes it (the same walk of public paths; see its
docstring): run as RUSTDOC, under RUSTC_BOOTSTRAP=1, for the toolhost library
only, so no dependency is rebuilt. `--cargo` takes the cargo command, e.g.
`--cargo /work/bin/cargo-locked`; `--rustdoc-json FILE` reads a JSON made before.

Why not cargo-semver-checks: it needs a published baseline (there is no release
tag yet) and builds rustdoc JSON twice; this file is the baseline, kept in the
tree, and the check costs one rustdoc run (about 30 s).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SNAPSHOT = ROOT / "host" / "public-api.txt"


def house_metrics():
    spec = importlib.util.spec_from_file_location("house_metrics", HERE / "house-metrics.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["house_metrics"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------
# Types and signatures, rendered from rustdoc JSON's `Type`.


def generic_args(args) -> str:
    if not args:
        return ""
    if "angle_bracketed" in args:
        a = args["angle_bracketed"]
        parts = []
        for arg in a.get("args", []):
            if "type" in arg:
                parts.append(ty(arg["type"]))
            elif "lifetime" in arg:
                parts.append(arg["lifetime"])
            elif "const" in arg:
                parts.append(str(arg["const"].get("expr", "_")))
            else:
                parts.append("_")
        for c in a.get("constraints", []):
            binding = c.get("binding", {})
            if "equality" in binding:
                eq = binding["equality"]
                parts.append(f"{c['name']} = {ty(eq['type']) if 'type' in eq else '_'}")
            else:
                parts.append(f"{c['name']}: {bounds(binding.get('constraint', []))}")
        return f"<{', '.join(parts)}>" if parts else ""
    if "parenthesized" in args:
        p = args["parenthesized"]
        out = f"({', '.join(ty(t) for t in p.get('inputs', []))})"
        return out + (f" -> {ty(p['output'])}" if p.get("output") else "")
    return ""


def bounds(bs) -> str:
    out = []
    for b in bs:
        if "trait_bound" in b:
            t = b["trait_bound"]["trait"]
            out.append(t["path"] + generic_args(t.get("args")))
        elif "outlives" in b:
            out.append(b["outlives"])
        else:
            out.append("?")
    return " + ".join(out)


def ty(t) -> str:
    if t is None:
        return "()"
    (k, v), = t.items()
    if k == "resolved_path":
        return v["path"] + generic_args(v.get("args"))
    if k == "dyn_trait":
        traits = [p["trait"]["path"] + generic_args(p["trait"].get("args")) for p in v["traits"]]
        if v.get("lifetime"):
            traits.append(v["lifetime"])
        return "dyn " + " + ".join(traits)
    if k == "generic":
        return v
    if k == "primitive":
        return v
    if k == "tuple":
        return f"({', '.join(ty(x) for x in v)})"
    if k == "slice":
        return f"[{ty(v)}]"
    if k == "array":
        return f"[{ty(v['type'])}; {v['len']}]"
    if k == "impl_trait":
        return "impl " + bounds(v)
    if k == "borrowed_ref":
        life = f"{v['lifetime']} " if v.get("lifetime") else ""
        return f"&{life}{'mut ' if v.get('is_mutable') else ''}{ty(v['type'])}"
    if k == "raw_pointer":
        return f"*{'mut' if v.get('is_mutable') else 'const'} {ty(v['type'])}"
    if k == "qualified_path":
        return f"<{ty(v['self_type'])}>::{v['name']}"
    if k == "function_pointer":
        sig = v["sig"]
        return f"fn({', '.join(ty(i[1]) for i in sig['inputs'])}) -> {ty(sig['output'])}"
    if k == "infer":
        return "_"
    return k


def generics(g) -> str:
    params = []
    for p in g.get("params", []):
        kind = p["kind"]
        if "lifetime" in kind:
            params.append(p["name"])
        elif "type" in kind:
            if kind["type"].get("is_synthetic"):
                continue  # an `impl Trait` argument, shown in place
            b = bounds(kind["type"].get("bounds", []))
            params.append(p["name"] + (f": {b}" if b else ""))
        elif "const" in kind:
            params.append(f"const {p['name']}: {ty(kind['const']['type'])}")
    where = []
    for w in g.get("where_predicates", []):
        if "bound_predicate" in w:
            bp = w["bound_predicate"]
            where.append(f"{ty(bp['type'])}: {bounds(bp['bounds'])}")
    out = f"<{', '.join(params)}>" if params else ""
    return out + (f" where {', '.join(where)}" if where else "")


def signature(item) -> str:
    f = item["inner"]["function"]
    sig = f["sig"]
    header = f.get("header", {})
    prefix = ("const " if header.get("is_const") else "") + ("async " if header.get("is_async") else "")
    inputs = []
    for name, t in sig["inputs"]:
        if name == "self":
            inputs.append(ty(t).replace("Self", "self") if t.get("generic") != "Self" else "self")
        else:
            inputs.append(f"{name}: {ty(t)}")
    out = f" -> {ty(sig['output'])}" if sig.get("output") else ""
    return f"{prefix}fn {item['name']}{generics(f.get('generics', {}))}({', '.join(inputs)}){out}"


# ---------------------------------------------------------------------------------------
# One line per public item.


def lines(doc: dict, hm) -> list[str]:
    api = hm.public_api(doc)
    index = doc["index"]
    out = set()
    for i, kind in api.kinds.items():
        if i in api.hidden:
            continue
        item = index[str(i)]
        name = api.name(i)
        attrs = " ".join(str(a) for a in item.get("attrs", []))
        mark = " #[non_exhaustive]" if "non_exhaustive" in attrs else ""
        if kind == "function":
            out.add(f"{name}: {signature(item)}")
        elif kind == "constant":
            out.add(f"{name}: const {ty(item['inner']['constant']['type'])}")
        elif kind == "static":
            out.add(f"{name}: static {ty(item['inner']['static']['type'])}")
        elif kind == "type_alias":
            out.add(f"{name}: type = {ty(item['inner']['type_alias']['type'])}")
        elif kind == "assoc_type":
            out.add(f"{name}: type")
        elif kind == "assoc_const":
            out.add(f"{name}: const {ty(item['inner']['assoc_const']['type'])}")
        elif kind == "struct":
            inner = item["inner"]["struct"]
            out.add(f"{name}: struct{generics(inner.get('generics', {}))}{mark}")
        elif kind == "enum":
            inner = item["inner"]["enum"]
            out.add(f"{name}: enum{generics(inner.get('generics', {}))}{mark}")
            for vid in inner["variants"]:
                v = index[str(vid)]
                vk = v["inner"]["variant"]["kind"]
                shape = ""
                if isinstance(vk, dict) and "tuple" in vk:
                    shape = "(" + ", ".join(
                        ty(index[str(f)]["inner"]["struct_field"]) if f is not None else "_" for f in vk["tuple"]
                    ) + ")"
                elif isinstance(vk, dict) and "struct" in vk:
                    shape = " { " + ", ".join(
                        f"{index[str(f)]['name']}: {ty(index[str(f)]['inner']['struct_field'])}"
                        for f in vk["struct"]["fields"]
                    ) + " }"
                out.add(f"{name}::{v['name']}: variant{shape}")
        elif kind == "trait":
            out.add(f"{name}: trait")
        else:
            out.add(f"{name}: {kind}")
    for owner, field in api.fields:
        if owner in api.hidden:
            continue
        struct = index[str(owner)]["inner"]["struct"]["kind"]
        fids = struct.get("plain", {}).get("fields", []) if isinstance(struct, dict) else []
        for fid in fids:
            f = index[str(fid)]
            if f["name"] == field:
                out.add(f"{api.name(owner)}.{field}: {ty(f['inner']['struct_field'])}")
    return sorted(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail when host/public-api.txt differs")
    parser.add_argument("--cargo", default="cargo", help="the cargo command")
    parser.add_argument("--rustdoc-json", type=Path, help="read this rustdoc JSON instead of building it")
    args = parser.parse_args()
    hm = house_metrics()
    with tempfile.TemporaryDirectory() as tmp:
        json_file = args.rustdoc_json or hm.build_rustdoc_json(ROOT, args.cargo, Path(tmp))[0]
        doc = json.loads(Path(json_file).read_text())
    text = "".join(line + "\n" for line in lines(doc, hm))
    header = (
        "# The toolhost library's public API (default features), one line per item.\n"
        "# Written by scripts/public-api.py; .ci/run fails when it differs: a change to\n"
        "# the API is made on purpose, by running the script and reviewing this diff.\n"
    )
    text = header + text
    if not args.check:
        SNAPSHOT.write_text(text)
        print(f"public-api: wrote {SNAPSHOT.relative_to(ROOT)} ({text.count(chr(10)) - 3} items)")
        return 0
    old = SNAPSHOT.read_text() if SNAPSHOT.exists() else ""
    if old == text:
        print(f"public-api: {SNAPSHOT.relative_to(ROOT)} is current")
        return 0
    sys.stdout.writelines(difflib.unified_diff(
        old.splitlines(True), text.splitlines(True), "host/public-api.txt (committed)", "the API now"))
    print("public-api: the public API changed; if that is meant, run scripts/public-api.py and commit "
          "host/public-api.txt (and say in the change what an embedder must do)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
