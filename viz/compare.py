"""Two inputs compared: how far each source token's encoder output moved (an ``EncoderDistance`` in,
a ``go.Figure`` out). The attention maps of the two inputs and their difference are drawn by
``viz.attention`` (``attention_heatmap``, ``difference_heatmap``)."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from analysis.records import EncoderDistance
from i18n import _
from viz._common import HIGHLIGHT, MARGIN_MIN, as_array, axis, axis_margin, base_layout, esc, figure, plain, short
from viz.tokens import display

SAME = "#4c78a8"  # a token that is the same piece in both inputs


def pair_labels(d: EncoderDistance) -> list[str]:
    """One label per aligned pair: B's token ("▁street"), or "A → B" where the piece was substituted ("▁tired → ▁wide")."""
    a, b = display(d.a_tokens), display(d.b_tokens)
    return [b[j] if same else f"{a[i]} → {b[j]}" for (i, j), same in zip(d.pairs, d.same_piece, strict=True)]


def distance_figure(d: EncoderDistance, *, title: str | None = None) -> go.Figure:
    """The L2 distance ``||enc(B)[j] − enc(A)[i]||`` of every aligned token pair as vertical bars, in B's order.

    Bars of substituted pieces are orange, of the same piece blue: a blue bar above zero is a token
    whose word did not change but whose representation did (self-attention mixed the change in). A
    dashed line marks ``d.scale``, the mean length of an encoder output vector, to read the bars
    against. ``data[0]`` is the bar trace: ``y`` the distances, ``customdata`` the pairs ``[i, j]``.

    Raises:
        ValueError: if ``distance`` / ``same_piece`` do not have one entry per pair.
    """
    dist = as_array(d.distance, "distance", 1)
    if len(dist) != len(d.pairs) or len(d.same_piece) != len(d.pairs):
        raise ValueError(
            f"{len(d.pairs)} pairs but {len(dist)} distances and {len(d.same_piece)} same_piece flags: one of each per pair"
        )
    labels = pair_labels(d)
    n = len(labels)
    ticks = [esc(short(s, 20)) for s in labels]
    colors = [SAME if s else HIGHLIGHT for s in d.same_piece]
    line = _("<b>{pair}</b><br>A token {i} → B token {j}<br>distance {distance}")
    different = "<br><i>" + _("a different piece") + "</i>"
    hover = [
        line.format(pair=esc(lab), i=i, j=j, distance=f"{x:.3f}") + ("" if same else different)
        for lab, (i, j), x, same in zip(labels, d.pairs, dist, d.same_piece, strict=True)
    ]
    bar = dict(
        type="bar",
        x=np.arange(n),
        y=dist,
        # substituted pieces are hatched as well as orange: not in colour alone (docs/accessibility.md)
        marker=dict(color=colors, pattern=dict(shape=["" if s else "/" for s in d.same_piece], fgcolor="#3d2a14")),
        hovertext=hover,
        hoverinfo="text",
        customdata=[list(p) for p in d.pairs],
        name=_("distance"),
    )
    top = 80
    how = _("position by position") if d.by_position else _("by matching pieces (difflib)")
    moved = _("How far each token's encoder output moved from A to B")
    default = (
        moved
        + "<br><sup>"
        + _(
            "L2 distance of the d_model-vectors, tokens paired {how}; orange, hatched: a substituted piece; "
            "dashed: the mean length of a vector ({scale})"
        ).format(how=how, scale=f"{d.scale:.2f}")
        + "</sup>"
    )
    peak = max(float(dist.max()) if n else 0.0, d.scale, 1e-6)
    layout = base_layout(
        title if title is not None else default,
        height=380,
        showlegend=False,
        bargap=0.25,
        shapes=[
            dict(type="line", xref="paper", x0=0, x1=1, y0=d.scale, y1=d.scale, line=dict(color="#888", dash="dash", width=1))
        ],
        margin=dict(
            l=axis_margin(["0.00"], along_y=True, title=True),
            r=MARGIN_MIN,
            t=top,
            b=axis_margin(ticks, angle=-45 if n > 6 else 0, along_y=False, title=False),
        ),
        xaxis=axis(tickmode="array", tickvals=list(range(n)), ticktext=ticks, tickangle=-45 if n > 6 else 0),
        yaxis=axis(_("distance"), range=[0, 1.08 * peak], showgrid=True),
        meta={
            "scale": d.scale,
            "by_position": d.by_position,
            "alt": _(
                "{what}: a bar per token pair ({n} bars), the height is the L2 distance; hatched orange bars are substituted "
                "pieces (labelled A → B), plain blue bars the same piece; a dashed line marks the mean length of a vector ({scale})."
            ).format(
                what=plain(title) if title else _("How far each token’s encoder output moved from A to B"),
                n=n,
                scale=f"{d.scale:.2f}",
            ),
        },
    )
    return figure([bar], layout)
