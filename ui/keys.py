"""Every ``st.session_state`` key and URL query parameter of the app, named once.

Widget keys are session keys too (``st.slider(..., key=LAYER)`` keeps its value in
``st.session_state[LAYER]``), so they are listed here with the rest.
"""

# -- the URL: query parameters that reopen exactly what a user sees (values are short keys, never labels)
SENTENCE = "sentence"  # the source text (the frame's text box)
MODEL = "model"  # checkpoint folder name: en-de, en-de-captions, reverse
METHOD = "method"  # decoding method key: greedy, beam, sample
KIND = "kind"  # attention kind key: enc_self, dec_self, cross
LAYER = "layer"  # layer, counted from 1
HEAD = "head"  # head, counted from 1, or "mean"
STEP = "step"  # decoding step, counted from 1
COMPARE_PAIR = "pair"  # Compare: a preset minimal pair (ui.catalog.PAIRS), when the two sentences are one
COMPARE_A = "a"  # Compare: sentence A, when it is not a preset's
COMPARE_B = "b"  # Compare: sentence B, when it is not a preset's
LESSON = "lesson"  # Lesson: the step, counted from 1
TOKEN = "token"  # Attention vs attribution: the output token explained, counted from 0
PRESENTER = "presenter"  # Lesson: presenter mode (1), big type and no sidebar
OLD_VIEW = "view"  # links of the single-page app: ?view=attention (or ?view=Attention)
LANG = "lang"  # the interface language (i18n.LANGUAGES): ?lang=de; the sidebar switch, kept in the URL by url_radio

# -- the frame: sidebar and source box
FRAME = "_frame"  # ui.state.Frame: model path, text and settings the page works on
MODEL_PROBLEM = "_model_problem"  # why the model asked for did not load (shown until another model is picked)
EXAMPLE = "example"  # the examples picker
# the decoding widgets, each bound to the URL under its own name
BEAM_SIZE, ALPHA = "beam_size", "alpha"  # beam search
SAMPLE_TEMPERATURE, TOP_K, TOP_P, SEED = "sample_temperature", "top_k", "top_p", "seed"  # sampling
SAFE_COLORS = "safe_colors"  # the sidebar's toggle: every attention map in the colour-blind-safe scale (ui.widgets.show)


def cut(key: str) -> str:
    """(length in the URL, text kept) of the URL text parameter ``key`` after it was cut to the longest text taken."""
    return f"_cut_{key}"


# -- Attention
EVERY_KIND_MOSAIC = "all_kinds"
NORM_MOSAIC = "norm_weighted"  # the mosaic of norm-weighted shares (Kobayashi et al. 2020) under the weights
LAYER_MEANS = "layer_means"
ZOOM_CHART = "zoom"  # the zoomed heatmap; its selection holds the clicked cell

# -- Step through generation
PLAYING = "playing"  # "Play" is running
FORCED = "forced"  # {"sig": (path, text, settings), "ids": forced compact ids}
FORCE_PICK = "force_pick"
CANDIDATES_CHART = "cand_chart"  # the top-k bar chart; its selection holds the clicked candidate
FULL_RUN = "_full_run"  # set by a full run: the step fragment does not advance "Play" then
APP_RERUN = "_app_rerun"  # the step fragment asks for a full rerun (play started or stopped)
PREV = "prev"
NEXT = "next"
PLAY = "play"
UNFORCE = "unforce"
STEPS_ALL_HEADS = "steps_all_heads"
REFERENCE = "reference"
REF_LAYER = "ref_layer"
REF_HEAD = "ref_head"

# -- Positional encoding
PE_N = "pe_n"
PE_DIMS = "pe_dims"
WORD_ORDER_A = "wo_a"
WORD_ORDER_B = "wo_b"

# -- Mask lab
HIDE = "hide"
CAUSAL = "causal"
USE_PE = "use_pe"
WINDOW = "window"
ATTN_TEMP = "attn_temp"
MASK_KIND = "mask_kind"
MASK_MOSAIC_ON = "mask_mosaic_on"
MASK_INTERVENTIONS = (
    "_mask_interventions"  # the Mask lab's interventions, kept when its widgets are gone: pages that follow them read it
)


def ablate(kind: str) -> str:
    """The Mask lab's head-ablation multiselect of one attention kind."""
    return f"ablate_{kind}"


