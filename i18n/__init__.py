"""The interface's languages: English (the source strings) and German, from gettext catalogues.

Every string the app shows is written in English in the code and wrapped in ``_()`` (Babel's extractor finds them:
``pybabel extract -F babel.cfg -o messages.pot .``); the German text lives in ``locale/de/LC_MESSAGES/*.po`` (one
file per part of the app, merged when read), compiled in memory with Babel when first needed: no ``.mo`` file is kept
in the repository. ``tests/test_i18n.py`` fails on any wrapped string without a German translation.

One server process serves many browser sessions, each in its own language, so the language is not process-wide: the
UI registers a function that says the current session's language (``set_language_source``), and ``_()`` asks it on
every call. Without one (a notebook, a test, ``viz/`` on its own) the text is English. Nothing here imports Streamlit
or torch.
"""

from __future__ import annotations

import functools
import gettext
import io
from collections.abc import Callable
from pathlib import Path

from babel.messages.catalog import Catalog
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

LANGUAGES = {"en": "English", "de": "Deutsch"}
"""Language code -> its name in that language (the sidebar switch shows these)."""
DEFAULT = "en"
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"

_language_source: Callable[[], str] | None = None


def set_language_source(source: Callable[[], str] | None) -> None:
    """Register the function that says the current language code (the UI's: the session's choice); None: English."""
    global _language_source
    _language_source = source


def language() -> str:
    """The current language code: what the registered source says, if it is one of ``LANGUAGES``, else English."""
    if _language_source is None:
        return DEFAULT
    try:
        code = _language_source()
    except Exception:  # outside a session (a worker thread): English
        return DEFAULT
    return code if code in LANGUAGES else DEFAULT


def catalog(code: str) -> Catalog:
    """Every message of language ``code``: the ``*.po`` files of ``locale/<code>/LC_MESSAGES`` merged (sorted by name;
    a later file's translation of the same message wins). Raises ``FileNotFoundError`` if the language has none."""
    files = sorted((LOCALE_DIR / code / "LC_MESSAGES").glob("*.po"))
    if not files:
        raise FileNotFoundError(f"no catalogue for language {code!r} in {LOCALE_DIR / code / 'LC_MESSAGES'}")
    merged = Catalog(locale=code)
    for path in files:
        with path.open("rb") as f:
            for message in read_po(f, locale=code):
                if message.id:
                    merged[message.id] = message
    return merged


@functools.cache
def translations(code: str) -> gettext.NullTranslations:
    """The compiled translations of ``code`` (English: the identity), built once per process."""
    if code == DEFAULT:
        return gettext.NullTranslations()
    buffer = io.BytesIO()
    write_mo(buffer, catalog(code))
    buffer.seek(0)
    return gettext.GNUTranslations(buffer)


def _(message: str) -> str:
    """``message`` in the current language (itself where the catalogue has no translation)."""
    return translations(language()).gettext(message)


def N_(message: str) -> str:
    """Mark ``message`` for extraction without translating it (text built at import, e.g. the lesson's steps):
    the code that shows it passes it through ``_()`` then, in the session's language."""
    return message


def ngettext(singular: str, plural: str, n: int) -> str:
    """The singular or plural form of a message for count ``n``, in the current language."""
    return translations(language()).ngettext(singular, plural, n)
