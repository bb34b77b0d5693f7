"""What the reference scripts share: a file's checksum and an installed package's version.

Imported by ``make_minilm_reference.py`` and ``make_smollm2_reference.py`` (run from this
folder's parent with ``python scripts/<name>.py``: Python puts ``scripts/`` on ``sys.path``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
from pathlib import Path


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in chunks of 1 MiB."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def version(dist: str) -> str:
    """The installed version of a distribution, or "not installed"."""
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "not installed"
