"""CONTRIBUTING.md's map of the package stays true: every module has its row, none is too long."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "transformer_np"
LONGEST = 450  # lines: a module is read in one sitting


def package_table() -> str:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text.split("\n## The package\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows, "CONTRIBUTING.md's section 'The package' has no table of modules"
    return "\n".join(rows)


def test_every_module_and_folder_of_the_package_has_its_row_in_contributing():
    first_cells = [row.split("|")[1] for row in package_table().splitlines()]
    named = set(re.findall(r"`([\w./]+)`", " ".join(first_cells)))
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    folders = {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    missing = sorted((modules | folders) - named)
    assert not missing, f"CONTRIBUTING.md's package table has no row for {missing}"
    gone = sorted(n for n in named if n.endswith((".py", "/")) and n not in modules | folders)
    assert not gone, f"CONTRIBUTING.md's package table names what is not there: {gone}"


def test_no_module_of_the_package_is_longer_than_one_sitting():
    long = {
        p.relative_to(PACKAGE).as_posix(): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LONGEST
    }
    assert not long, f"modules over {LONGEST} lines (split them by concept): {long}"
