"""The NumPy ceiling of a workload: the least NumPy work that gives the same result.

Every implementation of a Transformer in NumPy must at least make the matrix products of its
forward (and backward) pass, at their shapes, and call ``np.exp`` once per attention score and
once per element of an activation that needs one (exact GELU, SiLU) and of a softmax over the
vocabulary. This module lists those operations for each workload of the benchmarks, from the
sizes of the model, and runs them and nothing else: no softmax maximum, no sums, no division,
no layer norm, no bias, no copies. Its time, measured in the same rounds and on the same threads
as our code, is the ceiling of any NumPy implementation on this machine.

An operation is ``("mm", (key_a, shape_a), (key_b, shape_b))`` (``np.matmul`` into an output
buffer) or ``("exp", n)`` (``np.exp`` in place on the first ``n`` elements of the last output).
Buffers are named by key: one per weight matrix of each layer (``"L3.W1"``), so that a pass reads
every weight from memory as the real model does, and a few shared ones for activations (``"a"``,
``"b"``, the output ``"o"``); each is a contiguous view of a flat array of the largest size the
key needs.
"""

from __future__ import annotations

import math

import numpy as np


def mm(a, a_shape, b, b_shape):
    return ("mm", (a, tuple(a_shape)), (b, tuple(b_shape)))


def backward(ops: list) -> list:
    """The products of the backward pass of the forward products ``ops``, in reverse order.

    For ``Y = A @ B`` with A (..., m, k) and B (..., k, n): ``dA = dY @ B^T`` ((..., m, n) x
    (..., n, k)) and ``dB = A^T @ dY`` ((..., k, m) x (..., m, n)): twice the forward FLOPs.
    """
    out = []
    for op in reversed(ops):
        if op[0] != "mm":
            continue
        (_, sa), (kb, sb) = op[1], op[2]
        *batch, m, k = sa
        n = sb[-1]
        out.append(mm("g", (*batch, m, n), kb, (*sb[:-2], n, k)))  # dA = dY B^T
        out.append(mm("a", (*batch, k, m), "g", (*batch, m, n)))  # dB = A^T dY
    return out


def _attention(B, H, Tq, Tk, Dh, k_key="b", v_key="b"):
    """scores = q k^T (one exp per score), then weights @ v."""
    return [
        mm("a", (B, H, Tq, Dh), k_key, (B, H, Dh, Tk)),
        ("exp", B * H * Tq * Tk),
        mm("a", (B, H, Tq, Tk), v_key, (B, H, Tk, Dh)),
    ]


