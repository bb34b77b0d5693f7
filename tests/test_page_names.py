"""A page block uses only public names (the guide: "a page block uses only public names").

A reader copies a block and runs it: it must not lean on the package's private machinery
(``transformer_np._kernels``, ``mha._x``, ``_helper``), which may change without notice. For every
``python`` block of every page, in both languages, after ``--8<--`` includes are expanded, the
block's code must not

* import a private module or name: ``import transformer_np._x``, ``from transformer_np._x import
  y``, ``from transformer_np.y import _z``;
* read an attribute whose name starts with one underscore (``obj._name``; dunders such as
  ``__file__`` are fine);
* use a bare name starting with an underscore that the block does not define itself.
"""

from __future__ import annotations

import ast

import pytest

from doctools import DOCS, LANGUAGES, pages, python_blocks, read_page


def is_private(name: str) -> bool:
    """``_x`` or ``__x`` is private; a dunder (``__x__``) is not."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def names_defined(tree: ast.AST) -> set[str]:
    """Every name the code binds itself: assignments, definitions, arguments, imports."""
    defined = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            defined.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.alias):
            defined.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return defined


def private_uses(code: str) -> list[str]:
    """What in ``code`` is private, one message per use, in order of line."""
    tree = ast.parse(code)
    defined = names_defined(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if any(is_private(part) for part in alias.name.split(".")):
                    found.append((line, f"imports the private module {alias.name}"))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if any(is_private(part) for part in module.split(".")):
                found.append((line, f"imports from the private module {module}"))
            for alias in node.names:
                if is_private(alias.name):
                    found.append((line, f"imports the private name {alias.name} from {module}"))
        elif isinstance(node, ast.Attribute) and is_private(node.attr):
            found.append((line, f"uses the private attribute .{node.attr}"))
        elif isinstance(node, ast.Name) and is_private(node.id) and node.id not in defined:
            found.append((line, f"uses the private name {node.id}, which it does not define"))
    return [f"line {line}: {message}" for line, message in sorted(found)]


def _all_pages():
    return [
        pytest.param(path, id=path.relative_to(DOCS).as_posix())
        for lang in LANGUAGES
        for path in pages(lang)
    ]


@pytest.mark.parametrize("path", _all_pages())
def test_page_blocks_use_only_public_names(path):
    bad = []
    for block in python_blocks(read_page(path)):
        bad += [f"block at line {block.line}, {use}" for use in private_uses(block.code)]
    assert not bad, (
        f"{path.relative_to(DOCS)}: a page block must use only public names "
        "(include whole public code; internals go in prose, in an 'Under the hood' box):\n"
        + "\n".join(bad)
    )


# --------------------------------------------------------------------------------------------
# The guard can fail: made-up pages with one fault each, and a sound one.

F = "```"


@pytest.mark.parametrize(
    "code, expected",
    [
        ("import transformer_np._kernels.attention", "private module"),
        ("import transformer_np._parallel as par", "private module"),
        ("from transformer_np._kernels import threads", "private module"),
        ("from transformer_np.attention import _sdpa", "private name _sdpa"),
        (
            "from transformer_np import MultiHeadAttention\nc = MultiHeadAttention(8, 2)._cache",
            "._cache",
        ),
        ("x = _attention_steps(1, 2, 3)", "private name _attention_steps"),
    ],
)
def test_a_private_name_on_a_page_is_flagged(code, expected):
    page = f"# T\n\nProse.\n\n{F}python\n{code}\n{F}\n"
    (block,) = python_blocks(page)
    uses = private_uses(block.code)
    assert uses and any(expected in use for use in uses), uses


def test_a_page_with_only_public_names_passes():
    code = (
        "from __future__ import annotations\n"
        "import numpy as np\n"
        "import transformer_np\n"
        "from transformer_np import MultiHeadAttention\n"
        "from transformer_np.multi_head import project, split_heads\n"
        "\n"
        "def _helper(x):  # a private name the block defines itself is fine\n"
        "    return x\n"
        "\n"
        "_scale = 2.0\n"
        "mha = MultiHeadAttention(8, 2, rng=0)\n"
        "print(mha.cache, transformer_np.__file__, _helper(_scale), [_ for _ in range(2)])\n"
    )
    (block,) = python_blocks(f"# T\n\n{F}python\n{code}{F}\n")
    assert private_uses(block.code) == []
