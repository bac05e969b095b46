"""Parallel text: reading corpora by name (Multi30k, Tatoeba, BConTrasT, or any folder of
``{split}.{src,tgt}[.gz]`` under the data root), mixing them with sampling weights, and batching
by token count."""

from __future__ import annotations

import calendar
import gzip
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

MULTI30K_ENV = "MULTI30K_DIR"
DATA_ROOT_ENV = "ATTN_DATA_ROOT"
DEV_SPLITS = ("dev", "val")  # the tuning split's name, in the order it is looked for


def default_data_dir() -> Path | None:
    """Where Multi30k's raw files are: ``$MULTI30K_DIR``, else ``../shared/data/multi30k``,
    else ``data/multi30k`` (relative to the repository). None if none exists."""
    root = Path(__file__).resolve().parent.parent
    candidates = [os.environ.get(MULTI30K_ENV), root.parent / "shared/data/multi30k", root / "data/multi30k"]
    for c in candidates:
        if c and (Path(c) / "train.en.gz").exists() or c and (Path(c) / "train.en").exists():
            return Path(c)
    return None


def data_root() -> Path | None:
    """The folder that holds one folder per corpus: ``$ATTN_DATA_ROOT``, else ``../shared/data``
    beside the clone, else ``data/`` inside it. None if none exists."""
    root = Path(__file__).resolve().parent.parent
    for c in (os.environ.get(DATA_ROOT_ENV), root.parent / "shared/data", root / "data"):
        if c and Path(c).is_dir():
            return Path(c)
    return None


def corpus_dir(name: str, root: str | Path | None = None) -> Path:
    """The folder of corpus ``name`` (``ROOT/name``; Multi30k also honours ``$MULTI30K_DIR``).

    Raises FileNotFoundError naming where it looked.
    """
    if name == "multi30k" and root is None and os.environ.get(MULTI30K_ENV):
        return Path(os.environ[MULTI30K_ENV])
    base = Path(root) if root is not None else data_root()
    if base is None or not (base / name).is_dir():
        raise FileNotFoundError(
            f"corpus {name!r} not found: no folder {name}/ under {base or 'the data root'} (set ${DATA_ROOT_ENV})"
        )
    return base / name


def splits_of(folder: str | Path, lang: str = "en") -> list[str]:
    """Every split name in ``folder`` that has a ``{split}.{lang}[.gz]`` file, sorted."""
    names = {p.name.removesuffix(".gz").removesuffix(f".{lang}") for p in Path(folder).glob(f"*.{lang}*")}
    return sorted(n for n in names if (Path(folder) / f"{n}.{lang}.gz").exists() or (Path(folder) / f"{n}.{lang}").exists())


def dev_split(folder: str | Path, lang: str = "en") -> str:
    """The tuning split of a corpus folder: ``dev``, else ``val``. Raises FileNotFoundError."""
    have = splits_of(folder, lang)
    for s in DEV_SPLITS:
        if s in have:
            return s
    raise FileNotFoundError(f"{folder} has no dev or val split (splits: {have})")


def test_splits(folder: str | Path, lang: str = "en") -> list[str]:
    """The test splits of a corpus folder: every split whose name starts with ``test``."""
    return [s for s in splits_of(folder, lang) if s.startswith("test")]


def parse_corpus_spec(spec: str) -> tuple[str, float]:
    """``"tatoeba"`` -> ("tatoeba", 1.0); ``"multi30k:3"`` -> ("multi30k", 3.0).

    Raises ValueError for an empty name or a weight that is not a positive number.
    """
    name, _, w = spec.partition(":")
    try:
        weight = float(w) if w else 1.0
    except ValueError:
        raise ValueError(f"--corpus {spec!r}: the weight after ':' must be a number") from None
    if not name or not weight > 0:
        raise ValueError(f"--corpus {spec!r}: give NAME or NAME:WEIGHT with WEIGHT > 0")
    return name, weight


