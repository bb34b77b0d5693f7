"""Training: one step (:func:`train_step`) and the loop that repeats it (:func:`fit`).

A *batch* is a tuple ``(*inputs, targets)``: the model is called as ``model(*inputs)`` and the
loss compares its logits with ``targets``. For the encoder-decoder that is
``(src, tgt_in, tgt_out)``, for the language model ``(ids, next_ids)``.

A step does five things: 1. forward, 2. loss, 3. backward, 4. clip, 5. update. Before the
update it checks that the loss and the gradient norm are finite; if not, training stops with
:class:`TrainingDiverged` and the parameters stay those of the previous step.

Saving and loading live in :mod:`transformer_np.checkpoints`; ``save_model`` and ``load_model``
can also be imported from here, as before.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping

import numpy as np
from tqdm import tqdm

from ._kernels.threads import blas_single_threaded
from ._train_checks import (
    batch_getter,
    check_clip_norm,
    check_eval_every,
    check_loss_fn,
    check_model,
    check_optimizer,
    check_optional_callable,
    check_stream,
    type_description,
)
from ._validation import check_bool, check_positive_float, check_positive_int
from .checkpoints import checkpoint_path, load_model, save_model
from .clipping import clip_grad_norm, global_norm
from .model import Transformer

# save_model and load_model moved to checkpoints.py; they stay importable from here.
__all__ = ["TrainingDiverged", "fit", "load_model", "save_model", "train_step"]


class TrainingDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite; the parameters were not updated."""


# --------------------------------------------------------------------------------------------
# one step
# --------------------------------------------------------------------------------------------


def _split_batch(model, batch):
    """``(inputs, targets)`` of a batch, checked against what ``model`` takes."""
    n_inputs = 2 if isinstance(model, Transformer) else 1
    form = "(src, tgt_in, tgt_out)" if n_inputs == 2 else "(ids, next_ids)"
    if not isinstance(batch, tuple | list):
        shape = f" of shape {tuple(batch.shape)}" if isinstance(batch, np.ndarray) else ""
        raise TypeError(
            f"batch must be a tuple (*inputs, targets), {form} for a {type(model).__name__}, "
            f"got {type(batch).__name__}{shape}"
        )
    if len(batch) != n_inputs + 1:
        raise ValueError(
            f"batch for a {type(model).__name__} must have {n_inputs + 1} elements {form}, "
            f"got {len(batch)}"
        )
    *inputs, targets = batch
    return inputs, targets


def _loss_value(loss, loss_fn):
    """The loss returned by ``loss_fn`` as a float (a number or a 0-d array), else TypeError."""
    if isinstance(loss, np.ndarray) and loss.ndim == 0 and loss.dtype.kind in "fiu":
        return float(loss)
    if isinstance(loss, bool | np.bool_) or not isinstance(loss, numbers.Real):
        raise TypeError(
            f"loss_fn must return the loss as a number, got {type(loss).__name__} "
            f"(from {type_description(loss_fn)})"
        )
    return float(loss)


def _is_non_finite_error(exc):
    """Whether a ValueError of the model or the loss reports a NaN, an inf or an overflow."""
    text = str(exc)
    return any(word in text for word in ("NaN", "inf", "overflow"))


def train_step(model, batch, optimizer, loss_fn=None, *, clip_norm=1.0):
    """Forward, loss, backward, clipping and one optimiser update.

    Parameters
    ----------
    model : Transformer or LanguageModel
    batch : tuple
        ``(*inputs, targets)``: ``(ids, next_ids)`` for a LanguageModel,
        ``(src, tgt_in, tgt_out)`` for a Transformer.
    optimizer : Adam
        Built on ``model.parameters()`` (the very arrays of this model, checked).
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
        If the loss or the gradient norm is NaN or infinite. The check runs *before* the
        update, so the parameters stay as they were after the previous (finite) step.

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.model import LanguageModel, LanguageModelConfig
    >>> from transformer_np.optim import Adam
    >>> model = LanguageModel(LanguageModelConfig(vocab_size=6, d_model=8, n_heads=2), rng=0)
    >>> ids = np.array([[1, 2, 3, 4]])
    >>> loss, grad_norm = train_step(model, (ids, ids + 1), Adam(model.parameters()))
    >>> bool(loss > 0 and grad_norm > 0)
    True
    """
    check_model(model)
    loss_fn = check_loss_fn(loss_fn)
    clip_norm = check_clip_norm(clip_norm)
    check_optimizer(model, optimizer)
    return _train_step_unchecked(model, batch, optimizer, loss_fn, clip_norm)


def _train_step_unchecked(model, batch, optimizer, loss_fn, clip_norm):
    """:func:`train_step` on arguments already checked (``fit`` checks them once, not per step)."""
    inputs, targets = _split_batch(model, batch)
    # 1. forward and 2. loss (the model reports an overflow as a ValueError)
    try:
        logits = model(*inputs)  # (B, T, V)
        loss = loss_fn(logits, targets)
    except ValueError as exc:
        if _is_non_finite_error(exc):
            raise TrainingDiverged(f"the forward pass produced non-finite values: {exc}") from exc
        raise
    loss = _loss_value(loss, loss_fn)
    if not math.isfinite(loss):
        raise TrainingDiverged(f"the loss is {loss}")
    with np.errstate(over="ignore", invalid="ignore"):  # a NaN is reported just below
        # 3. backward: the gradient of every parameter
        try:
            model.backward(loss_fn.backward())
        except ValueError as exc:  # the model refuses a non-finite gradient of the logits
            if _is_non_finite_error(exc):
                raise TrainingDiverged(
                    f"the gradient norm is not finite: {exc} (loss {loss:.4g})"
                ) from exc
            raise
        grads = model.gradients()
        # 4. clip: scale all gradients down if their global norm exceeds clip_norm
        norm = clip_grad_norm(grads, clip_norm) if clip_norm else global_norm(grads)
    if not math.isfinite(norm):
        raise TrainingDiverged(f"the gradient norm is {norm} (loss {loss:.4g})")
    # 5. update
    try:
        optimizer.step(grads)
    except FloatingPointError as exc:  # e.g. a gradient that overflows the parameters' dtype
        raise TrainingDiverged(f"the optimiser refused the step: {exc}") from exc
    return loss, norm


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------


