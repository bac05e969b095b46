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

The slots go in order of arrival, not to whichever waiting thread the scheduler wakes first: a thread's ticket is the
time it first asked (or the time its page run began, ``stamp``), and a freed slot is handed to the waiting thread with
the oldest ticket. So a class arriving together is served first come, first drawn: a student whose model result came
back takes the next slot before the students who arrived after them (bench/README.md, 8k).
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
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

    Use one per process around every model call: ``with MODEL_CALLS: analyze(...)``. A freed slot goes to the waiting
    thread with the oldest ticket (``stamp``; else the time it asked). Raises ValueError if ``slots`` or ``threads`` is
    below 1.
    """

    def __init__(self, slots: int, threads: int = 1):
        if slots < 1 or threads < 1:
            raise ValueError(f"slots and threads must be at least 1, got slots={slots}, threads={threads}")
        self.slots, self.threads = slots, threads
        self._lock = threading.Lock()
        self._free = slots  # slots nobody holds; 0 while a thread waits (a freed slot is handed to it)
        self._waiting: list[tuple[float, int, threading.Event]] = []  # heap: (ticket, arrival, wake-up) per waiter
        self._arrivals = itertools.count()
        # .depth: how many ``with`` blocks this thread is inside; .slot: whether it holds one; .ticket: its place in
        # the queue (``stamp``); .owed: it gave its slot back in ``released`` and has not taken one since
        self._held = threading.local()

    @classmethod
    def for_cores(cls, cores: int | None = None) -> CallLimit:
        """One slot per core, one torch thread per slot: the cores are busy and never oversubscribed."""
        cores = cores or usable_cores()
        return cls(slots=cores, threads=1)

    def stamp(self, ticket: float | None = None) -> None:
        """Give this thread its place in the queue for its next ``with`` blocks: ``ticket`` (default: now, on
        ``time.monotonic``). A page run stamps itself when it begins, so that it keeps its place after a model call."""
        self._held.ticket = time.monotonic() if ticket is None else ticket
        self._held.owed = False

    def _take(self) -> None:
        """Wait for a slot, in ticket order."""
        ticket = getattr(self._held, "ticket", None)
        with self._lock:
            if self._free:
                self._free -= 1
                return
            wake = threading.Event()
            heapq.heappush(self._waiting, (time.monotonic() if ticket is None else ticket, next(self._arrivals), wake))
        wake.wait()  # the thread that gave a slot back handed it to this one

    def _try_take(self) -> bool:
        """Take a slot if one is free (none is while threads wait: a freed slot goes to them)."""
        with self._lock:
            if self._free:
                self._free -= 1
                return True
            return False

    def _give(self) -> None:
        """Give a slot back: to the waiting thread with the oldest ticket, else to the free ones."""
        with self._lock:
            if self._waiting:
                heapq.heappop(self._waiting)[2].set()
            else:
                self._free += 1

    def __enter__(self) -> CallLimit:
        depth = getattr(self._held, "depth", 0)
        if depth == 0:
            self._take()
            self._held.slot = True
        self._held.depth = depth + 1
        torch.set_num_threads(self.threads)
        return self

    def __exit__(self, *exc) -> None:
        self._held.depth -= 1
        if self._held.depth == 0:
            self._held.owed = False
            if self._held.slot:
                self._held.slot = False
                self._give()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give this thread's slot back for the ``with`` block; after it, take a slot again if one is free, else go
        on without one for now (``take_back`` takes it later; it is given back at the outermost exit only if taken).

        For a thread that only waits inside (for the model worker's answer): it needs no slot meanwhile, and
        another may use it. It never waits for a slot here: the threads holding the slots may be waiting for it
        (for a cached value it is computing: Streamlit's per-value compute lock), and waiting would deadlock. A
        thread that holds no slot passes through unchanged.
        """
        if getattr(self._held, "depth", 0) == 0 or not self._held.slot:
            yield
            return
        self._held.slot = False
        self._give()
        try:
            yield
        finally:
            self._held.slot = self._try_take()
            self._held.owed = not self._held.slot
            torch.set_num_threads(self.threads)

    def take_back(self) -> None:
        """Wait, in ticket order, for the slot this thread gave back in ``released`` and could not take again at once.

        Call it where the thread holds no lock another slot holder may wait for, e.g. after the cached call whose
        model wait released the slot has returned (``ui.state``'s model calls do). Does nothing otherwise.
        """
        if getattr(self._held, "owed", False) and getattr(self._held, "depth", 0) > 0 and not self._held.slot:
            self._take()
            self._held.slot, self._held.owed = True, False
            torch.set_num_threads(self.threads)
