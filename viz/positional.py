"""Positional encoding (Vaswani et al. 2017, section 3.5): the matrix, its waves, and why it matters.

PE[pos, 2i] = sin(pos / 10000^(2i / d_model)),  PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model)).
Dimension pair i is a wave with wavelength 2π · 10000^(2i / d_model) positions: from 2π (≈ 6.3)
for the first pair up to 2π · 10000 for the last, so every position gets a distinct pattern and
nearby positions get similar ones.

``layout`` says where the waves are (``model.transformer.TransformerConfig.pe_layout``): "interleaved", the paper's
sin/cos pairs above, or "halves" (imported OPUS-MT models): the sines of waves 0 .. D/2 - 1 in the first half of the
dimensions, their cosines in the second, PE[pos, i] = sin(.), PE[pos, D/2 + i] = cos(.).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from analysis.records import WordOrder
from i18n import _
from viz import _common as vc
from viz.tokens import display


def wave(dim: int, d_model: int, layout: str = "interleaved") -> tuple[str, int]:
    """``("sin" | "cos", i)``: the function and the wave index i of PE dimension ``dim`` in ``layout``.

    "interleaved": dimension 2i is sin, 2i + 1 cos (section 3.5); "halves": dimension i < D/2 is sin, D/2 + i cos.

    Raises:
        ValueError: if ``d_model < 1``, ``dim`` is not in ``[0, d_model)``, or ``layout`` is neither.
    """
    if d_model < 1:
        raise ValueError(f"d_model must be >= 1, got {d_model}")
    if not 0 <= dim < d_model:
        raise ValueError(f"dim must be in [0, {d_model}), got {dim}")
    if layout == "interleaved":
        return ("sin" if dim % 2 == 0 else "cos"), dim // 2
    if layout == "halves":
        half = d_model // 2
        return ("sin", dim) if dim < half else ("cos", dim - half)
    raise ValueError(f"layout must be 'interleaved' or 'halves', got {layout!r}")


def wavelength(dim: int, d_model: int, layout: str = "interleaved") -> float:
    """Wavelength in positions of PE dimension ``dim``: ``2π · 10000^(2i / d_model)`` for its wave i (section 3.5).

    Interleaved, dimensions 2i (sin) and 2i + 1 (cos) share a wavelength; in halves, dimensions i and D/2 + i.

    Raises:
        ValueError: as ``wave``.
    """
    _, i = wave(dim, d_model, layout)
    return float(2 * np.pi * 10000.0 ** (2 * i / d_model))


def _pe(pe) -> np.ndarray:
    p = vc.as_array(pe, "pe", 2)  # (N, D)
    if 0 in p.shape:
        raise ValueError(f"pe is empty (shape {p.shape}); expected (positions, d_model)")
    return p


def _dim_name(d: int, D: int, sinusoidal: bool, layout: str) -> str:
    if not sinusoidal:
        return _("dim {d}").format(d=d)
    fn, _wave = wave(d, D, layout)
    return _("dim {d} · {fn} · wavelength {wavelength} positions").format(
        d=d, fn=fn, wavelength=f"{wavelength(d, D, layout):,.1f}"
    )


def pe_matrix(
    pe, *, title: str | None = None, sinusoidal: bool = True, height: int | None = None, layout: str = "interleaved"
) -> go.Figure:
    """The positional-encoding matrix as a heatmap: rows = positions (0 on top), columns = dimensions.

    Diverging colours on −1..1 (wider if a learned encoding exceeds it). Hover: position, dimension,
    sin/cos and wavelength (when ``sinusoidal``, for the dimensions' ``layout``), value.

    Args:
        pe: ``(N, d_model)``, e.g. ``model.transformer.sinusoidal_encoding(N, d_model)``.

    Raises:
        ValueError: if ``pe`` is not a non-empty finite 2-D array.
    """
    p = _pe(pe)
    N, D = p.shape
    r = max(1.0, float(np.abs(p).max()))
    names = [_dim_name(d, D, sinusoidal, layout) for d in range(D)]
    step = max(1, int(2 ** np.ceil(np.log2(max(D / 8, 1)))))  # <= 8 dimension ticks: they stay level in a narrow column
    heat = dict(
        type="heatmap",
        z=p,
        x=names,
        y=np.arange(N),
        **vc.diverging_colors(_("PE value"), r),
        hovertemplate=_("position %{y}<br>%{x}<br>value %{z:.3f}") + "<extra></extra>",
        name="PE",
    )
    x_ticks = [str(d) for d in range(0, D, step)]
    layout = vc.base_layout(
        title
        or _(
            "Positional encoding: one row per position<br><sup>left: fast waves (short wavelength); right: slow waves; "
            "each position gets its own pattern (section 3.5)</sup>"
        ),
        height=height or int(np.clip(N * 6, 300, 700) + 130),
        meta={
            "N": N,
            "D": D,
            "alt": vc.alt_text(
                title or _("Positional encoding, one row per position"),
                rows=_("positions"),
                cols=_("dimensions"),
                shape=(N, D),
                notes=[_("colour: the value from −{r} (blue) through 0 (white) to +{r} (red)").format(r=f"{r:.2g}")],
            ),
        },
        margin=dict(
            l=vc.axis_margin([str(N - 1)], along_y=True, title=True),
            r=vc.colorbar_margin(_("PE value"), [f"−{r / 2:.2g}"]),
            t=80,
            b=vc.axis_margin(x_ticks, along_y=False, title=True),
        ),
        xaxis=vc.axis(_("dimension"), type="category", tickmode="array", tickvals=list(range(0, D, step)), ticktext=x_ticks),
        yaxis=vc.axis(_("position"), autorange="reversed"),
    )
    return vc.figure([heat], layout)


def pe_curves(
    pe, dims: Sequence[int], *, title: str | None = None, d_model: int | None = None, layout: str = "interleaved"
) -> go.Figure:
    """Chosen PE dimensions as curves over positions, each labelled with its wavelength.

    ``trace.meta`` holds ``{"dim", "wavelength", "fn"}`` for each curve.

    Args:
        pe: ``(N, D)``; dims: dimensions to draw (0-based); d_model: for the wavelength formula
            (default D, the width of ``pe``); layout: where the sines and cosines are (module docstring).

    Raises:
        ValueError: if ``dims`` is empty or a dimension is out of range.
    """
    p = _pe(pe)
    N, D = p.shape
    dm = D if d_model is None else int(d_model)
    dims = [int(d) for d in dims]
    if not dims:
        raise ValueError("dims is empty: pass the PE dimensions to draw, e.g. [0, 1, 8, 9]")
    bad = [d for d in dims if not 0 <= d < D]
    if bad:
        raise ValueError(f"dims {bad} are out of range: pe has {D} dimensions (0 .. {D - 1})")
    pos = np.arange(N)
    traces = []
    for d in dims:
        lam = wavelength(d, dm, layout)
        fn, _wave = wave(d, dm, layout)
        traces.append(
            dict(
                type="scatter",
                x=pos,
                y=p[:, d],
                mode="lines+markers",  # PE exists only at integer positions: the markers are the values used
                marker=dict(size=4),
                name=_("dim {d} ({fn}), wavelength {wavelength}").format(d=d, fn=fn, wavelength=f"{lam:,.1f}"),
                meta={"dim": d, "wavelength": lam, "fn": fn},
                hovertemplate=_("dim {d} ({fn}, wavelength {wavelength} positions)").format(d=d, fn=fn, wavelength=f"{lam:,.1f}")
                + "<br>"
                + _("position %{x}<br>value %{y:.3f}")
                + "<extra></extra>",
            )
        )
    bounded = np.abs(p).max() <= 1
    # the legend stands right of the plot (plotly's default x = 1.02 of the plot width): symbol (40 px) +
    # name, 2 x 10 px padding, and 16 px for the 2 % gap (enough up to an 800 px wide plot)
    legend_px = max(vc.text_px(t["name"]) + 40 for t in traces)
    legend_px = max(legend_px, vc.text_px(_("dimension"), vc.AXIS_TITLE_SIZE)) + 20 + 16
    layout = vc.base_layout(
        title
        or _(
            "Positional-encoding waves<br><sup>dimension pair i oscillates with wavelength 2π·10000^(2i/d_model) positions</sup>"
        ),
        height=380,
        legend=dict(title=dict(text=_("dimension")), orientation="v"),
        hovermode="x unified",
        margin=dict(
            l=vc.axis_margin(["−0.5"] if bounded else [f"{-np.abs(p).max():.2g}"], along_y=True, title=True),
            r=math.ceil(legend_px) + vc.MARGIN_MIN,
            t=80,
            b=vc.axis_margin([str(N - 1)], along_y=False, title=True),
        ),
        xaxis=vc.axis(_("position"), range=[0, max(N - 1, 1)]),
        yaxis=vc.axis(_("PE value"), range=[-1.1, 1.1] if bounded else None, zeroline=True),
    )
    return vc.figure(traces, layout)


def pe_similarity(pe, *, cosine: bool = True, title: str | None = None) -> go.Figure:
    """Similarity of every pair of positions, ``PE · PEᵀ`` (``(N, N)``), cosine-normalised by default.

    Nearby positions are similar and similarity fades with distance: a dot product of two
    positions depends only on their offset for sinusoidal PE, which lets attention find
    relative positions (section 3.5).

    Raises:
        ValueError: if ``pe`` is not a non-empty finite 2-D array.
    """
    p = _pe(pe).astype(np.float64)
    sim = p @ p.T  # (N, N)
    if cosine:
        norm = np.linalg.norm(p, axis=1)  # (N,)
        sim = sim / np.maximum(norm[:, None] * norm[None, :], 1e-12)
        r = 1.0
    else:
        r = max(float(np.abs(sim).max()), 1e-6)
    N = p.shape[0]
    what = _("cosine similarity") if cosine else _("dot product")
    heat = dict(
        type="heatmap",
        z=sim.astype(np.float32),
        x=np.arange(N),
        y=np.arange(N),
        **vc.diverging_colors(what, r),
        hovertemplate=_("position %{y} vs position %{x}") + f"<br>{what} %{{z:.3f}}<extra></extra>",
        name="similarity",
    )
    side = vc.axis_margin([str(N - 1)], along_y=True, title=True)
    alt = vc.alt_text(
        title or _("Position-by-position {what} of the positional encoding").format(what=what),
        rows=_("positions"),
        cols=_("positions"),
        shape=(N, N),
        notes=[_("colour: the {label} from −{r} (blue) through 0 (white) to +{r} (red)").format(label=what, r=f"{r:.2g}")],
    )
    layout = vc.base_layout(
        title
        or _("Position-by-position {what} of the positional encoding").format(what=what)
        + "<br><sup>"
        + _("the bright diagonal band: nearby positions look alike")
        + "</sup>",
        height=560,
        meta={"alt": alt},
        margin=dict(
            l=side, r=vc.colorbar_margin(what, [f"−{r / 2:.2g}"]), t=80, b=vc.axis_margin([str(N - 1)], along_y=False, title=True)
        ),
        xaxis=vc.axis(_("position"), constrain="domain", constraintoward="left"),
        yaxis=vc.axis(
            _("position"),
            autorange="reversed",
            scaleanchor="x",
            scaleratio=1,
            constrain="domain",
            constraintoward="top",
        ),
    )
    return vc.figure([heat], layout)


def word_order_figure(demo: WordOrder, *, title: str | None = None) -> go.Figure:
    """Why the model needs positional encoding, from ``analysis.analyze.word_order_demo``.

    Sentence B uses the same pieces as sentence A in another order (``b_tokens[i] ==
    a_tokens[perm[i]]``). For each position i of B the bars show ``||enc_B[i] − enc_A[perm[i]]||``
    (L2 distance between the encoder outputs of the same word in the two sentences): about 0
    without positional encoding (the encoder is permutation-equivariant, so "John loves Mary"
    and "Mary loves John" look the same to it), clearly above 0 with it.

    Args:
        demo: ``WordOrder``: tokens of both sentences, ``perm``, and for PE off / on the
            ``EncoderStates`` (encoder outputs ``a`` / ``b`` ``(S, d_model)``, ``max_diff``).

    Raises:
        ValueError: if ``demo`` is not a ``WordOrder``, the arrays do not match the tokens, or
            ``perm`` is not a permutation.
    """
    if not isinstance(demo, WordOrder):
        raise ValueError(f"demo must be the WordOrder that analysis.analyze.word_order_demo returns, got {type(demo).__name__}")
    a_tok = vc.check_tokens(demo.a_tokens, "demo.a_tokens")
    b_tok = vc.check_tokens(demo.b_tokens, "demo.b_tokens", len(a_tok), "demo.a_tokens")
    perm = [int(i) for i in demo.perm]
    S = len(a_tok)
    if sorted(perm) != list(range(S)):
        raise ValueError(f"demo.perm must be a permutation of 0..{S - 1}, got {perm}")
    states = {"pe_off": demo.pe_off, "pe_on": demo.pe_on}
    dist = {}
    for name, part in states.items():
        ea = vc.as_array(part.a, f"demo.{name}.a", 2)
        eb = vc.as_array(part.b, f"demo.{name}.b", 2)
        if ea.shape != eb.shape or ea.shape[0] != S:
            raise ValueError(f"demo.{name}: a {ea.shape} and b {eb.shape} must both be ({S}, d_model) for {S} tokens")
        dist[name] = np.linalg.norm(eb.astype(np.float64) - ea[perm].astype(np.float64), axis=1)  # (S,)
    shown_b = display(b_tok)
    shown_a = display(a_tok)
    ticks = [vc.esc(vc.short(t)) for t in shown_b]
    traces = []
    for name, label, color in (
        ("pe_off", _("without positional encoding"), "#9e9e9e"),
        ("pe_on", _("with positional encoding"), vc.HIGHLIGHT),
    ):
        d = dist[name]
        where = _("{token}: position {i} in B, position {j} in A")
        hover = [
            f"<b>{label}</b><br>"
            + where.format(token=vc.esc(shown_b[i]), i=i, j=perm[i])
            + f"<br>||enc_B[{i}] − enc_A[{perm[i]}]|| = {d[i]:.2e}"
            for i in range(S)
        ]
        traces.append(
            dict(
                type="bar",
                x=np.arange(S),
                y=d.astype(np.float32),
                name=label,
                marker=dict(color=color),
                text=[f"{v:.2g}" for v in d],
                textposition="outside",
                cliponaxis=False,
                hovertext=hover,
                hoverinfo="text",
                meta={"distance": d.tolist(), "max_diff": float(states[name].max_diff)},
            )
        )
    words = lambda toks: vc.esc("".join(t for t in toks if t not in ("<bos>", "<eos>", "<pad>")).strip())  # noqa: E731
    a_text, b_text = words(a_tok), words(b_tok)
    y_title = "‖enc_B[i] − enc_A[perm[i]]‖ (L2)"
    top, legend_row = 90, 26
    bottom = vc.axis_margin(ticks, along_y=False, title=True) + legend_row  # tokens, axis title, then the legend
    top_value = max(float(dist["pe_on"].max()), float(dist["pe_off"].max()))
    layout = vc.base_layout(
        title
        or _(
            "Word order: A = “{a}”, B = “{b}”<br><sup>distance between the encoder output of each word in B and of the same word in A; "
            "0 without positional encoding: the encoder cannot tell the orders apart</sup>"
        ).format(a=a_text, b=b_text),
        barmode="group",
        height=top
        + bottom
        + max(240, math.ceil(vc.text_px(y_title, vc.AXIS_TITLE_SIZE)) + 30),  # the plot as tall as its y title
        legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="bottom", yref="container"),
        meta={"perm": perm, "a_tokens": shown_a, "b_tokens": shown_b},
        margin=dict(
            l=vc.axis_margin([f"{top_value:.2g}", "0.5"], along_y=True, title=True),
            r=vc.MARGIN_MIN,
            t=top,
            b=bottom,
        ),
        xaxis=vc.axis(_("token of sentence B"), tickmode="array", tickvals=list(range(S)), ticktext=ticks),
        yaxis=vc.axis(y_title, rangemode="tozero"),
    )
    return vc.figure(traces, layout)
