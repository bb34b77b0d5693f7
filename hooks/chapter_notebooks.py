"""A Jupyter notebook for every chapter, made from the chapter's page at build time.

A chapter is every page ``docs/<lang>/<name>.md`` except the home page (``index.md``), the setup
and glossary pages and anything under a ``reference/`` folder (see :func:`is_chapter`). For each
one, in both languages, the build writes ``<name>.ipynb`` next to the page's HTML, so that
``/attention/`` has ``/attention/attention.ipynb`` and ``/en/attention/`` has
``/en/attention/attention.ipynb``, and the hook puts a "Scarica il notebook" / "Download the
notebook" button under the page's title. The pages themselves are not edited.

:func:`page_to_notebook` makes the notebook; ``tests/test_notebooks.py`` calls the same function
and runs every notebook in a fresh kernel, and ``tests/test_site_build.py`` checks the built site.
From the page, in page order:

- ``--8<--`` includes are expanded first, with pymdownx.snippets configured as in mkdocs.yml (the
  same expansion as the site and the tests);
- every ```` ```python ```` fence becomes a code cell, also when it is indented (inside a list or
  an admonition); these are exactly the blocks ``tests/test_docs.py`` runs;
- the ```` ```text title="Output" ```` fences are dropped: the notebook makes its own output;
- the prose, the formulas (raw ``$...$`` and ``$$...$$``, which Jupyter typesets) and every other
  fence (``bash``, ``text``) stay Markdown; a markdown cell starts at each heading;
- an admonition (``!!! note "Title"``, ``??? success "Soluzione"``) becomes a quote headed by its
  title in bold; a code block inside it becomes a code cell after a markdown cell with that title
  (the cell's source starts collapsed, ``jupyter.source_hidden``, when the box is collapsed on the
  page: a solution stays hidden until the reader opens it);
- relative links (other pages, glossary entries, figures) become absolute links into the site,
  when the site's URL is given: the downloaded notebook does not sit next to the site's files.

The cells are built with nbformat. (Jupytext's Markdown reader was tried: it turns a ``bash``
fence into a ``%%bash`` code cell and does not see the fences indented inside admonitions, so the
page is read here with the same fence grammar as ``tests/doctools.py``.)
"""

from __future__ import annotations

import html
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import markdown as python_markdown
import nbformat
import yaml
from mkdocs.utils.meta import get_data

ROOT = Path(__file__).resolve().parent.parent
LANGUAGES = ("it", "en")
DEFAULT_LANGUAGE = "it"
# Pages of the site that are not chapters: they get no notebook and no button.
NOT_CHAPTERS = frozenset({"index.md", "setup.md", "glossary.md", "benchmarks.md"})
NOT_CHAPTER_FOLDERS = frozenset({"reference"})

RUN_INFO = "python"  # the fences the tests run: the code cells
OUTPUT_INFO = 'text title="Output"'  # the output shown after a block: dropped

BUTTON_LABEL = {"it": "Scarica il notebook", "en": "Download the notebook"}
BUTTON_CLASS = "md-button chapter-notebook-download"
INTRO = {
    "it": (
        "*Questo notebook è generato dalla pagina [{title}]({url}) del sito "
        "«Transformer da zero»: il testo, le formule e il codice della pagina, nello stesso "
        "ordine. Serve il pacchetto `transformer_np` ([installazione]({setup})); ogni cella di "
        "codice gira anche da sola.*"
    ),
    "en": (
        "*This notebook is made from the page [{title}]({url}) of the site "
        "“Transformers from scratch”: the page's text, formulas and code, in the same order. "
        "It needs the `transformer_np` package ([setup]({setup})); every code cell also runs "
        "on its own.*"
    ),
}

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
# `!!! type "Title"`, `??? type`, `???+ type inline end "Title"`, and content tabs `=== "Title"`.
ADMONITION = re.compile(
    r"^(?P<indent> *)(?P<marker>!!!|\?\?\?\+?)[ \t]+(?P<type>[\w-]+)(?:[ \t]+[\w -]*?)?"
    r'(?:[ \t]+"(?P<title>[^"]*)")?[ \t]*$'
)
TAB = re.compile(r'^(?P<indent> *)(?P<marker>===\+?)[ \t]+"(?P<title>[^"]*)"[ \t]*$')
HEADING = re.compile(r"^#{1,6}[ \t]+\S")
# [text](target "title") and ![alt](target): the target is group 2.
LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")
# Code in markdown, where links are not rewritten: fences, then inline code spans.
CODE_IN_MARKDOWN = re.compile(r"(^[ \t]*(`{3,}|~{3,})[\s\S]*?^[ \t]*\2[ \t]*$|`[^`]+`)", re.M)


