"""Training: one step (:func:`train_step`) and the loop that repeats it (:func:`fit`).

A *batch* is a tuple ``(*inputs, targets)``: the model is called as ``model(*inputs)`` and the
loss compares its logits with ``targets``. For the encoder-decoder that is
``(src, tgt_in, tgt_out)``, for the language model ``(ids, next_ids)``.

A step does five things: 1. forward, 2. loss, 3. backward, 4. clip, 5. update; a value that is
not finite stops it with :class:`TrainingDiverged` before the update. Page: training.md.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterable

import numpy as np
from tqdm import tqdm

from ._checks.boundary import NotFiniteError, checked
from ._checks.training import (
    check_fit,
    check_grad_norm,
    check_loss_value,
    check_metrics,
    check_train_step,
)
from ._kernels.threads import blas_single_threaded
from .checkpoints import save_model
from .clipping import clip_grad_norm, global_norm
from .losses import CrossEntropyLoss

__all__ = ["TrainingDiverged", "fit", "train_step"]


# --8<-- [start:training_diverged]
class TrainingDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite; the parameters were not updated."""


# --8<-- [end:training_diverged]


@checked(check_train_step)
# --8<-- [start:train_step]
def train_step(model, batch, optimizer, loss_fn=None, *, clip_norm=1.0):
    """Forward, loss, backward, clipping and one optimiser update.

    Parameters
    ----------
    model : Transformer or LanguageModel
    batch : tuple
        ``(*inputs, targets)``: ``(ids, next_ids)`` for a LanguageModel,
        ``(src, tgt_in, tgt_out)`` for a Transformer.
    optimizer : Adam
        Built on ``model.params`` (the very arrays of this model, checked).
    loss_fn : CrossEntropyLoss, optional
        A loss object, ``loss_fn(logits, targets) -> float`` with a ``backward()`` method.
        Default: plain cross-entropy.
    clip_norm : float or None
        Clip the global gradient norm to this positive value (None: no clipping).

    Returns
    -------
    loss : float
    grad_norm : float
        Global gradient norm before clipping.

    Raises
    ------
    TypeError, ValueError
        If ``model``, ``batch``, ``optimizer``, ``loss_fn`` or ``clip_norm`` is not what is
        described above (for example an optimiser built on another model's parameters).
    TrainingDiverged
        If a parameter, the logits, the loss or a gradient is NaN or infinite. The check runs
        *before* the update, so the parameters stay as they were after the previous step.
    """
    *inputs, targets = batch
    loss_fn = CrossEntropyLoss() if loss_fn is None else loss_fn
    with divergence_reported():
        logits = model(*inputs)  # 1. forward: (B, T, V)
        loss = check_loss_value(loss_fn(logits, targets), loss_fn)  # 2. loss
        model.backward(loss_fn.backward())  # 3. backward: the gradient of every parameter
        grads = model.grads
        norm = clip_grad_norm(grads, clip_norm) if clip_norm else global_norm(grads)  # 4. clip
        check_grad_norm(norm, loss)
    optimizer.step(grads)  # 5. update
    return loss, norm


# --8<-- [end:train_step]


