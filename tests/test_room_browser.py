"""A class in real Chromium: one teacher and three students on one ``streamlit run app.py``. The students join by
the link the teacher's /room shows, follow a change of sentence and of page, answer a question; the teacher's page
shows the answers' histogram as it fills and the model's answer on "Reveal", in the Lesson's presenter mode too."""

from __future__ import annotations

import os
import urllib.parse

import pytest
from browser_support import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, skip_reason, streamlit_server, wait_idle

if (_reason := skip_reason()) is not None:
    pytest.skip(_reason, allow_module_level=True)

from playwright.sync_api import Page, expect, sync_playwright  # noqa: E402

from ui import catalog  # noqa: E402

expect.set_options(timeout=90_000)
FOLLOW_S = 20  # a student's screen follows the teacher within this (the poll is 1.5 s; a 2-core machine is shared)


def nav(page: Page, path: str) -> None:
    """Click the top navigation's link to ``/path`` (opening its "N more" menu when the link is folded in)."""
    title = catalog.PAGE_BY_PATH[path].title
    link = page.locator(".rc-overflow-item:not([aria-hidden=true]) [data-testid=stTopNavLink]").filter(has_text=title)
    if link.count() == 0:
        page.locator("[data-testid=stTopNavSection]").first.click()
        link = page.locator("[data-testid=stTopNavDropdownLink]").filter(has_text=title)
    link.first.click()
    wait_idle(page)


def source_box(page: Page):
    return page.locator(".st-key-sentence input")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    store = tmp_path_factory.mktemp("rooms") / "rooms.sqlite3"
    old = os.environ.get("ATTN_ROOM_STORE")
    os.environ["ATTN_ROOM_STORE"] = f"sqlite:///{store}"
    try:
        with streamlit_server(ARTIFACTS / "room-server.log") as s:
            yield s
    finally:
        os.environ.pop("ATTN_ROOM_STORE") if old is None else os.environ.__setitem__("ATTN_ROOM_STORE", old)


def test_a_teacher_and_three_students(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            pages = [browser.new_context(viewport={"width": 1500, "height": 1100}).new_page() for _ in range(4)]
            for pg in pages:
                pg.set_default_timeout(90_000)
            teacher, students = pages[0], pages[1:]
            teacher.goto(f"{server.url}/room?model=reverse&sentence=%20a%20b%20c")
            wait_idle(teacher)
            teacher.get_by_role("button", name="Start a class").click()
            wait_idle(teacher)
            link = teacher.locator("[data-testid=stCode]").first.inner_text().strip()
            code = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))["room"]
            assert len(code) == 6 and "teach=" not in link
            expect(teacher.get_by_text(code, exact=True).first).to_be_visible()
            expect(teacher.locator("[data-testid=stImage] img").first).to_be_visible()  # the QR code

            for s in students:
                s.goto(link)
                wait_idle(s)
                expect(source_box(s)).to_have_value(" a b c")
                expect(s.get_by_text(f"Class {code}")).to_be_visible()  # the sidebar names the room

            # the teacher changes the sentence, then the page: every student's screen follows
            nav(teacher, "attention")
            source_box(teacher).fill(" x y z w")
            source_box(teacher).press("Enter")
            wait_idle(teacher)
            nav(teacher, "steps")
            for s in students:
                expect(source_box(s)).to_have_value(" x y z w", timeout=FOLLOW_S * 1000)
                s.wait_for_url("**/steps?**", timeout=FOLLOW_S * 1000)

            # a question from the teacher's view; each student answers; the histogram fills; reveal
            nav(teacher, "room")
            teacher.get_by_role("button", name="Send to the class", exact=True).click()
            wait_idle(teacher)
            for i, s in enumerate(students):
                expect(s.get_by_text("Question 1:")).to_be_visible(timeout=FOLLOW_S * 1000)
                s.locator("[data-testid=stButtonGroup] button").nth(i % 2).click()
                s.get_by_role("button", name="Send my answer").click()
                expect(s.get_by_text("Sent:")).to_be_visible(timeout=FOLLOW_S * 1000)
            expect(teacher.get_by_text("class (3 answers)").first).to_be_visible(timeout=FOLLOW_S * 1000)

            # the projector: the Lesson in presenter mode shows the question, its histogram and the reveal
            nav(teacher, "lesson")
            teacher.get_by_text("Presenter mode").click()
            wait_idle(teacher)
            expect(teacher.get_by_text("class (3 answers)").first).to_be_visible(timeout=FOLLOW_S * 1000)
            teacher.get_by_role("button", name="Reveal").click()
            expect(teacher.get_by_text("model probability").first).to_be_visible(timeout=FOLLOW_S * 1000)
            for s in students:
                expect(s.get_by_text("model probability").first).to_be_visible(timeout=FOLLOW_S * 1000)
                s.wait_for_url("**/lesson?**", timeout=FOLLOW_S * 1000)
            assert not [pg for pg in pages if pg.locator("[data-testid=stException]").count()]
            teacher.screenshot(path=str(ARTIFACTS / "room-teacher-presenter.png"), full_page=True)
        finally:
            browser.close()


def test_a_teacher_who_reloads_her_page_keeps_control(server):
    """Her browser keeps the room's secret (a cookie, never the address bar): a reload of her page still leads the
    class. The students' link, opened in that same browser, joins as a student."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1500, "height": 1100})
            teacher = context.new_page()
            teacher.set_default_timeout(90_000)
            teacher.goto(f"{server.url}/room?model=reverse&sentence=%20d%20e%20f")
            wait_idle(teacher)
            teacher.get_by_role("button", name="Start a class").click()
            wait_idle(teacher)
            link = teacher.locator("[data-testid=stCode]").first.inner_text().strip()
            expect(teacher.get_by_text("You lead this class")).to_be_visible()
            secret = next(c["value"] for c in context.cookies() if c["name"].startswith("attn_teach_"))
            assert secret not in teacher.url and "lead=1" in teacher.url

            teacher.reload()
            wait_idle(teacher)
            expect(teacher.get_by_text("You lead this class")).to_be_visible()  # on the class's page
            nav(teacher, "room")
            expect(teacher.get_by_role("button", name="Send to the class", exact=True)).to_be_visible()

            student = context.new_page()  # the same browser, the students' link: a student
            student.goto(link)
            wait_idle(student)
            expect(student.get_by_text("The teacher leads")).to_be_visible()
            assert not [pg for pg in (teacher, student) if pg.locator("[data-testid=stException]").count()]
        finally:
            browser.close()
