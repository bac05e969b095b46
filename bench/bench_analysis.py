"""Benchmark 1: analysis latency on the English-German model, with and without attention maps.

    python bench/bench_analysis.py [--ckpt DIR] [--quick]

"with attention" is ``analysis.analyze.analyze``: tokenize, encode, greedy decode step by step
(``generate_steps`` returning each step's attention rows), and the full ``(L, H, T_q, T_k)`` maps
assembled from those rows, as numpy: exactly what the app computes for a new sentence. Its parts:
the steps with their attention rows, and the same steps on the fused path (no weights).
"without attention" is ``model.decoding.greedy_batch`` on the same tokens (tokenize + decode to
text included), the fused ``scaled_dot_product_attention`` path with the key/value cache.
Both produce the same translation (asserted). Sources are 5, 15 and 40 caption-style words.
Target (model issue): the 15-word sentence with all attention in <= 50 ms on the CPU.

The rows run with the torch threads the app gives each model call (``ui/state.py``'s ``MODEL_CALLS``,
``serving.limits.CallLimit.for_cores()``: one thread per call, one call per core), not torch's default
of one thread per core; the thread sweep times both.

"matrix floor" times only the matrix-vector products one decoding step cannot avoid (every decoder
layer's projections and feed-forward, and the output projection over the vocabulary), with the
model's own weights, one after another: a decoder step can be no faster than that, whatever the code
around it does. Times the number of steps, it is the floor of the greedy decode.
"""

from __future__ import annotations

import benchlib as bl
import torch

from analysis.analyze import analyze, prepare_source
from model.decoding import generate_steps, greedy_batch, max_new_tokens
from serving.limits import CallLimit

TARGET_MS = 50.0
APP_THREADS = CallLimit.for_cores().threads  # torch threads in each of the app's model calls


def run(loaded, *, repeats: int = 30, warmup: int = 5, lengths=(5, 15, 40)) -> dict:
    """Time analyze vs greedy_batch for each sentence length, on the app's ``APP_THREADS`` torch threads;
    returns rows and the target verdict."""
    model, tok = loaded.model, loaded.tokenizer
    cfg = model.cfg
    rows = []
    default_threads = torch.get_num_threads()
    torch.set_num_threads(APP_THREADS)
    try:
        for n_words in lengths:
            text = bl.SENTENCES[n_words]
            assert bl.words(text) == n_words, (n_words, bl.words(text))
            ref = analyze(model, tok, text)

            def plain(text=text):
                src = prepare_source(tok, text, cfg.max_len)
                out = greedy_batch(
                    model, torch.tensor([src.ids]), max_new=min(max_new_tokens(model, len(src.ids)), cfg.max_len - 1)
                )[0]
                return tok.decode(out).strip(), out

            assert plain()[1] == ref.out_ids, "greedy_batch and analyze disagree on the translation"
            src = ref.source
            budget = min(max_new_tokens(model, len(src.ids)), cfg.max_len - 1)

            def steps(need_weights: bool, src=src, budget=budget):
                return [s.chosen for s in generate_steps(model, src.ids, max_new=budget, k=1, need_weights=need_weights)]

            t = bl.measure_many(
                {
                    "analyze": lambda text=text: analyze(model, tok, text),
                    "greedy": plain,
                    "steps_maps": lambda: steps(True),
                    "steps_fused": lambda: steps(False),
                },
                repeats=repeats,
                warmup=warmup,
            )
            rows.append(
                {
                    "words": n_words,
                    "src_tokens": len(src.ids),
                    "out_tokens": len(ref.out_ids) + int(ref.finished),  # decoding steps (incl. <eos> when it came)
                    "analyze": t["analyze"],
                    "greedy_no_attention": t["greedy"],
                    "part_steps_maps": t["steps_maps"],
                    "part_steps_fused": t["steps_fused"],
                    "attention_overhead": t["analyze"].median_ms / t["greedy"].median_ms,
                    "translation": ref.translation,
                }
            )
    finally:
        torch.set_num_threads(default_threads)
    threads = thread_sweep(model, tok, bl.SENTENCES[15], repeats=repeats, warmup=warmup)
    r15 = next((r for r in rows if r["words"] == 15), None)
    floor = matrix_floor(model, repeats=repeats * 5, warmup=warmup)
    for r in rows:
        r["matrix_floor_ms"] = floor["step"].median_ms * r["out_tokens"]
    met = None if r15 is None else r15["analyze"].median_ms <= TARGET_MS
    return {
        "rows": rows,
        "app_threads": APP_THREADS,
        "threads": threads,
        "matrix_floor": floor,
        "target": {"what": "15 words, all attention, median ms", "limit_ms": TARGET_MS, "met": met},
    }


