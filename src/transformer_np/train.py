"""Training: one step, a loop with a text progress bar, a NaN guard, saving and loading.

A *batch* is a tuple ``(*inputs, targets)``: the model is called as ``model(*inputs)`` and the
loss compares its logits with ``targets``. For the encoder-decoder that is
``(src, tgt_in, tgt_out)``, for the language model ``(ids, next_ids)``.

Checkpoints are plain ``.npz`` files written with ``np.savez`` and read with
``allow_pickle=False``: the arrays, plus the configuration as a JSON string. Loading one never
runs code from the file. A checkpoint is written to a temporary file next to its destination
and then moved into place, so an interrupted save never destroys the previous file.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import secrets
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from ._kernels.threads import blas_single_threaded
from ._validation import check_bool, check_positive_float, check_positive_int
from .losses import CrossEntropyLoss
from .model import LanguageModel, LanguageModelConfig, Transformer, TransformerConfig
from .optim import Adam, clip_grad_norm, global_norm

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


def _check_model(model):
    if not isinstance(model, Transformer | LanguageModel):
        raise TypeError(
            f"model must be a Transformer or a LanguageModel, got {type(model).__name__}"
        )


def _check_optimizer(model, optimizer, *, need_current_lr=False):
    """The optimiser must update this model's own parameter arrays (checked by identity)."""
    methods = ("step", "current_lr") if need_current_lr else ("step",)
    if not all(callable(getattr(optimizer, m, None)) for m in methods):
        raise TypeError(
            "optimizer must be an optimiser built on the model's parameters, such as "
            f"Adam(model.parameters()), got {type(optimizer).__name__}"
        )
    if isinstance(optimizer, Adam):
        problem = optimizer._not_holding(model.parameters())
        if problem is not None:
            raise ValueError(
                f"optimizer was not built on this model's parameters: {problem}; "
                "build it with Adam(model.parameters()) of the model you train"
            )


def _check_loss_fn(loss_fn):
    if loss_fn is None:
        return CrossEntropyLoss()
    if not callable(loss_fn) or not callable(getattr(loss_fn, "backward", None)):
        hint = (
            " (the function cross_entropy returns (loss, grad); pass CrossEntropyLoss() instead)"
            if getattr(loss_fn, "__name__", "") == "cross_entropy"
            else ""
        )
        raise TypeError(
            "loss_fn must be a loss object called as loss_fn(logits, targets) -> float with a "
            f"backward() method, such as CrossEntropyLoss(), got {_describe(loss_fn)}{hint}"
        )
    return loss_fn


def _check_clip_norm(clip_norm):
    if clip_norm is None:
        return None
    if isinstance(clip_norm, bool | np.bool_) or not isinstance(clip_norm, numbers.Real):
        raise TypeError(
            "clip_norm must be a positive number or None (no clipping), "
            f"got {clip_norm!r} ({type(clip_norm).__name__})"
        )
    if not (math.isfinite(clip_norm) and clip_norm > 0):
        raise ValueError(
            f"clip_norm must be a positive finite number or None (no clipping), got {clip_norm}"
        )
    return float(clip_norm)


def _describe(value):
    if callable(value) and hasattr(value, "__name__"):
        return f"the {type(value).__name__} {value.__name__}"
    return type(value).__name__


