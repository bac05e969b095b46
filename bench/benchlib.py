"""Shared helpers of the benchmark scripts: checkpoint choice, sentences, timing, machine facts, output.

Every script in ``bench/`` runs with plain ``python bench/<script>.py`` from the repository root
(or anywhere): importing this module puts the repository root on ``sys.path`` so ``model`` and
``viz`` import without installing the project. Results go to ``bench/results/<name>.json``.

Timing: ``measure`` runs ``warmup`` untimed calls, then ``repeats`` timed calls with
``time.perf_counter`` and reports the median (and the quartiles) in milliseconds. Comparisons
use ``measure_many``, which interleaves the contenders call by call (A, B, A, B, ...) in the same
process, so a slow spell of the machine hits both sides alike and the ratio stays fair.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after the sys.path line above, like every import of model/)

from model.checkpoint import Loaded, load_checkpoint  # noqa: E402

RESULTS = ROOT / "bench" / "results"
CHECKPOINTS = (ROOT / "pretrained" / "en-de", ROOT / "runs" / "en-de")
"""Where the English-German model is looked for, in order: the shipped one, then the training run."""

# Caption-style English (the register of Multi30k, one of the corpora the model was trained on), exactly 5, 15
# and 40 words long (``words()`` counts them; the scripts assert the counts).
SENTENCES = {
    5: "A dog runs through grass.",
    15: "Two young men in blue jackets are playing guitars on a street corner at night.",
    40: (
        "A woman in a red dress and a man in a black suit are dancing together on a wooden stage "
        "while a small crowd of people watches them and a band plays music behind them under bright yellow stage lights."
    ),
}

# More caption-style sentences: the ten analyses of the memory benchmark and the long sources of
# the cost-growth benchmark (joined until the source reaches the model's max_len).
MORE_SENTENCES = [
    "A little girl in a pink shirt is climbing the stairs of a wooden playhouse.",
    "Three men are working on a roof under a clear blue sky.",
    "A brown dog is jumping over a fallen tree in the forest.",
    "An older woman sells fruit and vegetables at a market stall.",
    "A boy in a red helmet rides his bicycle down a dirt path.",
    "Two children are building a sandcastle on the beach near the water.",
    "A man with a beard is cooking food on a grill in his backyard.",
    "A group of people stand outside a cafe waiting for the bus.",
    "A young woman is reading a book on a bench in the park.",
    "A black and white cat sleeps on a sunny windowsill.",
    "Several football players in white uniforms run across the green field.",
    "A street performer juggles colorful balls in front of a crowd.",
]


def words(text: str) -> int:
    """Number of whitespace-separated words."""
    return len(text.split())


# -- checkpoint ---------------------------------------------------------------------------------


def find_checkpoint(path: str | None = None) -> Path:
    """``path`` if given, else the first of ``CHECKPOINTS`` that holds ``model.safetensors``.

    Raises FileNotFoundError if none does.
    """
    if path:
        return Path(path)
    for p in CHECKPOINTS:
        if (p / "model.safetensors").exists():
            return p
    raise FileNotFoundError(f"no checkpoint: none of {[str(p) for p in CHECKPOINTS]} holds model.safetensors; pass --ckpt DIR")


def load(path: str | None = None) -> Loaded:
    """Load the benchmark checkpoint on the CPU (eval mode, float32)."""
    return load_checkpoint(find_checkpoint(path), "cpu")


# -- timing -------------------------------------------------------------------------------------


@dataclass
class Timing:
    """Wall-clock times of one measured callable, in milliseconds."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    min_ms: float
    n: int

    def __str__(self) -> str:
        return f"{self.median_ms:.1f}"


def _summary(times_s: list[float]) -> Timing:
    ms = sorted(t * 1000 for t in times_s)
    if len(ms) >= 2:
        q1, _, q3 = statistics.quantiles(ms, n=4, method="inclusive")
    else:
        q1 = q3 = ms[0]
    return Timing(statistics.median(ms), q1, q3, ms[0], len(ms))


def measure(fn: Callable[[], object], *, repeats: int, warmup: int) -> Timing:
    """Median wall time of ``fn()`` over ``repeats`` calls after ``warmup`` untimed calls."""
    return measure_many({"x": fn}, repeats=repeats, warmup=warmup)["x"]


