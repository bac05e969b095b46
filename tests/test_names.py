"""Names, places and numbers come through (issue 20): students type their own names first.

Forty short sentences written for this test, with first names, surnames, cities and numbers from many
languages (Finnish, Hungarian, Yoruba, Igbo, Japanese, Kazakh, Uzbek, Icelandic, Portuguese, Norwegian,
Tibetan, Hindi, Turkish, Azerbaijani, Korean, Vietnamese, Māori, Zulu, Swahili, Greek, Spanish,
Hawaiian, Polish, Czech, Slovak, Flemish, Estonian, Romanian, ...). None of the names occurs in the training corpora (as
a word, either side) or in the pool of names that entity substitution drew from for the shipped model
(checked below), so the model must copy them. The shipped model must keep every name and number of a
sentence verbatim, with greedy decoding, in at least 90 % of the sentences.
"""

from __future__ import annotations

import json
import random
import re

import pytest

from model.checkpoint import PRETRAINED, load_checkpoint
from model.tokenizer import TiktokenTokenizer
from training.corpora import data_root, read_lines
from training.evaluate import translate
from training.transforms.entities import capital_pieces, entity_pools, word_pieces
from training.transforms.numbers import NUMBER

EN_DE = PRETRAINED / "en-de"
TARGET = 0.9
LONG_FLOOR = 37  # of the 40 long numbers below that stages 20 and 23 keep; stage 19 kept 34, stage 18 31
PHONE_FLOOR = 28  # of the 30 phone numbers below that stages 20 and 23 keep; stage 19 kept 19
GROUPED_FLOOR = 4  # of the 30 large and decimal numbers below written as German does (stage 23: 4; stage 20: 2)
FLOOR = 0.65  # stage 23 (as stage 20) keeps 39 of 40 (97.5 %); the floor is 26 of 40, the guard of earlier stages

NAMES = [  # (English sentence, the names and numbers its translation must keep verbatim)
    ("Eero lives in Tampere.", ["Eero", "Tampere"]),
    ("Zsófia and Csaba bought 14 tickets.", ["Zsófia", "Csaba", "14"]),
    ("Oluwaseun works in Mombasa.", ["Oluwaseun", "Mombasa"]),
    ("Haruka was born in 1987.", ["Haruka", "1987"]),
    ("Chiamaka has 3 brothers.", ["Chiamaka", "3"]),
    ("Aigerim is my teacher.", ["Aigerim"]),
    ("Mr. Kowalczyk is 52 years old.", ["Kowalczyk", "52"]),
    ("Dilnoza called Sigrún at 7:45.", ["Dilnoza", "Sigrún", "7:45"]),
    ("Jurandir visited Valparaíso last year.", ["Jurandir", "Valparaíso"]),
    ("Jorunn has 250 books.", ["Jorunn", "250"]),
    ("Tenzin and Dawa are friends.", ["Tenzin", "Dawa"]),
    ("Priyanka Nakamura is a doctor.", ["Priyanka", "Nakamura"]),
    ("Nurcihan lives in Tabriz.", ["Nurcihan", "Tabriz"]),
    ("Kjetil met Marlon in Kortrijk.", ["Kjetil", "Marlon", "Kortrijk"]),
    ("Minji is 17 years old.", ["Minji", "17"]),
    ("Linh works in Seinäjoki.", ["Linh", "Seinäjoki"]),
    ("Tipene and Hinemoa have 2 dogs.", ["Tipene", "Hinemoa", "2"]),
    ("Emeka Okonkwo plays the guitar.", ["Emeka", "Okonkwo"]),
    ("Zanele lives in Kumasi.", ["Zanele", "Kumasi"]),
    ("Gulnara was born in 1994.", ["Gulnara", "1994"]),
    ("Mrs. Papadopoulos lives in Trondheim.", ["Papadopoulos", "Trondheim"]),
    ("Torbjørn is waiting for Omaira.", ["Torbjørn", "Omaira"]),
    ("Kipkorir has 6 cats.", ["Kipkorir", "6"]),
    ("Facundo visited Tartu in 2019.", ["Facundo", "Tartu", "2019"]),
    ("Ingvild is a nurse in Pécs.", ["Ingvild", "Pécs"]),
    ("Jeisson and Yadira live in Cusco.", ["Jeisson", "Yadira", "Cusco"]),
    ("Tapani bought 12 apples.", ["Tapani", "12"]),
    ("Csongor called Eirik.", ["Csongor", "Eirik"]),  # "Attila" until stage 15: in the pool of its run B (seed 5)
    ("Mahina lives in Izmir.", ["Mahina", "Izmir"]),
    ("Arttu works in Třebíč.", ["Arttu", "Třebíč"]),
    ("Synnøve is my sister.", ["Synnøve"]),
    ("Ngozi Mwangi is 31 years old.", ["Ngozi", "Mwangi", "31"]),
    ("Lisiane met Kalani in Prešov.", ["Lisiane", "Kalani", "Prešov"]),
    ("Ayesha has 4 children.", ["Ayesha", "4"]),
    ("Jiwoo and Thanh are students.", ["Jiwoo", "Thanh"]),
    ("The train to Ouagadougou leaves at 9:30.", ["Ouagadougou", "9:30"]),
    ("Cihangir Haddad is from Cluj.", ["Cihangir", "Haddad", "Cluj"]),
    ("Eirik Saastamoinen lives in Žilina.", ["Eirik", "Saastamoinen", "Žilina"]),
    ("Kosonen has 15 cows.", ["Kosonen", "15"]),
    ("Eulogio Buitrago lives in Würzburg.", ["Eulogio", "Buitrago", "Würzburg"]),
]


