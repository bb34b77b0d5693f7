"""Render the site's plots from code at build time: no image is pasted into the pages.

Each module ``figures/<name>.py`` defines ``figure(lang: str) -> matplotlib.figure.Figure``
(``lang`` is ``"it"`` or ``"en"``, for titles and labels). For the language being built, this
hook renders every figure to SVG (text as paths: no font is fetched) and adds it to the site as
``figures/<name>.svg`` next to the pages of that language, so a page ``docs/<lang>/x.md`` shows
it with ``![...](figures/<name>.svg)``. The tests render the same modules
(``tests/test_figures.py``).
"""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402
from mkdocs.plugins import event_priority  # noqa: E402
from mkdocs.structure.files import File  # noqa: E402

FIGURES_DIR = Path(__file__).resolve().parent.parent / "figures"
LANGUAGES = ("it", "en")


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


def _current_language(config) -> str:
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None)
    return lang if lang in LANGUAGES else LANGUAGES[0]


# After mkdocs-static-i18n (-100) has laid out this language's files.
@event_priority(-110)
def on_files(files, config):
    lang = _current_language(config)
    default = LANGUAGES[0]
    for name, path in figure_modules().items():
        src_uri = f"{lang}/figures/{name}.svg"
        dest_uri = f"figures/{name}.svg" if lang == default else src_uri
        generated = File.generated(config, src_uri, content=render_svg(path, lang))
        generated.dest_uri = dest_uri  # url and abs_dest_path follow (computed lazily)
        files.append(generated)
    return files
