"""The running app in a real browser: Debian chromium driven by Playwright.

Starts ``streamlit run app.py`` on a free port, types a sentence, waits for the translation, opens the
step page from the navigation, moves the step slider and checks that the heatmap and the output change,
with no exception on the page; opens every page by its URL path (/translate, /attention, ...) and a
link of the single-page app (``/?view=Attention&kind=...``). Saves screenshots under tests/artifacts/
(git-ignored); with ``ATTENTION_EXPLORER_DOCS=1`` the shots of the Inside one head, Compare and Lesson pages
also go to docs/ for the README. Walks the lesson from its first step to the last with Next. Skips with a reason when chromium, Playwright or a checkpoint is missing. Never runs ``playwright install``: it uses /usr/bin/chromium.
"""

from __future__ import annotations

import os
import urllib.parse

import pytest
from browser_support import ARTIFACTS, MODEL, ROOT, SENTENCES, chromium_page, skip_reason, streamlit_server
from browser_support import translation as _translation
from browser_support import wait_idle as _wait_idle

from ui import catalog
from ui.lesson_text import LESSON

DOCS = ROOT / "docs"
DOC_SHOTS = os.environ.get("ATTENTION_EXPLORER_DOCS") == "1"  # also write docs/<name>-view.png (README pictures)

pytestmark = pytest.mark.browser

if (_reason := skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402


@pytest.fixture(scope="module")
def app_url():
    """A ``streamlit run app.py`` server on a free port, stopped after the module's tests."""
    with streamlit_server(ARTIFACTS / "streamlit-server.log") as server:
        yield server.url


@pytest.fixture(scope="module")
def page(app_url):
    with chromium_page() as pg:
        yield pg


def _z_rows(page: Page, key: str) -> int:
    """Query rows of the mosaic placed with ``key``, as the browser's plotly figure holds it (layout.meta.Q)."""
    return page.evaluate(
        """key => {
            const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
            return gd && gd.layout && gd.layout.meta ? gd.layout.meta.Q : -1;
        }""",
        key,
    )


# expect() keeps its own 5 s default, apart from the page's timeout: the first page load includes the model
# load and can take longer on a busy 2-core machine.
expect.set_options(timeout=90_000)


def _screenshot(page: Page, name: str, *, docs: str | None = None, docs_height: int = 1600) -> None:
    """The whole page (Streamlit scrolls inside its main block, so the viewport is grown to fit it first); with
    ``docs`` and ``ATTENTION_EXPLORER_DOCS=1``, its top ``docs_height`` pixels also go to docs/``docs``."""
    height = page.evaluate("Math.max(...[...document.querySelectorAll('[data-testid=stMain]')].map(e => e.scrollHeight), 600)")
    size = page.viewport_size
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 40, 8000)})
    page.wait_for_timeout(500)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)
    if docs and DOC_SHOTS:
        clip = {"x": 0, "y": 0, "width": size["width"], "height": min(docs_height, int(height) + 40)}
        page.screenshot(path=str(DOCS / docs), clip=clip)
    page.set_viewport_size(size)


def _nav_link(page: Page, path: str):
    """The navigation menu's link to the page at ``/path`` (top bar, its overflow menu, or the sidebar)."""
    links = "[data-testid=stTopNavLink], [data-testid=stTopNavDropdownLink], [data-testid=stSidebarNavLink]"
    return page.locator(links).filter(has_text=catalog.PAGE_BY_PATH[path].title).first


def _path(page: Page) -> str:
    return urllib.parse.urlparse(page.url).path


def _params(page: Page) -> dict[str, str]:
    return dict(urllib.parse.parse_qsl(urllib.parse.urlparse(page.url).query))


def _wait_rows(page: Page, key: str, rows: int) -> None:
    """Until the mosaic ``key`` shows ``rows`` query rows (fails after the page timeout)."""
    page.wait_for_function(
        """([key, rows]) => {
            const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
            return gd && gd.layout && gd.layout.meta && gd.layout.meta.Q === rows;
        }""",
        arg=[key, rows],
    )


