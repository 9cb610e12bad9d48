#!/usr/bin/env python3
"""Finds import rings between the modules of each workspace crate.

    python3 scripts/import_rings.py [--graph]

A ring is a set of modules of one crate where each reaches the others through `use` (or
inline `crate::`/`super::` paths): module A imports B and B imports A back, directly or through
others. Every ring is printed with one edge per line (`a -> b  (file:line)`), and the exit
status is 1 when there is any. `--graph` prints every edge as well.

Names re-exported by a crate root (`pub use window::Window` in lib.rs) resolve to the module
that defines them, so `crate::Window` is an edge to `window`, not to the root. A module's own
inline test module (`mod tests { use super::*; }`) is part of that module. Modules of a binary
(main.rs) form a crate of their own.
"""

import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES = ["features", "operators/core", "operators/kafka", "operators/score", "checkpoint", "jobs"]

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
INLINE_MOD = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{")
USE_STMT = re.compile(r"\b(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S)
INLINE_PATH = re.compile(r"\b(crate|super)((?:::\w+)+)")


def strip_comments(text):
    """Removes // and /* */ comments and string literals' contents, keeping line numbers."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text[i] == '"' and not text[max(0, i - 1)].isalnum():
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """Splits `a::{b::C, d}` into the list of paths ['a::b::C', 'a::d']."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)

    def expand(s):
        depth, start = 0, None
        for i, c in enumerate(s):
            if c == "{":
                if depth == 0:
                    start = i
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    prefix, inner, rest = s[:start], s[start + 1 : i], s[i + 1 :]
                    parts, d, cur = [], 0, ""
                    for ch in inner:
                        if ch == "," and d == 0:
                            parts.append(cur)
                            cur = ""
                            continue
                        d += ch == "{"
                        d -= ch == "}"
                        cur += ch
                    parts.append(cur)
                    result = []
                    for p in parts:
                        if p:
                            result.extend(expand(prefix + p + rest))
                    return result
        return [s]

    return expand(tree)


class Crate:
    def __init__(self, name, root_file):
        self.name = name
        self.root_file = root_file
        self.modules = {}  # module path (tuple) -> file
        self.children = defaultdict(set)  # module path -> child names
        self.reexports = {}  # (module path, name) -> module path defining it
        self.collect(root_file, ())

    def collect(self, file, path):
        self.modules[path] = file
        text = strip_comments(file.read_text())
        for name in MOD_DECL.findall(text):
            self.children[path].add(name)
            base = file.parent if file.name in ("lib.rs", "main.rs", "mod.rs") else file.with_suffix("")
            for cand in (base / f"{name}.rs", base / name / "mod.rs"):
                if cand.exists():
                    self.collect(cand, path + (name,))
                    break

    def resolve(self, from_mod, segments):
        """The module (tuple) that a path names, starting at from_mod."""
        if not segments:
            return None
        if segments[0] == "crate":
            cur, rest = (), segments[1:]
        elif segments[0] == "super":
            cur, rest = from_mod, segments
            while rest and rest[0] == "super":
                cur, rest = cur[:-1], rest[1:]
        elif segments[0] == "self":
            cur, rest = from_mod, segments[1:]
        else:
            return None
        while rest and rest[0] in self.children[cur]:
            cur, rest = cur + (rest[0],), rest[1:]
        # A name the module re-exports from another module of the crate.
        while rest and (cur, rest[0]) in self.reexports:
            cur = self.reexports[(cur, rest[0])]
            rest = rest[1:]
        return cur

    def imports(self, path):
        """(target module, line) for each import of one module's file."""
        file = self.modules[path]
        text = strip_comments(file.read_text())
        found = []
        inline_depth = self.inline_module_spans(text)
        for m in USE_STMT.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            scope = path + inline_depth(m.start())
            for p in expand_use_tree(m.group(1)):
                segs = [s for s in p.split("::") if s and s != "*"]
                if segs and segs[0] in ("crate", "super", "self"):
                    found.append((self.resolve(scope, segs), line))
        no_use = USE_STMT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for m in INLINE_PATH.finditer(no_use):
            line = no_use.count("\n", 0, m.start()) + 1
            scope = path + inline_depth(m.start())
            segs = [m.group(1)] + [s for s in m.group(2).split("::") if s]
            found.append((self.resolve(scope, segs), line))
        return [(t, line) for t, line in found if t is not None]

    @staticmethod
    def inline_module_spans(text):
        """A function from an offset to the inline modules (`mod x { .. }`) that enclose it."""
        spans = []
        for m in re.finditer(INLINE_MOD.pattern, text, re.M):
            depth, i = 0, m.end() - 1
            while i < len(text):
                depth += text[i] == "{"
                depth -= text[i] == "}"
                if depth == 0:
                    break
                i += 1
            spans.append((m.start(), i, m.group(1)))

        def enclosing(offset):
            return tuple(name for start, end, name in spans if start <= offset <= end)

        return enclosing

    def learn_reexports(self):
        for path, file in self.modules.items():
            text = strip_comments(file.read_text())
            for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text, re.S):
                for p in expand_use_tree(m.group(1)):
                    segs = [s for s in p.split("::") if s]
                    if not segs or segs[-1] == "*":
                        continue
                    if segs[0] in ("crate", "super", "self"):
                        target = self.resolve(path, segs[:-1]) if len(segs) > 1 else None
                    elif segs[0] in self.children[path]:
                        target = self.resolve(path, ["self"] + segs[:-1])
                    else:
                        continue
                    if target is not None and target != path:
                        self.reexports[(path, segs[-1])] = target

    def edges(self):
        self.learn_reexports()
        result = defaultdict(dict)
        for path in self.modules:
            for target, line in self.imports(path):
                if target == path:
                    continue
                result[path].setdefault(target, line)
        return result


def rings(edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def name(crate, path):
    return crate.name + "::" + ("::".join(path) if path else "(root)")


def main():
    sys.setrecursionlimit(10000)
    show_graph = "--graph" in sys.argv
    crates = []
    for rel in CRATES:
        src = ROOT / rel / "src"
        for root in ("lib.rs", "main.rs"):
            if (src / root).exists():
                label = rel + ("" if root == "lib.rs" else " (bin)")
                crates.append(Crate(label, src / root))
    found = 0
    for crate in crates:
        edges = crate.edges()
        if show_graph:
            for a, targets in sorted(edges.items()):
                for b, line in sorted(targets.items()):
                    print(f"{name(crate, a)} -> {name(crate, b)}")
        for comp in rings(edges):
            found += 1
            members = set(comp)
            print(f"ring in {crate.name}: " + ", ".join("::".join(p) or "(root)" for p in comp))
            for a in comp:
                for b, line in sorted(edges[a].items()):
                    if b in members:
                        rel = crate.modules[a].relative_to(ROOT)
                        print(f"    {'::'.join(a) or '(root)'} -> {'::'.join(b) or '(root)'}  ({rel}:{line})")
    if found:
        print(f"{found} import ring(s): move the type both sides need to a leaf module")
        return 1
    print("no import rings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
