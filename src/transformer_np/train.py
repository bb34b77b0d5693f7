"""Training: one step, a loop with a text progress bar, a NaN guard, saving and loading.

A *batch* is a tuple ``(*inputs, targets)``: the model is called as ``model(*inputs)`` and the
loss compares its logits with ``targets``. For the encoder-decoder that is
``(src, tgt_in, tgt_out)``, for the language model ``(ids, next_ids)``.

Checkpoints are plain ``.npz`` files written with ``np.savez`` and read with
``allow_pickle=False``: the arrays, plus the configuration as a JSON string. Loading one never
runs code from the file.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable

import numpy as np

from ._parallel import blas_single_threaded
from .losses import CrossEntropyLoss
from .model import LanguageModel, LanguageModelConfig, Transformer, TransformerConfig
from .optim import clip_grad_norm, global_norm

__all__ = [
    "ProgressBar",
    "TrainingDiverged",
    "fit",
    "load_model",
    "save_model",
    "train_step",
]

FORMAT = "transformer_np.checkpoint/1"


class TrainingDiverged(FloatingPointError):
    """The loss or the gradients became NaN or infinite; the parameters were not updated."""


# --------------------------------------------------------------------------------------------
# progress bar
# --------------------------------------------------------------------------------------------


def _fmt_time(seconds):
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class ProgressBar:
    """A small text progress bar, written to ``stderr`` (no dependency).

    Parameters
    ----------
    total : int
        Number of steps.
    desc : str
        Label at the start of the line.
    stream : file-like, optional
        Where to write (default ``sys.stderr``). On a terminal the line is redrawn in place
        (``\\r``); otherwise (a log file, a notebook, a test) a full line is written about every
        10% so logs stay short.
    width : int
        Characters of the bar itself.
    enabled : bool
        False turns it into a no-op.

    Examples
    --------
    >>> import io
    >>> out = io.StringIO()
    >>> bar = ProgressBar(4, desc="demo", stream=out)
    >>> for _ in range(4):
    ...     bar.update(loss=0.5)
    >>> bar.close()
    >>> "4/4" in out.getvalue() and "loss=0.5" in out.getvalue()
    True
    """

    def __init__(self, total, desc="", *, stream=None, width=20, enabled=True):
        self.total = max(int(total), 1)
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        self.width = width
        self.enabled = enabled
        self.n = 0
        self.start = time.perf_counter()
        self._last_draw = -1.0
        self._postfix = ""
        isatty = getattr(self.stream, "isatty", None)
        self.interactive = bool(isatty and isatty())
        self._line_every = max(1, self.total // 10)

    def _line(self):
        frac = min(self.n / self.total, 1.0)
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.start
        rate = self.n / elapsed if elapsed > 0 else float("nan")
        eta = (self.total - self.n) / rate if rate and rate > 0 else float("nan")
        bar = "#" * filled + "." * (self.width - filled)
        desc = f"{self.desc} " if self.desc else ""
        return (
            f"{desc}{100 * frac:3.0f}% |{bar}| {self.n}/{self.total} "
            f"[{_fmt_time(elapsed)}<{_fmt_time(eta)}, {rate:.1f} it/s] {self._postfix}"
        ).rstrip()

    def update(self, n=1, **postfix):
        """Advance by ``n`` steps; ``postfix`` values (``loss=...``) are shown after the bar."""
        self.n += n
        if postfix:
            self._postfix = " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in postfix.items()
            )
        if not self.enabled:
            return
        if self.interactive:
            now = time.perf_counter()
            if now - self._last_draw >= 0.1 or self.n >= self.total:
                self._last_draw = now
                self.stream.write("\r" + self._line() + "\x1b[K")
                self.stream.flush()
        elif self.n % self._line_every == 0 or self.n >= self.total:
            self.stream.write(self._line() + "\n")
            self.stream.flush()

    def write(self, message):
        """Write a message on its own line without breaking the bar."""
        if not self.enabled:
            return
        if self.interactive:
            self.stream.write("\r\x1b[K" + message + "\n" + self._line())
        else:
            self.stream.write(message + "\n")
        self.stream.flush()

    def close(self):
        if self.enabled and self.interactive:
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# --------------------------------------------------------------------------------------------
# one step
# --------------------------------------------------------------------------------------------


def _diverged_error(exc):
    text = str(exc)
    return any(word in text for word in ("NaN", "inf", "overflow"))


def train_step(model, batch, optimizer, loss_fn=None, *, clip_norm=1.0):
    """Forward, loss, backward, clipping and one optimiser update.

    Parameters
    ----------
    model : Transformer or LanguageModel
    batch : tuple
        ``(*inputs, targets)``.
    optimizer : Adam
        Built on ``model.parameters()``.
    loss_fn : CrossEntropyLoss, optional
        Default: plain cross-entropy.
    clip_norm : float or None
        Clip the global gradient norm to this value (None: no clipping).

    Returns
    -------
    loss : float
    grad_norm : float
        Global gradient norm before clipping.

    Raises
    ------
    TrainingDiverged
        If the loss or the gradient norm is NaN or infinite. The check runs *before* the
        update, so the parameters stay as they were after the previous (finite) step.
    """
    loss_fn = CrossEntropyLoss() if loss_fn is None else loss_fn
    *inputs, targets = batch
    try:
        logits = model(*inputs)
        loss = loss_fn(logits, targets)
    except ValueError as exc:
        if _diverged_error(exc):
            raise TrainingDiverged(f"the forward pass produced non-finite values: {exc}") from exc
        raise
    if not math.isfinite(loss):
        raise TrainingDiverged(f"the loss is {loss}")
    with np.errstate(over="ignore", invalid="ignore"):  # a NaN is reported just below
        model.backward(loss_fn.backward())
        grads = model.gradients()
        norm = clip_grad_norm(grads, clip_norm) if clip_norm else global_norm(grads)
    if not math.isfinite(norm):
        raise TrainingDiverged(f"the gradient norm is {norm} (loss {loss:.4g})")
    optimizer.step(grads)
    return loss, norm


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------


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
    progress: bool = True,
    stream=None,
    desc: str = "train",
    single_blas_thread: bool = True,
):
    """Train ``model`` for ``steps`` steps and return the history.

    Parameters
    ----------
    model : Transformer or LanguageModel
    batches : callable or iterable
        ``batches(step)`` returning a batch (step counted from 1), or an iterable of batches.
    steps : int
        Number of optimiser steps (> 0).
    optimizer : Adam
    loss_fn : CrossEntropyLoss, optional
    clip_norm : float or None
        Global-norm gradient clipping.
    eval_fn : callable, optional
        ``eval_fn(model) -> dict`` of metrics, run in evaluation mode every ``eval_every``
        steps and at the end.
    eval_every : int
        0 means only at the end.
    callback : callable, optional
        ``callback(step, history)`` after every step; returning True stops the training.
    time_limit : float, optional
        Stop after this many seconds (checked after each step).
    checkpoint : path, optional
        Save the model here at the end (only if every parameter is finite).
    progress : bool
        Show a progress bar on ``stream`` (default ``sys.stderr``).
    single_blas_thread : bool, default True
        Run OpenBLAS's matrix products on the calling thread during training. The products of
        a small model are too small to share: on this project's 2-core machine, with other
        processes running, a (704, 64) @ (64, 64) float32 product took 21 ms with OpenBLAS's
        two threads and 0.3 ms with one. Set False for large models on an idle machine.

    Returns
    -------
    dict
        ``step``, ``loss``, ``lr``, ``grad_norm``, ``time`` (lists, one entry per step),
        ``eval`` (list of ``(step, metrics)``), ``stopped`` (why the loop ended: ``"steps"``,
        ``"callback"`` or ``"time_limit"``).

    Raises
    ------
    TrainingDiverged
        When a step produces a NaN or infinite loss or gradient. The message says at which
        step; the model keeps the parameters of the last finite step and nothing is saved.
    """
    if not isinstance(steps, int | np.integer) or steps <= 0:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit}")
    loss_fn = CrossEntropyLoss() if loss_fn is None else loss_fn
    if callable(batches):
        get_batch = batches
    else:
        iterator = iter(batches)

        def get_batch(step):
            return next(iterator)

    history = {"step": [], "loss": [], "lr": [], "grad_norm": [], "time": [], "eval": []}
    history["stopped"] = "steps"
    start = time.perf_counter()
    bar = ProgressBar(steps, desc, stream=stream, enabled=progress)

    def run_eval(step):
        model.eval()
        metrics = eval_fn(model)
        model.train()
        history["eval"].append((step, metrics))
        bar.write(
            f"step {step}: "
            + " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
            )
        )

    model.train()
    step = 0
    blas = blas_single_threaded() if single_blas_thread else contextlib.nullcontext()
    with blas:
        try:
            for step in range(1, steps + 1):
                lr = optimizer.current_lr()
                try:
                    loss, norm = train_step(
                        model, get_batch(step), optimizer, loss_fn, clip_norm=clip_norm
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
                bar.update(loss=loss, lr=lr)
                if eval_fn is not None and eval_every and step % eval_every == 0 and step < steps:
                    run_eval(step)
                if callback is not None and callback(step, history):
                    history["stopped"] = "callback"
                    break
                if time_limit is not None and time.perf_counter() - start > time_limit:
                    history["stopped"] = "time_limit"
                    break
            if eval_fn is not None:
                run_eval(step)
        finally:
            bar.close()
            model.eval()
    if checkpoint is not None:
        save_model(checkpoint, model)
    return history


# --------------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------------

_MODELS = {
    "TransformerConfig": (TransformerConfig, Transformer),
    "LanguageModelConfig": (LanguageModelConfig, LanguageModel),
}


def save_model(path, model, *, extra=None):
    """Save a model's configuration and parameters to an ``.npz`` file (no pickle).

    Parameters
    ----------
    path : str or path-like
        Destination (NumPy adds ``.npz`` if missing).
    model : Transformer or LanguageModel
    extra : dict of str to ndarray, optional
        More arrays to store (e.g. a vocabulary as an array of str), under ``extra/<name>``.

    Raises
    ------
    ValueError
        If a parameter holds NaN or inf: a diverged model is never written.

    Examples
    --------
    >>> import tempfile, os
    >>> from transformer_np.model import LanguageModel, LanguageModelConfig
    >>> m = LanguageModel(LanguageModelConfig(vocab_size=5, d_model=8, n_heads=2), rng=0)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_model(os.path.join(d, "m.npz"), m)
    ...     m2 = load_model(os.path.join(d, "m.npz"))
    >>> bool((m2.parameters()["embed.W"] == m.parameters()["embed.W"]).all())
    True
    """
    if type(model.config).__name__ not in _MODELS:
        raise TypeError(f"model must be a Transformer or a LanguageModel, got {type(model)}")
    arrays = {}
    for name, p in model.parameters().items():
        if not np.isfinite(p).all():
            raise ValueError(
                f"parameter {name!r} holds NaN or inf: refusing to save a diverged model"
            )
        arrays[f"param/{name}"] = p
    for name, value in (extra or {}).items():
        arr = np.asarray(value)
        if arr.dtype == object:
            raise TypeError(f"extra[{name!r}] must not be an object array (it would need pickle)")
        arrays[f"extra/{name}"] = arr
    arrays["format"] = np.array(FORMAT)
    arrays["config"] = np.array(model.config.to_json())
    np.savez(path, **arrays)


def load_model(path, *, return_extra=False):
    """Load a model saved by :func:`save_model` (``allow_pickle=False``).

    Returns
    -------
    model : Transformer or LanguageModel
        In evaluation mode.
    extra : dict
        Only with ``return_extra=True``: the arrays saved with ``extra=``.
    """
    with np.load(path, allow_pickle=False) as data:
        if "format" not in data or str(data["format"]) != FORMAT:
            raise ValueError(f"{path} is not a transformer_np checkpoint ({FORMAT})")
        cfg_json = str(data["config"])
        kind = json.loads(cfg_json).get("type")
        if kind not in _MODELS:
            raise ValueError(f"{path}: unknown model type {kind!r}")
        cfg_cls, model_cls = _MODELS[kind]
        model = model_cls(cfg_cls.from_json(cfg_json), rng=0)
        params = {k[len("param/") :]: data[k] for k in data.files if k.startswith("param/")}
        extra = {k[len("extra/") :]: data[k] for k in data.files if k.startswith("extra/")}
    model.load_parameters(params)
    model.eval()
    return (model, extra) if return_extra else model