@torch.inference_mode()
def matrix_floor(model, *, repeats: int, warmup: int) -> dict:
    """Time the matrix-vector products of one decoding step (batch 1) with the model's weights.

    Per decoder layer: self-attention W_q, W_k, W_v, W_o, cross-attention W_q, W_o (the memory's
    keys and values are computed once per source), feed-forward W_1, W_2; then the output projection
    ``(V_tgt, D)``, in the ``(D, V_tgt)`` layout ``Transformer.logits`` reads at inference (and, for comparison, from
    the embedding's own ``(V_tgt, D)`` rows). Returns the timings of the layers and of the output projection, and the megabytes of
    weights a step reads.
    """
    import torch.nn.functional as F

    D = model.cfg.d_model
    layers = [
        (lin.weight, lin.bias)
        for layer in model.decoder
        for lin in (
            layer.self_attn.w_q,
            layer.self_attn.w_k,
            layer.self_attn.w_v,
            layer.self_attn.w_o,
            layer.cross_attn.w_q,
            layer.cross_attn.w_o,
            layer.ff.w_1,
            layer.ff.w_2,
        )
    ]
    out_w = model.generator_weight  # (V_tgt, D)
    out_w_t = model._generator_weight_t(out_w)  # (D, V_tgt): the contiguous copy eval() made, the layout logits reads
    x, h = torch.randn(1, 1, D), torch.randn(1, 1, model.cfg.d_ff)

    def decoder_products():
        for w, b in layers:
            F.linear(x if w.size(1) == D else h, w, b)

    def output_projection():
        return x @ out_w_t  # (1, 1, V)

    def output_projection_row_major():
        return x @ out_w.T  # (1, 1, V): the same product read from the (V, D) embedding rows, as before the (D, V) copy

    def step():
        decoder_products()
        output_projection()

    t = bl.measure_many(
        {
            "decoder_layers": decoder_products,
            "output_projection": output_projection,
            "output_projection_row_major": output_projection_row_major,
            "step": step,
        },
        repeats=repeats,
        warmup=warmup,
    )
    mb = (sum(w.numel() + b.numel() for w, b in layers) + out_w.numel()) * out_w.element_size() / 2**20
    return {**t, "weights_mb_per_step": mb}


def thread_sweep(model, tok, text: str, *, repeats: int, warmup: int) -> dict:
    """analyze(text) with 1 thread and with torch's default (one per core): the per-step ops are small."""
    n = torch.get_num_threads()
    out = {}
    for k in sorted({1, n}):
        torch.set_num_threads(k)
        try:
            out[k] = bl.measure(lambda: analyze(model, tok, text), repeats=repeats, warmup=warmup)
        finally:
            torch.set_num_threads(n)
    return out


def profile_analyze(model, tok, text: str, n: int = 10) -> str:
    """torch.profiler table of ``n`` calls of analyze(text): the top operators by self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    analyze(model, tok, text)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n):
            analyze(model, tok, text)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)


def table(res: dict) -> str:
    columns = {
        "words": "words",
        "src tokens": "src_tokens",
        "out tokens": "out_tokens",
        "analyze, all attention (ms)": "analyze",
        "of which encode + steps with rows / fused (ms)": lambda r: f"{r['part_steps_maps']} / {r['part_steps_fused']}",
        "greedy, no attention (ms)": "greedy_no_attention",
        "cost of attention": ("attention_overhead", "{:.2f}x"),
        "matrix floor of the steps (ms)": ("matrix_floor_ms", "{:.1f}"),
    }
    t = res["target"]
    foot = f"\n\nTimed with {res.get('app_threads', 1)} torch thread(s) per call, as the app's model calls run."
    if t["met"] is not None:
        foot += "\n" + bl.target_line(f"15 words with all attention <= {t['limit_ms']:.0f} ms", t["met"])
    th = res.get("threads", {})
    if len(th) > 1:
        foot += (
            "\nThreads, 15 words, analyze: "
            + ", ".join(f"{k} thread(s) {v.median_ms:.1f} ms" for k, v in sorted(th.items()))
            + "."
        )
    fl = res.get("matrix_floor")
    if fl:
        foot += (
            f"\nMatrix floor of one decoding step: {fl['step'].median_ms:.2f} ms ({fl['weights_mb_per_step']:.1f} MB of float32"
            f" weights read: decoder layers {fl['decoder_layers'].median_ms:.2f} ms, output projection over the vocabulary"
            f" {fl['output_projection'].median_ms:.2f} ms"
            + (
                f"; read from the (V, D) embedding rows instead of eval()'s (D, V) copy: {fl['output_projection_row_major'].median_ms:.2f} ms"
                if "output_projection_row_major" in fl
                else ""
            )
            + ")."
        )
    return bl.results_table(res["rows"], columns) + foot


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--profile", action="store_true", help="print a torch.profiler table of analyze on the 15-word sentence")
    args = ap.parse_args()

    def profile(loaded) -> None:
        print(profile_analyze(loaded.model, loaded.tokenizer, bl.SENTENCES[15]))

    lengths = (5, 15) if args.quick else (5, 15, 40)
    bl.run_script("analysis", args, run, table, (30, 5), after_table=profile if args.profile else None, lengths=lengths)


if __name__ == "__main__":
    main()