# --------------------------------------------------------------------------------------------
# Which pages, and where their notebooks go


def is_chapter(rel: str) -> bool:
    """Whether the page ``docs/<lang>/<rel>`` is a chapter (it gets a notebook and a button)."""
    parts = Path(rel).parts
    return (
        rel.endswith(".md")
        and parts[-1] not in NOT_CHAPTERS
        and not any(part in NOT_CHAPTER_FOLDERS for part in parts[:-1])
    )


def page_url_path(lang: str, rel: str) -> str:
    """URL path, from the site root, of the page ``docs/<lang>/<rel>`` (directory URLs)."""
    stem = rel.rsplit(".", 1)[0]
    prefix = "" if lang == DEFAULT_LANGUAGE else f"{lang}/"
    if stem == "index":
        return prefix
    if stem.endswith("/index"):
        stem = stem[: -len("/index")]
    return f"{prefix}{stem}/"


def notebook_name(rel: str) -> str:
    """File name of a chapter's notebook: ``attention.md`` -> ``attention.ipynb``."""
    return Path(rel).stem + ".ipynb"


def notebook_url_path(lang: str, rel: str) -> str:
    """URL path, from the site root, of a chapter's notebook: next to the page's HTML."""
    return page_url_path(lang, rel) + notebook_name(rel)


def language_and_rel(page_path: Path, docs_dir: Path | None = None) -> tuple[str, str]:
    """``docs/it/attention.md`` -> ``("it", "attention.md")``."""
    page_path = Path(page_path).resolve()
    docs_dir = Path(docs_dir).resolve() if docs_dir is not None else None
    if docs_dir is not None and page_path.is_relative_to(docs_dir):
        parts = page_path.relative_to(docs_dir).parts
    else:
        # The last folder named after a language.
        parts = page_path.parts
        idx = max(i for i, part in enumerate(parts) if part in LANGUAGES)
        parts = parts[idx:]
    if parts[0] not in LANGUAGES:
        raise ValueError(f"{page_path}: not under a language folder {LANGUAGES}")
    return parts[0], Path(*parts[1:]).as_posix()


# --------------------------------------------------------------------------------------------
# Snippet expansion: pymdownx.snippets, configured as in mkdocs.yml


class IgnoreTagsLoader(yaml.SafeLoader):
    """Reads mkdocs.yml without resolving its ``!ENV`` tags."""


IgnoreTagsLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def snippets_config(mkdocs_yml: Path = ROOT / "mkdocs.yml") -> dict:
    """The pymdownx.snippets configuration of mkdocs.yml, base paths made absolute."""
    config = yaml.load(Path(mkdocs_yml).read_text(encoding="utf-8"), Loader=IgnoreTagsLoader)
    for ext in config["markdown_extensions"]:
        if isinstance(ext, dict) and "pymdownx.snippets" in ext:
            return _absolute_base_paths(ext["pymdownx.snippets"], Path(mkdocs_yml).parent)
    raise ValueError(f"{mkdocs_yml} does not enable pymdownx.snippets")


def _absolute_base_paths(config: dict | None, base: Path) -> dict:
    config = dict(config or {})
    paths = config.get("base_path", ["."])
    paths = [paths] if isinstance(paths, str) else list(paths)
    config["base_path"] = [str((base / p).resolve()) for p in paths]
    return config


def expand_snippets(text: str, config: dict | None = None) -> str:
    """Expand ``--8<--`` includes with pymdownx.snippets (``config``: its options)."""
    if "--8<--" not in text:
        return text
    md = python_markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={
            "pymdownx.snippets": config if config is not None else snippets_config()
        },
    )
    return "\n".join(md.preprocessors["snippet"].run(text.split("\n")))


# --------------------------------------------------------------------------------------------
# The page, read into cells


@dataclass
class _Cell:
    kind: str  # "markdown" or "code"
    lines: list[str]
    hidden: bool = False  # code from a collapsed box: the source starts collapsed


def _dedent(line: str, indent: str) -> str:
    """A line of a block indented by ``indent``, as the tests dedent fences."""
    return line[len(indent) :] if line.startswith(indent) else line.lstrip()


