"""The course: one path from the home page to the last chapter, told in the subject's words.

The course is the nav of mkdocs.yml, in its order, without the pages outside it: the glossary,
the results page (benchmarks.md), the notebooks and the API reference. For both languages:

* the path on the home page ("Il percorso" / "The path" in index.md) lists the course in the
  nav's order, and "Cosa imparerai" / "What you will learn" lists its chapters in that order;
* every page of the course from setup.md on ends with one line, ``**Prossimo capitolo:**
  [title](next.md)`` / ``**Next chapter:** [title](next.md)``, that points to the next page of
  the course (the last page has none); any other sentence that speaks of the next or the
  previous chapter links to that page, and to no other page;
* the lessons speak of the subject, not of the project: none of the words in ``FORBIDDEN``
  appears in a course page (code blocks and the code they include too), and the setup page,
  which is for learners, has none of the contributor's tooling (``SETUP_FORBIDDEN``).

The README, the front door, keeps an example that runs, a picture that GitHub can show and the
test command that CI runs. The last section shows each detector a made-up page with one fault:
it must report it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from doctools import (
    DOCS,
    LANGUAGES,
    ROOT,
    expand_snippets,
    fences,
    mkdocs_config,
    normalise_output,
    outside_fences,
    run_block,
)

# Pages of the nav that are not part of the course.
OUTSIDE_COURSE = frozenset({"glossary.md", "benchmarks.md"})
OUTSIDE_COURSE_FOLDERS = ("reference/", "notebooks/")
HOME, SETUP = "index.md", "setup.md"

PATH_HEADING = {"it": "Il percorso", "en": "The path"}
LEARN_HEADING = {"it": "Cosa imparerai", "en": "What you will learn"}
NEXT_LINE = {"it": "**Prossimo capitolo:**", "en": "**Next chapter:**"}
# Sentences about the next or the previous chapter (singular: "i capitoli precedenti" is fine).
SPEAKS_OF = {
    "next": {
        "it": re.compile(
            r"\bprossimo capitolo\b|\bcapitolo (?:successivo|seguente|che segue)\b", re.I
        ),
        "en": re.compile(r"\bnext chapter\b|\bfollowing chapter\b|\bchapter that follows\b", re.I),
    },
    "previous": {
        "it": re.compile(r"\bcapitolo precedente\b", re.I),
        "en": re.compile(r"\bprevious chapter\b", re.I),
    },
}

# Words about the project, not the subject: never in a course page (the brief of issue 24).
# One regular expression per word, case-insensitive; word boundaries keep "i testi" apart
# from "i test" and "the test set" apart from "the tests".
FORBIDDEN = {
    "questa macchina": r"\bquest[ao] macchin[ae]\b",
    "this machine": r"\bth(?:is|ese) machines?\b",
    "tests/": r"\btests/",
    "test_": r"\btest_\w*\.py\b",  # a test file; a key such as "test_loss" is fine
    "`make": r"`make\b",
    "make <target>": (
        r"\bmake (?:test|test-fast|serve|site|bench|reference|install|install-site|lint|format"
        r"|browser|clean|help)\b"
    ),
    ".venv": r"\.venv\b",
    "scripts/": r"\bscripts/",
    "benchmarks/": r"\bbenchmarks/",
    "fixture": r"\bfixtures?\b",
    "SITE_URL": r"(?-i:\bSITE_URL\b)",  # the variable, not the page's {{ site_url }}
    "Chromium": r"\bchromium\b",
    "pytest": r"\bpytest\b",
    "conftest": r"\bconftest\b",
    "i test": r"\b(?:i|dai|dei|nei|ai|sui|coi|questi|altri) test\b(?! set\b)",
    "the tests": r"\b(?:the|our|these|its|their) tests\b",
    "test suite": r"\btest suite\b",
    "a ogni modifica": r"\ba ogni modifica\b",
    "at every change": r"\bat every change\b",
}
# The setup page is for learners: it makes the reader's own .venv, but nothing of the
# contributor's tooling.
SETUP_FORBIDDEN = {
    **{word: rx for word, rx in FORBIDDEN.items() if word != ".venv"},
    ".venv-ref": r"\.venv-ref\b",
    "Playwright": r"\bplaywright\b",
    "Hypothesis": r"\bhypothesis\b",
    "REPO_URL": r"(?-i:\bREPO_URL\b)",  # the variable, not the page's {{ repo_url }}
    "sudo": r"\bsudo\b",
    "apt-get": r"\bapt-get\b",
}

LINK = re.compile(r"(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
LIST_ITEM = re.compile(r"^[ \t]*(?:[-*+]|\d+\.)[ \t]")
# A sentence (or a clause after a semicolon) ends at . ! ? ; followed by a space.
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
BOX_TITLE = re.compile(r"^(?:!!!|\?\?\?\+?|===\+?)[ \t]")


# --------------------------------------------------------------------------------------------
# The course, from the nav


def nav_pages(nav) -> list[str]:
    """Every page of a MkDocs nav, in order (``{"Title": "page.md"}`` items included)."""
    found = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def course(nav) -> list[str]:
    """The pages of the course, in the nav's order."""
    return [
        page
        for page in nav_pages(nav)
        if page.endswith(".md")
        and page not in OUTSIDE_COURSE
        and not page.startswith(OUTSIDE_COURSE_FOLDERS)
    ]


