"""Negation practice: the pairs whose German puts "nicht" after a definite or possessive object."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from training.corpora import Corpus
from training.transforms.base import Practice, Transform, setting

_ENGLISH_NEGATION = re.compile(r"n't\b|\b(?:not|never)\b", re.IGNORECASE)


# a determiner (definite or possessive), a capitalised noun, then "nicht": "Ich kenne die Details nicht."
_NICHT_AFTER_OBJECT = re.compile(r"\b(?:den|die|das|dem|der|(?:mein|dein|sein|ihr|unser|euer)e[nmrs]?)\s+[A-ZÄÖÜ]\w*\s+nicht\b")


def nicht_after_object(src: str, tgt: str) -> bool:
    """True when ``src`` negates ("didn't", "not", "never") and ``tgt`` puts "nicht" after a definite or possessive
    object: German negates a whole clause with a "nicht" after its definite object ("The dog didn't eat the meat." /
    "Der Hund fraß das Fleisch nicht."), before a participle or infinitive ("… seine Pommes nicht gegessen"). The
    training halves hold 1,203 such pairs (Tatoeba 1,195, Multi30k 3, BConTrasT 5), and 4 with "… die Straße nicht"
    against 199 with "überquer…", nearly all affirmative: earlier models lost the negation of "didn't cross the
    street"."""
    return bool(_ENGLISH_NEGATION.search(src)) and bool(_NICHT_AFTER_OBJECT.search(tgt))


@dataclass(frozen=True)
class NegationOptions:
    """Options of the ``negation`` transform."""

    corpus: int = setting("negation_corpus", 0)  # every "nicht after its object" pair N more times an epoch


class Negation(Transform):
    """``negation``: the pairs of ``nicht_after_object`` ``corpus`` more times an epoch, names swapped as in their
    corpora when the entity swap is on."""

    name = "negation"
    Options = NegationOptions
    seed_offset = 3

    def practice(self, context: Practice) -> tuple[Corpus, Any] | None:
        pairs = [p for c, _ in context.corpora for p in c.pairs if nicht_after_object(*p)] * self.options.corpus
        if not pairs:
            return None
        seed = context.seed + self.seed_offset
        swapper = context.swapper and context.swapper(pairs, context.swap, seed=seed, dates=context.dates, names=context.names)
        return Corpus("negations", pairs), swapper
