"""Shared pieces of the figure builders: input checks, colours, the colours of hidden cells and the mosaic grid.

Private to ``viz/``: the public functions live in the other modules. Everything here takes numpy
arrays (or anything ``np.asarray`` accepts, including CPU/GPU torch tensors) and never a model.
Which cells are hidden, and why, is never worked out here: the records of ``analysis.records`` carry
it (reason codes ``FUTURE``, ``HIDDEN``, ``WINDOW``, ``ABLATED`` with their hover texts ``REASONS``).
"""

from __future__ import annotations

import html
import math
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np
import plotly.colors
import plotly.graph_objects as go

from i18n import _
from model.facts import ABLATED, FUTURE, HIDDEN, KINDS, REASON_NAMES, UNWRITTEN, VISIBLE, WINDOW

_VIRIDIS = list(plotly.colors.sequential.Viridis)  # dark purple -> yellow, perceptually uniform (plotly's own scale)

# -- colours: one scale for every attention map, so a colour means the same weight everywhere ---------
ATTENTION_COLORSCALE = [  # white (0) -> deep blue (1), ColorBrewer "Blues"
    [0.0, "#f7fbff"],
    [0.125, "#deebf7"],
    [0.25, "#c6dbef"],
    [0.375, "#9ecae1"],
    [0.5, "#6baed6"],
    [0.625, "#4292c6"],
    [0.75, "#2171b5"],
    [0.875, "#08519c"],
    [1.0, "#08306b"],
]
DIVERGING_COLORSCALE = [  # blue (negative) - white (0) - red (positive), ColorBrewer "RdBu" reversed
    [0.0, "#053061"],
    [0.1, "#2166ac"],
    [0.2, "#4393c3"],
    [0.3, "#92c5de"],
    [0.4, "#d1e5f0"],
    [0.5, "#f7f7f7"],
    [0.6, "#fddbc7"],
    [0.7, "#f4a582"],
    [0.8, "#d6604d"],
    [0.9, "#b2182b"],
    [1.0, "#67001f"],
]
SAFE_COLORSCALE = [  # plotly's Viridis, reversed so that weight 0 is the light end: reads in every colour-vision deficiency
    [i / (len(_VIRIDIS) - 1), c] for i, c in enumerate(reversed(_VIRIDIS))
]
MASK_COLORS = {  # cells a query could not see, per reason code: warm greys, clearly not the near-white of weight 0
    FUTURE: "#b8b2a7",
    UNWRITTEN: "#dcd6cb",
    HIDDEN: "#a39e93",
    WINDOW: "#cdc7bc",
    ABLATED: "#7f7a70",
}
# Grey is never the only sign: each hidden cell also carries a mark, one per reason (WCAG 1.4.1, docs/accessibility.md).
MASK_MARKS = {FUTURE: "×", UNWRITTEN: "…", HIDDEN: "∅", WINDOW: "–", ABLATED: "/"}
MASK_MARK_COLORS = {FUTURE: "#1f1d1a", UNWRITTEN: "#1f1d1a", HIDDEN: "#1f1d1a", WINDOW: "#1f1d1a", ABLATED: "#ffffff"}
MAX_MASK_MARKS = 4000  # more marked cells than this (a big mosaic) would slow the redraw: the figure's text says grey instead
GREY_ORDER = (FUTURE, UNWRITTEN, WINDOW, HIDDEN, ABLATED)  # one grey trace per reason, in this order
HIGHLIGHT = "#e6550d"  # chosen candidate, best beam path
MUTED = "#9ecae1"  # other candidates
FONT = dict(family="Inter, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif", size=12)


def _plotly_template() -> dict:
    """Plotly's default template ("plotly") cut to the settings that still reach these figures: what ``base_layout``
    and the traces do not set themselves. Left out: maps, 3-D scenes, polar and ternary plots and the 20 trace types
    never drawn; the colour scales that no trace uses (every heatmap and colour axis names its own); the colour way,
    backgrounds, hover label and title position (``base_layout`` sets them); fill patterns and error bars (no trace
    has one). The same look at 1.1 KB (2.4 before this cut; a figure made without a template gets the whole default
    one, about 7 KB of JSON that every figure copied, walked for arrays and sent): the 7 figures of Inside one head
    are ~1.4 ms cheaper to make and send and 8 KB smaller (bench/README.md, 8k). tests/test_viz.py checks what is
    kept; tests/test_template_look.py that it draws the same pixels and traces in a browser.
    """
    import plotly.io as pio

    full = pio.templates["plotly"].to_plotly_json()
    layout = {k: full["layout"][k] for k in TEMPLATE_LAYOUT}
    # the attention maps' invisible click markers carry the weight as a colour: their hover label is coloured by it
    layout["colorscale"] = {"sequential": full["layout"]["colorscale"]["sequential"]}
    data = {
        "heatmap": [{k: v for k, v in full["data"]["heatmap"][0].items() if k != "colorscale"}],
        "bar": [{"type": "bar", "marker": {"line": full["data"]["bar"][0]["marker"]["line"]}}],
    }
    return {"layout": layout, "data": data}