def weighted_mix(sizes: list[int], weights: list[float], seed: int) -> list[tuple[int, int]]:
    """One epoch of a weighted mix of corpora: (corpus index, example index) pairs.

    Corpus c contributes ``weights[c] * sizes[c]`` examples: every example ``floor(weight)`` times,
    plus a random ``weight - floor(weight)`` share of its examples once more (fairseq-style
    up/down-sampling). Deterministic for a given ``seed``.
    """
    rng = random.Random(seed)
    out: list[tuple[int, int]] = []
    for c, (n, w) in enumerate(zip(sizes, weights, strict=True)):
        whole, frac = int(w), w - int(w)
        out += [(c, i) for _ in range(whole) for i in range(n)]
        out += [(c, i) for i in rng.sample(range(n), round(frac * n))]
    return out


def read_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file, gzip-compressed if it ends in ``.gz``; trailing newlines stripped."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def split_file(data_dir: str | Path, split: str, lang: str) -> Path:
    """``DIR/{split}.{lang}.gz`` (Multi30k ``data/task1/raw`` layout) or the uncompressed file.

    Raises FileNotFoundError naming both candidates.
    """
    d = Path(data_dir)
    for p in (d / f"{split}.{lang}.gz", d / f"{split}.{lang}"):
        if p.exists():
            return p
    raise FileNotFoundError(f"no {split}.{lang}.gz or {split}.{lang} in {d}")