COURSE = course(mkdocs_config()["nav"])
# The lessons: every page of the course but the home page and the setup page.
CHAPTERS = [page for page in COURSE if page not in (HOME, SETUP)]


def neighbours(page: str, order: list[str] = COURSE) -> tuple[str | None, str | None]:
    """(previous page, next page) of ``page`` in the course (None at either end)."""
    k = order.index(page)
    return (order[k - 1] if k else None), (order[k + 1] if k + 1 < len(order) else None)


def read(lang: str, page: str) -> str:
    return (DOCS / lang / page).read_text(encoding="utf-8")


# --------------------------------------------------------------------------------------------
# The detectors (pure functions of a page's text, so that the guards below can feed them)


def page_target(target: str) -> str | None:
    """``minilm.md#x`` -> ``minilm.md``; None for a link that is not to another page."""
    if "://" in target or target.startswith(("#", "mailto:")):
        return None
    path = target.split("#", 1)[0]
    if path.startswith("./"):
        path = path[2:]
    return path if path.endswith((".md", ".ipynb")) else None


def section(text: str, heading: str) -> list[tuple[int, str]]:
    """(line, text) of the lines of the section under the heading ``heading``, fences blanked."""
    lines = outside_fences(text).split("\n")
    found, level = [], None
    for n, line in enumerate(lines, start=1):
        m = HEADING.match(line)
        if level is None:
            if m and m.group(2) == heading:
                level = len(m.group(1))
            continue
        if m and len(m.group(1)) <= level:
            break
        found.append((n, line))
    return found


def section_links(text: str, heading: str, pages: list[str]) -> list[str]:
    """The pages among ``pages`` that the section links to, in order of their first link."""
    if not section(text, heading):
        raise AssertionError(f"no section {heading!r}")
    order = []
    for _, line in section(text, heading):
        for m in LINK.finditer(line):
            target = page_target(m["target"])
            if target in pages and target not in order:
                order.append(target)
    return order


def order_fault(found: list[str], expected: list[str]) -> str | None:
    """Where ``found`` first departs from ``expected``, in words, or None."""
    if found == expected:
        return None
    for k, (a, b) in enumerate(zip(found, expected, strict=False)):
        if a != b:
            return f"place {k + 1}: {a} where the nav has {b}"
    if len(found) < len(expected):
        return f"missing, from place {len(found) + 1}: {expected[len(found) :]}"
    return f"extra, from place {len(expected) + 1}: {found[len(expected) :]}"