# Phone numbers, postcodes and ids as a student types them (issue 20: numbers come through): one group of 5-9 digits
# or 2-3 groups of 2-5, drawn once (seed 2811) the way stage 19 drew them for training (training.transforms.numbers.random_long_number);
# the digits are random, so no sentence can have been seen. Each must come through verbatim, groups and repeated digits
# included.
LONG_NUMBERS = [
    "My phone number is 0069719.", "My phone number is 73524 120 857.", "My phone number is 0474 64710.",
    "My phone number is 6860 12.", "Call me at 06 92147.", "Call me at 75 95.", "Call me at 685076596.",
    "Call me at 25700 11286.", "My postcode is 027058.", "My postcode is 5628 7804.", "My postcode is 02460 6404 9437.",
    "My postcode is 06635 1126.", "The order number is 214291122.", "The order number is 712227.",
    "The order number is 667836387.", "The order number is 00289 6906 6035.", "Her new number is 266486.",
    "Her new number is 065 38.", "Her new number is 9699 1795 997.", "Her new number is 33 48 15145.",
    "The code for the door is 5473 58617.", "The code for the door is 053330617.", "The code for the door is 62407565.",
    "The code for the door is 063 49445.", "Please send it to box 025496.", "Please send it to box 060619.",
    "Please send it to box 933 775.", "Please send it to box 506089.", "My student ID is 51531.",
    "My student ID is 3662477.", "My student ID is 368130209.", "My student ID is 0515 535 5367.",
    "You can reach Anna at 03309.", "You can reach Anna at 553060921.", "You can reach Anna at 00 99.",
    "You can reach Anna at 83 8942 252.", "The parcel number is 07 9048 3034.", "The parcel number is 0450 64874 652.",
    "The parcel number is 6148967.", "The parcel number is 52052 490.",
]  # fmt: skip


