"""Links between pages: every target exists, every #anchor lands on a heading or an entry.

The pages link a term's first use to its glossary entry (``glossary.md#<id>``) and a chapter to
another chapter's section (``page.md#<heading-id>``). MkDocs (``--strict``) reports a missing
page, but not a missing anchor: a renamed heading or a removed glossary entry would leave a link
that opens the right page at the top, silently. So, for every page of both languages:

* every relative link points to a page that exists, and its ``#anchor`` is an id of that page:
  a heading's id (made by the site's own Markdown extensions, as MkDocs makes it), an explicit
  ``{#id}``, or a glossary entry's ``<span id>``;
* the two glossaries have the same entries, with the same ids, in the same order.

The last section shows the checker made-up pages with one fault each: it must report them.
"""

from __future__ import annotations

import functools
import re

import markdown
import pytest

from doctools import DOCS, LANGUAGES, ROOT, mkdocs_config, outside_fences, pages

# [text](target) or ![alt](target), the target without a title; code spans are cut out first.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"`[^`\n]+`")
ID = re.compile(r"""\bid=["']([^"']+)["']""")
ENTRY_ID = re.compile(r'<span id="([^"]+)"></span>')


@functools.cache
def renderer() -> markdown.Markdown:
    """The site's Markdown, with its extensions and their settings (snippets read from ROOT)."""
    extensions, configs = [], {}
    for item in mkdocs_config()["markdown_extensions"]:
        name, config = next(iter(item.items())) if isinstance(item, dict) else (item, {})
        if name == "pymdownx.snippets":
            config = {**config, "base_path": [str(ROOT)]}
        extensions.append(name)
        configs[name] = config
    return markdown.Markdown(extensions=extensions, extension_configs=configs)


def anchors_of(text: str) -> set[str]:
    """Every id a page's HTML holds: headings (the toc's ids), {#id} and <span id>."""
    md = renderer()
    md.reset()
    return set(ID.findall(md.convert(text)))


@functools.cache
def page_anchors(path) -> frozenset[str]:
    return frozenset(anchors_of(path.read_text(encoding="utf-8")))


def links(text: str) -> list[tuple[int, str]]:
    """``(line, target)`` of every link outside code, relative ones only."""
    prose = CODE_SPAN.sub(lambda m: " " * len(m[0]), outside_fences(text))
    found = []
    for m in LINK.finditer(prose):
        target = m[1]
        if re.match(r"[a-z]+:", target) or target.startswith("/"):
            continue  # https:, mailto:, a site-absolute path: not a page of docs/
        found.append((prose.count("\n", 0, m.start()) + 1, target))
    return found


def broken_links(page, text: str, anchors_in) -> list[str]:
    """The links of ``text`` (the page at ``page``) whose page or anchor does not exist.

    ``anchors_in(path)`` gives the ids of the page at ``path`` (the page itself for ``#x``).
    """
    problems = []
    for line, target in links(text):
        file, _, anchor = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        if file and not (path.exists() or drawn_at_build(path)):
            problems.append(f"{page.name}:{line}: {target}: no such page")
        elif anchor and path.suffix == ".md" and anchor not in anchors_in(path):
            problems.append(f"{page.name}:{line}: {target}: no id {anchor!r} in {path.name}")
    return problems


def drawn_at_build(path) -> bool:
    """A figure ``docs/<lang>/figures/<name>.svg``, drawn by ``figures/<name>.py`` when the
    site is built (hooks/figures.py)."""
    return (
        path.suffix == ".svg"
        and path.parent.name == "figures"
        and (ROOT / "figures" / f"{path.stem}.py").exists()
    )


def glossary_ids(lang: str) -> list[str]:
    return ENTRY_ID.findall((DOCS / lang / "glossary.md").read_text(encoding="utf-8"))


# ============================================================================================
# the pages
# ============================================================================================


def _all_pages():
    return [
        pytest.param(lang, path, id=f"{lang}/{path.relative_to(DOCS / lang)}")
        for lang in LANGUAGES
        for path in pages(lang)
    ]


@pytest.mark.parametrize(("lang", "path"), _all_pages())
def test_every_link_lands_on_a_page_and_an_id_that_exist(lang, path):
    text = path.read_text(encoding="utf-8")
    problems = broken_links(path, text, page_anchors)
    assert not problems, "\n".join(problems)


def test_the_two_glossaries_have_the_same_entries_in_the_same_order():
    it, en = (glossary_ids(lang) for lang in LANGUAGES)
    assert len(it) > 100, f"the glossary has {len(it)} entries"
    assert len(set(it)) == len(it), "an entry id is used twice"
    assert it == en, f"entries differ: {sorted(set(it) ^ set(en)) or 'same ids, other order'}"


def test_pages_link_terms_to_the_glossary():
    # The glossary is where a learner looks a term up: the course pages point to it.
    for lang in LANGUAGES:
        used = {
            target.partition("#")[2]
            for path in pages(lang)
            for _, target in links(path.read_text(encoding="utf-8"))
            if target.startswith("glossary.md#")
        }
        assert len(used) > 80, f"{lang}: only {len(used)} glossary entries are linked"


# ============================================================================================
# the checker finds faults
# ============================================================================================

PAGE = DOCS / "it" / "made-up.md"
FAKE_PAGES = {
    DOCS / "it" / "glossary.md": {"token", "logit"},
    DOCS / "it" / "attention.md": {"maschera-causale"},
}


def fake_anchors(path):
    return FAKE_PAGES.get(path, anchors_of("# Titolo\n\n## Una sezione\n"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Un [logit](glossary.md#logits).", "no id 'logits' in glossary.md"),
        ("La [maschera](attention.md#maschera).", "no id 'maschera' in attention.md"),
        ("Il [capitolo](attenzione.md).", "attenzione.md: no such page"),
        ("![figura](figures/non_esiste.svg)", "figures/non_esiste.svg: no such page"),
        ("Sopra, [qui](#un-altra-sezione).", "no id 'un-altra-sezione' in made-up.md"),
    ],
)
def test_a_broken_link_is_reported(text, expected):
    problems = broken_links(PAGE, text, fake_anchors)
    assert len(problems) == 1 and expected in problems[0], problems


def test_sound_links_and_links_inside_code_are_not_reported():
    text = (
        "Un [logit](glossary.md#logit), la [maschera](attention.md#maschera-causale), "
        "[qui](#una-sezione), [fuori](https://arxiv.org/abs/1706.03762).\n\n"
        "![una figura disegnata dal sito](figures/attention_masks.svg)\n\n"
        "`[non un link](glossary.md#niente)`\n\n```python\nx = '[a](b.md#c)'\n```\n"
    )
    assert broken_links(PAGE, text, fake_anchors) == []


def test_heading_ids_are_the_sites():
    # MkDocs' toc: accents dropped, apostrophes removed, spaces to hyphens; {#id} wins
    ids = anchors_of("## L'attention è tutto\n\n## Training {#section-training}\n")
    assert {"lattention-e-tutto", "section-training"} <= ids
