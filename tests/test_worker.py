"""serving/worker.py: a call gives the same result in the worker process as in the calling process (one at a time
or from many threads at once), the worker's exceptions reach the caller, and a dead worker is replaced."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from analysis.analyze import analyze
from model.checkpoint import PRETRAINED
from model.facts import InputError
from model.settings import DecodeSettings
from model.transformer import Interventions
from serving.limits import CallLimit
from serving.worker import ModelWorker

CKPT = PRETRAINED / "en-de"
pytestmark = pytest.mark.skipif(not (CKPT / "model.safetensors").exists(), reason=f"needs the checkpoint {CKPT}")
SENTENCES = [
    "A dog runs through grass.",
    "Two young men in blue jackets are playing guitars on a street corner at night.",
    "An old woman sat on a bench in the busy market.",
    "Several workers looked at the sky.",
]
TIMEOUT_S = 120


def assert_same(a, b) -> None:
    assert a.out_ids == b.out_ids and a.translation == b.translation
    for kind in ("enc_self", "dec_self", "cross", "next_probs"):
        np.testing.assert_array_equal(getattr(a.maps, kind), getattr(b.maps, kind))


def test_worker_results_equal_the_calling_process(worker, loaded):
    here = ModelWorker(CallLimit(2, threads=1), enabled=False)  # every call in this process, 1 torch thread
    interventions = Interventions(temperature=2.0, src_hidden=frozenset({1}))
    for text in SENTENCES:
        for args in ((DecodeSettings(),), (DecodeSettings(), interventions), (DecodeSettings(method="beam", beam_size=3),)):
            assert_same(worker.call(loaded, analyze, text, *args), here.call(loaded, analyze, text, *args))


def test_many_threads_at_once_get_their_own_results(worker, loaded):
    alone = {t: worker.call(loaded, analyze, t) for t in SENTENCES}
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = list(pool.map(lambda t: (t, worker.call(loaded, analyze, t)), SENTENCES * 4))
    for text, a in together:
        assert_same(a, alone[text])


def test_an_exception_in_the_worker_reaches_the_caller(worker, loaded):
    with pytest.raises(InputError):
        worker.call(loaded, analyze, "   ")


def test_a_dead_worker_is_replaced(worker, loaded):
    expected = worker.call(loaded, analyze, SENTENCES[0])
    (pid,) = worker._pool._processes  # the one worker process
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    assert_same(worker.call(loaded, analyze, SENTENCES[0]), expected)  # answered here while a new worker starts
    end = time.monotonic() + TIMEOUT_S
    while not worker.ready(str(loaded.path)):
        assert time.monotonic() < end, "no new worker"
        time.sleep(0.1)
    assert_same(worker.call(loaded, analyze, SENTENCES[0]), expected)


PARENT_SCRIPT = """
import sys, time
from serving.limits import CallLimit
from serving.worker import ModelWorker
w = ModelWorker(CallLimit(1, threads=1))
w.start(sys.argv[1])
while not w.ready(sys.argv[1]):
    time.sleep(0.1)
print(*w._pool._processes, flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie, ended but not yet reaped, counts as ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_worker_ends_when_its_server_is_killed(tmp_path):
    """A server killed outright (SIGKILL: no shutdown runs) must not leave its model worker running, holding a model:
    a replica the out-of-memory killer ends would leak one each time. Before the parent watch (serving.worker._init)
    the worker ran on, reparented, until killed by hand."""
    import subprocess

    script = tmp_path / "server.py"
    script.write_text(PARENT_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root}
    parent = subprocess.Popen([sys.executable, str(script), str(CKPT)], cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    try:
        (pid,) = map(int, parent.stdout.readline().split())  # the worker's pid, once it has loaded the model
        assert running(pid)
        parent.kill()
        parent.wait(timeout=15)
        end = time.monotonic() + 15
        while running(pid) and time.monotonic() < end:
            time.sleep(0.1)
        alive = running(pid)
        if alive:
            os.kill(pid, signal.SIGKILL)
        assert not alive, "the model worker outlived its killed server"
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait(timeout=15)


def test_a_function_that_cannot_travel_runs_here(worker, loaded):
    seen = []

    def spy(model, tok, text):  # a local function: pickle cannot send it
        seen.append(os.getpid())
        return analyze(model, tok, text)

    assert_same(worker.call(loaded, spy, SENTENCES[0]), worker.call(loaded, analyze, SENTENCES[0]))
    assert seen == [os.getpid()]


def test_the_worker_never_runs_the_callers_main_script(loaded, tmp_path, monkeypatch):
    """Streamlit runs each page as ``__main__``; a worker started during a page run must not import that page
    (a spawned child would, and die when the page draws at import: the Compare page under AppTest did)."""
    page = tmp_path / "page.py"
    page.write_text("raise SystemExit('a page script ran in the model worker')\n")
    fake_main = types.ModuleType("__main__")
    fake_main.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", fake_main)
    w = ModelWorker(CallLimit(1, threads=1))
    try:
        w.start(str(loaded.path))
        end = time.monotonic() + TIMEOUT_S
        while not w.ready(str(loaded.path)):
            assert w._pool is not None, "the worker died while loading the checkpoint"
            assert time.monotonic() < end, "the worker did not load the checkpoint"
            time.sleep(0.1)
        (pid,) = w._pool._processes
        assert pid != os.getpid()
        assert_same(w.call(loaded, analyze, SENTENCES[0]), analyze(loaded.model, loaded.tokenizer, SENTENCES[0]))
    finally:
        w.close()


def test_a_loaded_model_is_frozen_out_of_the_cyclic_collector():
    """ui.state.load_model (and the worker's load) freeze the heap after loading (serving.heap): a full collection
    no longer walks the model's ~300k long-lived objects; they are still the same, working objects."""
    from ui import state

    m = state.load_model(str(CKPT))
    tracked = gc.get_objects()  # generations 0-2: what a collection walks
    assert not any(o is m.model for o in tracked), "the loaded model is still walked by every full collection"
    assert len(tracked) < gc.get_freeze_count(), "most long-lived objects should be frozen"
    assert analyze(m.model, m.tokenizer, SENTENCES[0]).translation  # the frozen model still works