def test_type_translate_and_step(page: Page, app_url: str):
    first, second = SENTENCES
    page.goto(f"{app_url}/?model={MODEL}")
    expect(page.locator(".translation").first).to_be_visible()
    _wait_idle(page)
    assert _path(page) == "/translate", "the root URL opens Translate at its own path"
    before = _translation(page)
    assert before, "no translation shown"

    box = page.locator(".st-key-sentence input")
    box.fill(first)
    box.press("Enter")
    expect(page.locator(".translation").first).not_to_have_text(before)
    _wait_idle(page)
    translated = _translation(page)
    assert translated and translated != before
    assert "sentence=" in page.url, "the sentence is not in the URL"
    _screenshot(page, "browser-translate.png")

    _nav_link(page, "steps").click()
    _wait_idle(page)
    assert _path(page) == "/steps"
    assert _params(page).get("sentence") == first, "the sentence is not in the URL after a page switch"
    expect(page.locator(".st-key-sentence input")).to_have_value(first)
    page.get_by_text("Every layer and head so far").click()  # the mosaics of every layer and head up to this step
    _wait_idle(page)
    expect(page.locator("[data-testid=stPlotlyChart] .hm").first).to_be_visible()
    rows0 = _z_rows(page, "steps_cross_mosaic")
    chips0 = page.locator(".output-so-far").first.inner_text()
    assert rows0 == 1, "at step 1 the cross-attention so far has one query row"

    slider = page.get_by_role("slider", name="Step")
    slider.focus()
    slider.press("ArrowRight")
    slider.press("ArrowRight")
    expect(page.locator(".output-so-far").first).not_to_have_text(chips0)
    _wait_idle(page)
    _wait_rows(page, "steps_cross_mosaic", 3)  # the heatmap grew by the two steps
    assert "step=3" in page.url, "the step is not in the URL"

    page.get_by_role("button", name="Previous").click()
    _wait_rows(page, "steps_cross_mosaic", 2)
    _wait_idle(page)

    expect(page.locator("[data-testid=stException]")).to_have_count(0)
    _screenshot(page, "browser-steps.png")

    # A shared link restores sentence, page and step.
    page.goto(page.url)
    _wait_idle(page)
    expect(page.locator(".output-so-far").first).to_be_visible()
    expect(page.get_by_role("slider", name="Step")).to_have_attribute("aria-valuetext", "2")
    expect(page.locator(".st-key-sentence input")).to_have_value(first)
    expect(page.locator("[data-testid=stException]")).to_have_count(0)


def test_click_a_zoom_cell_shows_that_querys_row(page: Page, app_url: str):
    """A click on a cell of the zoomed heatmap selects (query, key) and draws that query's row in every head."""
    first, _ = SENTENCES
    query = urllib.parse.urlencode({"model": MODEL, "kind": "enc_self", "sentence": first})
    page.goto(f"{app_url}/attention?{query}")
    _wait_idle(page)
    gd = page.locator(".st-key-zoom .js-plotly-plot")
    expect(gd).to_be_visible()
    expect(page.get_by_text("Click a cell to see what its query attends to")).to_be_visible()
    # page coordinates of the centre of cell (query 1, key 2), from plotly's own axis mapping
    gd.scroll_into_view_if_needed()
    x, y = page.evaluate(
        """() => {
            const gd = document.querySelector('.st-key-zoom .js-plotly-plot');
            const fl = gd._fullLayout, box = gd.getBoundingClientRect();
            return [box.left + fl._size.l + fl.xaxis.l2p(2), box.top + fl._size.t + fl.yaxis.l2p(1)];
        }"""
    )
    page.mouse.move(x, y)
    page.mouse.click(x, y)
    expect(page.get_by_text("Its whole row, in every head of layer")).to_be_visible()
    expect(page.get_by_text("Query 1", exact=False).first).to_be_visible()
    expect(page.locator(".st-key-zoom_row .js-plotly-plot")).to_be_visible()
    expect(page.locator("[data-testid=stException]")).to_have_count(0)
    _screenshot(page, "browser-zoom-click.png")


@pytest.mark.parametrize("path", [p.path for p in catalog.PAGES])
def test_every_page_opens_by_its_url_path(page: Page, app_url: str, path: str):
    first, _ = SENTENCES
    query = urllib.parse.urlencode({"model": MODEL, "sentence": first})
    page.goto(f"{app_url}/{path}?{query}")
    _wait_idle(page)
    expect(page.get_by_text(catalog.PAGE_BY_PATH[path].teaches[:30])).to_be_visible()
    expect(page.locator("[data-testid=stPlotlyChart], [data-testid=stDataFrame]").first).to_be_visible()
    expect(page.locator("[data-testid=stException]")).to_have_count(0)
    assert _path(page) == f"/{path}"
    assert _params(page).get("sentence") == first
    _screenshot(page, f"browser-page-{path}.png")


