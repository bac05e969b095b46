"""The German interface: every message the app shows has a German translation, and the app speaks German.

Part one reads the sources with Babel's own extractor (the files and keywords of ``babel.cfg``; ``N_`` marks data
translated where it is shown) and checks every message against the merged catalogue ``i18n.catalog("de")``, every PO
file for syntax and for the same ``{placeholders}`` on both sides. Part two runs the app with ``AppTest`` in German:
every page renders without an exception and shows no label, caption or text that is an English message left
untranslated; the sidebar switch and ``?lang=de`` keep German across a page switch, and presenter mode works in
German.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path

import pytest
from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.pofile import read_po

import i18n
from model.facts import KIND_NAMES
from ui import catalog, keys

ROOT = Path(__file__).resolve().parent.parent
APP = str(ROOT / "app.py")
PO_FILES = sorted((ROOT / "locale").glob("*/LC_MESSAGES/*.po"))
PLACEHOLDER = re.compile(r"\{[^{}]*\}")


def extracted() -> dict[str, list[str]]:
    """Every message of the sources babel.cfg names (singular text -> where), as ``pybabel extract`` finds them."""
    with (ROOT / "babel.cfg").open() as f:
        method_map, options_map = parse_mapping_cfg(f, "babel.cfg")
    found: dict[str, list[str]] = {}
    for filename, lineno, message, _comments, _context in extract_from_dir(
        str(ROOT), method_map, options_map, keywords=DEFAULT_KEYWORDS
    ):
        for text in message if isinstance(message, tuple) else (message,):
            if text:
                found.setdefault(text, []).append(f"{filename}:{lineno}")
    return found


MESSAGES = extracted()


def test_the_extractor_finds_the_app_messages():
    """The check below means something only if the extraction reaches every part: the frame, the pages, the data
    marked with N_ (page titles), and a message of the lesson's catalogue."""
    places = {p.split(":")[0] for where in MESSAGES.values() for p in where}
    assert "app.py" in places and "ui/pages/masks.py" in places and "ui/catalog.py" in places
    assert "Mask lab" in MESSAGES, "page titles (catalog data marked N_) are extracted"
    assert len(MESSAGES) > 300


def test_every_message_has_a_german_translation():
    german = i18n.catalog("de")
    missing = []
    for text, where in sorted(MESSAGES.items()):
        message = german.get(text)
        strings = message.string if message is not None else None
        if not strings or (isinstance(strings, tuple) and not all(strings)):
            missing.append(f"{where[0]}: {text[:80]!r}")
    assert not missing, f"{len(missing)} messages without German:\n" + "\n".join(missing[:60])


@pytest.mark.parametrize("path", PO_FILES, ids=lambda p: p.name)
def test_each_po_file_parses_and_keeps_the_placeholders(path):
    with path.open("rb") as f:
        cat = read_po(f, locale=path.parent.parent.name)
    messages = [m for m in cat if m.id]
    assert messages, f"{path.name} holds no message"
    wrong = []
    for m in messages:
        ids = m.id if isinstance(m.id, tuple) else (m.id,)
        strings = m.string if isinstance(m.string, tuple) else (m.string,)
        for s in strings:
            if s and sorted(PLACEHOLDER.findall(ids[0])) != sorted(PLACEHOLDER.findall(s)):
                wrong.append(f"{ids[0][:60]!r} -> {s[:60]!r}")
    assert not wrong, f"placeholders differ in {path.name}:\n" + "\n".join(wrong)


def test_the_placeholder_check_catches_a_lost_placeholder(tmp_path):
    """The check above fails on a translation that drops ``{layer}`` (and English falls back where none exists)."""
    po = tmp_path / "de" / "LC_MESSAGES" / "x.po"
    po.parent.mkdir(parents=True)
    po.write_text('msgid ""\nmsgstr ""\n"Language: de\\n"\n\nmsgid "Layer {layer}"\nmsgstr "Schicht"\n', encoding="utf-8")
    with pytest.raises(AssertionError, match="placeholders differ"):
        test_each_po_file_parses_and_keeps_the_placeholders(po)
    assert i18n._("a message no catalogue has") == "a message no catalogue has"


def test_texts_from_model_and_analysis_are_marked_for_translation():
    """Kind names and the fixed InputError messages are shown by the UI, translated there: they must be in the
    catalogue, so ui.catalog marks every one (a new InputError message in analysis/ fails here until it is)."""
    marked = set(catalog.SHOWN_ELSEWHERE)
    assert set(KIND_NAMES.values()) <= marked
    raised = set()
    for path in (ROOT / "analysis").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", None) == "InputError"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                raised.add(node.args[0].value)
    assert raised and raised <= marked, f"InputError messages not marked in ui.catalog: {sorted(raised - marked)}"


def test_the_tokenizers_words_are_marked_for_translation():
    from model.spm_tokenizer import SentencePieceTokenizer
    from model.tokenizer import TiktokenTokenizer

    words = {
        getattr(t, a) for t in (TiktokenTokenizer, SentencePieceTokenizer) for a in ("id_name", "origin_id_name", "unknown_rule")
    }
    assert words - {"id"} <= set(catalog.SHOWN_ELSEWHERE), sorted(words - set(catalog.SHOWN_ELSEWHERE))


