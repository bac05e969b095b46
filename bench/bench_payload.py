"""Benchmark 6: size of the figure payload the app sends to the browser, per view.

    python bench/bench_payload.py [--models DIR] [--model en-de] [--quick]

Runs ``app.py`` headless with ``streamlit.testing.v1.AppTest`` (no browser), types the 15-word
sentence, opens each view and sums the plotly figure JSON of every chart on it: the exact
``PlotlyChart.spec`` strings Streamlit puts into its websocket messages (plotly encodes the float32
attention arrays as base64). The browser benchmark (``bench_app.py``) measures the websocket
frames themselves, which add the rest of the page (tables, text, widget state).

``--models`` points the app at a folder of checkpoints (``ATTENTION_EXPLORER_MODELS``; default the
app's own ``pretrained/``), ``--model`` picks one of them.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import benchlib as bl

APP = bl.ROOT / "app.py"
VIEWS = ("translate", "attention", "steps", "masks", "stats", "shapes", "positional")  # ui/pages/<view>.py


@contextmanager
def models_env(models: str | None):
    """Set ``ATTENTION_EXPLORER_MODELS`` for the app while inside (nothing if ``models`` is None)."""
    old = os.environ.get("ATTENTION_EXPLORER_MODELS")
    if models:
        os.environ["ATTENTION_EXPLORER_MODELS"] = str(models)
    try:
        yield
    finally:
        if models and old is None:
            os.environ.pop("ATTENTION_EXPLORER_MODELS", None)
        elif models:
            os.environ["ATTENTION_EXPLORER_MODELS"] = old


def new_app(model: str | None):
    """A fresh ``AppTest`` of app.py, run once (model loaded, default sentence analysed)."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=300)
    if model:
        at.query_params["model"] = model
    at.run()
    if at.exception:
        raise RuntimeError(f"app.py raised: {at.exception[0].message}")
    return at


def figure_bytes(at) -> tuple[int, int]:
    """(number of plotly charts, total bytes of their figure JSON) on the current page."""
    specs = [c.proto.spec for c in at.get("plotly_chart")]
    return len(specs), sum(len(s.encode()) for s in specs)


def view_payloads(at, text: str, views=VIEWS) -> list[dict]:
    """For ``text``: per view, the charts, their figure bytes and the AppTest run time (server side only)."""
    from streamlit.util import calc_hash

    at.text_input(key="sentence").set_value(text)
    rows = []
    for view in views:
        t0 = time.perf_counter()
        at._page_hash = calc_hash(view)  # open /<view>: the pages are functions, AppTest.switch_page finds files only
        at.run()
        dt = time.perf_counter() - t0
        if at.exception:
            raise RuntimeError(f"view {view}: app.py raised: {at.exception[0].message}")
        n, size = figure_bytes(at)
        rows.append({"view": view, "charts": n, "figure_bytes": size, "server_run_s": dt})
    return rows


def run(*, models: str | None = None, model: str | None = None, text: str | None = None) -> dict:
    text = text or bl.SENTENCES[15]
    with models_env(models):
        at = new_app(model)
        rows = view_payloads(at, text)
    return {"sentence": text, "rows": rows}


def table(res: dict) -> str:
    rows = [[r["view"], r["charts"], f"{r['figure_bytes'] / 1024:.1f}"] for r in res["rows"]]
    return (
        bl.md_table(["view", "plotly charts", "figure JSON (KiB)"], rows)
        + f"\n\nSentence: “{res['sentence']}” (AppTest, figure JSON only)."
    )


def main() -> None:
    ap = bl.base_args(__doc__.splitlines()[0])
    ap.add_argument("--models", help="folder of checkpoint folders for the app (ATTENTION_EXPLORER_MODELS)")
    ap.add_argument("--model", help="checkpoint name inside it (default: the app's default)")
    args = ap.parse_args()
    res = run(models=args.models, model=args.model)
    print(table(res))
    if not args.no_write:
        print(f"\nwrote {bl.write_result('payload', res)}")


if __name__ == "__main__":
    main()
