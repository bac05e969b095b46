"""The notebook user's path: examples/explore.py (a jupytext py:percent notebook) runs headless in a Jupyter kernel.

It is converted with jupytext and executed with nbclient in an ipykernel kernel started in examples/, as a teacher's
Jupyter would run it; the test fails on any cell's error and checks that the cells drew plotly figures (plotly's
mime type, ``application/vnd.plotly.v1+json``) of the analysis: the cross-attention mosaic, one head's arithmetic and
the attribution comparison. The analysis and viz packages are used as a library there, with no Streamlit.
"""

from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "explore.py"
PLOTLY_MIME = "application/vnd.plotly.v1+json"


def figures_of(notebook: nbformat.NotebookNode) -> list[dict]:
    """The plotly figures (``{"data": [...], "layout": {...}}``) that the code cells of ``notebook`` display, in order."""
    return [
        output["data"][PLOTLY_MIME]
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") in ("display_data", "execute_result") and PLOTLY_MIME in output.get("data", {})
    ]


@pytest.fixture(scope="module")
def executed() -> nbformat.NotebookNode:
    """examples/explore.py converted and run top to bottom (the kernel's working folder: examples/)."""
    notebook = jupytext.read(NOTEBOOK)
    assert not figures_of(notebook), "a py:percent file holds no outputs before it runs"
    client = NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on a cell's error
    return notebook


@pytest.mark.slow
def test_notebook_runs_without_error(executed):
    code = [cell for cell in executed.cells if cell.cell_type == "code"]
    assert len(code) >= 5 and all(cell.execution_count for cell in code), "every code cell ran"
    errors = [output for cell in code for output in cell.outputs if output.output_type == "error"]
    assert not errors, f"cells raised: {[(e.ename, e.evalue) for e in errors]}"
    printed = "".join(
        o.get("text", "") for cell in code for o in cell.outputs if o.output_type == "stream" and o.name == "stdout"
    )
    assert "translation:" in printed and "Mädchen" in printed, f"the notebook translates its sentence: {printed!r}"


@pytest.mark.slow
def test_notebook_draws_the_mosaic_the_head_and_the_attribution(executed):
    figures = figures_of(executed)
    assert len(figures) >= 3, f"expected at least 3 plotly figures, got {len(figures)}"
    assert all(figure["data"] for figure in figures), "every figure has traces"
    metas = [figure["layout"].get("meta") or {} for figure in figures]
    mosaic = metas[0]
    assert mosaic.get("kind") == "cross" and (mosaic.get("L"), mosaic.get("H")) == (2, 4), (
        f"the first figure is the cross-attention mosaic of en-de's 2 decoder layers × 4 heads: {mosaic}"
    )
    assert any("sum" in meta for meta in metas), "one head's weighted sum of values (viz.head.weighted_sum_figure)"
    methods = next((meta["methods"] for meta in metas if "methods" in meta and "S" in meta), None)
    assert methods and "attention" in methods and "gradient × input" in methods, (
        f"the attribution comparison sets attention beside gradient × input: {methods}"
    )
