"""The shipped general model translates what a teacher types first (issue: "pretrained/en-de speaks
everyday German").

Twenty everyday sentences with reference translations written for this test, not taken from any
corpus (11 of the 20 English sentences do also occur in Tatoeba's training split: sentences this
common are in every phrase book). The model must reach corpus chrF2 >= 60 on them with greedy
decoding (the app's default) and with the app's beam settings, and no output may share no word with its reference
(the gibberish of the caption-only model, "Ich be bedezie der.", shares none with "Ich liebe dich."
except "Ich", so the second check compares content beyond the first word too). English "you" is
German du, ihr or Sie, so a sentence with "you" lists each as a reference; an output is scored
against the closest one (sacreBLEU's multi-reference chrF, and "any reference" for the word check).
"""

from __future__ import annotations

import re

import pytest
import sacrebleu

from model.checkpoint import PRETRAINED, load_checkpoint
from model.settings import DecodeSettings
from training.evaluate import translate
from training.transforms.dates import MONTHS, ordinal, shared_dates

EN_DE = PRETRAINED / "en-de"

EVERYDAY = [
    ("I love you.", "Ich liebe dich."),
    ("How are you today?", "Wie geht es dir heute?", "Wie geht es euch heute?", "Wie geht es Ihnen heute?"),
    ("Where do you live?", "Wo wohnst du?", "Wo wohnt ihr?", "Wo wohnen Sie?"),
    ("What is your name?", "Wie heißt du?", "Wie heißt ihr?", "Wie heißen Sie?"),
    ("I am tired.", "Ich bin müde."),
    ("The weather is nice today.", "Das Wetter ist heute schön."),
    ("I don't understand.", "Ich verstehe nicht."),
    ("Can you help me?", "Kannst du mir helfen?", "Könnt ihr mir helfen?", "Können Sie mir helfen?"),
    ("The door is open.", "Die Tür ist offen."),
    ("My brother is a teacher.", "Mein Bruder ist Lehrer."),
    ("We are going to the cinema tonight.", "Wir gehen heute Abend ins Kino."),
    ("The book is on the table.", "Das Buch liegt auf dem Tisch."),
    ("I have two cats.", "Ich habe zwei Katzen."),
    ("She drinks coffee every morning.", "Sie trinkt jeden Morgen Kaffee."),
    ("Where is the train station?", "Wo ist der Bahnhof?"),
    ("I would like a glass of water.", "Ich hätte gern ein Glas Wasser."),
    ("The children are playing in the garden.", "Die Kinder spielen im Garten."),
    ("It is very cold outside.", "Es ist sehr kalt draußen."),
    ("Do you speak German?", "Sprichst du Deutsch?", "Sprecht ihr Deutsch?", "Sprechen Sie Deutsch?"),
    ("Tomorrow I will visit my grandmother.", "Morgen besuche ich meine Großmutter."),
]


def words(s: str) -> set[str]:
    return set(re.findall(r"\w+", s.lower()))


def shares_content(hyp: str, ref: str) -> bool:
    """``hyp`` shares a word with ``ref``, and one beyond ref's first word when ref has three words or more."""
    shared = words(hyp) & words(ref)
    first = set(re.findall(r"\w+", ref.lower())[:1])
    return bool(shared) and (len(words(ref)) < 3 or bool(shared - first))


def test_shares_content_rejects_the_caption_models_gibberish():
    assert not shares_content("Ich be bedezie der.", "Ich liebe dich.")
    assert shares_content("Wo wohnt ihr?", "Wo wohnt ihr?") and not shares_content("Wo wohnt ihr?", "Wo wohnst du?")


@pytest.fixture(scope="module", params=["greedy (the app's default)", "beam (the app's beam settings)"])
def outputs(request):
    """The twenty translations with the app's default method (greedy) and with its beam search as the
    sidebar sets it up (``DecodeSettings(method="beam")``: beam size, length penalty, stop rule)."""
    if not (EN_DE / "model.safetensors").is_file():
        pytest.fail(f"{EN_DE} is missing: the general model is shipped with the repository")
    assert DecodeSettings().method == "greedy", "the app's default method changed: say which case covers it"
    loaded = load_checkpoint(EN_DE, "cpu")
    d = DecodeSettings(method="beam")
    beam = 1 if request.param.startswith("greedy") else d.beam_size
    return translate(loaded, [en for en, *_ in EVERYDAY], beam_size=beam, alpha=d.alpha, early_stop=d.early_stop, progress=False)


def report(hyps) -> str:
    return "\n".join(f"{en} -> {h}   (reference: {' | '.join(refs)})" for (en, *refs), h in zip(EVERYDAY, hyps, strict=True))


