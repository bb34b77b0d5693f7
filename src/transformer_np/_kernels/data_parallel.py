"""A training step's forward and backward passes on parts of the batch, side by side.

:func:`transformer_np.train.train_step` computes the loss and the gradients of a batch with one
forward and one backward pass (its plain steps 1 to 3). NumPy runs the element-wise work of
those passes (GELU, softmax, layer norm, the additions) on one core, and a small model's matrix
products gain little from BLAS's threads. With several cores, :func:`forward_backward_in_parts`
runs the same plain steps on one part of the batch per thread instead, each on a *replica* of
the model: a copy that shares the model's parameter arrays but keeps its own forward caches and
gradients. The loss is a mean over the N counted rows of the targets, ``L = sum_i (N_i / N) L_i``
over the parts, so the step's loss and gradients are the parts' ones weighted by ``N_i / N``:
the same as one pass, up to float rounding (``tests/test_kernels_data_parallel.py``).

It applies (:func:`batch_parts`) only where that equality is known to hold and the work pays
for the threads: a :class:`~transformer_np.losses.CrossEntropyLoss`, no dropout active (the
parts would draw their masks from copies of the model's generator), at least two cores and a
batch of at least :data:`MIN_ROWS` sequences and :data:`MIN_WORK` token features.
"""

from __future__ import annotations

import copy
import weakref

import numpy as np

from .threads import num_threads, parallel_for, split_range

__all__ = ["MIN_ROWS", "MIN_WORK", "batch_parts", "forward_backward_in_parts"]

# Below these sizes one pass is faster than the hand-off to threads. The training step of
# benchmarks/bench_train_step.py (32 sequences of 32 tokens, d_model 64: 65536 token features)
# ran 10 to 14% faster in two parts than in one pass, in two in-process runs on 2 cores.
MIN_ROWS = 4
MIN_WORK = 1 << 16  # tokens x d_model

_replicas: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def batch_parts(model, inputs, targets, loss_fn) -> list[slice] | None:
    """The parts of the batch to run side by side, or None for one pass.

    None unless there are at least two threads (:func:`~transformer_np._kernels.threads.
    num_threads`), ``loss_fn`` is a plain CrossEntropyLoss, no Dropout of the model is active,
    every input and the targets are arrays with the same batch axis of at least
    :data:`MIN_ROWS` sequences, and the batch has at least :data:`MIN_WORK` token features.
    """
    from ..layers import Dropout
    from ..losses import CrossEntropyLoss

    threads = num_threads()
    if threads < 2 or type(loss_fn) is not CrossEntropyLoss:
        return None
    arrays = [*inputs, targets]
    if not all(isinstance(a, np.ndarray) and a.ndim == 2 for a in arrays):
        return None
    rows = targets.shape[0]
    if rows < MIN_ROWS or any(a.shape[0] != rows for a in arrays):
        return None
    if inputs[0].size * model.config.d_model < MIN_WORK:
        return None
    if any(isinstance(m, Dropout) and m.training and m.p > 0 for m in model.modules()):
        return None
    return split_range(rows, threads)


def replicas(model, n: int) -> list:
    """``n`` copies of ``model`` that share its parameter arrays (made once, then reused).

    Remade when the model's parameters are no longer the replicas' arrays (a parameter was
    replaced, not updated in place); the train/eval switches and the dropout rates are copied
    at every call.
    """
    from ..layers import Dropout

    leaves = model.leaves()
    kept = _replicas.get(model)
    if kept is None or len(kept) < n or not all(shares_parameters(model, r) for r in kept[:n]):
        memo = {id(leaf.params[key]): leaf.params[key] for _, leaf, key in leaves}
        # the parameters are shared, not copied; the last forward pass's caches are left out
        memo.update((id(m.cache), None) for m in model.modules() if m.cache is not None)
        kept = [copy.deepcopy(model, dict(memo)) for _ in range(n)]
        _replicas[model] = kept
    for r in kept[:n]:
        for mine, theirs in zip(model.modules(), r.modules(), strict=True):
            theirs.training = mine.training
            if isinstance(mine, Dropout):
                theirs.p = mine.p
    return kept[:n]


def shares_parameters(model, replica) -> bool:
    """Whether every parameter of ``replica`` is the very array of ``model``'s."""
    return all(
        theirs.params[key] is mine.params[key]
        for (_, mine, key), (_, theirs, _) in zip(model.leaves(), replica.leaves(), strict=True)
    )


def forward_backward_in_parts(model, inputs, targets, loss_fn, parts, forward_backward) -> float:
    """Steps 1 to 3 of a training step on ``parts`` of the batch, one thread each.

    ``forward_backward(model, inputs, targets, loss_fn) -> loss`` is the plain computation (of
    :mod:`transformer_np.train`); it runs on each part with a replica of ``model`` and a loss
    object of its own. Afterwards ``model``'s gradients are the weighted sum of the parts'
    (``model.gradients()`` reads them as after one pass) and the weighted loss is returned.
    """
    copies = replicas(model, len(parts))
    losses = [copy.copy(loss_fn) for _ in parts]
    ignore = loss_fn.ignore_index
    counts = [
        targets[sl].size if ignore is None else int(np.count_nonzero(targets[sl] != ignore))
        for sl in parts
    ]
    total = sum(counts)
    results = [None] * len(parts)

    def run(i):
        sl = parts[i]
        results[i] = forward_backward(copies[i], [a[sl] for a in inputs], targets[sl], losses[i])

    parallel_for(run, range(len(parts)), one_blas_thread=True)
    weights = [c / total if total else 1.0 / len(parts) for c in counts]
    part_leaves = [r.leaves() for r in copies]  # in the order of model.leaves()
    for j, (_, leaf, key) in enumerate(model.leaves()):
        grad = weights[0] * part_leaves[0][j][1].grads[key]
        for w, others in zip(weights[1:], part_leaves[1:], strict=True):
            grad += w * others[j][1].grads[key]
        leaf.grads[key] = grad
    return float(sum(w * loss for w, loss in zip(weights, results, strict=True)))
