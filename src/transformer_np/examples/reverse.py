"""An encoder-decoder Transformer learns to reverse (or sort) sequences of digits.

Run it::

    python -m transformer_np.examples.reverse            # reverse, stops at >= 99.5% validation
    python -m transformer_np.examples.reverse --task sort
    python -m transformer_np.examples.reverse --quick    # shorter sequences, about 10 seconds

The source is a random string of digits (length ``min_len`` to ``max_len``, padded with 0);
the target is the same digits reversed (or sorted), then EOS. The decoder reads the target
shifted right (BOS first). Accuracy is the *exact match* of greedy decoding: every token up to
EOS right.

Two held-out sets are drawn before training, disjoint from each other, and no training batch
contains a sequence of either (:func:`heldout_splits`): the *validation* set decides when the
training stops early, and the *test* set, read once at the end, gives the reported score.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from .._kernels.threads import blas_single_threaded
from ..checkpoints import save_model
from ..decoding import translate
from ..losses import CrossEntropyLoss
from ..model import Transformer, TransformerConfig
from ..optim import Adam
from ..schedule import NoamSchedule
from ..train import fit
from . import (
    announce,
    load_shipped,
    parse_training_arguments,
    save_or_rescue,
    training_parser,
)
from .digits import (  # the task's data (re-exported: the pages import them from here)
    BOS,
    EOS,
    PAD,
    VOCAB_SIZE,
    decode_digits,
    encode_pairs,
    heldout_splits,
    make_batch,
)

__all__ = [
    "load_trained",
    "PAD",
    "BOS",
    "EOS",
    "VOCAB_SIZE",
    "decode_digits",
    "exact_match",
    "heldout_splits",
    "make_batch",
    "make_model",
    "train_reverse",
]

VAL_TARGET = 0.995  # the training stops once the validation exact match reaches this


def exact_match(model, src, tgt_out, *, batch_size=500):
    """Fraction of sequences whose greedy output equals ``tgt_out`` up to and including EOS.

    Parameters
    ----------
    model : Transformer
    src : ndarray of shape (N, S)
    tgt_out : ndarray of shape (N, T)
        The expected outputs, as :func:`encode_pairs` returns them.
    batch_size : int
        Sequences decoded at a time.

    Returns
    -------
    float
        In [0, 1].
    """
    hits = 0
    for start in range(0, len(src), batch_size):
        s, t = src[start : start + batch_size], tgt_out[start : start + batch_size]
        pred = translate(model, s, t.shape[1], bos_id=BOS, eos_id=EOS)
        full = np.full(t.shape, PAD, dtype=np.int64)
        full[:, : pred.shape[1]] = pred
        hits += int(np.all(full == t, axis=1).sum())
    return hits / len(src)


def make_model(
    seed=0, *, d_model=64, n_heads=4, n_layers=2, max_len=10, norm_first=False, dtype="float32"
):
    """The Transformer used by the demo (post-LN by default, as in the paper).

    Parameters
    ----------
    seed : int
        Seeds the initial weights.
    d_model, n_heads, n_layers, norm_first, dtype
        The configuration (see :class:`~transformer_np.config.TransformerConfig`); ``d_ff`` is
        ``2 * d_model`` and there are ``n_layers`` encoder and ``n_layers`` decoder layers.
    max_len : int
        Longest source sequence (the target has one more token, EOS).

    Returns
    -------
    Transformer
    """
    cfg = TransformerConfig(
        src_vocab_size=VOCAB_SIZE,
        tgt_vocab_size=VOCAB_SIZE,
        d_model=d_model,
        n_heads=n_heads,
        d_ff=2 * d_model,
        n_encoder_layers=n_layers,
        n_decoder_layers=n_layers,
        max_len=max_len + 1,
        pad_id=PAD,
        norm_first=norm_first,
        dtype=dtype,
    )
    return Transformer(cfg, rng=np.random.default_rng(seed))


def train_reverse(
    *,
    task="reverse",
    steps=3000,
    batch_size=96,
    min_len=3,
    max_len=10,
    d_model=64,
    n_layers=2,
    norm_first=False,
    warmup=200,
    lr_factor=0.7,
    label_smoothing=0.1,
    betas=(0.9, 0.98),
    n_val=300,
    n_test=1000,
    eval_every=100,
    target=VAL_TARGET,
    time_limit=170.0,
    seed=0,
    progress=True,
    stream=None,
):
    """Train the demo model; stops early once the validation exact match reaches ``target``.

    Parameters
    ----------
    task : {"reverse", "sort"}
        What the decoder writes: the source reversed, or sorted.
    steps : int
        Largest number of optimiser steps.
    batch_size : int
        Sequences per step.
    min_len, max_len : int
        Range of the sequence lengths.
    d_model, n_layers, norm_first
        The model (see :func:`make_model`).
    warmup, lr_factor : int, float
        The learning-rate schedule, ``NoamSchedule(d_model, warmup, lr_factor)``.
    label_smoothing : float
        Of the cross-entropy.
    betas : tuple of float
        Of Adam.
    n_val : int
        Validation sequences (see :func:`heldout_splits`): never trained on, they decide the
        early stop.
    n_test : int
        Test sequences: never trained on and never looked at during training, they give the
        final score.
    eval_every : int
        Measure the exact match on the validation set every this many steps.
    target : float
        Stop when the validation exact match reaches this value (above 1: never).
    time_limit : float
        Stop after this many seconds.
    seed : int
        Seeds the model, the validation and test sets and the batches.
    progress : bool
        Show the progress bar of :func:`~transformer_np.train.fit`.
    stream : file-like, optional
        Where the progress bar is written (default ``sys.stderr``).

    Returns
    -------
    model : Transformer
    history : dict
        From :func:`~transformer_np.train.fit` (its ``eval`` entries hold the validation
        ``exact_match``), plus ``test_accuracy`` (the exact match on the test set, measured once
        at the end) and ``seconds``.
    splits : dict
        ``"val"`` and ``"test"``: each ``(src, tgt_in, tgt_out)``, as :func:`encode_pairs`
        returns them.
    """
    if task not in ("reverse", "sort"):
        raise ValueError(f'task must be "reverse" or "sort", got {task!r}')
    rng = np.random.default_rng(seed)
    val_seqs, test_seqs = heldout_splits(rng, n_val, n_test, min_len, max_len)
    splits = {
        "val": encode_pairs(val_seqs, max_len, task),
        "test": encode_pairs(test_seqs, max_len, task),
    }
    exclude = frozenset(val_seqs) | frozenset(test_seqs)  # never in a training batch
    model = make_model(
        seed, d_model=d_model, n_layers=n_layers, max_len=max_len, norm_first=norm_first
    )
    opt = Adam(
        model.params,
        lr=NoamSchedule(d_model, warmup_steps=warmup, factor=lr_factor),
        betas=betas,
        eps=1e-9,
    )
    loss_fn = CrossEntropyLoss(ignore_index=PAD, label_smoothing=label_smoothing)
    val_src, _, val_out = splits["val"]

    def evaluate(m):  # during training: the validation set only
        return {"exact_match": exact_match(m, val_src, val_out)}

    def stop(step, history):
        return bool(history["eval"]) and history["eval"][-1][1]["exact_match"] >= target

    start = time.perf_counter()
    history = fit(
        model,
        lambda step: make_batch(rng, batch_size, min_len, max_len, task, exclude),
        steps=steps,
        optimizer=opt,
        loss_fn=loss_fn,
        clip_norm=1.0,
        eval_fn=evaluate,
        eval_every=eval_every,
        callback=lambda step, h: stop(step, h) and step % eval_every == 0,
        time_limit=time_limit,
        progress=progress,
        stream=stream,
        desc=task,
    )
    test_src, _, test_out = splits["test"]
    with blas_single_threaded():  # the test set, once, after the training has stopped
        history["test_accuracy"] = exact_match(model, test_src, test_out)
    history["seconds"] = time.perf_counter() - start
    history["n_val"], history["n_test"] = len(val_seqs), len(test_seqs)
    return model, history, splits


def history_arrays(history):
    """The training history as plain arrays, to store next to the model in a checkpoint.

    Parameters
    ----------
    history : dict
        What :func:`train_reverse` returns.

    Returns
    -------
    dict of str to ndarray
        The loss and learning rate per step; ``eval_step`` and ``exact_match_val``, the
        validation exact match at each evaluation; ``exact_match_test``, the final score on the
        test set; ``n_val`` and ``n_test``, the sizes of the two sets; the training time.
    """
    evals = dict(history["eval"])  # the last evaluation can repeat the step of the early stop
    return {
        "loss": np.array(history["loss"], dtype=np.float32),
        "lr": np.array(history["lr"], dtype=np.float32),
        "eval_step": np.array(list(evals), dtype=np.int64),
        "exact_match_val": np.array([m["exact_match"] for m in evals.values()], dtype=np.float32),
        "exact_match_test": np.array(history["test_accuracy"], dtype=np.float32),
        "n_val": np.array(history["n_val"], dtype=np.int64),
        "n_test": np.array(history["n_test"], dtype=np.int64),
        "seconds": np.array(history["seconds"], dtype=np.float32),
    }


CHECKPOINT = "reverse.npz"


def load_trained():
    """The trained reversal model shipped with the package, and its training history.

    Returns
    -------
    model : Transformer
        In evaluation mode.
    extra : dict of str to ndarray
        The arrays saved next to the model: the loss per step and the evaluations (see
        ``examples/data/README.md`` for the command that made the file).
    """
    return load_shipped(CHECKPOINT)


# --quick: shorter sequences, a smaller model, smaller validation and test sets
QUICK = dict(min_len=2, max_len=5, d_model=32, eval_every=100, warmup=100, n_val=100, n_test=300)


def parse_arguments(argv=None):
    """The command line's options, checked: a bad one is a usage error (exit status 2)."""
    parser = training_parser(
        "python -m transformer_np.examples.reverse",
        __doc__.split("\n")[0],
        quick="shorter sequences, about 10 seconds",
        steps="maximum training steps (default 3000, or 400 with --quick)",
        time_limit=170.0,
    )
    parser.add_argument("--task", choices=["reverse", "sort"], default="reverse")
    args = parse_training_arguments(parser, argv)
    if args.steps is None:  # not given (0 is a usage error, never "the default")
        args.steps = 400 if args.quick else 3000
    return args


