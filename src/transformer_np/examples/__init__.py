"""Runnable demos: ``python -m transformer_np.examples.reverse`` and ``... .charlm``.

What the two demos share: their trained checkpoints shipped in ``examples/data/``, and the
``--save`` / ``--overwrite`` options of their command lines.
"""

from importlib import resources

from ..checkpoints import checkpoint_path, load_model


def load_shipped(name):
    """Load a checkpoint shipped in ``examples/data/``, with the arrays saved next to it.

    Parameters
    ----------
    name : str
        File name in ``examples/data/``, e.g. ``"reverse.npz"``.

    Returns
    -------
    model : Transformer or LanguageModel
        In evaluation mode.
    extra : dict of str to ndarray
        The arrays saved with the model (its training history).
    """
    path = resources.files(__package__) / "data" / name
    with resources.as_file(path) as file:
        return load_model(file, return_extra=True)


def add_save_arguments(parser):
    """Add the demos' ``--save PATH`` and ``--overwrite`` options to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    """
    parser.add_argument("--save", default=None, help="write the trained model to this .npz")
    parser.add_argument(
        "--overwrite", action="store_true", help="let --save replace an existing file"
    )


def check_save_path(parser, args):
    """Before training: stop with a usage error if ``--save`` could not be written at the end.

    An existing file is kept unless ``--overwrite`` is given (a user's file is never replaced by
    accident, and minutes of training are not lost to a refusal at the very end).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Its ``error`` method reports the problem and exits with status 2.
    args : argparse.Namespace
        The parsed ``save`` and ``overwrite`` options.
    """
    if args.save is None:
        return
    try:
        checkpoint_path(
            args.save, args.overwrite, argument="--save", overwrite_option="--overwrite"
        )
    except OSError as exc:  # missing directory, existing file, a directory
        parser.error(str(exc))