def measure_many(fns: dict[str, Callable[[], object]], *, repeats: int, warmup: int) -> dict[str, Timing]:
    """Time several callables interleaved (one call of each per round), after ``warmup`` rounds.

    Returns name -> ``Timing``. Interleaving keeps a ratio between them fair when the machine's
    speed drifts (another process, CPU frequency) during the measurement.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return {k: _summary(v) for k, v in times.items()}


# -- machine and output -------------------------------------------------------------------------


def machine() -> dict:
    """Facts about this machine and software that the numbers depend on."""
    model_name, cores = platform.processor() or "?", os.cpu_count()
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        model_name = fields.get("Model name", model_name).strip()
        cores = int(fields.get("CPU(s)", cores))
    except (OSError, subprocess.CalledProcessError, ValueError):
        pass
    return {
        "cpu": model_name,
        "cores": cores,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
        "utc": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S"),
    }


def md_table(headers: list[str], rows: list[list]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


Cell = str | tuple[str, str] | Callable[[dict], object]
"""How ``results_table`` fills a column from a result row: see there."""


def results_table(rows: list[dict], columns: dict[str, Cell]) -> str:
    """A GitHub markdown table of result rows: one line per row, one column per ``columns`` item.

    ``columns`` maps each header to what its cells show, from the row ``r``:

    - ``key``: ``r[key]`` as it is (a ``Timing`` shows its median in ms with one decimal);
    - ``(key, template)``: ``template.format(r[key])``, e.g. ``("speedup", "{:.2f}x")``;
    - a function of ``r``, for anything else.
    """

    def cell(r: dict, how: Cell) -> object:
        if callable(how):
            return how(r)
        if isinstance(how, tuple):
            key, template = how
            return template.format(r[key])
        return r[how]

    return md_table(list(columns), [[cell(r, how) for how in columns.values()] for r in rows])


def target_line(what: str, met: bool) -> str:
    """The sentence under a table that says whether the benchmark's target was met."""
    return f"Target: {what}: **{verdict(met)}**."


def jsonable(x):
    """Dataclasses (``Timing``) and paths as plain JSON values."""
    if isinstance(x, Timing):
        return asdict(x)
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    return x


def write_result(name: str, result: dict) -> Path:
    """Write ``result`` (plus the machine facts) to ``bench/results/<name>.json``; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **jsonable(result)}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def base_args(description: str) -> argparse.ArgumentParser:
    """Arguments every script takes: ``--ckpt``, ``--quick`` (smoke test), ``--repeats``, ``--warmup``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--ckpt", help="checkpoint folder (default: pretrained/en-de, else runs/en-de)")
    ap.add_argument("--quick", action="store_true", help="smoke test: few repeats, small inputs; numbers mean nothing")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs per measurement (default per script)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed warm-up runs (default per script)")
    ap.add_argument("--no-write", action="store_true", help="print the table only; do not write bench/results/")
    return ap


def reps(args, repeats: int, warmup: int) -> tuple[int, int]:
    """(repeats, warmup) from the command line, the script's defaults, or 2/1 with ``--quick``."""
    if args.quick:
        return args.repeats or 2, args.warmup or 1
    return args.repeats or repeats, args.warmup if args.warmup is not None else warmup


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def run_script(
    name: str,
    args: argparse.Namespace,
    run: Callable[..., dict],
    table: Callable[[dict], str],
    defaults: tuple[int, int],
    *,
    after_table: Callable[[Loaded], object] | None = None,
    **run_kwargs,
) -> dict:
    """What a benchmark script's ``main()`` does once ``args`` (from ``base_args``) are parsed.

    Loads the checkpoint (``--ckpt``), calls ``run(loaded, repeats=..., warmup=..., **run_kwargs)``
    with the counts ``reps(args, *defaults)`` gives, adds ``checkpoint``, ``repeats``, ``warmup``
    and the wall-clock ``seconds`` to its result, prints ``table(result)``, then calls
    ``after_table(loaded)`` if given, and unless ``--no-write`` writes the result to
    ``bench/results/<name>.json``. Returns the result.
    """
    repeats, warmup = reps(args, *defaults)
    loaded = load(args.ckpt)
    t0 = time.perf_counter()
    res = run(loaded, repeats=repeats, warmup=warmup, **run_kwargs)
    res |= {"checkpoint": loaded.path, "repeats": repeats, "warmup": warmup, "seconds": time.perf_counter() - t0}
    print(table(res))
    if after_table is not None:
        after_table(loaded)
    if not args.no_write:
        print(f"\nwrote {write_result(name, res)}")
    return res


# -- other processes ----------------------------------------------------------------------------


def _proc_table() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds used so far) of every process, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)  # ppid, utime + stime
    return out


class ForeignCPU:
    """CPU seconds other processes (not this one or its descendants) use while it runs.

    A background thread samples /proc once a second. Use as a context manager; ``seconds`` is the
    total afterwards. The benchmarks assume an otherwise idle machine: more than a few percent of
    a core taken by others makes their numbers (and ratios with 2 threads) unreliable.
    """

    def __init__(self, period: float = 1.0):
        self.period, self.seconds, self._stop = period, 0.0, None

    def _mine(self, table: dict) -> set[int]:
        mine, changed = {os.getpid()}, True
        while changed:
            changed = False
            for pid, (ppid, _) in table.items():
                if ppid in mine and pid not in mine:
                    mine.add(pid)
                    changed = True
        return mine

    def _loop(self) -> None:
        last = _proc_table()
        while not self._stop.wait(self.period):
            now = _proc_table()
            mine = self._mine(now)
            self.seconds += sum(max(0.0, cpu - last.get(pid, (0, cpu))[1]) for pid, (_, cpu) in now.items() if pid not in mine)
            last = now

    def __enter__(self) -> ForeignCPU:
        import threading

        self._stop = threading.Event()
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.wall = time.perf_counter() - self._t0

    @property
    def share(self) -> float:
        """Average cores' worth used by other processes (0.05 = 5 % of one core)."""
        return self.seconds / max(self.wall, 1e-9)