def read_pairs(src_path: str | Path, tgt_path: str | Path) -> list[tuple[str, str]]:
    """Aligned (source, target) sentence pairs. Raises ValueError if the files differ in length."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    return list(zip(src, tgt, strict=True))


def pad_batch(seqs: list[list[int]], pad_id: int) -> Tensor:
    """Right-pad id lists into a ``(B, T_max)`` long tensor.

    The rows are padded as Python lists and made into one tensor by one call: a row at a time cost ~20 µs a row,
    ~80 ms for a GPU batch of 48,000 tokens (bench/README 10), more than a GPU step.
    """
    T = max(len(s) for s in seqs)
    return torch.tensor([list(s) + [pad_id] * (T - len(s)) for s in seqs], dtype=torch.long)  # (B, T_max)


def token_batches(
    examples: list[tuple[list[int], list[int]]],
    max_tokens: int,
    *,
    shuffle: bool,
    seed: int = 0,
) -> Iterator[list[int]]:
    """Indices of examples grouped so that each batch holds at most ``max_tokens`` padded tokens
    (source + target, ``B * (S_max + T_max)``); an example longer than that is a batch on its own.
    Every example is in exactly one batch. Examples are sorted by length within shuffled buckets,
    so padding is small.
    """
    rng = random.Random(seed)
    order = list(range(len(examples)))
    if shuffle:
        rng.shuffle(order)
    batches: list[list[int]] = []
    bucket = 100 * 64
    for start in range(0, len(order), bucket):
        chunk = sorted(order[start : start + bucket], key=lambda i: (len(examples[i][0]), len(examples[i][1])))
        cur: list[int] = []
        long_src = long_tgt = 0  # source and target are padded separately: B * (S_max + T_max) tokens
        for i in chunk:
            s, t = len(examples[i][0]), len(examples[i][1])
            if cur and (max(long_src, s) + max(long_tgt, t)) * (len(cur) + 1) > max_tokens:
                batches.append(cur)
                cur, long_src, long_tgt = [], 0, 0
            cur.append(i)
            long_src, long_tgt = max(long_src, s), max(long_tgt, t)
        if cur:
            batches.append(cur)
    if shuffle:
        rng.shuffle(batches)
    yield from batches


# -- entity substitution (names, places, numbers) --------------------------------------------------
#
# Tatoeba's English side names "Tom" in 24 % of its sentences, so a model trained on it learns that a
# name *is* "Tom" rather than how to copy one. When a name, place or number appears verbatim on both
# sides of a pair, we replace it on both sides by a random one, so that the only way to get the target
# right is to copy the source (the "entity swap" augmentation of e.g. Hu et al. 2019, "Learning to
# copy named entities"). Names and places come from Faker's locale data: a well-kept, MIT-licensed
# library with first names, surnames and cities of 100+ locales in their own scripts, so one call
# gives names from many languages without a list of our own.

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
LATIN_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ɏ]+")  # one word in Latin letters, accents included
NUMBER = re.compile(r"(?<![\w.,:])\d+(?:[.,:]\d+)*(?![\w]|[.,:]\d)")  # 30, 7:45, 1,000, 3.5
TIME = re.compile(r"\d{1,2}:\d\d")  # a clock time as English writes it: 7:45, 12:30
GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+")  # a number with English thousands separators: 12,000, 3,700,000
DECIMAL = re.compile(r"\d+\.\d+")  # a number with an English decimal point: 3.5, 12.50


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
        copied whole (stage 7 wrote "Emeka Okonkwo plays the guitar." as "Emeka.")."""
        r = rng.random()
        pool = self.first_names if r < 0.5 else self.last_names if r < 0.75 else self.cities
        word = self._one(pool, rng)
        if pool is self.first_names and self.full_name and rng.random() < self.full_name:
            word += " " + self._one(self.last_names, rng)
        return word

    def number(self, number: str, rng: random.Random) -> str:
        """A replacement for ``number``: ``random_number_like``, or, for a ``years`` share of the whole numbers, a year
        of ``YEARS``. The four-digit numbers of the corpora are few (about 400 pairs), so the year pieces ("198",
        "199") were seldom copied: stage 7 wrote 1983-1999 as 196x, with the source piece attended (0.9) and the
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
        if n not in found and re.search(_number_pattern(n, german=True, formats=german_formats), tgt):
            found.append(n)
    return found


GERMAN_HOURS = ("zwölf", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf")


def _number_pattern(number: str, *, german: bool = False, formats: bool = False) -> str:
    """The pattern of ``number`` as a whole number (not part of "7:450" or "3.5.1"); on the German side
    (``german``) a clock time "7:45" also as "7.45", and a half hour "9:30" also as "halb zehn" (German writes all
    three; the swap writes the English form on both sides). Tatoeba writes 110 of its training pairs' half hours
    "halb ..." and only 61 "H:30"-shaped times copied, so stages 7-9 wrote "9:30" as "halb drei". With ``formats``
    (and ``german``) a number with English thousands separators also as German groups it (a dot, a space or
    nothing: "12.000", "12 000", "12000") and a decimal point also as a decimal comma ("3,5")."""
    body = re.escape(number)
    if german and formats and GROUPED.fullmatch(number):
        body = r"[.,\s]?".join(number.split(","))  # "12,000" -> 12[.,\s]?000: digits need no escape
    elif german and formats and DECIMAL.fullmatch(number):
        body = body.replace(r"\.", "[.,]")
    if german and TIME.fullmatch(number):
        body = body.replace(":", "[:.]")
        hour, minute = (int(x) for x in number.split(":"))
        if minute == 30 and 1 <= hour <= 12:
            body = rf"(?:{body}|halb {GERMAN_HOURS[(hour + 1) % 12]})"
    return rf"(?<![\w.,:]){body}(?![\w]|[.,:]\d)"


YEAR_SHARE = 0.5  # of the numbers that could be years (1000-2999): replaced by a year of YEARS, not any 4 digits
YEARS = (1900, 2039)


def random_number_like(number: str, rng: random.Random) -> str:
    """A random number of the same shape: every digit redrawn, separators kept, no new leading zero
    ("7:45" -> "3:12", "1998" -> "4071", "0" -> "6"). A number that could be a year (four digits, 1000-2999) becomes
    a year of ``YEARS`` half the time (``YEAR_SHARE``): students type years ("born in 1987"), and with every digit
    redrawn the year pieces ("198", "200") were rarely practised (stage 5 wrote "1987" as "967"). A clock time becomes
    a valid time of the same shape ("12:30" -> "17:05", not "76:20")."""
    if len(number) == 4 and number.isdigit() and number[0] in "12" and rng.random() < YEAR_SHARE:
        return str(rng.randint(*YEARS))
    if TIME.fullmatch(number):
        hour = rng.randint(1, 9) if number.index(":") == 1 else rng.randint(10, 23)
        return f"{hour}:{rng.randint(0, 59):02d}"
    out = []
    for k, ch in enumerate(number):
        if not ch.isdigit():
            out.append(ch)
            continue
        leading = k == 0 or not number[k - 1].isdigit()
        out.append(str(rng.randint(1 if leading and number[k + 1 : k + 2].isdigit() else 0, 9)))
    new = "".join(out)
    if number.isdigit() and int(number) >= 2 and int(new) < 2:  # "2 men" never becomes "1 men"
        new = new[:-1] + str(rng.randint(2, 9))
    return new


def random_long_number(rng: random.Random, repeats: float = 0.0) -> str:
    """A random number as a phone number, postcode or id is typed: one group of 5-9 digits, two groups (2-5 digits,
    then 2-8: a dialling code and a subscriber number) or three groups of 2-5 digits, space-separated, the first group
    starting with 0 four times in ten ("10115", "0176 5551234", "33 48 1514").

    Why: the corpora's shared numbers have 1-4 digits but for 16 pairs, so the swap (``random_number_like``: the same
    shape) never practised longer ones, and stage 18 dropped a group or a repeated digit of 9 of 40 such numbers
    ("Call me at 25700 11286." -> "... 25700 1286 ...", "712227" -> "71227"). The digits are cl100k's pieces of up to 3
    digits each, so a long number is a run of pieces to copy in order, like a name. Until stage 19 a second group had at
    most 5 digits, and stage 19 wrote "0176 5551234" as "0176 92".

    ``repeats``: the chance that a digit after the first of its group repeats the one before, on top of the one in ten
    of a fresh draw. Why: this project's vocabulary spells most numbers digit by digit, and stage 20 shortened a run of
    equal digits in 2 of the 40 long numbers and 2 of the 30 phone numbers of tests/test_names.py ("712227" -> "71227",
    "053330617" -> "05330617", "225557" -> "22557", "193655" -> "19365"): it loses count inside a run, and fresh draws
    alone put a run of three in about 4 % of the numbers (0.3: about 40 %). 0 (the default) draws exactly as before,
    so that earlier stages' data is unchanged."""
    groups = rng.choice((1, 1, 2, 2, 3))
    parts = []
    for g in range(groups):
        n = rng.randint(5, 9) if groups == 1 else rng.randint(2, 8 if groups == 2 and g == 1 else 5)
        digits = ["0" if g == 0 and rng.random() < 0.4 else str(rng.randint(1, 9))]
        for _ in range(n - 1):
            digits.append(digits[-1] if repeats and rng.random() < repeats else str(rng.randint(0, 9)))
        parts.append("".join(digits))
    return " ".join(parts)


