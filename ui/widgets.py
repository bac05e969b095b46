"""Widgets and placement helpers shared by the pages: figures with their downloads, token chips,
layer/head pickers, radios whose choice lives in the URL as a short key, Markdown escaping of user and
token text, and text from the URL cut to the longest text a box takes."""

from __future__ import annotations

import difflib
import html
import logging
import re
from functools import partial
from typing import NamedTuple

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.errors import StreamlitAPIException

import i18n
from analysis.records import MapView
from i18n import N_, _
from ui import catalog, figures, keys
from viz import attention as va
from viz import export as vx
from viz import tokens as vt

log = logging.getLogger("attention_explorer")

PROBABILITY = st.column_config.ProgressColumn(min_value=0.0, max_value=1.0, format="%.3f")  # a 0..1 column of a table
MAX_CHARS = 1000  # the longest text a box takes (the model reads at most max_len - 1 pieces of it anyway)

# CommonMark's ASCII punctuation that means something, and Streamlit's own: $…$ LaTeX (remark-math), :name: emoji,
# :red[…] directives, :material/…: icons. Escaped, each shows as itself (CommonMark lets any ASCII punctuation be).
_MD_SPECIAL = re.compile(r"[\\`*_{}\[\]()#+\-.!|$<>~:&/]")


def md_escape(text: str) -> str:
    """``text`` with every character that Streamlit's Markdown treats specially backslash-escaped, so it shows as typed.

    For user and token text inside ``st.markdown``, ``st.caption``, ``st.info`` / ``st.warning`` / ``st.error``:
    ``"$5 and $6"`` would be LaTeX, backticks code, ``*``/``_`` emphasis. Not for ``st.text``, ``st.code``, tables,
    chips (``st.html``, escaped as HTML) or figures, which show text as it is.
    """
    return _MD_SPECIAL.sub(r"\\\g<0>", text)


def cut_url_text(key: str) -> None:
    """Cut the URL's text parameter ``key`` (``?sentence=…``) to ``MAX_CHARS``, before any widget or model reads it.

    Call it before the widget that reads the parameter: the URL is rewritten with the text kept, and
    ``cut_warning(key, text)`` says so while that text is in the box.
    """
    value = st.query_params.get(key)
    if value is not None and len(value) > MAX_CHARS:
        st.session_state[keys.cut(key)] = (len(value), value[:MAX_CHARS])
        try:
            st.query_params[key] = value[:MAX_CHARS]
        except StreamlitAPIException:  # bound to its widget already (e.g. back to an old URL): its max_chars cuts
            log.info("left the URL's %s to its widget", key)


def cut_warning(key: str, text: str) -> None:
    """A warning that ``text`` is the URL's text ``key`` cut to ``MAX_CHARS`` (see ``cut_url_text``), if it is."""
    n, kept = st.session_state.get(keys.cut(key), (0, None))
    if text == kept:
        st.warning(_("The text in the link had {n:,} characters: only the first {kept:,} are used.").format(n=n, kept=MAX_CHARS))


class MapCsv(NamedTuple):
    """An attention map to export as CSV, with the tokens that label its rows and columns."""

    w: np.ndarray  # (Q, K)
    q: list[str]  # row labels: query tokens
    k: list[str]  # column labels: key tokens
    predicted: list[str] | None = None  # decoder rows: the token each query predicted
    reasons: np.ndarray | None = None  # (Q, K) reason codes (model.facts): hidden cells read as text in the table

    @classmethod
    def of(cls, view: MapView) -> MapCsv:
        """The map of ``view`` with its tokens."""
        return cls(view.w, view.q_tokens, view.k_tokens, view.predicted, view.reasons)


