"""Entity substitution in training (training/transforms/, issue 20): a name, place or number that a training pair
shares verbatim is replaced by the same random one on both sides; a pair without one is never touched."""

from __future__ import annotations

import calendar
import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from training.transforms.clock import (
    drop_context_times,
    later_times,
    random_clock_words,
    substitute_later_times,
    times_as_typed,
)
from training.transforms.dates import MONTHS, months_to_dates, ordinal, shared_dates, shared_months, substitute_dates
from training.transforms.entities import (
    EntityPools,
    capital_pieces,
    proper_nouns,
    shared_entities,
    substitute_entities,
    word_pieces,
)
from training.transforms.negation import nicht_after_object
from training.transforms.numbers import (
    DECIMAL,
    GROUPED,
    german_number,
    random_grouped_number,
    random_long_number,
    random_number_like,
)
from training.transforms.spelling import british_spelling
from training.transforms.swapper import EntitySwapper

POOLS = EntityPools(first_names=("Amira", "Oluwaseun", "Zsófia"), last_names=("Kowalczyk",), cities=("Tampere", "Da Nang"))
PAIRS = [
    ("Tom is my friend.", "Tom ist mein Freund."),
    ("I called Tom and Mary.", "Ich habe Tom und Mary angerufen."),
    ("Mary lives in Boston.", "Maria wohnt in Boston."),
    ("Tom's dog is 7 years old.", "Toms Hund ist 7 Jahre alt."),
    ("The train leaves at 7:45.", "Der Zug fährt um 7:45 Uhr ab."),
    ("I saw Tom in Boston.", "Ich habe Tom in Boston gesehen."),
    ("I like apples.", "Ich mag Äpfel."),
    ("The dog is big.", "Der Hund ist groß."),
    ("Tom bought 3 books.", "Tom hat drei Bücher gekauft."),
]
NAMES = proper_nouns([s for s, _ in PAIRS], min_count=1)


def test_proper_nouns_are_words_capitalised_inside_a_sentence_and_never_lower_case():
    assert {"Tom", "Mary", "Boston"} <= NAMES
    assert not {"I", "The", "Der", "Ich"} & NAMES
    assert proper_nouns(["I saw Rose.", "I saw Rose.", "a rose is red"]) == frozenset()  # a common noun too
    assert proper_nouns(["I saw Rose.", "I saw Rose.", "I saw Ann."]) == {"Rose"}  # seen twice by default


def test_shared_entities_are_verbatim_on_both_sides_only():
    assert shared_entities(*PAIRS[1], NAMES) == ["Tom", "Mary"]
    assert shared_entities(*PAIRS[2], NAMES) == ["Boston"]  # Mary -> Maria is not verbatim: kept as it is
    assert shared_entities(*PAIRS[3], NAMES) == ["Tom", "7"]  # the German genitive "Toms" counts
    assert shared_entities(*PAIRS[4], NAMES) == ["7:45"]
    assert shared_entities(*PAIRS[6], NAMES) == [] and shared_entities(*PAIRS[7], NAMES) == []
    assert shared_entities(*PAIRS[8], NAMES) == ["Tom"]  # "3" is "drei" in German: not shared


def test_a_pair_is_changed_consistently_on_both_sides():
    one = EntityPools(("Oluwaseun",), ("Oluwaseun",), ("Oluwaseun",))  # every name becomes this one
    for src, tgt in PAIRS:
        ents = shared_entities(src, tgt, NAMES)
        new_src, new_tgt = substitute_entities(src, tgt, ents, one, random.Random(0))
        for e in (e for e in ents if not e[0].isdigit()):
            src, tgt = src.replace(e, "Oluwaseun"), tgt.replace(e, "Oluwaseun")  # "Toms" -> "Oluwaseuns"
        numbers = [e for e in ents if e[0].isdigit()]
        if numbers:  # a random number of the same shape, the same on both sides
            got_src = re.findall(r"\d+(?::\d+)?", new_src)
            assert got_src == re.findall(r"\d+(?::\d+)?", new_tgt)
            assert [re.sub(r"\d", "9", n) for n in got_src] == [re.sub(r"\d", "9", n) for n in numbers]
            new_src, new_tgt = re.sub(r"\d", "9", new_src), re.sub(r"\d", "9", new_tgt)
            src, tgt = re.sub(r"\d", "9", src), re.sub(r"\d", "9", tgt)
        assert (new_src, new_tgt) == (src, tgt)
    assert substitute_entities(*PAIRS[3], ["Tom", "7"], one, random.Random(1))[1].startswith("Oluwaseuns Hund")


def test_a_pair_without_a_shared_entity_is_never_touched():
    swapper = EntitySwapper(PAIRS, POOLS, p=1.0, seed=3)
    for epoch in range(5):
        changed = swapper.swapped(epoch)
        assert 6 not in changed and 7 not in changed
        assert set(changed) == {i for i, (s, t) in enumerate(PAIRS) if shared_entities(s, t, swapper_names(swapper))}
    assert EntitySwapper(PAIRS, POOLS, p=0.0).swapped(0) == {}


def swapper_names(swapper: EntitySwapper) -> frozenset[str]:
    return proper_nouns(s for s, _ in swapper.pairs)


