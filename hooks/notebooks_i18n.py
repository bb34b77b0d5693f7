"""Keep Jupyter notebooks rendered as pages under mkdocs-static-i18n.

mkdocs-static-i18n re-creates every file of the site as a plain MkDocs ``File`` in its
``on_files`` event (priority -100, after mkdocs-jupyter). A plain ``File`` whose name ends in
``.ipynb`` is not a documentation page, so every notebook silently comes out as a raw JSON
download instead of a rendered page (mkdocs-static-i18n issue #198); ``mkdocs build --strict``
does not notice. mkdocs-jupyter's own wrapper does exactly one thing: it declares ``.ipynb``
files to be documentation pages. This hook declares the same thing at the level of ``File``,
so the declaration survives the re-creation. ``tests/test_site_build.py`` guards the result.
"""

from __future__ import annotations

from mkdocs.structure.files import File

_ORIGINAL = File.is_documentation_page


def _is_documentation_page(self: File) -> bool:
    return self.src_uri.endswith(".ipynb") or _ORIGINAL(self)


def on_startup(command, dirty):  # noqa: ARG001 - MkDocs hook signature
    if File.is_documentation_page is not _is_documentation_page:
        File.is_documentation_page = _is_documentation_page
