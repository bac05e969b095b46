"""The server's heap and Python's cyclic garbage collector.

A server process holds ~300,000 long-lived objects that the GC tracks (torch, Streamlit, plotly and their modules,
the loaded model). Every full (generation-2) collection walks them all: ~190 ms with the GIL held, 2-4 times in a
class of 120 opening a page, 15 % of the Streamlit process's CPU in all with the younger generations
(bench/README.md, 8e). They never become garbage, so once a model is loaded they are moved out of the collector's
reach (``gc.freeze``): the collections that remain walk only what the sessions allocated since.
"""

from __future__ import annotations

import gc


def freeze() -> None:
    """Collect once, then freeze every object alive now into the permanent generation (``gc.freeze``): later
    collections skip them. Reference counting still frees them; only a reference cycle among them would outlive its
    use (the collect before the freeze leaves none behind). Call after a checkpoint is loaded: the collect costs a full
    collection (~0.2 s), once per load."""
    gc.collect()
    gc.freeze()
