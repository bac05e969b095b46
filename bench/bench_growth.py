"""Benchmark 7: how analysis time and figure payload grow with the source, from 5 words to max_len tokens.

    python bench/bench_growth.py [--ckpt DIR] [--models DIR] [--model en-de] [--quick]

Sources: the 5-, 15- and 40-word sentences, then caption sentences joined and cut to 64 tokens
and to the model's limit (``max_len - 1`` pieces + <eos> = ``max_len`` tokens).
time: ``analysis.analyze.analyze`` (benchmark 1), median, in this process.
payload: plotly figure JSON the app sends for the Attention and the Step views
(``bench_payload.py``, AppTest), and the float32 attention maps themselves (``Analysis.maps``).
Also writes ``bench/results/growth.html``, the same numbers as a plotly chart.
"""

from __future__ import annotations

import time

import bench_payload as bp
import benchlib as bl

from analysis.analyze import analyze


def sources(tok, max_len: int) -> list[tuple[str, str]]:
    """(label, text) from 5 words up to the longest source the model reads."""
    out = [(f"{n} words", bl.SENTENCES[n]) for n in (5, 15, 40)]
    long_text = " ".join(bl.MORE_SENTENCES + list(bl.SENTENCES.values()))
    ids = tok.encode(long_text)
    assert len(ids) >= max_len, "not enough text to reach max_len"
    for n in (64, max_len - 1):
        if n > len(tok.encode(out[-1][1])):
            out.append((f"{n + 1} tokens" + (" (max_len)" if n == max_len - 1 else ""), tok.decode(ids[:n]).strip()))
    return out


def run(
    loaded,
    *,
    repeats: int = 10,
    warmup: int = 2,
    models: str | None = None,
    model: str | None = None,
    payload: bool = True,
    quick: bool = False,
) -> dict:
    m, tok = loaded.model, loaded.tokenizer
    srcs = sources(tok, m.cfg.max_len)
    if quick:
        srcs = [srcs[0], srcs[-1]]
    rows = []
    at = None
    if payload:
        with bp.models_env(models):
            at = bp.new_app(model)
    for label, text in srcs:
        a = analyze(m, tok, text)
        t = bl.measure(lambda text=text: analyze(m, tok, text), repeats=repeats, warmup=warmup)
        maps_bytes = sum(x.nbytes for x in (a.maps.enc_self, a.maps.dec_self, a.maps.cross))
        row = {
            "source": label,
            "src_tokens": len(a.source.ids),
            "decoder_rows": len(a.tgt_in_tokens),
            "analyze": t,
            "maps_bytes": maps_bytes,
        }
        if at is not None:
            with bp.models_env(models):
                pay = {r["view"]: r for r in bp.view_payloads(at, text, views=("attention", "steps"))}
            row["figure_bytes"] = {v: r["figure_bytes"] for v, r in pay.items()}
            row["server_run_s"] = {v: r["server_run_s"] for v, r in pay.items()}
        rows.append(row)
    return {"rows": rows}


def table(res: dict) -> str:
    rows = []
    for r in res["rows"]:
        fb = r.get("figure_bytes", {})
        rows.append(
            [
                r["source"],
                r["src_tokens"],
                r["decoder_rows"],
                f"{r['analyze'].median_ms:.0f}",
                f"{r['maps_bytes'] / 1024:.0f}",
                f"{fb['attention'] / 1024:.0f}" if fb else "-",
                f"{fb['steps'] / 1024:.0f}" if fb else "-",
            ]
        )
    head = [
        "source",
        "src tokens",
        "decoder rows",
        "analyze (ms)",
        "float32 maps (KiB)",
        "Attention view figures (KiB)",
        "Step view figures (KiB)",
    ]
    return bl.md_table(head, rows)


def write_html(res: dict) -> None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    x = [r["src_tokens"] for r in res["rows"]]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(go.Scatter(x=x, y=[r["analyze"].median_ms for r in res["rows"]], name="analyze (ms)", mode="lines+markers"))
    if "figure_bytes" in res["rows"][0]:
        for v in ("attention", "steps"):
            y = [r["figure_bytes"][v] / 1024 for r in res["rows"]]
            fig.add_trace(
                go.Scatter(x=x, y=y, name=f"{v} view figures (KiB)", mode="lines+markers", line={"dash": "dot"}), secondary_y=True
            )
    fig.update_layout(title="Analysis time and figure payload against source length", xaxis_title="source tokens (incl. <eos>)")
    fig.update_yaxes(title_text="ms", secondary_y=False)
    fig.update_yaxes(title_text="KiB", secondary_y=True)
    bl.RESULTS.mkdir(parents=True, exist_ok=True)
    fig.write_html(bl.RESULTS / "growth.html", include_plotlyjs="cdn")


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--models", help="folder of checkpoint folders for the app (ATTENTION_EXPLORER_MODELS)")
    ap.add_argument("--model", help="checkpoint name inside it (default: the app's default)")
    ap.add_argument("--no-payload", action="store_true", help="time only; do not run the app for figure sizes")
    args = ap.parse_args()
    repeats, warmup = bl.reps(args, 10, 2)
    loaded = bl.load(args.ckpt)
    t0 = time.perf_counter()
    res = run(
        loaded,
        repeats=repeats,
        warmup=warmup,
        models=args.models,
        model=args.model,
        payload=not args.no_payload,
        quick=args.quick,
    )
    res |= {
        "checkpoint": loaded.path,
        "max_len": loaded.model.cfg.max_len,
        "repeats": repeats,
        "warmup": warmup,
        "seconds": time.perf_counter() - t0,
    }
    print(table(res))
    if not args.no_write:
        print(f"\nwrote {bl.write_result('growth', res)}")
        write_html(res)


if __name__ == "__main__":
    main()
