"""Clock times: pairs whose German side moves a time 12 hours for a reason outside the pair (left out or swapped
together), German times written as the English types them, and times in words ("half past seven" / "halb acht")."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from training.transforms.base import Transform, setting
from training.transforms.numbers import GERMAN_HOURS, NUMBER, TIME, number_pattern

# English words that put a clock time in the afternoon or evening, which German writes on the 24-hour clock
AFTERNOON = re.compile(r"\b(?:p\.?\s?m\b|afternoon|evening|tonight|night)", re.IGNORECASE)


def later_times(src: str, tgt: str) -> list[str]:
    """The English clock times of ``src`` (hour 1-11) that ``tgt`` writes 12 hours later and never as they are:
    "7:30 tonight" -> "19:30 Uhr", "2:30 p.m." -> "14.30 Uhr". In BConTrasT's chats German often does this with no
    word of the English sentence saying so (the conversation around it did: "6:55." -> "18:55."): 102 of its
    training pairs, and 5 of Tatoeba's. A model trained on them adds 12 hours to a plain "I get up at 6:15"
    (32 of 240 such times in an earlier model's probe). ``drop_context_times`` leaves those pairs out; the rest are swapped
    consistently (``substitute_later_times``: a new time on the English side, 12 hours later on the German side)."""
    found = []
    for m in NUMBER.finditer(src):
        t = m.group()
        if not TIME.fullmatch(t) or t in found or re.search(number_pattern(t, german=True), tgt):
            continue
        hour, minute = t.split(":")
        if 1 <= int(hour) <= 11 and re.search(number_pattern(f"{int(hour) + 12}:{minute}", german=True), tgt):
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

    Why: an earlier model wrote "It is half past seven." as "Es ist halb sieben." (6:30), the trap every German class meets:
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
    "2:30"; ``number_pattern``) written on the German side as typed ("2:30 Uhr", "2:30"). The swap does this to the
    pairs it changes (``substitute_entities``); the pairs it leaves as they are, 30 % an epoch at
    ``--entity-swap 0.7``, still show a typed time turned into "9.30 Uhr", and earlier models wrote "The train to
    Ouagadougou leaves at 9:30." as "... um 9.30 Uhr.". Tatoeba has 214 such training pairs, BConTrasT 4, Multi30k none. German
    writes all three forms (DIN 5008 gives the colon); a time typed with a colon keeps it. A time the German side
    moves 12 hours ("7:30 tonight" / "19:30 Uhr", ``later_times``) is not matched and stays."""
    for m in NUMBER.finditer(src):
        t = m.group()
        if TIME.fullmatch(t):
            tgt = re.sub(number_pattern(t, german=True), t, tgt)
    return src, tgt


def substitute_later_times(src: str, tgt: str, times: list[str], rng: random.Random) -> tuple[str, str]:
    """Replace each English clock time of ``times`` (from ``later_times``) by a random one of the same shape, and the
    German time 12 hours after it by the time 12 hours after the new one ("7:30 tonight" / "19:30 Uhr" -> "4:05
    tonight" / "16:05 Uhr"): the pair still says that an evening time is written on the 24-hour clock, for any time."""
    for t in times:
        hour, minute = t.split(":")
        new_hour = rng.randint(1, 9) if len(hour) == 1 else rng.randint(10, 11)
        new_minute = f"{rng.randint(0, 59):02d}"
        src = re.sub(number_pattern(t), f"{new_hour}:{new_minute}", src)
        tgt = re.sub(number_pattern(f"{int(hour) + 12}:{minute}", german=True), f"{new_hour + 12}:{new_minute}", tgt)
    return src, tgt


@dataclass(frozen=True)
class ClockOptions:
    """Options of the ``clock`` transform."""

    drop_context_times: bool = setting("drop_context_times", False)  # leave out pairs moved 12 hours with no cue
    times_as_typed: bool = setting("times_as_typed", False)  # German clock times written as the English types them
    words: float = setting("entity_clock_words", 0.0)  # share of swapped clock times written in words (with entities)


class Clock(Transform):
    """``clock``: pairs whose German side moves a time 12 hours with no English cue left out (``drop_context_times``;
    the cued ones' times swapped together by the entity swap), and German times written as typed
    (``times_as_typed``)."""

    name = "clock"
    Options = ClockOptions

    def prepare(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        if self.options.drop_context_times:
            pairs = drop_context_times(pairs)
        if self.options.times_as_typed:
            pairs = [times_as_typed(s, t) for s, t in pairs]
        return pairs