def show(fig, key: str, *, shared: tuple | None = None, csv: MapCsv | None = None, on_select=None) -> None:
    """Place a figure with its exports: the figure as HTML or, for an attention map (``csv``), a CSV and a
    "Show as table" toggle (key ``{key}__table``) that lists the same numbers as a table of text.

    The chart's accessible name is its text alternative (``alt_of``: the frontend gives the chart ``role=figure`` and
    that ``aria-label``, WCAG 1.1.1); with the sidebar's colour-blind-safe
    toggle on (``keys.SAFE_COLORS``), the figure is drawn in ``viz.attention.SAFE_COLORSCALE``.

    ``shared``: ``fig`` is a function that builds the figure, and ``shared`` everything it depends on besides the
    interface language and the colours (e.g. ``ctx.key`` and the kind): it is built once per process and shared by
    every session asking for the same (``ui.figures``); a chart without ``on_select`` is then placed by replaying it.
    """
    safe = bool(st.session_state.get(keys.SAFE_COLORS))
    if shared is not None:
        build = (lambda: va.with_safe_colors(fig())) if safe else fig
        full = (key, i18n.language(), safe, *shared)
        # by keyword: Streamlit's cache reads the function's signature for every positional argument of every call
        fig = (
            figures.shared_figure(key=full, _build=build)
            if on_select is not None
            else figures.placed_chart(key=full, chart_key=key, _build=build)
        )
    elif safe:
        fig = va.with_safe_colors(fig)
    if shared is None or on_select is not None:
        st.plotly_chart(
            fig,
            key=key,
            theme=None,
            config=figures.PLOTLY_CONFIG,
            on_select=on_select or "ignore",
            selection_mode="points",
            alt=va.alt_of(fig),
        )
    if csv is None:  # one button needs no row of its own (an element fewer per figure: a class at once, 8i)
        download(_("Figure (HTML)"), partial(vx.figure_html, fig), f"{key}.html", "text/html")
        return
    # An attention map's numbers go out as CSV (and "Show as table"); its picture through the chart's own camera
    # button: no HTML export, a widget fewer on every run (bench/README.md, 14).
    with st.container(horizontal=True, gap="small", vertical_alignment="center"):
        data = partial(vx.attention_csv, csv.w, csv.q, csv.k, predicted=csv.predicted)
        download(_("Map (CSV)"), data, f"{key}.csv", "text/csv")
        table = st.toggle(_("Show as table"), key=f"{key}__table", help=_("The same numbers as a table (for screen readers)."))
    if table:
        st.table(va.map_table(csv.w, csv.q, csv.k, predicted=csv.predicted, reasons=csv.reasons))


def download(label: str, data, file_name: str, mime: str, *, kind: str = "tertiary") -> None:
    """A small download link; ``data`` is a callable, so the file is built only when clicked."""
    st.download_button(
        label,
        data=data,
        file_name=file_name,
        mime=mime,
        on_click="ignore",
        key=f"{file_name}__download",
        icon=":material/download:",
        type=kind,
    )


CHIP = "display:inline-block;margin:2px 3px;padding:1px 7px;border-radius:6px;font-family:monospace;font-size:0.95rem;"
CHIP_STYLES = {
    "": "background:#eef1f8;border:1px solid #d5dbea;",
    "changed": "background:#ffe3a3;border:1px solid #e8a800;font-weight:600;",
    "removed": "background:#ffd6d6;border:1px solid #e06666;text-decoration:line-through;",
    "forced": "background:#e3d7ff;border:1px solid #7b5cd6;font-weight:600;",
    "new": "background:#d3f2dc;border:1px solid #37a05a;font-weight:600;",
}
CHIP_TITLES = {"": N_("token"), "changed": N_("changed"), "removed": N_("removed"), "forced": N_("forced"), "new": N_("new")}
"""A chip's hover text, by its mark (translated where shown)."""


def chips(tokens: list[str], marks: list[str] | None = None, *, css: str = "tokens") -> None:
    """Tokens as little boxes; ``marks[i]`` in CHIP_STYLES colours one. Text is escaped: never raw HTML from input."""
    marks = marks or [""] * len(tokens)
    titles = {m: html.escape(_(title)) for m, title in CHIP_TITLES.items()}
    spans = [
        f'<span style="{CHIP}{CHIP_STYLES[m]}" title="{titles[m]}">{html.escape(t)}</span>'
        for t, m in zip(vt.display(tokens), marks, strict=True)
    ]
    st.html(f'<div class="{css}" style="line-height:2">' + "".join(spans) + "</div>")