# Phone numbers with a long subscriber number, as a German mobile number is typed ("0176 5551234"): a dialling code of
# 2-5 digits, then 6-8 digits, drawn once (seed 2812). Stage 19 kept 19 of 30: its long-number practice never drew a
# second group of more than 5 digits ("0176 5551234" -> "0176 92"); stage 20's did (training.transforms.numbers.random_long_number).
PHONE_NUMBERS = [
    "My phone number is 07 70761529.", "My phone number is 53 680732.", "My phone number is 088 4502195.",
    "My phone number is 025 774500.", "My phone number is 55830 90930459.", "Call me at 41 841041.",
    "Call me at 07 753302.", "Call me at 05 190731.", "Call me at 06 1239517.", "Call me at 0703 750641.",
    "Her new number is 064 1273142.", "Her new number is 68174 834231.", "Her new number is 180 193655.",
    "Her new number is 0268 82110165.", "Her new number is 5983 8525839.", "You can reach Anna at 33 1345171.",
    "You can reach Anna at 05486 4911785.", "You can reach Anna at 3721 44455491.",
    "You can reach Anna at 06020 7330159.", "You can reach Anna at 07391 901446.", "His mobile number is 08315 973601.",
    "His mobile number is 06 225557.", "His mobile number is 4667 66165131.", "His mobile number is 05 7073215.",
    "His mobile number is 08464 44170041.", "Please call 983 322741 tomorrow.", "Please call 541 2293087 tomorrow.",
    "Please call 928 4236712 tomorrow.", "Please call 0762 6983387 tomorrow.", "Please call 0133 730772 tomorrow.",
]  # fmt: skip


# Large numbers with English thousands separators and decimals, as a class types them, written for this test (none of
# the numbers is in the training corpora as a whole number; checked below). German groups thousands with a dot or a
# (thin) space, or not at all, and writes a decimal comma: "3,755,000" must come out as "3.755.000" (or "3 755 000",
# "3755000"), "3.7" as "3,7". Stage 20 writes "12,400" as "12,400" (twelve point four in German), "1,892,000" as "1,892 000".
GROUPED_NUMBERS = [
    "Berlin has 3,755,000 people.", "The town has 12,400 people.", "My school has 1,250 students.",
    "The car costs 23,900 euros.", "The stadium holds 81,365 fans.", "The library has 640,000 books.",
    "The mountain is 4,478 metres high.", "We drove 2,730 kilometres last summer.", "She earns 48,500 euros a year.",
    "The river is 6,650 kilometres long.", "The house cost 415,000 dollars.", "Hamburg has 1,892,000 people.",
    "The concert had 65,200 visitors.", "The bike cost 2,499 dollars.", "The city has 538,672 people.",
    "The new bridge cost 7,300,000 euros.", "Our village has 3,180 people.", "The race was 42,195 metres long.",
    "The museum has 12,750 paintings.", "The company sold 2,640,000 phones.",
    "It is 3.7 km away.", "The book costs 12.95 euros.", "He ran 8.4 miles.", "The bottle holds 1.75 litres.",
    "The baby weighs 3.25 kilos.", "The coffee costs 2.80 euros.", "She is 1.68 metres tall.",
    "The lake is 5.8 metres deep.", "The trip takes 2.5 hours.", "The ticket costs 6.35 euros.",
]  # fmt: skip


def grouped_number(sentence: str) -> str:
    """The number of a ``GROUPED_NUMBERS`` sentence as typed: "3,755,000", "3.7"."""
    return re.search(r"\d[\d.,]*\d|\d", sentence).group()


def german_form_kept(sentence: str, output: str) -> bool:
    """``output`` holds the sentence's number as German writes it: the groups of a large number joined by a dot, a
    space or nothing; a decimal with a comma. Not part of a longer number ("12.4000")."""
    number = grouped_number(sentence)
    body = r"[.\s]?".join(number.split(",")) if "," in number else number.replace(".", ",")
    return re.search(rf"(?<![\d.,]){body}(?!\d|[.,]\d)", output) is not None


def long_number(sentence: str) -> str:
    """The number of a ``LONG_NUMBERS`` or ``PHONE_NUMBERS`` sentence, its groups joined by single spaces."""
    return re.search(r"\d[\d ]*\d", sentence).group()


def kept(output: str, entities: list[str]) -> bool:
    """Every entity appears verbatim in the output (a German genitive "Eeros" contains "Eero")."""
    return all(e in output for e in entities)


def test_the_sentences_are_many_and_hold_a_name_and_a_number_each_kind():
    assert len(NAMES) >= 30
    ents = [e for _, es in NAMES for e in es]
    assert sum(e[0].isdigit() for e in ents) >= 10 and sum(not e[0].isdigit() for e in ents) >= 50
    assert all(all(e in en for e in es) for en, es in NAMES)