def reference_streams() -> list[list[str]]:
    """sacreBLEU's layout: stream k holds every sentence's k-th reference (the first where it has fewer)."""
    most = max(len(refs) for _, *refs in EVERYDAY)
    return [[refs[k] if k < len(refs) else refs[0] for _, *refs in EVERYDAY] for k in range(most)]


def test_reference_streams_are_aligned():
    streams = reference_streams()
    assert len(streams) == 3 and all(len(s) == len(EVERYDAY) for s in streams)
    assert streams[2][2] == "Wo wohnen Sie?" and streams[2][0] == "Ich liebe dich."


def test_everyday_sentences_reach_chrf_60(outputs):
    chrf = sacrebleu.corpus_chrf(outputs, reference_streams()).score
    assert chrf >= 60, f"chrF2 {chrf:.1f} < 60:\n{report(outputs)}"


def test_no_output_shares_no_word_with_its_reference(outputs):
    """Every output shares a word with a reference; for references of three words or more, one beyond the first."""
    bad = []
    for (_, *refs), h in zip(EVERYDAY, outputs, strict=True):
        if not any(shares_content(h, de) for de in refs):
            bad.append(h)
    assert not bad, f"outputs sharing no (content) word with the reference: {bad}\n{report(outputs)}"


GERMAN_NEGATION = re.compile(r"\b(?:nicht|nichts|nie|niemals|kein\w*)\b")


def test_the_apps_examples_keep_their_negation():
    """The Compare page opens with "The animal didn't cross the street because it was too tired." and "… too wide.":
    an output without a German negation says the opposite. (Stage 15's six GPU runs, averaged alone, wrote "Das Tier
    überquerte die Straße, weil es zu müde war."; the shipped mean with stage 14 writes "… die Straße nicht, …".)"""
    from ui.catalog import EXAMPLES

    negated = [s for s in EXAMPLES["translate"] if re.search(r"n't\b|\b(?:not|never|no|nobody|nothing)\b", s)]
    assert len(negated) >= 2
    outs = translate(load_checkpoint(EN_DE, "cpu"), negated, progress=False)
    lost = [(s, o) for s, o in zip(negated, outs, strict=True) if not GERMAN_NEGATION.search(o)]
    assert not lost, f"examples whose translation lost the negation: {lost}"


NEGATED_PHRASES = (
    "didn't cross the street",
    "didn't open the door",
    "didn't eat the bread",
    "didn't read the book",
    "didn't climb the tree",
    "didn't drink the milk",
    "doesn't like the city",
    "won't cross the river",
    "couldn't find the key",
    "didn't see the car",
    "isn't at home",
    "didn't want to go",
)


def test_no_phrase_loses_its_negation_to_a_common_affirmative():
    """The Compare page's pair is one instance of a pattern: "<subject> didn't <verb> the <noun> because …". Each of
    12 negated phrases goes into 8 subjects × 4 endings (32 sentences); each phrase must keep a German negation in at
    least 30 of its 32, greedy. Stage 16d keeps 383 of 384. Stage 17's GPU runs kept the Tatoeba dev
    negations (171–173 of 173) and the app's two examples, yet wrote "Der Hund überquerte die Straße, weil es zu
    müde war." for 6 to 17 of the 32 "didn't cross the street": "überquerte die Straße." is an affirmative the
    captions and Tatoeba hold 200 times over, "… die Straße nicht" 4 times."""
    subjects = ("The animal", "The dog", "The boy", "My sister", "The old man", "The cat", "The girl", "Our teacher")
    endings = (" because it was too tired.", " because it was too late.", " because it was raining.", ".")
    src = [f"{s} {p}{e}" for p in NEGATED_PHRASES for s in subjects for e in endings]
    outs = translate(load_checkpoint(EN_DE, "cpu"), src, progress=False)
    per = len(subjects) * len(endings)
    weak = {}
    for i, p in enumerate(NEGATED_PHRASES):
        chunk = list(zip(src[i * per : (i + 1) * per], outs[i * per : (i + 1) * per], strict=True))
        lost = [(s, o) for s, o in chunk if not GERMAN_NEGATION.search(o)]
        if len(lost) > per - 30:
            weak[p] = (len(lost), lost[:2])
    assert not weak, f"phrases that lose their negation in more than 2 of {per} sentences: {weak}"


def test_a_date_a_student_types_comes_through_as_german_writes_it():
    """Students type their birthdays: "12 May 2003" must come out as "12. Mai 2003" (the German ordinal dot, the German
    month, the year), in each English form. Stage 15 wrote "Ich wurde am 12 2003 geboren." (the month dropped) and "im
    3rd. März"; stage 16d's date practice (`--entity-dates --date-corpus`) writes all four right, greedy."""
    cases = {
        "I was born on 12 May 2003.": "12. Mai 2003",
        "My birthday is on the 3rd of March.": "3. März",
        "The concert is on June 21st.": "21. Juni",
        "We met on 7 August 2019.": "7. August 2019",
    }
    outs = translate(load_checkpoint(EN_DE, "cpu"), list(cases), progress=False)
    wrong = [(s, o) for (s, date), o in zip(cases.items(), outs, strict=True) if date not in o]
    assert not wrong, f"dates not written as German writes them: {wrong}"