def test_swaps_are_fresh_each_epoch_and_repeatable():
    swapper = EntitySwapper(PAIRS * 20, POOLS, p=0.5, seed=1)
    a, b = swapper.swapped(1), swapper.swapped(2)
    assert a == swapper.swapped(1) and a != b
    n = len(swapper.entities)
    assert 0.25 * n < len(a) < 0.75 * n  # about half of the pairs with an entity, each epoch


def test_probability_must_be_a_probability():
    with pytest.raises(ValueError, match="probability"):
        EntitySwapper(PAIRS, POOLS, p=1.5)


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(r"[1-9][0-9]{0,3}|[0-9]{1,2}:[0-9]{2}|[1-9][0-9]{0,2}([.,][0-9]{1,3})?", fullmatch=True), st.integers(0, 999)
)
def test_random_numbers_keep_their_shape(number, seed):
    new = random_number_like(number, random.Random(seed))
    assert re.sub(r"\d", "9", new) == re.sub(r"\d", "9", number)  # same digits count, same separators
    if len(number) > 1 and number[0] != "0" and number[1].isdigit():
        assert new[0] != "0", "no new leading zero"
    if number.isdigit() and int(number) >= 2:
        assert int(new) >= 2  # "2 men" never becomes "1 men"


def test_a_year_becomes_a_year_half_the_time():
    rng = random.Random(0)
    draws = [random_number_like("1987", rng) for _ in range(2000)]
    years = sum(1900 <= int(d) <= 2039 for d in draws)
    assert 0.45 < years / len(draws) < 0.60  # half by YEAR_SHARE, plus the few redrawn digits that land there
    assert all(len(d) == 4 and d[0] != "0" for d in draws)
    others = [random_number_like("5823", rng) for _ in range(2000)]  # not a year: any four digits (1.6 % land there)
    assert sum(1900 <= int(d) <= 2039 for d in others) / len(others) < 0.04


def test_faker_pools_hold_names_of_many_locales_and_scripts():
    pytest.importorskip("faker")
    from training.transforms.entities import entity_pools

    pools = entity_pools(per_locale=40)
    assert len(pools.first_names) > 500 and len(pools.cities) > 300
    non_latin = [w for w in pools.first_names if not re.fullmatch(r"[\w' -]+", w, re.ASCII)]
    assert non_latin, "names with letters beyond ASCII (accents and other scripts)"
    assert any("\u0400" <= ch <= "\u04ff" for w in pools.first_names for ch in w), "Cyrillic names"


def test_a_clock_time_the_german_side_writes_with_a_dot_is_swapped_and_takes_the_colon():
    src, tgt = "Let's meet at 2:30.", "Treffen wir uns um 2.30 Uhr!"
    assert shared_entities(src, tgt, NAMES) == ["2:30"]
    new_src, new_tgt = substitute_entities(src, tgt, ["2:30"], POOLS, random.Random(4))
    (time,) = re.findall(r"\d+:\d\d", new_src)
    assert new_tgt == f"Treffen wir uns um {time} Uhr!" and time != "2:30"
    assert shared_entities("It's 3.5 km.", "Es sind 3:5 km.", NAMES) == []  # only a clock time, only this way round
    assert shared_entities("It costs 2.30 euros.", "Es kostet 2:30 Euro.", NAMES) == []


def test_spliced_names_join_two_latin_pool_names_and_leave_other_scripts_alone():
    pools = EntityPools(("Amira", "Oluwaseun"), ("Kowalczyk",), ("Tampere",), splice=1.0)
    rng = random.Random(0)
    draws = [pools.draw(rng) for _ in range(300)]
    assert all(w[0].isupper() and w[1:].islower() and len(w) >= 3 for w in draws)
    assert len(set(draws) - {"Amira", "Oluwaseun", "Kowalczyk", "Tampere"}) > 20  # new words, made of two
    assert all(any(w.startswith(n[:2]) for n in ("Amira", "Oluwaseun", "Kowalczyk", "Tampere")) for w in draws)
    cyrillic = EntityPools(("Наталія",), ("Наталія",), ("Наталія",), splice=1.0)
    assert {cyrillic.draw(rng) for _ in range(20)} == {"Наталія"}
    plain = (*POOLS.first_names, *POOLS.last_names, *POOLS.cities)
    assert {POOLS.draw(random.Random(k)) for k in range(50)} <= set(plain)  # splice 0: the pool's own names


def test_full_names_put_a_surname_after_a_first_name_on_both_sides():
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), full_name=1.0)
    rng = random.Random(0)
    assert {pools.draw(rng) for _ in range(200)} == {"Emeka Okonkwo", "Okonkwo", "Tartu"}
    src, tgt = substitute_entities("Tom is here.", "Tom ist hier. Toms Hund auch.", ["Tom"], pools, random.Random(1))
    name = src.split(" is")[0]
    assert tgt == f"{name} ist hier. {name}s Hund auch."


def test_a_years_share_of_whole_numbers_becomes_a_year_on_both_sides():
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), years=1.0)
    rng = random.Random(0)
    assert all(1900 <= int(pools.number(n, rng)) <= 2039 for n in ("3", "42", "500", "1987") for _ in range(50))
    assert re.fullmatch(r"\d:\d\d", pools.number("7:45", rng))  # a clock time keeps its shape
    src, tgt = substitute_entities("I have 3 cats.", "Ich habe 3 Katzen.", ["3"], pools, random.Random(2))
    year = src.split()[2]
    assert 1900 <= int(year) <= 2039 and tgt == f"Ich habe {year} Katzen."


