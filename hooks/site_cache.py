"""What the hooks share about the heavy parts of the build: their cache, the quick build that
leaves them for later, and the progress they show.

The heavy parts are the figures (``figures.py``), the data of the interactive views
(``look_inside.py``) and the package's wheel and sdist (``downloads.py``); mkdocs-jupyter's
executed notebooks are the fourth. Each is kept in ``.cache/<name>/`` under the hash of everything
it depends on (:func:`digest`), so a build with nothing changed reads files instead of computing.

Two environment variables, set by ``scripts/serve.py`` (a plain ``mkdocs build`` sets neither):

- ``SITE_QUICK=1``: a quick build. A heavy part that is not in the cache is not computed: a figure
  is a placeholder, a view says its data are being computed, the downloads are left out, the
  notebooks are shown without running them. The server shows this site at once and builds the
  whole one behind it.
- ``SITE_PROGRESS=1``: each heavy part says what it does on stderr, with a live tqdm bar on a
  terminal and a line as it starts otherwise.

This module is not a hook: the hooks import it (MkDocs puts a hook's folder on ``sys.path`` while
it loads the hook).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
PACKAGE = ROOT / "src" / "transformer_np"
QUICK_ENV, PROGRESS_ENV = "SITE_QUICK", "SITE_PROGRESS"


def quick() -> bool:
    """Whether this is a quick build (heavy parts only from the cache)."""
    return os.environ.get(QUICK_ENV) == "1"


def file_id(path: Path) -> list:
    """What stands for a large file in a hash: its name, size and modification time."""
    stat = path.stat()
    return [path.name, stat.st_size, stat.st_mtime_ns]


def package_files() -> list[Path]:
    """The package's code and shipped data (checkpoints, saved results, texts), in a fixed order."""
    return sorted(
        p
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    )


def model_files() -> list:
    """The files of the installed model packages (MiniLM, SmolLM2) as :func:`file_id`, or a
    note that a package is missing."""
    ids = []
    try:
        from transformer_np.pretrained.checkpoint import find_model_dir

        ids += [file_id(p) for p in sorted(find_model_dir().iterdir()) if p.is_file()]
    except (ImportError, OSError):
        ids.append("no minilm")
    try:
        from transformer_np.pretrained.gguf import find_smollm2_file

        ids.append(file_id(find_smollm2_file()))
    except (ImportError, OSError):
        ids.append("no smollm2")
    return ids


def digest(inputs, files=()) -> str:
    """A short hash of ``inputs`` (anything JSON can write) and of the ``files``' paths and
    bytes."""
    h = hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode())
    for path in files:
        path = Path(path)
        h.update(path.relative_to(ROOT).as_posix().encode() if path.is_relative_to(ROOT) else b"")
        h.update(path.read_bytes())
    return h.hexdigest()[:20]


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file: a reader never sees half of it, and
    two builds writing the same entry do not mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def progress(desc: str, total: int, unit: str):
    """A tqdm bar over a heavy part's ``total`` items, with ``SITE_PROGRESS=1``: live on a
    terminal, else one line as it starts and the bar draws nothing. Without it, nothing."""
    from tqdm import tqdm

    shown = os.environ.get(PROGRESS_ENV) == "1"
    if shown and sys.stderr.isatty():
        return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)
    if shown:
        print(f"{desc}: 0/{total}", file=sys.stderr, flush=True)
    return tqdm(total=total, disable=True)
