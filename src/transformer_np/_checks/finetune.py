"""The checks of the fine-tuning demo's command line, and of ``--adapter`` of the chat demo.

Every problem is a usage error (exit status 2) raised before the model is loaded: minutes of
training are never lost to a refusal at the end, and no file a user owns is replaced without
``--overwrite``.
"""

from __future__ import annotations

import os

from .files import check_writable_folder

# the files a run writes in its --save folder: the adapter (PEFT's names) and the log of the run
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")
LOG_FILE = "training_log.json"


def check_save_folder(folder, overwrite):
    """The problem with writing a run into ``folder`` (``--save``), or None.

    The folder may exist (its other files are left alone) or be new (its parent must exist);
    either must be writable, and a file of the run already in it is replaced only with
    ``overwrite``.
    """
    given = os.fspath(folder)
    if os.path.exists(given) and not os.path.isdir(given):
        return f"--save {given!r} is a file: give a folder (the adapter is two files and a log)"
    # an existing folder is filled, a new one is made in its parent
    full = os.path.abspath(given)
    into = full if os.path.isdir(full) else os.path.dirname(full)
    try:
        check_writable_folder(into, given, "--save")
    except OSError as exc:  # under a file, in a missing directory, or where the user cannot write
        return str(exc)
    present = [n for n in (*ADAPTER_FILES, LOG_FILE) if os.path.lexists(os.path.join(given, n))]
    if present and not overwrite:
        return (
            f"--save {given!r} already holds {', '.join(present)}: pass --overwrite to replace "
            "them, or --save another folder"
        )
    return None


def check_adapter_folder(folder):
    """The problem with reading an adapter from ``folder`` (``--adapter``), or None."""
    given = os.fspath(folder)
    if not os.path.isdir(given):
        what = "is a file" if os.path.exists(given) else "does not exist"
        return (
            f"--adapter {given!r} {what}: give the folder a fine-tuning run saved (with "
            f"{' and '.join(ADAPTER_FILES)})"
        )
    missing = [n for n in ADAPTER_FILES if not os.path.isfile(os.path.join(given, n))]
    if missing:
        return f"--adapter {given!r} has no {' and no '.join(missing)}: it is not a saved adapter"
    return None


def check_finetune_options(args):
    """What the options of the fine-tuning demo say together: the first problem, or None."""
    if args.warmup >= args.steps:
        return (
            f"--warmup ({args.warmup} steps) must be shorter than --steps ({args.steps}): the "
            "learning rate would never come down"
        )
    if args.overwrite and args.save is None:
        return (
            "--overwrite lets the run replace the files of an earlier one, but this run saves "
            "nothing (--no-save, or --quick without --save)"
        )
    if args.save is not None:
        return check_save_folder(args.save, args.overwrite)
    return None