def _split_batch(model, batch):
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
    if isinstance(loss, np.ndarray) and loss.ndim == 0 and loss.dtype.kind in "fiu":
        return float(loss)
    if isinstance(loss, bool | np.bool_) or not isinstance(loss, numbers.Real):
        raise TypeError(
            f"loss_fn must return the loss as a number, got {type(loss).__name__} "
            f"(from {_describe(loss_fn)})"
        )
    return float(loss)


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
    """
    _check_model(model)
    loss_fn = _check_loss_fn(loss_fn)
    clip_norm = _check_clip_norm(clip_norm)
    _check_optimizer(model, optimizer)
    return _step(model, batch, optimizer, loss_fn, clip_norm)


def _step(model, batch, optimizer, loss_fn, clip_norm):
    """:func:`train_step` on arguments already checked (``fit`` checks them once, not per step)."""
    inputs, targets = _split_batch(model, batch)
    try:
        logits = model(*inputs)
        loss = loss_fn(logits, targets)
    except ValueError as exc:
        if _diverged_error(exc):
            raise TrainingDiverged(f"the forward pass produced non-finite values: {exc}") from exc
        raise
    loss = _loss_value(loss, loss_fn)
    if not math.isfinite(loss):
        raise TrainingDiverged(f"the loss is {loss}")
    with np.errstate(over="ignore", invalid="ignore"):  # a NaN is reported just below
        try:
            model.backward(loss_fn.backward())
        except ValueError as exc:  # the model refuses a non-finite gradient of the logits
            if _diverged_error(exc):
                raise TrainingDiverged(
                    f"the gradient norm is not finite: {exc} (loss {loss:.4g})"
                ) from exc
            raise
        grads = model.gradients()
        norm = clip_grad_norm(grads, clip_norm) if clip_norm else global_norm(grads)
    if not math.isfinite(norm):
        raise TrainingDiverged(f"the gradient norm is {norm} (loss {loss:.4g})")
    try:
        optimizer.step(grads)
    except FloatingPointError as exc:  # e.g. a gradient that overflows the parameters' dtype
        raise TrainingDiverged(f"the optimiser refused the step: {exc}") from exc
    return loss, norm


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------


def _check_eval_every(eval_every):
    if isinstance(eval_every, bool | np.bool_) or not isinstance(eval_every, numbers.Integral):
        raise TypeError(
            "eval_every must be an integer >= 0 (0: evaluate only at the end), "
            f"got {eval_every!r} ({type(eval_every).__name__})"
        )
    if eval_every < 0:
        raise ValueError(
            f"eval_every must be an integer >= 0 (0: evaluate only at the end), got {eval_every}"
        )
    return int(eval_every)


def _check_optional_callable(value, name, signature):
    if value is not None and not callable(value):
        raise TypeError(
            f"{name} must be a callable {signature} or None, got {type(value).__name__}"
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

    Every argument is checked before the first step (a bad ``checkpoint`` path does not wait
    for the end of the run to fail).

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
        :func:`save_model` (``.npz`` is added if missing). Its directory must exist.
    overwrite_checkpoint : bool, default False
        Allow ``checkpoint`` to replace an existing file. Without it an existing file is a
        FileExistsError raised *before* training, so that no file of the user's is replaced
        by accident.
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
    _check_model(model)
    steps = check_positive_int(steps, "steps")
    if time_limit is not None:
        time_limit = check_positive_float(time_limit, "time_limit")
    loss_fn = _check_loss_fn(loss_fn)
    clip_norm = _check_clip_norm(clip_norm)
    _check_optimizer(model, optimizer, need_current_lr=True)
    _check_optional_callable(eval_fn, "eval_fn", "eval_fn(model) -> dict")
    _check_optional_callable(callback, "callback", "callback(step, history) -> bool")
    eval_every = _check_eval_every(eval_every)
    overwrite_checkpoint = check_bool(overwrite_checkpoint, "overwrite_checkpoint")
    if checkpoint is not None and not hasattr(checkpoint, "write"):
        _checkpoint_target(
            checkpoint, overwrite_checkpoint, "checkpoint", "overwrite_checkpoint=True"
        )
    if callable(batches):
        get_batch = batches
    else:
        try:
            iterator = iter(batches)
        except TypeError as exc:
            raise TypeError(
                "batches must be a callable batches(step) -> batch or an iterable of batches, "
                f"got {type(batches).__name__}"
            ) from exc

        def get_batch(step):
            try:
                return next(iterator)
            except StopIteration:
                raise ValueError(
                    f"batches ran out after {step - 1} batch(es), but steps={steps} asks for "
                    f"{steps}: pass at least {steps} batches, a callable batches(step), or a "
                    f"smaller steps (the model keeps the parameters of step {step - 1}; nothing "
                    "was saved)"
                ) from None

    history = {"step": [], "loss": [], "lr": [], "grad_norm": [], "time": [], "eval": []}
    history["stopped"] = "steps"
    start = time.perf_counter()
    bar = ProgressBar(steps, desc, stream=stream, enabled=progress)

    def run_eval(step):
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
        bar.write(
            f"step {step}: "
            + " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items()
            )
        )

    was_training = model.training
    model.train()
    step = 0
    blas = blas_single_threaded() if single_blas_thread else contextlib.nullcontext()
    with blas:
        try:
            for step in range(1, steps + 1):
                lr = optimizer.current_lr()
                try:
                    loss, norm = _step(model, get_batch(step), optimizer, loss_fn, clip_norm)
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
            model.train(was_training)
    if checkpoint is not None:
        # The target was checked before training; a file that appeared meanwhile is still
        # not replaced unless overwrite_checkpoint allows it.
        save_model(checkpoint, model, overwrite=overwrite_checkpoint)
    return history


# --------------------------------------------------------------------------------------------
# checkpoints
# --------------------------------------------------------------------------------------------

_MODELS = {
    "TransformerConfig": (TransformerConfig, Transformer),
    "LanguageModelConfig": (LanguageModelConfig, LanguageModel),
}


def _checkpoint_target(path, overwrite, name="path", allow="overwrite=True"):
    """The file that ``np.savez(path)`` would write, checked: its directory exists, and it
    exists only if ``overwrite`` allows it. ``name`` and ``allow`` word the errors: what the
    path is, and what the caller passes to replace a file (``--overwrite`` for the demos)."""
    try:
        target = os.fspath(path)
    except TypeError as exc:
        raise TypeError(
            f"{name} must be a str or path-like (or a writable file object), "
            f"got {type(path).__name__}"
        ) from exc
    if not isinstance(target, str):
        raise TypeError(f"{name} must be a str or path-like, got {type(target).__name__}")
    if not target.endswith(".npz"):
        target += ".npz"  # what np.savez does
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(
            f"cannot save to {target!r}: the directory {folder!r} does not exist"
        )
    if os.path.isdir(target):
        raise IsADirectoryError(f"cannot save to {target!r}: it is a directory")
    if os.path.lexists(target):
        if not overwrite:
            raise FileExistsError(
                f"{name} {target!r} already exists: pass {allow} to replace it "
                "(or choose another path)"
            )
    return target


def _write_atomically(target, arrays, overwrite):
    """Write ``arrays`` with ``np.savez`` to a temporary file next to ``target``, then move it
    into place in one step: an interrupted save leaves the previous file as it was."""
    # Through a symbolic link, replace the file it points to, not the link.
    real = os.path.realpath(target)
    folder, base = os.path.split(real)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, flags, 0o666)  # the usual permissions (umask applies)
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 collisions of 32 random bits
        raise FileExistsError(f"could not create a temporary file in {folder!r}")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        appeared = f"{target!r} appeared while the model was being saved: it was not replaced"
        if overwrite is False:
            try:
                os.link(tmp, real)  # atomic, and fails if the file appeared meanwhile
            except FileExistsError:
                raise FileExistsError(appeared) from None
            except OSError:  # no hard links on this file system
                if os.path.lexists(real):
                    raise FileExistsError(appeared) from None
                os.replace(tmp, real)
        else:
            os.replace(tmp, real)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def save_model(path, model, *, extra=None, overwrite=False):
    """Save a model's configuration and parameters to an ``.npz`` file (no pickle).

    The file is written to a temporary file in the same directory and then moved into place
    (``os.replace``), so an interrupted save never leaves a half-written file, nor loses the
    file that was there before.

    Parameters
    ----------
    path : str or path-like
        Destination (``.npz`` is added if missing, as ``np.savez`` does); its directory must
        exist. A writable binary file object is also accepted (written directly).
    model : Transformer or LanguageModel
    extra : dict of str to ndarray, optional
        More arrays to store (e.g. a vocabulary as an array of str), under ``extra/<name>``.
    overwrite : bool, default False
        What to do if ``path`` exists: False raises FileExistsError (a file of yours is never
        replaced by accident), True replaces it.

    Raises
    ------
    TypeError
        If ``model`` is not a Transformer or a LanguageModel, or ``extra`` is not a dict of
        str to (non-object) arrays.
    ValueError
        If a parameter holds NaN or inf: a diverged model is never written.
    FileExistsError
        If ``path`` exists and ``overwrite=False``.
    FileNotFoundError
        If the directory of ``path`` does not exist.

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
    _check_model(model)
    overwrite = check_bool(overwrite, "overwrite")
    if extra is not None and not isinstance(extra, Mapping):
        raise TypeError(f"extra must be a dict name -> ndarray or None, got {type(extra).__name__}")
    arrays = {}
    for name, p in model.parameters().items():
        if not np.isfinite(p).all():
            raise ValueError(
                f"parameter {name!r} holds NaN or inf: refusing to save a diverged model"
            )
        arrays[f"param/{name}"] = p
    for name, value in (extra or {}).items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"extra keys must be non-empty strings, got {name!r}")
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"extra[{name!r}] must be an array (or convertible to one), "
                f"got {type(value).__name__}: {exc}"
            ) from exc
        if arr.dtype == object:
            raise TypeError(f"extra[{name!r}] must not be an object array (it would need pickle)")
        arrays[f"extra/{name}"] = arr
    arrays["format"] = np.array(FORMAT)
    arrays["config"] = np.array(model.config.to_json())
    if hasattr(path, "write"):  # a file object: written as it is
        np.savez(path, **arrays)
        return
    target = _checkpoint_target(path, overwrite)
    _write_atomically(target, arrays, overwrite)


