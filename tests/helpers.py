"""Helpers shared by the test files (imported as ``from helpers import ...``; fixtures are in
conftest.py).

* tolerances from the arithmetic: :func:`rounding_tol`, :func:`abs_product`,
  :func:`attention_tol`, :func:`assert_within` (the bounds of whole computations: rounding.py);
* random inputs and parameters: :func:`random_qkv`, :func:`mha_with_random_biases`,
  :func:`randomise_biases`;
* small models: :func:`small_language_model`, :func:`small_transformer`;
* finite differences, for the ``backward`` sections: :func:`numerical_gradient`,
  :func:`relative_error`, :func:`gradcheck_layer`, :func:`gradcheck_model`;
* PyTorch, for the ``reference (PyTorch)`` sections: :func:`to_torch`, :func:`to_torch64`,
  and ``load_*`` to copy our weights into ``torch.nn`` layers.
  PyTorch is optional here: the reference tests ask for the ``torch`` fixture of conftest.py,
  which skips them when it is not installed.
"""

from __future__ import annotations

import numpy as np
from hypothesis import settings

from transformer_np import (
    LanguageModel,
    LanguageModelConfig,
    MultiHeadAttention,
    Transformer,
    TransformerConfig,
)

try:
    import torch
except ImportError:  # the reference tests skip themselves (the `torch` fixture)
    torch = None

# Property-based tests (hypothesis): 40 random cases each, no time limit per case.
PROPERTY_SETTINGS = settings(max_examples=40, deadline=None)


# ============================================================================================
# tolerances: from the arithmetic, not from one CPU
# ============================================================================================
#
# Every floating-point operation gives its exact result rounded to a relative u = eps / 2, the
# unit round-off (2**-24 ~ 6.0e-8 in float32, 2**-53 ~ 1.1e-16 in float64). A sum of n terms,
# in any order and with any blocking, is within
#
#     gamma(n) * (sum of the terms' magnitudes),   gamma(n) = n u / (1 - n u),
#
# of the exact sum (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 2002,
# Lemma 3.1 and eq. 3.5), and so is a dot product or a row of a matrix product, the terms being
# the products |a_i b_i|. The order and the blocking of the sums are what BLAS and NumPy's SIMD
# dispatch choose differently from one CPU to another (AVX2 or AVX-512 kernels, FMA or not, one
# thread or two): this worst case covers all of them, where a constant fitted to one machine's
# rounding does not. A tolerance is therefore
#
#     rounding_tol(dtype, n, magnitude) = gamma(n) * magnitude
#
# where n counts the roundings along the computation (the length of each sum, one per
# element-wise step, FUNCTION_ROUNDINGS per exp, log, erf or tanh) and magnitude is the size of the
# terms (abs_product gives it exactly for a matrix product). Two computations of the same result
# each stay within their own bound, so they differ by at most the sum of the two: their n add.
# A test against a float64 reference counts only the float32 side, whose error dominates.
#
# These bounds are far below what a real bug gives: a dropped rescaling, a missed mask, float32
# where float64 is needed all cost errors many orders of magnitude larger than gamma(n).

# Roundings charged for one transcendental function (exp, log, erf, tanh, expm1...): NumPy's
# SIMD versions (AVX2 and AVX-512) are within 4 ULP of the exact result, the largest error
# NumPy's own accuracy tests allow (numpy/_core/tests/data/umath-validation-set-*.csv), and one
# ULP is at most 2 u of the result.
FUNCTION_ROUNDINGS = 8


def unit_roundoff(dtype):
    """u = eps / 2 of a floating-point dtype: the largest relative error of one rounding."""
    return float(np.finfo(dtype).eps) / 2