def random_grouped_number(rng: random.Random) -> str:
    """A random number as English writes a large or a decimal one: three times in four a whole number of 4-9 digits with
    thousands separators, half of them round ("3,700,000", "12,000", "48,213"); else a decimal of 1-3 digits before
    the point and 1-2 after ("3.5", "12.50"). ``german_number`` gives the German side.

    Why: stage 20 wrote "The town has 12,000 people." as "... zwölf Menschen.", "1,800,000" as "1,000" and "2,499"
    as "2,4999": the corpora's 167 English training pairs with a thousands separator are written in German with a
    dot, a space, no separator or a number word, so no verbatim swap ever practised them."""
    if rng.random() < 0.75:
        n = rng.randint(4, 9)
        digits = str(rng.randint(1, 9)) + "".join(str(rng.randint(0, 9)) for _ in range(n - 1))
        if rng.random() < 0.5:  # round: 1-3 significant digits, then zeros
            keep = rng.randint(1, 3)
            digits = digits[:keep] + "0" * (n - keep)
        return f"{int(digits):,}"
    whole = str(rng.randint(0, 9)) if rng.random() < 0.5 else str(rng.randint(10, 999))
    return f"{whole}.{rng.randint(1, 9)}" if rng.random() < 0.5 else f"{whole}.{rng.randint(0, 99):02d}"