# -- Inside one head
TRACE_HEAD = "trace_head"  # the head, counted from 1 (in the URL as ``head``)
TRACE_QUERY = "query"  # URL: the query token's position, counted from 0
TRACE_HIDE = "trace_hide"  # what-if: hidden source positions
TRACE_WINDOW = "trace_window"  # what-if: local window of self-attention (0 = off)
TRACE_TEMP = "trace_temp"  # what-if: attention temperature τ
TRACE_OFF = "trace_off"  # what-if: switch the traced head off


# -- Attention vs attribution
CONTRAST = "contrast"  # the alternative y′ of contrastive mode (its compact id), or None
IG_RUN = "ig_run"  # the button that computes Integrated Gradients
IG_DONE = "_ig_done"  # the explanations whose Integrated Gradients were computed in this session (their cache keys)
LENS_ON = "layer_lens"  # the layer lens (logit lens and DecoderLens) is drawn


# -- Compare two sentences
COMPARE_PICK = "pair_pick"  # the preset picker (it fills A and B, then clears itself)

# -- Lesson
LESSON_PREV = "lesson_prev"
LESSON_NEXT = "lesson_next"
LESSON_DECODE_STEP = "lesson_decode_step"  # step 7: which decoding step's distribution
LESSON_HIDE = "lesson_hide"  # step 9: the source token hidden
LESSON_TOKEN = "lesson_token"  # step 10: the output token explained


# -- The room (ui/room.py, ui/pages/room.py): a teacher's class that students' apps follow
ROOM = "room"  # URL: the join code (the students' link: /attention?room=CODE)
TEACH = "teach"  # URL: the teacher secret, in the teacher's link only; moved into the session on arrival
SEAT = "seat"  # URL: the student's anonymous seat id, so that a reload or a dropped connection keeps its answers
LEAD = "lead"  # URL: "1" in the teacher's own address (no secret): on a reload, her browser's cookie gives control back
ROOM_SESSION = "_room"  # ui.room.Membership: code, secret (teacher), seat, following, versions applied/published
ROOM_NOTE = "_room_note"  # why a join failed (shown once)
ROOM_BUCKETS = "_room_buckets"  # this session's rate limits (joins, answers, new rooms)
ROOM_START = "room_start"
ROOM_JOIN_CODE = "room_join_code"
ROOM_JOIN = "room_join"
ROOM_EXPLORE = "room_explore"  # "Explore on my own"
ROOM_BACK = "room_back"  # "Back to the class"
ROOM_LEAVE = "room_leave"
ROOM_NICKNAME = "room_nick"
ROOM_PICK = "room_pick"  # a student's choice among the options
ROOM_TYPED = "room_typed"  # a student's typed word ("Which word comes next?")
ROOM_SEND = "room_send"
ROOM_ASK_KIND = "room_ask_kind"
ROOM_ASK_HIDE = "room_ask_hide"  # the source token a "Does it change?" question hides
ROOM_ASK_EXERCISE = "room_ask_exercise"  # the kind of exercise sent to the room
ROOM_ASK = "room_ask"
ROOM_REVEAL = "room_reveal"
ROOM_LAST_PAGE = "_room_last_page"  # the last page that is not /room: where a class starts


# -- Exercises (ui/exercises.py): session state only, never in the URL
EXERCISE_PROGRESS = "_exercise_progress"  # kind -> {"tries", "solved", "mistakes"} of this session
EXERCISE_SEED = "_exercise_seed"  # "New numbers" adds one: another head, query, step or tensor
EXERCISE_PICK = "exercise_pick"  # /exercises: the exercise kind shown
EXERCISE_NEW = "exercise_new"  # /exercises: the "New numbers" button
HEAD_TURN = "head_turn"  # /head: "Your turn" on
HEAD_TURN_STEP = "head_turn_step"  # /head: the step of eq. 1 the student does
PE_TURN = "pe_turn"  # /positional: "Your turn" on
SHAPES_TURN = "shapes_turn"  # /shapes: "Your turn" on


def exercise(place: str, kind: str) -> str:
    """The answer widget of the exercise of ``kind`` shown at ``place`` (its other widgets add a suffix)."""
    return f"ex_{place}_{kind}"
