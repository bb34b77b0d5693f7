"""Every ```python block of every page, in both languages, runs alone; outputs shown are real.

Each block is executed by mktestdocs' executor in a fresh namespace (a reader copies one block:
it must run by itself), after ``--8<--`` includes are expanded as the site build expands them.
Where the page shows the block's output (a ```text title="Output"``` fence right after it),
the block's stdout must equal it, on any CPU: a block that trains a model before it prints is run
again with one rounding changed at every training step (doctools.optimizer_steps), and must print
the same. The English blocks whose code equals the Italian one's apart from comments, with the
same output, run in the full suite only (marked slow): they run exactly the same code.
"""

from __future__ import annotations

import mktestdocs
import pytest

from doctools import (
    DOCS,
    LANGUAGES,
    OUTPUT_INFO,
    RUN_INFO,
    normalise_output,
    optimizer_steps,
    orphan_outputs,
    pages,
    python_blocks,
    read_page,
    rounding_moves_output,
    run_block,
    silently_skipped,
    strip_comments,
)


def _twin_key(page: str, block) -> tuple:
    # What a block runs and must print, whatever the language of its comments.
    shown = None if block.expected_output is None else normalise_output(block.expected_output)
    return page, strip_comments(block.code, RUN_INFO), shown


def _all_blocks():
    params, first = [], set()
    for lang in LANGUAGES:
        for path in pages(lang):
            rel = path.relative_to(DOCS).as_posix()
            page = path.relative_to(DOCS / lang).as_posix()
            for block in python_blocks(read_page(path)):
                key = _twin_key(page, block)
                twin = lang != LANGUAGES[0] and key in first
                first.add(key)
                marks = [pytest.mark.slow] if twin else []
                params.append(pytest.param(block, id=f"{rel}:{block.line}", marks=marks))
    return params


BLOCKS = _all_blocks()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    # A block that writes a file writes it in a scratch folder; plots never open a window.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")


def test_every_language_has_python_blocks():
    # The suite must not pass by finding nothing.
    for lang in LANGUAGES:
        assert any(str(p.id).startswith(f"{lang}/") for p in BLOCKS), f"no python block in {lang}"


@pytest.mark.parametrize("block", BLOCKS)
def test_block_runs_alone_and_prints_what_the_page_shows(block):
    with optimizer_steps() as steps:
        printed = run_block(block.code)
    if block.expected_output is None:
        return
    shown = normalise_output(block.expected_output)
    real = normalise_output(printed)
    assert real == shown, (
        f"the output shown on the page is stale.\n--- shown ---\n{shown}\n--- real ---\n{real}"
    )
    if steps:  # figures printed after training: only the digits every CPU gives
        moved = rounding_moves_output(block.code, shown)
        dtypes = sorted({str(d) for d in steps})
        assert moved is None, (
            f"this block prints after {len(steps)} training steps in {', '.join(dtypes)}, and one "
            "rounding changed at each step changes what it prints: another CPU would print "
            "something else. Train in float64, or print fewer digits (CONTRIBUTING.md, "
            f"'Figures after training').\n--- shown ---\n{shown}\n--- moved ---\n{moved}"
        )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_no_python_fence_is_skipped_silently(lang):
    # mktestdocs runs only fences tagged exactly `python`; ```py, ```python title="x" ... would
    # be skipped without a word, so they are refused here.
    bad = []
    for path in pages(lang):
        for line, info in silently_skipped(path.read_text(encoding="utf-8")):
            bad.append(f"{path.relative_to(DOCS)}:{line}: ```{info}")
    assert not bad, (
        f"fences that mktestdocs would skip; tag them exactly ```{RUN_INFO} "
        "(or ```text if they must not run):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize("lang", LANGUAGES)
def test_we_run_exactly_the_blocks_mktestdocs_sees(lang):
    # Our fence parser and mktestdocs' must agree, or a block could escape both.
    for path in pages(lang):
        text = read_page(path)
        ours = [b.code.strip() for b in python_blocks(text)]
        theirs = [c.strip() for c in mktestdocs.grab_code_blocks(text, lang=RUN_INFO)]
        assert ours == theirs, f"{path.relative_to(DOCS)}: fence parsers disagree"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_output_block_follows_a_python_block(lang):
    bad = []
    for path in pages(lang):
        for line in orphan_outputs(read_page(path)):
            bad.append(f"{path.relative_to(DOCS)}:{line}")
    assert not bad, (
        f"```{OUTPUT_INFO} fences must directly follow the ```{RUN_INFO} block they show:\n"
        + "\n".join(bad)
    )
