"""Fixes of the security and fault probe (issue 16, part 4), each shown on the running app (``AppTest``):

1. a checkpoint that does not load (a corrupt ``model.safetensors``, bad JSON) raises ``CheckpointError``, and the
   app says so in the sidebar and falls back to the first model that loads, even when the URL asks for it;
2. messages name model folders, never the server's paths;
3. token and user text reaches Markdown escaped (``$5 and $6`` is not LaTeX, backticks are not code);
4. the Step page's reference table has typed columns: a numeric probability, no Arrow error in the log;
5. the Mask lab says why the After map is empty when every head of the layer is switched off;
6. a 96,000-character sentence in the URL is cut before the box or the model reads it, with a warning.

Runs on the small ``reverse`` checkpoint; skips (with test_app.py's reason) when it is missing.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from app_charts import chart, chart_array, charts, ok, streamlit_log
from hypothesis import given
from hypothesis import strategies as hst
from streamlit.testing.v1 import AppTest
from test_app import APP, REVERSE, SENTENCE, TIMEOUT, check_drawn_weights, open_url, run_app

from model.checkpoint import CheckpointError, CheckpointNotFoundError, load_checkpoint
from ui import state
from ui.pages import attention as attention_page
from ui.widgets import MAX_CHARS, md_escape
from viz.tokens import display

SPECIAL = set("\\`*_{}[]()#+-.!|$<>~:&/")  # what md_escape must escape


@pytest.fixture(autouse=True)
def _debug(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")  # the app re-raises instead of showing a polite error


def unescape(md: str) -> str:
    """CommonMark's backslash escapes undone: what the reader sees of escaped text."""
    return re.sub(r"\\(.)", r"\1", md)


def unescaped(md: str, chars: str) -> list[str]:
    """The characters of ``chars`` in ``md`` that no backslash escapes (they would be read as Markdown)."""
    return [m.group(1) for m in re.finditer(r"\\.|(.)", md, re.DOTALL) if m.group(1) and m.group(1) in chars]


# -- 1, 2: checkpoints that do not load ------------------------------------------------------------------------------


def checkpoint_copy(folder, *, weights: bytes | None = None, config: str | None = None):
    """A checkpoint folder with reverse's files (symlinked), or garbage ``weights`` / ``config`` in their place."""
    folder.mkdir(parents=True)
    for f in ("model.safetensors", "config.json", "vocab.json", "metrics.json"):
        if f == "model.safetensors" and weights is not None:
            (folder / f).write_bytes(weights)
        elif f == "config.json" and config is not None:
            (folder / f).write_text(config)
        elif (REVERSE / f).exists():
            (folder / f).symlink_to(REVERSE / f)
    return folder


@pytest.mark.parametrize(
    ("broken", "file"),
    [
        (dict(weights=b"\x00garbage, not a safetensors file" * 20), "model.safetensors"),
        (dict(weights=b""), "model.safetensors"),
        (dict(config="{not json"), "config.json"),
        (dict(config='{"d_model": "wide"}'), "config.json"),
    ],
)
def test_a_corrupt_checkpoint_raises_checkpoint_error_naming_the_file_not_the_path(tmp_path, broken, file):
    folder = checkpoint_copy(tmp_path / "x", **broken)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(folder, "cpu")
    assert isinstance(e.value, ValueError), "callers that catch ValueError still catch it"
    assert e.value.folder == folder and file in e.value.reason
    assert str(tmp_path) not in e.value.reason, "the reason is for users: no server path"
    assert str(folder) in str(e.value), "the log and the command line get the path"


def test_a_missing_file_is_a_checkpoint_error_and_a_file_not_found_error(tmp_path):
    folder = checkpoint_copy(tmp_path / "x")
    (folder / "vocab.json").unlink()
    with pytest.raises(CheckpointNotFoundError) as e:
        load_checkpoint(folder, "cpu")
    assert isinstance(e.value, CheckpointError) and isinstance(e.value, FileNotFoundError)
    assert e.value.reason.startswith("vocab.json is missing") and str(tmp_path) not in e.value.reason


def visible_text(at) -> str:
    """Every message, caption and Markdown text of the run, sidebar included."""
    parts = [e.value for kind in ("error", "warning", "info", "caption", "markdown") for e in getattr(at, kind)]
    return "\n".join(parts + [e.value for e in at.exception])


