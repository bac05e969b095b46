"""Run every benchmark in one process and write the tables into bench/README.md.

    python bench/run_all.py [--ckpt DIR] [--models DIR] [--model en-de] [--quick] [--skip app,marian,...]

Order: analysis (1), KV cache (2), nn.Transformer (3), MarianMTModel (4), app in Chromium (5, and 5b with
Streamlit's default GC), figure payload per view (6), cost growth (7). Every comparison (with/without attention, cached/
full, ours/nn.Transformer, ours/Marian) is timed interleaved inside this one process. The app
benchmark starts its own ``streamlit run`` servers (that is what it measures).

Writes ``bench/results/<name>.json`` per benchmark, ``bench/results/all.json``, and replaces the
part of ``bench/README.md`` between ``<!-- results:start -->`` and ``<!-- results:end -->``
(the hand-written notes around it stay).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
import traceback
from pathlib import Path

import bench_analysis
import bench_app
import bench_growth
import bench_kv_cache
import bench_payload
import bench_vs_marian
import bench_vs_torch
import benchlib as bl

README = bl.ROOT / "bench" / "README.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"
NAMES = ("analysis", "kv_cache", "vs_torch", "vs_marian", "app", "app_gc", "payload", "growth")
WITH_GC = [
    "--runner.postScriptGC=true"
]  # Streamlit's default, before .streamlit/config.toml turned it off: gc.collect(2) after every rerun
TITLES = {
    "analysis": "1. Analysis latency (encode + greedy decode + every attention map)",
    "kv_cache": "2. KV cache: incremental decoding vs full recomputation",
    "vs_torch": "3. Against torch.nn.Transformer (same dimensions, same weights)",
    "vs_marian": "4. Against Hugging Face MarianMTModel (same dimensions, random weights, output_attentions=True)",
    "app": "5. The app in Chromium: cold start, redraw, memory, websocket payload",
    "app_gc": "5b. The same with Streamlit's default `--runner.postScriptGC=true` (compared with 5)",
    "payload": "6. Figure payload per view (plotly JSON sent to the browser)",
    "growth": "7. Cost growth with the source length",
}


def machine_block(m: dict, ckpt, command: str) -> str:
    return "\n".join(
        [
            f"- Machine: {m['cpu']}, {m['cores']} cores",
            f"- Software: Python {m['python']}, torch {m['torch']} with {m['torch_threads']} threads ({m['cpus_usable']} CPUs usable)",
            f"- Checkpoint: `{ckpt.relative_to(bl.ROOT) if ckpt.is_relative_to(bl.ROOT) else ckpt}`",
            f"- Load average at start: {m['load_avg_1m_at_start']}",
            f"- Command: `{command}`",
        ]
    )


def update_readme(block: str) -> None:
    text = README.read_text() if README.exists() else f"# Benchmarks\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    README.write_text(f"{head}{START}\n{block}\n{END}{tail}")


def analysis_job(loaded, profile: bool, reps: dict, short: dict) -> dict:
    res = bench_analysis.run(loaded, **reps, **short)
    if profile:
        res["profile"] = bench_analysis.profile_analyze(loaded.model, loaded.tokenizer, bl.SENTENCES[15])
        print(res["profile"])
    return res


TABLES = {
    "analysis": bench_analysis.table,
    "kv_cache": bench_kv_cache.table,
    "vs_torch": bench_vs_torch.table,
    "vs_marian": bench_vs_marian.table,
    "app": bench_app.table,
    "app_gc": bench_app.table,
    "payload": bench_payload.table,
    "growth": bench_growth.table,
}


def as_timings(x):
    """JSON results back into ``Timing`` objects where a dict has exactly Timing's fields (for the tables)."""
    if isinstance(x, dict):
        if set(x) == set(bl.Timing.__dataclass_fields__):
            return bl.Timing(**x)
        return {k: as_timings(v) for k, v in x.items()}
    if isinstance(x, list):
        return [as_timings(v) for v in x]
    return x