TRACE_TYPES = ("heatmap", "scatter", "bar")  # every trace type the builders draw
# the default template's layout settings kept: axis type rules, text colour, hover mode, colour bars, every axis's
# look (subplots' axes too), shapes' and annotations' defaults
TEMPLATE_LAYOUT = ("autotypenumbers", "font", "hovermode", "coloraxis", "xaxis", "yaxis", "shapedefaults", "annotationdefaults")
TEMPLATE = _plotly_template()


def base_layout(title: str | None, **kw) -> dict:
    """Layout shared by every figure: white background, light grid, readable font, compact margins.

    The look is set property by property over ``TEMPLATE`` (plotly's default, cut to what the figures
    draw) rather than with ``template="plotly_white"``: copying a whole template costs ~20 ms per figure,
    more than building a 72-map mosaic. Figures set their margins (``axis_margin``, ``heatmap_margins``)
    and axes (``axis``) themselves. ``kw`` overrides any
    key, except that ``xaxis`` / ``yaxis`` settings are merged into the shared ones.
    """
    grid = dict(gridcolor="#ebebeb", zerolinecolor="#d9d9d9", linecolor="#d9d9d9", ticks="")
    layout = dict(
        template=TEMPLATE,
        paper_bgcolor="white",
        plot_bgcolor="white",
        xaxis=dict(grid),
        yaxis=dict(grid),
        colorway=["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d"],
        font=FONT,
        title=dict(text=title or "", x=0.0, xanchor="left", font=dict(size=15)),
        margin=dict(l=MARGIN_MIN, r=MARGIN_MIN, t=60 if title else 30, b=MARGIN_MIN),
        hoverlabel=dict(font=dict(family=FONT["family"], size=12), align="left"),
    )
    for name in ("xaxis", "yaxis"):  # merged: a figure's axis settings keep the shared look
        if name in kw:
            layout[name] = {**layout[name], **kw.pop(name)}
    layout.update(kw)
    return layout


# Plotly checks every property of a figure against its schema as the figure is made: about two thirds of the
# time a page spends building its figures (the 7 figures of Inside one head: 35-43 ms checked, 11-15 ms not;
# bench/README.md, 8.). The builders here make figures from plain dicts without that check. The tests switch it
# back on (tests/conftest.py sets ATTENTION_EXPLORER_VALIDATE_FIGURES=1), so that every figure any test builds,
# page runs included, is checked by plotly itself: a misspelled property fails a test, not a lesson.
VALIDATE_FIGURES = os.environ.get("ATTENTION_EXPLORER_VALIDATE_FIGURES") == "1"


def figure(data: Sequence[dict], layout: dict) -> go.Figure:
    """``go.Figure(data=data, layout=layout)``: traces and layout as plain dicts (``type="heatmap"``, ...), checked
    against plotly's schema only where ``VALIDATE_FIGURES`` (tests). Raises ValueError for an invalid property
    when checked."""
    return go.Figure(data=list(data), layout=layout, _validate=VALIDATE_FIGURES)


class Translated(dict):
    """A dict of English texts marked ``N_``, read in the current language: ``get`` and ``[]`` pass the text through
    ``_()`` (``viz.stats.COLUMN_HELP.get(column)`` is German in a German session); ``values()`` and ``items()`` give
    the English."""

    def __getitem__(self, key):
        return _(super().__getitem__(key))

    def get(self, key, default=None):
        return _(super().__getitem__(key)) if key in self else default


