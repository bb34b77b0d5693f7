"""Reading the site's pages the way the tests need them.

Pages live in ``docs/<lang>/``, mirrored name for name. This module finds them, expands
``--8<--`` snippet includes exactly as the site build does (pymdownx.snippets, configured from
mkdocs.yml), splits a page into fenced blocks, pairs a ``python`` block with the output block shown
after it, and extracts what the two languages must share (headings, formulas, admonitions,
figures, code).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import sys
import tokenize
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import yaml
from mktestdocs.__main__ import exec_python

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LANGUAGES = ("it", "en")
DEFAULT_LANGUAGE = "it"

# The info string of a fence that mktestdocs runs, and the one that shows a block's output.
RUN_INFO = "python"
OUTPUT_INFO = 'text title="Output"'


# --------------------------------------------------------------------------------------------
# Pages


def pages(lang: str, suffix: str = ".md") -> list[Path]:
    """Every page (or notebook, with ``suffix=".ipynb"``) of one language, sorted."""
    return sorted(
        p for p in (DOCS / lang).rglob(f"*{suffix}") if ".ipynb_checkpoints" not in p.parts
    )


def relative_names(lang: str, suffix: str = ".md") -> list[str]:
    return [p.relative_to(DOCS / lang).as_posix() for p in pages(lang, suffix)]


def load_hook(filename: str):
    """``hooks/<filename>``, loaded by path as MkDocs loads it, once per test session."""
    name = Path(filename).stem + "_hook"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "hooks" / filename)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before exec: its dataclasses look themselves up there
        path = sys.path.copy()
        sys.path.insert(0, str(ROOT / "hooks"))  # as MkDocs: a hook imports its neighbours
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path[:] = path
    return sys.modules[name]


_notebooks = load_hook("chapter_notebooks.py")
# URL path (from the site root) of the page docs/<lang>/<rel>: the hook's own rule.
page_url_path = _notebooks.page_url_path
FENCE_OPEN = _notebooks.FENCE_OPEN  # an opening fence, indented or not


# --------------------------------------------------------------------------------------------
# Snippet expansion (the same extension and configuration as the site build)


@cache
def mkdocs_config() -> dict:
    return yaml.load(
        (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=_notebooks.IgnoreTagsLoader
    )


# ``--8<--`` includes expanded by pymdownx.snippets, configured as in mkdocs.yml: the notebook
# hook's own function, so the tests read the pages as the site build does.
expand_snippets = _notebooks.expand_snippets


def read_page(path: Path) -> str:
    return expand_snippets(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------------------------
# Fenced blocks


@dataclass(frozen=True)
class Fence:
    info: str  # the info string after the backticks, stripped: 'python', 'text title="Output"'
    body: str  # the content, dedented by the fence's indentation
    line: int  # 1-based line of the opening fence
    end_line: int  # 1-based line of the closing fence


def fences(text: str) -> list[Fence]:
    """Every fenced block of a Markdown text, in order (fences may be indented)."""
    lines = text.split("\n")
    found: list[Fence] = []
    i = 0
    while i < len(lines):
        if not FENCE_OPEN.match(lines[i]):
            i += 1
            continue
        _, info, body_lines, j = _notebooks.read_fence(lines, i)  # the hook's own reading
        body = "\n".join(body_lines)
        found.append(Fence(info=info, body=body, line=i + 1, end_line=j))
        i = j
    return found


def outside_fences(text: str) -> str:
    """The text with every fenced block blanked out (line numbers are kept)."""
    lines = text.split("\n")
    for f in fences(text):
        for k in range(f.line - 1, f.end_line):
            lines[k] = ""
    return "\n".join(lines)


@dataclass(frozen=True)
class Block:
    code: str
    line: int
    expected_output: str | None  # the output fence right after it, if any


def python_blocks(text: str) -> list[Block]:
    """The blocks that run, each with the output block shown right after it (if any)."""
    lines = text.split("\n")
    all_fences = fences(text)
    blocks = []
    for k, f in enumerate(all_fences):
        if f.info != RUN_INFO:
            continue
        expected = None
        if k + 1 < len(all_fences) and all_fences[k + 1].info == OUTPUT_INFO:
            nxt = all_fences[k + 1]
            between = lines[f.end_line : nxt.line - 1]
            if all(not ln.strip() for ln in between):
                expected = nxt.body
        blocks.append(Block(code=f.body, line=f.line, expected_output=expected))
    return blocks


def orphan_outputs(text: str) -> list[int]:
    """Lines of output fences that do not directly follow a ``python`` block."""
    lines = text.split("\n")
    all_fences = fences(text)
    orphans = []
    for k, f in enumerate(all_fences):
        if f.info != OUTPUT_INFO:
            continue
        prev = all_fences[k - 1] if k else None
        ok = (
            prev is not None
            and prev.info == RUN_INFO
            and all(not ln.strip() for ln in lines[prev.end_line : f.line - 1])
        )
        if not ok:
            orphans.append(f.line)
    return orphans


# Fences that look like Python but that mktestdocs would skip without a word.
_SKIPPED_PYTHON = re.compile(
    r"^(py|py3|python3|pycon|ipython|ipython3|\{\s*\.?py(thon)?[^}]*\}|python\s+.+|python\S+)$",
    re.IGNORECASE,
)


def silently_skipped(text: str) -> list[tuple[int, str]]:
    """(line, info) of every fence that is Python in disguise: mktestdocs would not run it."""
    return [(f.line, f.info) for f in fences(text) if _SKIPPED_PYTHON.match(f.info)]


def run_block(code: str) -> str:
    """Run one block as a reader would paste it, with mktestdocs' executor (a fresh namespace).

    Returns what it printed. NumPy's print options, which a block may change, are restored
    afterwards, and figures a block opened are closed.
    """
    printoptions = np.get_printoptions()
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec_python(code)
    finally:
        np.set_printoptions(**printoptions)
        if "matplotlib.pyplot" in sys.modules:
            sys.modules["matplotlib.pyplot"].close("all")
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# Figures printed after training: only what every CPU gives


@contextlib.contextmanager
def optimizer_steps(nudge: int | None = None):
    """Record every optimizer step taken inside (the dtypes of the parameters it updated).

    CPUs round differently (OpenBLAS and NumPy pick other kernels: another summation order,
    FMA or not), and a training run amplifies those differences step after step: a figure
    printed after training holds on every CPU only if it does not move when each step's
    arithmetic changes by a rounding. With ``nudge`` 0 or 1, every step is followed by such a
    change: each parameter moves by one unit in the last place, up where the lowest bit of its
    value equals ``nudge`` and down elsewhere (deterministic, so that a block which computes the
    same thing twice still gets equal results). One unit is the least a different kernel can
    change: a dot product of length K may differ by up to K of them.
    """
    from transformer_np import optim

    taken: list[np.dtype] = []
    step = optim.Adam.step

    def recorded(self, grads, lr=None):
        step(self, grads, lr)
        taken.append(self.dtype)
        if nudge is not None:
            for p in self.params.values():
                bits = p.view(np.uint32 if p.dtype == np.float32 else np.uint64)
                up = (bits & 1) == nudge
                p[...] = np.where(up, np.nextafter(p, np.inf), np.nextafter(p, -np.inf))

    optim.Adam.step = recorded
    try:
        yield taken
    finally:
        optim.Adam.step = step


def rounding_moves_output(code: str, shown: str) -> str | None:
    """What a block prints when every optimizer step is followed by a change of one rounding
    (``optimizer_steps(nudge)``, both ways), if that differs from ``shown``; None if it does not."""
    for nudge in (0, 1):
        with optimizer_steps(nudge):
            printed = normalise_output(run_block(code))
        if printed != normalise_output(shown):
            return printed
    return None


def normalise_output(text: str) -> str:
    return "\n".join(ln.rstrip() for ln in text.strip("\n").split("\n"))


# --------------------------------------------------------------------------------------------
# What the two languages share


def strip_comments(code: str, info: str) -> str:
    """Code without its comments and blank lines: what must match across languages."""
    lang = info.split()[0] if info else ""
    if lang == "python":
        try:
            tokens = [
                t
                for t in tokenize.generate_tokens(io.StringIO(code + "\n").readline)
                if t.type != tokenize.COMMENT
            ]
            code = tokenize.untokenize(tokens)
        except (tokenize.TokenError, SyntaxError, IndentationError):
            code = re.sub(r"(^|\s)#.*$", "", code, flags=re.MULTILINE)
    elif lang in ("bash", "sh", "shell", "console", "toml", "yaml"):
        code = re.sub(r"(^|\s)#.*$", "", code, flags=re.MULTILINE)
    lines = [ln.rstrip() for ln in code.split("\n")]
    return "\n".join(ln for ln in lines if ln.strip())


HEADING = re.compile(r"^(#{1,6})\s+\S")
ADMONITION = re.compile(r"^\s*(?:!!!|\?\?\?\+?)\s+([\w-]+)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")
INLINE_CODE = re.compile(r"`[^`]+`")  # may run over a line break, as in Markdown
# A bulleted or numbered list item; the group is its indent (its nesting level).
LIST_ITEM = re.compile(r"^(\s*)(?:[-*+]|\d+\.)\s+\S")
# $$display$$ or $inline$ (a backslash-escaped or doubled dollar is not a delimiter).
MATH = re.compile(r"\$\$(.+?)\$\$|(?<![\\$])\$(?!\$)(.+?)(?<![\\$])\$(?!\$)", re.DOTALL)


def formulas(text: str) -> list[str]:
    """Display and inline formulas, in order, whitespace-normalised."""
    prose = INLINE_CODE.sub("", outside_fences(text))
    found = []
    for m in MATH.finditer(prose):
        formula = m.group(1) if m.group(1) is not None else m.group(2)
        found.append(" ".join(formula.split()))
    return found


@dataclass(frozen=True)
class Structure:
    headings: list[int]
    formulas: list[str]
    admonitions: list[str]
    figures: list[str]
    code: list[tuple[str, str]]
    inline_code: list[str]
    list_items: list[int]


def _same_in_both(code: str) -> str:
    """An inline code span as both languages must write it: whitespace normalised, and a
    file name of the Italian version (``attention.it.md``) written as the English one."""
    return re.sub(r"\.it\.(\w+)\b", r".\1", " ".join(code.split()))


def structure(text: str) -> Structure:
    prose = outside_fences(text)
    return Structure(
        headings=[len(m.group(1)) for ln in prose.split("\n") if (m := HEADING.match(ln))],
        formulas=formulas(text),
        admonitions=[m.group(1) for ln in prose.split("\n") if (m := ADMONITION.match(ln))],
        figures=IMAGE.findall(prose),
        code=[(f.info, strip_comments(f.body, f.info)) for f in fences(text)],
        inline_code=[_same_in_both(code) for code in INLINE_CODE.findall(prose)],
        list_items=[len(m.group(1)) for ln in prose.split("\n") if (m := LIST_ITEM.match(ln))],
    )


def notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def notebook_structure(path: Path) -> list[tuple]:
    """Per cell: ('markdown', headings, formulas) or ('code', code without comments)."""
    cells = []
    for cell in notebook(path)["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code":
            cells.append(("code", strip_comments(source, "python")))
        else:
            s = structure(source)
            cells.append((cell["cell_type"], s.headings, s.formulas, s.admonitions, s.figures))
    return cells


def notebook_formula_count(path: Path) -> int:
    count = 0
    for cell in notebook(path)["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            count += len(formulas(source))
    return count