def read_fence(lines: list[str], i: int) -> tuple[str, str, list[str], int]:
    """The fence opening at line i: (indent, info, body lines dedented, index after it)."""
    m = FENCE_OPEN.match(lines[i])
    indent, fence, info = m["indent"], m["fence"], m["info"].strip()
    close = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}[ \t]*$")
    j = i + 1
    while j < len(lines) and not close.match(lines[j]):
        j += 1
    if j == len(lines):
        raise ValueError(f"fence opened at line {i + 1} is never closed")
    return indent, info, [_dedent(ln, indent) for ln in lines[i + 1 : j]], j + 1


def _read_box(lines: list[str], i: int, indent: str) -> tuple[list[str], int]:
    """The content of an admonition or tab opened at line i: indented 4 more, or blank."""
    inner = indent + "    "
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or lines[j].startswith(inner)):
        j += 1
    while j > i + 1 and not lines[j - 1].strip():  # trailing blank lines are outside
        j -= 1
    return [ln[len(inner) :] for ln in lines[i + 1 : j]], j


def _cells(lines: list[str], hidden: bool = False) -> list[_Cell]:
    """Markdown and code cells of a Markdown text, in order."""
    cells: list[_Cell] = []

    def markdown(line: str) -> None:
        if not cells or cells[-1].kind != "markdown":
            cells.append(_Cell("markdown", []))
        cells[-1].lines.append(line)

    i = 0
    while i < len(lines):
        line = lines[i]
        if FENCE_OPEN.match(line):
            indent, info, body, nxt = read_fence(lines, i)
            if info == RUN_INFO:
                cells.append(_Cell("code", body, hidden=hidden))
            elif info != OUTPUT_INFO:
                for ln in lines[i:nxt]:
                    markdown(ln)
            i = nxt
            continue
        box = ADMONITION.match(line) or TAB.match(line)
        if box:
            body, nxt = _read_box(lines, i, box["indent"])
            groups = box.groupdict()
            title = groups["title"]
            if title is None:  # Material's default: the type, capitalised
                title = groups["type"].capitalize()
            collapsed = hidden or groups["marker"] == "???"
            inner = _cells(body, hidden=collapsed)
            title_line = f"> **{title}**" if title else None
            if title_line and (not inner or inner[0].kind != "markdown"):
                inner.insert(0, _Cell("markdown", []))
            first = True
            for cell in inner:
                if cell.kind == "markdown":
                    quoted = [f"> {ln}".rstrip() for ln in _trim(cell.lines)]
                    if first and title_line:
                        quoted = [title_line] + ([">"] if quoted else []) + quoted
                    cells.append(_Cell("markdown", quoted))
                    cells.append(_Cell("markdown", []))  # the box ends its cell
                else:
                    cells.append(cell)
                first = False
            i = nxt
            continue
        if HEADING.match(line) and cells and cells[-1].kind == "markdown" and cells[-1].lines:
            cells.append(_Cell("markdown", []))  # a markdown cell starts at each heading
        markdown(line)
        i += 1
    return cells


def _dedent_continuation(lines: list[str]) -> list[str]:
    """After a code cell cut out of a list item, the item's indented text that follows it.

    At the start of a cell it would be read as indented code: its leading lines lose their
    indentation (the first line's), up to the first line indented less.
    """
    first = next((ln for ln in lines if ln.strip()), "")
    indent = first[: len(first) - len(first.lstrip(" "))]
    if not indent:
        return lines
    out, k = [], 0
    while k < len(lines) and (not lines[k].strip() or lines[k].startswith(indent)):
        out.append(lines[k][len(indent) :])
        k += 1
    return out + lines[k:]


def _trim(lines: list[str]) -> list[str]:
    """Lines without the blank ones at the start and the end, and no runs of blank lines."""
    out: list[str] = []
    for ln in lines:
        if ln.strip() or (out and out[-1].strip()):
            out.append(ln.rstrip() if not ln.strip() else ln)
    while out and not out[-1].strip():
        out.pop()
    return out


# --------------------------------------------------------------------------------------------
# Links


