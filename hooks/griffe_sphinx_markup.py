"""A griffe extension for the API reference: the docstrings' reST markup, as the site renders it.

Not a MkDocs hook: mkdocstrings loads it (``extensions:`` of the python handler in mkdocs.yml).
The package's numpydoc docstrings use a few reST constructs that mkdocstrings would show raw:

- cross-reference roles (``:func:`attention_steps```, ``:class:`~transformer_np.Transformer```,
  ``:meth:``, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:``, ``:obj:``) become autorefs links
  to the entry of the reference (``[`attention_steps`][transformer_np.attention.attention_steps]``)
  when the target is documented there, plain inline code otherwise (a private helper, NumPy);
  names are looked up as Python would, from the docstring's object outwards;
- ``:math:`...``` becomes ``$...$`` and the ``.. math::`` directive a ``$$...$$`` block
  (``aligned`` when it has several lines), which pymdownx.arithmatex hands to MathJax.

The docstrings in ``src/`` stay plain numpydoc, as a reader of the code sees them.
"""

from __future__ import annotations

import re

import griffe

PACKAGE = "transformer_np"
NOT_API = {"examples"}  # the demos: not part of the reference

ROLE = re.compile(r":(?P<role>func|class|meth|mod|data|attr|exc|obj):`(?P<body>[^`]+)`")
MATH_ROLE = re.compile(r":math:`(?P<tex>[^`]+)`")
MATH_DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. math::[ \t]*(?P<inline>.*)$")
TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


def _is_private(name: str) -> bool:
    return name.startswith("_")


def _get(pkg: griffe.Module, path: str):
    """The griffe object at a dotted path inside the package, or None."""
    if path == pkg.path:
        return pkg
    if not path.startswith(pkg.path + "."):
        return None
    try:
        return pkg[path[len(pkg.path) + 1 :]]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def _canonical(obj) -> str | None:
    try:
        return obj.canonical_path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None


def documented_paths(pkg: griffe.Module) -> set[str]:
    """Canonical paths of what the reference renders: each public module, what it exports
    (``__all__``), and the public members of the classes among them."""
    paths = set()
    for mod_name, module in pkg.modules.items():
        if _is_private(mod_name) or mod_name in NOT_API:
            continue
        paths.add(module.path)
        for name in module.exports or ():
            member = module.members.get(str(name))
            canonical = _canonical(member) if member is not None else None
            if canonical is None:
                continue
            paths.add(canonical)
            target = member.final_target if member.is_alias else member
            if target.is_class:
                paths.update(f"{canonical}.{m}" for m in target.members if not _is_private(m))
    return paths


def _scopes(obj) -> list[str]:
    """Where a name in ``obj``'s docstring is looked up: obj, its parents, the package."""
    scopes = []
    while obj is not None:
        scopes.append(obj.path)
        obj = obj.parent
    return scopes


def resolve(pkg: griffe.Module, obj, target: str, documented: set[str]) -> str | None:
    """The canonical path of a role's target as seen from ``obj``, if the reference has it."""
    target = target.lstrip(".")
    if target.startswith(PACKAGE + ".") or target == PACKAGE:
        candidates = [target]
    else:
        candidates = [f"{scope}.{target}" for scope in _scopes(obj)]
    for path in candidates:
        found = _get(pkg, path)
        if found is None:
            continue
        canonical = _canonical(found)
        return canonical if canonical in documented else None
    return None


def _role(pkg, obj, documented, m: re.Match) -> str:
    body = m["body"].strip()
    titled = TITLED.match(body)
    if titled:
        title, target = titled["title"], titled["target"]
    else:
        target = body.lstrip("~!")
        title = target.rsplit(".", 1)[-1] if body.startswith("~") else target
    if body.startswith("!"):
        return f"`{title}`"
    path = resolve(pkg, obj, target.lstrip("~"), documented)
    return f"[`{title}`][{path}]" if path else f"`{title}`"


def _math_blocks(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = MATH_DIRECTIVE.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = m["indent"]
        body = [m["inline"].strip()] if m["inline"].strip() else []
        i += 1
        while i < len(lines) and (
            not lines[i].strip()
            and i + 1 < len(lines)
            and len(lines[i + 1]) - len(lines[i + 1].lstrip()) > len(indent)
            or lines[i].strip()
            and len(lines[i]) - len(lines[i].lstrip()) > len(indent)
        ):
            if lines[i].strip():
                body.append(lines[i].strip())
            i += 1
        tex = "\n".join(body)
        if "\\\\" in tex or re.search(r"(?<!\\)&", tex):
            tex = "\\begin{aligned}\n" + tex + "\n\\end{aligned}"
        out += ["", f"{indent}$$"] + [f"{indent}{ln}" for ln in tex.split("\n")]
        out += [f"{indent}$$", ""]
    return "\n".join(out)


def convert(text: str, pkg: griffe.Module, obj, documented: set[str]) -> str:
    text = _math_blocks(text)
    text = MATH_ROLE.sub(lambda m: f"${m['tex']}$", text)
    return ROLE.sub(lambda m: _role(pkg, obj, documented, m), text)


def _walk(obj):
    yield obj
    for member in obj.members.values():
        if member.is_alias:
            continue  # its docstring is the target's, converted where it is defined
        if member.is_module or member.is_class:
            yield from _walk(member)
        else:
            yield member


class SphinxMarkup(griffe.Extension):
    """Rewrite reST roles and math in every docstring of the package, once it is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:  # noqa: ARG002
        if pkg.path != PACKAGE:
            return
        documented = documented_paths(pkg)
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, pkg, obj, documented)