def last_line(text: str) -> tuple[int, str]:
    """(line, text) of the last non-empty line."""
    lines = text.rstrip().split("\n")
    return len(lines), lines[-1].strip()


def next_line_fault(text: str, lang: str, next_page: str | None) -> str | None:
    """What is wrong with the page's closing "next chapter" line, or None."""
    n, line = last_line(text)
    if next_page is None:
        if line.startswith(NEXT_LINE[lang]):
            return f"line {n}: the last page of the course has no next chapter: {line!r}"
        return None
    shape = re.compile(rf"^{re.escape(NEXT_LINE[lang])} \[[^\]]+\]\((?P<target>[^)\s]+)\)$")
    m = shape.match(line)
    if m is None:
        return (
            f"line {n}: the last line must be '{NEXT_LINE[lang]} [...]({next_page})', "
            f"found {line!r}"
        )
    if page_target(m["target"]) != next_page:
        return f"line {n}: the next chapter is {next_page}, the line points to {m['target']}"
    return None


@dataclass(frozen=True)
class Sentence:
    line: int
    text: str


def sentences(text: str) -> list[Sentence]:
    """The prose of a page, sentence by sentence, with the line each sentence starts on.

    Fences are left out; a paragraph, a list item, a heading and an admonition's title line each
    start a new sentence (the last two are never split); an admonition's indentation is dropped.
    """
    chunks: list[tuple[int, list[str], bool]] = []  # (first line, lines, may be split)
    new_paragraph = True
    for n, line in enumerate(outside_fences(text).split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            new_paragraph = True
            continue
        title = bool(HEADING.match(stripped) or BOX_TITLE.match(stripped))
        if new_paragraph or title or LIST_ITEM.match(line) or not chunks[-1][2]:
            chunks.append((n, [], not title))
        chunks[-1][1].append(stripped)
        new_paragraph = False
    found = []
    for start, lines, splittable in chunks:
        if not splittable:
            found.append(Sentence(start, lines[0]))
            continue
        # The line of each character, to give every sentence the line it starts on.
        joined, line_of = "", []
        for k, ln in enumerate(lines):
            piece = ln + " "
            joined += piece
            line_of += [start + k] * len(piece)
        pos = 0
        for part in SENTENCE_END.split(joined.rstrip()):
            at = joined.index(part, pos)
            found.append(Sentence(line_of[at], part))
            pos = at + len(part)
    return found


def sentence_faults(text: str, lang: str, previous: str | None, next_page: str | None) -> list[str]:
    """Every sentence that speaks of the next or the previous chapter and does not link to it,
    or links to another page."""
    faults = []
    for s in sentences(text):
        wanted = {}
        for kind, target in (("next", next_page), ("previous", previous)):
            m = SPEAKS_OF[kind][lang].search(s.text)
            if m:
                wanted[kind] = (m.group(0), target)
        if not wanted:
            continue
        links = [page_target(m["target"]) for m in LINK.finditer(s.text)]
        links = [t for t in links if t is not None and t != "glossary.md"]
        allowed = {target for _, target in wanted.values()}
        for kind, (words, target) in wanted.items():
            if target is None:
                faults.append(
                    f"line {s.line}: {words!r}, but this page has no {kind} chapter: {s.text!r}"
                )
            elif target not in links:
                faults.append(
                    f"line {s.line}: {words!r} must link to the {kind} chapter, {target}: "
                    f"{s.text!r}"
                )
        right = " or ".join(sorted(t for t in allowed if t)) or "no page"
        for t in links:
            if t not in allowed:
                faults.append(
                    f"line {s.line}: a sentence about the {' and '.join(wanted)} chapter links "
                    f"to {t}, not to {right}: {s.text!r}"
                )
    return faults


def forbidden_words(text: str, words: dict[str, str]) -> list[tuple[int, str, str]]:
    """(line, word, the line) of every forbidden word of ``words``, in prose and code alike.

    A ``--8<--`` include is expanded and its code searched too (reported on the include's line).
    """
    patterns = {word: re.compile(rx, re.I) for word, rx in words.items()}
    found = []
    for n, line in enumerate(text.split("\n"), start=1):
        included = "--8<--" in line
        searched = expand_snippets(line) if included else line
        for word, rx in patterns.items():
            if rx.search(searched):
                where = "in the code it includes" if included else line.strip()
                found.append((n, word, where))
    return found


def forbidden_report(lang: str, page: str, found) -> str:
    return "\n".join(f"docs/{lang}/{page}:{n}: {word!r} in {where!r}" for n, word, where in found)


# --------------------------------------------------------------------------------------------
# The real pages


def test_the_course_is_the_nav_without_the_pages_outside_it():
    assert COURSE[:2] == [HOME, SETUP], COURSE
    assert len(CHAPTERS) > 10, CHAPTERS
    for page in COURSE:
        for lang in LANGUAGES:
            assert (DOCS / lang / page).is_file(), f"docs/{lang}/{page}: in the nav, not on disk"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_path_on_the_home_page_is_the_course_in_the_navs_order(lang):
    found = section_links(read(lang, HOME), PATH_HEADING[lang], COURSE)
    fault = order_fault(found, COURSE[1:])
    assert fault is None, f"docs/{lang}/{HOME}, {PATH_HEADING[lang]!r}: {fault}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_what_you_will_learn_lists_every_chapter_in_the_navs_order(lang):
    found = section_links(read(lang, HOME), LEARN_HEADING[lang], CHAPTERS)
    fault = order_fault(found, CHAPTERS)
    assert fault is None, f"docs/{lang}/{HOME}, {LEARN_HEADING[lang]!r}: {fault}"


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", COURSE[1:])
def test_every_chapter_ends_with_the_link_to_the_next_one(lang, page):
    _, next_page = neighbours(page)
    fault = next_line_fault(read(lang, page), lang, next_page)
    assert fault is None, f"docs/{lang}/{page}: {fault}"


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", COURSE)
def test_every_next_and_previous_chapter_sentence_is_true(lang, page):
    previous, next_page = neighbours(page)
    faults = sentence_faults(read(lang, page), lang, previous, next_page)
    assert not faults, f"docs/{lang}/{page}:\n" + "\n".join(faults)


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("page", [p for p in COURSE if p != SETUP])
def test_the_lessons_speak_of_the_subject_not_of_the_project(lang, page):
    found = forbidden_words(read(lang, page), FORBIDDEN)
    assert not found, "words about the project in a lesson:\n" + forbidden_report(lang, page, found)


@pytest.mark.parametrize("lang", LANGUAGES)
def test_the_setup_page_is_for_learners(lang):
    found = forbidden_words(read(lang, SETUP), SETUP_FORBIDDEN)
    assert not found, "contributor's tooling on the setup page:\n" + forbidden_report(
        lang, SETUP, found
    )


# --------------------------------------------------------------------------------------------
# The front door: the README's example runs and prints what it shows, its picture is there, and
# it keeps the test command that CI runs (.ci/run)

README = ROOT / "README.md"


def test_the_readme_example_runs_and_prints_what_it_shows():
    blocks = fences(README.read_text(encoding="utf-8"))
    k = next(k for k, f in enumerate(blocks) if f.info == "python")
    shown = blocks[k + 1]
    assert shown.info == "text", f"README.md:{shown.line}: the example's output should follow it"
    assert normalise_output(run_block(blocks[k].body)) == normalise_output(shown.body)


def test_the_readme_picture_is_a_file_of_the_repository():
    text = README.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", text)
    assert images, "README.md has no picture"
    for image in images:
        assert "://" not in image and (ROOT / image).is_file(), f"README.md: {image} not found"


def test_the_readme_gives_the_test_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, re.M), ".ci/run no longer runs `make test`"
    bash = [f.body for f in fences(README.read_text(encoding="utf-8")) if f.info == "bash"]
    assert any(re.search(r"^make test(\s|$)", body, re.M) for body in bash), (
        "README.md: no `make test` line in a bash block"
    )


