"""What an ``AppTest`` run handed to the browser, read back for the app tests: its exceptions and errors,
and its plotly figures as JSON (``json.loads(chart.proto.spec)``) with their arrays decoded.

Not a test module (pytest collects ``test_*.py`` only); the app tests import it by name, since pytest puts
``tests/`` on ``sys.path`` for them.
"""

from __future__ import annotations

import base64
import json

import numpy as np
from streamlit.testing.v1 import AppTest


def ok(at: AppTest) -> AppTest:
    """``at``, after checking that its run raised nothing and showed no error."""
    assert not at.exception, [e.value for e in at.exception]
    assert not [e.value for e in at.error], [e.value for e in at.error]
    return at


def decode(v) -> np.ndarray:
    """A plotly JSON array: a list (None = NaN) or a typed array {"dtype", "bdata", "shape"}."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        return a.reshape([int(s) for s in str(v["shape"]).split(",")]) if "shape" in v else a
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