def test_a_long_numbers_share_of_whole_numbers_becomes_a_long_number_on_both_sides():
    """``--entity-long-numbers``: a phone number or postcode, the same on both sides; a clock time keeps its shape."""
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), long_numbers=1.0)
    rng = random.Random(0)
    draws = [pools.number(n, rng) for n in ("3", "42", "1987") for _ in range(100)]
    assert all(re.fullmatch(r"\d{5,9}|\d{2,5} \d{2,8}|\d{2,5}(?: \d{2,5}){2}", d) for d in draws)
    assert {len(d.split()) for d in draws} == {1, 2, 3} and any(d.startswith("0") for d in draws)
    assert re.fullmatch(r"\d:\d\d", pools.number("7:45", rng))
    src, tgt = substitute_entities("Anna bought 14 tickets.", "Anna kaufte 14 Karten.", ["14"], pools, random.Random(2))
    number = src.removeprefix("Anna bought ").removesuffix(" tickets.")
    assert number != "14" and tgt == f"Anna kaufte {number} Karten."
    assert not EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",)).long_numbers  # off unless asked for


@given(st.integers(0, 2**32), st.sampled_from([0.0, 0.3, 1.0]))
def test_a_long_number_is_one_group_of_5_to_9_digits_or_2_to_3_groups_of_2_to_5_or_8(seed, repeats):
    groups = random_long_number(random.Random(seed), repeats).split(" ")
    assert 1 <= len(groups) <= 3 and all(g.isdigit() for g in groups)
    longest = [9] if len(groups) == 1 else [5, 8] if len(groups) == 2 else [5, 5, 5]
    assert all((5 if len(groups) == 1 else 2) <= len(g) <= n for g, n in zip(groups, longest, strict=True))


def test_a_phone_number_with_a_long_subscriber_number_can_be_drawn():
    """Stage 19 wrote "0176 5551234" as "0176 92": its generator never drew a second group of more than 5 digits."""
    draws = [random_long_number(random.Random(seed)).split(" ") for seed in range(2000)]
    assert any(len(d) == 2 and len(d[1]) >= 7 for d in draws)


def test_german_writes_thousands_with_dots_and_decimals_with_a_comma():
    assert german_number("3,700,000") == "3.700.000" and german_number("12,000") == "12.000"
    assert german_number("3.5") == "3,5" and german_number("12.50") == "12,50"
    assert [german_number(n) for n in ("7:45", "1998", "0176 5551234", "14")] == ["7:45", "1998", "0176 5551234", "14"]


@given(st.integers(0, 2**32))
def test_a_grouped_number_is_a_large_whole_number_or_a_decimal_in_english_form(seed):
    n = random_grouped_number(random.Random(seed))
    if GROUPED.fullmatch(n):
        assert 4 <= len(n.replace(",", "")) <= 9 and f"{int(n.replace(',', '')):,}" == n  # groups of 3, no leading 0
    else:
        assert DECIMAL.fullmatch(n) and len(n.split(".")[0]) <= 3 and 1 <= len(n.split(".")[1]) <= 2
    assert float(german_number(n).replace(".", "").replace(",", ".")) == float(n.replace(",", ""))  # the same value


def test_a_grouped_numbers_share_of_whole_numbers_becomes_english_and_german_forms_of_one_number():
    """``--entity-grouped-numbers``: "14 tickets" -> "3,700,000 tickets" / "3.700.000 Karten" (or "3.5" / "3,5")."""
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), grouped_numbers=1.0)
    seen = set()
    for seed in range(40):
        src, tgt = substitute_entities("Anna bought 14 tickets.", "Anna kaufte 14 Karten.", ["14"], pools, random.Random(seed))
        number = src.removeprefix("Anna bought ").removesuffix(" tickets.")
        assert GROUPED.fullmatch(number) or DECIMAL.fullmatch(number)
        assert tgt == f"Anna kaufte {german_number(number)} Karten."
        seen.add("grouped" if GROUPED.fullmatch(number) else "decimal")
    assert seen == {"grouped", "decimal"}
    assert re.fullmatch(r"\d:\d\d", pools.number("7:45", random.Random(0)))  # a clock time keeps its shape
    assert not EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",)).grouped_numbers  # off unless asked for


GERMAN_FORMS = [
    ("The town has 12,000 people.", "Die Stadt hat 12.000 Einwohner.", "12,000"),
    ("We paid $12,000 for it.", "Wir haben 12 000 Dollar dafür bezahlt.", "12,000"),
    ("I have 1,500 cows.", "Ich habe 1500 Kühe.", "1,500"),
    ("It is 3.5 km away.", "Es ist 3,5 km entfernt.", "3.5"),
]


@pytest.mark.parametrize(("en", "de", "number"), GERMAN_FORMS)
def test_a_corpus_number_in_german_form_is_swapped_with_german_separators_only_when_asked(en, de, number):
    """Tatoeba writes "12,000" as "12.000", "12 000" or "12000": with German formats on, each is the same number,
    swapped together, the German side then written as German writes it; off (stages up to 20), none is a shared entity."""
    assert shared_entities(en, de, frozenset()) == []
    assert shared_entities(en, de, frozenset(), german_formats=True) == [number]
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), grouped_numbers=1e-9)  # formats on, draws of the same shape
    src, tgt = substitute_entities(en, de, [number], pools, random.Random(3))
    new = next(m.group() for m in re.finditer(r"\d[\d.,]*\d|\d", src))
    assert new != number and (GROUPED.fullmatch(new) or DECIMAL.fullmatch(new))
    assert tgt == re.sub(r"\d[\d.,\s]*\d", german_number(new), de, count=1)