# -- label sizes and margins -----------------------------------------------------------------------------
# An axis with ``automargin=True`` makes plotly.js measure its labels and, if they do not fit, grow the
# margin and lay the whole figure out a second time. Margins estimated here from the labels' text are
# big enough in the common fonts, so that second pass is skipped; automargin stays on as a safety net
# for a wider font. Estimates use Arial/Helvetica advance widths (em), rounded up.
MARGIN_MIN = 12  # px; plotly.js adds min(12, every margin) of padding to what an automargin pushes
AXIS_TITLE_SIZE = round(1.2 * FONT["size"])  # plotly.js default: axis titles 1.2x the layout font
TITLE_STANDOFF = 6  # px between tick labels and axis title (explicit: plotly's default ignores the labels)
COLORBAR = dict(thickness=12, x=1.0, xanchor="left", xpad=10)  # at a fixed px offset from the plot's right edge
_EM = {**dict.fromkeys("ijl|'", 0.23), **dict.fromkeys(" .,:;!`ftI[]/\\", 0.28), **dict.fromkeys('r()-{}"', 0.34)}
_EM |= {**dict.fromkeys("mw%", 0.84), **dict.fromkeys("MW@", 0.95), **dict.fromkeys("<>=+~^*", 0.6)}
_EM |= {"\u2192": 1.0, "\u2026": 1.0, "\u2581": 0.8, "\u2713": 0.85, "\u2016": 0.5, "\u2212": 0.6, "\u00b7": 0.3}
_TAG = re.compile(r"<[^>]*>")


def text_px(s: str, size: float = FONT["size"]) -> float:
    """Estimated width in px of one line of plotly text ``s`` (HTML tags and entities allowed) at font ``size``."""
    t = html.unescape(_TAG.sub("", s))
    em = 0.0
    for ch in t:
        w = _EM.get(ch)
        if w is None:
            if ch.isascii():
                w = 0.56 if not ch.isupper() else 0.71
            else:
                w = 1.0 if unicodedata.east_asian_width(ch) in "WF" else 0.62
        em += w
    return em * size * 1.08  # + 8 %: Segoe UI / Inter / DejaVu run wider than Arial


def label_depth(labels: Iterable[str], size: float = FONT["size"], angle: float = 0, *, along_y: bool = False) -> float:
    """How far (px) tick labels reach out from their axis: the widest label's extent perpendicular to it.

    Args:
        labels: tick texts (plotly HTML). size: their font size. angle: ``tickangle`` in degrees.
        along_y: labels of a y axis (their width counts); else of an x axis (their height, or the
            height of the turned text).
    """
    w = max((text_px(s, size) for s in labels), default=0.0)
    h = 1.3 * size
    if along_y:
        return w + 3
    a = math.radians(abs(angle))
    return w * math.sin(a) + h * math.cos(a) + 4


def axis_margin(labels: Iterable[str] = (), *, size: float = FONT["size"], angle: float = 0, along_y: bool, title: bool) -> int:
    """Margin (px) on an axis's side that holds its tick labels and (if ``title``) its one-line title,
    as ``axis`` places them: what plotly's automargin would push, plus its padding."""
    depth = label_depth(labels, size, angle, along_y=along_y)
    if title:
        depth += TITLE_STANDOFF + 1.3 * AXIS_TITLE_SIZE
    return math.ceil(depth + MARGIN_MIN + 2)


def overhang(labels: Sequence[str], size: float, angle: float, first_px: float = 0.0) -> int:
    """Margin (px) left of the plot that the FIRST x tick label needs when it is turned by ``angle``
    (it ends at its tick, ``first_px`` px inside the plot, and runs down to the left)."""
    if not labels or not angle:
        return MARGIN_MIN
    reach = text_px(labels[0], size) * math.cos(math.radians(abs(angle))) + 0.5 * size - first_px
    return math.ceil(max(reach, 0) + MARGIN_MIN + 2)


def colorbar_margin(title: str, ticks: Sequence[str] = ("0.8",)) -> int:
    """Right margin (px) that holds a ``COLORBAR``-placed colour bar with tick labels ``ticks`` and ``title`` on top."""
    bar = COLORBAR["xpad"] + COLORBAR["thickness"] + 12 + max(text_px(t) for t in ticks) + COLORBAR["xpad"]
    return math.ceil(max(bar, COLORBAR["xpad"] + 1.1 * text_px(title) + 10) + MARGIN_MIN)


def axis(title: str | None = None, **kw) -> dict:
    """Settings of one axis: ``automargin`` on (labels never cut, whatever the margins) and the title
    ``TITLE_STANDOFF`` px beyond the tick labels (plotly's default spot ignores long labels). ``kw`` adds to it."""
    out = dict(automargin=True, **kw)
    if title is not None:
        out["title"] = dict(text=title, standoff=TITLE_STANDOFF)
    return out


