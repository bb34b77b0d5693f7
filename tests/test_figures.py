"""Every figure of the site is drawn by code, in both languages, and each one is referenced."""

from __future__ import annotations

import re

import pytest

from doctools import DOCS, LANGUAGES, load_hook, pages, read_page

figures_hook = load_hook("figures.py")

FIGURES = figures_hook.figure_modules()


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("name", sorted(FIGURES))
def test_figure_renders_to_svg(name, lang):
    svg = figures_hook.render_svg(FIGURES[name], lang)
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    # Nothing the browser would fetch: no href or url() to another host.
    outside = re.search(rb"""(href|src)=["']https?:|url\(["']?https?:""", svg)
    assert not outside, f"the SVG links outside: {outside and outside.group(0)}"


@pytest.mark.parametrize("lang", LANGUAGES)
def test_pages_show_only_figures_that_exist(lang):
    missing = []
    for path in pages(lang):
        for target in re.findall(r"!\[[^\]]*\]\((figures/[^)\s]+)\.svg\)", read_page(path)):
            name = target.split("/", 1)[1]
            if name not in FIGURES:
                missing.append(f"{path.relative_to(DOCS)}: {target}.svg (no figures/{name}.py)")
    assert not missing, "\n".join(missing)
