"""Every notebook runs from top to bottom without an error, in both languages.

Two kinds of notebook:

- the notebooks committed under ``docs/<lang>/notebooks/`` (pages of their own);
- the notebook of every chapter, made from the chapter's page at build time by
  ``hooks/chapter_notebooks.py`` (``page_to_notebook``, the same function the site build calls).
  Its cells must follow the page (code cells = the page's ``python`` blocks, in order; the prose,
  formulas and other fences in markdown cells), and it must run as a reader runs it: in a fresh
  kernel, in a folder outside the repository, with the package installed from its wheel (not the
  editable install from ``src/``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
from mkdocs.utils.meta import get_data
from nbclient import NotebookClient

from doctools import (
    DOCS,
    LANGUAGES,
    OUTPUT_INFO,
    ROOT,
    RUN_INFO,
    fences,
    load_hook,
    outside_fences,
    pages,
    python_blocks,
    read_page,
    structure,
)

NOTEBOOKS = [p for lang in LANGUAGES for p in pages(lang, ".ipynb")]


hook = load_hook("chapter_notebooks.py")

# A site address for the tests that need one (the notebook's links point into the site).
SITE_URL = "https://example.org/transformer/"

# Chapters whose notebooks cannot run outside the repository, with the reason: a block that reads
# a file of the repository by a path relative to it, which an installed package does not have.
# Each is marked xfail(strict=True): the test fails once the notebook runs, and the entry must go.
# None today: the blocks that read benchmark results and the MiniLM reference read them from the
# package data (importlib.resources).
REPOSITORY_READS: dict[str, str] = {}
# Kernels run side by side. On this 2-core machine (shared), all the chapters took 106 s with 1
# kernel at a time, 54 s with 2, 77 s with 3, 66 s with 4: a kernel waits (start-up, I/O) a good
# part of the time. CHAPTER_NOTEBOOK_KERNELS=1 runs them one after the other.
KERNELS = max(1, int(os.environ.get("CHAPTER_NOTEBOOK_KERNELS", "2")))
CELL_TIMEOUT = 600


class RepositoryFileMissing(Exception):
    """Every failing block of a notebook failed on a file that only the repository has."""


def _chapters() -> list[tuple[str, str]]:
    return [
        (lang, rel)
        for lang in LANGUAGES
        for rel in (p.relative_to(DOCS / lang).as_posix() for p in pages(lang))
        if hook.is_chapter(rel)
    ]


CHAPTERS = _chapters()


def _chapter_params(with_xfail: bool = False):
    params = []
    for lang, rel in CHAPTERS:
        marks = []
        if with_xfail and rel in REPOSITORY_READS:
            marks.append(
                pytest.mark.xfail(
                    strict=True, raises=RepositoryFileMissing, reason=REPOSITORY_READS[rel]
                )
            )
        params.append(pytest.param(lang, rel, id=f"{lang}/{rel}", marks=marks))
    return params


def _chapter_notebook(lang: str, rel: str, site_url: str | None = None):
    path = DOCS / lang / rel
    return hook.page_to_notebook(path.read_text(encoding="utf-8"), path, site_url=site_url)


def _page_text(lang: str, rel: str) -> str:
    """The page as the site shows it: includes expanded, without its front matter."""
    return get_data(read_page(DOCS / lang / rel))[0]


def _markdown(nb) -> str:
    return "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


# --------------------------------------------------------------------------------------------
# The committed notebooks


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebook found under docs/"


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    # Raises CellExecutionError, with the cell and its traceback, at the first failing cell.
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_notebook_is_committed_without_outputs(path):
    # The build executes notebooks: committed outputs could only be stale.
    nb = nbformat.read(path, as_version=4)
    stale = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count)
    ]
    assert not stale, f"clear the outputs of cells {stale} (jupyter nbconvert --clear-output)"


# --------------------------------------------------------------------------------------------
# The chapter notebooks: which pages


def test_every_language_has_chapters_and_the_same_ones():
    by_lang = {lang: sorted(rel for lg, rel in CHAPTERS if lg == lang) for lang in LANGUAGES}
    assert all(by_lang.values()), f"no chapter found: {by_lang}"
    assert len({tuple(v) for v in by_lang.values()}) == 1, by_lang


@pytest.mark.parametrize(
    ("rel", "chapter"),
    [
        ("attention.md", True),
        ("efficient-attention.md", True),
        ("index.md", False),
        ("setup.md", False),
        ("glossary.md", False),
        ("reference/attention.md", False),
        ("reference/index.md", False),
        ("notebooks/playground.ipynb", False),
    ],
)
def test_which_pages_are_chapters(rel, chapter):
    assert hook.is_chapter(rel) is chapter


# --------------------------------------------------------------------------------------------
# The chapter notebooks: their cells


@pytest.mark.parametrize("lang", LANGUAGES)
def test_includes_are_expanded_as_the_page_tests_expand_them(lang):
    # The hook's pymdownx.snippets expansion (configured from mkdocs.yml) is the one
    # tests/doctools.py uses for test_docs.py and test_parity.py.
    for path in pages(lang):
        text = path.read_text(encoding="utf-8")
        assert hook.expand_snippets(text) == read_page(path), path.relative_to(DOCS)


@pytest.mark.parametrize(("lang", "rel"), _chapter_params())
def test_code_cells_are_the_pages_python_blocks_in_order(lang, rel):
    nb = _chapter_notebook(lang, rel)
    nbformat.validate(nb)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    blocks = [b.code for b in python_blocks(read_page(DOCS / lang / rel))]
    assert code, f"{lang}/{rel}: no code cell"
    assert code == blocks


@pytest.mark.parametrize(("lang", "rel"), _chapter_params())
def test_markdown_cells_hold_the_prose_formulas_and_other_fences(lang, rel):
    page = _page_text(lang, rel)
    nb = _chapter_notebook(lang, rel)
    md = _markdown(nb)
    page_s, md_s = structure(page), structure(md)
    assert md_s.headings == page_s.headings
    assert md_s.formulas == page_s.formulas
    assert md_s.figures == page_s.figures
    assert md_s.inline_code == page_s.inline_code
    # No admonition syntax is left: Jupyter would show it as text and indented code.
    assert md_s.admonitions == []
    # Other fences (bash, text) stay in the markdown, in order; the outputs are gone.
    kept = [(f.info, f.body) for f in fences(page) if f.info not in (RUN_INFO, OUTPUT_INFO)]
    assert [(f.info, f.body) for f in fences(md)] == kept
    # Every line of prose, in page order (a box's lines are quoted: "> ").
    prose = [
        ln.strip()
        for ln in outside_fences(page).split("\n")
        if ln.strip() and not hook.ADMONITION.match(ln) and not hook.TAB.match(ln)
    ]
    lines = iter(re.sub(r"^(?:>\s?)+", "", ln).strip() for ln in outside_fences(md).split("\n"))
    missing = [ln for ln in prose if not any(ln == other for other in lines)]
    assert not missing, f"prose missing or out of order, from: {missing[0]!r}"
    # A markdown cell starts at every heading.
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            body = outside_fences(cell.source).split("\n")[1:]
            assert not [ln for ln in body if re.match(r"#{1,6}\s", ln)], cell.source[:200]


def _boxes_of_blocks(page: str) -> list[tuple[str, str] | None]:
    """For each python block of the page: (marker, title) of the admonition it sits in."""
    lines = page.split("\n")
    found = []
    for f in fences(page):
        if f.info != RUN_INFO:
            continue
        indent = len(lines[f.line - 1]) - len(lines[f.line - 1].lstrip())
        box = None
        for k in range(f.line - 2, -1, -1):
            ln = lines[k]
            if ln.strip() and len(ln) - len(ln.lstrip()) < indent:
                m = hook.ADMONITION.match(ln)
                if m:
                    box = (m["marker"], m["title"] or m["type"].capitalize())
                break
        found.append(box)
    return found


@pytest.mark.parametrize(("lang", "rel"), _chapter_params())
def test_blocks_in_boxes_follow_the_boxs_title_and_solutions_start_hidden(lang, rel):
    nb = _chapter_notebook(lang, rel)
    code_at = [k for k, c in enumerate(nb.cells) if c.cell_type == "code"]
    for k, box in zip(code_at, _boxes_of_blocks(_page_text(lang, rel)), strict=True):
        cell = nb.cells[k]
        hidden = cell.metadata.get("jupyter", {}).get("source_hidden", False)
        if box is None:
            assert not hidden, f"cell {k} is hidden but not in a collapsed box"
            continue
        marker, title = box
        assert hidden == (marker == "???"), f"cell {k}: hidden={hidden} in a {marker} box"
        heads = [
            c.source for c in nb.cells[:k] if c.cell_type == "markdown" and c.source.startswith(">")
        ]
        assert heads and heads[-1].startswith(f"> **{title}**"), (
            f"cell {k}: not preceded by the title of its box {title!r}"
        )


@pytest.mark.parametrize(("lang", "rel"), _chapter_params())
def test_links_point_into_the_site(lang, rel):
    nb = _chapter_notebook(lang, rel, site_url=SITE_URL)
    md = outside_fences(_markdown(nb))
    md = re.sub(r"`[^`]+`", "", md)
    targets = re.findall(r"\]\(([^)\s]+)", md)
    relative = [t for t in targets if not re.match(r"https?://", t)]
    assert not relative, f"relative links left: {relative}"
    page_url = SITE_URL + hook.page_url_path(lang, rel)
    (note,) = [c for c in nb.cells if c.id == "cell-intro"]
    assert f"]({page_url})" in note.source, "the note does not link the page"
    assert not [t for t in targets if t.startswith(SITE_URL) and ".md" in t], "links to .md"


SAMPLE_PAGE = """\
# Title

