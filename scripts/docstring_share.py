"""The share of docstring lines in the package's concept modules (its public top-level modules).

CONTRIBUTING asks for docstrings that point, not repeat: a line or two with the shapes and the
page in a concept module, numpydoc on the public entry points. Run from the repository root,
for the working tree or for a commit::

    .venv/bin/python scripts/docstring_share.py
    .venv/bin/python scripts/docstring_share.py --commit 62ce766
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

PACKAGE = "src/transformer_np"


def modules(commit: str | None) -> dict[str, str]:
    """``{file name: source}`` of the public top-level modules, now or at ``commit``."""
    if commit is None:
        return {p.name: p.read_text() for p in sorted(Path(PACKAGE).glob("*.py"))}
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{commit}:{PACKAGE}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return {
        n: subprocess.run(
            ["git", "show", f"{commit}:{PACKAGE}/{n}"], capture_output=True, text=True, check=True
        ).stdout  # fmt: skip
        for n in names
        if n.endswith(".py")
    }


def docstring_lines(text: str) -> int:
    """The lines of the module's, classes' and functions' docstrings."""
    lines = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return len(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commit", help="measure this commit instead of the working tree")
    args = parser.parse_args()
    total = docs = 0
    for name, text in modules(args.commit).items():
        if name.startswith("_"):
            continue
        n, d = len(text.splitlines()), docstring_lines(text)
        total, docs = total + n, docs + d
        print(f"{name:20s} {n:5d} lines {d:5d} docstring {d / n:4.0%}")
    print(f"concept modules: {total} lines, {docs} of docstrings ({docs / total:.1%})")


if __name__ == "__main__":
    main()
