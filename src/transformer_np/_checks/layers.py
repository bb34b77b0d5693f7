"""The validators of the basic layers: Linear, LayerNorm, Dropout, FeedForward, Embedding,
TiedOutput, RMSNorm, SwiGLU.

``check_<layer>_init`` receives the constructor's arguments by name and raises on a bad one;
``check_<layer>_call`` receives the layer and the call's arguments and returns them checked
(:class:`.boundary.Prepared`), computed in float32 for float16 input.
"""

from __future__ import annotations

import numpy as np

from .boundary import Prepared, to_compute
from .general import (
    as_float_array,
    as_typed_array,
    check_bool,
    check_dtype,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_rng,
    shape_str,
)


def check_features(x, name: str, d: int, what: str) -> np.ndarray:
    """``x`` as a float array of shape (..., d) without NaN or inf, else a clear error."""
    x = as_float_array(x, name)
    if x.ndim == 0 or x.shape[-1] != d:
        raise ValueError(
            f"{name} must have shape (..., {what}) with {what} = {d}, got {shape_str(x.shape)}"
        )
    check_finite(x, name)
    return x


def features_call(layer, x, d: int, what: str) -> Prepared:
    """The call of a layer on ``x`` (..., d): checked, computed in float32 for float16."""
    x = check_features(x, "x", d, what)
    return Prepared((to_compute(x),), dtype=x.dtype)


def check_probability(p, name: str) -> float:
    """``p`` as a float in [0, 1), else a TypeError or ValueError naming ``name``."""
    if isinstance(p, bool | np.bool_) or not isinstance(p, int | float | np.floating | np.integer):
        raise TypeError(f"{name} must be a number, got {p!r}")
    if not np.isfinite(p):
        raise ValueError(f"{name} must be a finite number, got {p}")
    if p < 0.0:
        raise ValueError(f"{name} must be >= 0.0, got {p}")
    if p >= 1.0:
        raise ValueError(f"{name} must be < 1.0, got {p}")
    return float(p)


# -- Linear -------------------------------------------------------------------------------------


LINEAR_INITS = ("uniform", "xavier", "zeros")


def check_linear_init(d_in, d_out, bias, rng, dtype, init):
    if init not in LINEAR_INITS:
        raise ValueError(f"init must be one of {LINEAR_INITS}, got {init!r}")
    check_positive_int(d_in, "d_in")
    check_positive_int(d_out, "d_out")
    check_bool(bias, "bias")
    check_dtype(dtype)
    check_rng(rng)


def check_linear_call(layer, x):
    return features_call(layer, x, layer.d_in, "d_in")


# -- LayerNorm ----------------------------------------------------------------------------------


def check_layer_norm_init(d_model, eps, dtype):
    check_positive_int(d_model, "d_model")
    check_positive_float(eps, "eps")
    check_dtype(dtype)


def check_layer_norm_call(layer, x):
    return features_call(layer, x, layer.d_model, "d_model")


# -- Dropout ------------------------------------------------------------------------------------


def check_dropout_init(p, rng):
    check_probability(p, "Dropout.p")
    check_rng(rng)


def check_dropout_call(layer, x):
    return Prepared((as_float_array(x, "x"),))


# -- FeedForward --------------------------------------------------------------------------------

ACTIVATIONS = ("relu", "gelu")


def check_feed_forward_init(d_model, d_ff, activation, rng, dtype):
    check_positive_int(d_model, "d_model")
    check_positive_int(d_ff, "d_ff")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f'activation must be "relu" or "gelu", got {activation!r}')
    check_rng(rng)
    check_dtype(dtype)


def check_feed_forward_call(layer, x):
    return features_call(layer, x, layer.d_model, "d_model")


# -- Embedding and TiedOutput -------------------------------------------------------------------


def check_embedding_init(vocab_size, d_model, scale, rng, dtype, init):
    check_positive_int(vocab_size, "vocab_size")
    check_positive_int(d_model, "d_model")
    check_bool(scale, "scale")
    check_rng(rng)
    check_dtype(dtype)
    check_bool(init, "init")


def check_embedding_call(layer, ids):
    ids = as_typed_array(ids, "ids", "iu", "an array of integer token ids")
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= layer.vocab_size:
            bad = lo if lo < 0 else hi
            raise ValueError(
                f"ids must be in [0, vocab_size) = [0, {layer.vocab_size}), got {bad} "
                f"(ids range from {lo} to {hi})"
            )
    return Prepared((ids,))


def check_tied_output_init(embedding):
    # an Embedding, told by what the output uses (embedding.py imports this module)
    if not (callable(getattr(embedding, "attend", None)) and hasattr(embedding, "d_model")):
        raise TypeError(
            f"embedding must be the Embedding whose matrix the output shares, "
            f"got {type(embedding).__name__}"
        )


def check_tied_output_call(layer, h):
    h = check_features(h, "h", layer.embedding.d_model, "d_model")
    return Prepared((to_compute(h),), dtype=h.dtype)


# -- RMSNorm ------------------------------------------------------------------------------------


# the arguments and the input of LayerNorm's
check_rms_norm_init = check_layer_norm_init


def check_rms_norm_call(layer, x):
    """LayerNorm's check, and no row whose mean square overflows the compute dtype.

    Such a row would come out as zeros (1 / sqrt(inf) = 0). The rows are summed again only
    when the largest |x| makes an overflow possible.
    """
    prepared = check_layer_norm_call(layer, x)
    xc = prepared.args[0]
    if xc.size:
        big, top = float(np.max(np.abs(xc))), float(np.finfo(xc.dtype).max)
        if big * big * xc.shape[-1] >= top:
            with np.errstate(over="ignore"):
                squares = xc.astype(np.float64) ** 2
            if squares.max() > top or squares.sum(axis=-1).max() > top:
                raise ValueError(
                    f"x is too large to normalise in {xc.dtype} (the mean square of a row "
                    f"overflows; largest |x| = {big:.3g}); scale it down or use float64"
                )
    return prepared


# -- SwiGLU -------------------------------------------------------------------------------------


def check_swiglu_init(d_model, d_ff, rng, dtype, init):
    check_positive_int(d_model, "d_model")
    check_positive_int(d_ff, "d_ff")
    check_rng(rng)
    check_dtype(dtype)
    check_bool(init, "init")


def check_swiglu_call(layer, x):
    return features_call(layer, x, layer.d_model, "d_model")
