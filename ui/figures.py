"""Figures shared by every session of the server process: built once per input, language and colours, and placed by
replaying the chart recorded the first time.

A class in one room looks at one sentence: 120 students asked for the same mosaics, and each built them, turned them
into plotly JSON and hashed that JSON for the chart's element id (bench/README.md, 14). Here a figure is made once
per ``key`` (the page's inputs it depends on, with the interface language and the colour-blind switch), and a chart
that is not a widget (no ``on_select``) is placed by ``st.cache_resource``'s element replay: its recorded message is
sent again, nothing is built, converted or hashed. A figure from here is shared: never change it (``show`` and the
exports only read it).
"""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go
import streamlit as st

from viz import attention as va

FIGURES_KEPT = 256  # figures kept per process (LRU): a room's pages and views, and the students exploring alone
PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "select2d"]}


class SharedFigure(go.Figure):
    """A figure that many sessions show and nobody changes: its dict (``to_dict``) is made once. Plotly deep-copies
    the whole figure on every ``to_dict``, and ``st.plotly_chart`` calls it for every session's chart; the dict
    returned is shared too, so read it, never change it."""

    def to_dict(self) -> dict:
        made = self.__dict__.get("_made_dict")  # __dict__: plotly's __setattr__ accepts only its properties
        if made is None:
            made = self.__dict__["_made_dict"] = super().to_dict()
        return made


@st.cache_resource(max_entries=FIGURES_KEPT, show_spinner=False)
def shared_figure(key: tuple, _build: Callable[[], go.Figure]) -> SharedFigure:
    """``_build()``, called once per process for ``key`` (a tuple of str, int, float, bool: everything the figure
    depends on); every later call with an equal ``key`` returns the same object. Sessions asking at once wait for the
    first (Streamlit's per-key lock). Never change the figure returned."""
    return SharedFigure(_build())


@st.cache_resource(max_entries=FIGURES_KEPT, show_spinner=False)
def placed_chart(key: tuple, chart_key: str, _build: Callable[[], go.Figure]) -> SharedFigure:
    """Place the figure of ``key`` (``shared_figure``), keyed ``chart_key``, with its text alternative as the chart's
    accessible name, where the caller is; returns the figure. Recorded once per (``key``, ``chart_key``) and replayed
    after: Streamlit sends the recorded element again (``st.cache_resource`` replays the elements a cached function
    drew). For charts that are not widgets only."""
    fig = shared_figure(key, _build)
    st.plotly_chart(fig, key=chart_key, theme=None, config=PLOTLY_CONFIG, on_select="ignore", alt=va.alt_of(fig))
    return fig