def diff_marks(a: list[str], b: list[str], *, a_mark: str = "removed", b_mark: str = "changed") -> tuple[list[str], list[str]]:
    """Chip marks (``chips``) of two token lists: ``a_mark`` / ``b_mark`` on every token outside ``difflib``'s
    matching of the two (replaced, dropped or new), "" on the rest."""
    marks_a, marks_b = [""] * len(a), [""] * len(b)
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op != "equal":
            marks_a[i1:i2] = [a_mark] * (i2 - i1)
            marks_b[j1:j2] = [b_mark] * (j2 - j1)
    return marks_a, marks_b


def token_table(tok, ids: list[int], *, target: bool = False, probability=None) -> pd.DataFrame:
    """Piece, model id and the piece's id in its tokenizer's vocabulary, under the tokenizer's names for them ("compact
    id", "cl100k id"; "id", "SentencePiece id" for an imported model); ``target``: decoder-side ids; ``probability``:
    (len(ids),) a fourth column. Made column by column: from rows, and then changed, it cost twice as much (a class
    arriving at the Translate page makes two tables per student)."""
    pieces = tok.pieces(ids, target=target)
    columns = {
        "piece": vt.display([p.text for p in pieces]),
        tok.id_name: [p.id for p in pieces],
        tok.origin_id_name: [p.origin_id for p in pieces],
    }
    if probability is not None:
        columns["probability"] = probability
    return pd.DataFrame(columns)


def token_columns(tok) -> dict:
    """``column_config`` of a ``token_table`` of ``tok``: its column names shown in the session's language (the data,
    and so its CSV, keeps the English names)."""
    probability = st.column_config.ProgressColumn(_("probability"), min_value=0.0, max_value=1.0, format="%.3f")
    names = {name: st.column_config.Column(_(name)) for name in ("piece", tok.id_name, tok.origin_id_name)}
    return names | {"probability": probability}


def text_box(text: str) -> None:
    """A translation in large type (escaped)."""
    st.html(
        '<div class="translation" style="font-size:1.45rem;padding:0.6rem 0.9rem;border-radius:8px;background:#f3f5fa;'
        f'border-left:4px solid #4c6ef5;white-space:pre-wrap">{html.escape(text) or "&nbsp;"}</div>'
    )


def table_height(df: pd.DataFrame) -> int:
    """Pixel height that shows every row of a dataframe without an inner scroll bar."""
    return 35 * (len(df) + 1) + 3


def slider_or_fixed(label: str, lo: int, hi: int, *, key: str, value: int | None = None, **kw) -> int:
    """``st.slider`` if there is a range, else just the one value (a slider needs min < max)."""
    if hi <= lo:
        st.caption(f"{label}: {lo}")
        return lo
    return st.slider(label, lo, hi, value, key=key, **kw)


def start_from_url(key: str, lo: int, hi: int, *, param: str | None = None) -> None:
    """On arrival (the widget ``key`` has no value yet), start it at the URL's integer ``param`` (default ``key``)
    moved inside ``lo..hi``: ``?step=99`` opens the last step, where a widget bound to the URL would ignore the
    value and start at its default. Nothing if the URL has no integer there."""
    if key in st.session_state:
        return
    try:
        st.session_state[key] = min(max(int(st.query_params.get(param or key, "")), lo), hi)
    except ValueError:
        pass


def clamped_slider(label: str, n: int, *, key: str, param: str | None = None, **kw) -> int:
    """A 1..n slider whose kept value is moved inside the range when n shrinks (a shorter input or output).

    With ``bind="query-params"`` the URL's value under ``key`` is clamped on arrival. ``param`` keeps the value in
    the URL under another name than the session key (read on arrival, written back after every run, dropped at 1).
    """
    if param or kw.get("bind") == "query-params":
        start_from_url(key, 1, n, param=param)
    if st.session_state.get(key, 1) > n:
        st.session_state[key] = n
    value = slider_or_fixed(label, 1, n, key=key, **kw)
    if param:  # as a widget bound to the URL does (which drops a link's out-of-range value: it cannot be written)
        if value == 1:
            st.query_params.pop(param, None)
        elif st.query_params.get(param) != str(value):
            st.query_params[param] = str(value)
    return value