def test_the_swapper_finds_german_forms_only_with_grouped_numbers():
    pairs = [(en, de) for en, de, _ in GERMAN_FORMS]
    assert EntitySwapper(pairs, POOLS, 1.0, names=frozenset()).entities == {}
    on = EntitySwapper(pairs, EntityPools(("A",), ("B",), ("C",), grouped_numbers=0.5), 1.0, names=frozenset())
    assert on.entities == {i: [n] for i, (_, _, n) in enumerate(GERMAN_FORMS)}
    swapped = on.swapped(0)
    assert len(swapped) == len(GERMAN_FORMS)  # p = 1.0: every pair with a number
    for src, tgt in swapped.values():
        number = re.search(r"\d[\d.,]*\d|\d", src).group()
        assert german_number(number) in tgt, (src, tgt)


def test_british_spelling_rewrites_american_spellings_and_keeps_their_case():
    assert british_spelling("My favorite color is gray.") == "My favourite colour is grey."
    assert british_spelling("The THEATER is in the Center of town.") == "The THEATRE is in the Centre of town."
    assert british_spelling("Tom traveled 20 kilometers.") == "Tom travelled 20 kilometres."
    for text in ("I like apples.", "Meine Lieblingsfarbe ist grau.", "My favourite colour.", "", "Emoji 🙂 and 東京"):
        assert british_spelling(text) == text  # nothing American: untouched
    assert british_spelling("Mr Gray likes the color gray.", keep=["Gray"]) == "Mr Gray likes the colour grey."


def test_the_swapper_keeps_a_name_that_looks_like_an_american_spelling():
    pairs = [("Tom Gray is my favorite teacher.", "Tom Gray ist mein Lieblingslehrer.")]
    src, tgt = EntitySwapper(pairs, POOLS, 0.0, names=frozenset(), british=1.0).swapped(0)[0]
    assert (src, tgt) == ("Tom Gray is my favourite teacher.", pairs[0][1])


def test_the_swapper_spells_the_english_the_british_way_only_when_asked_and_never_the_german():
    pairs = [
        ("Tom's favorite color is gray.", "Toms Lieblingsfarbe ist grau."),
        ("I like apples.", "Ich mag Äpfel."),
        ("The theater is big.", "Das Theater ist groß."),
    ]
    names = frozenset({"Tom"})
    off = EntitySwapper(pairs, POOLS, 1.0, names=names)
    on = EntitySwapper(pairs, POOLS, 1.0, names=names, british=1.0)
    assert off.american == [] and on.american == [0, 2]
    assert on.swapped(0)[2] == ("The theatre is big.", "Das Theater ist groß.")
    src, tgt = on.swapped(0)[0]
    assert src == british_spelling(off.swapped(0)[0][0]) and tgt == off.swapped(0)[0][1]  # the same name, British words
    assert "favourite colour is grey" in src and "Lieblingsfarbe ist grau" in tgt and 1 not in on.swapped(0)
    half = EntitySwapper(pairs * 200, POOLS, 0.0, names=names, british=0.5)
    assert 150 < len(half.swapped(0)) < 250  # about half of the 400 pairs with an American spelling
    with pytest.raises(ValueError, match="British"):
        EntitySwapper(pairs, POOLS, 1.0, british=1.5)


CLOCK = {  # English words -> German words, as a German class learns them
    "half past seven": "halb acht",
    "half past twelve": "halb eins",
    "quarter past seven": "Viertel nach sieben",
    "quarter to eight": "Viertel vor acht",
    "quarter to one": "Viertel vor eins",
    "one o'clock": "ein Uhr",
    "seven o'clock": "sieben Uhr",
}


def all_clock_words() -> set[tuple[str, str]]:
    """Every (English, German) pair ``random_clock_words`` draws in 400 tries: all 48, as the first test checks."""
    return {random_clock_words(random.Random(seed)) for seed in range(400)}


def test_clock_words_count_the_german_half_hour_towards_the_next_hour():
    draws = all_clock_words()
    assert len(draws) == 48  # 12 hours x 4 ways
    assert set(CLOCK.items()) <= draws
    hours = ("twelve", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven")
    german = ("zwölf", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "elf")
    for en, de in draws:  # the German half hour is the next hour's: "half past N" = "halb N+1"
        if en.startswith("half past"):
            assert de == "halb " + german[(hours.index(en.split()[-1]) + 1) % 12]


def test_a_clock_words_share_writes_a_swapped_time_in_words_on_both_sides_and_takes_the_uhr():
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), clock_words=1.0)
    cases = [
        ("The train leaves at 7:45.", "Der Zug fährt um 7:45 Uhr ab."),
        ("Breakfast is at 9:30.", "Frühstück gibt es um halb zehn."),
        ("Come at 8:00.", "Komm um 8.00 Uhr."),
    ]
    german = dict(all_clock_words())
    for (en, de), seed in zip(cases, range(3), strict=True):
        src, tgt = substitute_entities(en, de, shared_entities(en, de, frozenset()), pools, random.Random(seed))
        words = re.search(r"at (.+)\.$", src).group(1)
        assert tgt == re.sub(r"\d{1,2}[:.]\d\d Uhr|halb zehn", german[words], de)
        assert "Uhr Uhr" not in tgt and not re.search(r"\d", src + tgt)
    plain = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",))
    src, _ = substitute_entities(*cases[0], ["7:45"], plain, random.Random(0))
    assert re.search(r"\d:\d\d", src)  # off unless asked for: a time stays digits


