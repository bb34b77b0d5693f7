"""Make Material's language switcher land on the same page in the other language.

Material's switcher (its JavaScript) reads the ``<link rel="alternate" hreflang=...>`` tags of the
page head as the *roots* of the languages, fetches ``<root>/sitemap.xml`` for each, and uses them to
map the current page to its counterpart. mkdocs-static-i18n, for its part, points the switcher's
menu links at the counterpart page itself (good) but uses the same per-page links in the head, and
writes a single sitemap at the site root. The browser then asks for ``/setup/sitemap.xml`` and
``/en/setup/sitemap.xml`` and logs two 404 errors on every page.

This hook keeps the menu links as i18n made them, and:

- points the head's alternate links at the language roots (the per-page alternates are still in
  the sitemap, as ``xhtml:link`` entries, where search engines read them);
- copies the root sitemap, which lists every page of every language with its alternates, into each
  language folder once all languages are built.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from mkdocs.plugins import event_priority

HEAD_ALTERNATE = re.compile(r'<link rel="alternate" href="[^"]*" hreflang="(?P<lang>[\w-]+)">')


def _i18n(config):
    return config.plugins.get("i18n")


def on_post_page(output, page, config):  # noqa: ARG001 - MkDocs hook signature
    i18n = _i18n(config)
    roots = {alt["lang"]: alt["link"] for alt in (getattr(i18n, "extra_alternate", None) or [])}
    if not roots:
        return output
    head_end = output.find("</head>")
    head = HEAD_ALTERNATE.sub(
        lambda m: (
            f'<link rel="alternate" href="{roots[m["lang"]]}" hreflang="{m["lang"]}">'
            if m["lang"] in roots
            else m[0]
        ),
        output[:head_end],
    )
    return head + output[head_end:]


# After mkdocs-static-i18n (-100) has built the other languages, inside its own on_post_build,
# all into the same site_dir.
@event_priority(-200)
def on_post_build(config):
    i18n = _i18n(config)
    if i18n is None or i18n.building:  # an inner, per-language build: wait for the outer one
        return
    site = Path(config["site_dir"])
    for lang in i18n.all_languages:
        if lang == i18n.default_language or not (site / lang).is_dir():
            continue
        for name in ("sitemap.xml", "sitemap.xml.gz"):
            if (site / name).is_file():
                shutil.copyfile(site / name, site / lang / name)
