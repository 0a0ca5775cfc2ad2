#!/usr/bin/env python3
"""No import circle between the source files of any crate, and no HTTP client under the simulator.

For every crate under crates/ this reads each source file's module path
(src/a/b.rs and src/a/b/mod.rs are `a::b`), the paths it names
(`use` trees, and `crate::`, `super::`, `self::` paths and children of its own
`mod` declarations anywhere in the code), resolves each to the file that
defines it (following `pub use` re-exports), and draws an edge from file to
file. A strongly connected component of more than one file is a circle: it is
printed with one path through it, and the script exits 1.

A parent's `mod child;` declaration is not an import; `pub use child::Item`
is. Inline modules (`mod tests { ... }`) belong to their file.

It also checks that `cargo tree -p tokenscope-sim` holds no HTTP client crate
(`reqwest`, `tokenscope-load`): the simulator takes its workload types from the
workload crate, not from the client.

Usage: scripts/check-imports.py [--no-cargo]   (docs/architecture.md)
"""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(text):
    """Code with comments, string and char literals blanked (keeps line count)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not re.match(r"[A-Za-z0-9_]", text[i - 1] if i else " "):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or (c == "'" and re.match(r"'\\[xu]", text[i:i + 3])):
            j = text.find("'", i + 2)
            i = j + 1
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}, self}` -> ['a::b', 'a::c::d', 'a::c::e', 'a']."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", tree.strip())
    results = []

    def walk(prefix, t):
        # split t at top-level commas
        depth, start, parts = 0, 0, []
        for k, ch in enumerate(t):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(t[start:k])
                start = k + 1
        parts.append(t[start:])
        for p in parts:
            if not p:
                continue
            brace = p.find("{")
            if brace >= 0:
                head = p[:brace].rstrip(":")
                walk(prefix + ([head] if head else []), p[brace + 1:p.rfind("}")])
            else:
                p = re.split(r"\s+as\s+", p)[0].strip()
                segs = [s for s in p.split("::") if s]
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                results.append("::".join(prefix + segs))

    walk([], tree)
    return results


class Crate:
    def __init__(self, name, src):
        self.name = name
        self.src = src
        self.files = {}  # module path tuple -> (relative file, code)
        for dirpath, _, names in os.walk(src):
            for fname in names:
                if not fname.endswith(".rs"):
                    continue
                full = os.path.join(dirpath, fname)
                rel = os.path.relpath(full, src)[:-3].split(os.sep)
                if rel[-1] == "mod":
                    rel = rel[:-1]
                if rel in (["lib"], ["main"]):
                    rel = []
                with open(full, encoding="utf-8") as fh:
                    code = strip_comments_and_strings(fh.read())
                self.files[tuple(rel)] = (os.path.relpath(full, ROOT), code)
        self.children = {m: set(re.findall(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", c))
                         for m, (_, c) in self.files.items()}
        self.uses = {m: self._uses(c) for m, (_, c) in self.files.items()}
        self.reexports = {}
        for m, (_, c) in self.files.items():
            for tree in re.findall(r"(?s)\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", c):
                for path in expand_use_tree(tree):
                    segs = path.split("::")
                    name = segs[-1]
                    if name != "*":
                        self.reexports.setdefault(m, {})[name] = segs
                    else:
                        self.reexports.setdefault(m, {}).setdefault("*", []).append(segs[:-1])

    @staticmethod
    def _uses(code):
        paths = []
        for tree in re.findall(r"(?s)\buse\s+([^;]+);", code):
            paths.extend(expand_use_tree(tree))
        for m in re.finditer(r"\b((?:crate|super|self)(?:::" + IDENT + ")+)", code):
            paths.append(m.group(1))
        return paths

    def absolute(self, module, segs):
        """A path as written in `module` -> absolute segments from the crate root, or None (extern)."""
        segs = list(segs)
        if not segs:
            return None
        base = list(module)
        if segs[0] == "crate":
            return segs[1:]
        if segs[0] in ("super", "self"):
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    if not base:
                        return None
                    base = base[:-1]
                segs = segs[1:]
            return base + segs
        if segs[0] in self.children.get(module, ()):
            return base + segs
        return None  # an external crate, std, or a local item

    def resolve(self, abs_segs, depth=0):
        """Absolute segments -> the module (file) that defines the named item."""
        if abs_segs is None or depth > 20:
            return None
        # the longest prefix that is a file
        for k in range(len(abs_segs), -1, -1):
            mod = tuple(abs_segs[:k])
            if mod in self.files:
                rest = abs_segs[k:]
                if not rest:
                    return mod
                exported = self.reexports.get(mod, {})
                if rest[0] in exported:
                    target = self.absolute(mod, exported[rest[0]])
                    if target is not None:
                        return self.resolve(target + rest[1:], depth + 1) or mod
                for glob in exported.get("*", []):
                    target = self.absolute(mod, glob)
                    if target is not None:
                        found = self.resolve(target + rest, depth + 1)
                        if found is not None and found != tuple(target):
                            return found
                return mod
        return None

    def edges(self):
        graph = {m: set() for m in self.files}
        for m, paths in self.uses.items():
            for p in paths:
                segs = [s for s in p.split("::") if s]
                if segs and segs[-1] == "*":
                    segs = segs[:-1]
                target = self.resolve(self.absolute(m, segs))
                if target is None or target == m:
                    continue
                # naming a module that only declares its children is not a use of it
                if len(target) < len(m) and m[:len(target)] == target and segs[-1:] != [] and \
                        self.absolute(m, segs) == list(target):
                    continue
                graph[m].add(target)
        return graph


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            strong(v)
    return [c for c in out if len(c) > 1]


def cycle_path(graph, comp):
    """One circle through the component, as module names."""
    members = set(comp)
    start = sorted(comp)[0]
    path, seen, node = [start], {start}, start
    while True:
        nxt = sorted(w for w in graph[node] if w in members)
        back = [w for w in nxt if w in seen]
        if back:
            cut = path.index(back[0])
            return path[cut:] + [back[0]]
        node = [w for w in nxt if w not in seen][0]
        path.append(node)
        seen.add(node)


def modname(crate, m):
    return crate.name + ("::" + "::".join(m) if m else " (root)")


def main():
    failed = False
    crates_dir = os.path.join(ROOT, "crates")
    for name in sorted(os.listdir(crates_dir)):
        src = os.path.join(crates_dir, name, "src")
        if not os.path.isdir(src):
            continue
        crate = Crate(name, src)
        graph = crate.edges()
        for comp in sccs(graph):
            failed = True
            circle = cycle_path(graph, comp)
            print(f"import circle in {name}: " + " -> ".join(modname(crate, m) for m in circle))
            print("  files: " + ", ".join(sorted(crate.files[m][0] for m in comp)))
    if "--no-cargo" not in sys.argv:
        tree = subprocess.run(["cargo", "tree", "-p", "tokenscope-sim", "-e", "normal", "--prefix", "none"],
                              cwd=ROOT, capture_output=True, text=True)
        if tree.returncode != 0:
            print("cargo tree -p tokenscope-sim failed: " + tree.stderr.strip().splitlines()[-1])
            failed = True
        else:
            for banned in ("reqwest", "tokenscope-load"):
                if re.search(r"(?m)^" + re.escape(banned) + r" ", tree.stdout):
                    print(f"tokenscope-sim depends on the HTTP client crate {banned} (cargo tree -p tokenscope-sim)")
                    failed = True
    if failed:
        sys.exit(1)
    print("imports: no circle between the source files of any crate; tokenscope-sim holds no HTTP client")


if __name__ == "__main__":
    main()