# --------------------------------------------------------------------------------------------
# The guards: each detector reports a made-up fault, and lets a sound page pass

ORDER = ["index.md", "setup.md", "qkv.md", "attention.md", "scaling.md"]


def test_a_path_out_of_order_or_incomplete_is_reported():
    sound = (
        "# Home\n\n## Il percorso\n\n1. [Installazione](setup.md)\n2. [QKV](qkv.md), vedi il "
        "[glossario](glossary.md)\n3. [Attention](attention.md#maschere)\n4. [Scala](scaling.md)"
        "\n\n## Altro\n\n[Fuori](index.md)\n"
    )
    assert order_fault(section_links(sound, "Il percorso", ORDER), ORDER[1:]) is None
    swapped = sound.replace("(qkv.md)", "(TMP)").replace("(attention.md#", "(qkv.md#")
    swapped = swapped.replace("(TMP)", "(attention.md)")
    fault = order_fault(section_links(swapped, "Il percorso", ORDER), ORDER[1:])
    assert fault == "place 2: attention.md where the nav has qkv.md"
    missing = sound.replace("4. [Scala](scaling.md)", "")
    fault = order_fault(section_links(missing, "Il percorso", ORDER), ORDER[1:])
    assert fault == "missing, from place 4: ['scaling.md']"
    with pytest.raises(AssertionError, match="no section"):
        section_links(sound, "The path", ORDER)