def head_slider(label: str, n_heads: int, *, key: str, **kw) -> int | None:
    """A head picker: "mean" or 1..n_heads; returns the head counted from 0, or None for the mean over heads."""
    # "mean" stays as it is: bound to the URL, a select slider writes the label shown (?head=mean in every language)
    head = st.select_slider(label, ["mean", *map(str, range(1, n_heads + 1))], value="mean", key=key, **kw)
    return None if head == "mean" else int(head) - 1


def pick_layer_head(n_layers: int, n_heads: int) -> tuple[int, int | None]:
    """Layer and head pickers bound to the URL; returns (layer, head or None for the mean), counted from 0.

    The layer slider spans this kind's ``n_layers``; a layer kept from a deeper kind is moved to the last one.
    """
    clamp = st.session_state.get(keys.LAYER, 1) > n_layers  # e.g. encoder layer 5 -> a 2-layer decoder
    if clamp:
        st.session_state[keys.LAYER] = n_layers
    with st.container(horizontal=True):  # one block, not a row of two columns (three): a class reruns it often
        # The default, the last layer, is also where a link's layer beyond this kind's opens (the URL drops it). The
        # default must not change while the widget lives: the URL leaves out the default value.
        value = None if clamp else n_layers
        layer = slider_or_fixed(_("Layer"), 1, n_layers, key=keys.LAYER, value=value, bind="query-params")
        head = head_slider(_("Head"), n_heads, key=keys.HEAD, bind="query-params")
    return layer - 1, head


def url_radio(label: str, options: dict[str, str], *, key: str, default: str, translate: bool = True, **kw) -> str:
    """A radio over ``options`` (short key -> label) whose choice the URL keeps as the short key (``?kind=cross``).
    The labels are English and shown translated (``translate=False``: as they are, e.g. the language names).

    ``bind="query-params"`` would write the label, so the URL is kept here: the parameter is read when the
    widget has no value yet (an old link's label is read as its key) and written back after every run.
    """
    if key not in st.session_state:
        st.session_state[key] = catalog.choice_key(options, st.query_params.get(key)) or default
    # labels translated now, in the session's run: a format_func that called _() later would not know the session
    labels = {k: _(v) for k, v in options.items()} if translate else options
    value = st.radio(label, list(options), format_func=labels.get, key=key, **kw)
    if value == default:
        st.query_params.pop(key, None)
    elif st.query_params.get(key) != value:
        st.query_params[key] = value
    return value


def n_layers_of(cfg, kind: str) -> int:
    return cfg.n_enc_layers if kind == "enc_self" else cfg.n_dec_layers


def head_label(layer: int, head: int | None) -> str:
    if head is None:
        return _("layer {layer}, mean over heads").format(layer=layer + 1)
    return _("layer {layer}, head {head}").format(layer=layer + 1, head=head + 1)


def clicked_point(chart_key: str) -> dict | None:
    """The point last clicked in the chart placed with ``chart_key`` (``on_select``), or None."""
    points = st.session_state.get(chart_key, {}).get("selection", {}).get("points", [])
    return points[0] if points else None


def clicked_cell(chart_key: str, n_q: int, n_k: int) -> tuple[int, int] | None:
    """(query, key) of the last heatmap cell clicked in chart ``chart_key``, if it lies inside an ``n_q x n_k`` map."""
    p = clicked_point(chart_key)
    cd = p.get("customdata") if p else None
    if not isinstance(cd, list) or len(cd) != 2:
        return None
    qi, ki = int(cd[0]), int(cd[1])
    return (qi, ki) if 0 <= qi < n_q and 0 <= ki < n_k else None
