"""The data flow of one forward pass: every ``Stage`` (``Maps.shapes``) with its tensor shape, as a table and as a diagram."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from analysis.records import Stage
from i18n import _
from viz._common import HIGHLIGHT, base_layout, esc, figure


def _check(shapes) -> list[Stage]:
    """``shapes`` as a list of ``Stage`` with integer shapes; ValueError saying what to pass otherwise."""
    if isinstance(shapes, str) or not isinstance(shapes, Sequence) or not shapes:
        raise ValueError("shapes must be a non-empty list of Stage (name, shape, meaning), e.g. Maps.shapes")
    out = []
    for s in shapes:
        if not isinstance(s, Stage):
            raise ValueError(f"each stage must be a analysis.records.Stage, got {s!r}")
        try:
            dims = tuple(int(d) for d in s.shape)
        except (TypeError, ValueError):
            raise ValueError(f"stage {s.name!r}: shape must be a tuple of ints, got {s.shape!r}") from None
        out.append(Stage(str(s.name), dims, str(s.meaning)))
    return out


def stage_text(text: str) -> str:
    """A stage's name or meaning (English, as ``analysis.analyze.data_flow`` writes it) in the interface language: the
    text itself from the catalogue, else its numbers put back into the catalogue's template (``"encoder layer {} output"``)."""
    shown = _(text)
    if shown != text:
        return shown
    template = re.sub(r"\d+", "{}", text)
    translated = _(template)
    return translated.format(*re.findall(r"\d+", text)) if translated != template else text


def _arrow(tail: tuple[float, float], head: tuple[float, float], *, color: str, width: float, **extra) -> dict:
    """An arrow annotation from ``tail`` to ``head`` (both ``(x, y)`` in data coordinates), without text."""
    return dict(
        x=head[0],
        y=head[1],
        ax=tail[0],
        ay=tail[1],
        xref="x",
        yref="y",
        axref="x",
        ayref="y",
        showarrow=True,
        arrowhead=2,
        arrowwidth=width,
        arrowcolor=color,
        text="",
        **extra,
    )


def shape_text(shape: Sequence[int]) -> str:
    """``(1, 7, 256)`` -> ``"[1, 7, 256]"``."""
    return "[" + ", ".join(str(int(d)) for d in shape) + "]"


def shapes_table(shapes: Sequence[Stage]) -> pd.DataFrame:
    """Stages as a table with columns stage, shape (e.g. ``"[1, 7, 256]"``), meaning.

    Args:
        shapes: every ``Stage``, in data-flow order (``Maps.shapes``).

    Raises:
        ValueError: if ``shapes`` is empty or a stage is malformed.
    """
    rows = _check(shapes)
    return pd.DataFrame(
        {
            _("stage"): [stage_text(r.name) for r in rows],
            _("shape"): [shape_text(r.shape) for r in rows],
            _("meaning"): [stage_text(r.meaning) for r in rows],
        }
    )


def shapes_figure(shapes: Sequence[Stage], *, title: str | None = None, split_at: str | None = "memory") -> go.Figure:
    """A flow diagram: one box per stage (name and shape), arrows in data-flow order.

    Stages up to the one whose name starts with ``split_at`` (the encoder side, ending at the
    memory) form the left column and the rest (the decoder side) the right one, with an arrow
    from the memory into the decoder's cross-attention; without such a stage, one column.
    Hover on a box gives the stage's meaning.

    Raises:
        ValueError: if ``shapes`` is empty or a stage is malformed.
    """
    rows = _check(shapes)
    split = next((i for i, r in enumerate(rows) if split_at and r.name.startswith(split_at)), None)
    if split is None or split == len(rows) - 1:
        cols = [list(range(len(rows)))]
    else:
        cols = [list(range(split + 1)), list(range(split + 1, len(rows)))]
    box_w, box_h, row_h = 0.42 if len(cols) == 2 else 0.8, 0.72, 1.0
    centres = {}
    for c, idx in enumerate(cols):
        x = (0.25 + 0.5 * c) if len(cols) == 2 else 0.5
        for r, i in enumerate(idx):
            centres[i] = (x, r * row_h)
    shapes_, annotations = [], []
    for i, stage in enumerate(rows):
        name, dims = stage.name, stage.shape
        x, y = centres[i]
        is_attn = "attention" in name
        shapes_.append(
            dict(
                type="rect",
                x0=x - box_w / 2,
                x1=x + box_w / 2,
                y0=y - box_h / 2,
                y1=y + box_h / 2,
                line=dict(color=HIGHLIGHT if is_attn else "#6b8fb3", width=1.2),
                fillcolor="#fff4ec" if is_attn else "#eef4fa",
                layer="below",
            )
        )
        annotations.append(
            dict(
                x=x,
                y=y,
                text=f"<b>{esc(stage_text(name))}</b>  <span style='font-family:monospace'>{shape_text(dims)}</span>",
                showarrow=False,
                font=dict(size=11),
            )
        )
    for idx in cols:
        for a, b in zip(idx[:-1], idx[1:], strict=True):
            (xa, ya), (xb, yb) = centres[a], centres[b]
            annotations.append(_arrow((xa, ya + box_h / 2), (xb, yb - box_h / 2), color="#888", width=1.2, arrowsize=1))
    if len(cols) == 2:
        mem = cols[0][-1]
        target = next((i for i in cols[1] if rows[i].name.startswith("cross")), cols[1][0])
        (xa, ya), (xb, yb) = centres[mem], centres[target]
        annotations.append(_arrow((xa + box_w / 2, ya), (xb - box_w / 2, yb), color=HIGHLIGHT, width=1.5))
    n_rows = max(len(c) for c in cols)
    stages = dict(  # invisible markers at box centres carry the hover (a stage's meaning)
        type="scatter",
        x=[centres[i][0] for i in range(len(rows))],
        y=[centres[i][1] for i in range(len(rows))],
        mode="markers",
        marker=dict(size=30, opacity=0),
        hovertext=[f"<b>{esc(stage_text(r.name))}</b> {shape_text(r.shape)}<br>{esc(stage_text(r.meaning))}" for r in rows],
        hoverinfo="text",
        name="stages",
        showlegend=False,
    )
    headers = [_("encoder side"), _("decoder side")] if len(cols) == 2 else []
    for c, text in enumerate(headers):
        annotations.append(
            dict(x=0.25 + 0.5 * c, y=-0.75, text=f"<b>{text}</b>", showarrow=False, font=dict(size=13, color="#444"))
        )
    layout = base_layout(
        title or _("Data flow of this input, stage by stage (B = batch, S = source length, T = target length)"),
        shapes=shapes_,
        annotations=annotations,
        height=int(n_rows * 46 + 140),
        xaxis=dict(visible=False, range=[0, 1], fixedrange=True),
        yaxis=dict(visible=False, range=[n_rows - 0.4, -1.1], fixedrange=True),
    )
    return figure([stages], layout)