def test_a_chapter_without_the_right_last_line_is_reported():
    body = "# QKV\n\nTesto.\n\n**1. Esercizio.** Prova.\n"
    good = body + "\n**Prossimo capitolo:** [Scaled dot-product attention](attention.md)\n\n"
    assert next_line_fault(good, "it", "attention.md") is None
    assert "must be '**Prossimo capitolo:** [...](attention.md)'" in next_line_fault(
        body, "it", "attention.md"
    )
    wrong = good.replace("(attention.md)", "(scaling.md)")
    assert next_line_fault(wrong, "it", "attention.md") == (
        "line 7: the next chapter is attention.md, the line points to scaling.md"
    )
    english = body + "\n**Next chapter:** [Attention](attention.md)\n"
    assert next_line_fault(english, "en", "attention.md") is None
    assert next_line_fault(english, "it", "attention.md") is not None  # the Italian words
    assert "no next chapter" in next_line_fault(good, "it", None)  # the last page
    assert next_line_fault(body, "it", None) is None


def test_a_false_next_or_previous_chapter_sentence_is_reported():
    page = (
        "# Scala\n\nCome nel [capitolo precedente](attention.md), la\n[softmax](glossary.md#s) "
        "satura. Il prossimo capitolo, [Multi-head](multi-head.md), la\nusa.\n\n"
        "- Un punto. Ne parla il capitolo successivo.\n\n"
        '??? success "Soluzione"\n'
        "    Lo vedremo nel capitolo seguente, [Decodifica](decoding.md).\n"
        "\n```python\n# nel prossimo capitolo\n```\n"
    )
    faults = sentence_faults(page, "it", "attention.md", "multi-head.md")
    assert len(faults) == 3, faults
    assert faults[0].startswith("line 7: 'capitolo successivo' must link to the next chapter")
    assert faults[1].startswith("line 10: 'capitolo seguente' must link")
    assert faults[2].startswith("line 10: a sentence about the next chapter links to decoding.md")
    assert sentence_faults(page, "it", "attention.md", None)[0].startswith(
        "line 4: 'prossimo capitolo', but this page has no next chapter"
    )
    english = "As in the [previous chapter](qkv.md), see the [next chapter](scaling.md).\n"
    assert sentence_faults(english, "en", "qkv.md", "scaling.md") == []
    assert len(sentence_faults(english, "en", "attention.md", "scaling.md")) == 2
    # "nei capitoli precedenti" (plural) names no one chapter
    assert sentence_faults("Come nei capitoli precedenti.\n", "it", None, None) == []


