"""The validators of the public functions: functional, masks, attention, positional, rope, ...

``check_<function>`` receives the function's arguments by name (defaults filled in) and returns
them checked, as a dict (see :func:`.boundary.checked`), or raises a TypeError or ValueError that
names the bad argument, says what was expected and shows what was received. Arrays keep their
dtype (q, k and v of attention get their common one): a function that computes float16 in
float32 does so itself and gives back float16.
"""

from __future__ import annotations

import numbers

import numpy as np

from .general import (
    as_float_array,
    check_bool,
    check_broadcastable,
    check_dtype,
    check_finite,
    check_positive_float,
    check_positive_int,
    check_softmax_input,
    shape_str,
    type_name,
)


def check_nonnegative_int(value, name: str) -> int:
    """``value`` as a Python int if it is an integer >= 0 (NumPy's too, not bool), else raise."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer >= 0, got {value!r} ({type_name(value)})")
    if value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value}")
    return int(value)


def check_even(value, name: str, why: str) -> int:
    """``value`` as a positive even int, else raise; ``why`` says why it must be even."""
    value = check_positive_int(value, name)
    if value % 2:
        raise ValueError(f"{name} must be even {why}, got {name} = {value}")
    return value


def floats_of_rank(x, name: str, ndims: str, min_ndim: int = 0, max_ndim: int = 64) -> np.ndarray:
    """``x`` as a float array with ``min_ndim`` to ``max_ndim`` axes (``ndims`` names them)."""
    x = as_float_array(x, name)
    if not min_ndim <= x.ndim <= max_ndim:
        raise ValueError(f"{name} must have shape {ndims}, got shape {shape_str(x.shape)}")
    return x


def finite_floats(x, name: str, ndims: str = "(...)", min_ndim: int = 0) -> np.ndarray:
    """``x`` as a float array with at least ``min_ndim`` axes and no NaN or inf."""
    x = floats_of_rank(x, name, ndims, min_ndim)
    check_finite(x, name)
    return x


# -- functional ---------------------------------------------------------------------------------


def check_softmax(x, axis):
    x, axis = check_softmax_input(x, axis, "a softmax")
    return {"x": x, "axis": axis}


def check_log_softmax(x, axis):
    x, axis = check_softmax_input(x, axis, "a log-softmax")
    return {"x": x, "axis": axis}


def check_relu(x):
    check_finite(x, "x")
    return {"x": x}


def check_erf(x):
    if np.isnan(x).any():
        raise ValueError("x contains NaN; expected real values")
    return {"x": x}


GELU_FORMS = 'False, True, "none" or "tanh"'


def check_gelu(x, approximate, with_slope):
    """``approximate`` comes back as a bool: True for the tanh form."""
    if isinstance(approximate, str):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"approximate must be {GELU_FORMS}, got {approximate!r}")
        approximate = approximate == "tanh"
    elif not isinstance(approximate, bool | np.bool_):
        got = (
            f"an array of shape {shape_str(approximate.shape)}"
            if isinstance(approximate, np.ndarray)
            else f"{approximate!r} ({type_name(approximate)})"
        )
        raise TypeError(f"approximate must be {GELU_FORMS}, got {got}")
    with_slope = check_bool(with_slope, "with_slope")
    check_finite(x, "x")
    return {"x": x, "approximate": bool(approximate), "with_slope": with_slope}


def check_layer_norm(x, gamma, beta, eps, with_stats):
    """x (*B, D), gamma and beta (D,), whose dtypes and shapes their annotations checked."""
    if x.shape[-1] == 0:
        raise ValueError(
            f"x must have at least one feature to normalise (shape (..., D), D >= 1), "
            f"got shape {shape_str(x.shape)}"
        )
    eps = check_positive_float(eps, "eps")
    with_stats = check_bool(with_stats, "with_stats")
    check_finite(x, "x")
    check_finite(gamma, "gamma")
    check_finite(beta, "beta")
    return {"x": x, "gamma": gamma, "beta": beta, "eps": eps, "with_stats": with_stats}


# -- masks --------------------------------------------------------------------------------------


def check_causal_mask(n, offset):
    return {"n": check_positive_int(n, "n"), "offset": check_nonnegative_int(offset, "offset")}


def check_padding_mask(lengths, max_len):
    """lengths (B,) of integers, whose dtype and shape its annotation checked (an empty list
    comes as an empty integer array)."""
    if lengths.size == 0:
        raise ValueError(
            "lengths must be a non-empty 1-D array (one length per sequence), "
            f"got shape {shape_str(lengths.shape)}"
        )
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    if max_len is None:
        max_len = int(lengths.max())
        if max_len == 0:
            raise ValueError("every length is 0: pass max_len to say how long the padded batch is")
    max_len = check_positive_int(max_len, "max_len")
    if (lengths > max_len).any():
        raise ValueError(f"lengths must be <= max_len = {max_len}, got {lengths.tolist()}")
    return {"lengths": lengths, "max_len": max_len}


# -- attention ----------------------------------------------------------------------------------


def as_bool_mask(mask) -> np.ndarray:
    """Convert a mask to bool (True = may attend), rejecting what is likely a mistake."""
    try:
        m = np.asarray(mask)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"mask must be an array of booleans, got {type(mask).__name__}") from exc
    if m.dtype == bool:
        return m
    if m.dtype.kind in "iu":
        return m != 0
    if m.dtype.kind == "f":
        if np.isin(m, (0, 1)).all():
            return m != 0
        raise ValueError(
            "mask must hold True/False (or 1/0): True = may attend, False = blocked; got a float "
            "array with other values. For an additive mask (0 where allowed, -inf or a large "
            "negative number where blocked) pass it as bias=... instead."
        )
    raise TypeError(f"mask must be an array of booleans (True = may attend), got dtype {m.dtype}")


def check_bias(bias, scores_shape, desc: str) -> np.ndarray:
    """``bias`` as a float array broadcastable to the scores, without NaN or +inf."""
    b = as_float_array(bias, "bias")
    check_broadcastable(b.shape, scores_shape, "bias", desc)
    check_finite(b, "bias", allow_neg_inf=True)
    return b


def check_qkv(q, k, v):
    """q (*B, Tq, Dk), k (*B, Tk, Dk), v (*B, Tk, Dv), whose dtypes and shapes their annotations
    checked: the sizes that must be positive; returns them and the shape of the scores
    (*B, Tq, Tk). Finiteness is checked apart."""
    if q.shape[-1] == 0:
        raise ValueError(f"d_k must be positive, got q {shape_str(q.shape)}")
    if k.shape[-2] == 0:
        raise ValueError(f"n_k must be positive (at least one key), got k {shape_str(k.shape)}")
    lead_qk = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    return q, k, v, lead_qk + (q.shape[-2], k.shape[-2])


def attention_arrays(q, k, v, mask, bias):
    """The inputs of attention checked: q, k, v in their common dtype, mask bool, bias float."""
    q, k, v, scores_shape = check_qkv(q, k, v)
    desc = "the attention scores (..., n_q, n_k) ="
    if mask is not None:
        mask = as_bool_mask(mask)
        check_broadcastable(mask.shape, scores_shape, "mask", desc)
    if bias is not None:
        bias = check_bias(bias, scores_shape, desc)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_finite(t, name)
    dtype = np.result_type(q, k, v)
    q, k, v = (t.astype(dtype, copy=False) for t in (q, k, v))
    return {"q": q, "k": k, "v": v, "mask": mask, "bias": bias}


def check_attention_steps(q, k, v, mask, bias):
    return attention_arrays(q, k, v, mask, bias)


def check_scaled_dot_product_attention(q, k, v, mask, bias, need_weights):
    checked = attention_arrays(q, k, v, mask, bias)
    return checked | {"need_weights": check_bool(need_weights, "need_weights")}


def shaped_floats(x, name: str, shape: tuple, what: str) -> np.ndarray:
    """``x`` as a float array of exactly ``shape`` (``what`` says what it is), else raise."""
    x = as_float_array(x, name)
    if x.shape != shape:
        raise ValueError(
            f"{name} must be {what}, of shape {shape_str(shape)}, got {shape_str(x.shape)}"
        )
    return x


def check_attention_backward(grad_output, q, k, v, weights):
    q, k, v, scores_shape = check_qkv(q, k, v)
    lead = np.broadcast_shapes(scores_shape[:-2], v.shape[:-2])  # of the forward's results
    weights = shaped_floats(
        weights, "weights", lead + scores_shape[-2:], "the forward's weights (..., n_q, n_k)"
    )
    grad_output = shaped_floats(
        grad_output, "grad_output", lead + (q.shape[-2], v.shape[-1]), "dL/doutput (..., n_q, d_v)"
    )
    arrays = {"grad_output": grad_output, "q": q, "k": k, "v": v, "weights": weights}
    for name, t in arrays.items():
        check_finite(t, name)
    return arrays


def check_blockwise_attention(q, k, v, mask, tile_size, causal, bias):
    checked = attention_arrays(q, k, v, mask, bias)
    return checked | {
        "tile_size": check_positive_int(tile_size, "tile_size"),
        "causal": check_bool(causal, "causal"),
    }


# -- multi-head attention and SwiGLU (the functions of multi_head.py and swiglu.py) ---------------

# The functions that only move values (rotate_half, split_heads, merge_heads) have their dtype
# and shape checked, not their values: a NaN moves with its value, and a scan of the values
# would cost as much as the function, which the layers call on every step.


def check_split_heads(x, n_heads):
    n_heads = check_positive_int(n_heads, "n_heads")
    if x.shape[-1] % n_heads:
        raise ValueError(
            f"the last axis of x (D = {x.shape[-1]}) must be divisible by n_heads = {n_heads}, "
            f"got shape {shape_str(x.shape)}"
        )
    return {"x": x, "n_heads": n_heads}


def check_merge_heads(x):
    return {"x": x}  # its dtype and shape: the annotation


def check_silu(z):
    return {"z": finite_floats(z, "z")}


# -- positional encoding ------------------------------------------------------------------------


PAIRS = "for the sinusoidal encoding (its columns come in sin/cos pairs, one pair per frequency)"


def check_positional_encoding(max_len, d_model, base, dtype):
    return {
        "max_len": check_positive_int(max_len, "max_len"),
        "d_model": check_even(d_model, "d_model", PAIRS),
        "base": check_positive_float(base, "base"),
        "dtype": check_dtype(dtype),
    }


def check_positional_offset_matrix(k, d_model, base, dtype):
    if isinstance(k, bool | np.bool_) or not isinstance(k, numbers.Real):
        raise TypeError(f"k must be a real number (the offset), got {type_name(k)}")
    if not np.isfinite(k):
        raise ValueError(f"k must be finite, got {k}")
    return {
        "k": float(k),
        "d_model": check_even(d_model, "d_model", PAIRS),
        "base": check_positive_float(base, "base"),
        "dtype": check_dtype(dtype),
    }


# -- rope ---------------------------------------------------------------------------------------


ROPE_PAIRS = "(RoPE rotates pairs of features)"


def check_rope_frequencies(d_head, base):
    return {
        "d_head": check_even(d_head, "d_head", ROPE_PAIRS),
        "base": check_positive_float(base, "base"),
    }


def check_rope_angles(positions, d_head, base, dtype):
    """positions (T,) of integers (its annotation checked the dtype and shape): >= 0."""
    if positions.size and positions.min() < 0:
        raise ValueError(f"positions must be a 1-D array of integers >= 0, got {positions!r}")
    return check_rope_frequencies(d_head, base) | {
        "positions": positions,
        "dtype": check_dtype(dtype),
    }


def in_pairs(x, name: str) -> np.ndarray:
    """``x`` (..., Dh) whose last axis holds pairs of features: Dh even and > 0."""
    if x.shape[-1] == 0 or x.shape[-1] % 2:
        raise ValueError(
            f"{name} must have an even, non-zero last axis Dh {ROPE_PAIRS}, "
            f"got shape {shape_str(x.shape)}"
        )
    return x


def check_rotate_half(x):
    return {"x": in_pairs(x, "x")}  # its dtype and rank: the annotation


def rotated(x, cos, sin, name: str) -> dict:
    """``x`` (..., T, Dh), named ``name``, and the tables ``cos``, ``sin`` that rotate it, float
    arrays (their annotations checked the dtypes and the rank of x): Dh even, the values finite,
    cos and sin of one shape that broadcasts to x."""
    x = in_pairs(x, name)
    for n, t in ((name, x), ("cos", cos), ("sin", sin)):
        check_finite(t, n)
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape (T, Dh) (from rope_angles), got cos "
            f"{shape_str(cos.shape)} and sin {shape_str(sin.shape)}"
        )
    check_broadcastable(cos.shape, x.shape, "cos", f"{name}, of shape (..., T, Dh) =")
    return {name: x, "cos": cos, "sin": sin}


def check_apply_rope(x, cos, sin):
    return rotated(x, cos, sin, "x")


def check_apply_rope_backward(grad_output, cos, sin):
    return rotated(grad_output, cos, sin, "grad_output")
