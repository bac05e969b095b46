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
import os
import sys
import threading
import types
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from pathlib import Path

import torch

from model.checkpoint import Loaded, load_checkpoint
from serving import heap
from serving.limits import CallLimit

log = logging.getLogger(__name__)


# -- in the worker process ------------------------------------------------------------------------------------------


def _init(threads: int) -> None:
    """The worker's start: ``threads`` torch threads, and a watch on the server that started it.

    A server killed outright (SIGKILL, the kernel's out-of-memory killer) runs no shutdown, and a
    ``ProcessPoolExecutor`` worker outlives it, holding its model (hundreds of MB) until the machine restarts; with
    replicas restarted after each crash, the orphans add up. The watch waits on the parent's sentinel (readable when
    the parent is gone, however it ended) and ends the worker then.
    """
    torch.set_num_threads(threads)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), name="parent-watch", daemon=True).start()


def _exit_with(parent) -> None:
    parent.join()  # returns when the parent process has ended
    os._exit(0)  # no cleanup to run: the worker holds only the model and the call in progress, both the server's


@lru_cache(maxsize=4)
def _load(path: str) -> Loaded:
    loaded = load_checkpoint(path)
    heap.freeze()
    return loaded


def _prepare(path: str) -> None:
    """Load ``path`` (returns nothing: the model stays in the worker)."""
    _load(path)


def _call(path: str, fn, args: tuple, kwargs: dict, tokenizer: bool):
    m = _load(path)
    return fn(m.model, m.tokenizer, *args, **kwargs) if tokenizer else fn(m.model, *args, **kwargs)


