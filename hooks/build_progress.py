"""With ``SITE_PROGRESS=1`` (``scripts/serve.py``), a bar over the pages each language's build
writes: live on a terminal, a line as the language starts otherwise (``site_cache.progress``)."""

from __future__ import annotations

from mkdocs.plugins import event_priority

import site_cache

_bar = None


def _close() -> None:
    global _bar
    if _bar is not None:
        _bar.close()
        _bar = None


# After mkdocs-static-i18n (-100) has kept this language's files.
@event_priority(-200)
def on_files(files, config):
    global _bar
    _close()
    lang = getattr(config.plugins.get("i18n"), "current_language", None) or "site"
    _bar = site_cache.progress(f"pages ({lang})", len(files.documentation_pages()), "page")
    return files


def on_post_page(output, page, config):  # noqa: ARG001 - MkDocs hook signature
    if _bar is not None:
        _bar.update()
    return output


# Before mkdocs-static-i18n (-100) starts the next language's build.
@event_priority(100)
def on_post_build(config):  # noqa: ARG001 - MkDocs hook signature
    _close()