def test_old_single_page_link_opens_its_page(page: Page, app_url: str):
    """A link of the single-page app, with labels as values, opens the page at its path with short keys."""
    first, _ = SENTENCES
    query = urllib.parse.urlencode(
        {"model": MODEL, "view": "Attention", "kind": "Encoder self-attention", "method": "Beam search", "sentence": first}
    )
    page.goto(f"{app_url}/?{query}")
    _wait_idle(page)
    expect(page.locator(".st-key-zoom .js-plotly-plot")).to_be_visible()
    _wait_idle(page)
    assert _path(page) == "/attention"
    params = _params(page)
    assert (params.get("kind"), params.get("method"), params.get("sentence")) == ("enc_self", "beam", first)
    assert "view" not in params
    expect(page.get_by_role("radio", name="Encoder self-attention", exact=True)).to_be_checked()
    expect(page.locator("[data-testid=stException]")).to_have_count(0)


def _no_exception(page: Page) -> None:
    expect(page.locator("[data-testid=stException]")).to_have_count(0)


def _chart(page: Page, key: str):
    """The plotly chart placed with ``key``."""
    return page.locator(f".st-key-{key} .js-plotly-plot")


LESSON_FIGURE = {  # the chart key of each lesson step's figure (step 1 draws a table)
    "positions": "lesson_pe",
    "attention": "lesson_enc_self",
    "heads": "lesson_mosaic",
    "causal": "lesson_dec_self",
    "cross": "lesson_cross",
    "next_token": "lesson_candidates",
    "beam": "lesson_beam",
    "masking": "lesson_masked",
    "explain": "lesson_explain",
}


def test_lesson_walks_from_the_first_step_to_the_last_with_next(page: Page, app_url: str):
    first, _ = SENTENCES
    page.goto(f"{app_url}/lesson?{urllib.parse.urlencode({'model': MODEL, 'sentence': first})}")
    _wait_idle(page)
    n = len(LESSON)
    for k, step in enumerate(LESSON, start=1):
        expect(page.locator("h3").filter(has_text=f"{k} · {step.title}")).to_be_visible()
        expect(page.get_by_text(f"Step {k} of {n}", exact=True)).to_be_visible()
        if step.key in LESSON_FIGURE:
            expect(_chart(page, LESSON_FIGURE[step.key])).to_be_visible()
        else:
            expect(page.locator("[data-testid=stMain] [data-testid=stDataFrame]").first).to_be_visible()
        assert _params(page).get("lesson") == (None if k == 1 else str(k)), "the step is not in the URL"
        _no_exception(page)
        _screenshot(page, f"browser-lesson-{k}.png", docs="lesson-view.png" if step.key == "cross" else None)
        if k < n:
            page.get_by_role("button", name="Next").click()
            _wait_idle(page)
    expect(page.get_by_role("button", name="Next")).to_be_disabled()

    page.get_by_text("Presenter mode").click()
    _wait_idle(page)
    expect(page.locator("[data-testid=stSidebar]")).to_be_hidden()
    assert _params(page).get("presenter") == "1"
    _no_exception(page)
    _screenshot(page, "browser-lesson-presenter.png")


def test_compare_and_head_pages_for_the_readme(page: Page, app_url: str):
    """The two sentences of a minimal pair side by side, and one head's computation: screenshots."""
    pair = "tired-wide" if MODEL == "en-de" else "one-letter"
    page.goto(f"{app_url}/compare?{urllib.parse.urlencode({'model': MODEL, 'pair': pair})}")
    _wait_idle(page)
    expect(page.locator(".cmp-out-b").first).to_be_visible()
    expect(_chart(page, "cmp_distance")).to_be_visible()
    if MODEL == "reverse":  # one changed letter: one changed output piece (en-de's outputs depend on the checkpoint)
        expect(page.locator(".cmp-out-b span[title=changed]")).to_have_count(1)
    assert _params(page).get("pair") == pair
    _no_exception(page)
    _screenshot(page, "browser-compare.png", docs="compare-view.png", docs_height=1500)

    first, _ = SENTENCES
    query = urllib.parse.urlencode({"model": MODEL, "sentence": first, "kind": "cross", "query": 2})
    page.goto(f"{app_url}/head?{query}")
    _wait_idle(page)
    expect(_chart(page, "head_weights")).to_be_visible()
    _no_exception(page)
    _screenshot(page, "browser-head.png", docs="head-view.png", docs_height=2000)
