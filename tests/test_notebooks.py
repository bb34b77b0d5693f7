"""Every notebook, in both languages, runs from top to bottom without an error."""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from doctools import DOCS, LANGUAGES, pages

NOTEBOOKS = [p for lang in LANGUAGES for p in pages(lang, ".ipynb")]


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebook found under docs/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_notebook_executes(path, tmp_path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(path, as_version=4)
    # Raises CellExecutionError, with the cell and its traceback, at the first failing cell.
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_notebook_is_committed_without_outputs(path):
    # The build executes notebooks: committed outputs could only be stale.
    nb = nbformat.read(path, as_version=4)
    stale = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code" and (c.outputs or c.execution_count)
    ]
    assert not stale, f"clear the outputs of cells {stale} (jupyter nbconvert --clear-output)"