def rounding_tol(dtype, n=1, magnitude=1.0):
    """The worst-case rounding error of ``n`` roundings in ``dtype`` on terms of size
    ``magnitude`` (a scalar or an array): gamma(n) * magnitude, as derived above.

    With the default magnitude 1 it is a relative tolerance (``rtol=``)."""
    nu = n * unit_roundoff(dtype)
    assert nu < 0.5, f"{n} roundings in {np.dtype(dtype).name}: no bound (n u = {nu:.2g})"
    return nu / (1 - nu) * np.asarray(magnitude, dtype=np.float64)


def abs_product(a, b):
    """|a| @ |b| in float64: the magnitude of the terms of each entry of ``a @ b`` (the sum of
    |a_ik b_kj| over k), with which a matrix product's rounding error is bounded."""
    return np.abs(np.asarray(a, np.float64)) @ np.abs(np.asarray(b, np.float64))


def attention_tol(q, k, v, dtype=None, *, bias=None, n_tiles=1, sides=2):
    """A bound on the difference of two computations of softmax(q k^T / sqrt(d_k) + bias) v in
    ``dtype`` (default: q's) whose keys are summed in at most ``n_tiles`` pieces each.

    Each score is a d_k-term dot product, scaled (the scale 1 / sqrt(d_k) is itself rounded, then
    multiplied: 3 roundings) and the bias added: its error is at most
    ds = gamma(d_k + 4) (|q| |k|^T / sqrt(d_k) + |bias|). The weights exp(s - max) / sum carry a
    relative error of at most 2 ds (the score's error, in the numerator and in the sum), plus u
    |s - max| <= 2 u max |s| from the subtraction, plus the roundings of the exp (in the
    numerator and in the sum: 2 FUNCTION_ROUNDINGS), of the exp and the product that rescale the
    running sums at each later tile (2 (FUNCTION_ROUNDINGS + 1) per tile), of the sum of n_k terms
    and of the division. The output, a weighted sum of n_k values, adds gamma(n_k) max |v|; the
    weights sum to 1, so the whole error is at most max |v| times the sum of the relative errors.
    ``sides`` computations of that kind (2 for two implementations in ``dtype``; 1 against
    float64) add their bounds. Returns a scalar absolute tolerance for the output; the weights'
    tolerance is the same with max |v| = 1. (rounding.attention_bound gives the same bound
    element by element, with masks and errors already in q, k, v.)
    """
    dtype = np.dtype(dtype or np.asarray(q).dtype)
    d_k, n_k = q.shape[-1], k.shape[-2]
    q64, k64 = np.asarray(q, np.float64), np.asarray(k, np.float64)
    kt = np.swapaxes(k64, -1, -2)
    terms, scores = abs_product(q64, kt) / np.sqrt(d_k), q64 @ kt / np.sqrt(d_k)
    if bias is not None:
        b = np.asarray(bias, np.float64)
        terms, scores = terms + np.abs(b), scores + b
    ds = float(rounding_tol(dtype, d_k + 4, float(np.max(terms, initial=0.0))))
    s_max = float(np.max(np.abs(scores), initial=0.0))
    n_w = 2 * FUNCTION_ROUNDINGS + 2 * (n_tiles - 1) * (FUNCTION_ROUNDINGS + 1) + 2 * n_k + 1
    rel = 2 * ds + float(rounding_tol(dtype, 1, 2 * s_max)) + float(rounding_tol(dtype, n_w))
    v_max = float(np.max(np.abs(np.asarray(v, np.float64)), initial=0.0))
    return sides * rel * max(v_max, 1.0)


def assert_within(actual, desired, tol, what="value"):
    """``actual`` and ``desired`` have the same shape and differ by at most ``tol`` (a scalar or
    an array broadcast against them) everywhere; on failure, say where, by how much and the
    tolerance there."""
    actual64 = np.asarray(actual, dtype=np.float64)
    desired64 = np.asarray(desired, dtype=np.float64)
    assert actual64.shape == desired64.shape, f"{what}: shape {actual64.shape} vs {desired64.shape}"
    if actual64.size == 0:
        return
    err = np.abs(actual64 - desired64)
    tol = np.broadcast_to(np.asarray(tol, np.float64), err.shape)
    ratio = np.where(err == 0, 0.0, err / np.where(tol > 0, tol, np.inf))
    ratio[np.isnan(err)] = np.inf
    worst = np.unravel_index(np.argmax(ratio), ratio.shape)
    assert ratio[worst] <= 1.0, (
        f"{what}: |difference| {err[worst]:.3e} > tolerance {tol[worst]:.3e} at {worst}: "
        f"{actual64[worst]!r} vs {desired64[worst]!r}"
    )


