"""Runnable demos: ``python -m transformer_np.examples.reverse`` and ``... .charlm``."""

from importlib import resources

from ..train import _checkpoint_target, load_model


def load_shipped(name):
    """Load a checkpoint shipped in ``examples/data/`` with its saved extras: ``(model, extra)``."""
    path = resources.files(__package__) / "data" / name
    with resources.as_file(path) as file:
        return load_model(file, return_extra=True)


def add_save_arguments(parser):
    """The demos' ``--save PATH`` and ``--overwrite`` options."""
    parser.add_argument("--save", default=None, help="write the trained model to this .npz")
    parser.add_argument(
        "--overwrite", action="store_true", help="let --save replace an existing file"
    )


def check_save_path(parser, args):
    """Before training: stop with a usage error if ``--save`` could not be written at the end.

    An existing file is kept unless ``--overwrite`` is given (a user's file is never replaced by
    accident, and minutes of training are not lost to a refusal at the very end).
    """
    if args.save is None:
        return
    try:
        _checkpoint_target(args.save, args.overwrite, "--save", "--overwrite")
    except OSError as exc:  # missing directory, existing file, a directory
        parser.error(str(exc))