def _absolute_link(target: str, lang: str, rel: str, site_url: str) -> str:
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or target.startswith("/"):
        return target  # already absolute
    path = parts.path
    if not path:  # an anchor on the page itself
        resolved = page_url_path(lang, rel)
    else:
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(rel), path))
        if joined.endswith((".md", ".ipynb")):
            resolved = page_url_path(lang, joined)
        else:  # a file of the site: a figure, an asset
            prefix = "" if lang == DEFAULT_LANGUAGE else f"{lang}/"
            resolved = prefix + joined
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return site_url.rstrip("/") + "/" + resolved + fragment


def _absolute_links(text: str, lang: str, rel: str, site_url: str) -> str:
    """Relative Markdown links and images made absolute; code (fences, spans) untouched.

    Code is set aside behind placeholders, not cut out, so that a link whose text is code
    (``[`(d_in, d_out)`](glossary.md#...)``) is still one link.
    """
    code = []

    def set_aside(m):
        code.append(m.group(0))
        return f"\x00{len(code) - 1}\x00"

    masked = _rewrite(CODE_IN_MARKDOWN.sub(set_aside, text), lang, rel, site_url)
    return re.sub("\x00(\\d+)\x00", lambda m: code[int(m[1])], masked)


def _rewrite(text: str, lang: str, rel: str, site_url: str) -> str:
    return LINK.sub(
        lambda m: f"{m[1]}({_absolute_link(m[2], lang, rel, site_url)}{m[3]})",
        text,
    )


# --------------------------------------------------------------------------------------------
# The notebook


def page_to_notebook(
    markdown_text: str,
    page_path: Path | str,
    *,
    site_url: str | None = None,
    snippets: dict | None = None,
    docs_dir: Path | None = None,
) -> nbformat.NotebookNode:
    """The notebook of a chapter page: its prose, formulas and code cells, in page order.

    ``markdown_text`` is the page's Markdown as written (includes not yet expanded; a YAML front
    matter is dropped, as MkDocs drops it) and ``page_path`` its file, ``docs/<lang>/<rel>``: it
    gives the language and resolves the page's relative links. With ``site_url`` (the site's base
    URL), relative links point into the site and a first note links the page (titled with the
    front matter's ``title``, else the page's first heading). ``snippets``: the
    pymdownx.snippets options (default: those of mkdocs.yml). ``docs_dir``: the folder of the
    language folders (default: the last folder of ``page_path`` named after a language).
    """
    lang, rel = language_and_rel(Path(page_path), docs_dir)
    # The YAML front matter, if any, is the page's metadata, not its text (MkDocs' own split).
    markdown_text, meta = get_data(markdown_text)
    text = expand_snippets(markdown_text, snippets)
    cells = [c for c in _cells(text.split("\n")) if c.kind == "code" or _trim(c.lines)]
    if cells and cells[0].kind == "markdown":  # the title in a cell of its own
        head = _trim(cells[0].lines)
        if head[0].startswith("# ") and _trim(head[1:]):
            cells[0:1] = [_Cell("markdown", head[:1]), _Cell("markdown", head[1:])]

    nb_cells = []
    for k, cell in enumerate(cells):
        cell_id = f"cell-{k:03d}"  # stable: the same page makes the same notebook
        if cell.kind == "code":
            source = "\n".join(cell.lines)
            metadata = {"jupyter": {"source_hidden": True}} if cell.hidden else {}
            nb_cells.append(nbformat.v4.new_code_cell(source, id=cell_id, metadata=metadata))
        else:
            lines = _trim(cell.lines)
            if k and cells[k - 1].kind == "code":
                lines = _dedent_continuation(lines)
            source = "\n".join(lines)
            if site_url:
                source = _absolute_links(source, lang, rel, site_url)
            nb_cells.append(nbformat.v4.new_markdown_cell(source, id=cell_id))

    if site_url:
        title = meta.get("title") if isinstance(meta.get("title"), str) else None
        nb_cells.insert(_after_title(nb_cells), _intro(nb_cells, lang, rel, site_url, title))

    nb = nbformat.v4.new_notebook(cells=nb_cells)
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
    }
    return nb


def _after_title(cells: list) -> int:
    """Where the note about the notebook goes: after the title, if the page starts with one."""
    if cells and cells[0].cell_type == "markdown" and cells[0].source.startswith("# "):
        return 1
    return 0


