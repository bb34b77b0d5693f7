"""SmolLM2-135M-Instruct learns to answer questions about the Transformer in Italian, with LoRA.

Run it::

    python -m transformer_np.examples.finetune                # under 5 minutes on two cores
    python -m transformer_np.examples.finetune --quick        # a few short steps, to try it
    python -m transformer_np.examples.chat --adapter tutor    # then ask the tutor yourself

The data (``data/tutor_it.jsonl``, shipped with the package) are questions about the
Transformer with short Italian answers, written from the site's glossary and chapters. The
*held-out* questions are other wordings of training questions: their loss says whether the model
learned the answers, not only the exact words of the questions it saw.

Each pair is written with the model's chat template (the question as the user's turn, the answer
as the assistant's), and the loss is the cross-entropy on the answer's tokens only, with the
``<|im_end|>`` that closes it. The model's weights stay frozen: LoRA adapters (rank 8) on the
seven Linear maps of every block (``--targets`` chooses others) are trained with AdamW, a
warm-up then a cosine learning rate, gradient clipping and gradient accumulation. The held-out
loss is measured before and after, a few held-out questions are answered (greedy) before and
after, and the adapter is saved in PEFT's layout with the log of the run
(``training_log.json``), in the folder ``tutor`` (``--save DIR`` for another, ``--no-save``
for none; ``--quick`` saves only with ``--save``).

Every phase shows what it is doing from its first second: a live progress bar on a terminal, a
line when it starts otherwise (a log file, a pipe). A training whose loss diverges (NaN or
infinite, or above ln V, the loss of a uniform guess over the V tokens of the vocabulary, when
the model started below it) stops with :class:`~transformer_np.train.TrainingDiverged` and saves
nothing; a full run whose held-out loss went up saves nothing either (``--allow-divergence`` goes
on past ln V and saves all the same).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import numpy as np

from .._checks.files import non_negative_int, path_text, positive_float, positive_int
from .._checks.finetune import LOG_FILE, check_finetune_options
from ..train import TrainingDiverged
from . import save_or_rescue, smollm2_shape
from .tutor import (  # noqa: F401 (the data and the loop: the pages import them from here)
    BASE_MODEL,
    DATA_FILE,
    IGNORE,
    SAVE_FOLDER,
    TARGETS,
    WarmupCosine,
    accumulated_gradients,
    encode_pair,
    finetune,
    heldout_loss,
    load_pairs,
    make_batch,
    tutor_answer,
)

__all__ = ["main"]  # and the data and the loop, from tutor.py


QUICK = dict(steps=4, batch_size=2, accumulation=1, warmup=1, n_heldout=8, shown=1)


def make_parser():
    """The options, each value checked as it is parsed (a bad one: usage error, exit status 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m transformer_np.examples.finetune", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="4 steps of 2 pairs, 8 held-out questions: to try it"
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        default=None,
        help="optimiser steps (default 60, 4 with --quick)",
    )
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=None,
        help="pairs per forward and backward pass (default 4)",
    )
    parser.add_argument(
        "--accumulation",
        type=positive_int,
        default=None,
        help="passes added up before each step (default 2)",
    )
    parser.add_argument(
        "--lr", type=positive_float, default=4e-3, help="peak learning rate (default 0.004)"
    )
    parser.add_argument(
        "--warmup",
        type=non_negative_int,
        default=None,
        help="warm-up steps, then a cosine down to 0 (default 6)",
    )
    parser.add_argument(
        "--rank", type=positive_int, default=8, help="rank r of the adapters (default 8)"
    )
    parser.add_argument(
        "--alpha",
        type=positive_float,
        default=16.0,
        help="the change is scaled by alpha / r (default 16)",
    )
    parser.add_argument(
        "--targets",
        nargs="+",
        default=list(TARGETS),
        metavar="NAME",
        help="the Linear maps that get adapters: our names (q k v o gate up down) or "
        "transformers' (q_proj ...) (default: all seven)",
    )
    parser.add_argument(
        "--eval-every",
        type=non_negative_int,
        default=0,
        help="measure the held-out loss every this many steps too "
        "(default 0: before and after only)",
    )
    parser.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="seeds the adapters and the pairs' order (default 0)",
    )
    parser.add_argument(
        "--time-limit",
        type=positive_float,
        default=None,
        help="stop training after this many seconds (default none)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--save",
        type=path_text,
        default=None,
        metavar="DIR",
        help="write the adapter (PEFT's adapter_model.safetensors and "
        f"adapter_config.json) and {LOG_FILE} into this folder "
        f"(default {SAVE_FOLDER}; with --quick, nothing is saved unless --save is given)",
    )
    where.add_argument("--no-save", action="store_true", help="save nothing")
    parser.add_argument(
        "--overwrite", action="store_true", help="let the run replace the files of an earlier one"
    )
    parser.add_argument(
        "--allow-divergence",
        action="store_true",
        help="go on when the loss rises above ln V (worse than a uniform guess over the "
        "vocabulary), and save the adapter even if the held-out loss went up (by default such "
        "a run stops, or ends, without saving; a NaN or infinite loss stops it in any case)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars and no line per phase"
    )
    return parser


