#!/usr/bin/env python3
"""The layout rules docs/design.md states, checked on every test run (ctest: layout.*).

- Includes point one way: api -> engine -> schedule/topology -> transport, with bootstrap and
  common below them all; a file includes its own layer or a lower one, never a higher one.
- Inside the engine: engine/core/ includes nothing of engine/control/ or engine/collectives/,
  and engine/control/ nothing of engine/collectives/: the core and the exchange know no
  collective's file.
- Public headers (include/rdmacoll/) include only each other: no internal type leaks out.
- The Python backend (python/src/) is a layer on the public API: it includes rdmacoll/ headers
  and its own, nothing of src/.
- No source file (C++ or Python) is over 600 lines: a file that grows past that is split along its concerns.
- Every file of ours a comment names exists: a path such as engine/call.hpp or docs/design.md
  (from the repository, src/, include/, tests/ or perf/), or a bare source name such as
  control_plane.cpp (anywhere in the repository). A newcomer who follows a stale one finds
  nothing.

Usage: check_layout.py SOURCE_DIR. Prints every breach and exits 1 if there is one.
"""
import os
import re
import sys

LAYERS = {"common": 0, "bootstrap": 1, "transport": 2, "topology": 3, "schedule": 3,
          "engine": 4, "api": 5}
# The engine's own folders, lowest first; its other files are not ranked.
ENGINE_PARTS = {"core": 0, "control": 1, "collectives": 2}
MAX_LINES = 600
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"]+)"')


CPP = (".cpp", ".hpp", ".h", ".cc")
# A file name in a comment: word characters, dots, dashes and slashes, ending in one of our
# extensions.
NAMED = re.compile(r"(?<![\w./*-])([\w./-]*\w\.(?:cpp|hpp|md))(?![\w])")
COMMENT = re.compile(r"(//|#)(.*)$")


def sources(root, top, suffixes=CPP):
    for base, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        for f in files:
            if f.endswith(suffixes):
                yield os.path.join(base, f)


def includes(path):
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield number, m.group(1)


def main(root):
    breaches = []
    for path in sources(root, "src"):
        layer = os.path.relpath(path, os.path.join(root, "src")).split(os.sep)[0]
        for number, inc in includes(path):
            target = inc.split("/")[0]
            if layer in LAYERS and target in LAYERS and LAYERS[target] > LAYERS[layer]:
                breaches.append(f"{path}:{number}: the {layer} layer includes {inc}, a layer above it")
            rel = os.path.relpath(path, os.path.join(root, "src")).split(os.sep)
            part = rel[1] if layer == "engine" and len(rel) > 2 else None
            inc_parts = inc.split("/")
            inc_part = inc_parts[1] if inc_parts[0] == "engine" and len(inc_parts) > 2 else None
            if (part in ENGINE_PARTS and inc_part in ENGINE_PARTS and
                    ENGINE_PARTS[inc_part] > ENGINE_PARTS[part]):
                breaches.append(f"{path}:{number}: engine/{part}/ includes {inc}, which is above "
                                "it (core, then control, then collectives)")
    for path in sources(root, "include"):
        for number, inc in includes(path):
            if not inc.startswith("rdmacoll/"):
                breaches.append(f"{path}:{number}: a public header includes {inc}, not public")
    for path in sources(root, "python"):
        for number, inc in includes(path):
            if inc.split("/")[0] in LAYERS:
                breaches.append(f"{path}:{number}: the Python backend includes {inc}; use the "
                                "public API (include/rdmacoll/)")
    for top in ("src", "include", "python", "tests", "perf", "examples", "scripts"):
        for path in sources(root, top, CPP + (".py",)):
            with open(path, errors="replace") as f:
                lines = sum(1 for _ in f)
            if lines > MAX_LINES:
                breaches.append(f"{path}: {lines} lines, over {MAX_LINES}: split it along its "
                                "concerns")
    breaches += stale_names(root)
    for b in breaches:
        print(b)
    print(f"{len(breaches)} breaches of the layout rules" if breaches else "layout rules hold")
    return 1 if breaches else 0


def stale_names(root):
    """Files of ours named in comments that do not exist."""
    skip = {".git", "build", ".venv", "__pycache__"}
    basenames, paths = set(), set()
    for base, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith("build")]
        for f in files:
            rel = os.path.relpath(os.path.join(base, f), root)
            basenames.add(f)
            paths.add(rel)
    def exists(name):
        if "/" not in name:
            # A bare name: a source of ours (a bare .md is a file some tool writes).
            return name.endswith(".md") or name in basenames
        name = name.lstrip("./")
        return any(os.path.normpath(os.path.join(pre, name)) in paths
                   for pre in ("", "src", "include", "tests", "perf")) or \
            any(p.endswith("/" + name) for p in paths)
    out = []
    for top in ("src", "include", "python", "tests", "perf", "scripts"):
        for path in sources(root, top, CPP + (".py", ".sh")):
            with open(path, errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = COMMENT.search(line)
                    if not m or (m.group(1) == "#" and not path.endswith((".py", ".sh"))):
                        continue
                    if m.group(1) == "#" and line.lstrip().startswith("#!"):
                        continue
                    for name in NAMED.findall(m.group(2)):
                        if "://" in line or not exists(name):
                            if "://" in line:
                                continue
                            out.append(f"{path}:{number}: a comment names {name}, which does not "
                                       "exist")
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
