"""The site builds with ``mkdocs build --strict``, without a warning, and its output is sound.

These checks read the built files; ``test_browser.py`` then opens every page in Chromium.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile

import nbformat
import pytest

from doctools import (
    DOCS,
    LANGUAGES,
    ROOT,
    load_hook,
    notebook,
    page_url_path,
    pages,
    python_blocks,
    read_page,
    relative_names,
)

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


# --------------------------------------------------------------------------------------------
# Search (hooks/search_index.py): one index per language, formulas as text

TEX = re.compile(r"\\\(|\\\[|\$\$|\\(?:frac|sqrt|text|cdot|mathbb)\b")
CODE = re.compile(r"<pre\b.*?</pre>|<code\b.*?</code>", re.S)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_each_language_searches_its_own_pages_with_formulas_as_text(built_site, lang):
    root = page_url_path(lang, "index.md")  # "" or "en/"
    index = json.loads((built_site.path / root / "search" / "search_index.json").read_text())
    assert index["config"]["lang"] == [lang]
    indexed = {doc["location"].split("#")[0] for doc in index["docs"]}
    own = {page_url_path(lang, rel)[len(root) :] for suffix in (".md", ".ipynb")
           for rel in relative_names(lang, suffix)}  # fmt: skip
    assert indexed == own, (sorted(indexed - own)[:5], sorted(own - indexed)[:5])
    tex = [f"{doc['location']}: {m[0]}" for doc in index["docs"]
           for m in TEX.finditer(CODE.sub("", doc["title"] + " " + doc["text"]))]  # fmt: skip
    assert not tex, tex[:10]
    # the pages of the language read that index: their base is the language's folder
    html = (built_site.path / page_url_path(lang, "setup.md") / "index.html").read_text("utf-8")
    config = json.loads(re.search(r'id="__config" type="application/json">(.*?)</script>', html)[1])
    assert config["base"] == {"it": "..", "en": "../../en/"}[lang]


# --------------------------------------------------------------------------------------------
# The chapter notebooks (hooks/chapter_notebooks.py)


chapter_hook = load_hook("chapter_notebooks.py")
CHAPTER_BUTTON = re.compile(
    r'<a class="md-button chapter-notebook-download" href="(?P<href>[^"]+)" '
    r'download="(?P<download>[^"]+)"[^>]*>(?P<body>.*?)</a>',
    re.S,
)


def _chapters(lang):
    return [rel for rel in relative_names(lang) if chapter_hook.is_chapter(rel)]


def _not_chapters(lang):
    return [
        rel
        for suffix in (".md", ".ipynb")
        for rel in relative_names(lang, suffix)
        if not chapter_hook.is_chapter(rel)
    ]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_chapter_has_its_notebook_next_to_its_page(built_site, site_port, lang):
    assert _chapters(lang), f"no chapter in {lang}"
    for rel in _chapters(lang):
        html = _html_path(built_site.path, lang, rel)
        nb_file = html.parent / chapter_hook.notebook_name(rel)
        assert nb_file.is_file(), f"{lang}/{rel}: no notebook at {nb_file}"
        nbformat.validate(nbformat.read(nb_file, as_version=4))
        # The build wrote what page_to_notebook makes of the page (tests/test_notebooks.py
        # checks its cells and runs it), for the address the site is built for.
        page = DOCS / lang / rel
        made = chapter_hook.page_to_notebook(
            page.read_text(encoding="utf-8"), page, site_url=f"http://127.0.0.1:{site_port}/"
        )
        assert nb_file.read_text(encoding="utf-8") == chapter_hook.notebook_json(made), (
            f"{lang}/{rel}: the built notebook is not the page's"
        )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_chapter_page_has_a_button_to_download_its_notebook(built_site, lang):
    label = chapter_hook.BUTTON_LABEL[lang]
    for rel in _chapters(lang):
        html_file = _html_path(built_site.path, lang, rel)
        html = html_file.read_text(encoding="utf-8")
        buttons = list(CHAPTER_BUTTON.finditer(html))
        assert len(buttons) == 1, f"{lang}/{rel}: {len(buttons)} notebook buttons"
        button = buttons[0]
        name = chapter_hook.notebook_name(rel)
        assert button["href"] == name and button["download"] == name, button.group(0)[:300]
        assert label in button["body"], f"{lang}/{rel}: the button does not say {label!r}"
        assert (html_file.parent / button["href"]).is_file()
        # At the top: right under the page's title, before its first section.
        h1_end, h2 = html.find("</h1>"), html.find("<h2")
        assert 0 <= h1_end < button.start() and (h2 < 0 or button.start() < h2), (
            f"{lang}/{rel}: the button is not at the top of the page"
        )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_pages_that_are_not_chapters_have_no_notebook_button(built_site, lang):
    others = _not_chapters(lang)
    assert {"index.md", "setup.md", "glossary.md"} <= set(others)
    for rel in others:
        html_file = _html_path(built_site.path, lang, rel)
        html = html_file.read_text(encoding="utf-8")
        assert "chapter-notebook-download" not in html, f"{lang}/{rel} has a notebook button"
        if rel.endswith(".md"):
            # (a notebook page has its own .ipynb next to it, from mkdocs-jupyter)
            stray = sorted(p.name for p in html_file.parent.glob("*.ipynb"))
            assert not stray, f"{lang}/{rel}: notebooks next to it: {stray}"


# --------------------------------------------------------------------------------------------
# The package from the site: `make site` puts the wheel and the sdist in site/downloads/, the
# setup page gives the pip line (hooks/downloads.py), and the blocks that read saved results
# find them in the package data of the wheel, outside the repository.

PACKAGE_DATA_READ = 'files("transformer_np")'


def _downloads_hook():
    return load_hook("downloads.py")


@pytest.mark.parametrize("lang", LANGUAGES)
def test_setup_page_gives_the_pip_line_for_the_wheel_on_the_site(built_site, site_port, lang):
    html = (built_site.path / page_url_path(lang, "setup.md") / "index.html").read_text("utf-8")
    wheel, sdist = _downloads_hook().download_names()
    url = f"http://127.0.0.1:{site_port}/downloads/{wheel}"
    text = re.sub(r"<[^>]+>", "", html)  # the code as the reader sees it, without highlighting
    assert f"pip install {url}\n" in text, f"{lang}/setup: no `pip install {url}`"
    assert f"http://127.0.0.1:{site_port}/downloads/{sdist}" in html
    assert "{{" not in html, f"{lang}/setup: a placeholder was left unfilled"
    repo = os.environ.get("REPO_URL", "")
    assert ("git clone" in html) == bool(repo), f"{lang}/setup: repository block, REPO_URL={repo!r}"


def test_the_site_holds_the_wheel_and_the_sdist_the_setup_page_gives(built_site, dists):
    for name in _downloads_hook().download_names():
        served = built_site.path / "downloads" / name
        assert served.is_file(), f"{name} is not in the site's downloads/"
    wheel = _downloads_hook().download_names()[0]
    served = zipfile.ZipFile(built_site.path / "downloads" / wheel).namelist()
    assert sorted(served) == sorted(zipfile.ZipFile(dists / wheel).namelist())


def test_setup_wheel_and_sdist_are_the_files_python_m_build_makes(dists):
    wheel, sdist = _downloads_hook().download_names()
    assert sorted(p.name for p in dists.iterdir()) == sorted([wheel, sdist])
    names = zipfile.ZipFile(dists / wheel).namelist()
    for data in (ROOT / "src" / "transformer_np" / "data").glob("*"):
        if data.suffix in (".json", ".npz"):
            assert f"transformer_np/data/{data.name}" in names, f"{data.name} not in the wheel"
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "docs/"))]


def _blocks_reading_package_data():
    found = []
    for lang in LANGUAGES:
        for path in pages(lang):
            for block in python_blocks(read_page(path)):
                if PACKAGE_DATA_READ in block.code:
                    rel = path.relative_to(DOCS / lang).as_posix()
                    found.append(pytest.param(block, id=f"{lang}/{rel}:{block.line}"))
    return found


@pytest.mark.parametrize("block", _blocks_reading_package_data())
def test_block_reading_saved_results_runs_from_the_installed_wheel(block, dists, tmp_path):
    wheel, _ = _downloads_hook().download_names()
    installed = tmp_path / "site-packages"
    zipfile.ZipFile(dists / wheel).extractall(installed)
    elsewhere = tmp_path / "reader"  # not the repository: nothing to find there
    elsewhere.mkdir()
    check = (
        "import transformer_np\n"
        f"assert transformer_np.__file__.startswith({str(installed)!r}), transformer_np.__file__\n"
    )
    env = {**os.environ, "PYTHONPATH": str(installed), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", check + block.code],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if block.expected_output is not None:
        shown = [ln.rstrip() for ln in block.expected_output.strip("\n").split("\n")]
        assert [ln.rstrip() for ln in proc.stdout.strip("\n").split("\n")] == shown


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_chapter_notebooks_links_land_on_the_site(built_site, site_port, lang):
    # The notebook's links and figures point into the site: each must be there, anchor included.
    base = f"http://127.0.0.1:{site_port}/"
    broken = []
    for rel in _chapters(lang):
        nb_file = _html_path(built_site.path, lang, rel).parent / chapter_hook.notebook_name(rel)
        for target in re.findall(r"\]\((" + re.escape(base) + r"[^)\s]*)\)", nb_file.read_text()):
            path, _, anchor = target[len(base) :].partition("#")
            file = built_site.path / path
            if path == "" or path.endswith("/"):
                file = file / "index.html"
            if not file.is_file():
                broken.append(f"{lang}/{rel}: {target}: no such file")
            elif anchor and f'id="{anchor}"' not in file.read_text(encoding="utf-8"):
                broken.append(f"{lang}/{rel}: {target}: no element with id {anchor!r}")
    assert not broken, "\n".join(broken)