def shipped_training_args() -> list[dict]:
    """The training arguments of the shipped model: one run's, or each averaged run's (``training.members``),
    and those of the runs of the averaged model it was fine-tuned from (``training.earlier_members``)."""
    training = json.loads((EN_DE / "metrics.json").read_text())["training"]
    runs = training.get("members", []) + training.get("earlier_members", [])
    return [m["args"] for m in runs] or [training["args"]]


@pytest.mark.parametrize("member", range(len(shipped_training_args())))
def test_no_name_is_in_the_substitution_pool_of_the_shipped_model(member):
    """For an averaged model (``python -m model.checkpoint average``), the pools of every run it averages,
    and of every run averaged into the model those runs started from."""
    pytest.importorskip("faker")
    args = shipped_training_args()[member]
    if not args.get("entity_swap"):
        pytest.skip("the shipped model was trained without entity substitution")
    tok = TiktokenTokenizer.load(EN_DE / "vocab.json")  # a stage keeps its vocabulary (--keep-vocab): its pieces made names
    pools = entity_pools(
        seed=args["seed"],
        splice=args.get("entity_splice", 0.0),
        full_name=args.get("entity_full_name", 0.0),
        years=args.get("entity_years", 0.0),
        piece_names=args.get("entity_piece_names", 0.0),
        pieces=word_pieces(texts := [tok.piece_text(i) for i in range(tok.vocab_size)]),
        piece_heads=args.get("entity_piece_heads", 0.0),
        heads=capital_pieces(texts),
    )
    names = {e for _, es in NAMES for e in es if not e[0].isdigit()}
    assert not [n for n in names if n in pools], "a test name was in the training pool"
    rng = random.Random(args["seed"])  # spliced and piece names are made while training: none of 100,000 is a test name
    words = {w for n in names for w in n.split()}
    assert not words & {w for _ in range(100_000) for w in pools.draw(rng).split()}


def test_no_name_is_in_the_training_corpora():
    root = data_root()
    if root is None or not all((root / c / "train.en.gz").exists() for c in ("tatoeba", "multi30k", "bcontrast")):
        pytest.skip("the training corpora are not here (see README, Data)")
    words: set[str] = set()
    english_numbers: set[str] = set()  # every whole number of the English side, as typed ("12,400", "3.7")
    for corpus in ("tatoeba", "multi30k", "bcontrast"):
        for lang in ("en", "de"):
            for line in read_lines(root / corpus / f"train.{lang}.gz"):
                words.update(re.findall(r"\w+", line))
                if lang == "en":
                    english_numbers.update(NUMBER.findall(line))
    seen = [e for _, es in NAMES for e in es if not e[0].isdigit() and any(w in words for w in e.split())]
    assert not seen, f"in the training data: {seen}"
    long_groups = [g for s in LONG_NUMBERS + PHONE_NUMBERS for g in long_number(s).split() if len(g) >= 5]
    assert not [g for g in long_groups if g in words], "a long number's group is in the training data"
    seen = [n for n in map(grouped_number, GROUPED_NUMBERS) if n in english_numbers]
    assert not seen, f"a grouped or decimal number of the test is in the English training data: {seen}"


@pytest.fixture(scope="module")
def model():
    return load_checkpoint(EN_DE, "cpu")  # loaded once for the module's tests


@pytest.fixture(scope="module")
def outputs(model) -> list[str]:
    return translate(model, [en for en, _ in NAMES], progress=False)


def share_kept(outputs: list[str]) -> tuple[float, str]:
    misses = [(en, out) for (en, es), out in zip(NAMES, outputs, strict=True) if not kept(out, es)]
    return 1 - len(misses) / len(NAMES), "\n".join(f"{en} -> {out}" for en, out in misses)


def test_names_and_numbers_come_through_more_often_than_the_shipped_floor(outputs):
    """A guard that the shipped model does not fall back: the share it reached when it was committed
    (FLOOR); stage 3 kept 7 of 40, stage 1 none."""
    share, misses = share_kept(outputs)
    assert share >= FLOOR, f"{share:.0%} of sentences keep every name and number (< {FLOOR:.0%}); misses:\n{misses}"


