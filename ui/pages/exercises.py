"""Exercises (/exercises): every kind of exercise on the sentence in the box, with the student's progress.

Each exercise is one step of the forward pass with the model's real numbers (``ui.exercises.build``): scale the
scores, which keys are masked and why, softmax, the weighted sum of the values, the next token's probability, a
positional-encoding value, a tensor's shape. "Check" grades the answer (``analysis.exercises.grade``) and names the
usual slip; the worked solution is one toggle away. The progress table counts this session's answers (session state
only, never stored on the server).
"""

from __future__ import annotations

import streamlit as st

from analysis.exercises import EXERCISE_KINDS, TITLES
from i18n import _
from ui import exercises, keys, state
from ui.widgets import table_height


def render(ctx: state.Ctx) -> None:
    c1, c2 = st.columns([3, 1], vertical_alignment="bottom")
    titles = {k: _(TITLES[k]) for k in EXERCISE_KINDS}  # translated in this run (not later, outside the session)
    kind = c1.selectbox(_("Exercise"), EXERCISE_KINDS, format_func=titles.get, key=keys.EXERCISE_PICK)
    with c2:
        exercises.new_numbers_button(keys.EXERCISE_NEW)
    exercises.show(exercises.build(kind, ctx), "exercises")
    st.subheader(_("Your progress in this session"))
    table = exercises.progress_table()
    st.dataframe(table, hide_index=True, height=table_height(table))
    st.caption(_("Kept in this browser session only: nothing is stored on the server, and a reload starts again."))


def page(frame: state.Frame) -> None:
    """Exercises on the frame's input: what app.py's navigation runs (a hint instead when there is none)."""
    if (ctx := state.page_context(frame)) is not None:
        render(ctx)