def _progress_bar(steps, desc, stream, enabled):
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


def _format_metrics(metrics):
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
    )


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
        Built on ``model.parameters()`` (checked).
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
        Run the BLAS matrix products on the calling thread during training. The products of a
        small model are too small to share between cores: BLAS's threads then cost more than
        they save, much more when other processes share the cores
        (``benchmarks/bench_train_step.py --numpy-blas-threads`` measures both). Set False for
        large models on an idle machine.

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

    Examples
    --------
    >>> import numpy as np
    >>> from transformer_np.model import LanguageModel, LanguageModelConfig
    >>> from transformer_np.optim import Adam
    >>> model = LanguageModel(LanguageModelConfig(vocab_size=6, d_model=8, n_heads=2), rng=0)
    >>> ids = np.array([[1, 2, 3, 4]])
    >>> history = fit(model, lambda step: (ids, ids + 1), steps=5,
    ...               optimizer=Adam(model.parameters(), lr=1e-2), progress=False)
    >>> len(history["loss"]), history["stopped"]
    (5, 'steps')
    """
    # 1. check every argument, once
    check_model(model)
    steps = check_positive_int(steps, "steps")
    if time_limit is not None:
        time_limit = check_positive_float(time_limit, "time_limit")
    loss_fn = check_loss_fn(loss_fn)
    clip_norm = check_clip_norm(clip_norm)
    check_optimizer(model, optimizer, need_current_lr=True)
    check_optional_callable(eval_fn, "eval_fn", "eval_fn(model) -> dict")
    check_optional_callable(callback, "callback", "callback(step, history) -> bool")
    eval_every = check_eval_every(eval_every)
    overwrite_checkpoint = check_bool(overwrite_checkpoint, "overwrite_checkpoint")
    if checkpoint is not None and not hasattr(checkpoint, "write"):
        checkpoint_path(
            checkpoint,
            overwrite_checkpoint,
            argument="checkpoint",
            overwrite_option="overwrite_checkpoint=True",
        )
    check_stream(stream)
    get_batch = batch_getter(batches, steps)

    history = {"step": [], "loss": [], "lr": [], "grad_norm": [], "time": [], "eval": []}
    history["stopped"] = "steps"
    stream = sys.stderr if stream is None else stream
    bar = _progress_bar(steps, desc, stream, progress)
    start = time.perf_counter()

    def evaluate(step):
        model.eval()
        try:
            metrics = eval_fn(model)
        finally:
            model.train()
        if not isinstance(metrics, Mapping):
            raise TypeError(
                "eval_fn must return a dict of metrics (name -> value), "
                f"got {type(metrics).__name__} {metrics!r:.60}"
            )
        history["eval"].append((step, metrics))
        if progress:
            bar.write(f"step {step}: {_format_metrics(metrics)}", file=stream)

    # 2. the steps, in training mode (dropout on)
    was_training = model.training
    model.train()
    step = 0
    blas = blas_single_threaded() if single_blas_thread else contextlib.nullcontext()
    with blas:
        try:
            for step in range(1, steps + 1):
                lr = optimizer.current_lr()
                try:
                    loss, norm = _train_step_unchecked(
                        model, get_batch(step), optimizer, loss_fn, clip_norm
                    )
                except TrainingDiverged as exc:
                    last = history["loss"][-1] if history["loss"] else float("nan")
                    raise TrainingDiverged(
                        f"training diverged at step {step} ({exc}); last finite loss {last:.4g}. "
                        "The parameters are those of the previous step and nothing was saved: "
                        "lower the learning rate, lengthen the warm-up or clip the gradients."
                    ) from exc
                history["step"].append(step)
                history["loss"].append(loss)
                history["lr"].append(lr)
                history["grad_norm"].append(norm)
                history["time"].append(time.perf_counter() - start)
                bar.set_postfix(loss=loss, lr=lr, refresh=False)
                bar.update()
                if eval_fn is not None and eval_every and step % eval_every == 0 and step < steps:
                    evaluate(step)
                if callback is not None and callback(step, history):
                    history["stopped"] = "callback"
                    break
                if time_limit is not None and time.perf_counter() - start > time_limit:
                    history["stopped"] = "time_limit"
                    break
            # 3. the final evaluation
            if eval_fn is not None:
                evaluate(step)
        finally:
            bar.close()
            model.train(was_training)
    # 4. the checkpoint. Its path was checked before training; a file that appeared meanwhile
    # is still not replaced unless overwrite_checkpoint allows it.
    if checkpoint is not None:
        save_model(checkpoint, model, overwrite=overwrite_checkpoint)
    return history
