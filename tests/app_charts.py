"""What an ``AppTest`` run handed to the browser, read back for the app tests: its exceptions and errors,
its plotly figures as JSON (``json.loads(chart.proto.spec)``) with their arrays decoded, and what Streamlit logged;
and how the tests open a page (``switch_to``: a page of app.py by its URL path; ``page_alone``: one page's function
with a frame, without app.py).

Not a test module (pytest collects ``test_*.py`` only); the app tests import it by name, since pytest puts
``tests/`` on ``sys.path`` for them.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from streamlit.testing.v1 import AppTest
from streamlit.util import calc_hash


def ok(at: AppTest) -> AppTest:
    """``at``, after checking that its run raised nothing and showed no error."""
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error], [e.value for e in at.error]
    return at


def switch_to(at: AppTest, path: str) -> AppTest:
    """``at`` set to open the page at URL path ``/path`` on its next ``run()``, as a link to that page does.

    The pages are functions (``st.Page(fn, url_path=path)`` in app.py), and ``AppTest.switch_page`` finds file pages
    only; ``st.navigation`` keys every page by ``calc_hash(url_path)``, the hash a browser's URL path selects, and
    ``AppTest`` requests the page of ``_page_hash`` (what ``switch_page`` sets for a file page).
    """
    at._page_hash = calc_hash(path)
    return at


def _run_page(page: str, model_path: str, text: str) -> None:
    """The script of ``page_alone``: ``AppTest.from_function`` runs this body with its arguments."""
    import importlib

    from model.settings import DecodeSettings
    from ui import state

    importlib.import_module(f"ui.pages.{page}").page(state.Frame(model_path, text, DecodeSettings()))


def page_alone(page: str, model_path: str, text: str, *, timeout: float) -> AppTest:
    """An ``AppTest`` of ``ui.pages.<page>.page`` alone, handed the frame app.py would hand it (this model and text,
    greedy decoding); not yet run."""
    return AppTest.from_function(_run_page, args=(page, model_path, text), default_timeout=timeout)


def chart_array(v) -> np.ndarray:
    """A plotly JSON array: a list (None = NaN) or a typed array {"dtype", "bdata", "shape"}."""
    if isinstance(v, dict) and "bdata" in v:
        flat = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return flat.reshape([int(n) for n in str(v["shape"]).split(",")]) if "shape" in v else flat
    return np.array(v, dtype=float)


def charts(at: AppTest) -> list[dict]:
    """Every plotly figure of the run, as the JSON the browser receives."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def titles(at: AppTest) -> list[str]:
    return [f["layout"].get("title", {}).get("text", "") for f in charts(at)]


def chart(at: AppTest, title_part: str) -> dict:
    """The first figure whose title contains ``title_part``."""
    found = [f for f in charts(at) if title_part in f["layout"].get("title", {}).get("text", "")]
    assert found, f"no chart titled …{title_part}…; titles: {titles(at)}"
    return found[0]


@contextmanager
def streamlit_log(level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    """The records Streamlit's loggers emit at ``level`` or above while the block runs (e.g. the traceback of a
    dataframe Arrow could not take, logged at INFO).

    Streamlit's loggers do not propagate to the root logger, so pytest's ``caplog`` misses them: a handler is put on
    each ``streamlit.*`` logger made so far (run the app once before the block) and taken off after.
    """
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = records.append
    loggers = [logging.getLogger(n) for n in list(logging.Logger.manager.loggerDict) if n.split(".")[0] == "streamlit"]
    old_levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        if lg.getEffectiveLevel() > level:
            lg.setLevel(level)
    try:
        yield records
    finally:
        for lg, old in zip(loggers, old_levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(old)
