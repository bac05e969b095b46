"""The layering the README promises: packages by job, checked on the import graph, transitively.

- ``model/`` (the Transformer and how it runs) imports nothing else of the project. ``analysis/`` (what the app
  computes about one input) imports only ``model/``; ``training/`` and ``convert/`` import only ``model/`` (never
  each other, never ``analysis/``); ``serving/`` imports only ``model/``; ``viz/`` imports only the torch-free
  ``model.facts``, ``model.settings``, ``analysis.records`` and ``analysis.stats``.
- The project has no import circle at module level (``if TYPE_CHECKING`` blocks included), and no module defines a
  module ``__getattr__`` (a lazy import that hides a circle).
- Torch-free modules (``model.facts``, ``model.settings``, ``analysis.records``, ``analysis.stats``, ``viz``) import
  neither torch nor the Transformer when imported, checked by importing each in a fresh interpreter.
- ``ui/`` reaches the model through ``ui/state.py`` alone: no other module under ``ui/`` reaches torch or a
  torch-backed module of the project, directly or through any chain of imports that does not pass ``ui/state.py``;
  and no other module under ``ui/`` keeps a cache of its own (``st.cache_data`` / ``st.cache_resource``), but
  ``ui/figures.py``, whose caches hold the figures every session shares (it reaches no model either).
- A page is a function of the frame: each module of ``ui/pages/`` defines ``page(frame)`` (app.py's ``body`` calls
  it) and draws nothing at import: its top level holds only imports, definitions and assignments.
- No package holds more than a quarter of the project's non-test Python lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ui import catalog

ROOT = Path(__file__).resolve().parent.parent
TORCH_FREE = ["model.facts", "model.settings", "analysis.records", "analysis.stats", "viz", "classroom.store"] + sorted(
    f"viz.{p.stem}" for p in (ROOT / "viz").glob("*.py") if p.stem != "__init__"
)


@pytest.mark.parametrize("module", TORCH_FREE)
def test_records_settings_and_viz_import_no_torch(module):
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "bad = sorted(m for m in ('torch', 'model.transformer', 'analysis.analyze', 'streamlit') if m in sys.modules); "
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


PACKAGES = ["model", "analysis", "training", "convert", "serving", "viz", "ui", "deploy", "bench", "classroom"]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_paths() -> dict[str, Path]:
    """Every project module (the packages above and app.py) by its dotted name."""
    return {module_name(p): p for p in [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")] + [ROOT / "app.py"]}


def project_graph() -> dict[str, set[str]]:
    """Every project module -> the project modules it imports at module level."""
    paths = project_paths()
    return {name: {m for m in module_level_imports(path) if m in paths} for name, path in paths.items()}


def reach(graph: dict[str, set[str]], start: str, *, stop: frozenset[str] = frozenset()) -> set[str]:
    """Modules reachable from ``start`` by module-level imports, not going through the modules of ``stop``."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen and nxt not in stop:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_graph_sees_imports_and_reach_follows_chains():
    graph = project_graph()
    assert "model.decoding" in graph["analysis.analyze"] and "model.facts" in graph["model.transformer"]
    assert reach({"a": {"b"}, "b": {"c"}, "c": set()}, "a") == {"b", "c"}
    assert reach({"a": {"b"}, "b": {"c"}, "c": set()}, "a", stop=frozenset({"b"})) == set()


def test_the_project_has_no_import_circle():
    assert (cycle := find_cycle(project_graph())) is None, "import circle: " + " -> ".join(cycle)


ALLOWED = {  # package -> the project packages (or modules) it may import
    "model": ("model",),
    "analysis": ("analysis", "model", "i18n"),
    "training": ("training", "model"),
    "convert": ("convert", "model"),
    "serving": ("serving", "model"),
    "viz": ("viz", "model.facts", "model.settings", "analysis.records", "analysis.stats", "i18n"),
    "classroom": ("classroom", "model.facts", "model.settings", "i18n"),  # torch-free: the pages import it
    "i18n": ("i18n",),  # Babel and the standard library only: every layer may ask it for text
}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_imports_only_the_packages_below_it(package):
    graph = project_graph()
    allowed = ALLOWED[package]
    bad = {
        name: sorted(m for m in imports if not any(m == a or m.startswith(a + ".") for a in allowed))
        for name, imports in graph.items()
        if name == package or name.startswith(package + ".")
    }
    assert {k: v for k, v in bad.items() if v} == {}, f"{package}/ may import only {allowed}"


def test_no_module_has_a_module_getattr():
    found = [
        module_name(p)
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in ast.parse(p.read_text()).body)
    ]
    assert found == [], f"module __getattr__ (a lazy import) in {found}"


MODEL_GATE = ROOT / "ui" / "state.py"  # the one module of ui/ that holds the cached model calls
FIGURE_CACHE = ROOT / "ui" / "figures.py"  # the figures every session shares: cached, with no model behind them


TORCH_BACKED = ("model.transformer", "model.decoding", "model.checkpoint", "model.tokenizer", "model.spm_tokenizer")


def torch_backed(graph: dict[str, set[str]]) -> set[str]:
    """Project modules that import torch at module level (or are the Transformer's own), and every module that
    reaches one of them by imports."""
    paths = project_paths()
    direct = {
        name
        for name in graph
        if name.startswith(TORCH_BACKED) or any(m == "torch" or m.startswith("torch.") for m in module_level_imports(paths[name]))
    }
    return {name for name in graph if name in direct or reach(graph, name) & direct}


def test_only_ui_state_reaches_torch_even_indirectly():
    graph = project_graph() | {"ui.state": set()}  # the gate itself may reach the model: start from it no further
    heavy = torch_backed(graph)
    assert {"model.transformer", "analysis.analyze", "analysis.attribution"} <= heavy, "the scan must see torch behind imports"
    assert "model.facts" not in heavy and "analysis.records" not in heavy
    found = {}
    for name in sorted(graph):
        if name.startswith("ui") and name != "ui.state":
            bad = ((reach(graph, name) | {name}) & heavy) - {"ui.state"}
            if bad:
                found[name] = sorted(bad)
    assert found == {}, f"only ui/state.py may reach torch or the Transformer: {found}"


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
    others = [p for p in sorted((ROOT / "ui").rglob("*.py")) if p not in (MODEL_GATE, FIGURE_CACHE)]
    elsewhere = {str(p.relative_to(ROOT)): cached_functions(p) for p in others}
    assert {f: names for f, names in elsewhere.items() if names} == {}, "cached calls belong in ui/state.py"
    assert sorted(cached_functions(FIGURE_CACHE)) == ["placed_chart", "shared_figure"]


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
