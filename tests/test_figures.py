"""Figures shared by the sessions of one server process (``ui.figures``): a class on one sentence builds each figure
once, every student's chart holds the same numbers a figure built for that student alone would, and what differs
between students (the interface language, the colour-blind switch) gives a figure of its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import plotly.graph_objects as go
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
if not (MODELS / "reverse" / "config.json").exists():
    pytest.skip("needs the reverse checkpoint", allow_module_level=True)

from app_charts import ok, switch_to  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from ui.figures import SharedFigure  # noqa: E402
from viz import attention as va  # noqa: E402

APP = str(ROOT / "app.py")
SENTENCE = " m n o p q"  # used by no other test: its figures are not cached yet


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The titles of the mosaics built from now on (``viz.attention.attention_mosaic``, counted)."""
    made, build = [], va.attention_mosaic

    def counted(view, *, title, **kw):
        made.append(title)
        return build(view, title=title, **kw)

    monkeypatch.setattr(va, "attention_mosaic", counted)
    return made


def student(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for k, v in ({"model": "reverse", "sentence": SENTENCE} | params).items():
        at.query_params[k] = v
    at.run()
    switch_to(ok(at), "attention").run()
    return ok(at)


def mosaic(at: AppTest) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def test_a_class_on_one_sentence_builds_each_figure_once(builds):
    first = student()
    n = len(builds)
    assert n >= 1
    others = [student() for _ in range(3)]
    assert len(builds) == n, "the other students' mosaics are the first one's"
    assert all(mosaic(at) == mosaic(first) for at in others), "every student's chart is the same figure"

    colour_blind = student()  # the switch is a sidebar toggle
    colour_blind.toggle(key="safe_colors").set_value(True).run()
    assert len(builds) > n, "the colour-blind-safe figure is built for itself"
    viridis = json.dumps(va.SAFE_COLORSCALE[-1][1])  # the scale's last colour, as the chart's JSON writes it
    assert viridis in json.dumps(mosaic(colour_blind)) and viridis not in json.dumps(mosaic(first))

    german = student(lang="de")
    assert mosaic(german)["layout"]["title"]["text"] != mosaic(first)["layout"]["title"]["text"], "titles in German"


def test_a_shared_figure_gives_the_dict_plotly_makes_once():
    fig = go.Figure(go.Heatmap(z=[[0.25, 0.75], [1.0, 0.0]]), layout={"title": {"text": "t"}})
    shared = SharedFigure(fig)
    assert shared.to_dict() == fig.to_dict()
    assert shared.to_dict() is shared.to_dict(), "made once: plotly deep-copies the figure on every to_dict"


def test_no_page_changes_the_analysis_every_session_shares():
    """``ui.state.shared_analysis`` hands every session on one input the same object: a page that changed it would
    change every other student's. After each analysed page has drawn it, it still pickles to what the model made."""
    import pickle

    from ui import catalog, keys, state

    text = " r s t u"  # used by no other test
    pages = [spec.path for spec in catalog.PAGES if spec.analysed]
    assert len(pages) >= 8
    at = student(sentence=text)
    frame = at.session_state[keys.FRAME]
    shared = state.shared_analysis(frame.path, frame.text, repr(frame.settings), frame.settings)
    made = pickle.dumps(state.run_analysis(frame.path, frame.text, frame.settings, state.NO_INTERVENTIONS))
    for path in pages:
        switch_to(at, path).run()
        ok(at)
        assert at.session_state[keys.FRAME].text == text
        assert pickle.dumps(shared) == made, f"/{path} changed the shared analysis"
    assert not shared.maps.cross.flags.writeable, "its arrays are read-only"
