"""The guards of the docs suite catch the faults they exist for (tested on made-up pages).

The real pages are checked by test_docs.py and test_parity.py; here each detector is shown a page
with one fault and must report it, and a sound page must pass. Two guards have no home elsewhere
and check the real pages here too: every exercise solution (a ``??? success`` admonition) holds a
block that the tests run, and every snippet section of ``src/`` is included by a page.
"""

from __future__ import annotations

import re

import pytest

from doctools import (
    DOCS,
    LANGUAGES,
    ROOT,
    normalise_output,
    optimizer_steps,
    orphan_outputs,
    outside_fences,
    pages,
    python_blocks,
    read_page,
    rounding_moves_output,
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


# --------------------------------------------------------------------------------------------
# Exercise solutions run: a ``??? success`` admonition holds a block that python_blocks returns.
# A solution fenced as ```py or ```python title="x", or not indented into the admonition, would
# show on the page and never be executed (or run outside its collapsed box), in silence.

SOLUTION = re.compile(r"^(?P<indent>[ \t]*)(?:\?\?\?\+?|!!!)\s+success\b")
TAB = 4  # an admonition's body is indented by four spaces more than its first line


def _indent(line: str) -> int:
    return len(line.expandtabs(TAB)) - len(line.expandtabs(TAB).lstrip())


def solutions_that_do_not_run(text: str) -> list[int]:
    """Lines of the ``??? success`` admonitions of a page that hold no block the tests run."""
    lines = text.split("\n")
    prose = outside_fences(text).split("\n")  # an admonition shown inside a fence is not one
    run_lines = {block.line for block in python_blocks(text)}
    bad = []
    for i, line in enumerate(prose):
        m = SOLUTION.match(line)
        if not m:
            continue
        body_indent = _indent(m["indent"]) + TAB
        end = i + 1  # the body: blank lines and lines indented into the admonition
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) >= body_indent):
            end += 1
        if not any(i + 1 < ln <= end for ln in run_lines):  # 1-based lines of the body
            bad.append(i + 1)
    return bad


def _has_solutions(text: str) -> bool:
    return any(SOLUTION.match(line) for line in outside_fences(text).split("\n"))


def _pages_with_solutions():
    return [
        pytest.param(path, id=path.relative_to(DOCS).as_posix())
        for lang in LANGUAGES
        for path in pages(lang)
        if _has_solutions(path.read_text(encoding="utf-8"))
    ]


SOLUTION_PAGES = _pages_with_solutions()


def test_some_page_has_solutions():
    # The guard must not pass by finding nothing.
    assert SOLUTION_PAGES, "no page has a ??? success admonition"


@pytest.mark.parametrize("path", SOLUTION_PAGES)
def test_every_solution_holds_a_block_that_runs(path):
    bad = solutions_that_do_not_run(read_page(path))
    assert not bad, (
        f"{path.relative_to(DOCS)}: these ??? success admonitions hold no block the tests run "
        f"(lines {bad}); put the solution in a fence tagged exactly {F}python, indented four "
        "spaces into the admonition"
    )


@pytest.mark.parametrize(
    "body",
    [
        f"    {F}py\n    assert 1 + 1 == 2\n    {F}\n",  # a disguised tag: not run
        f'    {F}python title="x.py"\n    assert 1 + 1 == 2\n    {F}\n',
        f"    {F}text\n    assert 1 + 1 == 2\n    {F}\n",  # shown, never run
        f"{F}python\nassert 1 + 1 == 2\n{F}\n",  # not indented: runs outside the box
        f"  {F}python\n  assert 1 + 1 == 2\n  {F}\n",  # two spaces: not in the box either
        "    The answer is 2.\n",  # prose only
        "",  # nothing at all
    ],
    ids=["py", "title", "text", "not-indented", "two-spaces", "prose-only", "empty"],
)
def test_a_solution_that_would_not_run_is_reported(body):
    page = f'# T\n\n1. An exercise.\n\n??? success "Solution"\n{body}\nAfter.\n'
    assert solutions_that_do_not_run(page) == [5]


def test_a_solution_that_runs_is_not_reported():
    good = f"    {F}python\n    assert 1 + 1 == 2\n    {F}\n"
    nested = f"        {F}python\n        assert 1 + 1 == 2\n        {F}\n"
    page = (
        "# T\n\n"
        f'??? tip "Hint"\n    Add.\n\n'  # line 3: not a solution
        f'??? success "Solution"\n{good}\n'  # line 6: the block, then its output and prose
        f'    {F}text title="Output"\n    2\n    {F}\n\n    Why: prose after the block.\n\n'
        f'???+ success "Open"\n\n    Prose first.\n\n{good}\n'  # line 17: open, prose first
        f'!!! note\n    ??? success "Nested"\n{nested}\n'  # line 26: inside another box
        f'{F}markdown\n??? success "Shown in a fence: not an admonition"\n{F}\n'
    )
    assert solutions_that_do_not_run(page) == []
    # ... and the same page with one solution broken is reported at that solution's line
    broken = page.replace(f"Prose first.\n\n    {F}python", f"Prose first.\n\n    {F}py")
    assert solutions_that_do_not_run(broken) == [17]


