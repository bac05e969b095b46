"""Keyboard alone (issue 56, part 3) and presenter mode at 200 % zoom (part 5), in Debian chromium.

* The lesson from step 1 to step 10 with Tab and Enter only, focus checked after every key that moves it;
  the decoding-step slider of step 7 with the arrow keys; back with Shift+Tab and Enter.
* Step through generation: Next with Enter, the step slider with the arrow keys, and forcing a token through
  the "Force another candidate" box with the arrow keys and Enter.
* Presenter mode (``/lesson?presenter=1``) in a 1280 × 720 window at 200 % zoom (640 × 360 CSS pixels, two device
  pixels each): at every step no control or text block reaches past the viewport's width and no two overlap.
  Screenshots go to tests/artifacts/presenter-200-step-<k>.png (git-ignored).

No mouse: every action here is a key press (``page.keyboard``); locators only read where the focus is.
"""

from __future__ import annotations

import pytest
from browser_support import ARTIFACTS, MODEL, chromium_page, skip_reason, streamlit_server, wait_idle

from ui import keys
from ui.lesson_text import LESSON

pytestmark = pytest.mark.browser

if (_reason := skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

expect.set_options(timeout=90_000)
MAX_TABS = 150  # Tab presses to reach a control from the top of the page (menu, sidebar and page controls)


@pytest.fixture(scope="module")
def app_url():
    with streamlit_server(ARTIFACTS / "streamlit-keyboard.log") as server:
        yield server.url


@pytest.fixture(scope="module")
def page(app_url):
    with chromium_page() as pg:
        yield pg


def focused_in(page: Page, selector: str) -> bool:
    """Whether the focused element is ``selector`` or inside it."""
    return page.evaluate("s => !!document.activeElement && !!document.activeElement.closest(s)", selector)


def focus_desc(page: Page) -> str:
    return page.evaluate(
        "() => { const e = document.activeElement; return e ? `${e.tagName} ${e.getAttribute('aria-label') || ''} "
        "${(e.innerText || '').slice(0, 40)} in ${e.closest('[class*=st-key-]')?.className.match(/st-key-\\S+/)?.[0]}` : 'none'; }"
    )


def tab_to(page: Page, selector: str, *, back: bool = False) -> int:
    """Press Tab (Shift+Tab with ``back``) until the focus is in ``selector``; returns the presses it took."""
    for n in range(1, MAX_TABS + 1):
        page.keyboard.press("Shift+Tab" if back else "Tab")
        if focused_in(page, selector):
            return n
    pytest.fail(f"{MAX_TABS} Tab presses never reached {selector}; the focus is on {focus_desc(page)}")


def open_page(page: Page, url: str) -> None:
    page.goto(url)
    expect(page.locator("[data-testid=stMain] h1").first).to_be_visible()
    wait_idle(page)
    page.locator("body").focus()  # the keyboard starts at the top of the document


def lesson_heading(page: Page):
    return page.locator("[data-testid=stMain] h3").first


def test_lesson_from_step_1_to_10_with_the_keyboard(page: Page, app_url: str):
    open_page(page, f"{app_url}/lesson?model={MODEL}")
    expect(lesson_heading(page)).to_contain_text(f"1 · {LESSON[0].title}")
    nxt, prev = f".st-key-{keys.LESSON_NEXT}", f".st-key-{keys.LESSON_PREV}"
    tab_to(page, nxt)
    for k in range(2, len(LESSON) + 1):
        page.keyboard.press("Enter")
        expect(lesson_heading(page)).to_contain_text(f"{k} · {LESSON[k - 1].title}")
        wait_idle(page)
        assert "lesson=" + str(k) in page.url
        if k < len(LESSON):
            assert focused_in(page, nxt), f"step {k}: the focus left Next for {focus_desc(page)}"
        if LESSON[k - 1].key == "next_token":  # the decoding-step slider: Tab to it, move it with the arrow keys
            slider = f".st-key-{keys.LESSON_DECODE_STEP} input"  # <input type=range>: a slider to assistive technology
            tab_to(page, slider)
            before = page.locator(slider).input_value()
            page.keyboard.press("ArrowRight")
            expect(page.locator(slider)).not_to_have_value(before)
            wait_idle(page)
            assert focused_in(page, slider), f"the slider lost the focus to {focus_desc(page)}"
            tab_to(page, nxt, back=True)
    # the last step: Next is disabled, so the focus moves on; Previous is reached with Shift+Tab
    expect(page.locator(f"{nxt} button")).to_be_disabled()
    tab_to(page, prev, back=True)
    page.keyboard.press("Enter")
    expect(lesson_heading(page)).to_contain_text(f"{len(LESSON) - 1} · {LESSON[-2].title}")
    wait_idle(page)
    assert focused_in(page, prev), f"the focus left Previous for {focus_desc(page)}"


def test_step_through_generation_and_force_a_token_with_the_keyboard(page: Page, app_url: str):
    open_page(page, f"{app_url}/steps?model={MODEL}")
    slider = f".st-key-{keys.STEP} input"  # <input type=range>
    main = page.locator("[data-testid=stMain]")
    expect(main).to_contain_text("Step 1 of ")
    tab_to(page, f".st-key-{keys.NEXT}")
    page.keyboard.press("Enter")
    expect(main).to_contain_text("Step 2 of ")
    wait_idle(page)
    assert focused_in(page, f".st-key-{keys.NEXT}"), f"the focus left Next for {focus_desc(page)}"
    assert "step=2" in page.url

    tab_to(page, slider)
    page.keyboard.press("ArrowRight")
    expect(main).to_contain_text("Step 3 of ")
    wait_idle(page)
    assert "step=3" in page.url and focused_in(page, slider), focus_desc(page)
    page.keyboard.press("ArrowLeft")
    expect(main).to_contain_text("Step 2 of ")
    wait_idle(page)

    box = f".st-key-{keys.FORCE_PICK}"
    tab_to(page, f"{box} input")
    expect(page.locator(".output-so-far [title=forced]")).to_have_count(0)
    page.keyboard.press("ArrowDown")  # opens the list on its first candidate
    expect(page.get_by_role("option").first).to_be_visible()
    page.keyboard.press("Enter")
    expect(page.locator(".output-so-far [title=forced]")).not_to_have_count(0)  # the forced piece, in purple
    wait_idle(page)
    expect(page.get_by_text("Purple: tokens you forced.")).to_be_visible()
    # back to the model's own choices, by keyboard as well
    tab_to(page, f".st-key-{keys.UNFORCE}")
    page.keyboard.press("Enter")
    expect(page.locator(".output-so-far [title=forced]")).to_have_count(0)


# -- presenter mode at 200 % ----------------------------------------------------------------------------------------
LAYOUT_JS = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const sel = 'button, [role=slider], [role=switch], [role=combobox], [data-testid=stProgress], h1, h2, h3, '
    + '[data-testid=stMarkdownContainer] > p, [data-testid=stWidgetLabel], [data-testid=stPlotlyChart], '
    + '[data-testid=stTable], [data-testid=stDataFrame], .translation, .katex-display, [data-testid=stCaptionContainer]';
  const els = [...main.querySelectorAll(sel)].filter(e => {
    const r = e.getBoundingClientRect(), cs = getComputedStyle(e);
    return r.width >= 2 && r.height >= 2 && cs.visibility !== 'hidden' && cs.opacity !== '0';
  });
  const name = e => `${e.tagName.toLowerCase()}${e.dataset.testid ? '[' + e.dataset.testid + ']' : ''} "${(e.innerText || e.getAttribute('aria-label') || '').trim().slice(0, 30)}"`;
  const width = document.documentElement.clientWidth;
  const outside = [], overlaps = [];
  const boxes = els.map(e => e.getBoundingClientRect());
  els.forEach((e, i) => {
    const r = boxes[i];
    if (r.left < -1 || r.right > width + 1) outside.push(`${name(e)}: x ${Math.round(r.left)}..${Math.round(r.right)} of ${width}`);
    for (let j = i + 1; j < els.length; j++) {
      const f = els[j];
      if (e.contains(f) || f.contains(e)) continue;
      const s = boxes[j];
      const w = Math.min(r.right, s.right) - Math.max(r.left, s.left), h = Math.min(r.bottom, s.bottom) - Math.max(r.top, s.top);
      if (w > 2 && h > 2) overlaps.push(`${name(e)} and ${name(f)}: ${Math.round(w)} × ${Math.round(h)} px`);
    }
  });
  return {width, count: els.length, outside, overlaps, scroll: document.documentElement.scrollWidth};
}"""


def zoomed(page: Page, width: int, height: int, zoom: float) -> Page:
    """A new page of ``page``'s browser as a ``width × height`` window at browser zoom ``zoom``: laid out in
    ``width / zoom × height / zoom`` CSS pixels, each drawn with ``zoom`` device pixels (what 200 % zoom does)."""
    pg = page.context.browser.new_page(
        viewport={"width": round(width / zoom), "height": round(height / zoom)}, device_scale_factor=zoom
    )
    pg.set_default_timeout(90_000)
    return pg


def shot(pg: Page, name: str) -> None:
    """A screenshot of the whole page at its width: Streamlit scrolls inside its main block, so the window is made
    as tall as the page for the shot (the width, which the layout depends on, stays)."""
    size = pg.viewport_size
    tall = pg.evaluate("Math.max(...[...document.querySelectorAll('[data-testid=stMain]')].map(e => e.scrollHeight), 300)")
    pg.set_viewport_size({"width": size["width"], "height": min(int(tall) + 20, 6000)})
    pg.wait_for_timeout(300)
    pg.screenshot(path=str(ARTIFACTS / name))
    pg.set_viewport_size(size)
    pg.wait_for_timeout(300)


def test_presenter_mode_fits_1280x720_at_200_percent(page: Page, app_url: str):
    pg = zoomed(page, 1280, 720, 2)
    try:
        open_page(pg, f"{app_url}/lesson?model={MODEL}&presenter=1")
        assert pg.evaluate("window.devicePixelRatio") == 2 and pg.viewport_size["width"] == 640
        expect(pg.locator("[data-testid=stSidebar]")).to_be_hidden()
        nxt = f".st-key-{keys.LESSON_NEXT}"
        for k in range(1, len(LESSON) + 1):
            expect(lesson_heading(pg)).to_contain_text(f"{k} · {LESSON[k - 1].title}")
            wait_idle(pg)
            pg.wait_for_timeout(500)  # plotly's responsive resize
            got = pg.evaluate(LAYOUT_JS)
            shot(pg, f"presenter-200-step-{k}.png")
            assert got["count"] >= 5, got
            assert not got["outside"], f"step {k}: off screen: {got['outside']}"
            assert not got["overlaps"], f"step {k}: overlapping: {got['overlaps']}"
            assert got["scroll"] <= got["width"] + 1, f"step {k}: the page scrolls sideways ({got['scroll']} px)"
            if k < len(LESSON):
                tab_to(pg, nxt)
                pg.keyboard.press("Enter")
    finally:
        pg.close()