1. A step:

    ```python
    x = 1
    ```

    ```text title="Output"
    1
    ```

    The item goes on.

!!! note
    A box without a title, and $a^2$.

???+ tip "Open box"
    ```python
    y = 2
    ```

```bash
pip install transformer_np
```
"""


def test_a_sample_page_makes_the_expected_cells():
    # What the chapters do not all show: a block in a list item, a box without a title, an
    # open box, an output fence inside a list.
    nb = hook.page_to_notebook(SAMPLE_PAGE, Path("docs/en/sample.md"), docs_dir=Path("docs"))
    cells = [(c.cell_type, c.source, c.metadata.get("jupyter", {})) for c in nb.cells]
    assert cells == [
        ("markdown", "# Title", {}),
        ("markdown", "1. A step:", {}),
        ("code", "x = 1", {}),
        ("markdown", "The item goes on.", {}),  # not left indented: it would be code
        ("markdown", "> **Note**\n>\n> A box without a title, and $a^2$.", {}),
        ("markdown", "> **Open box**", {}),
        ("code", "y = 2", {}),  # an open box (???+): not hidden
        ("markdown", "```bash\npip install transformer_np\n```", {}),
    ]


@pytest.mark.parametrize(("lang", "rel"), _chapter_params()[:2])
def test_the_same_page_makes_the_same_notebook(lang, rel):
    a = hook.notebook_json(_chapter_notebook(lang, rel, site_url=SITE_URL))
    b = hook.notebook_json(_chapter_notebook(lang, rel, site_url=SITE_URL))
    assert a == b


# --------------------------------------------------------------------------------------------
# The chapter notebooks run, outside the repository, with the package installed from its wheel


@pytest.fixture(scope="session")
def installed_package(dists, tmp_path_factory) -> Path:
    """A folder holding the package as its wheel installs it (put on the kernel's PYTHONPATH):
    the wheel of the run (conftest.dists) unpacked, which is what pip does to install a
    pure-Python wheel."""
    work = tmp_path_factory.mktemp("wheel")
    (wheel,) = dists.glob("transformer_np-*.whl")
    site = work / "site-packages"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(site)
    # The kernel must import this copy, not the editable install of the repository.
    where = subprocess.run(
        [sys.executable, "-c", "import transformer_np; print(transformer_np.__file__)"],
        env=_kernel_env(site),
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), f"the kernel would import {where}"
    return site


def _kernel_env(site: Path) -> dict[str, str]:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return env


@dataclass(frozen=True)
class Run:
    errors: list[str]  # one per failing block: the block's page line, the error, its traceback
    missing_files_only: bool  # every failing block failed on FileNotFoundError
    seconds: float


def _run_chapters(chapters, site: Path, scratch: Path) -> dict[tuple[str, str], Run]:
    """Execute the chapters' notebooks, KERNELS at a time, each in a fresh kernel."""
    env = _kernel_env(site)

    async def run_one(lang: str, rel: str, sem: asyncio.Semaphore) -> Run:
        async with sem:
            nb = _chapter_notebook(lang, rel)
            cwd = scratch / lang / rel.replace("/", "_")
            cwd.mkdir(parents=True)
            client = NotebookClient(
                nb,
                timeout=CELL_TIMEOUT,
                kernel_name="python3",
                # Every block runs alone on the page: run them all, and report every failure.
                allow_errors=True,
                resources={"metadata": {"path": str(cwd)}},
            )
            start = time.perf_counter()
            try:
                await client.async_execute(env=env)
            except Exception as exc:  # a dead kernel, a timeout: a failure of the whole notebook
                return Run([f"{type(exc).__name__}: {exc}"], False, time.perf_counter() - start)
            seconds = time.perf_counter() - start
        lines = [b.line for b in python_blocks(read_page(DOCS / lang / rel))]
        errors, names = [], []
        code_cells = [c for c in nb.cells if c.cell_type == "code"]
        for line, cell in zip(lines, code_cells, strict=True):
            for out in cell.outputs:
                if out.output_type == "error":
                    names.append(out.ename)
                    tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.traceback))
                    errors.append(f"block at line {line}: {out.ename}: {out.evalue}\n{tb}")
        return Run(errors, bool(names) and set(names) == {"FileNotFoundError"}, seconds)

    async def run_all():
        sem = asyncio.Semaphore(KERNELS)
        runs = await asyncio.gather(*(run_one(lang, rel, sem) for lang, rel in chapters))
        return dict(zip(chapters, runs, strict=True))

    # A thread of its own: an earlier test (Playwright's sync API) may have left an event loop
    # running in the main thread, where asyncio.run() refuses to start.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, run_all()).result()


