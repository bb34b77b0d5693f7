"""attention.py: scaled dot-product attention (attention_steps, scaled_dot_product_attention,
attention_backward) and its input checks.

Sections: values (against the formula read row by row, masks and biases, dtypes, and the
properties the chapters state, with hypothesis), errors (bad input gets a ValueError or
TypeError that names the argument), reference (against PyTorch). Multi-head attention is tested
in test_multi_head.py, the in-place chunked kernel behind scaled_dot_product_attention in
test_kernels_attention.py.
"""

import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_np import (
    Linear,
    attention_backward,
    attention_steps,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)

from helpers import (
    PROPERTY_SETTINGS,
    assert_within,
    random_qkv,
    rounding_tol,
    to_torch,
    unit_roundoff,
)
from rounding import attention_bound, torch_sdpa_tol


def attention_row_by_row(q, k, v, allowed=None):
    """One query row at a time, with Python loops: the formula read literally (float64)."""
    n_q, n_k = q.shape[0], k.shape[0]
    out = np.zeros((n_q, v.shape[1]))
    w = np.zeros((n_q, n_k))
    for i in range(n_q):
        scores = [q[i] @ k[j] / math.sqrt(q.shape[1]) for j in range(n_k)]
        keep = [allowed is None or bool(allowed[i, j]) for j in range(n_k)]
        e = [math.exp(s) if ok else 0.0 for s, ok in zip(scores, keep, strict=True)]
        if sum(e) > 0:
            w[i] = np.array(e) / sum(e)
        out[i] = w[i] @ v
    return out, w


@st.composite
def attention_case(draw):
    """Random q, k, v (B, n, d) at a random scale, and a random mask (some rows fully blocked)."""
    b, n_q, n_k, d = (draw(st.integers(1, n)) for n in (3, 6, 7, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))
    q = rng.standard_normal((b, n_q, d)) * scale
    k = rng.standard_normal((b, n_k, d)) * scale
    v = rng.standard_normal((b, n_k, d))
    mask = rng.random((b, n_q, n_k)) < draw(st.floats(0.0, 1.0))
    return q, k, v, mask


# ============================================================================================
# values
# ============================================================================================


@pytest.mark.parametrize("lead", [(), (3,), (2, 4)])
def test_attention_matches_row_by_row_formula_for_any_leading_axes(lead):
    rng = np.random.default_rng(0)
    q = rng.standard_normal(lead + (5, 8))
    k = rng.standard_normal(lead + (7, 8))
    v = rng.standard_normal(lead + (7, 3))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == lead + (5, 3) and w.shape == lead + (5, 7)
    for idx in np.ndindex(*lead):
        ref_out, ref_w = attention_row_by_row(q[idx], k[idx], v[idx])
        out_tol, w_tol = (2 * b for b in attention_bound(q[idx], k[idx], v[idx]))  # two sides
        assert_within(w[idx], ref_w, w_tol, "weights vs row by row")
        assert_within(out[idx], ref_out, out_tol, "output vs row by row")


def test_attention_steps_match_row_by_row_formula_with_a_mask():
    rng = np.random.default_rng(14)
    q, k, v = rng.standard_normal((3, 2, 6, 4))
    allowed = rng.random((6, 6)) < 0.6
    allowed[:, 0] = True
    allowed[3] = False  # a row with every key blocked: weights and output 0
    out, w = attention_steps(q, k, v, allowed)
    out_tol, w_tol = (2 * b for b in attention_bound(q, k, v, mask=allowed))  # two sides
    for b in range(2):
        ref_out, ref_w = attention_row_by_row(q[b], k[b], v[b], allowed)
        assert_within(w[b], ref_w, w_tol[b], "steps weights vs row by row")
        assert_within(out[b], ref_out, out_tol[b], "steps output vs row by row")
    checked_out, checked_w = scaled_dot_product_attention(q, k, v, allowed)
    assert_within(checked_out, out, out_tol, "checked output vs steps")
    assert_within(checked_w, w, w_tol, "checked weights vs steps")


def test_attention_leading_axes_broadcast_like_matmul():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 4, 8))  # (B, H, n_q, d)
    k = rng.standard_normal((2, 1, 6, 8))  # shared by the heads
    v = rng.standard_normal((2, 1, 6, 5))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6)
    out1, _ = scaled_dot_product_attention(q[1, 2], k[1, 0], v[1, 0])
    out_tol, _ = attention_bound(q[1, 2], k[1, 0], v[1, 0])
    assert_within(out[1, 2], out1, 2 * out_tol, "broadcast vs one matrix")