@pytest.fixture
def models(tmp_path, monkeypatch):
    """A models folder holding ``reverse`` (works) and ``broken`` (garbage weights), read by the app."""
    checkpoint_copy(tmp_path / "reverse")
    checkpoint_copy(tmp_path / "broken", weights=b"\xff" * 64)
    monkeypatch.setattr(state, "MODELS_DIR", tmp_path)
    return tmp_path


def assert_fell_back(at, broken: str, models) -> None:
    """The app runs on reverse, and the sidebar says why the model ``broken`` is not shown, naming no path."""
    ok(at)
    assert at.selectbox(key="model").value == "reverse"
    assert at.session_state["_frame"].path == state.model_path("reverse")
    notes = [w.value for w in at.sidebar.warning]
    assert any(unescape(broken) in unescape(n) and "model.safetensors" in unescape(n) for n in notes), notes
    assert any("Showing reverse instead" in unescape(n) for n in notes), notes
    assert str(models) not in visible_text(at) and str(models.parent) not in visible_text(at)
    assert at.get("plotly_chart") or at.get("dataframe"), "the page itself is drawn"


def test_a_link_to_a_corrupt_model_falls_back_with_a_note(models):
    at = open_url(model="broken", sentence=SENTENCE)
    assert_fell_back(at, "broken", models)
    assert at.query_params.get("model") in (None, "reverse"), "the URL no longer asks for the broken model"
    at.run()  # the note stays on the next run
    assert_fell_back(at, "broken", models)


def test_picking_a_corrupt_model_falls_back_with_a_note(models):
    at = open_url(sentence=SENTENCE)
    assert at.selectbox(key="model").value == "reverse" and not at.sidebar.warning
    at.selectbox(key="model").set_value("broken").run()
    assert_fell_back(at, "broken", models)


def test_a_corrupt_default_model_falls_back_to_the_next_in_model_order(tmp_path, monkeypatch):
    checkpoint_copy(tmp_path / "en-de", weights=b"\x00" * 8)  # first in MODEL_ORDER, and corrupt
    checkpoint_copy(tmp_path / "reverse")
    monkeypatch.setattr(state, "MODELS_DIR", tmp_path)
    at = open_url(model="", sentence=SENTENCE)
    assert_fell_back(at, "en-de", tmp_path)


def test_no_loadable_model_is_a_message_naming_folders_not_paths(tmp_path, monkeypatch):
    checkpoint_copy(tmp_path / "only", config="[]")
    monkeypatch.setattr(state, "MODELS_DIR", tmp_path)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception
    errors = [unescape(e.value) for e in at.sidebar.error]
    assert errors and "only: config.json" in errors[0] and str(tmp_path) not in errors[0]

    monkeypatch.setattr(state, "MODELS_DIR", tmp_path / "empty")
    (tmp_path / "empty").mkdir()
    at = AppTest.from_file(APP, default_timeout=TIMEOUT).run()
    assert not at.exception
    errors = [unescape(e.value) for e in at.sidebar.error]
    assert errors and "No checkpoint found in the models folder (empty)" in errors[0]
    assert str(tmp_path) not in errors[0]


# -- 3: Markdown escaping ------------------------------------------------------------------------------------------


@given(hst.text())
def test_md_escape_leaves_no_markdown_and_loses_no_character(text):
    md = md_escape(text)
    assert unescape(md) == text
    assert not unescaped(md, "".join(sorted(SPECIAL))), md


MONEY = " It costs $5 and $6, not `rm` or _that_."


@pytest.mark.parametrize("char", ["$", "`", "_"])
def test_zoom_caption_shows_dollars_backticks_and_underscores_as_typed(monkeypatch, char):
    """The zoom caption names the clicked cell's query and key token; with two "$" (or backticks) unescaped the
    text between them became LaTeX (code) and the tokens vanished. AppTest cannot click a chart: the click is given."""
    tokens = state.load_model(str(REVERSE)).tokenizer
    pieces = [p.text for p in tokens.pieces(tokens.encode(MONEY))]
    qi, ki = [i for i, t in enumerate(pieces) if t == char][:2]
    monkeypatch.setattr(attention_page, "clicked_cell", lambda key, n_q, n_k: (qi, ki))  # the name the page calls
    at = open_url(view="attention", kind="enc_self", sentence=MONEY)
    [body] = [m.value for m in at.markdown if "gives key" in m.value]
    assert not unescaped(body, "$`_"), body
    query, key, _ = re.findall(r"\*\*(.+?)\*\*", body)
    assert (unescape(query), unescape(key)) == tuple(display([pieces[qi], pieces[ki]]))