def _where(path):
    if hasattr(path, "read"):
        name = getattr(path, "name", None)
        return repr(name) if isinstance(name, str) else "the file object"
    return repr(os.fspath(path))


_READ_ERRORS = (ValueError, OSError, EOFError, KeyError, zipfile.BadZipFile)


def load_model(path, *, return_extra=False):
    """Load a model saved by :func:`save_model` (``allow_pickle=False``).

    Parameters
    ----------
    path : str, path-like or binary file object
    return_extra : bool
        Also return the arrays saved with ``extra=``.

    Returns
    -------
    model : Transformer or LanguageModel
        In evaluation mode.
    extra : dict
        Only with ``return_extra=True``: the arrays saved with ``extra=``.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the file is not a checkpoint written by :func:`save_model` (another format, a
        truncated or corrupted file, a missing or invalid configuration) or holds parameters
        of the wrong name, shape or type, or NaN/inf. The message names the file.
    """
    where = _where(path)
    not_ckpt = f"{where} is not a transformer_np checkpoint ({FORMAT})"
    try:
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except _READ_ERRORS as exc:
        if isinstance(exc, zipfile.BadZipFile | EOFError):
            detail = f"a damaged .npz archive (truncated or corrupted: {exc})"
        elif "pickle" in str(exc):  # NumPy's words for "neither .npy nor .npz"
            detail = "not an .npz archive"
        else:
            detail = f"unreadable ({type(exc).__name__}: {exc})"
        raise ValueError(f"{not_ckpt}: the file is {detail}") from exc
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(
            f"{not_ckpt}: it holds a single array (.npy format), not an .npz archive "
            "written by save_model"
        )
    try:
        with data:
            files = data.files
            if "format" not in files or str(data["format"]) != FORMAT:
                raise ValueError(not_ckpt)
            if "config" not in files:
                raise ValueError(f"{where}: the checkpoint has no 'config' entry")
            cfg_arr = data["config"]
            params = {k[len("param/") :]: data[k] for k in files if k.startswith("param/")}
            extra = {k[len("extra/") :]: data[k] for k in files if k.startswith("extra/")}
    except ValueError as exc:
        if str(exc).startswith((not_ckpt, where)):
            raise
        raise ValueError(f"{where}: the checkpoint is corrupted or truncated ({exc})") from exc
    except _READ_ERRORS as exc:
        raise ValueError(f"{where}: the checkpoint is corrupted or truncated ({exc})") from exc
    if cfg_arr.ndim != 0 or cfg_arr.dtype.kind != "U":
        raise ValueError(
            f"{where}: 'config' must be a JSON string, got an array of dtype {cfg_arr.dtype}"
        )
    try:
        cfg = json.loads(str(cfg_arr))
    except ValueError as exc:
        raise ValueError(f"{where}: 'config' is not valid JSON ({exc})") from exc
    if not isinstance(cfg, dict):
        raise ValueError(
            f"{where}: 'config' must be a JSON object with the model's settings, "
            f"got a JSON {type(cfg).__name__}"
        )
    kind = cfg.get("type")
    if kind not in _MODELS:
        raise ValueError(f"{where}: unknown model type {kind!r} (expected one of {list(_MODELS)})")
    cfg_cls, model_cls = _MODELS[kind]
    try:
        config = cfg_cls.from_json(str(cfg_arr))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: invalid model configuration: {exc}") from exc
    model = model_cls(config, rng=0)
    try:
        model.load_parameters(params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
    model.eval()
    return (model, extra) if return_extra else model