def main(argv=None):
    """The command line: train, show five test examples, and save with ``--save``.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 1 if a full run ends below 99% exact match on the test set, or
        if ``--save`` could not be written at the end (the model is then saved in a temporary
        folder, named on stderr).
    """
    args = parse_arguments(argv)
    announce(
        f"training the encoder-decoder to {args.task} digits: up to {args.steps} steps, "
        f"stopping at {VAL_TARGET:.1%} validation exact match",
        not args.no_progress,
    )
    model, history, splits = train_reverse(
        task=args.task,
        steps=args.steps,
        seed=args.seed,
        time_limit=args.time_limit,
        progress=not args.no_progress,
        **(QUICK if args.quick else {}),
    )
    src, _, tgt_out = splits["test"]
    pred = translate(model, src[:5], tgt_out.shape[1], bos_id=BOS, eos_id=EOS)
    print(f"task: {args.task}, parameters: {model.num_parameters()}")
    for s, p in zip(src[:5], pred, strict=True):
        print(f"  {decode_digits(s):>12} -> {decode_digits(p)}")
    print(
        f"steps: {history['step'][-1]} ({history['stopped']}), final loss "
        f"{history['loss'][-1]:.4f}, time {history['seconds']:.1f} s"
    )
    val = history["eval"][-1][1]["exact_match"]
    print(f"validation exact match: {100 * val:.2f}% of {history['n_val']} sequences")
    print(f"test exact match: {100 * history['test_accuracy']:.2f}% of {len(src)} sequences")
    rescued = False  # saved elsewhere than --save: the exit status says so
    if args.save:
        where, rescued = save_or_rescue(
            lambda path: save_model(
                path, model, extra=history_arrays(history), overwrite=args.overwrite
            ),
            args.save,
            "--save",
        )
        print(f"saved to {where}")
    return 0 if not rescued and (args.quick or history["test_accuracy"] >= 0.99) else 1


if __name__ == "__main__":
    sys.exit(main())
