"""Keep Jupyter notebooks rendered as pages under mkdocs-static-i18n, and their cache.

mkdocs-static-i18n re-creates every file of the site as a plain MkDocs ``File`` in its
``on_files`` event (priority -100, after mkdocs-jupyter). A plain ``File`` whose name ends in
``.ipynb`` is not a documentation page, so every notebook silently comes out as a raw JSON
download instead of a rendered page (mkdocs-static-i18n issue #198); ``mkdocs build --strict``
does not notice. mkdocs-jupyter's own wrapper does exactly one thing: it declares ``.ipynb``
files to be documentation pages. This hook declares the same thing at the level of ``File``,
so the declaration survives the re-creation. ``tests/test_site_build.py`` guards the result.

mkdocs-jupyter keeps each executed notebook in ``.cache/mkdocs-jupyter/`` and, at the end of a
build, deletes the entries that build did not use. mkdocs-static-i18n runs one build per
language, so the English build deleted the Italian notebooks' entries and every build executed
them again: this hook hands each language's build the entries the earlier ones used.

A quick build (``SITE_QUICK=1``, ``site_cache.py``) shows the notebooks without executing them,
and deletes no entry.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

import site_cache

_ORIGINAL = File.is_documentation_page
_USED: set = set()  # the cache entries used by the languages built so far


def _is_documentation_page(self: File) -> bool:
    return self.src_uri.endswith(".ipynb") or _ORIGINAL(self)


def on_startup(command, dirty):  # noqa: ARG001 - MkDocs hook signature
    if File.is_documentation_page is not _is_documentation_page:
        File.is_documentation_page = _is_documentation_page


def on_config(config):
    jupyter = config.plugins.get("mkdocs-jupyter")
    if jupyter is not None and site_cache.quick():
        jupyter.config["execute_ignore"] = ["*.ipynb"]
    return config


# After mkdocs-jupyter's on_pre_build (priority 0), which starts its set of used entries afresh.
@event_priority(-50)
def on_pre_build(config):
    i18n, jupyter = config.plugins.get("i18n"), config.plugins.get("mkdocs-jupyter")
    if i18n is None or not i18n.building:  # the first language: a new build
        _USED.clear()
    used = getattr(jupyter, "_used_cache_paths", None)
    if isinstance(used, set):
        used.update(_USED)


# Before mkdocs-jupyter's on_post_build (priority 0), which deletes the entries not used.
@event_priority(50)
def on_post_build(config):
    jupyter = config.plugins.get("mkdocs-jupyter")
    used = getattr(jupyter, "_used_cache_paths", None)
    if not isinstance(used, set):
        return
    if site_cache.quick():  # it ran no notebook: the executed ones stay for the whole build
        used.update(Path(jupyter.config["cache_dir"]).glob("*.json"))
    _USED.update(used)