def test_the_shipped_models_cards_are_marked_for_translation():
    """The sidebar shows a model's card lines (metrics.json ``card``): those of the shipped models are in the
    catalogue, so a German sidebar shows them in German (an imported model's own card stays as it is written)."""
    lines = set()
    for path in sorted((ROOT / "pretrained").glob("*/metrics.json")):
        card = json.loads(path.read_text()).get("card") or {}
        lines |= {v for k, v in card.items() if k in ("limits", "summary") and isinstance(v, str) and v.strip()}
    assert lines, "no shipped model has a card line"
    assert lines <= set(catalog.SHOWN_ELSEWHERE), (
        f"card lines not marked in ui.catalog: {sorted(lines - set(catalog.SHOWN_ELSEWHERE))}"
    )


def test_the_spinners_are_marked_and_shown_in_the_session_language():
    """Cached calls' spinner texts are fixed at import: each is a ``state.Shown`` of a marked message, which
    Streamlit turns into text (``str()``) when the spinner starts, in the session's language."""
    tree = ast.parse((ROOT / "ui" / "state.py").read_text())
    spinners = [
        k.value for node in ast.walk(tree) if isinstance(node, ast.Call) for k in node.keywords if k.arg == "show_spinner"
    ]
    texts = [ast.unparse(v) for v in spinners if not (isinstance(v, ast.Constant) and v.value is False)]
    assert texts and all(re.fullmatch(r"Shown\(N_\('[^']+'\)\)", t) for t in texts), texts
    from ui.state import Shown

    try:
        i18n.set_language_source(lambda: "de")
        assert str(Shown("Loading the model…")) == "Das Modell wird geladen …"
        i18n.set_language_source(lambda: "en")
        assert str(Shown("Loading the model…")) == "Loading the model…"
    finally:
        i18n.set_language_source(None)


def test_german_text_follows_the_session_and_english_stays_the_default():
    assert i18n.language() == "en" or i18n._("Layer") in ("Layer", "Schicht")
    try:
        i18n.set_language_source(lambda: "de")
        assert i18n._("Layer") == "Schicht" and i18n._("Head") == "Kopf" and i18n._("Mask lab") == "Masken-Labor"
        assert i18n._("layer {layer}, head {head}").format(layer=2, head=3) == "Schicht 2, Kopf 3"
        i18n.set_language_source(lambda: "fr")  # not a language of the app: English
        assert i18n._("Layer") == "Layer"
    finally:
        i18n.set_language_source(None)


# -- the app in German ------------------------------------------------------------------------------------------------

MODELS = Path(os.environ.get("ATTENTION_EXPLORER_MODELS", ROOT / "pretrained"))
REVERSE = MODELS / "reverse"
TIMEOUT = 180
needs_model = pytest.mark.skipif(not (REVERSE / "config.json").exists(), reason=f"no reverse checkpoint at {REVERSE}")


def english_left() -> dict[str, str]:
    """English messages whose German differs (the ones a German page must not show), message -> German."""
    german = i18n.catalog("de")
    out = {}
    for text in MESSAGES:
        m = german.get(text)
        if m is not None and isinstance(m.string, str) and m.string and m.string != text:
            out[text] = m.string
    return out


ENGLISH = english_left()


def shown_texts(at) -> list[str]:
    """Every label, caption, help text, placeholder, option and text body of the run, main area and sidebar."""
    texts: list[str] = []

    def strings_of(proto) -> None:
        for field, value in proto.ListFields():
            if field.name in ("label", "body", "help", "placeholder", "text", "caption", "value") and isinstance(value, str):
                texts.append(value)
            elif field.name in ("options", "formatted_options") and not isinstance(value, str | bytes):
                texts.extend(v for v in value if isinstance(v, str))
            elif field.message_type is not None and field.name in ("expandable", "tab_container", "form"):
                strings_of(value)

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None and hasattr(proto, "ListFields"):
            strings_of(proto)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return texts


def english_in(at) -> list[str]:
    return sorted({t for t in shown_texts(at) if t in ENGLISH})


def open_german(page: str, model: str = "reverse", **params):
    from app_charts import ok, switch_to
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params.update({"model": model, keys.LANG: "de", **params})
    at.run()
    if page != catalog.DEFAULT_PAGE:
        switch_to(at, page).run()
    return ok(at)


@pytest.fixture(autouse=True)
def _debug(monkeypatch):
    monkeypatch.setenv("ATTENTION_EXPLORER_DEBUG", "1")  # the app re-raises instead of showing a polite error


def test_the_english_check_would_see_an_english_label():
    """``english_in`` reads labels: an English caption of the catalogue is found."""

    class Node:
        def __init__(self, proto, children=()):
            self.proto, self.children = proto, dict(enumerate(children))

    from streamlit.proto.Markdown_pb2 import Markdown
    from streamlit.proto.Slider_pb2 import Slider

    class At:
        _tree = Node(None, [Node(Slider(label="Layer")), Node(Markdown(body="Schicht"))])

    assert english_in(At()) == ["Layer"]


