"""On the setup page, where to get the code: the wheel on the site itself, the repository.

Every build of the site puts the package's wheel and sdist in ``downloads/``, built by
``python -m build`` from a copy of the same working tree as the pages (:func:`dists`; a copy,
so that the build's staging folders never land in the working tree). They are kept in
``.cache/downloads/`` under the hash of the files they are made from; a quick build
(``SITE_QUICK=1``, ``site_cache.py``) does not build them, and leaves them out until the whole
build has them. The setup page (``docs/<lang>/setup.md``, the same placeholders in both
languages) says how to install the wheel; this hook replaces, at build time:

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
import shutil
import subprocess
import sys
import tempfile
import tomllib
from functools import cache
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

import site_cache

ROOT = Path(__file__).resolve().parent.parent
CACHE = site_cache.CACHE / "downloads"
DEST = "downloads"
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


# --------------------------------------------------------------------------------------------
# The wheel and the sdist


def dist_sources() -> list[Path]:
    """The files ``python -m build`` makes the wheel and the sdist from: the project's metadata,
    the package (code and data), and the test files setuptools puts in the sdist."""
    top = [
        ROOT / n for n in ("pyproject.toml", "README.md", "setup.cfg", "setup.py", "MANIFEST.in")
    ]
    licences = sorted(ROOT.glob("LICEN[CS]E*"))
    package = [p for p in sorted((ROOT / "src").rglob("*")) if p.is_file() and not _skipped(p)]
    tests = sorted((ROOT / "tests").glob("test*.py"))
    return [p for p in top if p.is_file()] + licences + package + tests


def _skipped(path: Path) -> bool:
    return any(part == "__pycache__" or part.endswith(".egg-info") for part in path.parts)


def dists(*, build: bool = True) -> list[Path]:
    """The wheel and the sdist of the working tree, from the cache or built now (``build``);
    an empty list when they are not in the cache and ``build`` is False."""
    names = download_names()
    folder = CACHE / site_cache.digest({"names": names}, dist_sources())
    if all((folder / name).is_file() for name in names):
        return [folder / name for name in names]
    if not build:
        return []
    scratch = site_cache.CACHE / "tmp"  # on the cache's file system: the move is a rename
    scratch.mkdir(parents=True, exist_ok=True)
    with (
        site_cache.progress("wheel and sdist", 1, "build") as bar,
        tempfile.TemporaryDirectory(prefix="dists-", dir=scratch) as tmp,
    ):
        copy, out = Path(tmp) / "project", Path(tmp) / "out"
        for path in dist_sources():
            target = copy / path.relative_to(ROOT)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        proc = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(copy)],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            output = proc.stdout[-3000:] + proc.stderr[-3000:]
            raise RuntimeError(f"python -m build failed:\n{output}")
        made = sorted(p.name for p in out.iterdir())
        if made != sorted(names):
            raise RuntimeError(f"python -m build made {made}, not {sorted(names)}")
        CACHE.mkdir(parents=True, exist_ok=True)
        try:
            out.rename(folder)
        except OSError:  # another build has just put the same files there
            pass
        for old in CACHE.iterdir():  # one entry: the files of the current tree
            if old != folder:
                shutil.rmtree(old, ignore_errors=True)
        bar.update()
    return [folder / name for name in names]


# After mkdocs-static-i18n (-100) has laid out this language's files; in the default language's
# build only: the files are the same for every language, at the site's root.
@event_priority(-110)
def on_files(files, config):
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None)
    if i18n is not None and lang != i18n.default_language:
        return files
    for path in dists(build=not site_cache.quick()):
        src_uri = f"{lang}/{DEST}/{path.name}" if lang else f"{DEST}/{path.name}"
        generated = File.generated(config, src_uri, abs_src_path=str(path))
        generated.dest_uri = f"{DEST}/{path.name}"
        files.append(generated)
    return files
