"""Every built page, in both languages, opened in a real headless Chromium.

Debian's Chromium (/usr/bin/chromium) driven by Playwright, which downloads no browser of its own.
Every request that does not go to 127.0.0.1 is blocked and counted. A page fails on: a console
error; a request that leaves localhost; a formula left untypeset; a notebook page not rendered as a
notebook; a language switch that does not land on the counterpart page; an internal link or anchor
that does not resolve. A search finds the pages of the language it is made in, its snippets with
formulas as text. A screenshot of each page is saved under test-artifacts/screenshots/ (the folder
is printed at the end of the run).
"""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from doctools import DOCS, LANGUAGES, notebook, notebook_formula_count, page_url_path, pages

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "screenshots"
# As the machine's own probe starts it: no sandbox as root, and no background traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
OTHER = {"it": "en", "en": "it"}


PAGES = [
    pytest.param(lang, rel, id=f"{lang}/{rel}")
    for lang in LANGUAGES
    for suffix in (".md", ".ipynb")
    for rel in (p.relative_to(DOCS / lang).as_posix() for p in pages(lang, suffix))
]


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail("Chromium not found: `make test` installs Debian's chromium package")
    from playwright.sync_api import sync_playwright

    shutil.rmtree(SCREENSHOTS, ignore_errors=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


class Visit:
    """A browser context that blocks and counts every request not to 127.0.0.1."""

    def __init__(self, browser):
        self.blocked: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on(
            "console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None
        )
        self.page.on("pageerror", lambda exc: self.errors.append(f"uncaught: {exc}"))
        self.page.on(
            "response",
            lambda r: self.errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
        )

    def _route(self, route):
        url = route.request.url
        if urlsplit(url).hostname == "127.0.0.1":
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser):
    v = Visit(browser)
    yield v
    v.close()


