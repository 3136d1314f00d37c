#!/usr/bin/env python3
"""The shipped library exports only its API (ctest: layout.exports).

Every symbol `nm -D --defined-only` lists in librdmacoll.so must be a name the public headers
mark RDMACOLL_API (include/rdmacoll/export.hpp), or a vtable or typeinfo of such a class; and
every such function must be there. An internal function, a test hook or a std:: instantiation
exported by mistake, or an API function left hidden, is a breach.

Usage: check_exports.py SOURCE_DIR LIBRARY. Prints every breach and exits 1 if there is one.
"""
import os
import re
import subprocess
import sys

DECLARED_CLASS = re.compile(r"^class RDMACOLL_API (\w+)", re.M)
DECLARED_FUNCTION = re.compile(r"^RDMACOLL_API [^(]*?\b(\w+|operator<<)\(", re.M)
# A namespace-scope function declaration (column 0, not inline): it must be marked.
ANY_FUNCTION = re.compile(r"^(?!inline |RDMACOLL_API )[\w:<>]+[ &*]+(\w+|operator<<)\(", re.M)
PREFIXES = ("vtable for ", "typeinfo for ", "typeinfo name for ")


def public_names(root):
    classes, functions, unmarked = set(), set(), []
    headers = os.path.join(root, "include", "rdmacoll")
    for name in sorted(os.listdir(headers)):
        with open(os.path.join(headers, name), encoding="utf-8") as f:
            text = f.read()
        classes.update(DECLARED_CLASS.findall(text))
        functions.update(DECLARED_FUNCTION.findall(text))
        unmarked += [f"include/rdmacoll/{name}: {m} is declared without RDMACOLL_API, so "
                     "librdmacoll does not export it" for m in ANY_FUNCTION.findall(text)]
    return classes, functions, unmarked


def exported(library):
    out = subprocess.run(["nm", "-D", "--defined-only", "--demangle", library], check=True,
                         capture_output=True, text=True).stdout
    symbols = []
    for line in out.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3:
            symbols.append(parts[2])
    return symbols


def first_name(symbol):
    """The name right after rdmacoll::, or None for a symbol outside the namespace."""
    for prefix in PREFIXES:
        if symbol.startswith(prefix):
            symbol = symbol[len(prefix):]
            break
    if not symbol.startswith("rdmacoll::"):
        return None
    return re.match(r"(operator<<|\w+)", symbol[len("rdmacoll::"):]).group(1)


def main():
    root, library = sys.argv[1], sys.argv[2]
    classes, functions, breaches = public_names(root)
    seen = set()
    for symbol in exported(library):
        name = first_name(symbol)
        if name in classes or name in functions:
            seen.add(name)
        else:
            breaches.append(f"{library}: exports {symbol!r}, which no public header marks "
                            "RDMACOLL_API: hide it (it is internal) or declare it in include/")
    for name in sorted(functions - seen):
        breaches.append(f"{library}: does not export rdmacoll::{name}, which "
                        "include/rdmacoll declares RDMACOLL_API")
    for b in breaches:
        print(b)
    print(f"{len(classes)} classes, {len(functions)} functions in the API; "
          f"{len(breaches)} breaches")
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
