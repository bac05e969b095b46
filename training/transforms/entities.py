"""Entity substitution: names, places and numbers a pair shares verbatim, swapped on both sides.

Tatoeba's English side names "Tom" in 24 % of its sentences, so a model trained on it learns that a
name *is* "Tom" rather than how to copy one. When a name, place or number appears verbatim on both
sides of a pair, we replace it on both sides by a random one, so that the only way to get the target
right is to copy the source (the "entity swap" augmentation of e.g. Hu et al. 2019, "Learning to
copy named entities"). Names and places come from Faker's locale data: a well-kept, MIT-licensed
library with first names, surnames and cities of 100+ locales in their own scripts, so one call
gives names from many languages without a list of our own.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from training.corpora import Corpus
from training.transforms.base import Practice, Transform, setting
from training.transforms.clock import random_clock_words
from training.transforms.dates import MONTHS
from training.transforms.numbers import (
    NUMBER,
    TIME,
    YEARS,
    german_number,
    number_pattern,
    random_grouped_number,
    random_long_number,
    random_number_like,
)
from training.transforms.spelling import LATIN_WORD

ENTITY_LOCALES = (
    # Latin script, most of what a class types: Europe, the Americas, Africa, Asia in Latin letters
    "de_DE", "fr_FR", "es_ES", "it_IT", "pt_BR", "pl_PL", "tr_TR", "cs_CZ", "sv_SE", "da_DK", "nl_NL",
    "hr_HR", "ro_RO", "sk_SK", "sl_SI", "lt_LT", "lv_LV", "et_EE", "id_ID", "vi_VN", "fil_PH", "en_US",
    "en_GB", "en_IN", "en_NZ", "es_MX", "pt_PT", "de_AT", "fr_CH", "ga_IE", "tw_GH", "yo_NG", "zu_ZA",
    "az_AZ", "ja_JP",
    # other scripts (Faker's own spelling): Cyrillic, Greek, Hebrew, Arabic, Devanagari, Hangul, Thai, CJK
    "ru_RU", "uk_UA", "bg_BG", "el_GR", "he_IL", "ar_AA", "hi_IN", "ko_KR", "th_TH", "zh_CN",
)  # fmt: skip


_OTHER_SCRIPTS = frozenset(ENTITY_LOCALES[ENTITY_LOCALES.index("ru_RU") :])


NOT_NAMES = frozenset({"Dr", "Mr", "Mrs", "Ms", "Mt", "St", "Jr", "Sr", "Prof"})  # titles, not names


NAME_WORD = re.compile(r"[^\W\d_][^\W\d_'’-]*(?:-[^\W\d_]+)*")  # a word of letters, maybe hyphenated


@dataclass(frozen=True)
class EntityPools:
    """Replacement names and places, each a tuple of distinct strings (one or two words each)."""

    first_names: tuple[str, ...]
    last_names: tuple[str, ...]
    cities: tuple[str, ...]
    splice: float = 0.0  # share of draws that join the front of one name to the back of another
    full_name: float = 0.0  # share of first-name draws followed by a surname ("Emeka Okonkwo")
    years: float = 0.0  # share of whole numbers replaced by a year, whatever their length ("3 cats" -> "1987 cats")
    piece_names: float = 0.0  # share of one-word draws made of 2-3 word pieces ("A" + "yes" + "ha" -> "Ayesha")
    pieces: tuple[str, ...] = ()  # the word pieces of piece names: ``word_pieces`` of the vocabulary
    piece_heads: float = 0.0  # share of piece names that begin with a capitalised piece ("Tim", "Raj" + 0-2 pieces)
    heads: tuple[str, ...] = ()  # those capitalised pieces: ``capital_pieces`` of the vocabulary
    long_numbers: float = 0.0  # share of whole numbers replaced by a long one ("14 tickets" -> "0176 55512 tickets")
    grouped_numbers: float = 0.0  # share of whole numbers replaced by "3,700,000" / "3.5", German "3.700.000" / "3,5"
    clock_words: float = 0.0  # share of clock times replaced by words: "half past seven" / "halb acht"
    digit_repeats: float = 0.0  # in a long number, the chance that a digit repeats the one before ("0176 5552227")

    def draw(self, rng: random.Random) -> str:
        """A random first name (half the time), surname or city (a quarter each); a ``splice`` share of the
        one-word Latin-script draws is a new word made of two of the pool ("Amira" + "Kowalczyk" -> "Amalczyk"),
        so that copying is practised on piece sequences no list holds (a test name is rarely in any list);
        a ``full_name`` share of the first names is followed by a surname, so that a name of two words is
        copied whole (an early model wrote "Emeka Okonkwo plays the guitar." as "Emeka.")."""
        r = rng.random()
        pool = self.first_names if r < 0.5 else self.last_names if r < 0.75 else self.cities
        word = self._one(pool, rng)
        if pool is self.first_names and self.full_name and rng.random() < self.full_name:
            word += " " + self._one(self.last_names, rng)
        return word

    def number(self, number: str, rng: random.Random) -> str:
        """A replacement for ``number``: ``random_number_like``, or, for a ``years`` share of the whole numbers, a year
        of ``YEARS``. The four-digit numbers of the corpora are few (about 400 pairs), so the year pieces ("198",
        "199") were seldom copied: an early model wrote 1983-1999 as 196x, with the source piece attended (0.9) and the
        output nearly flat over the year pieces. A ``long_numbers`` share of the whole numbers becomes
        ``random_long_number`` instead (a phone number, a postcode), and a ``grouped_numbers`` share
        ``random_grouped_number`` (English form: "3,700,000", "3.5"; ``german_number`` writes the German side)."""
        if self.long_numbers and number.isdigit() and rng.random() < self.long_numbers:
            return random_long_number(rng, self.digit_repeats)
        if self.grouped_numbers and number.isdigit() and rng.random() < self.grouped_numbers:
            return random_grouped_number(rng)
        if self.years and number.isdigit() and rng.random() < self.years:
            return str(rng.randint(*YEARS))
        return random_number_like(number, rng)

    def _one(self, pool: tuple[str, ...], rng: random.Random) -> str:
        if self.piece_names and self.pieces and rng.random() < self.piece_names:
            if self.piece_heads and self.heads and rng.random() < self.piece_heads:
                return rng.choice(self.heads) + "".join(rng.choice(self.pieces) for _ in range(rng.randint(0, 2)))
            return "".join(rng.choice(self.pieces) for _ in range(rng.randint(2, 3))).capitalize()
        word = rng.choice(pool)
        if self.splice and rng.random() < self.splice:
            other = rng.choice(pool)
            if LATIN_WORD.fullmatch(word) and LATIN_WORD.fullmatch(other) and len(word) > 2 and len(other) > 2:
                word = word[: rng.randint(2, len(word) - 1)] + other[rng.randint(1, len(other) - 2) :].lower()
        return word

    def __contains__(self, word: str) -> bool:
        return word in self.first_names or word in self.last_names or word in self.cities


def word_pieces(texts: Iterable[str], longest: int = 4) -> tuple[str, ...]:
    """The pieces of a vocabulary (their texts) that a piece name is made of: lowercase ASCII letters only, no
    leading space, 1 to ``longest`` letters ("a", "yes", "ha", "on", "kw"), sorted.

    Why: a name whose pieces are also English words is translated piece by piece. Stages 7-9 wrote "Ayesha"
    ("A" "yes" "ha") as "EineJaha" and "Okonkwo" (" Ok" "on" "k" "wo") as "Felonkwo"; names made of random pieces
    teach that a capitalised run of pieces the model has not seen together is copied, whatever its pieces mean."""
    return tuple(sorted({t for t in texts if 1 <= len(t) <= longest and t.isascii() and t.isalpha() and t.islower()}))


def capital_pieces(texts: Iterable[str], longest: int = 8) -> tuple[str, ...]:
    """The capitalised word pieces of a vocabulary (their texts, a leading space dropped): ASCII letters, the first
    upper case and the rest lower, 2 to ``longest`` letters ("Tim", "Raj", "Moh"), sorted; not those whose lower case is
    a word of the vocabulary too (" about" drops "About", " after" "After"), so that a sentence's first word is not
    practised as a name to copy (752 of the shipped vocabulary's 1,612).

    Why: a first name that is one such piece is lost when the piece is rarely a target in the corpora (" Tim": 5
    training sentences), since its tied embedding is hardly trained as an output: stages 8 and 10 wrote "Tim is my
    friend." as "Ah ist mein Freund.". Piece names that begin with one (``EntityPools.piece_heads``) practise them."""
    texts = set(texts)
    words = {t.removeprefix(" ") for t in texts}
    return tuple(
        sorted(
            w
            for w in words
            if 2 <= len(w) <= longest and w.isascii() and w.isalpha() and w.istitle() and " " + w.lower() not in texts
        )
    )


def entity_pools(
    locales: tuple[str, ...] = ENTITY_LOCALES,
    per_locale: int = 400,
    other_script_share: float = 0.2,
    seed: int = 0,
    splice: float = 0.0,
    full_name: float = 0.0,
    years: float = 0.0,
    piece_names: float = 0.0,
    pieces: tuple[str, ...] = (),
    piece_heads: float = 0.0,
    heads: tuple[str, ...] = (),
    long_numbers: float = 0.0,
    grouped_numbers: float = 0.0,
    clock_words: float = 0.0,
    digit_repeats: float = 0.0,
) -> EntityPools:
    """Draw names and cities from Faker's locale data (``faker`` is needed for training only); ``splice``,
    ``full_name``, ``years``, ``piece_names``, ``pieces``, ``piece_heads``, ``heads``, ``long_numbers``,
    ``grouped_numbers``, ``clock_words`` and ``digit_repeats`` are ``EntityPools``'s.

    Each locale gives up to ``per_locale`` first names, surnames and cities (fewer cities: Faker's lists
    are short for some); the locales in non-Latin scripts are kept to ``other_script_share`` of each pool,
    since a class mostly types names in Latin letters. Deterministic for a ``seed``.
    Raises ImportError with a hint if Faker is not installed.
    """
    try:
        from faker import Faker
    except ImportError as e:  # pragma: no cover - a clear message for a missing optional package
        raise ImportError("entity substitution needs Faker: pip install -r requirements-test.txt") from e

    pools: dict[str, dict[str, list[str]]] = {"first": {}, "last": {}, "city": {}}
    for loc in locales:
        fake = Faker(loc)
        fake.seed_instance(seed)
        for kind, fn in (("first", fake.first_name), ("last", fake.last_name), ("city", fake.city)):
            n = per_locale if kind != "city" else per_locale // 2
            words = {w for w in (fn() for _ in range(n)) if 1 < len(w) <= 24 and not any(ch.isdigit() for ch in w)}
            pools[kind][loc] = sorted(words)

    def mix(by_loc: dict[str, list[str]]) -> tuple[str, ...]:
        latin = sorted({w for loc, ws in by_loc.items() if loc not in _OTHER_SCRIPTS for w in ws})
        other = sorted({w for loc, ws in by_loc.items() if loc in _OTHER_SCRIPTS for w in ws} - set(latin))
        keep = int(len(latin) * other_script_share / (1 - other_script_share))
        other = random.Random(seed).sample(other, min(keep, len(other)))
        return tuple(latin + sorted(other))

    return EntityPools(
        mix(pools["first"]), mix(pools["last"]), mix(pools["city"]), splice, full_name, years, piece_names, tuple(pieces),
        piece_heads, tuple(heads), long_numbers, grouped_numbers, clock_words, digit_repeats,
    )  # fmt: skip


def proper_nouns(src_texts: Iterable[str], min_count: int = 2) -> frozenset[str]:
    """Words the source side writes capitalised inside a sentence (not first) at least ``min_count``
    times and in lower case less than 1 time in 20: names and places such as Tom, Mary, Boston (not "I", not "The", not a
    month: "April" and "August" are German too, and a month is practised as a month, ``shared_months``)."""
    upper: Counter[str] = Counter()
    lower: Counter[str] = Counter()
    for text in src_texts:
        words = NAME_WORD.findall(text)
        for k, w in enumerate(words):
            if w[0].isupper():
                if k > 0 and len(w) > 1 and not w.isupper():
                    upper[w] += 1
            else:
                lower[w.lower()] += 1
    return frozenset(
        w for w, n in upper.items() if n >= min_count and lower[w.lower()] * 20 < n and w not in NOT_NAMES and w not in MONTHS
    )


def shared_entities(src: str, tgt: str, names: frozenset[str], *, german_formats: bool = False) -> list[str]:
    """The names (words in ``names``) and numbers that appear verbatim, as whole words, on both sides of a
    pair, in order of first appearance in ``src``. A German genitive "Toms" counts as "Tom". With ``german_formats``
    an English "12,000" is found on the German side as "12.000", "12 000" or "12000" too, and "3.5" as "3,5"."""
    found: list[str] = []
    for w in NAME_WORD.findall(src):
        if w in names and w not in found and re.search(rf"(?<!\w){re.escape(w)}s?(?!\w)", tgt):
            found.append(w)
    for m in NUMBER.finditer(src):
        n = m.group()
        if n not in found and re.search(number_pattern(n, german=True, formats=german_formats), tgt):
            found.append(n)
    return found


def substitute_entities(src: str, tgt: str, entities: list[str], pools: EntityPools, rng: random.Random) -> tuple[str, str]:
    """Replace each entity of ``entities`` (from ``shared_entities``) by the same random name, place or
    number on both sides; a German genitive "-s" stays attached ("Toms" -> "Amiras"), and a clock time
    the German side writes with a dot ("2.30 Uhr" for "2:30") takes the English colon, like every copied number.
    With ``pools.grouped_numbers`` set, a number's German side is written as German writes it instead (``german_number``:
    "12,000" -> "12.000", "3.5" -> "3,5"), found in any of German's forms (``shared_entities``' ``german_formats``).
    A ``pools.clock_words`` share of the clock times becomes words on both sides (``random_clock_words``), a German
    "Uhr" after the time taken with it."""
    formats = pools.grouped_numbers > 0  # German number formats: "12,000" is "12.000" on the German side
    for e in entities:
        new = pools.number(e, rng) if e[0].isdigit() else pools.draw(rng)
        new_tgt = german_number(new) if formats else new
        uhr = ""  # words replace a German "Uhr" after the time too ("um 7:45 Uhr" -> "um Viertel vor acht")
        if TIME.fullmatch(e) and pools.clock_words and rng.random() < pools.clock_words:
            (new, new_tgt), uhr = random_clock_words(rng), "(?: Uhr)?"
        if e[0].isdigit():
            pat_src, pat_tgt = number_pattern(e), number_pattern(e, german=True, formats=formats) + uhr
        else:
            pat_src, pat_tgt = rf"(?<!\w){re.escape(e)}(?!\w)", rf"(?<!\w){re.escape(e)}(?=s?(?!\w))"
        src = re.sub(pat_src, lambda _m, n=new: n, src)
        tgt = re.sub(pat_tgt, lambda _m, n=new_tgt: n, tgt)
    return src, tgt


@dataclass(frozen=True)
class EntityOptions:
    """Options of the ``entities`` transform (``EntityPools``'s shares, the swap probability and copy practice)."""

    p: float = setting("entity_swap", 0.0)  # chance a pair's shared names, places and numbers are swapped an epoch
    splice: float = setting("entity_splice", 0.0)  # share of one-word Latin names spliced from two
    full_name: float = setting("entity_full_name", 0.0)  # share of first names followed by a surname
    years: float = setting("entity_years", 0.0)  # share of whole numbers replaced by a year
    long_numbers: float = setting("entity_long_numbers", 0.0)  # share of whole numbers replaced by a long one
    digit_repeats: float = setting("entity_digit_repeats", 0.0)  # chance a long number's digit repeats the last
    grouped_numbers: float = setting("entity_grouped_numbers", 0.0)  # share replaced by "3,700,000" / "3.5"
    piece_names: float = setting("entity_piece_names", 0.0)  # share of one-word names made of vocabulary pieces
    piece_heads: float = setting("entity_piece_heads", 0.0)  # share of piece names that begin with a capital piece
    corpus: float = setting("entity_corpus", 0.0)  # weight of the copy-practice corpus (every pair with an entity)


class Entities(Transform):
    """``entities``: each epoch a ``p`` share of the pairs that share a name, place or number on both sides get a
    random one (``EntitySwapper``, pools from ``entity_pools``); ``corpus`` W adds those pairs (and the dated ones)
    as one more corpus of weight W, always swapped."""

    name = "entities"
    Options = EntityOptions
    seed_offset = 1

    def pools(self, seed: int, piece_texts: list[str], clock_words: float) -> EntityPools:
        """The replacement names, places and numbers of a run (``entity_pools`` with these options); ``piece_texts``:
        the texts of the vocabulary's pieces that piece names are made of."""
        o = self.options
        return entity_pools(
            seed=seed, splice=o.splice, full_name=o.full_name, years=o.years, piece_names=o.piece_names,
            pieces=word_pieces(piece_texts), piece_heads=o.piece_heads, heads=capital_pieces(piece_texts),
            long_numbers=o.long_numbers, grouped_numbers=o.grouped_numbers, clock_words=clock_words,
            digit_repeats=o.digit_repeats,
        )  # fmt: skip

    def practice(self, context: Practice) -> tuple[Corpus, Any] | None:
        if not (self.options.corpus and context.swapper):
            return None
        pairs = [c.pairs[i] for c, sw in context.corpora for i in sorted(sw.entities | sw.dates | sw.months)]
        seed = context.seed + self.seed_offset
        swapper = context.swapper(pairs, 1.0, seed=seed, dates=context.dates, british=context.british)
        return Corpus("entities", pairs, self.options.corpus), swapper