def test_inside_one_head_names_its_query_token_escaped():
    tokens = state.load_model(str(REVERSE)).tokenizer
    qi = [p.text for p in tokens.pieces(tokens.encode(MONEY))].index("$")
    at = open_url(view="head", kind="enc_self", query=qi, sentence=MONEY)
    [body] = [m.value for m in at.markdown if f"query {qi}: $" in unescape(m.value)]
    assert not unescaped(body, "$`"), body


# -- 4: the reference table of the Step page -----------------------------------------------------------------------


def test_reference_table_has_a_numeric_probability_column_and_logs_no_arrow_error():
    at = run_app("steps", sentence=SENTENCE)
    with streamlit_log() as records:
        at.text_input(key="reference").set_value(" e d c b a").run()
    ok(at)
    table = at.dataframe[-1].value
    assert list(table.columns) == ["reference piece", "model's probability"]
    p = table["model's probability"]
    assert pd.api.types.is_float_dtype(p) and ((p > 0) & (p <= 1)).all()
    assert table["reference piece"].iloc[-1] == "<eos>"
    config = at.dataframe[-1].proto.columns
    assert "model's probability" in config and '"%.3f"' in config, "probabilities shown with 3 decimals"
    bad = [r.getMessage() for r in records if r.exc_info or r.levelname in ("WARNING", "ERROR", "CRITICAL")]
    assert not bad, bad


# -- 5: every head switched off --------------------------------------------------------------------------------------


def test_every_head_of_the_layer_switched_off_says_why_the_map_is_empty():
    at = run_app("masks", sentence=SENTENCE)
    n_heads = len(at.select_slider(key="head").options) - 1  # "mean", 1..H
    at.multiselect(key="ablate_cross").set_value([(1, h) for h in range(n_heads)]).run()
    ok(at)
    assert any("Every head of layer 2 is switched off" in i.value for i in at.info)
    z = check_drawn_weights(chart(at, "After: layer 2, mean"))
    assert np.isnan(z).all(), "no weight drawn: every cell is grey"
    at.multiselect(key="ablate_cross").set_value([(1, 0)]).run()
    ok(at)
    assert not any("Every head of layer" in i.value for i in at.info)
    assert any(f"over the {n_heads - 1} heads still on" in c.value for c in at.caption)


def test_a_head_switched_off_shows_no_nan_inside_one_head():
    at = open_url(view="head", sentence=SENTENCE)
    at.toggle(key="trace_off").set_value(True).run()
    ok(at)
    assert "nan" not in visible_text(at).lower()
    for fig in charts(at):
        for trace in fig["data"]:
            for name in ("x", "y", "z"):
                if isinstance(trace.get(name), dict):  # a typed numeric array
                    assert np.isfinite(chart_array(trace[name]).astype(float)).all(), (fig["layout"]["title"], name)
            assert "nan" not in str(trace.get("text", "")).lower()


# -- 6: a very long sentence in the URL ------------------------------------------------------------------------------


def test_a_96000_character_link_is_cut_before_any_work_with_a_warning(monkeypatch):
    seen = []
    state.run_analysis.clear()  # every analysis of this test runs the model (and the spy)
    analyze = state.analyze
    monkeypatch.setattr(state, "analyze", lambda model, tok, text, *a: seen.append(len(text)) or analyze(model, tok, text, *a))
    long = (" a b c d e f g h" * 6000)[:96_000]
    at = open_url(sentence=long)
    assert len(at.session_state["sentence"]) == MAX_CHARS == len(at.query_params["sentence"])
    assert at.session_state["_frame"].text == long[:MAX_CHARS]
    assert seen and max(seen) <= MAX_CHARS, "the model never saw more than the cap"
    assert any("96,000 characters" in w.value and f"first {MAX_CHARS:,}" in w.value for w in at.warning)
    at.text_input(key="sentence").set_value(" a b").run()
    ok(at)
    assert not any("characters" in w.value for w in at.warning), "the warning goes with the cut text"


def test_long_compare_sentences_in_the_link_are_cut_too():
    at = open_url(view="compare", a=" a" * 5000, b=" b c")
    assert len(at.session_state["a"]) == MAX_CHARS and at.session_state["b"] == " b c"
    assert any("10,000 characters" in w.value for w in at.warning)


def test_a_long_sentence_in_the_url_of_an_open_session_is_no_crash():
    """Later in a session the box owns ``?sentence=`` (e.g. history navigation back to a long link): no error."""
    at = open_url(sentence=SENTENCE)
    at.query_params["sentence"] = " a" * 3000
    at.run()
    ok(at)
    assert len(at.session_state["_frame"].text) <= MAX_CHARS
