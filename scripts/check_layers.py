#!/usr/bin/env python3
"""Check that simil's folders depend on each other only downward.

The layers (README.md, "Layout"):

    tools/, python/, src/dist/  ->  include/simil/ (the public API)
    src/index/  ->  src/algo/  ->  src/core/
    src/cpu/, src/cuda/  ->  src/core/

Two checks, both printing every break they find:

1. Includes.  Each folder's sources may include, with quotes, only headers of
   the folders it may use (and, for tools/ and python/, their own headers).

2. Symbols, when object files are given (the library's, e.g. through CMake's
   $<TARGET_OBJECTS:simil_objects>).  From `nm`, which file calls which:
   a folder may call only into the folders below it, and into the backends
   (src/cpu, src/cuda) only through the entry points core/backend.h declares.
   Within src/core and src/algo, files form no cycle.  Within src/index the
   one cycle allowed is the wrapper types' (ALLOWED_CYCLE below).

Usage: check_layers.py SOURCE_DIR [OBJECT.o ...]
"""
import os
import re
import subprocess
import sys

# folder -> the folders whose headers (and symbols) it may use, besides itself
# and include/simil.
MAY_USE = {
    "include/simil": [],
    "src/core": [],
    "src/cpu": ["src/core"],
    "src/cuda": ["src/core"],
    "src/algo": ["src/core"],
    "src/index": ["src/algo", "src/core"],
    "src/dist": [],
    "tools": [],
    "python/simil": [],
}

# The wrapper index types hold inner indexes of any type: they make them with
# the factory and drive them through the public API (as Faiss's IndexRefine
# and IndexShards do).  That recursion is the only cycle src/index may hold:
# these edges are left out of its cycle search.
ALLOWED_CYCLE = {
    ("src/index/index_factory.c", "src/index/index_opq.c"),
    ("src/index/index_factory.c", "src/index/index_refine.c"),
    ("src/index/index_factory.c", "src/index/index_shards.c"),
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE = (".c", ".h", ".cu", ".cuh")


def folder_of(path):
    """The layer folder of a path relative to the source tree, or None."""
    for f in sorted(MAY_USE, key=len, reverse=True):
        if path == f or path.startswith(f + "/"):
            return f
    return None


def check_includes(root):
    errors = []
    for f, uses in MAY_USE.items():
        top = os.path.join(root, f)
        if not os.path.isdir(top):
            continue
        allowed = {"simil"} | {u.split("/")[-1] for u in uses}
        if f.startswith("src/"):
            allowed.add(f.split("/")[1])
        for name in sorted(os.listdir(top)):
            if not name.endswith(SOURCE):
                continue
            path = os.path.join(f, name)
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for inc in INCLUDE.findall(text):
                if "/" not in inc:
                    if f.startswith("src/") or f == "include/simil":
                        errors.append(f"{path}: includes \"{inc}\"; name it by its folder")
                    continue
                if inc.split("/")[0] not in allowed:
                    errors.append(f"{path}: includes \"{inc}\", but {f}/ may use only "
                                  + ", ".join(sorted(allowed)))
    return errors


def backend_entry_points(root):
    """Functions core/backend.h declares, which src/index and src/algo may call
    although src/cpu or src/cuda defines them."""
    with open(os.path.join(root, "src/core/backend.h"), encoding="utf-8") as fh:
        text = fh.read()
    return set(re.findall(r"^[a-z][\w \*]*?\b(sml_\w+)\(", text, re.M))


def symbols(objects, root):
    """(defined: symbol -> source path, uses: source path -> symbols)."""
    defined, uses = {}, {}
    for o in objects:
        m = re.search(r"/(src/\w+/\w+\.(?:c|cu))\.o$", o)
        if not m:
            continue
        src = m.group(1)
        out = subprocess.run(["nm", "-g", o], capture_output=True, text=True, check=True).stdout
        uses.setdefault(src, set())
        for line in out.splitlines():
            p = line.split()
            if len(p) == 2 and p[0] == "U":
                uses[src].add(p[1])
            elif len(p) == 3 and p[1] in "TDBRCV":
                defined[p[2]] = src
    return defined, uses


def find_cycle(nodes, edges):
    """One cycle of the directed graph, as a list of nodes, or None."""
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(nodes):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def check_symbols(root, objects):
    errors = []
    entry = backend_entry_points(root)
    defined, uses = symbols(objects, root)
    edges = {}
    for src, used in uses.items():
        f = folder_of(src)
        for s in used:
            to = defined.get(s)
            if to is None or to == src:
                continue
            g = folder_of(to)
            if g != f and g not in MAY_USE[f]:
                if g in ("src/cpu", "src/cuda") and s in entry:
                    continue
                errors.append(f"{src} calls {s} of {to}, but {f}/ may not use {g}/")
            elif g == f and (src, to) not in ALLOWED_CYCLE:
                edges.setdefault(src, set()).add(to)
    for f in ("src/core", "src/algo", "src/index", "src/cpu"):
        nodes = [s for s in uses if folder_of(s) == f]
        cycle = find_cycle(nodes, {n: edges.get(n, set()) for n in nodes})
        if cycle:
            errors.append(f"{f}/ has a dependency cycle: " + " -> ".join(cycle))
    return errors


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = argv[1]
    errors = check_includes(root)
    objects = [o for a in argv[2:] for o in a.split(";") if o]
    if objects:
        errors += check_symbols(root, objects)
    for e in errors:
        print("check_layers: " + e)
    if not errors:
        print(f"check_layers: the layers hold ({len(objects)} object files read)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
