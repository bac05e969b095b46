"""Numbers as the entity swap draws them: a number of the same shape, a year, a long number as a phone number is
typed, a grouped or decimal one, and how German writes each (``german_number``, ``number_pattern``)."""

from __future__ import annotations

import random
import re

NUMBER = re.compile(r"(?<![\w.,:])\d+(?:[.,:]\d+)*(?![\w]|[.,:]\d)")  # 30, 7:45, 1,000, 3.5


TIME = re.compile(r"\d{1,2}:\d\d")  # a clock time as English writes it: 7:45, 12:30


GROUPED = re.compile(r"\d{1,3}(?:,\d{3})+")  # a number with English thousands separators: 12,000, 3,700,000


DECIMAL = re.compile(r"\d+\.\d+")  # a number with an English decimal point: 3.5, 12.50


GERMAN_HOURS = ("zwölf", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf")


def number_pattern(number: str, *, german: bool = False, formats: bool = False) -> str:
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
    redrawn the year pieces ("198", "200") were rarely practised (an early model wrote "1987" as "967"). A clock time becomes
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
    shape) never practised longer ones, and an earlier model dropped a group or a repeated digit of 9 of 40 such numbers
    ("Call me at 25700 11286." -> "... 25700 1286 ...", "712227" -> "71227"). The digits are cl100k's pieces of up to 3
    digits each, so a long number is a run of pieces to copy in order, like a name. A model that
    practised second groups of at most 5 digits wrote "0176 5551234" as "0176 92".

    ``repeats``: the chance that a digit after the first of its group repeats the one before, on top of the one in ten
    of a fresh draw. Why: this project's vocabulary spells most numbers digit by digit, and an earlier model shortened a run of
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

    Why: an earlier model wrote "The town has 12,000 people." as "... zwölf Menschen.", "1,800,000" as "1,000" and "2,499"
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