# ============================================================================================
# random inputs and parameters
# ============================================================================================


def random_qkv(rng, q_shape, k_shape, *, d_v=None, dtype=np.float64):
    """Standard-normal queries ``q_shape``, keys ``k_shape`` and values ``k_shape`` with the
    last axis ``d_v`` (default: that of the keys), drawn in that order, in ``dtype``."""
    q = rng.standard_normal(q_shape).astype(dtype)
    k = rng.standard_normal(k_shape).astype(dtype)
    v = rng.standard_normal(tuple(k_shape[:-1]) + (d_v or k_shape[-1],)).astype(dtype)
    return q, k, v


def mha_with_random_biases(d_model, n_heads, rng, *, scale=0.1, bias=True, dtype=np.float64):
    """A MultiHeadAttention whose four biases are ``scale`` times standard normals (not the
    zeros of the initialisation), so that tests exercise them."""
    mha = MultiHeadAttention(d_model, n_heads, rng=rng, bias=bias, dtype=dtype)
    if bias:
        for name in ("b_q", "b_k", "b_v", "b_o"):
            mha.params[name] = (scale * rng.standard_normal(d_model)).astype(dtype)
    return mha


def randomise_biases(params, rng, scale=0.2):
    """In place: every bias and LayerNorm ``beta`` becomes ``scale`` times a standard normal,
    every LayerNorm ``gamma`` 1 plus that, in the order of ``params``."""
    for name in params:
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("b", "b_q", "b_k", "b_v", "b_o", "beta"):
            params[name][...] = scale * rng.standard_normal(params[name].shape)
        if leaf == "gamma":
            params[name][...] = 1 + scale * rng.standard_normal(params[name].shape)


# ============================================================================================
# small models
# ============================================================================================


def small_language_model(*, rng=0, **config):
    """A LanguageModel: vocabulary 10, d_model 16, 2 heads, max_len 12 unless ``config`` says
    otherwise (any field of LanguageModelConfig)."""
    fields = {"vocab_size": 10, "d_model": 16, "n_heads": 2, "max_len": 12, **config}
    return LanguageModel(LanguageModelConfig(**fields), rng=rng)


def small_transformer(*, rng=0, **config):
    """A Transformer: vocabularies 11 (source) and 12 (target), d_model 16, 4 heads unless
    ``config`` says otherwise (any field of TransformerConfig)."""
    fields = {"src_vocab_size": 11, "tgt_vocab_size": 12, "d_model": 16, "n_heads": 4, **config}
    return Transformer(TransformerConfig(**fields), rng=rng)


def parameter_snapshot(model):
    """A copy of every parameter of ``model``, by name."""
    return {k: v.copy() for k, v in model.params.items()}


def assert_parameters_unchanged(model, before):
    """Every parameter of ``model`` still equals its ``parameter_snapshot`` ``before``."""
    after = model.params
    assert set(after) == set(before)
    for k, v in before.items():
        np.testing.assert_array_equal(after[k], v, err_msg=k)


# ============================================================================================
# finite differences
# ============================================================================================
#
# The analytic gradient (``backward``) must agree with a numerical one to a relative error of
# at most FD_TOL = 1e-6 (float64). The numerical derivative is the five-point central difference
#
#     f'(x) ~ [8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))] / (12 h),   h = FD_STEP = 1e-5,
#
# whose truncation error (O(h^4)) is negligible, so what remains is float64 round-off (about
# 1e-10 relative); a wrong formula gives errors of order 1. The relative error of two gradient
# arrays is ``||a - n|| / (||a|| + ||n||)``.
#
# A layer is checked on ``f = sum(G * layer(x))`` with a random ``G``: its gradient with respect
# to the output is ``G``, so any ``grad_output`` is exercised.