def german_number(number: str) -> str:
    """``number`` as German writes it: thousands grouped with dots ("3,700,000" -> "3.700.000"), a decimal comma
    ("3.5" -> "3,5"); any other number as it is ("7:45", "0176 5551234", "1998"). German groups the digits of a large
    number with a dot or a (thin) space; of Tatoeba's 167 training pairs with an English thousands separator, the German
    writes 38 numbers with dots, 19 with spaces, 41 without a separator and 75 in words or not at all."""
    if GROUPED.fullmatch(number):
        return number.replace(",", ".")
    if DECIMAL.fullmatch(number):
        return number.replace(".", ",")
    return number


# English words that put a clock time in the afternoon or evening, which German writes on the 24-hour clock
AFTERNOON = re.compile(r"\b(?:p\.?\s?m\b|afternoon|evening|tonight|night)", re.IGNORECASE)


def later_times(src: str, tgt: str) -> list[str]:
    """The English clock times of ``src`` (hour 1-11) that ``tgt`` writes 12 hours later and never as they are:
    "7:30 tonight" -> "19:30 Uhr", "2:30 p.m." -> "14.30 Uhr". In BConTrasT's chats German often does this with no
    word of the English sentence saying so (the conversation around it did: "6:55." -> "18:55."): 102 of its
    training pairs, and 5 of Tatoeba's. A model trained on them adds 12 hours to a plain "I get up at 6:15"
    (stage 14: 32 of 240 such times). ``drop_context_times`` leaves those pairs out; the rest are swapped
    consistently (``substitute_later_times``: a new time on the English side, 12 hours later on the German side)."""
    found = []
    for m in NUMBER.finditer(src):
        t = m.group()
        if not TIME.fullmatch(t) or t in found or re.search(_number_pattern(t, german=True), tgt):
            continue
        hour, minute = t.split(":")
        if 1 <= int(hour) <= 11 and re.search(_number_pattern(f"{int(hour) + 12}:{minute}", german=True), tgt):
            found.append(t)
    return found


