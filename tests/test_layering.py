"""The layering the README promises (issue 22): every value that crosses into ``viz/`` is free of torch, and
``model/`` has no import circle.

- ``viz/`` draws records: importing it, ``model.records`` (the shared facts and records),
  ``model.settings`` (the decoding settings) or ``model.stats`` (per-head statistics) must import
  neither torch nor ``model.transformer``.
- ``ui/`` reaches the model through ``ui/state.py`` alone (the cached model calls): no other module under ``ui/``
  imports torch or ``model.transformer`` at module level; the pages name ``Interventions`` and ``DecodeSettings``
  from the torch-free ``model.settings``; and no other module under ``ui/`` keeps a cache of its own
  (``st.cache_data`` / ``st.cache_resource``).
- A page is a function of the frame: each module of ``ui/pages/`` defines ``page(frame)`` (app.py's ``st.navigation``
  runs it) and draws nothing at import: its top level holds only imports, definitions and assignments.
- No module of ``model/`` imports, at module level (``if TYPE_CHECKING`` blocks included), a module
  that imports it back, directly or through others. An import inside a function body runs on call,
  not on import, and is the one way to reach a module that depends on this one.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ui import catalog

ROOT = Path(__file__).resolve().parent.parent
TORCH_FREE = ["model.records", "model.settings", "model.stats", "viz"] + sorted(
    f"viz.{p.stem}" for p in (ROOT / "viz").glob("*.py") if p.stem != "__init__"
)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_records_settings_and_viz_import_no_torch(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "bad = sorted(m for m in ('torch', 'model.transformer', 'model.analysis', 'streamlit') if m in sys.modules); "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"importing {module} imports {out}"


def module_level_imports(path: Path) -> set[str]:
    """Absolute modules that ``path`` imports outside function bodies (``from a.b import c``: ``a.b`` and ``a.b.c``,
    since ``c`` may be a module)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                found.add(child.module)
                found.update(f"{child.module}.{a.name}" for a in child.names)
            visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path ``[a, b, .., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := dfs(start)):
            return cycle
    return None


def test_find_cycle_finds_a_circle_and_only_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_model_has_no_import_circle():
    graph = {f"model.{p.stem}": module_level_imports(p) for p in (ROOT / "model").glob("*.py") if p.stem != "__init__"}
    assert "model.decoding" in graph["model.analysis"], "the scan must see module-level imports"
    assert (cycle := find_cycle(graph)) is None, "import circle: " + " -> ".join(cycle)


MODEL_GATE = ROOT / "ui" / "state.py"  # the one module of ui/ that holds the cached model calls


def test_only_ui_state_imports_torch_or_the_transformer():
    found = {}
    for path in sorted((ROOT / "ui").rglob("*.py")):
        bad = {m for m in module_level_imports(path) if m == "torch" or m.startswith(("torch.", "model.transformer"))}
        if path != MODEL_GATE and bad:
            found[str(path.relative_to(ROOT))] = sorted(bad)
    assert "model.settings.Interventions" in module_level_imports(ROOT / "ui" / "pages" / "masks.py"), "the scan must see it"
    assert found == {}, f"only ui/state.py may import torch or model.transformer: {found}"


def cached_functions(path: Path) -> list[str]:
    """Functions of ``path`` decorated with ``st.cache_data`` or ``st.cache_resource`` (called or bare)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Attribute) and target.attr in ("cache_data", "cache_resource"):
                    names.append(node.name)
    return names


def test_every_cached_model_call_is_in_ui_state():
    assert "run_head_trace" in cached_functions(MODEL_GATE) and "load_model" in cached_functions(MODEL_GATE)
    elsewhere = {str(p.relative_to(ROOT)): cached_functions(p) for p in sorted((ROOT / "ui").rglob("*.py")) if p != MODEL_GATE}
    assert {f: names for f, names in elsewhere.items() if names} == {}, "cached calls belong in ui/state.py"


def test_no_cached_call_has_a_default_argument():
    """Streamlit keys a cached call by the arguments passed, not by the values the function sees: with a default,
    ``run_analysis(p, t, s)`` and ``run_analysis(p, t, s, NO_INTERVENTIONS)`` were two cache entries, so every student
    of a class had the same sentence analysed twice on Mask lab, Inside one head and Attention vs attribution."""
    tree = ast.parse(MODEL_GATE.read_text(encoding="utf-8"))
    cached = set(cached_functions(MODEL_GATE))
    with_defaults = {
        node.name: [a.arg for a in node.args.args[len(node.args.args) - len(node.args.defaults) :]]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in cached and (node.args.defaults or any(node.args.kw_defaults))
    }
    assert "run_analysis" in cached and with_defaults == {}, f"cached calls with defaults: {with_defaults}"


def test_pages_are_functions_that_draw_nothing_at_import():
    for spec in catalog.PAGES:
        path = ROOT / "ui" / "pages" / f"{spec.path}.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "page" in defs and [a.arg for a in defs["page"].args.args] == ["frame"], f"{path.name}: no page(frame)"
        quiet = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
        drawing = [
            n.lineno
            for n in tree.body
            if not isinstance(n, quiet) and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))
        ]
        assert drawing == [], f"{path.name} runs code at import, lines {drawing}"


@pytest.mark.parametrize("spec", catalog.PAGES, ids=lambda s: s.path)
def test_a_page_is_marked_analysed_exactly_when_it_draws_the_frames_analysis(spec):
    """app.py computes the analysis of a page marked ``analysed`` before the page gate (so a class's analyses batch):
    a page that draws it must be marked (else it is computed behind the gate), and one that does not must not
    (else every student pays for an analysis nobody sees)."""
    source = (ROOT / "ui" / "pages" / f"{spec.path}.py").read_text()
    assert spec.analysed == ("page_context(" in source)