FD_STEP = 1e-5
FD_TOL = 1e-6


def numerical_gradient(f, arr, indices=None):
    """Five-point central difference of the scalar ``f()`` w.r.t. ``arr`` (perturbed in place,
    then restored), at every entry or at the ``indices`` given."""
    out = np.zeros_like(arr)
    indices = list(np.ndindex(arr.shape)) if indices is None else indices
    for idx in indices:
        orig = arr[idx]
        vals = []
        for step in (FD_STEP, -FD_STEP, 2 * FD_STEP, -2 * FD_STEP):
            arr[idx] = orig + step
            vals.append(f())
        arr[idx] = orig
        out[idx] = (8 * (vals[0] - vals[1]) - (vals[2] - vals[3])) / (12 * FD_STEP)
    return out


def relative_error(a, n):
    """``||a - n|| / (||a|| + ||n||)`` (0 when both are 0)."""
    a, n = np.ravel(a), np.ravel(n)
    denom = np.linalg.norm(a) + np.linalg.norm(n)
    return 0.0 if denom == 0 else float(np.linalg.norm(a - n) / denom)


def is_key_bias(name):
    """Whether a parameter is a key bias ``b_k``.

    The key bias adds q . b_k to every score of a row: softmax is shift-invariant, so its
    gradient is exactly 0 and a relative error means nothing; the gradient checks assert that
    both gradients are 0 instead.
    """
    return name.endswith("b_k")


def gradcheck_layer(forward, backward, layer, inputs, rng):
    """Check ``backward`` against finite differences of ``forward(*inputs)``, w.r.t. every
    floating-point input array and every parameter of ``layer``.

    Returns the largest relative error (asserting each one is <= FD_TOL).
    """
    out = forward(*inputs)
    outs = out if isinstance(out, tuple) else (out,)
    G = [rng.standard_normal(o.shape) for o in outs]

    def f():
        o = forward(*inputs)
        o = o if isinstance(o, tuple) else (o,)
        return float(sum(np.sum(g * oo) for g, oo in zip(G, o, strict=True)))

    forward(*inputs)
    d_in = backward(*G)
    d_in = d_in if isinstance(d_in, tuple) else () if d_in is None else (d_in,)
    grads = {k: np.array(v, copy=True) for k, v in layer.grads.items()}
    assert set(grads) == set(layer.params), "grads must have the same keys as params"
    worst = 0.0
    float_inputs = [x for x in inputs if isinstance(x, np.ndarray) and x.dtype.kind == "f"]
    assert len(d_in) == len(float_inputs)
    for x, dx in zip(float_inputs, d_in, strict=True):
        err = relative_error(dx, numerical_gradient(f, x))
        assert err <= FD_TOL, f"input gradient: relative error {err:.2e}"
        worst = max(worst, err)
    for name in layer.params:
        p = layer.params[name]
        assert grads[name].shape == p.shape and grads[name].dtype == p.dtype
        num = numerical_gradient(f, p)
        if is_key_bias(name):
            assert np.abs(grads[name]).max() < 1e-12 and np.abs(num).max() < 1e-8
            continue
        err = relative_error(grads[name], num)
        assert err <= FD_TOL, f"{name}: relative error {err:.2e}"
        worst = max(worst, err)
    return worst