# British spellings, as the English taught in German schools writes them. The model learned from American English
# (4,075 of 221,006 training sentences hold a word that Britain spells otherwise), and stage 20 wrote "My favourite
# colour is blue." as "Mein Favouriter ist blau."; each sentence's translation must be its American spelling's.
BRITISH = {  # British -> American
    "My favourite colour is blue.": "My favorite color is blue.",
    "The theatre is in the centre of town.": "The theater is in the center of town.",
    "The river is 20 metres wide.": "The river is 20 meters wide.",
    "I travelled to London last summer.": "I traveled to London last summer.",
    "Our neighbour is very nice.": "Our neighbor is very nice.",
    "I bought two litres of milk.": "I bought two liters of milk.",
    "We organised a party for her.": "We organized a party for her.",
    "I realised my mistake.": "I realized my mistake.",
    "The school is two kilometres away.": "The school is two kilometers away.",
    "Her behaviour was strange.": "Her behavior was strange.",
    "I apologise for being late.": "I apologize for being late.",
    "He has grey hair.": "He has gray hair.",
    "The harbour is full of boats.": "The harbor is full of boats.",
    "She has a good sense of humour.": "She has a good sense of humor.",
    "What is your favourite film?": "What is your favorite film?",
    "The walls are painted in bright colours.": "The walls are painted in bright colors.",
    "I didn't recognise him.": "I didn't recognize him.",
    "He is two metres tall.": "He is two meters tall.",
    "We met at the theatre.": "We met at the theater.",
    "My neighbours are on holiday.": "My neighbors are on holiday.",
}
BRITISH_FLOOR = 7  # of the 20 that the shipped model translates as their American spelling (stage 23: 7; stage 20: 5)


def test_the_british_probe_differs_from_its_american_twin_only_in_spelling():
    pytest.importorskip("breame")
    from training.transforms.spelling import british_spelling

    assert all(british_spelling(us) == gb != us for gb, us in BRITISH.items())


def test_british_spellings_translate_as_their_american_twins_as_often_as_the_shipped_floor():
    loaded = load_checkpoint(EN_DE, "cpu")
    gb, us = translate(loaded, list(BRITISH), progress=False), translate(loaded, list(BRITISH.values()), progress=False)
    differ = [f"{s} -> {a} (American: {b})" for s, a, b in zip(BRITISH, gb, us, strict=True) if a != b]
    same = len(BRITISH) - len(differ)
    assert same >= BRITISH_FLOOR, f"{same} of 20 as their American twin (< {BRITISH_FLOOR}):\n" + "\n".join(differ)


# Clock times in words, and what German says: its half hour counts towards the next hour ("half past seven" is "halb
# acht"). Tatoeba says "half past" in 12 training pairs; stage 20 wrote "It is half past seven." as "Es ist halb sieben."
CLOCK_WORDS = {
    "It is half past seven.": "halb acht",
    "The film starts at half past eight.": "halb neun",
    "We meet at quarter past six.": "Viertel nach sechs",
    "School ends at quarter to two.": "Viertel vor zwei",
    "I get up at seven o'clock.": "sieben Uhr",
    "The shop opens at half past nine.": "halb zehn",
    "The bus comes at quarter to eight.": "Viertel vor acht",
    "Lunch is at half past twelve.": "halb eins",
    "It is quarter past three.": "Viertel nach drei",
    "The party starts at eight o'clock.": "acht Uhr",
    "My lesson starts at half past ten.": "halb elf",
    "It's half past four.": "halb fünf",
}
CLOCK_FLOOR = 3  # of the 12 that the shipped model says as German does (stage 20: 3)


def test_clock_times_in_words_come_out_as_german_says_them_as_often_as_the_shipped_floor():
    outs = translate(load_checkpoint(EN_DE, "cpu"), list(CLOCK_WORDS), progress=False)
    wrong = [f"{s} -> {o} (want {w})" for (s, w), o in zip(CLOCK_WORDS.items(), outs, strict=True) if w not in o]
    right = len(CLOCK_WORDS) - len(wrong)
    assert right >= CLOCK_FLOOR, f"{right} of 12 right (< {CLOCK_FLOOR}):\n" + "\n".join(wrong)