def test_names_and_numbers_come_through_greedy(outputs):
    """Issue 20's target: at least 90 % of the sentences keep every name and number (stages 20 and 19: 39 of 40; stage 16d: 38, as stage 15; stage 14: 37; stage 12: 33 on
    this set, 37 on the one before twelve names drawn by stage 14's runs were replaced)."""
    share, misses = share_kept(outputs)
    assert share >= TARGET, f"{share:.0%} of sentences keep every name and number (< {TARGET:.0%}); misses:\n{misses}"


def numbers_missed(model, sentences: list[str]) -> list[str]:
    """ "sentence -> output" for each of ``sentences`` whose greedy translation drops or changes a digit of its number."""
    outs = translate(model, sentences, progress=False)
    return [f"{s} -> {o}" for s, o in zip(sentences, outs, strict=True) if not kept(o, [long_number(s)])]


def test_long_numbers_come_through_more_often_than_the_shipped_floor(model):
    """Phone numbers and postcodes (``LONG_NUMBERS``) keep every group and digit, greedy: a guard at the number the
    shipped model reached (LONG_FLOOR, a count). What is lost is a middle group or one of a run of equal digits ("Call me at
    25700 11286." -> "... 25700 1286 ...")."""
    assert len(LONG_NUMBERS) == 40
    misses = numbers_missed(model, LONG_NUMBERS)
    kept_n = len(LONG_NUMBERS) - len(misses)
    assert kept_n >= LONG_FLOOR, f"{kept_n} of 40 long numbers kept (< {LONG_FLOOR}); misses:\n" + "\n".join(misses)


def test_phone_numbers_with_a_long_subscriber_number_come_through(model):
    """``PHONE_NUMBERS`` keep every digit, greedy: a guard at the count the shipped model reached (PHONE_FLOOR). Stage 20
    loses one of a run of equal digits ("180 193655" -> "180 19365")."""
    assert len(PHONE_NUMBERS) == 30
    misses = numbers_missed(model, PHONE_NUMBERS)
    kept_n = len(PHONE_NUMBERS) - len(misses)
    assert kept_n >= PHONE_FLOOR, f"{kept_n} of 30 phone numbers kept (< {PHONE_FLOOR}); misses:\n" + "\n".join(misses)


def test_german_form_accepts_the_ways_german_writes_a_number_and_nothing_else():
    assert german_form_kept("Berlin has 3,755,000 people.", "Berlin hat 3.755.000 Einwohner.")
    assert german_form_kept("Berlin has 3,755,000 people.", "Berlin hat 3 755 000 Einwohner.")
    assert german_form_kept("The bike cost 2,499 dollars.", "Das Fahrrad kostete 2499 Dollar.")
    assert german_form_kept("It is 3.7 km away.", "Es ist 3,7 km entfernt.")
    assert not german_form_kept("The town has 12,400 people.", "Die Stadt hat 12,400 Leute.")  # 12.4 in German
    assert not german_form_kept("The bike cost 2,499 dollars.", "Das Fahrrad kostete 2,4999 Dollar.")
    assert not german_form_kept("It is 3.7 km away.", "Es ist 3.7 km entfernt.")
    assert not german_form_kept("Berlin has 3,755,000 people.", "Berlin hat 13.755.000 Einwohner.")


def test_large_and_decimal_numbers_come_out_as_german_writes_them_as_often_as_the_shipped_floor(model):
    """``GROUPED_NUMBERS`` in German form, greedy: a guard at the count the shipped model reached (GROUPED_FLOOR)."""
    assert len(GROUPED_NUMBERS) == 30
    outs = translate(model, GROUPED_NUMBERS, progress=False)
    misses = [f"{s} -> {o}" for s, o in zip(GROUPED_NUMBERS, outs, strict=True) if not german_form_kept(s, o)]
    kept_n = len(GROUPED_NUMBERS) - len(misses)
    assert kept_n >= GROUPED_FLOOR, f"{kept_n} of 30 in German form (< {GROUPED_FLOOR}); misses:\n" + "\n".join(misses)