def test_sentences_keep_the_line_they_start_on():
    page = "# T\n\nUno. Due;\ntre. Quattro.\n\n!!! note\n    Cinque.\n"
    assert [(s.line, s.text) for s in sentences(page)] == [
        (1, "# T"),
        (3, "Uno."),
        (3, "Due;"),
        (4, "tre."),
        (4, "Quattro."),
        (6, "!!! note"),
        (7, "Cinque."),
    ]


# Each forbidden word: a sentence with it, and a near miss without it.
FORBIDDEN_EXAMPLES = {
    "questa macchina": ("Su questa macchina va il doppio.", "Questa matrice è piccola."),
    "this machine": ("On this machine it takes 2 s.", "This matrix is small."),
    "tests/": ("See tests/test_x.py.", "One test/one check."),
    "test_": ("As test_minilm.py checks.", 'history["test_exact_match"], the latest_.py'),
    "`make": ("Run `make bench`.", "They make it faster."),
    "make <target>": ("make test", "make the test pass"),
    ".venv": ("HF_HUB_OFFLINE=1 .venv-ref/bin/python x.py", "a venv of your own"),
    "scripts/": ("scripts/make_minilm_reference.py", "the scripts of the page"),
    "benchmarks/": ("benchmarks/bench_minilm.py", "the [benchmarks](benchmarks.md)"),
    "fixture": ("legge la fixture dal pacchetto", "la forma fissa"),
    "SITE_URL": ("make site SITE_URL=x", "the site's URL, {{ site_url }}"),
    "Chromium": ("Chromium, from apt-get", "chrome"),
    "pytest": ("run pytest", "a test"),
    "conftest": ("tests/conftest.py", "contest"),
    "i test": ("Lo confrontano i test, dai test e nei test.", "I testi, i test set."),
    "the tests": ("the tests compare it", "the test set and the test split"),
    "test suite": ("the test suite", "a test of the suite"),
    "a ogni modifica": ("a ogni modifica", "a ogni passo"),
    "at every change": ("at every change", "at every step"),
}


def test_every_forbidden_word_has_an_example():
    assert set(FORBIDDEN_EXAMPLES) == set(FORBIDDEN)


@pytest.mark.parametrize("word", sorted(FORBIDDEN))
def test_a_forbidden_word_is_reported_and_a_near_miss_is_not(word):
    bad, near = FORBIDDEN_EXAMPLES[word]
    page = f"# T\n\nProsa.\n\n```bash\n{bad}\n```\n"
    assert (6, word) in [(n, w) for n, w, _ in forbidden_words(page, FORBIDDEN)]
    assert [w for _, w, _ in forbidden_words(near, FORBIDDEN)] == [], near


def test_a_forbidden_word_in_included_code_is_reported():
    # The include is expanded as the site expands it: the word is in the file, not on the page.
    include = '```python\n--8<-- "scripts/make_minilm_reference.py"\n```\n'
    found = forbidden_words(include, FORBIDDEN)
    assert (2, ".venv", "in the code it includes") in found


def test_the_setup_page_may_make_a_venv_but_not_the_reference_one():
    learner = "python3 -m venv .venv\ngit clone {{ repo_url }}\n"
    assert forbidden_words(learner, SETUP_FORBIDDEN) == []
    found = [w for _, w, _ in forbidden_words(".venv-ref/bin/python\n", SETUP_FORBIDDEN)]
    assert found == [".venv-ref"]
