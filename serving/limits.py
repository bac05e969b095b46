"""A process-wide limit on concurrent model calls, for a server whose many threads share one model.

Streamlit runs each session's script in a thread of its own, so a class of 60 students opening a page
asks the model from 60 threads at once. Then every thread gets its own OpenMP team (torch's intra-op
thread count is per calling thread and starts at the number of cores), and every small operator
releases and takes back the GIL, so the threads spend their time waiting for one another. Measured on
2 cores, 60 ``analyze`` calls of different sentences (bench/README.md, "A whole class at once"):
one after another 2.9 s; 60 threads at once 5.9-6.9 s of wall time and 8.6-10 s of CPU; at most 2 at
once with 1 torch thread each 3.1-3.3 s, 3.7-4.0 s of CPU.

``CallLimit(slots, threads)`` lets at most ``slots`` threads into the model at a time; the others wait
(waiting threads use no CPU). Inside, the calling thread runs torch with ``threads`` intra-op threads:
set on every entry, because with OpenMP the setting belongs to the thread that makes it. A thread that
already holds a slot enters again without waiting (a cached call inside a cached call cannot deadlock).
Waiting threads are served first come, first served: a slot given back goes to the longest waiter.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class CallLimit:
    """At most ``slots`` threads inside ``with limit:`` at once, each running torch with ``threads`` threads.

    Use one per process around every model call: ``with MODEL_CALLS: analyze(...)``. Raises ValueError
    if ``slots`` or ``threads`` is below 1.
    """

    def __init__(self, slots: int, threads: int = 1):
        if slots < 1 or threads < 1:
            raise ValueError(f"slots and threads must be at least 1, got slots={slots}, threads={threads}")
        self.slots, self.threads = slots, threads
        self._lock = threading.Lock()  # guards the two below
        self._free = slots  # slots no thread holds
        self._waiters: deque[threading.Lock] = deque()  # one locked gate per waiting thread, longest waiting first
        self._held = threading.local()  # .depth: how many ``with`` blocks this thread is inside

    def _acquire(self, *, blocking: bool = True) -> bool:
        """Take a slot: a free one if nobody waits, else wait in line until a leaving thread hands its slot over (no
        newcomer can take it first, as it could from a plain semaphore). False if not ``blocking`` and none is free."""
        with self._lock:
            if self._free and not self._waiters:
                self._free -= 1
                return True
            if not blocking:
                return False
            gate = threading.Lock()
            gate.acquire()
            self._waiters.append(gate)
        gate.acquire()  # opened by _release: the slot is this thread's now
        return True

    def _release(self) -> None:
        """Give a slot back: to the thread that has waited longest, else to the free ones."""
        with self._lock:
            if self._waiters:
                self._waiters.popleft().release()
            else:
                self._free += 1

    @classmethod
    def for_cores(cls, cores: int | None = None) -> CallLimit:
        """One slot per core, one torch thread per slot: the cores are busy and never oversubscribed."""
        cores = cores or usable_cores()
        return cls(slots=cores, threads=1)

    def __enter__(self) -> CallLimit:
        depth = getattr(self._held, "depth", 0)
        if depth == 0:
            self._held.slot = self._acquire()
        self._held.depth = depth + 1
        torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        self._held.depth -= 1
        if self._held.depth == 0 and self._held.slot:
            self._held.slot = False
            self._release()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give this thread's slot back for the ``with`` block; after it, take a slot again if one is free, else go
        on without one (it is given back at the outermost exit only if it was taken).

        For a thread that only waits inside (for the model worker's answer): it needs no slot meanwhile, and
        another may use it. It never waits for a slot afterwards: the threads holding the slots may be waiting for
        it (for a cached value it is computing: Streamlit's per-value compute lock), and waiting would deadlock. A
        thread that holds no slot passes through unchanged.
        """
        if getattr(self._held, "depth", 0) == 0 or not self._held.slot:
            yield
            return
        self._held.slot = False
        self._release()
        try:
            yield
        finally:
            self._held.slot = self._acquire(blocking=False)
            torch.set_num_threads(self.threads)
