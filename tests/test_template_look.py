"""The figures' cut template (``viz._common.TEMPLATE``) looks exactly like plotly's default one, in a real browser.

``TEMPLATE`` keeps only the default template's settings that reach the figures (bench/README.md, 8k). This draws the
figures of a real analysis, one of each builder the pages use (every trace type, colour bars, subplots, shapes,
annotations, the attention maps' hover layer), twice in Debian's chromium with plotly.js: with ``TEMPLATE`` and with
plotly's whole default template ("plotly", what a figure without a template gets). The screenshots must be the same
pixels, and the traces plotly.js works out (``_fullData``: every default filled in, hover colours included) the same.
A setting cut that a figure still used fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly
import plotly.io as pio
import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, skip_reason

from analysis.analyze import analyze, data_flow
from analysis.records import rollout
from analysis.trace import head_trace
from viz import _common as vc
from viz import head as vh
from viz.attention import attention_heatmap, attention_mosaic, difference_heatmap
from viz.positional import pe_curves, pe_matrix, pe_similarity
from viz.shapes import shapes_figure
from viz.stats import rollout_figure
from viz.steps import candidates_bar, step_attention

pytestmark = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")

TEXT = "Amira and Tim bought 14 tickets in Stuttgart."
# the traces as plotly.js completes them, without its private (_) keys and uids (random per draw)
FULL_DATA = """() => JSON.stringify(document.getElementById('g')._fullData.map(t => Object.fromEntries(
    Object.entries(t).filter(([k, v]) => !k.startsWith('_') && k !== 'uid' && typeof v !== 'function')
        .map(([k, v]) => [k, JSON.parse(JSON.stringify(v ?? null, (kk, vv) => kk.startsWith('_') ? undefined : vv))]))))"""


def figures(loaded) -> dict[str, dict]:
    """One figure of each builder the pages draw, for ``TEXT``, as the JSON a browser receives."""
    model, tok = loaded.model, loaded.tokenizer
    a = analyze(model, tok, TEXT)
    cross, enc = a.view("cross"), a.view("enc_self")
    step = a.steps[3]
    t = head_trace(model, tok, TEXT, kind="cross", layer=0, head=1, query=2, analysis=a)
    pe = model.positional_encoding(40).detach().numpy()
    figs = {
        "mosaic": attention_mosaic(cross),
        "heatmap": attention_heatmap(cross.map(0, 1)),
        "difference": difference_heatmap(enc.map(0, 0), enc.map(1, 0)),
        "candidates": candidates_bar(step),
        "step attention, bars": step_attention(step.cross_attn[0, 0], a.source.tokens, title="bars"),
        "step attention, heads": step_attention(step.cross_attn[0], a.source.tokens, title="heads"),
        "pe matrix": pe_matrix(pe),
        "pe curves": pe_curves(pe, [0, 1, 10]),
        "pe similarity": pe_similarity(pe),
        "shapes": shapes_figure(data_flow(model.cfg, len(a.source.tokens), len(a.tgt_in_tokens))),
        "rollout": rollout_figure(rollout(a.maps.enc_self), a.source.tokens),
        "head input": vh.input_figure(t),
        "head keys": vh.kv_figure(t, "k"),
        "head scores": vh.scores_figure(t),
        "head weights": vh.weights_figure(t),
        "head output": vh.output_figure(t),
    }
    return {name: json.loads(pio.to_json(fig, validate=False)) for name, fig in figs.items()}


def test_the_cut_template_draws_the_same_pixels_and_traces_as_plotlys_default(loaded):
    from playwright.sync_api import sync_playwright

    full = pio.templates["plotly"].to_plotly_json()
    assert len(json.dumps(vc.TEMPLATE)) < len(json.dumps(full)) / 5, "the cut template is no longer small"
    plotly_js = (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()
    specs = figures(loaded)
    differ = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1000, "height": 900}, device_scale_factor=1)
        page.set_content("<html><body style='margin:0'><div id='g' style='width:900px'></div></body></html>")
        page.add_script_tag(content=plotly_js)
        for name, spec in specs.items():
            assert spec["layout"]["template"] == json.loads(json.dumps(vc.TEMPLATE)), name
            drawn = []
            for template in (vc.TEMPLATE, full):
                s = {"data": spec["data"], "layout": {**spec["layout"], "template": template}}
                page.evaluate("s => Plotly.newPlot('g', s.data, s.layout, {displayModeBar: false})", s)
                drawn.append((page.locator("#g").screenshot(animations="disabled"), page.evaluate(FULL_DATA)))
            if drawn[0][0] != drawn[1][0]:
                differ.append(f"{name}: pixels")
            if drawn[0][1] != drawn[1][1]:
                differ.append(f"{name}: traces")
        browser.close()
    assert not differ, differ