def test_masked_attention_matches_row_by_row_formula():
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((3, 6, 4))
    allowed = rng.random((6, 6)) < 0.6
    allowed[:, 0] = True
    out, w = scaled_dot_product_attention(q, k, v, mask=allowed)
    ref_out, ref_w = attention_row_by_row(q, k, v, allowed)
    out_tol, w_tol = (2 * b for b in attention_bound(q, k, v, mask=allowed))
    assert_within(w, ref_w, w_tol, "weights vs row by row")
    assert_within(out, ref_out, out_tol, "output vs row by row")


def test_blocked_positions_get_exactly_zero_weight():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 2, 5, 4)) * 10  # large scores, saturating softmax
    _, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    assert np.all(w[:, ~causal_mask(5)] == 0.0)
    # e_j / sum_l e_l summed again: whatever the exps' errors, two sums of n_k = 5 terms and
    # a division away from 1
    assert_within(w.sum(-1), np.ones((2, 5)), rounding_tol(np.float64, 2 * 5 + 1), "row sums")


@pytest.mark.parametrize(
    "mask",
    [
        np.array([[1, 0, 1], [1, 1, 0]], dtype=np.int64),
        np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]),
        [[True, False, True], [True, True, False]],
    ],
    ids=["int", "float-0-1", "list-of-bool"],
)
def test_nonzero_mask_entries_mean_may_attend(mask):
    rng = np.random.default_rng(4)
    q = rng.standard_normal((2, 4))
    k = rng.standard_normal((3, 4))
    v = rng.standard_normal((3, 2))
    bool_mask = np.array([[True, False, True], [True, True, False]])
    expected = scaled_dot_product_attention(q, k, v, mask=bool_mask)
    got = scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])


def test_fully_blocked_row_gives_zero_weights_and_zero_output_without_warnings():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((2, 3, 4))
    k = rng.standard_normal((2, 5, 4))
    v = rng.standard_normal((2, 5, 6))
    mask = np.ones((2, 3, 5), dtype=bool)
    mask[0, 1, :] = False  # query 1 of sequence 0 may attend to nothing
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(w[0, 1], 0.0)
    np.testing.assert_array_equal(out[0, 1], 0.0)
    # the other rows are unaffected
    ref_out, _ = scaled_dot_product_attention(q[0, [0, 2]], k[0], v[0])
    out_tol, _ = attention_bound(q[0, [0, 2]], k[0], v[0])
    assert_within(out[0, [0, 2]], ref_out, 2 * out_tol, "unblocked rows")


def test_sequence_of_length_zero_in_padding_mask_gives_zero_output():
    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((3, 2, 1, 3, 4))  # (B, H=1, n, d)
    out, w = scaled_dot_product_attention(q, k, v, mask=padding_mask([3, 0]))
    assert np.all(out[1] == 0) and np.all(w[1] == 0)
    assert np.all(np.isfinite(out))


def test_bias_minus_inf_blocks_like_a_false_mask_entry():
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((3, 4, 4))
    mask = causal_mask(4)
    bias = np.where(mask, 0.0, -np.inf)
    out_m, w_m = scaled_dot_product_attention(q, k, v, mask=mask)
    out_b, w_b = scaled_dot_product_attention(q, k, v, bias=bias)
    np.testing.assert_array_equal(w_b, w_m)
    np.testing.assert_array_equal(out_b, out_m)


def test_finite_bias_is_added_to_the_scaled_scores():
    rng = np.random.default_rng(8)
    q, k, v = rng.standard_normal((3, 4, 8))
    bias = rng.standard_normal((4, 4))
    _, w = scaled_dot_product_attention(q, k, v, bias=bias)
    s = q @ k.T / math.sqrt(8) + bias
    e = np.exp(s - s.max(-1, keepdims=True))
    _, w_tol = attention_bound(q, k, v, bias=bias)
    assert_within(w, e / e.sum(-1, keepdims=True), 2 * w_tol, "weights vs the formula")


