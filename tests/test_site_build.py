"""The site builds with ``mkdocs build --strict``, without a warning, and its output is sound.

These checks read the built files; ``test_browser.py`` then opens every page in Chromium.
"""

from __future__ import annotations

import re

import pytest

from doctools import DOCS, LANGUAGES, notebook, page_url_path, pages

# A tag that makes the browser fetch its src/href (a canonical or alternate <link> fetches nothing).
EXTERNAL_ASSET = re.compile(
    r"""<(?:script|link|img|iframe|source|video|audio|embed)\b[^>]*"""
    r"""\b(?:src|href|srcset)=["'](?:https?:)?//[^>]*>""",
    re.I,
)
NOT_FETCHED = re.compile(r"""\brel=["'](?:canonical|alternate)["']""", re.I)


def _html_path(site, lang, rel):
    """Where the page docs/<lang>/<rel> lands in the built site."""
    return site / page_url_path(lang, rel) / "index.html"


def test_strict_build_succeeds_without_warnings(built_site):
    assert built_site.returncode == 0, built_site.log[-5000:]
    warnings = [ln for ln in built_site.log.splitlines() if re.match(r"^\s*(WARNING|ERROR)\b", ln)]
    assert not warnings, "\n".join(warnings)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_page_is_built(built_site, lang):
    for suffix in (".md", ".ipynb"):
        for path in pages(lang, suffix):
            rel = path.relative_to(DOCS / lang).as_posix()
            html = _html_path(built_site.path, lang, rel)
            assert html.is_file(), f"docs/{lang}/{rel} was not built to {html}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_notebooks_are_rendered_as_notebooks_not_json(built_site, lang):
    # mkdocs-static-i18n issue #198: notebooks silently become raw JSON pages.
    for path in pages(lang, ".ipynb"):
        rel = path.relative_to(DOCS / lang).as_posix()
        html = _html_path(built_site.path, lang, rel).read_text(encoding="utf-8")
        assert "jp-Notebook" in html, f"{lang}/{rel} is not rendered as a notebook"
        assert '"nbformat"' not in html, f"{lang}/{rel} shows the notebook's raw JSON"
        n_cells = len(notebook(path)["cells"])
        assert html.count('id="cell-id=') == n_cells, f"{lang}/{rel}: cells missing"
        assert 'class="md-content__button md-icon notebook-download"' in html, (
            f"{lang}/{rel}: no download button"
        )
        name = path.name
        assert (_html_path(built_site.path, lang, rel).parent / name).is_file(), (
            f"{lang}/{rel}: the notebook file to download is missing"
        )


def test_mathjax_is_served_by_the_site(built_site):
    assert (built_site.path / "assets" / "mathjax" / "tex-chtml.js").is_file()
    assert (built_site.path / "javascripts" / "mathjax-config.js").is_file()
    fonts = built_site.path / "assets" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert any(fonts.glob("*.woff")), "MathJax fonts were not copied"


def test_no_page_loads_anything_from_the_network(built_site):
    offenders = []
    for html in built_site.path.rglob("*.html"):
        for m in EXTERNAL_ASSET.finditer(html.read_text(encoding="utf-8")):
            if NOT_FETCHED.search(m.group(0)):
                continue
            offenders.append(f"{html.relative_to(built_site.path)}: {m.group(0)}")
    assert not offenders, "\n".join(offenders[:20])