@needs_model
@pytest.mark.parametrize("page", [p.path for p in catalog.PAGES if p.path != "room"])
def test_every_page_renders_in_german_without_english_labels(page):
    at = open_german(page)
    german_teaches = i18n.translations("de").gettext(catalog.PAGE_BY_PATH[page].teaches)
    assert german_teaches in [c.value for c in at.caption], "the page's caption is German"
    assert not english_in(at), f"English left on /{page}: {english_in(at)}"


@needs_model
def test_the_room_page_renders_in_german():
    """The room's own texts belong to its catalogue (room.po); here: it renders, and the frame around it is German."""
    at = open_german("room")
    assert i18n.translations("de").gettext("Model") in [s.label for s in at.sidebar.selectbox]


@pytest.mark.skipif(not (MODELS / "en-de" / "config.json").exists(), reason="no shipped en-de model")
def test_the_default_page_on_the_shipped_model_is_german():
    at = open_german(catalog.DEFAULT_PAGE, model="en-de")
    assert not english_in(at), f"English left on the shipped model: {english_in(at)}"
    assert "Übersetzung" in [s.value for s in at.subheader]


def browser_page_switch(at, page: str) -> None:
    """Open ``page`` as a click in the menu does: ``st.navigation`` clears the URL's parameters (AppTest keeps them)."""
    from app_charts import ok, switch_to

    at.query_params.clear()
    switch_to(at, page).run()
    ok(at)


@needs_model
def test_the_sidebar_switch_chooses_german_and_keeps_it_across_a_page_switch():
    from app_charts import ok
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.query_params["model"] = "reverse"
    at.run()
    assert at.radio(key=keys.LANG).value == "en" and "Source sequence" in at.text_input(key=keys.SENTENCE).label
    at.radio(key=keys.LANG).set_value("de").run()
    ok(at)
    assert at.text_input(key=keys.SENTENCE).label.startswith("Quellfolge")
    assert at.query_params.get(keys.LANG) == "de", "the choice is in the URL"
    browser_page_switch(at, "masks")
    assert not english_in(at) and at.toggle(key=keys.CAUSAL).label == "Kausale Maske im Decoder"
    assert at.query_params.get(keys.LANG) == "de", "the URL keeps German after a page switch"
    at.radio(key=keys.LANG).set_value("en").run()
    assert at.toggle(key=keys.CAUSAL).label == "Causal mask in the decoder" and keys.LANG not in at.query_params


@needs_model
def test_a_german_link_stays_german_on_another_page_and_in_presenter_mode():
    from app_charts import ok

    at = open_german("translate")
    browser_page_switch(at, "lesson")
    assert at.radio(key=keys.LANG).value == "de" and at.query_params.get(keys.LANG) == "de"
    at.toggle(key=keys.PRESENTER).set_value(True).run()
    ok(at)
    assert at.toggle(key=keys.PRESENTER).label == "Präsentationsmodus"
    assert at.query_params.get(keys.PRESENTER) == "1" and at.query_params.get(keys.LANG) == "de"
    assert not english_in(at), f"English left in presenter mode: {english_in(at)}"


@pytest.mark.browser
def test_in_a_browser_german_stays_across_the_menu_and_a_reload():
    """In Chromium: the sidebar switch turns the app German and writes ``?lang=de``; the menu (its titles German) opens
    another page, whose URL has lost its parameters to ``st.navigation`` and gets ``lang=de`` back; a reload stays
    German."""
    import urllib.parse

    from browser_support import ARTIFACTS, chromium_page, skip_reason, streamlit_server, wait_idle

    if (reason := skip_reason()) is not None:
        pytest.skip(reason)
    from playwright.sync_api import expect

    expect.set_options(timeout=90_000)
    de = i18n.translations("de").gettext

    def lang(page) -> str | None:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlparse(page.url).query)).get(keys.LANG)

    with streamlit_server(ARTIFACTS / "streamlit-i18n.log") as server, chromium_page() as page:
        page.goto(f"{server.url}/translate?model=reverse")
        expect(page.locator(".translation").first).to_be_visible()
        wait_idle(page)
        page.locator(f".st-key-{keys.LANG}").get_by_text("Deutsch").click()
        wait_idle(page)
        expect(page.get_by_text(de("Source sequence (single letters, each after a space)"))).to_be_visible()
        assert lang(page) == "de"
        links = "[data-testid=stTopNavLink], [data-testid=stTopNavDropdownLink], [data-testid=stSidebarNavLink]"
        page.locator(links).filter(has_text=de("Mask lab")).first.click()
        wait_idle(page)
        assert urllib.parse.urlparse(page.url).path == "/masks"
        expect(page.get_by_text(de("Causal mask in the decoder"))).to_be_visible()
        assert lang(page) == "de", "the URL keeps German after a page switch"
        page.reload()
        wait_idle(page)
        expect(page.get_by_text(de("Causal mask in the decoder"))).to_be_visible()
        expect(page.locator("[data-testid=stException]")).to_have_count(0)
