"""Every page of the app on an imported OPUS-MT model (issue 21), with ``streamlit.testing.v1.AppTest``.

A tiny Marian model is built offline (``tests/marian_support.py``: SentencePiece trained here, random weights,
``save_pretrained``), imported with ``convert.marian`` into a models folder beside links to the shipped
checkpoints, and the app is pointed at that folder (``ui.state.MODELS_DIR``). The picker lists every checkpoint
folder; each page renders with no exception; the token tables show SentencePiece pieces and ids; the attention
mosaics are ``analyze``'s maps and their rows sum to 1; Inside one head shows ``analyze``'s weights. Skips without
``transformers`` or ``sentencepiece`` (``requirements-import.txt``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("sentencepiece", reason="imported models need sentencepiece (pip install -r requirements-import.txt)")
pytest.importorskip("transformers", reason="the test model is built with transformers (pip install -r requirements-import.txt)")

import marian_support as ms  # noqa: E402  (tests/marian_support.py)
import sentencepiece as spm  # noqa: E402
from app_charts import chart, chart_array, charts, ok, page_alone, switch_to  # noqa: E402  (tests/app_charts.py)
from streamlit.testing.v1 import AppTest  # noqa: E402
from transformers import MarianTokenizer  # noqa: E402

from analysis.analyze import analyze
from convert.marian import import_marian
from ui import catalog, state  # noqa: E402
from viz.tokens import display  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = "opus-mt-en-de"  # the imported model's folder, as the picker lists it
SENTENCE = "The strange tree is happy today."  # the tiny model writes 6 pieces and </s> for it
TIMEOUT = 120


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(models folder, the imported ``Loaded``, the source folder): the imported model beside the shipped ones."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: a second thread only waits for a busy core
    src = tmp_path_factory.mktemp("source") / NAME
    ms.write_tokenizer(src)
    ms.build_marian(src, bad_pad=True)
    folder = tmp_path_factory.mktemp("models")
    for shipped in (ROOT / "pretrained").iterdir():
        if (shipped / "config.json").is_file():
            (folder / shipped.name).symlink_to(shipped)
    loaded = import_marian(src, folder / NAME)
    yield folder, loaded, src
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _app(models, monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")  # the app re-raises instead of showing a polite error
    monkeypatch.setattr(state, "MODELS_DIR", models[0])


def run_app(page: str | None = None, **params) -> AppTest:
    """Open ``page`` (None: the root URL, which opens Translate) on the imported model with these URL parameters."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT)
    for k, v in {"model": NAME, "sentence": SENTENCE, **params}.items():
        at.query_params[k] = str(v)
    ok(at.run())
    if page is not None:
        ok(switch_to(at, page).run())
    return at


def test_the_picker_lists_every_checkpoint_folder(models):
    at = run_app()
    expected = sorted(p.name for p in models[0].iterdir() if (p / "config.json").is_file())
    assert NAME in expected and sorted(at.selectbox(key="model").options) == expected
    assert at.selectbox(key="model").value == NAME
    summary = f"An English→German Transformer (OPUS-MT, imported from {models[2]})"
    assert any(c.value.startswith(summary) for c in at.caption), "the title line says what the model is"
    assert any("OPUS-MT English→German" in c.value for c in at.sidebar.caption), "the card's limits under the picker"


@pytest.mark.parametrize("page", [p.path for p in catalog.PAGES])
def test_every_page_renders_on_the_imported_model(page):
    at = run_app(page)
    assert catalog.PAGE_BY_PATH[page].teaches in [c.value for c in at.caption]
    assert at.get("plotly_chart") or at.get("dataframe")


def test_token_tables_show_sentencepiece_pieces_and_ids(models):
    _, loaded, src = models
    at = run_app()
    a = analyze(loaded.model, loaded.tokenizer, SENTENCE)
    hf = MarianTokenizer.from_pretrained(str(src))
    source, output = at.dataframe[0].value, at.dataframe[1].value
    assert list(source.columns[:3]) == ["piece", "id", "SentencePiece id"]
    assert list(source["id"]) == a.source.ids == hf(SENTENCE).input_ids
    assert list(source["piece"]) == display(hf.convert_ids_to_tokens(a.source.ids))
    sp_source = spm.SentencePieceProcessor(model_file=str(src / "source.spm"))
    assert list(source["SentencePiece id"])[:-1] == sp_source.encode(SENTENCE)
    assert list(output["id"])[: len(a.out_ids)] == a.out_ids
    sp_target = spm.SentencePieceProcessor(model_file=str(src / "target.spm"))
    for piece, sp_id in zip(output["piece"], output["SentencePiece id"], strict=True):
        assert sp_id == -1 or display([sp_target.id_to_piece(int(sp_id))]) == [piece], "output ids are target.spm's"
    captions = " ".join(c.value for c in at.caption)
    assert "SentencePiece id −1 marks the model's own specials (<pad>, </s>)" in captions and "<unk>" in captions


@pytest.mark.parametrize("kind", ["enc_self", "dec_self", "cross"])
def test_attention_mosaic_is_analyzes_maps_and_rows_sum_to_one(models, kind):
    _, loaded, _ = models
    at = run_app("attention", kind=kind)
    a = analyze(loaded.model, loaded.tokenizer, SENTENCE)
    attn = getattr(a.maps, kind)  # (L, H, Q, K)
    fig = next(c for c in charts(at) if c["layout"].get("meta", {}).get("gap") is not None)
    m = fig["layout"]["meta"]
    assert (m["L"], m["H"], m["kind"]) == (attn.shape[0], attn.shape[1], kind)
    z, gap, Q, K = chart_array(fig["data"][0]["z"]).astype(float), m["gap"], m["Q"], m["K"]
    for layer in range(m["L"]):
        for head in range(m["H"]):
            t = z[layer * (Q + gap) : layer * (Q + gap) + Q, head * (K + gap) : head * (K + gap) + K]  # (Q, K) one tile
            drawn = ~np.isnan(t)
            np.testing.assert_allclose(t[drawn], attn[layer, head][drawn], atol=1e-6)
            np.testing.assert_allclose(np.nansum(t, axis=1), 1, atol=1e-4)


@pytest.mark.parametrize(("kind", "layer", "head", "query"), [("enc_self", 2, 3, 2), ("dec_self", 2, 1, 1), ("cross", 1, 4, 0)])
def test_inside_one_head_shows_analyzes_weights(models, kind, layer, head, query):
    folder, loaded, _ = models
    at = page_alone("head", str(folder / NAME), SENTENCE, timeout=TIMEOUT)
    for k, v in {"kind": kind, "layer": layer, "head": head, "query": query}.items():
        at.query_params[k] = str(v)
    ok(at.run())
    w = chart_array(chart(at, "Softmax weights")["data"][0]["y"]).astype(float)
    want = getattr(analyze(loaded.model, loaded.tokenizer, SENTENCE).maps, kind)[layer - 1, head - 1, query]
    np.testing.assert_allclose(w, want[: len(w)], atol=1e-5)
    assert abs(w.sum() - 1) < 1e-5


def test_positional_page_labels_marians_layout():
    at = run_app("positional")
    curves = chart(at, "Positional-encoding waves")
    meta = {tr["meta"]["dim"]: tr["meta"] for tr in curves["data"]}
    half = 16  # d_model 32
    assert meta[0]["fn"] == "sin" and meta[half]["fn"] == "cos"
    assert meta[0]["wavelength"] == pytest.approx(meta[half]["wavelength"]), "dimensions i and D/2 + i are one wave"