# --------------------------------------------------------------------------------------------
# Every snippet section of src/ is included by a page, in each language. A ``--8<-- [start:x]``
# marker tells a reader of the source "a page shows this"; a section that no page includes is an
# orphan, and its markers are noise (or a page lost its include).

SECTION = re.compile(r"--8<--\s*\[start:(?P<name>[\w-]+)\]")
INCLUDE = re.compile(r'--8<--\s*"(?P<path>src/[^":]+):(?P<name>[\w-]+)"')


def orphan_sections(sources: dict[str, str], page_texts: list[str]) -> list[str]:
    """``path:name`` of every section of ``sources`` (path -> text) that no page includes."""
    included = {(m["path"], m["name"]) for text in page_texts for m in INCLUDE.finditer(text)}
    return [
        f"{path}:{m['name']}"
        for path, text in sorted(sources.items())
        for m in SECTION.finditer(text)
        if (path, m["name"]) not in included
    ]


def test_a_section_that_no_page_includes_is_reported():
    sources = {
        "src/a.py": "# --8<-- [start:f]\ndef f(): ...\n# --8<-- [end:f]\n",
        "src/b.py": "    # --8<-- [start:g]\n    def g(self): ...\n    # --8<-- [end:g]\n",
    }
    page = f'{F}python\n--8<-- "src/a.py:f"\nf()\n{F}\n'
    assert orphan_sections(sources, [page]) == ["src/b.py:g"]
    assert orphan_sections(sources, [page, page.replace("a.py:f", "b.py:g")]) == []
    wrong_file = page.replace("a.py:f", "b.py:f")  # the name alone is not enough
    assert orphan_sections(sources, [wrong_file]) == ["src/a.py:f", "src/b.py:g"]


@pytest.mark.parametrize("lang", LANGUAGES)
def test_every_snippet_section_of_src_is_included_by_a_page(lang):
    sources = {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted((ROOT / "src").rglob("*.py"))
    }
    assert any(SECTION.search(text) for text in sources.values())  # not passing by finding none
    page_texts = [path.read_text(encoding="utf-8") for path in pages(lang)]
    orphans = orphan_sections(sources, page_texts)
    assert not orphans, (
        f"these snippet sections of src/ are included by no page of docs/{lang}: {orphans}; "
        "include them in a page or remove their --8<-- markers"
    )


# Figures printed after training: a float32 run amplifies one rounding per step into the second
# decimal (this is the transformer chapter's exercise 3 as it was, whose 3.04 printed 3.03 on an
# AVX-512 CPU); the same run in float64 prints the same four decimals whatever the roundings.
_TRAINED_AND_PRINTED = """
import numpy as np

from transformer_np import Adam, LanguageModel, LanguageModelConfig, cross_entropy, fit


class NoMaskLM(LanguageModel):
    def forward(self, ids, *, kv_cache=None):
        x = self.embed_tokens(self.embed, self.drop, ids)
        return self.out.forward(self.blocks.forward(x, None))


V, T, B, steps = 16, 8, 32, 100
cfg = LanguageModelConfig(vocab_size=V, d_model=32, n_heads=4, n_layers=1, max_len=T, dtype=DTYPE)
rng = np.random.default_rng(0)
train = [rng.integers(0, V, size=(B, T + 1)) for _ in range(steps)]
test = rng.integers(0, V, size=(256, T + 1))
model = NoMaskLM(cfg, rng=0)
fit(model, [(s[:, :-1], s[:, 1:]) for s in train], steps=steps,
    optimizer=Adam(model.params, lr=2e-2), progress=False)
logits = model(test[:, :-1])
loss = [cross_entropy(logits[:, t], test[:, t + 1])[0] for t in range(T)]
print(f"{np.mean(loss[:-1]):.4f} {loss[-1]:.4f}")  # float32: moves by about 0.05
"""


@pytest.mark.parametrize("dtype, moves", [("float32", True), ("float64", False)])
def test_figures_that_one_rounding_per_training_step_moves_are_reported(dtype, moves):
    code = _TRAINED_AND_PRINTED.replace("DTYPE", repr(dtype))
    with optimizer_steps() as steps:
        shown = run_block(code)
    assert len(steps) == 100 and {str(d) for d in steps} == {dtype}
    assert (rounding_moves_output(code, shown) is not None) == moves