def gradcheck_model(model, loss_fn, rng, per_array=2):
    """Check a whole model's gradients against finite differences of ``loss_fn(backward=False)``.

    Every parameter's gradient is compared on ``per_array`` random entries, then along a random
    direction of the whole parameter space (every entry of every array at once).
    ``loss_fn(backward=True)`` must also run the backward pass. Returns the relative error.
    """
    model.zero_grad()
    loss_fn(backward=True)
    grads = {k: np.array(v, copy=True) for k, v in model.grads.items()}
    assert set(grads) == set(model.params)
    all_a, all_n = [], []
    for name, p in model.params.items():
        n_idx = min(per_array, p.size)
        flat = rng.choice(p.size, size=n_idx, replace=False)
        idx = [np.unravel_index(i, p.shape) for i in flat]
        num = numerical_gradient(lambda: loss_fn(backward=False), p, idx)
        a = np.array([grads[name][i] for i in idx])
        nn_ = np.array([num[i] for i in idx])
        if is_key_bias(name):
            assert np.abs(a).max() < 1e-12 and np.abs(nn_).max() < 1e-8
            continue
        all_a.append(a)
        all_n.append(nn_)
        # entry by entry: the error is tiny compared with the gradient's overall scale
        scale = np.abs(nn_).max() + 1e-4
        assert np.abs(a - nn_).max() / scale <= FD_TOL, name
    err = relative_error(np.concatenate(all_a), np.concatenate(all_n))
    assert err <= FD_TOL
    # directional derivative along a random unit direction u: <grad, u> vs d/dt L(theta + t u)
    params = model.params
    u = {k: rng.standard_normal(p.shape) for k, p in params.items()}
    norm = np.sqrt(sum(np.sum(v * v) for v in u.values()))
    analytic = sum(np.sum(grads[k] * u[k]) for k in params) / norm
    theta = {k: p.copy() for k, p in params.items()}

    def loss_along_u(t):
        for k, p in params.items():
            p[...] = theta[k] + (t / norm) * u[k]
        return loss_fn(backward=False)

    vals = [loss_along_u(t) for t in (FD_STEP, -FD_STEP, 2 * FD_STEP, -2 * FD_STEP)]
    loss_along_u(0.0)
    numeric = (8 * (vals[0] - vals[1]) - (vals[2] - vals[3])) / (12 * FD_STEP)
    assert abs(analytic - numeric) / abs(numeric) <= FD_TOL
    return err


# ============================================================================================
# PyTorch
# ============================================================================================


def torch_dtype(dtype):
    """The torch dtype of a NumPy floating-point dtype."""
    return getattr(torch, np.dtype(dtype).name)


def to_torch(x):
    """A tensor of the same dtype as the array (a copy when it is not contiguous)."""
    return torch.from_numpy(np.ascontiguousarray(x))


def to_torch64(x, requires_grad=False):
    """A float64 tensor (a leaf of autograd with ``requires_grad=True``)."""
    return torch.tensor(np.asarray(x), dtype=torch.float64, requires_grad=requires_grad)


def to_torch_blocked(mask):
    """Our mask (True = may attend) as torch's boolean masks (True = blocked)."""
    return torch.tensor(~np.asarray(mask))


# -- our weights into torch.nn layers (torch applies x @ W.T: our W transposed) ---------------


def load_linear(torch_linear, linear):
    """Copy a Linear's ``W``, ``b`` into a ``torch.nn.Linear``."""
    with torch.no_grad():
        torch_linear.weight.copy_(to_torch(linear.params["W"].T))
        torch_linear.bias.copy_(to_torch(linear.params["b"]))


def load_layer_norm(torch_layer_norm, layer_norm):
    """Copy a LayerNorm's ``gamma``, ``beta`` into a ``torch.nn.LayerNorm``."""
    with torch.no_grad():
        torch_layer_norm.weight.copy_(to_torch(layer_norm.params["gamma"]))
        torch_layer_norm.bias.copy_(to_torch(layer_norm.params["beta"]))


