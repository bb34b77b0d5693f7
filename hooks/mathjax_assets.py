"""Serve MathJax from the site itself: no CDN, no network.

The MathJax 3.2.2 distribution comes from the PyPI package ``django-static-mathjax``
(importable as ``mathjax``; Django is not needed). After the build, its ``es5/`` folder is copied
to ``assets/mathjax/`` at the site root; every page, in both languages, loads
``assets/mathjax/tex-chtml.js`` from there (see ``extra_javascript`` in mkdocs.yml).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mathjax

ES5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
# The speech-rule engine is only loaded by the accessibility explorer, which we do not enable.
SKIP = shutil.ignore_patterns("sre", "*-full*.js", "*-speech*.js", "node-main.js")


def on_post_build(config):
    target = Path(config["site_dir"]) / "assets" / "mathjax"
    if not (ES5 / "tex-chtml.js").is_file():
        raise RuntimeError(
            f"MathJax not found at {ES5}: install the docs extra (pip install -e '.[docs]')."
        )
    if not (target / "tex-chtml.js").is_file():
        shutil.copytree(ES5, target, ignore=SKIP, dirs_exist_ok=True)
