"""On the setup page, where to get the code: the wheel on the published site, the repository.

``make site`` builds the package's wheel and sdist (``python -m build``) from the same working
tree as the pages, into ``site/downloads/``. The setup page (``docs/<lang>/setup.md``, the same
placeholders in both languages) says how to install it with one line; this hook replaces, at
build time:

- ``{{ wheel_url }}`` with ``<site_url>downloads/transformer_np-<version>-py3-none-any.whl``;
- ``{{ sdist_url }}`` with ``<site_url>downloads/transformer_np-<version>.tar.gz``;
- ``{{ repo_url }}`` with ``repo_url`` (``REPO_URL`` in the environment, see mkdocs.yml).

``site_url`` comes from ``SITE_URL`` (mkdocs.yml), the version from pyproject.toml (the file
``python -m build`` reads). The lines between ``<!-- if repo_url -->`` and ``<!-- end if -->``
are kept only when ``repo_url`` is set. ``tests/test_site_build.py`` checks the result against
the wheel that ``python -m build`` makes.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("setup.md",)
IF_REPO = re.compile(r"^<!-- if repo_url -->\n(?P<body>.*?)^<!-- end if -->\n", re.M | re.S)
PLACEHOLDER = re.compile(r"\{\{\s*(wheel_url|sdist_url|repo_url)\s*\}\}")


@cache
def project() -> tuple[str, str]:
    """(distribution name as in the file names, version) from pyproject.toml."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return re.sub(r"[-_.]+", "_", meta["name"]).lower(), meta["version"]


def download_names() -> tuple[str, str]:
    """File names of the wheel and the sdist that ``python -m build`` writes."""
    name, version = project()
    return f"{name}-{version}-py3-none-any.whl", f"{name}-{version}.tar.gz"


def values(site_url: str, repo_url: str) -> dict[str, str]:
    base = site_url if site_url.endswith("/") else site_url + "/"
    wheel, sdist = download_names()
    return {
        "wheel_url": f"{base}downloads/{wheel}",
        "sdist_url": f"{base}downloads/{sdist}",
        "repo_url": repo_url,
    }


def fill(markdown: str, site_url: str, repo_url: str) -> str:
    markdown = IF_REPO.sub(lambda m: m["body"] if repo_url else "", markdown)
    filled = values(site_url, repo_url)
    return PLACEHOLDER.sub(lambda m: filled[m[1]], markdown)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    rel = page.file.src_uri.split("/", 1)[-1]
    if rel not in PAGES:
        return markdown
    # mkdocs-static-i18n builds every language with the same config: site_url is the site's root.
    return fill(markdown, config.get("site_url") or "", config.get("repo_url") or "")
