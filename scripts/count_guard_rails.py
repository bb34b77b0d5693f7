"""Count, per module of the package, its lines, docstring lines, argument-check lines and raises.

The method of the code review of 2026-12-02 (../shared/reviews): a code line "checks arguments"
when it lies inside a function named ``check*``, ``checked_call`` or ``as_*``, inside an
``if ...: raise`` block, or in a statement that calls a ``check_*`` function. Run from the
repository root, for the working tree or for a commit::

    .venv/bin/python scripts/count_guard_rails.py
    .venv/bin/python scripts/count_guard_rails.py --commit 8ba4855
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

CONCEPT = (
    "functional masks attention multi_head positional layers feed_forward embedding blocks "
    "stacks model losses optim clipping schedule train sampling decoding blockwise rmsnorm rope "
    "swiglu grouped_query llama"
).split()


def source(path: str, commit: str | None) -> str | None:
    if commit is None:
        p = Path(path)
        return p.read_text() if p.exists() else None
    run = subprocess.run(["git", "show", f"{commit}:{path}"], capture_output=True, text=True)
    return run.stdout if run.returncode == 0 else None


def count(text: str) -> dict:
    tree = ast.parse(text)
    lines = text.splitlines()
    doc, check = set(), set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef) and body:
            first = body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and (isinstance(first.value.value, str))
            ):
                doc.update(range(first.lineno, first.end_lineno + 1))
        if isinstance(node, ast.FunctionDef) and (
            node.name.startswith(("check", "as_")) or node.name == "checked_call"
        ):
            check.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.If) and any(isinstance(n, ast.Raise) for n in node.body):
            check.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.Expr | ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", "")
            if name.startswith("check_"):
                check.update(range(node.lineno, node.end_lineno + 1))
    code = {
        i + 1
        for i, line in enumerate(lines)
        if line.strip() and not line.strip().startswith("#") and i + 1 not in doc
    }
    raises = sum(isinstance(n, ast.Raise) for n in ast.walk(tree))
    return {
        "lines": len(lines),
        "doc": len(doc),
        "code": len(code),
        "check": len(check & code),
        "raise": raises,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", help="a commit to read instead of the working tree")
    args = parser.parse_args()
    files = subprocess.run(
        ["git", "ls-files", "src/transformer_np"] if args.commit is None else
        ["git", "ls-tree", "-r", "--name-only", args.commit, "src/transformer_np"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    if args.commit is None:  # new files not yet committed count too
        files = sorted({str(p) for p in Path("src/transformer_np").rglob("*.py")})
    total = {"lines": 0}
    concept = {"lines": 0, "code": 0, "check": 0, "raise": 0}
    print(f"{'module':28} {'lines':>6} {'doc':>5} {'code':>5} {'check%':>7} {'raise':>6}")
    for path in sorted(f for f in files if f.endswith(".py")):
        text = source(path, args.commit)
        if text is None:
            continue
        c = count(text)
        total["lines"] += c["lines"]
        name = Path(path).stem
        is_concept = Path(path).parent.name == "transformer_np" and name in CONCEPT
        if is_concept:
            for k in concept:
                concept[k] += c[k]
            share = 100 * c["check"] / max(c["code"], 1)
            row = f"{c['lines']:6} {c['doc']:5} {c['code']:5} {share:6.0f}% {c['raise']:6}"
            print(f"{name:28} {row}")
    print(f"\npackage: {total['lines']} lines")
    print(
        f"concept modules: {concept['lines']} lines, {concept['code']} code lines, "
        f"{100 * concept['check'] / concept['code']:.0f}% checking arguments, "
        f"{concept['raise']} raise statements"
    )


if __name__ == "__main__":
    main()