def load_mha(torch_mha, mha):
    """Copy a MultiHeadAttention (with biases) into a ``torch.nn.MultiheadAttention``, whose
    input projection is one (3D, D) matrix: W_q, W_k, W_v stacked."""
    p = mha.params
    with torch.no_grad():
        torch_mha.in_proj_weight.copy_(
            to_torch(np.concatenate([p["W_q"].T, p["W_k"].T, p["W_v"].T]))
        )
        torch_mha.in_proj_bias.copy_(to_torch(np.concatenate([p["b_q"], p["b_k"], p["b_v"]])))
        torch_mha.out_proj.weight.copy_(to_torch(p["W_o"].T))
        torch_mha.out_proj.bias.copy_(to_torch(p["b_o"]))


def load_encoder_layer(torch_layer, block):
    """Copy an EncoderBlock into a ``torch.nn.TransformerEncoderLayer``."""
    load_mha(torch_layer.self_attn, block.attn)
    load_layer_norm(torch_layer.norm1, block.norm1)
    load_layer_norm(torch_layer.norm2, block.norm2)
    load_linear(torch_layer.linear1, block.ff.linear1)
    load_linear(torch_layer.linear2, block.ff.linear2)


def load_decoder_layer(torch_layer, block):
    """Copy a DecoderBlock into a ``torch.nn.TransformerDecoderLayer``."""
    load_mha(torch_layer.self_attn, block.self_attn)
    load_mha(torch_layer.multihead_attn, block.cross_attn)
    for theirs, ours in (
        (torch_layer.norm1, block.norm1),
        (torch_layer.norm2, block.norm2),
        (torch_layer.norm3, block.norm3),
    ):
        load_layer_norm(theirs, ours)
    load_linear(torch_layer.linear1, block.ff.linear1)
    load_linear(torch_layer.linear2, block.ff.linear2)


# -- torch's gradients under our parameter names ----------------------------------------------


def torch_mha_grads(torch_mha):
    """The gradients of a ``torch.nn.MultiheadAttention`` under our names (W_q, ..., b_o)."""
    D = torch_mha.embed_dim
    gw, gb = torch_mha.in_proj_weight.grad.numpy(), torch_mha.in_proj_bias.grad.numpy()
    return {
        "W_q": gw[:D].T,
        "W_k": gw[D : 2 * D].T,
        "W_v": gw[2 * D :].T,
        "W_o": torch_mha.out_proj.weight.grad.numpy().T,
        "b_q": gb[:D],
        "b_k": gb[D : 2 * D],
        "b_v": gb[2 * D :],
        "b_o": torch_mha.out_proj.bias.grad.numpy(),
    }


def add_norm_and_feed_forward_grads(grads, torch_layer, norms):
    """Add the gradients of ``torch_layer``'s LayerNorms ``norms`` and of its feed-forward
    network to ``grads``, under our names; return ``grads``."""
    for ours in norms:
        grads[f"{ours}.gamma"] = getattr(torch_layer, ours).weight.grad.numpy()
        grads[f"{ours}.beta"] = getattr(torch_layer, ours).bias.grad.numpy()
    for ours, theirs in (("ff.linear1", torch_layer.linear1), ("ff.linear2", torch_layer.linear2)):
        grads[f"{ours}.W"] = theirs.weight.grad.numpy().T
        grads[f"{ours}.b"] = theirs.bias.grad.numpy()
    return grads


def torch_encoder_layer_grads(torch_layer):
    """The gradients of a ``torch.nn.TransformerEncoderLayer`` under an EncoderBlock's names."""
    grads = {f"attn.{k}": v for k, v in torch_mha_grads(torch_layer.self_attn).items()}
    return add_norm_and_feed_forward_grads(grads, torch_layer, ("norm1", "norm2"))


def torch_decoder_layer_grads(torch_layer):
    """The gradients of a ``torch.nn.TransformerDecoderLayer`` under a DecoderBlock's names."""
    grads = {f"self_attn.{k}": v for k, v in torch_mha_grads(torch_layer.self_attn).items()}
    grads.update(
        {f"cross_attn.{k}": v for k, v in torch_mha_grads(torch_layer.multihead_attn).items()}
    )
    return add_norm_and_feed_forward_grads(grads, torch_layer, ("norm1", "norm2", "norm3"))


