"""Shared by every test: plotly checks every figure the tests build (``viz._common.VALIDATE_FIGURES``).

The app builds its figures without plotly's property check (it is most of a figure's cost); here it is on,
set before ``viz`` is imported, so that every figure of every test (page runs in AppTest included) is
checked by plotly's own schema.
"""

import os
import time

import pytest

os.environ.setdefault("ATTENTION_EXPLORER_VALIDATE_FIGURES", "1")


@pytest.fixture(scope="module")
def loaded():
    """The shipped en-de checkpoint (tests that use it skip without it)."""
    from model.checkpoint import PRETRAINED, load_checkpoint

    return load_checkpoint(PRETRAINED / "en-de")


@pytest.fixture
def worker(loaded):
    """A model worker process that has loaded ``loaded`` (two call slots, one torch thread each); closed after."""
    from serving.limits import CallLimit
    from serving.worker import ModelWorker

    w = ModelWorker(CallLimit(2, threads=1))
    w.start(str(loaded.path))
    end = time.monotonic() + 120
    while not w.ready(str(loaded.path)):
        assert time.monotonic() < end, "the worker did not load the checkpoint"
        time.sleep(0.1)
    yield w
    w.close()