def _intro(
    cells: list, lang: str, rel: str, site_url: str, title: str | None
) -> nbformat.NotebookNode:
    """The first note: which page the notebook comes from (titled as the site titles it)."""
    if title is None:
        title = Path(rel).stem
        if cells and cells[0].cell_type == "markdown" and cells[0].source.startswith("# "):
            title = cells[0].source.split("\n", 1)[0][2:].strip()
    base = site_url.rstrip("/") + "/"
    text = INTRO[lang].format(
        title=title.replace("[", r"\[").replace("]", r"\]"),
        url=base + page_url_path(lang, rel),
        setup=base + page_url_path(lang, "setup.md"),
    )
    return nbformat.v4.new_markdown_cell(text, id="cell-intro")


def notebook_json(nb: nbformat.NotebookNode) -> str:
    """The notebook as a file: validated, stable key order, one line per source line."""
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


# --------------------------------------------------------------------------------------------
# The MkDocs hook

_pending: dict[str, tuple[Path, str]] = {}  # page's HTML file -> (notebook file, JSON)
_site_root: dict[str, str] = {}  # the site's base URL, as configured (before any language build)


def on_config(config):
    # mkdocs-static-i18n builds every language with this same config, once loaded; keep the
    # root as configured, in case a language build is given a site_url of its own.
    _site_root["url"] = config.get("site_url") or ""
    return config


def _chapter(page, config) -> tuple[str, str] | None:
    """(lang, rel) of a chapter page, None for any other page."""
    src = getattr(page.file, "abs_src_path", None)
    if not src or not str(src).endswith(".md"):
        return None
    try:
        lang, rel = language_and_rel(Path(src), Path(config["docs_dir"]))
    except ValueError:
        return None
    return (lang, rel) if is_chapter(rel) else None


def _dest_notebook(page, rel: str) -> Path:
    return Path(page.file.abs_dest_path).parent / notebook_name(rel)


def _download_href(page, rel: str) -> str:
    """The notebook's address relative to the page's own URL (it sits next to the HTML)."""
    page_dir = posixpath.dirname(page.file.dest_uri)  # "attention" for attention/index.html
    nb_uri = posixpath.join(page_dir, notebook_name(rel))
    # With directory URLs the page is served as its folder; otherwise as its own file, whose
    # folder is the same: either way the address is relative to page_dir.
    return posixpath.relpath(nb_uri, page_dir or ".")


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    chapter = _chapter(page, config)
    if chapter is None:
        return markdown
    lang, rel = chapter
    mdx = config["mdx_configs"].get("pymdownx.snippets")
    snippets = _absolute_base_paths(mdx, Path(config["config_file_path"]).parent)
    # The page as written (with its front matter, whose title names the page in the note), not
    # the Markdown other hooks may have changed for the renderer: the tests make the same notebook.
    nb = page_to_notebook(
        page.file.content_string,
        page.file.abs_src_path,
        site_url=_site_root.get("url", config.get("site_url")) or None,
        snippets=snippets,
        docs_dir=Path(config["docs_dir"]),
    )
    _pending[page.file.abs_dest_path] = (_dest_notebook(page, rel), notebook_json(nb))
    return markdown


def _button(lang: str, href: str) -> str:
    label = BUTTON_LABEL[lang]
    icon = _download_icon()
    return (
        f'<p class="chapter-notebook" data-search-exclude>'
        f'<a class="{BUTTON_CLASS}" href="{html.escape(href)}" '
        f'download="{html.escape(posixpath.basename(href))}" title="{label}">'
        f"{icon}{label}</a></p>"
    )


def _download_icon() -> str:
    """Material's download icon, as Material inlines its icons (an empty string without it)."""
    try:
        import material

        svg = Path(material.__file__).parent / "templates/.icons/material/download.svg"
        return f'<span class="twemoji">{svg.read_text(encoding="utf-8").strip()}</span> '
    except (ImportError, OSError):
        return ""


H1_END = re.compile(r"</h1>", re.I)


def on_page_content(html_text, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    chapter = _chapter(page, config)
    if chapter is None:
        return html_text
    lang, rel = chapter
    button = _button(lang, _download_href(page, rel))
    m = H1_END.search(html_text)
    if m is None:
        return button + html_text
    return html_text[: m.end()] + "\n" + button + html_text[m.end() :]


def on_post_page(output, page, config):  # noqa: ARG001 - MkDocs hook signature
    pending = _pending.pop(page.file.abs_dest_path, None)
    if pending is not None:
        path, text = pending
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return output


__all__ = [
    "is_chapter",
    "notebook_json",
    "notebook_name",
    "notebook_url_path",
    "page_to_notebook",
    "page_url_path",
]