def test_bias_and_mask_together():
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((3, 4, 8))
    bias = rng.standard_normal((4, 4))
    _, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(4), bias=bias)
    _, w_ref = scaled_dot_product_attention(
        q, k, v, bias=bias + np.where(causal_mask(4), 0.0, -np.inf)
    )
    # exact: bias + 0.0 is bias, and the mask and the -inf of the bias put the same -inf on the
    # same scores, so the same steps run on the same numbers
    np.testing.assert_array_equal(w, w_ref)


def test_float32_stays_float32_and_agrees_with_float64():
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((3, 2, 6, 8))
    out64, w64 = scaled_dot_product_attention(q, k, v, mask=causal_mask(6))
    out32, w32 = scaled_dot_product_attention(
        *(t.astype(np.float32) for t in (q, k, v)), mask=causal_mask(6)
    )
    assert out32.dtype == np.float32 and w32.dtype == np.float32
    # the float32 side (q, k, v rounded to float32 first) against float64
    u = unit_roundoff(np.float32)
    out_tol, w_tol = attention_bound(
        q,
        k,
        v,
        np.float32,
        mask=causal_mask(6),
        dq=u * np.abs(q).max(),
        dk=u * np.abs(k).max(),
        dv=u * np.abs(v).max(),
    )
    assert_within(out32, out64, out_tol, "float32 output")
    assert_within(w32, w64, w_tol, "float32 weights")


def test_mixed_precision_inputs_promote_to_float64():
    rng = np.random.default_rng(11)
    q = rng.standard_normal((3, 4)).astype(np.float32)
    k, v = rng.standard_normal((2, 3, 4))
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.dtype == np.float64 and w.dtype == np.float64


def test_float16_attention_masks_exactly_where_minus_1e9_cannot():
    # -1e9 is not a float16 number (the largest finite float16 is 65504): it overflows to -inf.
    with np.errstate(over="ignore"):
        assert np.isinf(np.float16(-1e9))
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((3, 5, 8)) * 2).astype(np.float16)
    out, w = scaled_dot_product_attention(q, k, v, mask=causal_mask(5))
    assert out.dtype == np.float16 and w.dtype == np.float16
    assert np.all(w[~causal_mask(5)] == 0)
    q32, k32, v32 = (t.astype(np.float32) for t in (q, k, v))
    ref_out, ref_w = scaled_dot_product_attention(q32, k32, v32, mask=causal_mask(5))
    # the same float32 computation (two runs: two bounds), then one rounding to float16
    out_diff, w_diff = (2 * b for b in attention_bound(q32, k32, v32, mask=causal_mask(5)))
    out_tol = rounding_tol(np.float16, 1, np.abs(ref_out) + out_diff) + out_diff
    assert_within(out.astype(np.float32), ref_out, out_tol, "float16 output")
    w_tol = rounding_tol(np.float16, 1, np.abs(ref_w) + w_diff) + w_diff
    assert_within(w.astype(np.float32), ref_w, w_tol, "float16 weights")


def test_attention_does_not_modify_its_inputs():
    rng = np.random.default_rng(13)
    q, k, v = rng.standard_normal((3, 4, 4))
    copies = [t.copy() for t in (q, k, v)]
    scaled_dot_product_attention(q, k, v, mask=causal_mask(4), bias=np.zeros((4, 4)))
    for t, c in zip((q, k, v), copies, strict=True):
        np.testing.assert_array_equal(t, c)


# ------------------------------------------------------------------ properties (hypothesis)


@PROPERTY_SETTINGS
@given(attention_case())
def test_attention_rows_sum_to_one_unless_fully_blocked(case):
    q, k, v, mask = case
    _, w = scaled_dot_product_attention(q, k, v, mask=mask)
    some = mask.any(axis=-1)
    # e_j / sum_l e_l summed again: two sums of n_k terms and a division away from 1
    sums = w.sum(axis=-1)[some]
    tol = rounding_tol(np.float64, 2 * k.shape[-2] + 1)
    assert_within(sums, np.ones_like(sums), tol, "row sums")
    assert np.all(w[~some] == 0)  # fully blocked rows: all weights 0
    assert np.all(np.isfinite(w))


