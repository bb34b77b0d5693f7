"""Backward passes against central finite differences in float64.

Every layer, the loss and the whole models: the analytic gradient (``backward``) must agree with
a numerical one to a relative error of at most 1e-6. The numerical derivative is the five-point
central difference

    f'(x) ~ [8 (f(x+h) - f(x-h)) - (f(x+2h) - f(x-2h))] / (12 h),   h = 1e-5,

whose truncation error (O(h^4)) is negligible, so what remains is float64 round-off (about
1e-10 relative); a wrong formula gives errors of order 1. The relative error of two gradient
arrays is ``||a - n|| / (||a|| + ||n||)``.

A layer is checked on ``f = sum(G * layer(x))`` with a random ``G``: its gradient with respect
to the output is ``G``, so any ``grad_output`` is exercised.
"""

from __future__ import annotations

import numpy as np
import pytest

from transformer_np import (
    Embedding,
    EncoderBlock,
    FeedForward,
    LayerNorm,
    Linear,
    MultiHeadAttention,
    causal_mask,
    padding_mask,
)
from transformer_np.losses import cross_entropy
from transformer_np.model import (
    DecoderBlock,
    Dropout,
    LanguageModel,
    LanguageModelConfig,
    TiedOutput,
    Transformer,
    TransformerConfig,
)

H = 1e-5
TOL = 1e-6


def numerical_grad(f, arr, idx_list=None):
    """Five-point central difference of the scalar ``f()`` w.r.t. ``arr`` (perturbed in place)."""
    out = np.zeros_like(arr)
    idx_list = list(np.ndindex(arr.shape)) if idx_list is None else idx_list
    for idx in idx_list:
        orig = arr[idx]
        vals = []
        for step in (H, -H, 2 * H, -2 * H):
            arr[idx] = orig + step
            vals.append(f())
        arr[idx] = orig
        out[idx] = (8 * (vals[0] - vals[1]) - (vals[2] - vals[3])) / (12 * H)
    return out


def rel_error(a, n):
    a, n = np.ravel(a), np.ravel(n)
    denom = np.linalg.norm(a) + np.linalg.norm(n)
    return 0.0 if denom == 0 else float(np.linalg.norm(a - n) / denom)


def _is_key_bias(name):
    # The key bias adds q . b_k to every score of a row: softmax is shift-invariant, so its
    # gradient is exactly 0 (checked separately below, where it is the point of the test).
    return name.endswith("b_k")


