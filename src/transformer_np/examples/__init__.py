"""Runnable demos: ``python -m transformer_np.examples.reverse`` and ``... .charlm``."""

from importlib import resources

from ..train import load_model


def load_shipped(name):
    """Load a checkpoint shipped in ``examples/data/`` with its saved extras: ``(model, extra)``."""
    path = resources.files(__package__) / "data" / name
    with resources.as_file(path) as file:
        return load_model(file, return_extra=True)