def parse_arguments(argv=None):
    """The command line's options, checked: a bad one is a usage error (exit status 2)."""
    parser = make_parser()
    args = parser.parse_args(argv)
    defaults = dict(steps=60, batch_size=4, accumulation=2, warmup=6)
    if args.quick:  # an option given with --quick wins over the quick value
        defaults.update({k: QUICK[k] for k in defaults})
    for name, value in defaults.items():
        if getattr(args, name) is None:  # not given (0 is refused, never "the default")
            setattr(args, name, value)
    if args.save is None and not (args.quick or args.no_save):
        args.save = SAVE_FOLDER  # a full run is worth keeping
    args.n_heldout = QUICK["n_heldout"] if args.quick else None
    args.shown = QUICK["shown"] if args.quick else 3
    problem = check_finetune_options(args) or targets_problem(args.targets, args.rank)
    if problem:
        parser.error(problem)
    return args


def targets_problem(targets, rank):
    """What :func:`~transformer_np.lora.add_lora` says of ``--targets``, or None.

    Asked of SmolLM2's LlamaModel without its weights (:func:`smollm2_shape`, in milliseconds):
    a name that matches no map, or a block past the last, is refused before the model is loaded.
    """
    from ..lora import add_lora

    model = smollm2_shape()
    n = model.config.n_layers
    for target in targets:  # "blocks.30.attn.q", "model.layers.30.self_attn.q_proj", "layers.30"
        m = re.search(r"(?:^|\.)(?:blocks|layers)\.(\d+)(?:\.|$)", target)
        if m and int(m[1]) >= n:
            return (
                f"--targets {target!r} names block {m[1]}: SmolLM2-135M-Instruct has {n} "
                f"blocks, numbered 0 to {n - 1}"
            )
    try:
        add_lora(model, rank, targets=targets)
    except ValueError as exc:
        return f"--{exc}"  # "targets: 'x' names no Linear layer ..."
    return None


def load_smollm2_model():
    """SmolLM2-135M-Instruct in float32 and its tokenizer (a few seconds)."""
    from ..pretrained import load_smollm2

    return load_smollm2(dtype=np.float32)


def save_run(folder, model, log, overwrite):
    """The adapter in PEFT's layout and the log of the run, in ``folder``.

    Each file that cannot be written is an OSError before any is written (save_lora checks its
    two, the log is checked first), so that a failure leaves no half of a run in ``folder``.
    """
    from ..lora_files import save_lora

    path = os.path.join(folder, LOG_FILE)
    if not overwrite and os.path.lexists(path):  # appeared during the run
        raise FileExistsError(f"{path!r} already exists (it appeared during the run)")
    save_lora(folder, model, base_model=BASE_MODEL, overwrite=overwrite)
    with open(path, "w" if overwrite else "x", encoding="utf-8") as file:
        json.dump(log, file, ensure_ascii=False, indent=1)
        file.write("\n")


def main(argv=None):
    """The command line: fine-tune, show the answers before and after, save the adapter.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0; 1 when the model package is missing or damaged, when the training
        diverges, or when a full run does not lower the held-out loss (then nothing is saved,
        unless ``--allow-divergence``), or when ``--save`` could not be written at the end (the
        run is then saved in a temporary folder, named on stderr).
    """
    args = parse_arguments(argv)
    train_pairs, heldout_pairs = load_pairs("train"), load_pairs("heldout")
    heldout_pairs = heldout_pairs[: args.n_heldout]
    progress = not args.no_progress
    if progress:
        print("loading SmolLM2-135M-Instruct...", file=sys.stderr, flush=True)
    loading = time.perf_counter()
    try:
        model, tokenizer = load_smollm2_model()
    except (OSError, ImportError) as exc:  # ModelFileError: the model package missing or damaged
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if progress:
        print(f"loaded in {time.perf_counter() - loading:.0f} s", file=sys.stderr, flush=True)
    try:
        log = finetune(
            model,
            tokenizer,
            train_pairs,
            heldout_pairs,
            steps=args.steps,
            batch_size=args.batch_size,
            accumulation=args.accumulation,
            lr=args.lr,
            warmup=args.warmup,
            rank=args.rank,
            alpha=args.alpha,
            targets=args.targets,
            eval_every=args.eval_every,
            shown=args.shown,
            time_limit=args.time_limit,
            seed=args.seed,
            stop_on_divergence=not args.allow_divergence,
            progress=progress,
        )
    except TrainingDiverged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    log["command"] = ["python", "-m", "transformer_np.examples.finetune", *(argv or sys.argv[1:])]
    first, last = log["heldout"][0]["loss"], log["heldout"][-1]["loss"]
    print(
        f"pairs: {log['n_train']} training, {log['n_heldout']} held-out; "
        f"trainable parameters: {log['trainable_parameters']:,}"
    )
    print(
        f"steps: {log['train']['step'][-1]} ({log['stopped']}), "
        f"time {log['seconds']:.0f} s (training {log['train_seconds']:.0f} s)"
    )
    print(f"held-out loss: {first:.4f} before, {last:.4f} after")
    for item in log["answers"]:
        print(f"\n{item['question']}\n  before: {item['before']}\n  after:  {item['after']}")
    worse = not args.quick and last >= first  # the adapters made the model worse
    if worse:
        print(
            f"\nerror: the held-out loss went up ({first:.4f} before, {last:.4f} after): the "
            "adapter makes the model worse"
            + ("" if args.allow_divergence else " and was not saved (--allow-divergence saves it)"),
            file=sys.stderr,
        )
    rescued = False  # saved elsewhere than --save: the exit status says so
    if args.save and (args.allow_divergence or not worse):
        where, rescued = save_or_rescue(
            lambda folder: save_run(folder, model, log, args.overwrite), args.save, "--save"
        )
        print(f"\nsaved to {where}")
    return 1 if worse or rescued else 0


if __name__ == "__main__":
    sys.exit(main())
