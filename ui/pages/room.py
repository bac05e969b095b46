"""The room (/room): "Start a class" (a join code, the students' link and its QR code, the teacher's own link),
questions asked from the teacher's current view ("Which word comes next?", "Which source word does this head read
most?", "Does the translation change if we hide …?") or an exercise sent to the class ("Send to the class": one step
of the forward pass on the sentence in the box, ``ui.exercises.build``; on reveal the share right and the most common
named mistake), and the CSV of the room's questions and answers.
Students join here by code too. The question being asked is drawn above every page by ``ui.room.panel``."""

from __future__ import annotations

import html
import io
import urllib.parse

import numpy as np
import pandas as pd
import segno
import streamlit as st

from analysis.exercises import EXERCISE_KINDS, TITLES
from classroom import codes
from classroom.store import RoomError
from i18n import N_, _
from model.settings import Interventions
from ui import exercises, keys, room, state
from ui.widgets import head_label, md_escape
from viz import tokens as vt

ASK = {  # translated where shown
    "next": N_("Which word comes next?"),
    "source": N_("Which source word does this head read most?"),
    "mask": N_("Does the translation change if we hide a word?"),
    "exercise": N_("An exercise: one step of the forward pass, graded"),
}


def unique(labels: list[str]) -> list[str]:
    """``labels`` made different from each other: a repeat gets its position, ``"the (2)"``."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return out


def origin() -> str:
    """The address the browser used, up to the path (``http://host:port``)."""
    url = urllib.parse.urlsplit(st.context.url or "")
    return f"{url.scheme or 'http'}://{url.netloc or 'localhost:8501'}"


def links(m: room.Membership) -> tuple[str, str]:
    """(students' join link, teacher's link) of ``m``'s room, on the class's current page."""
    base = f"{origin()}/{m.page}?{keys.ROOM}={m.code}"
    return base, f"{base}&{keys.TEACH}={m.secret}"


def question_next(ctx: state.Ctx) -> tuple[str, list[str], dict]:
    """ "Which word comes next?" at the teacher's decoding step: the step's top 8 and their probabilities."""
    steps = ctx.steps()
    t = min(max(int(st.session_state.get(keys.STEP, 1)), 1), len(steps))
    s = steps[t - 1]
    cands = s.candidates[:8]
    options = unique(vt.display([c[0] for c in cands]))
    prefix = "".join(vt.display(s.prefix_tokens[1:])).replace("▁", " ").strip()
    prompt = _("Which word comes next after «{prefix}»?").format(prefix=prefix) if prefix else _("Which word comes first?")
    return prompt, options, {"probs": [round(float(c[2]), 4) for c in cands], "best": options[0], "step": t}


def question_source(ctx: state.Ctx) -> tuple[str, list[str], dict]:
    """ "Which source word does this head read most when writing «…»?" at the teacher's layer, head and step."""
    view = ctx.analysis.view("cross")
    n_layers = ctx.cfg.n_dec_layers
    layer = min(max(int(st.session_state.get(keys.LAYER, n_layers)), 1), n_layers) - 1
    head_text = str(st.session_state.get(keys.HEAD, "mean"))
    head = int(head_text) - 1 if head_text.isdigit() and 1 <= int(head_text) <= ctx.cfg.n_heads else None
    w = view.map(layer, head).w
    t = min(max(int(st.session_state.get(keys.STEP, 1)), 1), w.shape[0]) - 1
    options = unique(vt.display(view.k_tokens))
    token = vt.display([ctx.analysis.tgt_out_tokens[t]])[0]
    weights = [round(float(x), 4) for x in w[t]]
    prompt = _("Which source word does {head} (cross-attention) read most when writing «{token}»?").format(
        head=head_label(layer, head), token=token
    )
    return prompt, options, {"weights": weights, "best": options[int(np.argmax(w[t]))]}


def question_mask(ctx: state.Ctx, hide: int) -> tuple[str, list[str], dict]:
    """ "Does the translation change if we hide «…»?" (the Mask lab's hidden source token)."""
    word = vt.display([ctx.analysis.source.tokens[hide]])[0]
    after = ctx.under(Interventions(src_hidden=frozenset({hide}))).translation
    yes, no = _("yes"), _("no")  # in the teacher's language, as the whole question
    answer = yes if after != ctx.analysis.translation else no
    prompt = _("Does the translation change if we hide «{word}» from the model (Mask lab)?").format(word=word)
    return prompt, [yes, no], {"answer": answer, "before": ctx.analysis.translation, "after": after, "best": answer}


def ask_form(m: room.Membership, ctx: state.Ctx) -> None:
    """The teacher's questions, built from the current view (step, layer, head of the page the class is on)."""
    st.subheader(_("Ask the class"))
    st.caption(
        _(
            "Built from what the class sees now: the decoding step, layer and head of your last page. Answers come in "
            "live above every page; “Reveal” shows the model's own answer beside them (for an exercise: the share of "
            "the class that got it right and the most common mistake)."
        )
    )
    kind = st.radio(_("Question"), list(ASK), format_func=lambda k: _(ASK[k]), key=keys.ROOM_ASK_KIND)
    hide, exercise = 0, EXERCISE_KINDS[0]
    if kind == "mask":
        src = vt.display(ctx.analysis.source.tokens)
        hide = st.selectbox(
            _("Hide the source token"), range(len(src) - 1), format_func=lambda i: f"{i}: {src[i]}", key=keys.ROOM_ASK_HIDE
        )
    if kind == "exercise":
        exercise = st.selectbox(_("Exercise"), EXERCISE_KINDS, format_func=lambda k: _(TITLES[k]), key=keys.ROOM_ASK_EXERCISE)
    if st.button(_("Send to the class"), key=keys.ROOM_ASK, type="primary", icon=":material/help:"):
        if kind == "exercise":
            send_exercise(m, exercises.build(exercise, ctx))
            return
        prompt, options, truth = {
            "next": lambda: question_next(ctx),
            "source": lambda: question_source(ctx),
            "mask": lambda: question_mask(ctx, hide),
        }[kind]()
        try:
            room.store().ask(m.code, m.secret, kind, prompt, options, truth)
            room.WATCHER.wake()
        except RoomError as e:
            st.warning(room.say(e))
        else:
            st.rerun()  # the question above the page, at once


def send_exercise(m: room.Membership, ex) -> None:
    """Send exercise ``ex`` (``analysis.exercises.Exercise``) to the room: every screen shows it above the page."""
    try:
        room.store().ask(m.code, m.secret, "exercise", ex.title, [], ex.to_dict())
        room.WATCHER.wake()
    except RoomError as e:
        st.warning(room.say(e))
    else:
        st.rerun()


def teacher(m: room.Membership, frame: state.Frame) -> None:
    join_link, teacher_link = links(m)
    c1, c2 = st.columns([3, 2])
    with c1:
        st.caption(_("Join code"))
        st.html('<div style="font: 700 6rem/1.1 monospace; letter-spacing: .15em">' + html.escape(m.code) + "</div>")
        st.caption(_("Students open this link (or type the code on the Room page):"))
        st.code(join_link, language=None)
        with st.expander(_("Your teacher link (to take control from another device: never show it to the class)")):
            st.code(teacher_link, language=None)
    with c2:
        buf = io.BytesIO()
        segno.make(join_link, error="m").save(buf, kind="png", scale=12, border=2)
        alt = _("QR code of the students' link: {link}").format(link=join_link)
        st.image(buf.getvalue(), width=420, caption=_("Scan to join"), alt=alt, output_format="PNG")  # sharp edges
    if (ctx := state.page_context(frame)) is not None:
        ask_form(m, ctx)
    questions = room.store().questions(m.code)
    if questions:
        st.download_button(
            _("Export questions and answers (CSV)"),
            data=lambda: room.export_csv(m),
            file_name=f"class-{m.code}.csv",
            mime="text/csv",
            on_click="ignore",
        )
        for q in reversed(questions[:-1] if questions[-1].id == (room.store().room(m.code).current or 0) else questions):
            with st.expander(_("Question {n}: {prompt}").format(n=q.id, prompt=q.prompt)):
                room.results(m, q)


def preview(ctx: state.Ctx) -> None:
    """Before a class: the questions this view would ask, with the model's answers (a table and its CSV)."""
    st.subheader(_("Questions you can ask about this view"))
    rows = []
    for build in (question_next, question_source, lambda c: question_mask(c, 0)):
        prompt, options, truth = build(ctx)
        rows.append({_("question"): prompt, _("options"): " | ".join(options), _("model's answer"): truth["best"]})
    table = pd.DataFrame(rows)
    st.dataframe(table, hide_index=True)
    st.download_button(
        _("Download these questions (CSV)"),
        data=table.to_csv(index=False),
        file_name="room-questions.csv",
        mime="text/csv",
        on_click="ignore",
        key="room_preview_csv",
    )


def join_form() -> None:
    st.subheader(_("Join a class"))
    code = st.text_input(_("Join code"), key=keys.ROOM_JOIN_CODE, max_chars=12, placeholder=_("e.g. K7QM2X"))
    if st.button(_("Join"), key=keys.ROOM_JOIN, disabled=not code) and room.join(code):
        st.rerun()


def page(frame: state.Frame) -> None:
    """The Room page: start or join a class; the teacher's code, links, QR, questions and CSV."""
    m = room.membership()
    if m is None:
        st.markdown(
            _(
                "Teach the class, not 60 separate screens: start a class, show the code or QR on the projector, and "
                "every student's app follows what yours shows. Students are anonymous (a nickname is optional)."
            )
        )
        if st.button(_("Start a class"), key=keys.ROOM_START, type="primary", icon=":material/co_present:"):
            view = room.current_view(st.session_state.get(keys.ROOM_LAST_PAGE, "attention"))
            if room.start(view) is not None:
                st.rerun()
        join_form()
        if note := st.session_state.pop(keys.ROOM_NOTE, None):
            st.warning(note)
        if (ctx := state.page_context(frame)) is not None:
            preview(ctx)
        return
    if m.teacher:
        teacher(m, frame)
    else:
        st.markdown(
            _("You are in class **{code}**. The teacher leads; questions appear above the page.").format(code=md_escape(m.code))
        )
        st.caption(
            _("Your anonymous seat: {seat}… (kept in your link, so a reload keeps your answers)").format(
                seat=codes.clean_text(m.seat, 6)
            )
        )