@PROPERTY_SETTINGS
@given(attention_case())
def test_blocked_positions_get_zero_weight(case):
    q, k, v, mask = case
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.all(w[~mask] == 0)
    # and the output only mixes allowed values: it equals attention over the allowed keys alone
    b, i = np.argwhere(mask.any(axis=-1))[0] if mask.any() else (0, 0)
    if mask[b, i].any():
        keep = mask[b, i]
        o, _ = scaled_dot_product_attention(q[b, i : i + 1], k[b, keep], v[b, keep])
        out_tol = (
            attention_bound(q[b, i : i + 1], k[b], v[b], mask=keep)[0]  # blocked keys: 0
            + attention_bound(q[b, i : i + 1], k[b, keep], v[b, keep])[0]
        )
        assert_within(out[b, i], o[0], out_tol[0], "output vs the allowed keys alone")


# ============================================================================================
# errors
# ============================================================================================

# q, k, v of the error tests: (B, n_q, d_k) = (2, 5, 8), (B, n_k, d_k) = (2, 6, 8), d_v = 4
QKV_RNG = np.random.default_rng(0)
Q = QKV_RNG.standard_normal((2, 5, 8))
K = QKV_RNG.standard_normal((2, 6, 8))
V = QKV_RNG.standard_normal((2, 6, 4))


def test_mismatched_d_k_between_q_and_k():
    with pytest.raises(
        ValueError,
        match=r"k must be a float array of shape \(\*B, Tk, Dk\) that fits q \(2, 5, 8\) .*"
        r"got float64 of shape \(2, 6, 16\)$",
    ):
        scaled_dot_product_attention(Q, np.zeros((2, 6, 16)), V)


def test_mismatched_n_k_between_k_and_v():
    with pytest.raises(
        ValueError,
        match=r"v must be a float array of shape \(\*B, Tk, Dv\) that fits q \(2, 5, 8\), "
        r"k \(2, 6, 8\) .*got float64 of shape \(2, 7, 4\)$",
    ):
        scaled_dot_product_attention(Q, K, np.zeros((2, 7, 4)))


def test_mask_that_does_not_broadcast_to_the_scores():
    with pytest.raises(
        ValueError, match=r"mask of shape \(5, 5\) does not broadcast .*\(2, 5, 6\)"
    ):
        scaled_dot_product_attention(Q, K, V, mask=np.ones((5, 5), bool))


def test_mask_with_extra_leading_axes_is_rejected():
    with pytest.raises(ValueError, match="mask"):
        scaled_dot_product_attention(Q, K, V, mask=np.ones((3, 2, 5, 6), bool))


def test_float_mask_with_additive_values_points_to_bias():
    additive = np.where(np.ones((5, 6), bool), 0.0, -np.inf)
    additive[0, 0] = -np.inf
    with pytest.raises(ValueError, match="bias="):
        scaled_dot_product_attention(Q, K, V, mask=additive)


def test_non_boolean_mask_dtype():
    with pytest.raises(TypeError, match="mask"):
        scaled_dot_product_attention(Q, K, V, mask=np.array([["a"] * 6] * 5))


def test_bias_that_does_not_broadcast():
    with pytest.raises(ValueError, match=r"bias of shape \(4,\)"):
        scaled_dot_product_attention(Q, K, V, bias=np.zeros(4))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_bias_with_nan_or_plus_inf(bad):
    bias = np.zeros((5, 6))
    bias[1, 2] = bad
    with pytest.raises(ValueError, match="bias contains"):
        scaled_dot_product_attention(Q, K, V, bias=bias)


@pytest.mark.parametrize("name", ["q", "k", "v"])
def test_integer_inputs_are_type_errors(name):
    args = {"q": Q, "k": K, "v": V}
    args[name] = np.ones(args[name].shape, dtype=np.int64)
    with pytest.raises(TypeError, match=f"{name} must be a float array .*got int64 of shape"):
        scaled_dot_product_attention(**args)


def test_non_numeric_input_is_a_type_error():
    with pytest.raises(TypeError, match=r"q must be a float array .*got <U1 of shape \(1, 2\)"):
        scaled_dot_product_attention([["a", "b"]], K, V)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_in_inputs(name, bad):
    args = {"q": Q.copy(), "k": K.copy(), "v": V.copy()}
    args[name][1, 2, 3] = bad
    with pytest.raises(ValueError, match=rf"{name} contains (NaN|inf).*\(1, 2, 3\)"):
        scaled_dot_product_attention(**args)