def test_a_half_hour_the_german_side_writes_halb_is_swapped_and_takes_the_colon():
    """Tatoeba writes 110 of its training half hours "halb ..." ("6:30" -> "halb sieben"): stages 7-9 wrote "9:30"
    as "halb drei". The hour word must be the next hour's: "halb vier" is 3:30, not 2:30."""
    src, tgt = "Let's meet at 6:30.", "Treffen wir uns um halb sieben!"
    assert shared_entities(src, tgt, NAMES) == ["6:30"]
    new_src, new_tgt = substitute_entities(src, tgt, ["6:30"], POOLS, random.Random(4))
    (time,) = re.findall(r"\d+:\d\d", new_src)
    assert new_tgt == f"Treffen wir uns um {time}!" and time != "6:30"
    assert shared_entities("It's 12:30.", "Es ist halb eins.", NAMES) == ["12:30"]
    assert shared_entities("It's 11:30.", "Es ist halb zwölf.", NAMES) == ["11:30"]
    assert shared_entities("It's 2:30.", "Es ist halb vier.", NAMES) == []  # the wrong hour: not the same time
    assert shared_entities("It's 2:45.", "Es ist Viertel vor drei.", NAMES) == []  # only half hours


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[0-9]{1,2}:[0-9]{2}", fullmatch=True), st.integers(0, 999))
def test_a_random_clock_time_is_a_valid_time(time, seed):
    new = random_number_like(time, random.Random(seed))
    hour, minute = (int(x) for x in new.split(":"))
    assert 1 <= hour <= 23 and 0 <= minute <= 59 and len(new) == len(time)


def test_piece_names_join_two_or_three_word_pieces_and_capitalise_them():
    """Names whose pieces are English words ("Ayesha": "A" "yes" "ha") were translated piece by piece
    ("EineJaha"); a ``piece_names`` share of the draws is made of random word pieces of the vocabulary."""
    pieces = word_pieces(["a", "yes", "ha", " the", "Ok", "on", "wo", "ing", "ä", "12", "<s>", "abcde"])
    assert pieces == ("a", "ha", "ing", "on", "wo", "yes")  # lowercase ASCII letters, no space, 1-4 of them
    pools = EntityPools(("Amira",), ("Kowalczyk",), ("Tampere",), piece_names=0.5, pieces=pieces)
    rng = random.Random(0)
    draws = [pools.draw(rng) for _ in range(2000)]
    made = [w for w in draws if w not in ("Amira", "Kowalczyk", "Tampere")]
    assert 0.4 < len(made) / len(draws) < 0.6
    assert all(w[0].isupper() and w[1:].islower() for w in made)
    assert all(re.fullmatch(r"(?:a|ha|ing|on|wo|yes){2,3}", w.lower()) for w in made)
    assert "Ayesha" in made  # the shape the shipped model failed on
    assert {POOLS.draw(random.Random(k)) for k in range(50)} <= {*POOLS.first_names, *POOLS.last_names, *POOLS.cities}


def test_piece_heads_begin_a_piece_name_with_a_capitalised_piece():
    """Names that are one rare piece ("Tim": stages 8 and 10 wrote "Tim is my friend." as "Ah ist mein Freund.")
    are practised by piece names that begin with a capitalised piece of the vocabulary, alone or with 1-2 pieces."""
    heads = capital_pieces([" Tim", "Raj", "raj", "T", "McD", "TIM", " Zoë", "Fatima123", "yes", "After", " after"])
    assert heads == ("Raj", "Tim")  # ASCII letters, title case, 2-8 letters, leading space dropped, not a word ("after")
    pools = EntityPools(
        ("Amira",), ("Kowalczyk",), ("Tampere",), piece_names=1.0, pieces=("a", "ha"), piece_heads=0.5, heads=heads
    )
    rng = random.Random(0)
    draws = [pools.draw(rng) for _ in range(2000)]
    headed = [w for w in draws if w.startswith(heads)]
    assert 0.4 < len(headed) / len(draws) < 0.6
    assert {"Tim", "Raj"} <= set(headed)  # a head alone: the one-piece name itself
    assert all(re.fullmatch(r"(?:Tim|Raj)(?:a|ha){0,2}", w) for w in headed)
    plain = EntityPools(("Amira",), ("Kowalczyk",), ("Tampere",), piece_names=1.0, pieces=("a", "ha"), heads=heads)
    assert not any(plain.draw(rng).startswith(heads) for _ in range(200))  # piece_heads 0: none


