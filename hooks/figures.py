"""Render the site's plots from code at build time: no image is pasted into the pages.

Each module ``figures/<name>.py`` defines ``figure(lang: str) -> matplotlib.figure.Figure``
(``lang`` is ``"it"`` or ``"en"``, for titles and labels). For the language being built, this
hook renders every figure to SVG (text as paths: no font is fetched) and adds it to the site as
``figures/<name>.svg`` next to the pages of that language, so a page ``docs/<lang>/x.md`` shows
it with ``![...](figures/<name>.svg)``. The tests render the same modules
(``tests/test_figures.py``).

A figure is kept in ``.cache/figures/`` under the hash of its module, the package's code and data,
the model files, Matplotlib's version and the language (``site_cache.py``): a build with nothing
changed reads the files. A quick build (``SITE_QUICK=1``) draws no figure: one not in the cache is
a placeholder that says it is being drawn.
"""

from __future__ import annotations

import html
import importlib.util
import io
from pathlib import Path

import matplotlib

import site_cache

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402
from mkdocs.plugins import event_priority  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

FIGURES_DIR = Path(__file__).resolve().parent.parent / "figures"
LANGUAGES = ("it", "en")
CACHE = site_cache.CACHE / "figures"
PENDING = {"it": "Figura in preparazione…", "en": "Figure being drawn…"}


def figure_modules() -> dict[str, Path]:
    """Every figure module, by name (``figures/_*.py`` are helpers, not figures)."""
    return {p.stem: p for p in sorted(FIGURES_DIR.glob("*.py")) if not p.name.startswith("_")}


def render_svg(path: Path, lang: str) -> bytes:
    """Import ``path`` fresh, call its ``figure(lang)`` and return the figure as SVG bytes."""
    spec = importlib.util.spec_from_file_location(f"_site_figure_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fig = module.figure(lang)
    if not isinstance(fig, Figure):
        raise TypeError(f"{path}: figure({lang!r}) must return a Figure, got {type(fig)}")
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "transformer-da-zero", "svg.fonttype": "path"}):
        # No date (reproducible output) and no RDF metadata (it names purl.org/w3.org schemas).
        metadata = {"Date": None, "Format": None, "Type": None, "Creator": None}
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata=metadata)
    return buf.getvalue()


def figure_key(path: Path, lang: str, package: str) -> str:
    """The hash of what a figure depends on (``package``: the hash of the package's files)."""
    helpers = sorted(FIGURES_DIR.glob("_*.py"))
    inputs = {"lang": lang, "matplotlib": matplotlib.__version__, "package": package}
    return site_cache.digest(inputs, [path, *helpers])


def package_key() -> str:
    """The hash of the package's code and data and of the model files, which figures draw."""
    return site_cache.digest({"models": site_cache.model_files()}, site_cache.package_files())


def placeholder_svg(lang: str) -> bytes:
    """What a quick build shows for a figure that is not drawn yet."""
    text = html.escape(PENDING[lang])
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="80" viewBox="0 0 640 80">'
        '<rect width="640" height="80" fill="none" stroke="#9e9e9e" stroke-dasharray="6 4"/>'
        f'<text x="320" y="45" text-anchor="middle" font-family="sans-serif" font-size="18" '
        f'fill="#757575">{text}</text></svg>'
    ).encode()


def cached_svg(path: Path, lang: str, package: str) -> Path:
    """Where the cache keeps a figure's SVG (the file may not be there yet)."""
    return CACHE / f"{path.stem}-{lang}-{figure_key(path, lang, package)}.svg"


def draw(path: Path, lang: str, cached: Path) -> None:
    """Render a figure into the cache (the older entries of the same figure are removed)."""
    content = render_svg(path, lang)
    for old in CACHE.glob(f"{path.stem}-{lang}-*.svg"):  # one entry per figure and language
        old.unlink(missing_ok=True)
    site_cache.write_atomic(cached, content)


def _current_language(config) -> str:
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None)
    return lang if lang in LANGUAGES else LANGUAGES[0]


# After mkdocs-static-i18n (-100) has laid out this language's files.
@event_priority(-110)
def on_files(files, config):
    lang = _current_language(config)
    default = LANGUAGES[0]
    package = package_key()
    modules = figure_modules()
    cached = {name: cached_svg(path, lang, package) for name, path in modules.items()}
    missing = [name for name in modules if not cached[name].is_file()]
    if missing and not site_cache.quick():  # a quick build shows placeholders instead
        with site_cache.progress(f"figures ({lang})", len(missing), "figure") as bar:
            for name in missing:
                draw(modules[name], lang, cached[name])
                bar.update()
    for name in modules:
        src_uri = f"{lang}/figures/{name}.svg"
        dest_uri = f"figures/{name}.svg" if lang == default else src_uri
        content = cached[name].read_bytes() if cached[name].is_file() else placeholder_svg(lang)
        generated = File.generated(config, src_uri, content=content)
        generated.dest_uri = dest_uri  # url and abs_dest_path follow (computed lazily)
        files.append(generated)
    return files
