"""Drawing the numbers per head and attention rollout; both are computed in ``model/`` (``analysis.stats.head_stats``,
``analysis.records.rollout``): this module explains and draws them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from i18n import N_, _
from viz import _common as vc
from viz.tokens import display

COLUMN_HELP = vc.Translated(
    {
        "kind": N_(
            "encoder self-attention, decoder causal self-attention or cross-attention (in the CSV: enc_self, dec_self, cross)"
        ),
        "layer": N_("layer, counting from 1"),
        "head": N_("head, counting from 1"),
        "entropy": N_("mean over query rows of −Σ w·ln w (nats): 0 = looks at one token, ln K = spread evenly over K tokens"),
        "mean_distance": N_(
            "mean over query rows of Σ_k w·|q − k| in tokens (cross: distance from the proportional diagonal "
            "k = q·(S−1)/(T−1), in source tokens)"
        ),
        "diagonal": N_("mean weight on the query's own position (cross: on the proportional diagonal)"),
        "previous": N_("mean weight on the token just before the query (rows that have one)"),
        "first": N_("mean weight on the first key (source: the first word; decoder self: <bos>)"),
        "last": N_("mean weight on the last key (source: <eos>; decoder self: the last target token)"),
        "max": N_("mean over query rows of the largest weight: 1 = one-hot, 1/K = uniform"),
        "rows": N_("query rows that attend to something (0 for an ablated head: its statistics are empty)"),
    }
)


def rollout_figure(roll, tokens: Sequence[str], *, title: str | None = None, height: int | None = None) -> go.Figure:
    """Rollout after each layer, side by side in ONE heatmap (columns = layers, NaN gutters).

    Row i of tile l: the position-i state after layer l; column j: the input token it draws on.

    Args:
        roll: ``(L, S, S)`` from ``rollout``; tokens: the S tokens.

    Raises:
        ValueError: if ``roll`` is not ``(L, S, S)`` or the tokens do not match.
    """
    r = vc.as_array(roll, "roll", 3)  # (L, S, S)
    L, S, S2 = r.shape
    if S != S2 or 0 in r.shape:
        raise ValueError(f"roll must be (layers, S, S) as returned by rollout, got {r.shape}")
    hover, tick = vc.token_labels(display(vc.check_tokens(tokens, "tokens", S, "roll's last axes")))
    gap = max(1, round(S / 8))
    z = vc.tile(r[None], gap)  # (S, L*S + (L-1)*gap)
    cd = np.zeros(z.shape, dtype=np.uint8 if L < 256 else np.uint16)
    for l in range(L):
        x0 = vc.tile_origin(0, l, S, S, gap)[1]
        cd[:, x0 : x0 + S] = l + 1
    x = vc.mosaic_axis([hover] * L, gap)
    heat = dict(
        type="heatmap",
        z=z,
        x=x,
        y=hover,
        customdata=cd,
        **vc.weight_colors(_("share")),
        hoverongaps=False,
        hovertemplate=_(
            "<b>rollout through layer %{customdata}</b><br>state at: %{y}<br>draws on input token: %{x}<br>share %{z:.3f}"
        )
        + "<extra></extra>",
        name="rollout",
    )
    cols_at = [vc.tile_origin(0, l, S, S, gap)[1] + j for l in range(L) for j in range(S)]
    annotations = [
        vc.tile_label(vc.tile_origin(0, l, S, S, gap)[1], 0, "<b>" + _("after layer {l}").format(l=l + 1) + "</b>")
        for l in range(L)
    ]
    cell = float(np.clip(900 / (L * S + (L - 1) * gap), 6, 36))
    x_ticks = dict(tickvals=cols_at, ticktext=tick * L, **vc.tick_style(cell, rotate=True))  # cell < 40 px: ticks turned -90°
    y_ticks = dict(tickvals=list(range(S)), ticktext=tick)
    xaxis, yaxis = vc.heatmap_axes(_("input token"), _("position (state after the layer)"), x_ticks, y_ticks)
    layout = vc.base_layout(
        title
        or _(
            "Attention rollout (Abnar & Zuidema 2020)<br><sup>how much each position (row) draws on each input token (column), "
            "through the residual stream and every layer so far</sup>"
        ),
        annotations=annotations,
        height=height or int(S * cell + 230),
        meta={
            "L": L,
            "S": S,
            "gap": gap,
            "alt": vc.alt_text(
                title or _("Attention rollout"),
                rows=_("positions (the state after the layer)"),
                cols=_("the input tokens, one block of columns per layer ({L} layers)").format(L=L),
                shape=(S, S),
                notes=[_("colour: the share from 0 (light) to 1 (dark)")],
            ),
        },
        margin=vc.heatmap_margins(x_ticks, y_ticks, top=90, colorbar=_("share")),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    return vc.figure([heat], layout)