def drop_context_times(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``pairs`` without those whose German side moves a clock time 12 hours later (``later_times``) while nothing
    in the English sentence says afternoon or evening (``AFTERNOON``): what decided it is outside the pair."""
    return [(s, t) for s, t in pairs if not (later_times(s, t) and not AFTERNOON.search(s))]


ENGLISH_HOURS = ("twelve", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven")


def random_clock_words(rng: random.Random) -> tuple[str, str]:
    """A random clock time in words, English and German: "half past seven" / "halb acht" (German counts the half hour
    towards the next hour), "quarter past seven" / "Viertel nach sieben", "quarter to eight" / "Viertel vor acht",
    "seven o'clock" / "sieben Uhr" ("ein Uhr" for one).

    Why: stage 20 wrote "It is half past seven." as "Es ist halb sieben." (6:30), the trap every German class meets:
    Tatoeba's training pairs say "half past" 12 times, so the model copied the hour word."""
    hour = rng.randint(1, 12)
    kind = rng.randrange(4)
    if kind == 0:
        return f"half past {ENGLISH_HOURS[hour % 12]}", f"halb {GERMAN_HOURS[(hour + 1) % 12]}"
    if kind == 1:
        return f"quarter past {ENGLISH_HOURS[hour % 12]}", f"Viertel nach {GERMAN_HOURS[hour % 12]}"
    if kind == 2:
        return f"quarter to {ENGLISH_HOURS[hour % 12]}", f"Viertel vor {GERMAN_HOURS[hour % 12]}"
    return f"{ENGLISH_HOURS[hour % 12]} o'clock", f"{'ein' if hour == 1 else GERMAN_HOURS[hour % 12]} Uhr"


def times_as_typed(src: str, tgt: str) -> tuple[str, str]:
    """The pair with each English clock time of ``src`` that ``tgt`` writes another way ("2.30 Uhr", "halb drei" for
    "2:30"; ``_number_pattern``) written on the German side as typed ("2:30 Uhr", "2:30"). The swap does this to the
    pairs it changes (``substitute_entities``); the pairs it leaves as they are, 30 % an epoch at
    ``--entity-swap 0.7``, still show a typed time turned into "9.30 Uhr", and stage 17B, 18X and 18Y wrote "The train to
    Ouagadougou leaves at 9:30." as "... um 9.30 Uhr.". Tatoeba has 214 such training pairs, BConTrasT 4, Multi30k none. German
    writes all three forms (DIN 5008 gives the colon); a time typed with a colon keeps it. A time the German side
    moves 12 hours ("7:30 tonight" / "19:30 Uhr", ``later_times``) is not matched and stays."""
    for m in NUMBER.finditer(src):
        t = m.group()
        if TIME.fullmatch(t):
            tgt = re.sub(_number_pattern(t, german=True), t, tgt)
    return src, tgt


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
            pat_src, pat_tgt = _number_pattern(e), _number_pattern(e, german=True, formats=formats) + uhr
        else:
            pat_src, pat_tgt = rf"(?<!\w){re.escape(e)}(?!\w)", rf"(?<!\w){re.escape(e)}(?=s?(?!\w))"
        src = re.sub(pat_src, lambda _m, n=new: n, src)
        tgt = re.sub(pat_tgt, lambda _m, n=new_tgt: n, tgt)
    return src, tgt


def substitute_later_times(src: str, tgt: str, times: list[str], rng: random.Random) -> tuple[str, str]:
    """Replace each English clock time of ``times`` (from ``later_times``) by a random one of the same shape, and the
    German time 12 hours after it by the time 12 hours after the new one ("7:30 tonight" / "19:30 Uhr" -> "4:05
    tonight" / "16:05 Uhr"): the pair still says that an evening time is written on the 24-hour clock, for any time."""
    for t in times:
        hour, minute = t.split(":")
        new_hour = rng.randint(1, 9) if len(hour) == 1 else rng.randint(10, 11)
        new_minute = f"{rng.randint(0, 59):02d}"
        src = re.sub(_number_pattern(t), f"{new_hour}:{new_minute}", src)
        tgt = re.sub(_number_pattern(f"{int(hour) + 12}:{minute}", german=True), f"{new_hour + 12}:{new_minute}", tgt)
    return src, tgt


MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
          "December")  # fmt: skip
GERMAN_MONTHS = ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober",
                 "November", "Dezember")  # fmt: skip
_MONTH = "|".join(MONTHS)
_DAY = r"(?:[12]?\d|3[01])"
# an English date: "May 5", "May 5th", "5 May", "5th May", "the 5th of May"
ENGLISH_DATE = re.compile(
    rf"(?<![\w.,:])(?:the (?P<d1>{_DAY})(?:st|nd|rd|th) of (?P<m1>{_MONTH})|(?P<d2>{_DAY})(?:st|nd|rd|th)? (?P<m2>{_MONTH})"
    rf"|(?P<m3>{_MONTH}) (?P<d3>{_DAY})(?:st|nd|rd|th)?)(?!\w)"
)


def _german_date(day: int, month: int) -> str:
    """The pattern of the German date "5. Mai" (the ordinal dot, then the month; ``month`` counts from 0)."""
    return rf"(?<![\w.,:]){day}\. ?{GERMAN_MONTHS[month]}(?!\w)"