def test_input_of_rank_one():
    with pytest.raises(
        ValueError, match=r"q must be a float array of shape \(\*B, Tq, Dk\) .*of shape \(8,\)$"
    ):
        scaled_dot_product_attention(np.ones(8), K[0], V[0])


def test_leading_axes_that_do_not_broadcast():
    with pytest.raises(ValueError, match=r"k must be .* that fits q \(2, 5, 8\) .*\(3, 6, 8\)$"):
        scaled_dot_product_attention(Q, np.zeros((3, 6, 8)), np.zeros((3, 6, 4)))


def test_zero_keys_or_zero_width():
    with pytest.raises(ValueError, match="n_k must be positive"):
        scaled_dot_product_attention(Q, np.zeros((2, 0, 8)), np.zeros((2, 0, 4)))
    with pytest.raises(ValueError, match="d_k must be positive"):
        scaled_dot_product_attention(np.zeros((5, 0)), np.zeros((6, 0)), V[0])


def test_overflowing_scores_are_an_error_not_nan():
    big = np.full((2, 4), 1e20, dtype=np.float32)
    with pytest.raises(ValueError, match="overflowed float32"):
        scaled_dot_product_attention(big, big, big)


def test_overflow_advice_fits_the_dtype():
    big = np.full((2, 4), 1e160)
    with pytest.raises(ValueError, match=r"overflowed float64 .*scale the inputs down$"):
        scaled_dot_product_attention(big, big, np.ones((2, 4)))
    big32 = np.full((2, 4), 1e30, np.float32)
    with pytest.raises(ValueError, match="overflowed float32 .*or use float64"):
        scaled_dot_product_attention(big32, big32, np.ones((2, 4), np.float32))


def test_need_weights_must_be_a_bool():
    rng = np.random.default_rng(12)
    q, k, v = random_qkv(rng, (4, 8), (5, 8), dtype=np.float32)
    with pytest.raises(TypeError, match=r"need_weights must be True or False, got 'no' \(str\)"):
        scaled_dot_product_attention(q, k, v, need_weights="no")
    out, w = scaled_dot_product_attention(q, k, v, need_weights=np.bool_(False))  # small path
    assert w is None
    out_tol, _ = attention_bound(q, k, v)
    assert_within(out, scaled_dot_product_attention(q, k, v)[0], 2 * out_tol, "no weights")


def error_of(fn, *args, **kwargs):
    """(type, message) of the TypeError or ValueError that ``fn(*args, **kwargs)`` raises."""
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    return info.type, str(info.value).removeprefix(f"{fn.__name__}: ")


@pytest.mark.parametrize(
    "bad",
    [
        {"k": np.zeros((2, 6, 16))},  # d_k of q and k
        {"v": np.zeros((2, 7, 4))},  # n_k of k and v
        {"q": np.ones(8)},  # rank 1
        {"q": Q.astype(int)},  # integers
        {"q": np.where(Q > 1, np.nan, Q)},  # NaN
        {"mask": np.ones((5, 5), bool)},  # a mask of the wrong shape
        {"mask": np.full((5, 6), 0.5)},  # an additive mask given as mask
        {"bias": np.zeros(4)},  # a bias of the wrong shape
    ],
    ids=["d_k", "n_k", "rank-1", "int", "nan", "mask-shape", "float-mask", "bias-shape"],
)
def test_attention_steps_checks_its_input_as_sdpa_does(bad):
    args = {"q": Q, "k": K, "v": V} | bad
    assert error_of(attention_steps, **args) == error_of(scaled_dot_product_attention, **args)


def test_attention_backward_checks_the_shapes_of_the_forward_pass():
    rng = np.random.default_rng(3)
    _, w = scaled_dot_product_attention(Q, K, V)  # (2, 5, 6)
    g = rng.standard_normal((2, 5, 4))  # dL/doutput
    dq, dk, dv = attention_backward(g, Q, K, V, w)
    assert (dq.shape, dk.shape, dv.shape) == (Q.shape, K.shape, V.shape)
    with pytest.raises(
        ValueError, match=r"weights must be a float array of shape \(\*B, Tq, Tk\) .*\(2, 6, 5\)$"
    ):
        attention_backward(g, Q, K, V, w.swapaxes(-1, -2))
    with pytest.raises(
        ValueError, match=r"v must be .* that fits grad_output \(2, 5, 8\), .*\(2, 6, 4\)$"
    ):
        attention_backward(np.zeros((2, 5, 8)), Q, K, V, w)
    with pytest.raises(ValueError, match=r"v must be .* that fits grad_output .*\(2, 5, 4\)$"):
        attention_backward(g, Q, K, V[:, :5], w)
    with pytest.raises(ValueError, match=r"grad_output contains NaN"):
        attention_backward(np.where(g > 1, np.nan, g), Q, K, V, w)