@checked(check_fit)
# --8<-- [start:fit]
def fit(
    model,
    batches: Callable[[int], tuple] | Iterable[tuple],
    *,
    steps: int,
    optimizer,
    loss_fn=None,
    clip_norm: float | None = 1.0,
    eval_fn: Callable | None = None,
    eval_every: int = 0,
    callback: Callable | None = None,
    time_limit: float | None = None,
    checkpoint: str | os.PathLike | None = None,
    overwrite_checkpoint: bool = False,
    progress: bool = True,
    stream=None,
    desc: str = "train",
    single_blas_thread: bool = True,
):
    """Train ``model`` for ``steps`` steps and return the history.

    Every argument is checked once, before the first step (a bad ``checkpoint`` path does not
    wait for the end of the run to fail), and not again at every step.

    Parameters
    ----------
    model : Transformer or LanguageModel
    batches : callable or iterable
        ``batches(step)`` returning a batch (step counted from 1), or an iterable of at least
        ``steps`` batches (fewer is a ValueError when it runs out).
    steps : int
        Number of optimiser steps (> 0).
    optimizer : Adam
        Built on ``model.params`` (checked).
    loss_fn : CrossEntropyLoss, optional
    clip_norm : float or None
        Global-norm gradient clipping (a positive number; None: no clipping).
    eval_fn : callable, optional
        ``eval_fn(model) -> dict`` of metrics (name -> value), run in evaluation mode every
        ``eval_every`` steps and at the end; returning anything else is a TypeError.
    eval_every : int
        An integer >= 0; 0 means only at the end.
    callback : callable, optional
        ``callback(step, history)`` after every step; returning True stops the training.
    time_limit : float, optional
        Stop after this many seconds (a positive number, checked after each step).
    checkpoint : path, optional
        Save the model here at the end (only if every parameter is finite), with
        :func:`~transformer_np.checkpoints.save_model` (``.npz`` is added if missing). Its
        directory must exist.
    overwrite_checkpoint : bool, default False
        Allow ``checkpoint`` to replace an existing file. Without it an existing file is a
        FileExistsError raised *before* training, so that no file of the user's is replaced
        by accident.
    progress : bool
        Show a progress bar (tqdm) with the loss and the learning rate, and the metrics of
        ``eval_fn`` on lines of their own.
    stream : file-like, optional
        Where the progress bar is written (default ``sys.stderr``). On a terminal the bar is
        redrawn in place; on another stream (a log file, ``io.StringIO``) it is drawn about
        every 10% of the steps.
    desc : str
        Label at the start of the progress bar.
    single_blas_thread : bool, default True
        Run the BLAS matrix products on the calling thread during training: the products of a
        small model are too small to share between cores. Set False for large models on cores
        that nothing else uses.

    Returns
    -------
    dict
        ``step``, ``loss``, ``lr``, ``grad_norm``, ``time`` (lists, one entry per step),
        ``eval`` (list of ``(step, metrics)``), ``stopped`` (why the loop ended: ``"steps"``,
        ``"callback"`` or ``"time_limit"``).

    The model is left in the mode (training or evaluation) it had when ``fit`` was called,
    also when an error stops the run.

    Raises
    ------
    TypeError, ValueError
        If an argument is not what is described above, or an iterable ``batches`` runs out
        before ``steps`` batches (the message says after how many).
    FileNotFoundError
        If the directory of ``checkpoint`` does not exist (raised before training).
    FileExistsError
        If ``checkpoint`` exists and ``overwrite_checkpoint`` is False (raised before training).
    TrainingDiverged
        When a step produces a NaN or infinite loss or gradient. The message says at which
        step; the model keeps the parameters of the last finite step and nothing is saved.
    """
    history = {"step": [], "loss": [], "lr": [], "grad_norm": [], "time": [], "eval": []}
    history["stopped"] = "steps"
    start = time.perf_counter()
    with progress_bar(steps, desc, stream, progress) as bar, training(model, single_blas_thread):
        for step in range(1, steps + 1):
            lr = optimizer.current_lr()
            try:
                loss, norm = train_step(
                    model, batches(step), optimizer, loss_fn, clip_norm=clip_norm
                )
            except TrainingDiverged as exc:
                raise diverged(step, history, exc) from exc
            record(history, step, loss, lr, norm, time.perf_counter() - start)
            bar.set_postfix(loss=loss, lr=lr, refresh=False)
            bar.update()
            if eval_fn is not None and eval_every and step % eval_every == 0 and step < steps:
                evaluate(model, eval_fn, step, history, bar)
            if callback is not None and callback(step, history):
                history["stopped"] = "callback"
                break
            if time_limit is not None and time.perf_counter() - start > time_limit:
                history["stopped"] = "time_limit"
                break
        if eval_fn is not None:
            evaluate(model, eval_fn, step, history, bar)
    if checkpoint is not None:  # a file that appeared meanwhile is still not replaced
        save_model(checkpoint, model, overwrite=overwrite_checkpoint)
    return history


# --8<-- [end:fit]


# -- what the step and the loop use -------------------------------------------------------------


# --8<-- [start:divergence_reported]
@contextlib.contextmanager
def divergence_reported():
    """A value that is not finite met inside (a NotFiniteError) is a TrainingDiverged.

    NumPy's overflow warnings are silenced meanwhile: what overflowed is reported instead.
    """
    try:
        with np.errstate(over="ignore", invalid="ignore"):
            yield
    except NotFiniteError as exc:
        raise TrainingDiverged(str(exc)) from exc


# --8<-- [end:divergence_reported]


# --8<-- [start:fit_helpers]
def record(history, *values) -> None:
    """Append one step's step, loss, lr, grad_norm and time to the lists of ``history``."""
    for key, value in zip(("step", "loss", "lr", "grad_norm", "time"), values, strict=True):
        history[key].append(value)


def diverged(step, history, exc) -> TrainingDiverged:
    """The error of a step that diverged: where, why, the loss of the step before and what to
    do."""
    before = f"; loss at step {step - 1}: {history['loss'][-1]:.4g}" if history["loss"] else ""
    return TrainingDiverged(
        f"training diverged at step {step} ({exc}){before}. The parameters "
        "are those of the previous step and nothing was saved: lower the learning rate, "
        "lengthen the warm-up or clip the gradients."
    )


def evaluate(model, eval_fn, step, history, bar) -> None:
    """Run ``eval_fn`` in evaluation mode, record its metrics and show them on a line."""
    with model.evaluation_mode():
        metrics = eval_fn(model)
    check_metrics(metrics)
    history["eval"].append((step, metrics))
    if not bar.disable:
        text = " ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
        )
        bar.write(f"step {step}: {text}", file=bar.fp)


@contextlib.contextmanager
def training(model, single_blas_thread):
    """Training mode (dropout on) and, if asked, BLAS on one thread; the model's mode is
    restored afterwards, also after an error."""
    was_training = model.training
    model.train()
    blas = blas_single_threaded() if single_blas_thread else contextlib.nullcontext()
    try:
        with blas:
            yield
    finally:
        model.train(was_training)


# --8<-- [end:fit_helpers]


def progress_bar(steps, desc, stream, enabled) -> tqdm:
    """A tqdm bar over ``steps`` steps, drawn on ``stream``.

    On a terminal tqdm redraws the line in place, at most ten times a second. On anything else
    (a log file, a notebook, a test's ``io.StringIO``) it is drawn about every 10% of the steps,
    so that a log gets about ten lines and not one per step.
    """
    options = {"total": steps, "desc": desc, "file": stream, "disable": not enabled}
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return tqdm(**options)
    # Every 10% of the steps however long they take (mininterval=0, and no maxinterval after
    # which tqdm would draw every step), and not the empty bar of step 0 (a tiny delay).
    every = max(1, steps // 10)
    return tqdm(**options, miniters=every, mininterval=0, maxinterval=math.inf, delay=1e-9)
