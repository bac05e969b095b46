"""The cached calls of ``ui.state`` key their results by every input: two inputs share a cache entry exactly when
they are equal. ``DecodeSettings`` and ``Interventions`` are hashed by ``ui.state.HASH_FUNCS`` (cheaper than
Streamlit's generic dataclass hashing); these tests hash them the way ``st.cache_data`` does."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from hypothesis import given
from hypothesis import strategies as hst
from streamlit.runtime.caching.cache_type import CacheType
from streamlit.runtime.caching.hashing import update_hash

from model.settings import KINDS, DecodeSettings, Interventions
from ui import state
from ui.state import HASH_FUNCS


@dataclass
class Made:
    """What a fake model worker returns for an analysis: which call made it, with the arrays an analysis has."""

    name: str
    maps: SimpleNamespace


SETTINGS = hst.builds(
    DecodeSettings,
    method=hst.sampled_from(["greedy", "beam", "sample"]),
    beam_size=hst.integers(1, 3),
    alpha=hst.sampled_from([0.0, 0.6, 1.5]),
    temperature=hst.sampled_from([0.5, 1.0, 1.0000001, 2.0]),
    top_k=hst.integers(0, 2),
    top_p=hst.sampled_from([0.9, 1.0]),
    seed=hst.integers(0, 2),
    max_new=hst.none() | hst.integers(1, 3),
    early_stop=hst.booleans(),
)
POSITIONS = hst.frozensets(hst.integers(0, 4), max_size=3)
INTERVENTIONS = hst.builds(
    Interventions,
    src_hidden=POSITIONS,
    causal=hst.booleans(),
    temperature=hst.sampled_from([0.5, 1.0, 2.0]),
    ablate=hst.frozensets(hst.tuples(hst.sampled_from(KINDS), hst.integers(0, 1), hst.integers(0, 1)), max_size=2),
    window=hst.none() | hst.integers(1, 3),
    use_pos_encoding=hst.booleans(),
)


def key(value) -> str:
    """The digest ``st.cache_data`` adds to a call's key for this argument."""
    h = hashlib.new("md5")
    update_hash(value, hasher=h, cache_type=CacheType.DATA, hash_source=None, hash_funcs=HASH_FUNCS)
    return h.hexdigest()


@given(SETTINGS, SETTINGS)
def test_decode_settings_share_a_cache_entry_exactly_when_equal(a, b):
    assert (key(a) == key(b)) == (a == b)


@given(INTERVENTIONS, INTERVENTIONS)
def test_interventions_share_a_cache_entry_exactly_when_equal(a, b):
    assert (key(a) == key(b)) == (a == b)


def test_equal_sets_in_another_order_share_a_cache_entry():
    a = Interventions(src_hidden=frozenset(range(40)))
    b = Interventions(src_hidden=frozenset(reversed(range(40))))
    assert key(a) == key(b)


def test_the_page_reads_the_analysis_the_frame_computed(monkeypatch):
    """The analysis app.py computes ahead of the page gate (``analyse_ahead``) is the one a page asks for with the
    unchanged model's interventions: one model call, not two."""
    calls = []

    class Worker:
        def call_many(self, loaded, fn_many, fn_one, item, *args):
            calls.append(item)
            arrays = {name: np.zeros(2) for name in ("enc_self", "dec_self", "cross", "next_probs")}
            return Made(f"analysis {len(calls)} of {item}", SimpleNamespace(**arrays))

    monkeypatch.setattr(state, "MODEL_WORKER", Worker())
    monkeypatch.setattr(state, "load_model", lambda path: None)
    state.run_analysis.clear()
    state.shared_analysis.clear()
    frame = state.Frame("some/model", "A dog runs.", DecodeSettings())
    ahead = state.analyse_ahead(frame)
    assert ahead.analysis.name == "analysis 1 of A dog runs." and ahead == frame  # handed to the page with the frame
    assert state.analyse_ahead(frame).analysis is ahead.analysis, "every session on this input shares one object"
    assert not ahead.analysis.maps.cross.flags.writeable, "which nobody may change"
    assert state.run_analysis(frame.path, frame.text, frame.settings, Interventions()).name == "analysis 1 of A dog runs."
    changed = state.run_analysis(frame.path, frame.text, frame.settings, Interventions(causal=False))
    assert changed.name == "analysis 2 of A dog runs."
    assert calls == ["A dog runs.", "A dog runs."]
    state.run_analysis.clear()
    state.shared_analysis.clear()
