"""Dates: an English date the German side writes as a date ("May 5th" / "5. Mai") gets a random day and month on
both sides, and "in May" / "im Mai" becomes a random date ("on 3 May 2003" / "am 3. Mai 2003")."""

from __future__ import annotations

import calendar
import random
import re
from dataclasses import dataclass
from typing import Any

from training.corpora import Corpus
from training.transforms.base import Practice, Transform, setting

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


def german_date_pattern(day: int, month: int) -> str:
    """The pattern of the German date "5. Mai" (the ordinal dot, then the month; ``month`` counts from 0)."""
    return rf"(?<![\w.,:]){day}\. ?{GERMAN_MONTHS[month]}(?!\w)"


def ordinal(day: int) -> str:
    """English ordinal of a day of the month: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, 22nd, 23rd, 31st."""
    return f"{day}{'th' if 10 <= day % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th')}"


def shared_dates(src: str, tgt: str) -> list[tuple[str, int, int]]:
    """The English dates of ``src`` that ``tgt`` writes as a German date: ``(English text, day, month)`` with the month
    counted from 0 ("His birthday is May 5th." / "Er hat am 5. Mai Geburtstag." -> ``[("May 5th", 5, 4)]``). The
    training corpora hold 87 such pairs (Tatoeba 65, BConTrasT 22), nearly all written "May 5th": students type "I
    was born on 12 May 2003.", which an earlier model wrote "Ich wurde am 12 2003 geboren." (the month dropped)."""
    found = []
    for m in ENGLISH_DATE.finditer(src):
        day = int(m.group("d1") or m.group("d2") or m.group("d3"))
        month = MONTHS.index(m.group("m1") or m.group("m2") or m.group("m3"))
        if 1 <= day <= 31 and re.search(german_date_pattern(day, month), tgt):
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
        tgt = re.sub(german_date_pattern(day, month), f"{new_day}. {GERMAN_MONTHS[new_month]}", tgt, count=1)
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


@dataclass(frozen=True)
class DateOptions:
    """Options of the ``dates`` transform (both need the entity swap)."""

    swap: bool = setting("entity_dates", False)  # redraw dates and turn "in May" into a date on both sides
    corpus: int = setting("date_corpus", 0)  # every pair with a date or a month N more times an epoch


class Dates(Transform):
    """``dates``: with ``swap``, the entity swappers redraw each shared date (``shared_dates``) and turn "in May" /
    "im Mai" into a date (``shared_months``); ``corpus`` N adds the dated pairs N more times, each copy its own date."""

    name = "dates"
    Options = DateOptions
    seed_offset = 2

    def practice(self, context: Practice) -> tuple[Corpus, Any] | None:
        if not (self.options.corpus and context.swapper):
            return None
        pairs = [c.pairs[i] for c, sw in context.corpora for i in sorted(sw.dates | sw.months)] * self.options.corpus
        swapper = context.swapper(pairs, 1.0, seed=context.seed + self.seed_offset, dates=True, names=context.names)
        return Corpus("dates", pairs, 1.0), swapper