@pytest.mark.parametrize("need_weights", [True, False])
def test_sdpa_inside_a_layer_is_the_same_computation(need_weights):
    """Called by the package's own maths (here inside a layer's call), the function runs its
    body as it is (tests/test_boundary.py: without its validator): the same numbers."""
    mask = causal_mask(6)[1:]  # (5, 6)
    out, w = scaled_dot_product_attention(Q, K, V, mask, need_weights=need_weights)

    class Probe(Linear):  # a layer whose forward calls the public function
        def forward(self, x):
            return scaled_dot_product_attention(Q, K, V, mask, need_weights=need_weights)

    raw_out, raw_w = Probe(2, 2)(np.zeros((1, 2)))
    np.testing.assert_array_equal(raw_out, out)
    assert (raw_w is None and w is None) or np.array_equal(raw_w, w)


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def sdpa_inputs(dtype, lead=(2, 3), n_q=6, n_k=9, d=8, d_v=5, seed=0):
    rng = np.random.default_rng(seed)
    return random_qkv(rng, lead + (n_q, d), lead + (n_k, d), d_v=d_v, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lead", [(), (4,), (2, 3)])
def test_sdpa_without_mask_matches_torch(torch, dtype, lead):
    q, k, v = sdpa_inputs(dtype, lead)
    out, w = scaled_dot_product_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(to_torch(q), to_torch(k), to_torch(v))
    assert out.dtype == dtype and w.dtype == dtype
    assert_within(out, ref.numpy(), torch_sdpa_tol(q, k, v)[0], "sdpa output")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_with_boolean_mask_matches_torch(torch, dtype):
    q, k, v = sdpa_inputs(dtype)
    rng = np.random.default_rng(1)
    mask = rng.random((2, 1, 6, 9)) < 0.5  # broadcast over heads
    mask[..., 0] = True  # no fully blocked row (torch returns NaN there)
    out, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    ref = torch.nn.functional.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v), attn_mask=to_torch(mask)
    ).numpy()
    assert_within(out, ref, torch_sdpa_tol(q, k, v, mask=mask)[0], "sdpa output, bool mask")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_with_causal_mask_matches_torch_is_causal(torch, dtype):
    q, k, v = sdpa_inputs(dtype, n_q=7, n_k=7)
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(7))
    ref = torch.nn.functional.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v), is_causal=True
    )
    tol, _ = torch_sdpa_tol(q, k, v, mask=causal_mask(7))
    assert_within(out, ref.numpy(), tol, "sdpa output, causal")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_with_additive_float_mask_matches_torch(torch, dtype):
    q, k, v = sdpa_inputs(dtype)
    rng = np.random.default_rng(2)
    bias = rng.standard_normal((6, 9)).astype(dtype)
    bias[rng.random((6, 9)) < 0.3] = -np.inf
    bias[:, 0] = 0.0
    out, _ = scaled_dot_product_attention(q, k, v, bias=bias)
    ref = torch.nn.functional.scaled_dot_product_attention(
        to_torch(q), to_torch(k), to_torch(v), attn_mask=to_torch(bias)
    )
    tol, _ = torch_sdpa_tol(q, k, v, bias=bias)
    assert_within(out, ref.numpy(), tol, "sdpa output, additive mask")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sdpa_weights_match_softmax_of_torch_scores(torch, dtype):
    q, k, v = sdpa_inputs(dtype)
    mask = causal_mask(9)[:6]
    _, w = scaled_dot_product_attention(q, k, v, mask=mask)
    scores = to_torch(q) @ to_torch(k).transpose(-1, -2) / np.sqrt(8)
    scores = scores.masked_fill(~to_torch(mask), float("-inf"))
    _, tol = torch_sdpa_tol(q, k, v, mask=mask)
    assert_within(w, torch.softmax(scores, dim=-1).numpy(), tol, "sdpa weights")