def weight_colors(label: str | None = None, zmax: float = 1) -> dict:
    """``go.Heatmap`` colour settings for attention-like weights: the white-to-blue scale on ``[0, zmax]``
    (keep ``zmax=1`` so a colour means the same weight in every figure) and a colour bar titled ``label`` (None: "weight")."""
    label = _("weight") if label is None else label
    return dict(colorscale=ATTENTION_COLORSCALE, zmin=0, zmax=zmax, colorbar=dict(title=dict(text=label), **COLORBAR))


def diverging_colors(label: str, r: float) -> dict:
    """``go.Heatmap`` colour settings for signed values: the blue-white-red scale on ``[-r, r]``, white at 0,
    and a colour bar titled ``label``."""
    return dict(colorscale=DIVERGING_COLORSCALE, zmin=-r, zmax=r, zmid=0, colorbar=dict(title=dict(text=label), **COLORBAR))


def tick_style(cell_px: float, *, rotate: bool) -> dict:
    """Tick font size for token ticks on cells ``cell_px`` big; x ticks are turned to stay apart."""
    size = int(np.clip(cell_px * 0.8, 8, 12))
    return dict(tickfont=dict(size=size), tickangle=(-90 if cell_px < 40 else -45) if rotate else 0)


def heatmap_axes(
    x_title: str, y_title: str, x_ticks: dict, y_ticks: dict, *, shape: tuple[int, int] | None = None, **both
) -> tuple[dict, dict]:
    """Settings of a heatmap's x and y axes (``layout.xaxis``, ``layout.yaxis``): square cells (y scaled
    to x), row 0 on top, no grid, titles just beyond the tick labels, automargin on (see ``heatmap_margins``).

    Args:
        x_title, y_title: axis titles.
        x_ticks, y_ticks: ``tickvals`` and ``ticktext`` (and optionally ``tick_style(...)``); drawn
            with ``tickmode="array"``.
        shape: ``(n_rows, n_cols)`` for integer x / y coordinates (the axes span exactly the cells);
            None for category axes (string coordinates, e.g. unique token labels).
        both: further settings for both axes (e.g. ``zeroline=False``).
    """
    x = dict(tickmode="array", showgrid=False, automargin=True, constrain="domain", **both)
    y = dict(x, title=dict(text=y_title, standoff=TITLE_STANDOFF), scaleanchor="x", scaleratio=1)
    x.update(title=dict(text=x_title, standoff=TITLE_STANDOFF), constraintoward="left", **x_ticks)
    y.update(constraintoward="top", **y_ticks)
    if shape is None:
        x.update(type="category")
        y.update(type="category", autorange="reversed")
    else:
        x.update(range=[-0.5, shape[1] - 0.5])
        y.update(range=[shape[0] - 0.5, -0.5])
    return x, y


def heatmap_margins(x_ticks: dict, y_ticks: dict, *, top: int, colorbar: str | None = "", cb_ticks=("0.8",)) -> dict:
    """``layout.margin`` that fits a heatmap's tick labels (``x_ticks`` / ``y_ticks`` as for ``heatmap_axes``),
    one-line axis titles and a colour bar titled ``colorbar`` ("": "weight"; None: no colour bar); ``top`` px above."""
    colorbar = _("weight") if colorbar == "" else colorbar
    xs = x_ticks.get("tickfont", {}).get("size", FONT["size"])
    ys = y_ticks.get("tickfont", {}).get("size", FONT["size"])
    xa = x_ticks.get("tickangle", 0)
    xt = list(x_ticks.get("ticktext", ()))
    left = max(axis_margin(y_ticks.get("ticktext", ()), size=ys, along_y=True, title=True), overhang(xt, xs, xa))
    bottom = axis_margin(xt, size=xs, angle=xa, along_y=False, title=True)
    right = colorbar_margin(colorbar, cb_ticks) if colorbar is not None else MARGIN_MIN
    return dict(l=left, r=right, t=top, b=bottom)


def tile_label(x0: int, y0: int, text: str) -> dict:
    """Annotation ``text`` just above the top-left corner of the mosaic tile whose first cell is (``y0``, ``x0``)."""
    return dict(
        x=x0 - 0.5,
        y=y0 - 0.5,
        xref="x",
        yref="y",
        text=text,
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
        font=dict(size=11, color="#444"),
    )