def ordinal(day: int) -> str:
    """English ordinal of a day of the month: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 23rd, 31st."""
    return f"{day}{'th' if 10 <= day % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}"


def shared_dates(src: str, tgt: str) -> list[tuple[str, int, int]]:
    """The English dates of ``src`` that ``tgt`` writes as a German date: ``(English text, day, month)`` with the month
    counted from 0 ("His birthday is May 5th." / "Er hat am 5. Mai Geburtstag." -> ``[("May 5th", 5, 4)]``). The
    training corpora hold 87 such pairs (Tatoeba 65, BConTrasT 22), nearly all written "May 5th": students type "I
    was born on 12 May 2003.", which stage 15 wrote "Ich wurde am 12 2003 geboren." (the month dropped)."""
    found = []
    for m in ENGLISH_DATE.finditer(src):
        day = int(m.group("d1") or m.group("d2") or m.group("d3"))
        month = MONTHS.index(m.group("m1") or m.group("m2") or m.group("m3"))
        if 1 <= day <= 31 and re.search(_german_date(day, month), tgt):
            found.append((m.group(), day, month))
    return found


def random_date(rng: random.Random) -> tuple[int, int]:
    """A random ``(day, month)`` of the calendar, ``month`` counted from 0: every day a month has, 29 February included."""
    month = rng.randrange(12)
    return rng.randint(1, calendar.monthrange(2024, month + 1)[1]), month


def english_date(day: int, month: int, rng: random.Random, year: int | None = None, *, year_follows: bool = False) -> str:
    """``day`` of ``month`` (from 0) in a random one of the four ways English writes a date ("May 12", "May 12th",
    "12 May", "the 12th of May"), with ``year`` after it if given ("May 12, 2003", "12 May 2003"). ``year_follows``: the
    text has a year after the date already, so only the two forms that take it without a comma ("12 May 2003")."""
    name, nth = MONTHS[month], ordinal(day)
    if year_follows:
        return rng.choice((f"{day} {name}", f"the {nth} of {name}"))
    if year is None:
        return rng.choice((f"{name} {day}", f"{name} {nth}", f"{day} {name}", f"the {nth} of {name}"))
    return rng.choice((f"{name} {day}, {year}", f"{name} {nth}, {year}", f"{day} {name} {year}", f"the {nth} of {name} {year}"))


def substitute_dates(src: str, tgt: str, found: list[tuple[str, int, int]], rng: random.Random) -> tuple[str, str]:
    """Replace each date of ``found`` (from ``shared_dates``) by a random day and month on both sides, the English one in a
    random one of the four ways English writes it (``english_date``) and the German one as German writes it ("12. Mai"),
    so that every English form, month and day is practised."""
    for text, day, month in found:
        new_day, new_month = random_date(rng)
        english = english_date(new_day, new_month, rng)
        src = re.sub(rf"(?<![\w.,:]){re.escape(text)}(?!\w)", lambda _m, e=english: e, src, count=1)
        tgt = re.sub(_german_date(day, month), f"{new_day}. {GERMAN_MONTHS[new_month]}", tgt, count=1)
    return src, tgt


def _in_month(month: int) -> str:
    """The pattern of English "in May" / "In May" (not "in May 5th": a day would make it a date)."""
    return rf"(?<!\w)(?P<prep>[Ii]n) {MONTHS[month]}(?!\w)(?! (?:{_DAY})(?:st|nd|rd|th)?\b)"


def _im_month(month: int) -> str:
    """The pattern of German "im Mai" / "Im Mai"."""
    return rf"(?<!\w)(?P<prep>[Ii]m) {GERMAN_MONTHS[month]}(?!\w)"