RUN_TEST = "test_chapter_notebook_runs_outside_the_repository"


@pytest.fixture(scope="session")
def chapter_runs(request, installed_package, tmp_path_factory) -> dict[tuple[str, str], Run]:
    """The runs of the chapter notebooks that this session's tests ask for, side by side."""
    scratch = tmp_path_factory.mktemp("chapter-notebooks")
    # Readers run the notebooks outside the repository.
    assert not scratch.resolve().is_relative_to(ROOT), f"{scratch} is inside the repository"
    wanted = [
        (item.callspec.params["lang"], item.callspec.params["rel"])
        for item in request.session.items
        if getattr(item, "originalname", None)
        == "test_chapter_notebook_runs_outside_the_repository"
    ]
    return _run_chapters(list(dict.fromkeys(wanted)), installed_package, scratch)


@pytest.mark.slow
@pytest.mark.parametrize(("lang", "rel"), _chapter_params(with_xfail=True))
def test_chapter_notebook_runs_outside_the_repository(chapter_runs, lang, rel):
    run = chapter_runs[(lang, rel)]
    if run.errors and rel in REPOSITORY_READS and run.missing_files_only:
        raise RepositoryFileMissing("\n\n".join(run.errors))
    assert not run.errors, f"{len(run.errors)} failing blocks:\n\n" + "\n\n".join(run.errors)
