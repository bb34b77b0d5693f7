"""The two languages mirror each other, page for page.

Every page and notebook exists in both languages, with the same heading structure, identical
formulas, the same admonitions, the same figures, and code blocks identical apart from comments.
"""

from __future__ import annotations

import difflib

import pytest

from doctools import (
    DOCS,
    LANGUAGES,
    notebook_structure,
    read_page,
    relative_names,
    structure,
)

IT, EN = LANGUAGES


@pytest.mark.parametrize("suffix", [".md", ".ipynb"])
def test_every_page_exists_in_both_languages(suffix):
    it, en = set(relative_names(IT, suffix)), set(relative_names(EN, suffix))
    assert it, f"no {suffix} page found"
    assert not it - en, f"missing in English (docs/en/): {sorted(it - en)}"
    assert not en - it, f"missing in Italian (docs/it/): {sorted(en - it)}"


def _diff(a, b) -> str:
    return "\n".join(
        difflib.unified_diff([repr(x) for x in a], [repr(x) for x in b], IT, EN, lineterm="")
    )


def _common(suffix):
    return sorted(set(relative_names(IT, suffix)) & set(relative_names(EN, suffix)))


@pytest.mark.parametrize("name", _common(".md"))
def test_page_mirrors_its_translation(name):
    it = structure(read_page(DOCS / IT / name))
    en = structure(read_page(DOCS / EN / name))
    for part in (
        "headings",
        "formulas",
        "admonitions",
        "figures",
        "code",
        "inline_code",
        "list_items",
    ):
        a, b = getattr(it, part), getattr(en, part)
        assert a == b, f"{name}: {part} differ between the languages\n{_diff(a, b)}"


@pytest.mark.parametrize("name", _common(".ipynb"))
def test_notebook_mirrors_its_translation(name):
    it = notebook_structure(DOCS / IT / name)
    en = notebook_structure(DOCS / EN / name)
    assert it == en, f"{name}: cells differ between the languages\n{_diff(it, en)}"
