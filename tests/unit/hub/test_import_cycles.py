"""No module of wallflame imports itself through others: the import graph (grimp's, as
lint-imports reads it, with the imports made inside functions) has no cycle."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))

from view import make

#: The graph, built where the package is one folder (``scripts/view.py``): module -> the
#: modules it imports.
_GRAPH = """
import json, grimp
g = grimp.build_graph("wallflame", cache_dir=None)
print(json.dumps({m: sorted(g.find_modules_directly_imported_by(m)) for m in g.modules}))
"""


def _graph() -> dict[str, list[str]]:
    view = make().parent
    r = subprocess.run([sys.executable, "-c", _GRAPH], cwd=view, capture_output=True,
                       text=True, timeout=120, check=True)
    graph: dict[str, list[str]] = json.loads(r.stdout)
    return graph


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": ["b"], "b": ["c", "d"], "c": ["a"], "d": ["e"], "e": ["d"], "f": ["a"]}
    assert sorted(cycles(graph)) == [["a", "b", "c"], ["d", "e"]]
    assert cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []


def test_no_import_cycle_inside_wallflame() -> None:
    graph = _graph()
    assert "wallflame.collect.run" in graph and "wallflame.fold.perf.state" in graph
    assert cycles(graph) == []