# -- Hugging Face's Llama layers, the reference of the modern block ------------------------------


def hf_llama_config(cfg):
    """A transformers ``LlamaConfig`` with the sizes of our ``LlamaConfig`` (eager attention)."""
    from transformers import LlamaConfig as HFLlamaConfig

    return HFLlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.max_len,
        rms_norm_eps=cfg.eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_base},
        tie_word_embeddings=True,
        attention_bias=False,
        mlp_bias=False,
        attn_implementation="eager",
    )


def hf_rope_float64(rotary):
    """Make a ``LlamaRotaryEmbedding`` compute its angles in float64.

    transformers computes cos and sin in float32 even in a float64 model (``.float()`` in its
    ``forward``), which would limit a float64 comparison to about 1e-6; the formula is the same.
    """
    dim = rotary.inv_freq.shape[0] * 2
    base = rotary.config.rope_parameters["rope_theta"]

    def forward(x, position_ids):
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        freqs = position_ids[..., None].double() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    rotary.forward = forward


def load_llama_block(hf_layer, block):
    """Copy a LlamaBlock's parameters into a transformers ``LlamaDecoderLayer``."""
    p = block.params
    pairs = {
        "self_attn.q_proj.weight": p["attn.W_q"].T,
        "self_attn.k_proj.weight": p["attn.W_k"].T,
        "self_attn.v_proj.weight": p["attn.W_v"].T,
        "self_attn.o_proj.weight": p["attn.W_o"].T,
        "mlp.gate_proj.weight": p["ff.W_gate"].T,
        "mlp.up_proj.weight": p["ff.W_up"].T,
        "mlp.down_proj.weight": p["ff.W_down"].T,
        "input_layernorm.weight": p["norm1.gamma"],
        "post_attention_layernorm.weight": p["norm2.gamma"],
    }
    state = hf_layer.state_dict()
    with torch.no_grad():
        for name, value in pairs.items():
            state[name].copy_(to_torch(value))


def load_llama_model(hf_model, model):
    """Copy a LlamaModel's parameters into a transformers ``LlamaForCausalLM``."""
    with torch.no_grad():
        hf_model.model.embed_tokens.weight.copy_(to_torch(model.params["embed.W"]))
        hf_model.model.norm.weight.copy_(to_torch(model.params["blocks.norm.gamma"]))
        for hf_layer, block in zip(hf_model.model.layers, model.blocks.layers, strict=True):
            load_llama_block(hf_layer, block)


def hf_llama_in_input_dtype(monkeypatch):
    """Make transformers' ``LlamaRMSNorm`` and eager attention compute float64 in float64.

    Both convert to float32 whatever the input's dtype (meant for float16 models): RMSNorm
    normalises in float32, attention takes its softmax in float32; a float64 model then
    differs from exact float64 by about 1e-7. The formulas are the same; only the dtype changes
    (the rotary angles are fixed by :func:`hf_rope_float64`).
    """
    from transformers.models.llama import modeling_llama as ml

    def rmsnorm_forward(self, hidden_states):
        dtype = torch.promote_types(hidden_states.dtype, torch.float32)
        h = hidden_states.to(dtype)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * h.to(hidden_states.dtype)

    def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0,
                                **kwargs):  # fmt: skip
        key_states = ml.repeat_kv(key, module.num_key_value_groups)
        value_states = ml.repeat_kv(value, module.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        dtype = torch.promote_types(query.dtype, torch.float32)
        attn_weights = torch.softmax(attn_weights, dim=-1, dtype=dtype).to(query.dtype)
        attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
        return attn_output, attn_weights

    monkeypatch.setattr(ml.LlamaRMSNorm, "forward", rmsnorm_forward)
    monkeypatch.setattr(ml, "eager_attention_forward", eager_attention_forward)
