"""Model calls in a process of their own, so that a server's script threads and the model do not share one GIL.

Streamlit runs every session's script in a thread of the server process. With ``serving.limits.CallLimit`` at
most one call per core is in the model, but the model's per-step Python and the pages' figure building
still take turns on one GIL: a burst of 60 students kept the server at 0.7-1.0 of its 2 cores
(bench/README.md, "A whole class at once"). A worker process has a GIL of its own, so the model runs on
one core while the server's threads build pages on the other.

``ModelWorker.call(loaded, fn, *args)`` runs ``fn(model, tokenizer, *args)`` (``fn(model, *args)`` with
``tokenizer=False``) in one spawned worker process, which loads each checkpoint once (``load_checkpoint``
of ``loaded.path``) and runs the calls one at a time, in the order they came, with ``limit.threads`` torch
threads. The process imports nothing of the caller's ``__main__`` (``_no_main_script``). ``fn`` travels by
name if it is a module-level function (else it runs in the calling process); arguments and results travel
pickled between these two processes of ours (``Analysis`` and the other records hold numpy arrays and plain
values), and an exception ``fn`` raises is raised again in the caller. Until the worker has loaded the
checkpoint (``start``, in the background), if it is switched off, and after it died (it is started again),
calls run in the calling process under ``limit``
with the same thread count, so a result is the same wherever it was computed.
"""

from __future__ import annotations

import logging
import multiprocessing
import sys
import threading
import types
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch

from model.checkpoint import Loaded, load_checkpoint
from serving.limits import CallLimit

log = logging.getLogger(__name__)


# -- in the worker process ------------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def _load(path: str) -> Loaded:
    return load_checkpoint(path)


def _prepare(path: str) -> None:
    """Load ``path`` (returns nothing: the model stays in the worker)."""
    _load(path)


def _call(path: str, fn, args: tuple, kwargs: dict, tokenizer: bool):
    m = _load(path)
    return fn(m.model, m.tokenizer, *args, **kwargs) if tokenizer else fn(m.model, *args, **kwargs)


# -- in the calling process -----------------------------------------------------------------------------------------


@contextmanager
def _no_main_script():
    """While a process is spawned, ``__main__`` is a blank module, so the child imports no script of the caller's.

    A spawned child first runs the caller's ``__main__`` file (as ``__mp_main__``), and Streamlit makes its main
    script ``__main__`` while it runs. The pages are functions now (they drew at import before), but the main
    script still would run in the worker: app.py would import Streamlit and all of ``ui/`` there for nothing, and
    a script that draws at its top level (an ``AppTest.from_function`` script, as the page tests use) would die
    outside a session. The functions the worker runs travel by module name and need nothing from ``__main__``. Only ``sys.modules["__main__"]`` changes, for the few milliseconds of the start,
    and it is put back unless a script run replaced it meanwhile.
    """
    main = sys.modules.get("__main__")
    blank = types.ModuleType("__main__")
    sys.modules["__main__"] = blank
    try:
        yield
    finally:
        if sys.modules.get("__main__") is blank:
            sys.modules["__main__"] = main


def travels(fn) -> bool:
    """Whether ``fn`` can be sent to the worker: a module-level function, which pickle sends by its name (a lambda
    or a local function, e.g. a test's spy standing in for ``analyze``, runs in the calling process instead)."""
    module = sys.modules.get(getattr(fn, "__module__", None) or "")
    return module is not None and getattr(module, getattr(fn, "__qualname__", ""), None) is fn


class ModelWorker:
    """One worker process for model calls, started on demand; ``enabled=False`` runs every call here."""

    def __init__(self, limit: CallLimit, *, enabled: bool = True):
        self.limit, self.enabled = limit, enabled
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._ready: set[str] = set()  # checkpoint paths the worker has loaded
        self._asked: set[str] = set()  # paths it was asked to load

    def start(self, path: str) -> None:
        """Start the worker if it is not running and have it load the checkpoint at ``path``; returns at once."""
        if not self.enabled:
            return
        with self._lock:
            if path in self._asked:
                return
            if self._pool is None:
                ctx = multiprocessing.get_context("spawn")  # never fork a process that runs threads and OpenMP
                self._pool = ProcessPoolExecutor(
                    1, mp_context=ctx, initializer=torch.set_num_threads, initargs=(self.limit.threads,)
                )
            pool = self._pool
            self._asked.add(path)
        try:
            with _no_main_script():  # the first submit starts the process
                future = pool.submit(_prepare, path)
            future.add_done_callback(lambda f: self._prepared(pool, path, f))
        except BrokenProcessPool:  # the worker died since; calls run here, and the next ``call`` starts another
            log.warning("the model worker died; starting another on the next call")
            with self._lock:
                if self._pool is pool:
                    self._pool, self._ready, self._asked = None, set(), set()

    def _prepared(self, pool: ProcessPoolExecutor, path: str, f: Future) -> None:
        if f.cancelled():  # closed before it loaded
            return
        with self._lock:
            if f.exception() is None and self._pool is pool:
                self._ready.add(path)
                return
            if isinstance(f.exception(), BrokenProcessPool) and self._pool is pool:  # died: the next call starts another
                self._pool, self._ready, self._asked = None, set(), set()
        log.warning("the model worker could not load %s: %s", Path(path).name, f.exception())

    def ready(self, path: str) -> bool:
        """Whether calls on the checkpoint at ``path`` run in the worker now."""
        with self._lock:
            return str(path) in self._ready

    def close(self) -> None:
        """Stop the worker (a later ``start`` or ``call`` starts another)."""
        with self._lock:
            pool, self._pool, self._ready, self._asked = self._pool, None, set(), set()
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    def call(self, loaded: Loaded, fn, *args, tokenizer: bool = True, **kwargs):
        """``fn(loaded.model, loaded.tokenizer, *args, **kwargs)`` (no tokenizer if ``tokenizer=False``), in the
        worker once it has loaded ``loaded.path``, else here under ``limit``."""
        path = str(loaded.path)
        with self._lock:
            pool = self._pool if path in self._ready and travels(fn) else None
        if pool is not None:
            try:
                return pool.submit(_call, path, fn, args, kwargs, tokenizer).result()
            except BrokenProcessPool:
                log.warning("the model worker died; starting another")
                with self._lock:
                    if self._pool is pool:
                        self._pool, self._ready, self._asked = None, set(), set()
        self.start(path)
        with self.limit:
            head = (loaded.model, loaded.tokenizer) if tokenizer else (loaded.model,)
            return fn(*head, *args, **kwargs)
