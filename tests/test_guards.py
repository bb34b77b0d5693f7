"""The guards of the docs suite catch the faults they exist for (tested on made-up pages).

The real pages are checked by test_docs.py and test_parity.py; here each detector is shown a page
with one fault and must report it, and a sound page must pass.
"""

from __future__ import annotations

import pytest

from doctools import (
    normalise_output,
    orphan_outputs,
    python_blocks,
    run_block,
    silently_skipped,
    strip_comments,
    structure,
)

F = "```"


@pytest.mark.parametrize(
    "info", ["py", "python3", 'python title="x.py"', "{.python}", 'python linenums="1"', "pycon"]
)
def test_a_disguised_python_fence_is_reported(info):
    page = f"# T\n\n{F}{info}\nprint(1)\n{F}\n"
    assert silently_skipped(page) == [(3, info)]
    assert python_blocks(page) == []  # ... because it would not run


@pytest.mark.parametrize("info", ["python", "text", "bash", 'text title="Output"', "", "json"])
def test_a_plain_fence_is_not_reported(info):
    assert silently_skipped(f"{F}{info}\nx\n{F}\n") == []


def test_a_failing_block_fails():
    with pytest.raises(AssertionError):
        run_block("import numpy as np\nassert np.ones(3).sum() == 4\n")


def test_a_block_does_not_see_another_blocks_names():
    run_block("secret = 42\n")
    with pytest.raises(NameError):
        run_block("print(secret)\n")


def test_a_stale_output_is_detected():
    page = f'{F}python\nprint(2 + 2)\n{F}\n\n{F}text title="Output"\n5\n{F}\n'
    (block,) = python_blocks(page)
    assert normalise_output(run_block(block.code)) != normalise_output(block.expected_output)


def test_output_is_paired_only_with_the_block_right_before_it():
    page = (
        f'{F}python\nprint(1)\n{F}\n\nSome prose.\n\n{F}text title="Output"\n1\n{F}\n'
        f'\n{F}python\nprint(2)\n{F}\n\n{F}text title="Output"\n2\n{F}\n'
    )
    first, second = python_blocks(page)
    assert first.expected_output is None and second.expected_output == "2"
    assert orphan_outputs(page) == [7]


def test_indented_blocks_in_admonitions_and_tabs_are_found():
    page = f"!!! note\n    {F}python\n    x = 1\n    assert x == 1\n    {F}\n"
    (block,) = python_blocks(page)
    assert block.code == "x = 1\nassert x == 1"


def test_code_that_differs_beyond_comments_breaks_parity():
    it = structure(f"# A\n\n{F}python\nx = 1  # uno\n{F}\n")
    en = structure(f"# A\n\n{F}python\nx = 1  # one\n{F}\n")
    changed = structure(f"# A\n\n{F}python\nx = 2  # one\n{F}\n")
    assert it.code == en.code
    assert it.code != changed.code


def test_a_hash_inside_a_string_is_not_a_comment():
    assert strip_comments('print("#1")  # first', "python") == 'print("#1")'


def test_headings_formulas_admonitions_and_figures_are_compared():
    base = "# T\n\n## S\n\n$$a+b$$ and $c$\n\n!!! note\n    x\n\n![p](figures/f.svg)\n"
    s = structure(base)
    assert s.headings == [1, 2]
    assert s.formulas == ["a+b", "c"]
    assert s.admonitions == ["note"]
    assert s.figures == ["figures/f.svg"]
    assert structure(base.replace("## S", "### S")).headings != s.headings
    assert structure(base.replace("$c$", "$d$")).formulas != s.formulas
    assert structure(base.replace("!!! note", "!!! warning")).admonitions != s.admonitions


def test_inline_code_and_list_items_are_compared():
    it = "Testo con `f(x)` e\n`g(\n  y)` su due righe, e `risultati.it.md`.\n\n"
    it += "- uno\n- due\n    - tre\n"
    en = "Text with `f(x)` and\n`g(\n y)` over two lines, and `risultati.md`.\n\n"
    en += "- one\n- two\n    - three\n"
    a, b = structure(it), structure(en)
    assert a.inline_code == b.inline_code == ["`f(x)`", "`g( y)`", "`risultati.md`"]
    assert a.list_items == b.list_items == [0, 0, 4]
    assert structure(it.replace("`f(x)`", "`f(y)`")).inline_code != b.inline_code
    assert structure(it.replace("- due\n", "")).list_items != b.list_items  # an item lost
    assert structure(it.replace("    - tre", "- tre")).list_items != b.list_items  # nesting


def test_a_heading_inside_code_is_not_a_heading():
    s = structure(f"# T\n\n{F}python\n# a comment, not a heading\n{F}\n")
    assert s.headings == [1]