def render(results: dict) -> str:
    """The README block (machine, command, one table per benchmark) from ``all.json``-shaped results."""
    results = as_timings(results)
    run = results["_run"]
    ckpt = Path(run["checkpoint"])
    parts = [machine_block(run["machine"], ckpt, run["command"])]
    if run.get("quick"):
        parts.insert(0, "_Smoke test (`--quick`): these numbers mean nothing._")
    for name in NAMES:
        res = results.get(name)
        if res is None:
            continue
        if "error" in res:
            text = f"**failed**: `{res['error']}`"
        else:
            text = TABLES[name](res)
            share = res.get("other_processes_cpu_share", 0.0)
            if share > 0.05:
                text += f"\n\n**Warning**: other processes used {share:.0%} of a core during this benchmark; its numbers are unreliable."
        parts.append(f"### {TITLES[name]}\n\n{text}")
    return "\n\n".join(parts)


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--models", help="folder of checkpoint folders for the app (ATTENTION_EXPLORER_MODELS); default pretrained/")
    ap.add_argument("--model", help="checkpoint name inside it (default: the app's default)")
    ap.add_argument("--skip", default="", help=f"comma-separated benchmarks to leave out: {','.join(NAMES)}")
    ap.add_argument("--profile", action="store_true", help="torch.profiler tables for benchmarks 1 and 3")
    ap.add_argument("--py-spy", action="store_true", help="py-spy profile of the app server during benchmark 5")
    ap.add_argument("--from-results", action="store_true", help="only rewrite bench/README.md from bench/results/all.json")
    args = ap.parse_args()
    if args.from_results:
        update_readme(render(json.loads((bl.RESULTS / "all.json").read_text())))
        print(f"rewrote {README} from {bl.RESULTS / 'all.json'}")
        return
    asked = {s.strip() for s in args.skip.split(",") if s.strip()}
    skip = {n for n in NAMES if n in asked or n.removeprefix("vs_") in asked}  # "marian" names vs_marian too
    if unknown := asked - skip - {n.removeprefix("vs_") for n in skip}:
        ap.error(f"--skip: no benchmark named {', '.join(sorted(unknown))}; the names are {', '.join(NAMES)}")
    command = "python " + " ".join(shlex.quote(a) for a in ["bench/run_all.py", *sys.argv[1:]])
    loaded = bl.load(args.ckpt)
    quick = args.quick
    machine = bl.machine()
    print(
        f"checkpoint {loaded.path}; {machine['cpu']}, {machine['cores']} cores, torch {machine['torch']}, {machine['torch_threads']} threads",
        flush=True,
    )

    def reps(r, w) -> dict:
        """repeats/warmup (and the lengths a smoke test keeps) for a benchmark's run()."""
        return dict(zip(("repeats", "warmup"), bl.reps(args, r, w), strict=True))

    short = {"lengths": (5, 15)} if quick else {}

    def app_run(**kw):
        """A run of the app benchmark (cold starts, slider moves, sentences: fewer with --quick)."""
        return lambda: bench_app.run(
            models=args.models,
            model=args.model,
            cold=1 if quick else 3,
            moves=2 if quick else 6,
            sentences=3 if quick else 10,
            **kw,
        )

    jobs = {
        "analysis": (lambda: analysis_job(loaded, args.profile, reps(30, 5), short), bench_analysis.table),
        "kv_cache": (
            lambda: bench_kv_cache.run(loaded, **reps(10, 2), **({"lengths": (10, 30)} if quick else {})),
            bench_kv_cache.table,
        ),
        "vs_torch": (
            lambda: bench_vs_torch.run(loaded, **reps(15, 3), profile=args.profile),
            bench_vs_torch.table,
        ),
        "vs_marian": (lambda: bench_vs_marian.run(loaded, **reps(20, 3), **short), bench_vs_marian.table),
        "app": (app_run(py_spy=args.py_spy), bench_app.table),
        "app_gc": (app_run(flags=WITH_GC), bench_app.table),
        "payload": (lambda: bench_payload.run(models=args.models, model=args.model), bench_payload.table),
        "growth": (
            lambda: bench_growth.run(loaded, **reps(10, 2), models=args.models, model=args.model, quick=quick),
            bench_growth.table,
        ),
    }
    results = {}
    t_all = time.perf_counter()
    for name in NAMES:
        if name in skip:
            continue
        run, table = jobs[name]
        print(f"\n## {TITLES[name]}", flush=True)
        t0 = time.perf_counter()
        try:
            with bl.ForeignCPU() as foreign:
                res = run()
        except Exception as e:  # one failing benchmark must not lose the others' numbers
            traceback.print_exc()
            res = {"error": f"{type(e).__name__}: {e}"}
            text = f"**failed**: `{res['error']}`"
        else:
            text = table(res)
            res["other_processes_cpu_share"] = foreign.share
            if foreign.share > 0.05:
                text += f"\n\n**Warning**: other processes used {foreign.share:.0%} of a core during this benchmark; its numbers are unreliable."
            print(f"(other processes: {foreign.seconds:.1f} CPU s in {foreign.wall:.0f} s)", flush=True)
        res["seconds"] = time.perf_counter() - t0
        res["checkpoint"] = loaded.path
        results[name] = res
        print(text, flush=True)
        if not args.no_write and "error" not in res:
            bl.write_result(name, res)
            if name == "growth":
                bench_growth.write_html(res)
    print(f"\nall benchmarks: {time.perf_counter() - t_all:.0f} s")
    if args.no_write:
        return
    results["_run"] = {"command": command, "machine": machine, "checkpoint": loaded.path, "quick": quick}
    path = bl.write_result("all", results)
    update_readme(render(bl.jsonable(results)))
    print(f"wrote {path} and {README}")


if __name__ == "__main__":
    main()