def _call_many(path: str, fn_many, items: list, args: tuple) -> list:
    m = _load(path)
    return fn_many(m.model, m.tokenizer, items, *args)


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

    def __init__(self, limit: CallLimit, *, enabled: bool = True, waiting=nullcontext):
        """``waiting()``: a context manager entered while a caller waits for the worker's answer, e.g. the page gate's
        ``CallLimit.released`` (a page waiting for the model lets another page draw, and the waiting calls batch)."""
        self.limit, self.enabled, self.waiting = limit, enabled, waiting
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._ready: set[str] = set()  # checkpoint paths the worker has loaded
        self._asked: set[str] = set()  # paths it was asked to load
        self._waiting: dict[tuple, list[tuple[object, Future]]] = {}  # call_many: items waiting for a batch, by call
        self._batcher: ThreadPoolExecutor | None = None  # sends the waiting batches to the worker, one at a time
        self.batch_sizes: list[int] = []  # size of each batch sent (the last 1,000; bench and tests read it)

    def start(self, path: str) -> None:
        """Start the worker if it is not running and have it load the checkpoint at ``path``; returns at once."""
        if not self.enabled:
            return
        with self._lock:
            if path in self._asked:
                return
            if self._pool is None:
                ctx = multiprocessing.get_context("spawn")  # never fork a process that runs threads and OpenMP
                self._pool = ProcessPoolExecutor(1, mp_context=ctx, initializer=_init, initargs=(self.limit.threads,))
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
            batcher, self._batcher = self._batcher, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)
        if batcher is not None:
            batcher.shutdown(wait=False)

    def call(self, loaded: Loaded, fn, *args, tokenizer: bool = True, **kwargs):
        """``fn(loaded.model, loaded.tokenizer, *args, **kwargs)`` (no tokenizer if ``tokenizer=False``), in the
        worker once it has loaded ``loaded.path``, else here under ``limit``."""
        path = str(loaded.path)
        with self._lock:
            pool = self._pool if path in self._ready and travels(fn) else None
        if pool is not None:
            try:
                future = pool.submit(_call, path, fn, args, kwargs, tokenizer)
                with self.waiting():
                    return future.result()
            except BrokenProcessPool:
                log.warning("the model worker died; starting another")
                with self._lock:
                    if self._pool is pool:
                        self._pool, self._ready, self._asked = None, set(), set()
        self.start(path)
        with self.limit:
            head = (loaded.model, loaded.tokenizer) if tokenizer else (loaded.model,)
            return fn(*head, *args, **kwargs)

    def call_many(self, loaded: Loaded, fn_many, fn_one, item, *args):
        """``fn_one(loaded.model, loaded.tokenizer, item, *args)``, computed in the worker together with the other
        items that wait for the same ``fn_many`` and ``args`` (hashable, as the items are) meanwhile, each distinct item once: ``fn_many(model, tokenizer,
        items, *args)`` returns one result per item, an exception instance for an item it refused (raised here).

        A class arriving at once asks for many analyses within a second; one batch of them costs the worker little
        more than one (``analysis.analyze.analyze_many``). Batches form by themselves: the first item is sent at
        once, and the items that arrive while a batch is in the worker go together in the next one, so a lone
        user waits for no one. With the worker switched off (``enabled=False``) the batches run in this process,
        under ``limit``. Until the worker has loaded the checkpoint or after it died, ``fn_one`` runs here under
        ``limit`` as ``call`` does; so does a ``fn_one`` that cannot travel (a test's spy). The results of ``fn_many`` must equal ``fn_one``'s (up to float
        rounding, for a batched model pass).
        """
        path = str(loaded.path)
        key = (path, fn_many, args)
        with self._lock:
            pool = self._pool if path in self._ready and travels(fn_many) and travels(fn_one) else None
            # no worker at all (ATTENTION_EXPLORER_MODEL_PROCESS=0, deploy/'s replicas): batch in this process
            batched = pool is not None or (not self.enabled and travels(fn_one))
            if batched:
                future: Future = Future()
                waiting = self._waiting.setdefault(key, [])
                waiting.append((item, future))
                if len(waiting) == 1:  # no batch of this call is waiting to be sent: send one (it takes the later items)
                    if self._batcher is None:
                        self._batcher = ThreadPoolExecutor(1, thread_name_prefix="model-batches")
                    self._batcher.submit(self._send, pool, key, loaded)
        if batched:
            try:
                with self.waiting():
                    result = future.result()
            except BrokenProcessPool:
                pass  # the worker died: this item runs here, below
            else:
                if isinstance(result, BaseException):
                    raise result
                return result
        return self.call(loaded, fn_one, item, *args)

    def _send(self, pool: ProcessPoolExecutor | None, key: tuple, loaded: Loaded) -> None:
        """Send every item waiting for ``key`` to the worker as one batch (``pool`` None: run it here, under ``limit``)
        and hand each caller its result."""
        with self._lock:
            batch = self._waiting.pop(key, [])
            self.batch_sizes = [*self.batch_sizes[-999:], len(batch)]
        log.debug("a batch of %d items", len(batch))
        if not batch:
            return
        path, fn_many, args = key
        try:
            # each distinct item once: a class on the Compare page asks for the same two sentences (cache misses at once)
            items = list(dict.fromkeys(item for item, _ in batch))
            if pool is None:
                with self.limit:
                    results = fn_many(loaded.model, loaded.tokenizer, items, *args)
            else:
                results = pool.submit(_call_many, path, fn_many, items, args).result()
            if len(results) != len(items):
                raise RuntimeError(f"{fn_many.__name__} returned {len(results)} results for {len(items)} items")
            by_item = dict(zip(items, results, strict=True))
            results = [by_item[item] for item, _ in batch]
        except BrokenProcessPool as e:
            log.warning("the model worker died; starting another")
            with self._lock:
                if self._pool is pool:
                    self._pool, self._ready, self._asked = None, set(), set()
            for _, future in batch:
                future.set_exception(e)
            return
        except BaseException as e:  # noqa: BLE001 -- every waiting caller gets it
            for _, future in batch:
                future.set_exception(e)
            return
        for (_, future), result in zip(batch, results, strict=True):
            future.set_result(result)
