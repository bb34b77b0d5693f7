"""One search index per language, with the formulas written as text.

Material's search reads ``search/search_index.json`` under the page's ``base`` (the ``__config``
JSON of every page). mkdocs-static-i18n builds the languages one after the other and leaves a
single index of both at the site's root, which every page reads: on the English pages the Italian
ones came first. And the text of an entry is the page's HTML, where a formula is its TeX source
(``\\(\\frac{QK^\\top}{\\sqrt{d_k}}\\)``), which MathJax never typesets in a result.

This hook, once every language is built:

- splits that index into one per language: the default language's at the root, each other's in
  its own folder (``en/search/search_index.json``), with the locations relative to that folder
  and the language's own stemmer and stop words (``config.lang``);
- points the ``base`` of a page in another language at its folder (``../../en/``), so that its
  search reads its own index and opens results in its own folder (nothing else on these pages
  reads ``base``: instant navigation and the version selector are off);
- writes every formula of a title or a text as plain text with pylatexenc (``softmax(QK^⊤/√(d_k))
  V``).

mkdocs.yml sets i18n's ``reconfigure_search: false``: its deduplication would drop an English
entry whose text is the Italian one (the API reference, whose docstrings are in English).
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from pathlib import Path

from mkdocs.plugins import event_priority

INDEX = Path("search") / "search_index.json"
# A formula as pymdownx.arithmatex (generic) writes it, inline or as a block, HTML-escaped; and as
# a notebook's Markdown keeps it ($...$, $$...$$), outside code.
FORMULA = re.compile(
    r"\\\((?P<inline>.+?)\\\)|\\\[(?P<block>.+?)\\\]"
    r"|\$\$(?P<dollars>.+?)\$\$|(?<![\w$])\$(?P<dollar>[^$\n]+?)\$(?![\w$])",
    re.S,
)
CODE = re.compile(r"(<pre\b.*?</pre>|<code\b.*?</code>)", re.S)
CONFIG = re.compile(
    r'(<script id="__config" type="application/json">)(?P<json>.*?)(</script>)', re.S
)


@cache
def _converter():
    from pylatexenc.latex2text import LatexNodes2Text

    return LatexNodes2Text(math_mode="text", strict_latex_spaces=False)


def formula_text(tex: str) -> str:
    """A formula's TeX source as plain text: ``\\frac{a}{\\sqrt{d}}`` -> ``a/√(d)``."""
    text = _converter().latex_to_text(tex)
    return re.sub(r"\s+", " ", text).strip()


def formulas_as_text(fragment: str) -> str:
    """An HTML fragment of the index with each formula outside code as text: ``\\(...\\)``,
    ``\\[...\\]``, ``$$...$$`` and ``$...$``."""

    def replace(m: re.Match) -> str:
        tex = next(g for g in m.groups() if g is not None)
        return html.escape(formula_text(html.unescape(tex)), quote=False)

    parts = CODE.split(fragment)  # code at the odd indices: left as it is
    return "".join(p if i % 2 else FORMULA.sub(replace, p) for i, p in enumerate(parts))


def split_index(index: dict, default: str, others: list[str]) -> dict[str, dict]:
    """The index of every language (language -> index), from the index of them all.

    An entry whose location starts with ``<lang>/`` is that language's, its location made
    relative to that folder; every other entry is the default language's.
    """
    docs = {lang: [] for lang in (default, *others)}
    for doc in index["docs"]:
        lang = next((lang for lang in others if doc["location"].startswith(f"{lang}/")), default)
        location = doc["location"][len(lang) + 1 :] if lang != default else doc["location"]
        entry = {**doc, "location": location}
        for key in ("title", "text"):
            if isinstance(entry.get(key), str):
                entry[key] = formulas_as_text(entry[key])
        docs[lang].append(entry)
    return {lang: {**index, "config": {**index["config"], "lang": [lang]}, "docs": entries}
            for lang, entries in docs.items()}  # fmt: skip


def _languages(config) -> tuple[str, list[str]] | None:
    i18n = config.plugins.get("i18n")
    if i18n is None:
        return None
    return i18n.default_language, [
        lang for lang in i18n.all_languages if lang != i18n.default_language
    ]


def on_post_page(output, page, config):  # noqa: ARG001 - MkDocs hook signature
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None)
    if i18n is None or lang == i18n.default_language:
        return output

    def rebase(m: re.Match) -> str:
        data = json.loads(m["json"])
        data["base"] = f"{data['base'].rstrip('/')}/{lang}/"
        return m[1] + json.dumps(data, ensure_ascii=False) + m[3]

    return CONFIG.sub(rebase, output, count=1)


# After mkdocs-static-i18n (-100) has built the other languages and written the merged index.
@event_priority(-200)
def on_post_build(config):
    i18n = config.plugins.get("i18n")
    if i18n is None or i18n.building:  # an inner, per-language build: wait for the outer one
        return
    site = Path(config["site_dir"])
    merged = site / INDEX
    if not merged.is_file():
        return
    default = i18n.default_language
    others = [lang for lang in i18n.all_languages if lang != default]
    indexes = split_index(json.loads(merged.read_text(encoding="utf-8")), default, others)
    for lang, index in indexes.items():
        path = site / INDEX if lang == default else site / lang / INDEX
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(index, ensure_ascii=False, separators=(",", ":")), "utf-8")