def test_later_times_are_english_clock_times_that_german_writes_twelve_hours_later():
    assert later_times("6:55.", "18:55.") == ["6:55"]
    assert later_times("The train leaves at 2:30 p.m.", "Der Zug fährt um 14.30 Uhr ab.") == ["2:30"]  # German's dot
    assert later_times("Shows at 10:40 and 10:40 again.", "Um 22:40 und 22:40.") == ["10:40"]
    assert later_times("It's 7:45.", "Es ist 7:45 Uhr.") == []  # copied: a shared entity, not a later time
    assert later_times("at 12:30", "um 0:30") == [] and later_times("at 9:30", "um 19:30") == []  # 12 h, not 10
    assert later_times("at 7:45", "um 17:45 oder 19:45") == ["7:45"]


def test_only_later_times_without_an_evening_word_are_left_out():
    pairs = [
        ("6:55.", "18:55."),  # the chat said it was evening, the sentence does not: out
        ("Let's take the 4:10 train.", "Lass uns den Zug um 16:10 Uhr nehmen."),  # out
        ("I have tickets for 7:30 tonight.", "Ich habe Tickets für 19:30 Uhr heute Abend."),
        ("It's 4:30 in the afternoon.", "Es ist 16:30 Uhr."),
        ("My flight arrived at 2:30 p.m.", "Mein Flug ist um 14.30 Uhr angekommen."),
        ("It's 7:45.", "Es ist 7:45 Uhr."),
        ("I like apples.", "Ich mag Äpfel."),
    ]
    assert drop_context_times(pairs) == pairs[2:]


def test_times_as_typed_writes_the_german_time_as_the_english_types_it():
    changed = [
        (("Pick me up at 2:30.", "Holen Sie mich um 2.30\xa0Uhr ab."), "Holen Sie mich um 2:30\xa0Uhr ab."),
        (("Pick me up at 2:30.", "Holt mich um halb drei ab."), "Holt mich um 2:30 ab."),
        (("It's 9:15 or 10:45.", "Es ist 9.15 oder 10.45 Uhr."), "Es ist 9:15 oder 10:45 Uhr."),
    ]
    for (src, tgt), want in changed:
        assert times_as_typed(src, tgt) == (src, want)
    untouched = [
        ("It's 7:45.", "Es ist 7:45 Uhr."),  # already as typed
        ("I have tickets for 7:30 tonight.", "Ich habe Tickets für 19:30 Uhr heute Abend."),  # 12 hours later: kept
        ("It costs 2.30 euros.", "Es kostet 2.30 Euro."),  # no clock time in the English
        ("Come at 2:30.", "Komm um 12.30 Uhr."),  # another time, not this one written another way
        ("I like apples.", "Ich mag Äpfel."),
    ]
    for pair in untouched:
        assert times_as_typed(*pair) == pair


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_an_evening_time_is_swapped_together_with_its_german_time(seed):
    src, tgt = "I have tickets for 7:30 tonight, not 9:05.", "Ich habe Tickets für 19.30 Uhr heute Abend, nicht 9:05."
    new_src, new_tgt = substitute_later_times(src, tgt, later_times(src, tgt), random.Random(seed))
    (time, other), (german, german_other) = re.findall(r"\d+:\d\d", new_src), re.findall(r"\d+:\d\d", new_tgt)
    hour, minute = time.split(":")
    assert len(hour) == 1 and 1 <= int(hour) <= 9 and 0 <= int(minute) <= 59
    assert german == f"{int(hour) + 12}:{minute}"  # 12 hours later, with the English colon
    assert (other, german_other) == ("9:05", "9:05")  # a time German copies is left to the entity swap
    assert new_src == src.replace("7:30", time) and new_tgt == tgt.replace("19.30", german)


def test_the_swapper_moves_evening_times_only_when_asked():
    pairs = [
        ("I have tickets for 7:30 tonight.", "Ich habe Tickets für 19:30 Uhr heute Abend."),
        ("I like apples.", "Ich mag Äpfel."),
    ]
    assert EntitySwapper(pairs, POOLS, p=1.0).swapped(0) == {}  # as before the option: no shared entity, untouched
    later = EntitySwapper(pairs, POOLS, p=1.0, later=True)
    for epoch in range(5):
        (i, (src, tgt)), *rest = later.swapped(epoch).items()
        assert i == 0 and rest == []
        (time,) = re.findall(r"\d+:\d\d", src)
        h, m = time.split(":")
        assert re.findall(r"\d+:\d\d", tgt) == [f"{int(h) + 12}:{m}"]


def test_shared_dates_are_english_dates_that_german_writes_as_dates():
    assert shared_dates("His birthday is May 5th.", "Er hat am 5. Mai Geburtstag.") == [("May 5th", 5, 4)]
    assert shared_dates("Today is the 11th of October.", "Heute ist der 11. Oktober.") == [("the 11th of October", 11, 9)]
    assert shared_dates("I was born on 12 May 2003.", "Ich wurde am 12. Mai 2003 geboren.") == [("12 May", 12, 4)]
    assert shared_dates("On 3rd March.", "Am 3.März.") == [("3rd March", 3, 2)]
    assert shared_dates("Today is October 11th.", "Heute ist der elfte Oktober.") == []  # German wrote it in words
    assert shared_dates("Today is May 5th.", "Heute ist der 6. Mai.") == []  # not the same day
    assert shared_dates("May I come in?", "Darf ich hereinkommen?") == []
    assert shared_dates("She was born in May 2003.", "Sie wurde im Mai 2003 geboren.") == []  # a month, no day
    assert shared_dates("On May 45th.", "Am 45. Mai.") == []
    assert [ordinal(d) for d in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st",
    ]  # fmt: skip


