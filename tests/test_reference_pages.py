"""The API reference: one page per public module in each language, and the chapters link to it.

The reference pages (``docs/<lang>/reference/<module>.md``) are rendered by mkdocstrings from the
docstrings; ``hooks/api_links.py`` links a chapter's first mention of each public name to its
entry. These tests read the pages' sources and the built site (``built_site``, built once per
session); ``test_browser.py`` then follows every link of every page, these included.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

import pytest

import transformer_np

from doctools import DOCS, LANGUAGES, load_hook, mkdocs_config, page_url_path, pages

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = "reference"
# Not part of the API: the demos (python -m transformer_np.examples.*).
NOT_API = {"examples"}


HOOK = load_hook("api_links.py")


def public_modules() -> list[str]:
    """Every public module or subpackage of transformer_np (no ``_`` name), by short name."""
    return sorted(
        m.name
        for m in pkgutil.iter_modules(transformer_np.__path__)
        if not m.name.startswith("_") and m.name not in NOT_API
    )


MODULES = public_modules()


def _html(site: Path, lang: str, rel: str) -> str:
    return (site / page_url_path(lang, rel) / "index.html").read_text(encoding="utf-8")


@cache
def _ids(html_file: Path) -> frozenset[str]:
    return frozenset(re.findall(r"""\bid=["']([^"']+)["']""", html_file.read_text("utf-8")))


def _chapters(lang: str) -> list[str]:
    """The pages that are not reference pages, relative to docs/<lang>/."""
    return [
        p.relative_to(DOCS / lang).as_posix()
        for p in pages(lang)
        if p.relative_to(DOCS / lang).parts[0] != REFERENCE
    ]


def _nav_pages(nav) -> list[str]:
    found = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            found += _nav_pages(value)
        else:
            found.append(value)
    return found


def _documented_modules() -> list[str]:
    return [f"transformer_np.{m}" for m in MODULES]


# --------------------------------------------------------------------------------------------
# The pages


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_public_module_has_a_reference_page(lang):
    folder = DOCS / lang / REFERENCE
    have = sorted(p.stem for p in folder.glob("*.md"))
    assert have == MODULES, f"docs/{lang}/reference/: pages {have}, public modules {MODULES}"
    for module in MODULES:
        text = (folder / f"{module}.md").read_text(encoding="utf-8")
        assert re.search(rf"^::: transformer_np\.{module}\s*$", text, re.M), (
            f"docs/{lang}/reference/{module}.md does not render transformer_np.{module}"
        )
    in_nav = [p for p in _nav_pages(mkdocs_config()["nav"]) if p.startswith(f"{REFERENCE}/")]
    assert sorted(in_nav) == [f"{REFERENCE}/{m}.md" for m in MODULES]


def test_the_italian_reference_pages_say_the_docstrings_are_in_english():
    for module in MODULES:
        text = (DOCS / "it" / REFERENCE / f"{module}.md").read_text(encoding="utf-8")
        assert "docstring" in text and "in inglese" in text, f"it/reference/{module}.md"


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("module", MODULES)
def test_reference_page_documents_the_public_names_and_no_private_one(built_site, lang, module):
    html_file = built_site.path / page_url_path(lang, f"{REFERENCE}/{module}.md") / "index.html"
    assert html_file.is_file(), f"{lang}/reference/{module}: not built"
    ids = _ids(html_file)
    html = html_file.read_text(encoding="utf-8")
    public = importlib.import_module(f"transformer_np.{module}").__all__
    missing = [n for n in public if f"transformer_np.{module}.{n}" not in ids]
    assert not missing, f"{lang}/reference/{module}: no entry for {missing}"
    documented = [i for i in ids if i.startswith("transformer_np.")]
    private = [i for i in documented if re.search(r"\._(?!_)", i)]
    assert not private, f"{lang}/reference/{module} documents private names: {private}"
    assert "_kernels" not in " ".join(documented)
    # reST markup of the docstrings is rendered (hooks/griffe_sphinx_markup.py), not shown raw
    raw = re.findall(r":(?:func|class|meth|mod|data|attr|exc|obj|math):`|\.\. math::", html)
    assert not raw, f"{lang}/reference/{module} shows reST markup raw: {raw[:5]}"


def test_every_public_name_of_the_package_has_a_reference_entry():
    targets = HOOK.targets(_documented_modules())
    names = set(transformer_np.__all__) | set(importlib.import_module(HOOK.PACKAGES[1]).__all__)
    assert not names - set(targets), f"no reference page documents {sorted(names - set(targets))}"


# --------------------------------------------------------------------------------------------
# The links from the chapters


def _api_links(html: str, page_url: str) -> dict[str, str]:
    """Reference-entry id -> absolute URL, for every autorefs link of a built page."""
    out = {}
    for m in re.finditer(r'<a class="autorefs autorefs-internal"[^>]*\bhref="([^"]+)"', html):
        url = urljoin(page_url, m[1])
        out.setdefault(unquote(urlsplit(url).fragment), url)
    return out


@pytest.mark.parametrize("lang", LANGUAGES)
def test_chapters_link_the_first_mention_of_public_names_to_the_reference(built_site, lang):
    targets = HOOK.targets(_documented_modules())
    base = "http://site.invalid/"
    linked_pages = 0
    for rel in _chapters(lang):
        source = (DOCS / lang / rel).read_text(encoding="utf-8")
        _, expected = HOOK.link_first_mentions(source, targets)
        if not expected:
            continue
        page_url = base + page_url_path(lang, rel)
        links = _api_links(_html(built_site.path, lang, rel), page_url)
        missing = [n for n in expected if targets[n] not in links]
        assert not missing, f"{lang}/{rel}: the first mention of {missing} is not linked"
        linked_pages += 1
        for name in expected:
            url = urlsplit(links[targets[name]])
            module = targets[name].rsplit(".", 1)[0].split(".", 1)[1]
            assert url.path == "/" + page_url_path(lang, f"{REFERENCE}/{module}.md"), (
                f"{lang}/{rel}: {name} links to {url.path}, not the {lang} reference page"
            )
            html_file = built_site.path / url.path.lstrip("/") / "index.html"
            assert targets[name] in _ids(html_file), f"{lang}/{rel}: {name}: no such anchor"
    assert linked_pages >= 5, f"only {linked_pages} {lang} pages link to the reference"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_api_link_of_the_site_resolves_in_its_own_language(built_site, lang):
    base = "http://site.invalid/"
    broken = []
    for path in pages(lang):
        rel = path.relative_to(DOCS / lang).as_posix()
        page_url = base + page_url_path(lang, rel)
        for ident, url in _api_links(_html(built_site.path, lang, rel), page_url).items():
            target = urlsplit(url).path.lstrip("/")
            in_language = target.startswith("en/") == (lang == "en")
            html_file = built_site.path / target / "index.html"
            if not in_language or not html_file.is_file() or ident not in _ids(html_file):
                broken.append(f"{lang}/{rel}: {ident} -> {url}")
    assert not broken, "\n".join(broken)


def test_the_notebooks_made_from_the_pages_get_the_text_without_reference_links(built_site):
    # The links are made after the other hooks have read the page (chapter_notebooks.py).
    for nb in built_site.path.rglob("*.ipynb"):
        text = nb.read_text(encoding="utf-8")
        assert "][transformer_np." not in text, f"{nb}: an API link in the notebook"


# --------------------------------------------------------------------------------------------
# The hook itself

TARGETS = {
    "softmax": "transformer_np.functional.softmax",
    "Linear": "transformer_np.layers.Linear",
}


def test_hook_links_only_the_first_mention():
    text = "The `softmax` normalises; `softmax(x)` again."
    out, linked = HOOK.link_first_mentions(text, TARGETS)
    assert (
        out == "The [`softmax`][transformer_np.functional.softmax] normalises; `softmax(x)` again."
    )
    assert linked == ["softmax"]


def test_hook_links_a_call_with_arguments():
    out, _ = HOOK.link_first_mentions("Call `Linear(4, 8)`.", TARGETS)
    assert out == "Call [`Linear(4, 8)`][transformer_np.layers.Linear]."


@pytest.mark.parametrize(
    "text",
    [
        "```python\nx = `softmax`\n```",
        "    ```python\n    `softmax`\n    ```",
        "## The `softmax`",
        '!!! note "`softmax`"',
        '=== "`softmax`"',
        "see [`softmax`](functional.md)",
        "see [the `softmax` page][ref]",
        "``softmax``",
        "`x.softmax(1)`",
        "`softmax_like`",
        "`np.softmax`",
    ],
)
def test_hook_leaves_code_headings_titles_links_and_other_names_alone(text):
    out, linked = HOOK.link_first_mentions(text, TARGETS)
    assert out == text and not linked


def test_hook_skips_a_heading_and_links_the_next_mention():
    text = "## `softmax`\n\nUse `softmax`."
    out, _ = HOOK.link_first_mentions(text, TARGETS)
    assert out == "## `softmax`\n\nUse [`softmax`][transformer_np.functional.softmax]."
