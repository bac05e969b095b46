"""``EntitySwapper``: one corpus's augmentation, drawn fresh each epoch: its shared names, places and numbers
swapped (``entities``), its clock times moved together (``clock``), its dates redrawn (``dates``) and its American
spellings made British (``spelling``), all from one seed so that a run is repeatable."""

from __future__ import annotations

import random

from training.transforms.clock import later_times, substitute_later_times
from training.transforms.dates import months_to_dates, shared_dates, shared_months, substitute_dates
from training.transforms.entities import EntityPools, proper_nouns, shared_entities, substitute_entities
from training.transforms.spelling import LATIN_WORD, british_spelling


class EntitySwapper:
    """Entity substitution for a list of training pairs, fresh each epoch.

    ``swapped(epoch)`` returns, for each pair index that has a shared entity, its changed pair with
    probability ``p`` (a fresh draw each epoch, deterministic for ``seed`` and ``epoch``); pairs
    without a shared entity are never changed. With ``later`` a pair whose German side writes an English clock
    time 12 hours later (``later_times``) is swapped too, both times moved together (``substitute_later_times``).
    With ``dates`` a pair with an English date that the German side writes as a date (``shared_dates``) gets a new day and
    month on both sides (``substitute_dates``), its day no longer swapped as a plain number ("47. Mai"), and a pair with
    "in May" / "im Mai" (``shared_months``) gets a date instead (``months_to_dates``). ``names``: the words that count
    as names (default: ``proper_nouns`` of the pairs' English side). With ``british`` a share of the pairs whose English
    holds an American spelling gets it spelled the British way (``british_spelling``, its own draw, after the
    entities; the German untouched).
    """

    def __init__(
        self,
        pairs: list[tuple[str, str]],
        pools: EntityPools,
        p: float = 0.5,
        seed: int = 0,
        *,
        later: bool = False,
        dates: bool = False,
        names: frozenset[str] | None = None,
        british: float = 0.0,
    ):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"entity substitution probability must be in [0, 1], got {p}")
        if not 0.0 <= british <= 1.0:
            raise ValueError(f"British spelling share must be in [0, 1], got {british}")
        self.british = british
        self.american = [i for i, (s, _) in enumerate(pairs) if british_spelling(s) != s] if british else []
        self.names = proper_nouns(s for s, _ in pairs) if names is None else names
        self.pairs, self.pools, self.p, self.seed = pairs, pools, p, seed
        formats = pools.grouped_numbers > 0
        self.entities = {
            i: e for i, (s, t) in enumerate(pairs) if (e := shared_entities(s, t, self.names, german_formats=formats))
        }
        self.later = {i: lt for i, (s, t) in enumerate(pairs) if (lt := later_times(s, t))} if later else {}
        self.dates = {i: d for i, (s, t) in enumerate(pairs) if (d := shared_dates(s, t))} if dates else {}
        self.months = {i: m for i, (s, t) in enumerate(pairs) if (m := shared_months(s, t))} if dates else {}
        for i, found in self.dates.items():  # a date's day is the date's, not a number to swap on its own
            days = {str(day) for _, day, _ in found}
            if left := [e for e in self.entities.pop(i, []) if e not in days]:
                self.entities[i] = left

    def swapped(self, epoch: int) -> dict[int, tuple[str, str]]:
        rng = random.Random(f"{self.seed}:{epoch}")
        out = {}
        extra = self.later.keys() | self.dates.keys() | self.months.keys()
        for i in sorted(self.entities.keys() | extra) if extra else self.entities:
            if rng.random() < self.p:
                src, tgt = self.pairs[i]
                if i in self.entities:
                    src, tgt = substitute_entities(src, tgt, self.entities[i], self.pools, rng)
                if i in self.later:
                    src, tgt = substitute_later_times(src, tgt, self.later[i], rng)
                if i in self.dates:
                    src, tgt = substitute_dates(src, tgt, self.dates[i], rng)
                if i in self.months:
                    src, tgt = months_to_dates(src, tgt, self.months[i], rng)
                out[i] = src, tgt
        rng = random.Random(f"{self.seed}:{epoch}:british")  # its own draws: the entity swaps stay as without it
        for i in self.american:
            if rng.random() < self.british:
                src, tgt = out.get(i, self.pairs[i])
                out[i] = british_spelling(src, keep=LATIN_WORD.findall(tgt)), tgt
        return out