MONTHS_DE = dict(zip(
    ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"),
    ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober", "November", "Dezember"),
    strict=True,
))  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_date_gets_the_same_new_day_and_month_on_both_sides(seed):
    src, tgt = "I was born on 12 May 2003, at 7:45.", "Ich wurde am 12. Mai 2003 um 7:45 geboren."
    new_src, new_tgt = substitute_dates(src, tgt, shared_dates(src, tgt), random.Random(seed))
    month = "|".join(MONTHS_DE)
    m = re.fullmatch(
        rf"I was born on (?:the (?P<d1>\d+)(?P<s1>st|nd|rd|th) of (?P<m1>{month})|(?P<d2>\d+) (?P<m2>{month})"
        rf"|(?P<m3>{month}) (?P<d3>\d+)(?P<s3>st|nd|rd|th)?) 2003, at 7:45\.",
        new_src,
    )
    assert m, new_src
    day, name = m["d1"] or m["d2"] or m["d3"], m["m1"] or m["m2"] or m["m3"]
    assert 1 <= int(day) <= calendar.monthrange(2024, MONTHS.index(name) + 1)[1]  # a day the month has
    assert new_tgt == f"Ich wurde am {day}. {MONTHS_DE[name]} 2003 um 7:45 geboren."  # the year and time left alone
    suffix = m["s1"] or m["s3"]
    assert suffix is None or day + suffix == ordinal(int(day))  # "2nd", never "2th"


def test_the_swapper_swaps_dates_only_when_asked_and_never_a_date_s_day_alone():
    pairs = [
        ("I was born on 12 May 2003.", "Ich wurde am 12. Mai 2003 geboren."),
        ("Today is May 5th.", "Heute ist der 5. Mai."),
        ("I like apples.", "Ich mag Äpfel."),
    ]
    plain = EntitySwapper(pairs, POOLS, p=1.0)
    assert sorted(plain.entities) == [0] and plain.entities[0] == ["12", "2003"]  # without dates: the day is a number
    assert plain.dates == {}
    swapper = EntitySwapper(pairs, POOLS, p=1.0, dates=True)
    assert swapper.entities == {0: ["2003"]} and sorted(swapper.dates) == [0, 1]
    for epoch in range(20):
        out = swapper.swapped(epoch)
        assert sorted(out) == [0, 1]  # the pair with no entity or date never changes
        for src, tgt in out.values():
            ((day, german_month),) = re.findall(r"(\d+)\. (\w+)", tgt)
            english = next(e for e, g in MONTHS_DE.items() if g == german_month)
            assert 1 <= int(day) <= calendar.monthrange(2024, MONTHS.index(english) + 1)[1]
            assert re.search(
                rf"\b({day}(?:st|nd|rd|th)? {english}|the {ordinal(int(day))} of {english}|{english} {day}(?:st|nd|rd|th)?)\b",
                src,
            )


def test_shared_months_are_in_may_and_im_mai_once_on_each_side():
    assert shared_months("I was born in October.", "Ich bin im Oktober geboren.") == [9]
    assert shared_months("In February, please.", "Im Februar bitte.") == [1]
    assert shared_months("She was born in May 2003.", "Sie wurde im Mai 2003 geboren.") == [4]
    assert shared_months("I was born in October.", "Ich bin im November geboren.") == []  # not the same month
    assert shared_months("I came in May 5th.", "Ich kam am 5. Mai.") == []  # a date, not a month (shared_dates)
    assert shared_months("May I come in?", "Darf ich hereinkommen?") == []
    assert shared_months("It rains in May and in May.", "Es regnet im Mai.") == []  # which one is which: left alone
    assert shared_months("I will go in August.", "Ich gehe im August.") == [7]
    assert "August" not in proper_nouns(["I go in August.", "We met in August.", "See you in August."])  # a month, not a name


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_month_becomes_the_same_date_on_both_sides(seed):
    """ "in October" / "im Oktober" become one random date on both sides: the English in one of its forms, "on" for
    "in" (capital kept), the German "am D. Monat", a year after both or after neither, the rest of the pair unchanged."""
    rng = random.Random(seed)
    src, tgt = rng.choice(
        [("I was born in October.", "Ich bin im Oktober geboren."), ("In October, please.", "Im Oktober bitte.")]
    )
    new_src, new_tgt = months_to_dates(src, tgt, shared_months(src, tgt), rng)
    month = "|".join(MONTHS_DE)
    date = (
        rf"(?:the (?P<d1>\d+)(?:st|nd|rd|th) of (?P<m1>{month})(?: (?P<y1>\d{{4}}))?|(?P<d2>\d+) (?P<m2>{month})(?: (?P<y2>\d{{4}}))?"
        rf"|(?P<m3>{month}) (?P<d3>\d+)(?P<s3>st|nd|rd|th)?(?:, (?P<y3>\d{{4}}))?)"
    )
    on = "on" if src.startswith("I ") else "On"
    m = re.fullmatch(rf"I was born {on} {date}\." if on == "on" else rf"On {date}, please\.", new_src)
    assert m, new_src
    day, name, year = m["d1"] or m["d2"] or m["d3"], m["m1"] or m["m2"] or m["m3"], m["y1"] or m["y2"] or m["y3"]
    assert 1 <= int(day) <= calendar.monthrange(2024, MONTHS.index(name) + 1)[1]
    assert m["s3"] is None or day + m["s3"] == ordinal(int(day))
    german = f"{day}. {MONTHS_DE[name]}" + (f" {year}" if year else "")
    assert new_tgt == (f"Ich bin am {german} geboren." if on == "on" else f"Am {german} bitte.")


