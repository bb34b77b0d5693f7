"""Runnable demos: ``python -m transformer_np.examples.reverse``, ``... .charlm`` (trained here),
``... .chat`` (SmolLM2) and ``... .finetune`` (LoRA on SmolLM2).

What the two training demos share: their trained checkpoints shipped in ``examples/data/``, and the
options of their command lines (``--steps``, ``--seed``, ``--time-limit``, ``--save``, ...). What
every demo shares: a run's result is saved even when its destination fails at the end
(:func:`save_or_rescue`); the two SmolLM2 demos check their options against the model's shape
before loading it (:func:`smollm2_shape`).
"""

import argparse
import os
import sys
import tempfile
from importlib import resources

from .._checks.files import non_negative_int, path_text, positive_float, positive_int
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


def training_parser(prog, description, *, quick, steps, time_limit=None):
    """The options the two training demos share, each value checked as it is parsed.

    Parameters
    ----------
    prog, description : str
        The command and its one-line description.
    quick, steps : str
        The help of ``--quick`` and of ``--steps`` (which says its defaults).
    time_limit : float, optional
        The default of ``--time-limit`` in seconds (None: no limit).

    Returns
    -------
    argparse.ArgumentParser
        With ``--quick``, ``--steps``, ``--seed``, ``--time-limit``, ``--save``, ``--overwrite``
        and ``--no-progress``; read it with :func:`parse_training_arguments`.
    """
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--steps", type=positive_int, default=None, help=steps)
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seeds the model and the data (default 0)"
    )
    limit = "default: no limit" if time_limit is None else f"default {time_limit:g}"
    parser.add_argument(
        "--time-limit", type=positive_float, default=time_limit, help=f"seconds ({limit})"
    )
    parser.add_argument(
        "--save", type=path_text, default=None, help="write the trained model to this .npz"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="let --save replace an existing file"
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser


def parse_training_arguments(parser, argv):
    """The options of ``argv``, every problem a usage error (exit status 2) before training.

    ``--save`` becomes the file that will be written (``.npz`` added to a name without a
    suffix); an existing file is kept unless ``--overwrite`` is given (a user's file is never
    replaced by accident, and minutes of training are not lost to a refusal at the very end).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        From :func:`training_parser`.
    argv : list of str or None
        The arguments (None: ``sys.argv[1:]``).

    Returns
    -------
    argparse.Namespace
    """
    args = parser.parse_args(argv)
    if args.overwrite and args.save is None:
        parser.error("--overwrite lets --save replace an existing file: it needs --save FILE")
    if args.save is not None:
        try:
            args.save = checkpoint_path(
                args.save, args.overwrite, argument="--save", overwrite_option="--overwrite"
            )
        except (OSError, ValueError) as exc:  # a folder, a destination that cannot be written, an
            # existing file
            parser.error(str(exc))
    return args


def announce(text, progress):
    """Say on stderr what a demo starts doing (with ``progress``): on a terminal its bar follows
    at once, in a log file or a pipe only every 10% of the steps."""
    if progress:
        print(text, file=sys.stderr, flush=True)


def smollm2_shape(dtype="float32"):
    """SmolLM2-135M-Instruct's LlamaModel without its weights, in milliseconds: its 30 blocks and
    the names and shapes of its maps, to check options against before the model is loaded.

    ``LlamaConfig()``'s defaults are SmolLM2-135M's numbers (the GGUF file's metadata); the
    weights are zeros that are never written, so the memory is never used.
    """
    from ..config import LlamaConfig
    from ..llama import LlamaModel

    return LlamaModel(LlamaConfig(dtype=dtype), init=False)


def save_or_rescue(save, target, argument):
    """``save(target)``; if that fails, ``save`` into a fresh temporary folder instead.

    The checks before the run make a failure here rare (a full disk, a folder removed or made
    read-only during the run), but the minutes of work are never lost to it: the message on
    stderr says why ``target`` (the value of ``argument``) failed and where the run went.

    Returns
    -------
    (str, bool)
        The path written, and whether it is the rescue rather than ``target``.
    """
    try:
        save(target)
        return target, False
    except OSError as exc:
        name = os.path.basename(os.path.normpath(target)) or "run"
        rescue = os.path.join(tempfile.mkdtemp(prefix="transformer_np-"), name)
        save(rescue)
        print(
            f"error: {argument} {target!r} could not be written ({type(exc).__name__}: {exc}); "
            f"the run was saved to {rescue!r} instead",
            file=sys.stderr,
        )
        return rescue, True