def wait_for_mathjax(page) -> bool:
    """Wait until MathJax has typeset the page; False if MathJax never started."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(
            "() => window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=15_000
        )
    except PlaywrightTimeout:
        return False
    page.evaluate("() => MathJax.startup.promise.then(() => true)")
    return True


@cache
def _ids(html_file: Path) -> frozenset[str]:
    text = html_file.read_text(encoding="utf-8")
    return frozenset(re.findall(r"""\bid=["']([^"']+)["']""", text))


def _target_file(site: Path, path: str) -> Path:
    rel = unquote(path).lstrip("/")
    target = site / rel
    if path.endswith("/") or target.is_dir():
        target = target / "index.html"
    return target


def broken_links(site: Path, base: str, hrefs: list[str]) -> list[str]:
    broken = []
    base_netloc = urlsplit(base).netloc
    for href in hrefs:
        parts = urlsplit(href)
        if parts.scheme not in ("http", "https") or parts.netloc != base_netloc:
            continue
        target = _target_file(site, parts.path)
        if not target.is_file():
            broken.append(f"{href}: no such file")
        elif parts.fragment and target.suffix == ".html":
            if unquote(parts.fragment) not in _ids(target):
                broken.append(f"{href}: no element with id {parts.fragment!r}")
    return broken


@pytest.mark.parametrize(("lang", "rel"), PAGES)
def test_page_in_the_browser(visit, site_url, built_site, lang, rel):
    page = visit.page
    url = site_url + page_url_path(lang, rel)
    response = page.goto(url, wait_until="load")
    assert response is not None and response.ok, f"{url}: HTTP {response and response.status}"
    mathjax_started = wait_for_mathjax(page)
    page.wait_for_load_state("networkidle")

    shot = SCREENSHOTS / lang / (rel.rsplit(".", 1)[0] + ".png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)

    # 1. Nothing leaves localhost, nothing goes wrong in the console.
    assert not visit.blocked, f"requests that left localhost: {visit.blocked}"
    assert not visit.errors, f"console errors: {visit.errors}"

    # 2. Every formula is typeset, and none is a TeX error.
    math = page.evaluate(
        """() => {
            const content = document.querySelector('.md-content') || document.body;
            const arith = [...content.querySelectorAll('.arithmatex')];
            return {
                arithmatex: arith.length,
                untypeset: arith.filter(el => !el.querySelector('mjx-container'))
                                .map(el => el.textContent.slice(0, 80)),
                notebookTypeset: content.querySelectorAll('.jp-Notebook mjx-container').length,
                errors: content.querySelectorAll('mjx-merror').length,
            };
        }"""
    )
    assert not math["untypeset"], (
        f"{len(math['untypeset'])} formulas left untypeset"
        f"{'' if mathjax_started else ' (MathJax never started)'}: {math['untypeset'][:5]}"
    )
    assert math["errors"] == 0, f"{math['errors']} formulas with TeX errors"
    source = DOCS / lang / rel
    if rel.endswith(".ipynb"):
        expected = notebook_formula_count(source)
        assert math["notebookTypeset"] >= expected, (
            f"notebook: {math['notebookTypeset']} formulas typeset, {expected} in the source"
        )

        # 3. A notebook page is rendered as a notebook.
        # One element per cell carries the cell's id (mkdocs-jupyter wraps code cells twice).
        cells = page.locator('.jp-Notebook .jp-Cell[id^="cell-id="]').count()
        assert cells == len(notebook(source)["cells"]), f"notebook rendered with {cells} cells"
        assert page.locator("a.notebook-download").count() == 1, "no download button"
    else:
        assert page.locator(".jp-Notebook").count() == 0

    # 4. Internal links and anchors resolve.
    hrefs = page.eval_on_selector_all("a[href]", "els => els.map(a => a.href)")
    broken = broken_links(built_site.path, site_url, hrefs)
    assert not broken, "broken internal links:\n" + "\n".join(broken)

    # 5. The language switcher lands on the same page in the other language.
    other = OTHER[lang]
    link = page.locator(f'a.md-select__link[hreflang="{other}"]')
    assert link.count() == 1, f"no language switch to {other}"
    with page.expect_navigation(wait_until="load"):
        link.evaluate("el => el.click()")
    expected_url = site_url + page_url_path(other, rel)
    assert page.url == expected_url, (
        f"switching to {other} landed on {page.url}, not {expected_url}"
    )
    assert not visit.blocked and not visit.errors, (visit.blocked, visit.errors)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_search_finds_the_languages_own_pages_with_formulas_as_text(visit, site_url, lang):
    page = visit.page
    page.goto(site_url + page_url_path(lang, "attention.md"), wait_until="load")
    box = page.locator("input.md-search__input")
    box.click()
    box.press_sequentially("softmax", delay=30)  # Material listens to key events
    results = page.locator(".md-search-result__item")
    results.first.wait_for(timeout=20_000)
    hrefs = page.eval_on_selector_all(".md-search-result__link", "els => els.map(a => a.href)")
    assert hrefs, "searching 'softmax' found nothing"
    other = [h for h in hrefs if ("/en/" in h) != (lang == "en")]
    assert not other, f"results of the other language on the {lang} pages: {other[:5]}"
    # the snippets show a formula as text (softmax(QK^⊤/√(d_k)) V), never its TeX source
    texts = page.eval_on_selector_all(".md-search-result__item", "els => els.map(e => e.innerText)")
    tex = [t[:120] for t in texts if re.search(r"\\\(|\\\[|\$\$|\\(?:frac|sqrt|text)\b", t)]
    assert not tex, tex
    assert not visit.blocked and not visit.errors, (visit.blocked, visit.errors)


def test_light_dark_toggle_switches_the_colour_scheme(visit, site_url):
    page = visit.page
    page.goto(site_url, wait_until="load")
    before = page.evaluate("() => document.body.getAttribute('data-md-color-scheme')")
    page.locator("form[data-md-component='palette'] label:visible").first.click()
    after = page.evaluate("() => document.body.getAttribute('data-md-color-scheme')")
    assert {before, after} == {"default", "slate"}, (before, after)
    assert not visit.blocked and not visit.errors, (visit.blocked, visit.errors)