# Clock times as typed. BConTrasT's chats move a time 12 hours when the conversation said "tonight" (313 training
# pairs, 102 with no English word saying so), and stage 14 wrote "We meet at 7:45." as "... um 19:45 Uhr." (208 of
# these 240 kept). The clock-time probe of the model card's evaluation table: 5 frames x the hours 1-12 x 4 minutes.
CLOCK_FRAMES = (
    "We meet at {}.",
    "I get up at {} every day.",
    "The train leaves at {}.",
    "Kwame and Priya meet at {} in Nairobi.",
    "The lesson starts at {}.",
)
CLOCK_TIMES = [f"{h}:{mm}" for h in range(1, 13) for mm in ("05", "15", "30", "45")]
# of the 240 the shipped model writes as typed (stage 23: 237, stage 20: 238; its misses say "zehn Uhr dreißig")
CLOCK_TYPED_FLOOR = 237


def time_as_typed(time: str, output: str) -> bool:
    """``output`` writes ``time`` ("7:45") with its colon or a German dot ("7.45"), not 12 hours later ("19:45"). Stricter
    than the German side of ``training.corpora``'s entity matching, which also takes "9:30" as "halb zehn": the card's probe
    counts a time as kept only as typed."""
    h, mm = time.split(":")
    return re.search(rf"(?<![\d:.]){h}[:.]{mm}(?!\d)", output) is not None


def test_time_as_typed_accepts_a_colon_or_a_dot_and_not_twelve_hours_later():
    assert time_as_typed("7:45", "Wir treffen uns um 7:45 Uhr.") and time_as_typed("7:45", "um 7.45 Uhr")
    assert (
        not time_as_typed("7:45", "um 19:45 Uhr") and not time_as_typed("7:45", "um 17:45") and not time_as_typed("1:05", "11:05")
    )
    assert not time_as_typed("7:45", "um 7:40 Uhr") and not time_as_typed("12:30", "12:305")


def test_clock_times_come_through_as_typed_as_often_as_the_shipped_floor():
    src = [frame.format(t) for frame in CLOCK_FRAMES for t in CLOCK_TIMES]
    assert len(src) == 240
    outs = translate(load_checkpoint(EN_DE, "cpu"), src, progress=False)
    times = CLOCK_TIMES * len(CLOCK_FRAMES)
    missed = [f"{s} -> {o}" for s, t, o in zip(src, times, outs, strict=True) if not time_as_typed(t, o)]
    kept_n = len(src) - len(missed)
    assert kept_n >= CLOCK_TYPED_FLOOR, f"{kept_n} of 240 clock times as typed (< {CLOCK_TYPED_FLOOR}):\n" + "\n".join(missed)


# Dates in each of the four English forms a student types, written as German writes them ("12. Mai"): the date probe
# of the model card's evaluation table, 5 frames x 4 forms x 6 dates. (Stage 15 kept 68 of an earlier version's 120, stage
# 16d 85; from stage 18 on every stage kept all 120 of that version, whose frames were lost; this one re-creates it
# from its description.)
DATE_FRAMES = ("I was born on {}.", "My birthday is on {}.", "The concert is on {}.", "We met on {}.", "School starts on {}.")
DATES = ((1, 0), (3, 2), (12, 4), (22, 6), (8, 9), (31, 11))  # (day, month from 0, as training.corpora counts it)
DATES_FLOOR = 120  # of the 120 the shipped model writes as German does (stage 23: 120; stage 20: 120)


def english_dates(day: int, month: int) -> list[str]:
    """The four forms ``training.transforms.dates.english_date`` draws from: "May 12", "May 12th", "12 May", "the 12th of May"."""
    name, nth = MONTHS[month], ordinal(day)
    return [f"{name} {day}", f"{name} {nth}", f"{day} {name}", f"the {nth} of {name}"]


def test_the_date_probe_holds_four_forms_of_six_dates_in_five_frames():
    assert english_dates(22, 6) == ["July 22", "July 22nd", "22 July", "the 22nd of July"]
    assert [ordinal(d) for d in (1, 2, 3, 4, 11, 12, 13, 21, 31)] == [
        "1st",
        "2nd",
        "3rd",
        "4th",
        "11th",
        "12th",
        "13th",
        "21st",
        "31st",
    ]


def test_dates_in_every_english_form_come_out_as_german_writes_them_as_often_as_the_shipped_floor():
    """Kept: ``training.transforms.dates.shared_dates`` finds the English date written as a German one ("12. Mai") in the output."""
    src = [frame.format(en) for frame in DATE_FRAMES for day, month in DATES for en in english_dates(day, month)]
    assert len(src) == 120
    outs = translate(load_checkpoint(EN_DE, "cpu"), src, progress=False)
    missed = [f"{s} -> {o}" for s, o in zip(src, outs, strict=True) if not shared_dates(s, o)]
    kept_n = len(src) - len(missed)
    assert kept_n >= DATES_FLOOR, f"{kept_n} of 120 dates as German writes them (< {DATES_FLOOR}):\n" + "\n".join(missed)
