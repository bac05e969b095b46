"""British spelling of the English side ("color" -> "colour"), from breame's American-British list."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from training.corpora import Corpus
from training.transforms.base import Practice, Transform, setting

LATIN_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ɏ]+")  # one word in Latin letters, accents included


def british_spelling(text: str, keep: Iterable[str] = ()) -> str:
    """``text`` with each American spelling that breame's list knows written the British way, its case kept ("My favorite
    color" -> "My favourite colour", "Center" -> "Centre"); German and every other word untouched, and the words of
    ``keep`` as they are (the swapper keeps the words its German side copies: a name such as "Gray" is no spelling).

    Why: the corpora's English is American (4,075 of 221,006 training pairs hold a word breame spells otherwise in
    Britain, almost none the British form), and an earlier model wrote "My favourite colour is blue." as "Mein Favouriter ist
    blau." and "20 metres" as "20 Meister" ("favorite color", "meters": right). English in German schools is British.
    breame (Apache-2.0) is needed for training only, like Faker."""
    from breame.spelling import american_spelling_exists, get_british_spelling

    keep = frozenset(keep)

    def one(m: re.Match) -> str:
        word = m.group()
        if word in keep or not american_spelling_exists(word):
            return word
        gb = get_british_spelling(word)  # lower case
        return gb.upper() if word.isupper() and len(word) > 1 else gb.capitalize() if word[0].isupper() else gb

    return LATIN_WORD.sub(one, text)


@dataclass(frozen=True)
class SpellingOptions:
    """Options of the ``spelling`` transform (both need the entity swap, whose swappers spell)."""

    british: float = setting("british_spelling", 0.0)  # share of American-spelled pairs spelled the British way
    corpus: int = setting("british_corpus", 0)  # every American-spelled pair N more times, spelled the British way


class Spelling(Transform):
    """``spelling``: each epoch a ``british`` share of the pairs whose English holds an American spelling gets it
    spelled the British way (``british_spelling``); ``corpus`` N adds those pairs N more times, all British."""

    name = "spelling"
    Options = SpellingOptions
    seed_offset = 4

    def practice(self, context: Practice) -> tuple[Corpus, Any] | None:
        if not (self.options.corpus and context.swapper):
            return None
        pairs = [p for c, _ in context.corpora for p in c.pairs if british_spelling(p[0]) != p[0]] * self.options.corpus
        seed = context.seed + self.seed_offset
        return Corpus("british", pairs), context.swapper(pairs, context.swap, seed=seed, names=context.names, british=1.0)