# -- input checks ------------------------------------------------------------------------------------
def as_array(x, name: str, ndim: int | Sequence[int] | None = None) -> np.ndarray:
    """``x`` as a float32 numpy array (torch tensors are detached and moved to the CPU).

    Raises:
        ValueError: if ``x`` is not numeric, has the wrong number of dimensions, or holds NaN/inf.
    """
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    try:
        arr = np.asarray(x, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name} must be a numeric array (numpy or torch), got {type(x).__name__}: {e}") from None
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name} must be {want}, got shape {arr.shape} ({arr.ndim}-D)")
    if arr.size and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(f"{name} holds {bad} NaN/inf value(s); pass finite weights (analysis.analyze replaces NaN by 0)")
    return arr


def check_tokens(tokens, name: str, n: int | None = None, what: str = "") -> list[str]:
    """``tokens`` as a list of str, of length ``n`` if given.

    Raises:
        ValueError: if it is not a sequence of strings or has the wrong length.
    """
    if isinstance(tokens, str) or not isinstance(tokens, Iterable):
        raise ValueError(f"{name} must be a list of token strings, got {type(tokens).__name__}")
    out = list(tokens)
    for t in out:
        if not isinstance(t, str):
            raise ValueError(f"{name} must hold strings, got {type(t).__name__} {t!r}")
    if n is not None and len(out) != n:
        raise ValueError(f"{name} has {len(out)} tokens but {what or 'the array'} has {n}: pass the tokens that match the array")
    return out