def check_layer(forward, backward, layer, inputs, rng):
    """Gradcheck ``forward(*inputs)`` w.r.t. every input array and every parameter of ``layer``.

    Returns the largest relative error (asserting each one is <= TOL).
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
        err = rel_error(dx, numerical_grad(f, x))
        assert err <= TOL, f"input gradient: relative error {err:.2e}"
        worst = max(worst, err)
    for name in layer.params:
        p = layer.params[name]
        assert grads[name].shape == p.shape and grads[name].dtype == p.dtype
        num = numerical_grad(f, p)
        if _is_key_bias(name):
            assert np.abs(grads[name]).max() < 1e-12 and np.abs(num).max() < 1e-8
            continue
        err = rel_error(grads[name], num)
        assert err <= TOL, f"{name}: relative error {err:.2e}"
        worst = max(worst, err)
    return worst


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


# --------------------------------------------------------------------------------------------
# layers


@pytest.mark.parametrize("bias", [True, False])
def test_linear_backward_matches_finite_differences(rng, bias):
    lin = Linear(4, 3, bias=bias, rng=rng)
    x = rng.standard_normal((2, 5, 4))
    check_layer(lin, lin.backward, lin, [x], rng)


def test_layer_norm_backward_matches_finite_differences(rng):
    ln = LayerNorm(6)
    ln.params["gamma"] = rng.standard_normal(6)
    ln.params["beta"] = rng.standard_normal(6)
    x = 3 * rng.standard_normal((2, 4, 6)) + 1
    check_layer(ln, ln.backward, ln, [x], rng)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_backward_matches_finite_differences(rng, activation):
    ff = FeedForward(5, 7, activation=activation, rng=rng)
    x = rng.standard_normal((3, 4, 5))
    check_layer(ff, ff.backward, ff, [x], rng)


@pytest.mark.parametrize("scale", [True, False])
def test_embedding_backward_accumulates_repeated_ids(rng, scale):
    emb = Embedding(7, 4, scale=scale, rng=rng)
    ids = np.array([[1, 3, 1, 6], [3, 3, 0, 1]])  # repeated ids, id 2, 4, 5 absent
    check_layer(lambda i: emb(i), emb.backward, emb, [ids], rng)
    assert np.all(emb.grads["W"][[2, 4, 5]] == 0)


def _random_mha(rng, d=8, h=2, bias=True):
    mha = MultiHeadAttention(d, h, rng=rng, bias=bias)
    if bias:  # non-zero biases, so that their gradients are exercised
        for name in ("b_q", "b_k", "b_v", "b_o"):
            mha.params[name] = 0.3 * rng.standard_normal(d)
    return mha


@pytest.mark.parametrize(
    "mask_kind", ["none", "causal", "padding", "causal+padding", "fully-blocked-row"]
)
def test_self_attention_backward_matches_finite_differences(rng, mask_kind):
    mha = _random_mha(rng)
    x = rng.standard_normal((2, 5, 8))
    mask = {
        "none": None,
        "causal": causal_mask(5),
        "padding": padding_mask([5, 3]),
        "causal+padding": causal_mask(5) & padding_mask([5, 2]),
        # sequence 1 has length 0: every key blocked, weights 0, output = b_o
        "fully-blocked-row": padding_mask([4, 0], max_len=5),
    }[mask_kind]
    check_layer(lambda x: mha(x, mask=mask)[0], mha.backward, mha, [x], rng)


def test_cross_attention_backward_returns_both_input_gradients(rng):
    mha = _random_mha(rng)
    x_q = rng.standard_normal((2, 3, 8))
    x_kv = rng.standard_normal((2, 6, 8))
    mask = padding_mask([6, 4])
    check_layer(lambda a, b: mha(a, b, mask=mask)[0], mha.backward, mha, [x_q, x_kv], rng)
    dxq, dxkv = mha.backward(np.ones((2, 3, 8)))
    assert dxq.shape == (2, 3, 8) and dxkv.shape == (2, 6, 8)
    # padded keys (positions 4, 5 of sequence 1) influence nothing: their gradient is 0
    assert np.all(dxkv[1, 4:] == 0)


def test_attention_backward_unbatched_and_without_bias(rng):
    mha = _random_mha(rng, d=6, h=3, bias=False)
    x = rng.standard_normal((4, 6))  # (T, D), no batch axis
    check_layer(lambda x: mha(x, mask=causal_mask(4))[0], mha.backward, mha, [x], rng)


def test_key_bias_gradient_is_exactly_zero_by_softmax_shift_invariance(rng):
    mha = _random_mha(rng)
    x = rng.standard_normal((2, 5, 8))
    mha(x)
    mha.backward(rng.standard_normal((2, 5, 8)))
    assert np.abs(mha.grads["b_k"]).max() < 1e-12
    assert np.abs(mha.grads["b_q"]).max() > 1e-3  # the query bias is not invariant


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_backward_matches_finite_differences(rng, norm_first, activation):
    block = EncoderBlock(4, 2, 6, norm_first=norm_first, activation=activation, rng=rng)
    x = rng.standard_normal((2, 4, 4))
    mask = padding_mask([4, 3])
    check_layer(lambda x: block(x, mask=mask), block.backward, block, [x], rng)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_backward_matches_finite_differences(rng, norm_first):
    block = DecoderBlock(4, 2, 6, norm_first=norm_first, activation="gelu", rng=rng)
    x = rng.standard_normal((2, 4, 4))
    memory = rng.standard_normal((2, 5, 4))
    self_mask = causal_mask(4) & padding_mask([4, 3])
    mem_mask = padding_mask([5, 2])
    check_layer(
        lambda x, m: block(x, m, self_mask, mem_mask), block.backward, block, [x, memory], rng
    )


def test_dropout_backward_uses_the_forward_mask(rng):
    drop = Dropout(0.4)
    drop.training = True
    x = rng.standard_normal((3, 5))

    def forward(x):
        drop.rng = np.random.default_rng(7)  # the same mask at every call
        return drop(x)

    check_layer(forward, drop.backward, drop, [x], rng)
    y = forward(x)
    assert np.all((y == 0) | np.isclose(y, x / 0.6))


def test_tied_output_backward_matches_finite_differences(rng):
    emb = Embedding(6, 4, rng=rng)
    out = TiedOutput(emb)
    out.params["b"] = rng.standard_normal(6)
    h = rng.standard_normal((2, 3, 4))
    check_layer(out, out.backward, out, [h], rng)
    G = rng.standard_normal((2, 3, 6))
    out(h)
    out.backward(G)

    def f():
        return float(np.sum(G * out(h)))

    assert rel_error(out.dW, numerical_grad(f, emb.params["W"])) <= TOL


# --------------------------------------------------------------------------------------------
# whole models, with the loss, masks, padding and positional encoding


def _model_gradcheck(model, loss_fn, rng, per_array=2):
    """Compare every parameter's gradient on ``per_array`` random entries, then along a random
    direction of the whole parameter space (every entry of every array at once)."""
    model.zero_grad()
    loss_fn(backward=True)
    grads = {k: np.array(v, copy=True) for k, v in model.gradients().items()}
    assert set(grads) == set(model.parameters())
    all_a, all_n = [], []
    for name, p in model.parameters().items():
        n_idx = min(per_array, p.size)
        flat = rng.choice(p.size, size=n_idx, replace=False)
        idx = [np.unravel_index(i, p.shape) for i in flat]
        num = numerical_grad(lambda: loss_fn(backward=False), p, idx)
        a = np.array([grads[name][i] for i in idx])
        nn_ = np.array([num[i] for i in idx])
        if _is_key_bias(name):
            assert np.abs(a).max() < 1e-12 and np.abs(nn_).max() < 1e-8
            continue
        all_a.append(a)
        all_n.append(nn_)
        # entry by entry: the error is tiny compared with the gradient's overall scale
        scale = np.abs(nn_).max() + 1e-4
        assert np.abs(a - nn_).max() / scale <= TOL, name
    err = rel_error(np.concatenate(all_a), np.concatenate(all_n))
    assert err <= TOL
    # directional derivative along a random unit direction u: <grad, u> vs d/dt L(theta + t u)
    params = model.parameters()
    u = {k: rng.standard_normal(p.shape) for k, p in params.items()}
    norm = np.sqrt(sum(np.sum(v * v) for v in u.values()))
    analytic = sum(np.sum(grads[k] * u[k]) for k in params) / norm
    theta = {k: p.copy() for k, p in params.items()}

    def along(t):
        for k, p in params.items():
            p[...] = theta[k] + (t / norm) * u[k]
        return loss_fn(backward=False)

    vals = [along(t) for t in (H, -H, 2 * H, -2 * H)]
    along(0.0)
    numeric = (8 * (vals[0] - vals[1]) - (vals[2] - vals[3])) / (12 * H)
    assert abs(analytic - numeric) / abs(numeric) <= TOL
    return err


@pytest.mark.parametrize(
    ("norm_first", "tie", "activation", "dropout"),
    [
        (False, False, "relu", 0.0),
        (True, True, "gelu", 0.0),
        (False, True, "gelu", 0.2),
    ],
)
def test_transformer_gradient_matches_finite_differences(rng, norm_first, tie, activation, dropout):
    cfg = TransformerConfig(
        src_vocab_size=9,
        tgt_vocab_size=10,
        d_model=8,
        n_heads=2,
        d_ff=12,
        n_encoder_layers=2,
        n_decoder_layers=2,
        norm_first=norm_first,
        tie_embeddings=tie,
        activation=activation,
        dropout=dropout,
        dtype="float64",
    )
    model = Transformer(cfg, rng=rng)
    model.train(dropout > 0)
    for name in model.parameters():  # non-zero biases everywhere
        if name.endswith(("b_q", "b_v", "b_o", ".b")):
            model.parameters()[name][...] = 0.2 * rng.standard_normal(
                model.parameters()[name].shape
            )
    src = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 3, 2]])  # 0 = padding
    tgt_in = np.array([[1, 5, 4, 3], [1, 9, 8, 0]])
    tgt_out = np.array([[5, 4, 3, 2], [9, 8, 2, 0]])

    def loss_fn(backward):
        for d in model._dropouts:  # identical dropout masks at every evaluation
            d.rng = np.random.default_rng(3)
        logits = model(src, tgt_in)
        loss, g = cross_entropy(logits, tgt_out, ignore_index=0, label_smoothing=0.1)
        if backward:
            model.backward(g)
        return loss

    _model_gradcheck(model, loss_fn, rng)


@pytest.mark.parametrize("norm_first", [False, True])
def test_language_model_gradient_matches_finite_differences(rng, norm_first):
    cfg = LanguageModelConfig(
        vocab_size=11, d_model=8, n_heads=2, n_layers=2, norm_first=norm_first, dtype="float64"
    )
    model = LanguageModel(cfg, rng=rng)
    x = rng.integers(0, 11, (2, 6))
    y = rng.integers(0, 11, (2, 6))

    def loss_fn(backward):
        loss, g = cross_entropy(model(x), y)
        if backward:
            model.backward(g)
        return loss

    _model_gradcheck(model, loss_fn, rng)


def test_gradients_are_overwritten_not_accumulated(rng):
    cfg = LanguageModelConfig(vocab_size=7, d_model=8, n_heads=2, dtype="float64")
    model = LanguageModel(cfg, rng=rng)
    x = rng.integers(0, 7, (2, 5))
    g = rng.standard_normal((2, 5, 7))
    model(x)
    model.backward(g)
    first = {k: v.copy() for k, v in model.gradients().items()}
    model(x)
    model.backward(g)
    for k, v in model.gradients().items():
        np.testing.assert_array_equal(v, first[k])


def test_backward_before_forward_is_a_clear_error():
    with pytest.raises(RuntimeError, match="before a forward pass"):
        Linear(2, 3).backward(np.ones((1, 3)))
    with pytest.raises(RuntimeError, match="before a forward pass"):
        MultiHeadAttention(4, 2).backward(np.ones((1, 2, 4)))


def test_backward_with_wrong_gradient_shape_is_a_clear_error(rng):
    lin = Linear(2, 3, rng=rng)
    lin(np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"grad_output must have the shape of the last output"):
        lin.backward(np.ones((4, 2)))