def test_a_month_with_a_year_keeps_the_year_and_gets_no_second_one():
    src, tgt = "She was born in May 2003.", "Sie wurde im Mai 2003 geboren."
    for seed in range(50):
        new_src, new_tgt = months_to_dates(src, tgt, [4], random.Random(seed), year_p=1.0)
        assert re.fullmatch(r"She was born on (?:\d+ \w+|the \d+(?:st|nd|rd|th) of \w+) 2003\.", new_src), new_src
        assert re.fullmatch(r"Sie wurde am \d+\. \w+ 2003 geboren\.", new_tgt), new_tgt


def test_the_swapper_turns_months_into_dates_only_with_dates():
    pairs = [("I was born in October.", "Ich bin im Oktober geboren."), ("I like apples.", "Ich mag Äpfel.")]
    assert EntitySwapper(pairs, POOLS, p=1.0).swapped(0) == {}  # without dates a month is left as it is
    swapper = EntitySwapper(pairs, POOLS, p=1.0, dates=True)
    assert swapper.months == {0: [9]}
    seen = set()
    for epoch in range(30):
        ((i, (src, tgt)),) = swapper.swapped(epoch).items()
        assert i == 0 and src.startswith("I was born on ") and re.fullmatch(r"Ich bin am \d+\. \w+(?: \d{4})? geboren\.", tgt)
        seen.add(re.search(r"am (\d+\. \w+)", tgt)[1])
    assert len(seen) > 20  # a fresh date each epoch


def test_copies_of_a_dated_pair_get_dates_of_their_own():
    """--date-corpus N holds each dated pair N times: every copy draws its own date in the same epoch."""
    pair = ("I was born in October.", "Ich bin im Oktober geboren.")
    out = EntitySwapper([pair] * 5, POOLS, p=1.0, dates=True, names=frozenset()).swapped(0)
    assert sorted(out) == [0, 1, 2, 3, 4] and len(set(out.values())) == 5


def test_negation_practice_takes_nicht_after_an_object_and_nothing_else():
    """--negation-corpus practises the word order the stage-17 runs lost ("… die Straße nicht"): an English negation
    and a German "nicht" after a definite or possessive object, in main clauses and before a participle alike."""
    taken = [
        ("The dog didn't eat the meat.", "Der Hund fraß das Fleisch nicht."),
        ("I don't understand the question.", "Ich verstehe die Frage nicht."),
        ("Tom didn't eat his fries.", "Tom hat seine Pommes nicht gegessen."),
        ("Don't open the window!", "Öffnet das Fenster nicht!"),
        ("We aren't satisfied with the result.", "Wir sind mit dem Ergebnis nicht zufrieden."),
    ]
    left = [
        ("The dog ate the meat.", "Der Hund fraß das Fleisch."),  # no negation
        ("I didn't cross the street.", "Ich ging nicht über die Straße."),  # "nicht" before, not after, the object
        ("I have no car.", "Ich habe kein Auto."),  # "kein", and "no" is not a verb's negation
        ("Tom isn't here.", "Tom ist nicht hier."),  # no object
        ("The child who didn't sleep.", "Das Kind, das nicht schlief."),  # "das" a relative pronoun, "nicht" before a verb
        ("I know the details.", "Ich kenne die Details nicht."),  # the German negates, the English does not: misaligned
    ]
    assert all(nicht_after_object(s, t) for s, t in taken)
    assert not any(nicht_after_object(s, t) for s, t in left)


def test_digit_repeats_make_runs_of_equal_digits_and_default_to_the_old_draws():
    """``--entity-digit-repeats``: runs such as "555" come often (stage 20 shortened them: "712227" -> "71227"), each
    group keeps its first digit's rule, and with 0 the draws are those of the stages before the option."""
    run = re.compile(r"(\d)\1\1")
    plain = [random_long_number(random.Random(i)) for i in range(2000)]
    # the draws of the code before the option (seeds 0-5), so that stages 19-22 can be trained again as they were
    assert plain[:6] == ["08764 69382", "241777631", "02449", "697919074", "0672110", "9073 31 8368"]
    assert sum(bool(run.search(d)) for d in plain) < 150  # about 4 % of fresh draws hold a run of three
    repeated = [random_long_number(random.Random(i), 0.3) for i in range(2000)]
    assert sum(bool(run.search(d)) for d in repeated) > 600
    assert all(g[0] != "0" or k == 0 for d in repeated for k, g in enumerate(d.split(" ")))  # only a first group opens with 0
    assert all(len(set(g)) == 1 for i in range(200) for g in random_long_number(random.Random(i), 1.0).split(" "))
    pools = EntityPools(("Emeka",), ("Okonkwo",), ("Tartu",), long_numbers=1.0, digit_repeats=0.5)
    src, tgt = substitute_entities("Call 14 now.", "Ruf 14 an.", ["14"], pools, random.Random(3))
    number = src.removeprefix("Call ").removesuffix(" now.")
    assert tgt == f"Ruf {number} an." and re.fullmatch(r"[\d ]{5,}", number)