def encoder_layer(prefix, B, T, D, H, F, exp_ff=True):
    """Self-attention (fused q, k, v projection) and feed-forward of one layer over T tokens."""
    M = B * T
    ops = [mm("a", (M, D), f"{prefix}.Wqkv", (D, 3 * D))]
    ops += _attention(B, H, T, T, D // H)
    ops += [mm("a", (M, D), f"{prefix}.Wo", (D, D)), mm("a", (M, D), f"{prefix}.W1", (D, F))]
    ops += [("exp", M * F)] if exp_ff else []
    ops += [mm("a", (M, F), f"{prefix}.W2", (F, D))]
    return ops


def train_lm(B, T, D, H, L, F, V):
    """One training step of the decoder-only LanguageModel (GELU, tied output), no Adam."""
    fwd = []
    for layer in range(L):
        fwd += encoder_layer(f"L{layer}", B, T, D, H, F, exp_ff=True)
    fwd += [mm("a", (B * T, D), "E", (D, V)), ("exp", B * T * V)]  # logits, softmax of the loss
    return fwd + backward(fwd)


def train_seq2seq(B, T, D, H, L, F, V):
    """One training step of the encoder-decoder Transformer (ReLU: no exp in the FFN)."""
    M = B * T
    fwd = []
    for layer in range(L):
        fwd += encoder_layer(f"E{layer}", B, T, D, H, F, exp_ff=False)
    for layer in range(L):
        p = f"D{layer}"
        fwd += [mm("a", (M, D), f"{p}.Wqkv", (D, 3 * D))]
        fwd += _attention(B, H, T, T, D // H)
        fwd += [mm("a", (M, D), f"{p}.Wo", (D, D))]
        fwd += [mm("a", (M, D), f"{p}.Cq", (D, D)), mm("a", (M, D), f"{p}.Ckv", (D, 2 * D))]
        fwd += _attention(B, H, T, T, D // H)
        fwd += [mm("a", (M, D), f"{p}.Co", (D, D))]
        fwd += [mm("a", (M, D), f"{p}.W1", (D, F)), mm("a", (M, F), f"{p}.W2", (F, D))]
    fwd += [mm("a", (M, D), "Wout", (D, V)), ("exp", M * V)]
    return fwd + backward(fwd)


def minilm_forward(B, T, D=384, H=12, L=6, F=1536):
    """The forward pass of all-MiniLM-L6-v2 on a padded batch (exact GELU: one exp each)."""
    ops = []
    for layer in range(L):
        ops += encoder_layer(f"L{layer}", B, T, D, H, F, exp_ff=True)
    return ops


def decoder_pass(cfg: dict, B: int, T: int, cached: int) -> list:
    """One pass of a decoder over T new tokens after ``cached`` cached ones; last logits only.

    ``cfg``: layers L, d_model D, heads H, kv_heads KV, head size Dh, d_ff F, vocabulary V,
    ``gated`` (SwiGLU: gate and up projections) and ``exp_ff`` (GELU or SiLU: one exp each).
    The keys and values of each layer are read from its own cache buffer, as the real cache.
    """
    L, D, H, KV, Dh, F, V = (cfg[k] for k in ("L", "D", "H", "KV", "Dh", "F", "V"))
    G, M, Tk = H // KV, B * T, cached + T
    ops = []
    for layer in range(L):
        p = f"L{layer}"
        ops += [
            mm("a", (M, D), f"{p}.Wq", (D, H * Dh)),
            mm("a", (M, D), f"{p}.Wkv", (D, 2 * KV * Dh)),
        ]
        ops += [mm("a", (B, KV, G * T, Dh), f"{p}.K", (B, KV, Dh, Tk)), ("exp", B * H * T * Tk)]
        ops += [mm("a", (B, KV, G * T, Tk), f"{p}.V", (B, KV, Tk, Dh))]
        ops += [mm("a", (M, H * Dh), f"{p}.Wo", (H * Dh, D))]
        ops += [mm("a", (M, D), f"{p}.Wup", (D, (2 if cfg["gated"] else 1) * F))]
        ops += [("exp", M * F)] if cfg["exp_ff"] else []
        ops += [mm("a", (M, F), f"{p}.Wdown", (F, D))]
    ops += [mm("a", (B, D), "E", (D, V))]  # the logits of the last position
    return ops


def generation(cfg: dict, B: int, prompt: int, new: int) -> tuple[list, list[list]]:
    """The prefill (the prompt, first new token) and the ``new - 1`` one-token passes."""
    return decoder_pass(cfg, B, prompt, 0), [
        decoder_pass(cfg, B, 1, prompt + i) for i in range(1, new)
    ]


def flops(ops: list) -> float:
    """2 m k n for every product (a multiply and an add per term)."""
    total = 0.0
    for op in ops:
        if op[0] == "mm":
            (_, sa), (_, sb) = op[1], op[2]
            total += 2 * math.prod(sa) * sb[-1]
    return total


class Ceiling:
    """Buffers for a set of operation lists, and a call running one list.

    >>> c = Ceiling([train_lm(2, 4, 8, 2, 1, 16, 8)])
    >>> c.run(0)
    """

    def __init__(self, op_lists: list[list], dtype=np.float32):
        sizes: dict[str, int] = {}
        for ops in op_lists:
            for op in ops:
                if op[0] == "mm":
                    (ka, sa), (kb, sb) = op[1], op[2]
                    so = (*sa[:-1], sb[-1])
                    for key, shape in ((ka, sa), (kb, sb), ("o", so)):
                        sizes[key] = max(sizes.get(key, 0), math.prod(shape))
        # small values: the products and the exps stay finite, no denormals
        self.buffers = {k: np.full(n, 0.01, dtype) for k, n in sizes.items()}
        self.compiled = [self._compile(ops) for ops in op_lists]

    def _view(self, key, shape):
        return self.buffers[key][: math.prod(shape)].reshape(shape)

    def _compile(self, ops):
        steps, last = [], None
        for op in ops:
            if op[0] == "mm":
                (ka, sa), (kb, sb) = op[1], op[2]
                last = self._view("o", (*sa[:-1], sb[-1]))
                steps.append((self._view(ka, sa), self._view(kb, sb), last))
            else:
                steps.append((last.reshape(-1)[: op[1]],))
        return steps

    def run(self, i: int = 0) -> None:
        for step in self.compiled[i]:
            if len(step) == 3:
                np.matmul(step[0], step[1], out=step[2])
            else:
                np.exp(step[0], out=step[0])