def check_kind(kind: str) -> str:
    """Raises ValueError unless ``kind`` is one of ``KINDS``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return kind


def check_square(kind: str, n_q: int, n_k: int) -> None:
    """Self-attention maps are square (queries and keys are the same tokens)."""
    if kind in ("enc_self", "dec_self") and n_q != n_k:
        raise ValueError(
            f"{kind} maps must be square (queries and keys are the same tokens), got {n_q} queries x {n_k} keys; "
            "did you mean kind='cross'?"
        )


# -- token text for plotly ---------------------------------------------------------------------------
def esc(s: str) -> str:
    """Escape ``<``, ``>``, ``&`` so plotly shows ``<bos>`` as text, not as a (dropped) tag."""
    return html.escape(s, quote=False)


def short(s: str, n: int = 14) -> str:
    """Cut a display token to ``n`` characters for tick labels (hover shows it whole)."""
    return s if len(s) <= n else s[: n - 1] + "…"


def token_labels(shown: Sequence[str]) -> tuple[list[str], list[str]]:
    """Hover and tick text of display tokens (``viz.tokens.display``), escaped for plotly.

    Hover text carries the position, so it is unique even for repeated tokens: ``"▁dog (pos 5)"``;
    tick text is the token cut by ``short``: ``"▁dog"``.
    """
    pos = _("{token} (pos {i})")
    return [pos.format(token=esc(t), i=i) for i, t in enumerate(shown)], [esc(short(t)) for t in shown]


# -- hidden cells ---------------------------------------------------------------------------------------
def check_reasons(reasons, n_q: int, n_k: int) -> np.ndarray:
    """``reasons`` (the record's reason codes) as an int8 ``(n_q, n_k)`` array.

    Raises:
        ValueError: for another shape or an unknown code.
    """
    r = np.asarray(reasons)
    if r.shape != (n_q, n_k):
        raise ValueError(
            f"reasons has shape {r.shape} but the map is ({n_q}, {n_k}) (queries x keys): build the view with "
            "analysis.records (Analysis.view, attention_view, trace_view)"
        )
    bad = set(np.unique(r).tolist()) - {VISIBLE, *REASON_NAMES}
    if bad:
        raise ValueError(
            f"reasons holds unknown codes {sorted(bad)}; use analysis.records' VISIBLE, FUTURE, HIDDEN, WINDOW, ABLATED, UNWRITTEN"
        )
    return r.astype(np.int8, copy=False)


def check_ablated(ablated, n_layers: int, n_heads: int) -> frozenset[tuple[int, int]]:
    """``ablated`` (layer, head) pairs, 0-based, as a frozenset.

    Raises:
        ValueError: for a head out of range.
    """
    out = frozenset((int(l), int(h)) for l, h in ablated)
    for l, h in sorted(out):
        if not (0 <= l < n_layers and 0 <= h < n_heads):
            raise ValueError(
                f"ablated head (layer {l}, head {h}) is out of range for {n_layers} layers x {n_heads} heads (both count from 0)"
            )
    return out


# -- mosaic grid -----------------------------------------------------------------------------------
def tile_origin(r: int, c: int, n_rows: int, n_cols: int, gap: int) -> tuple[int, int]:
    """Top-left (row, column) of tile (r, c) in a mosaic of tiles ``n_rows x n_cols`` cells big."""
    return r * (n_rows + gap), c * (n_cols + gap)


def tile(maps: np.ndarray, gap: int) -> np.ndarray:
    """Tile ``maps (R, C, Q, K)`` into one ``(R*Q + (R-1)*gap, C*K + (C-1)*gap)`` float32 array, NaN gutters."""
    R, C, Q, K = maps.shape
    z = np.full((R * Q + (R - 1) * gap, C * K + (C - 1) * gap), np.nan, dtype=np.float32)
    for r in range(R):
        for c in range(C):
            y0, x0 = tile_origin(r, c, Q, K, gap)
            z[y0 : y0 + Q, x0 : x0 + K] = maps[r, c]
    return z


def gap_for(n: int) -> int:
    """Gutter width (cells) between mosaic tiles: about a tenth of a tile, at least 1."""
    return max(1, round(n / 10))


def unique_categories(labels: list[str], block: int) -> list[str]:
    """Category names that stay distinct when the same labels repeat in several mosaic blocks.

    Block ``b`` gets ``b`` zero-width spaces appended: invisible in hover text, distinct on a
    category axis (plotly merges equal category names).
    """
    return [s + "\u200b" * block for s in labels]


def mosaic_axis(block_labels: list[list[str]], gap: int) -> list[str]:
    """Category names of one mosaic axis: each block's labels, then ``gap`` unique gutter names."""
    names: list[str] = []
    for b, labels in enumerate(block_labels):
        names += unique_categories(labels, b)
        if b < len(block_labels) - 1:
            names += [f"\u2002gap {b}.{g}" for g in range(gap)]
    return names


# -- text alternatives and marks: information not in colour alone ---------------------------------------------
def mask_marks(sel: np.ndarray, reason: int, cell_px: float) -> dict:
    """Heatmap settings that write ``MASK_MARKS[reason]`` in every cell of ``sel`` (True: hidden for ``reason``), so a
    hidden cell is marked by a sign as well as by its grey; {} when the cells are too small (< 8 px) to hold one or
    there are more than ``MAX_MASK_MARKS`` of them."""
    n = int(np.count_nonzero(sel))
    if cell_px < 8 or n > MAX_MASK_MARKS:
        return {}
    text = np.where(sel, MASK_MARKS[reason], "").astype(object)
    font = dict(size=int(np.clip(cell_px * 0.6, 7, 16)), color=MASK_MARK_COLORS[reason])
    return dict(text=text, texttemplate="%{text}", textfont=font)


def marks_legend(reasons: Iterable[int]) -> str:
    """What the grey cells of the given reason codes mean, with their marks: ``"grey cells marked × are masked
    (future)"``; "" when there are none."""
    parts = [f"{MASK_MARKS[r]} {_(REASON_NAMES[r])}" for r in GREY_ORDER if r in set(reasons)]
    return _("grey cells are hidden from the query, marked {marks}").format(marks=", ".join(parts)) if parts else ""


def plain(text: str | None) -> str:
    """Plotly title text as plain text: line breaks become ". ", tags dropped, entities read."""
    t = re.sub(r"<br\s*/?>", ". ", text or "", flags=re.I)
    return " ".join(html.unescape(_TAG.sub("", t)).split())


def alt_text(title: str | None, *, rows: str, cols: str, shape: tuple[int, int] | None = None, notes: Iterable[str] = ()) -> str:
    """The text alternative of a heatmap, for screen readers (``layout.meta["alt"]``, read by ``ui.widgets.show``):
    what it is (``title``), what its rows and columns are, its size, and what marks and colours mean (``notes``).

    >>> alt_text("Cross-attention, layer 2, head 3", rows="output tokens", cols="source tokens", shape=(4, 6))
    'Cross-attention, layer 2, head 3: rows are output tokens, columns source tokens (4 × 6 cells).'
    """
    head = plain(title).rstrip(". ") or _("Heatmap")
    size = _(" ({n_rows} × {n_cols} cells)").format(n_rows=shape[0], n_cols=shape[1]) if shape else ""
    out = _("{what}: rows are {rows}, columns {cols}{size}.").format(what=head, rows=rows, cols=cols, size=size)
    extra = [n for n in notes if n]
    return out + ("" if not extra else " " + " ".join(n[0].upper() + n[1:].rstrip(".") + "." for n in extra))