def shared_months(src: str, tgt: str) -> list[int]:
    """The months (counted from 0) that ``src`` writes "in May" and ``tgt`` "im Mai", once each side ("I was born in
    October." / "Ich bin im Oktober geboren." -> ``[9]``): pairs that ``months_to_dates`` turns into dated ones. The
    training corpora hold 97 (Tatoeba 95, BConTrasT 2), against 87 with a date: too few dates for a model to learn
    "12 May 2003" -> "12. Mai 2003"."""
    return [
        month
        for month in range(12)
        if len(re.findall(_in_month(month), src)) == 1 and len(re.findall(_im_month(month), tgt)) == 1
    ]


def months_to_dates(src: str, tgt: str, months: list[int], rng: random.Random, year_p: float = 0.3) -> tuple[str, str]:
    """Turn each month of ``months`` (from ``shared_months``) into a random date of a random month on both sides: "in
    October" -> "on the 3rd of May", "im Oktober" -> "am 3. Mai" (capitals kept: "In"/"On", "Im"/"Am"). With
    probability ``year_p`` a year (1950-2035) follows the date, unless a number follows the month already ("in May
    2003" -> "on 3 May 2003", "am 3. Mai 2003")."""
    for month in months:
        day, new_month = random_date(rng)
        m = re.search(_in_month(month), src)
        if m is None or not re.search(_im_month(month), tgt):  # gone already (another swap changed it)
            continue
        year_after = re.match(r",? ?\d", src[m.end() :]) is not None
        year = rng.randint(1950, 2035) if not year_after and rng.random() < year_p else None
        english = english_date(day, new_month, rng, year, year_follows=year_after)  # "May 3 2003" would lack its comma
        german = f"{day}. {GERMAN_MONTHS[new_month]}" + ("" if year is None else f" {year}")
        on = "On" if m["prep"] == "In" else "on"
        src = src[: m.start()] + f"{on} {english}" + src[m.end() :]
        tgt = re.sub(_im_month(month), lambda g, de=german: f"{'Am' if g['prep'] == 'Im' else 'am'} {de}", tgt, count=1)
    return src, tgt


_ENGLISH_NEGATION = re.compile(r"n't\b|\b(?:not|never)\b", re.IGNORECASE)
# a determiner (definite or possessive), a capitalised noun, then "nicht": "Ich kenne die Details nicht."
_NICHT_AFTER_OBJECT = re.compile(r"\b(?:den|die|das|dem|der|(?:mein|dein|sein|ihr|unser|euer)e[nmrs]?)\s+[A-ZÄÖÜ]\w*\s+nicht\b")


def nicht_after_object(src: str, tgt: str) -> bool:
    """True when ``src`` negates ("didn't", "not", "never") and ``tgt`` puts "nicht" after a definite or possessive
    object: German negates a whole clause with a "nicht" after its definite object ("The dog didn't eat the meat." /
    "Der Hund fraß das Fleisch nicht."), before a participle or infinitive ("… seine Pommes nicht gegessen"). The
    training halves hold 1,203 such pairs (Tatoeba 1,195, Multi30k 3, BConTrasT 5), and 4 with "… die Straße nicht"
    against 199 with "überquer…", nearly all affirmative: stage 17's GPU runs lost the negation of "didn't cross the
    street" (model card, Stage 17)."""
    return bool(_ENGLISH_NEGATION.search(src)) and bool(_NICHT_AFTER_OBJECT.search(tgt))


def british_spelling(text: str, keep: Iterable[str] = ()) -> str:
    """``text`` with each American spelling that breame's list knows written the British way, its case kept ("My favorite
    color" -> "My favourite colour", "Center" -> "Centre"); German and every other word untouched, and the words of
    ``keep`` as they are (the swapper keeps the words its German side copies: a name such as "Gray" is no spelling).

    Why: the corpora's English is American (4,075 of 221,006 training pairs hold a word breame spells otherwise in
    Britain, almost none the British form), and stage 20 wrote "My favourite colour is blue." as "Mein Favouriter ist
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
