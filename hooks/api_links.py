"""Link a chapter's first mention of a public name to its entry in the API reference.

The reference pages (``docs/<lang>/reference/<module>.md``) are rendered by mkdocstrings from
the docstrings; every documented object gets an anchor named by its dotted path
(``transformer_np.functional.softmax``). In every other page, this hook turns the first
inline-code mention of a public name of the package -- ``softmax`` or ``softmax(...)``, a name
of ``transformer_np.__all__`` or ``transformer_np.pretrained.__all__`` -- into a cross-reference
``[`softmax`][transformer_np.functional.softmax]``, which mkdocs-autorefs resolves to the
reference page of the same language (``resolve_closest`` in mkdocs.yml). The pages' sources stay
as they are written: the link is made at build time, in the Markdown handed to the renderer, after
every other hook has read it (the chapter notebooks get the text as written).

Left alone: code blocks, headings, admonition and tab titles, raw HTML lines, and inline code
that is already inside a link. A name whose module has no reference page is linked to a
reference page whose module exports it (``NoamSchedule`` is defined in one module and
re-exported by ``optim``); a name no reference page documents is not linked, and
``tests/test_reference_pages.py`` fails on it.
"""

from __future__ import annotations

import importlib
import re
from functools import cache

from mkdocs.plugins import event_priority

REFERENCE_DIR = "reference/"
PACKAGES = ("transformer_np", "transformer_np.pretrained")

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})")
# Lines whose inline code must stay as it is: headings, admonition / details / tab titles, HTML.
SKIP_LINE = re.compile(r"^\s*(?:#{1,6}\s|!!!|\?\?\?|===\s|<)")
# An existing link or image, inline or by reference: [text](url), [text][id], ![alt](src).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\](?:\([^)]*\)|\[[^\]]*\])")
# A single-backtick code span on one line.
CODE_SPAN = re.compile(r"(?<!`)`(?P<code>[^`\n]+)`(?!`)")
NAME_OR_CALL = re.compile(r"^(?P<name>[A-Za-z]\w*)(?:\(.*\))?$")


@cache
def public_names() -> dict[str, tuple[str, ...]]:
    """Every public name of the package -> the modules that may document it, best first.

    First the module that defines it, then every other module that exports it in ``__all__``
    (e.g. a name re-exported by another module).
    """
    out: dict[str, tuple[str, ...]] = {}
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        for name in package.__all__:
            obj = getattr(package, name)
            defined_in = getattr(obj, "__module__", None) or package_name
            out[name] = (defined_in, package_name)
    return out


@cache
def module_exports(module_name: str) -> frozenset[str]:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return frozenset()
    return frozenset(getattr(module, "__all__", ()))


def reference_modules(files) -> list[str]:
    """Dotted names of the modules that have a reference page in this language, in page order."""
    modules = []
    for f in files.documentation_pages():
        # i18n (folder structure) keeps the language folder in src_uri: "en/reference/x.md"
        uri = f.src_uri
        rel = uri.split("/", 1)[1] if uri.split("/", 1)[0] in ("it", "en") else uri
        if rel.startswith(REFERENCE_DIR) and rel.endswith(".md"):
            modules.append("transformer_np." + rel[len(REFERENCE_DIR) : -3].replace("/", "."))
    return modules


def targets(documented_modules: list[str]) -> dict[str, str]:
    """Public name -> the autorefs identifier of its reference entry (``module.name``)."""
    documented = set(documented_modules)
    out = {}
    for name, (defined_in, _package) in public_names().items():
        if defined_in in documented:
            out[name] = f"{defined_in}.{name}"
            continue
        for module in documented_modules:  # a page whose module re-exports it
            if name in module_exports(module):
                out[name] = f"{module}.{name}"
                break
    return out


def _blank_fences(lines: list[str]) -> list[bool]:
    """True for every line that is part of a fenced code block (fences may be indented)."""
    in_code = [False] * len(lines)
    i = 0
    while i < len(lines):
        m = FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m["indent"], m["fence"]
        close = re.compile(rf"^{re.escape(indent)}{fence[0]}{{{len(fence)},}}[ \t]*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        for k in range(i, min(j, len(lines) - 1) + 1):
            in_code[k] = True
        i = j + 1
    return in_code


def link_first_mentions(markdown: str, name_to_id: dict[str, str]) -> tuple[str, list[str]]:
    """The Markdown with the first eligible mention of each name linked; and the names linked."""
    lines = markdown.split("\n")
    in_code = _blank_fences(lines)
    linked: list[str] = []
    for i, line in enumerate(lines):
        if in_code[i] or "`" not in line or SKIP_LINE.match(line):
            continue
        lines[i] = _link_line(line, name_to_id, linked)
    return "\n".join(lines), linked


def _link_line(line: str, name_to_id: dict[str, str], linked: list[str]) -> str:
    """One line with its not yet linked mentions linked (``linked`` grows in place)."""
    inside_links = [m.span() for m in LINK.finditer(line)]

    def replace(m: re.Match) -> str:
        code = m["code"]
        if any(a <= m.start() < b for a, b in inside_links):
            return m[0]
        nm = NAME_OR_CALL.match(code.strip())
        if not nm or nm["name"] not in name_to_id or nm["name"] in linked:
            return m[0]
        linked.append(nm["name"])
        return f"[`{code}`][{name_to_id[nm['name']]}]"

    return CODE_SPAN.sub(replace, line)


# After the other hooks' on_page_markdown (default priority 0): chapter_notebooks.py turns the
# page's Markdown into a notebook, which should get the text as written, without autorefs links.
@event_priority(-50)
def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    uri = page.file.src_uri
    if not uri.endswith(".md") or f"/{REFERENCE_DIR}" in f"/{uri}":
        return markdown
    name_to_id = targets(reference_modules(files))
    if not name_to_id:
        return markdown
    return link_first_mentions(markdown, name_to_id)[0]
