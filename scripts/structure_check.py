#!/usr/bin/env python3
"""The project's shape, measured by parsing every import (those inside functions too):

    python3 scripts/structure_check.py [--max-module 600] [--max-function 120]

prints modules and functions over their limit, import cycles between modules and between
top-level packages, and a last line ``structure: N modules, holds`` or ``structure: broken``
(exit 1). Tests, scenarios, results and docs are not code and are left out.
docs/architecture.md says what the limits are for.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path
from typing import Dict, List, Set

ROOT = Path(__file__).resolve().parent.parent
NOT_CODE = {"tests", "results", "docs", "scenarios", "sweeps", "scripts", "__pycache__"}


def modules(root: Path) -> Dict[str, Path]:
    """Dotted module name -> file, for every package of the checkout."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if any(part in NOT_CODE or part.startswith(".") for part in rel.parts[:-1]) or len(rel.parts) < 2:
            continue
        name = ".".join(rel.with_suffix("").parts)
        out[name[: -len(".__init__")] if name.endswith(".__init__") else name] = p
    return out


def imports_of(name: str, path: Path, known: Dict[str, Path]) -> Set[str]:
    """The project modules ``name`` imports, resolved to the deepest module that exists."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        x = stack.pop()
                        on.discard(x)
                        comp.append(x)
                        if x == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
            elif w not in index:
                index[w] = low[w] = len(index)
                stack.append(w)
                on.add(w)
                work.append((w, iter(sorted(graph.get(w, ())))))
            elif w in on:
                low[v] = min(low[v], index[w])
    return out


def long_functions(path: Path, limit: int) -> List[str]:
    tree = ast.parse(path.read_text(), str(path))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1})" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit]


def check(root: Path = ROOT, max_module: int = 600, max_function: int = 120) -> List[str]:
    """The problems found, one line each (empty: the structure holds)."""
    mods = modules(root)
    graph = {m: imports_of(m, p, mods) for m, p in mods.items()}
    problems = []
    for m, p in mods.items():
        n = len(p.read_text().splitlines())
        if n > max_module:
            problems.append(f"module over {max_module} lines: {p.relative_to(root)} ({n})")
        for f in long_functions(p, max_function):
            problems.append(f"function over {max_function} lines: {p.relative_to(root)}:{f}")
    for comp in cycles(graph):
        problems.append("module cycle: " + " <-> ".join(comp))
    top: Dict[str, Set[str]] = {}
    for m, deps in graph.items():
        top.setdefault(m.split(".")[0], set()).update(d.split(".")[0] for d in deps)
    for k in top:
        top[k].discard(k)
    for comp in cycles(top):
        problems.append("package cycle: " + " <-> ".join(comp))
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-module", type=int, default=600)
    ap.add_argument("--max-function", type=int, default=120)
    a = ap.parse_args(argv)
    problems = check(ROOT, a.max_module, a.max_function)
    for line in problems:
        print(line)
    print(f"structure: {len(modules(ROOT))} modules, " + ("broken" if problems else "holds"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
