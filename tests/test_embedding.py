"""embedding.py: token embeddings (Embedding) and the tied output layer (TiedOutput).

Sections: values (the lookup scaled by sqrt(d_model), initialisation, dtypes, attend), errors
(bad token ids, a bad tied layer or input), backward (against finite differences, repeated ids
accumulate; the tied layer's share of the shared matrix, in either order), reference (both
layers' outputs and the gradient against torch.nn.Embedding). Weight tying in a whole model is
tested in test_model.py.
"""

import math

import numpy as np
import pytest

from transformer_np import Embedding, TiedOutput

from helpers import (
    FD_TOL,
    assert_within,
    gradcheck_layer,
    numerical_gradient,
    relative_error,
    to_torch,
    to_torch64,
    torch_dtype,
)
from rounding import embedding_rounded, exact, tied_output_rounded

# ============================================================================================
# values
# ============================================================================================


def test_embedding_looks_up_rows_scaled_by_sqrt_d_model():
    emb = Embedding(10, 16, rng=np.random.default_rng(4))
    ids = np.array([[1, 2, 3], [9, 0, 1]])
    out = emb(ids)
    assert out.shape == (2, 3, 16)
    assert_within(
        out, emb.params["W"][ids] * 4.0, embedding_rounded(emb, ids)[0].tol(np.float64, 2)
    )
    np.testing.assert_array_equal(emb.cache["ids"], ids)


def test_embedding_without_scale_is_a_plain_lookup():
    emb = Embedding(5, 4, scale=False, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(emb(np.array([4, 4])), emb.params["W"][[4, 4]])


def test_embedding_scaled_init_has_unit_variance():
    emb = Embedding(2000, 64, rng=np.random.default_rng(6))
    assert abs(emb(np.arange(2000)).var() - 1.0) < 0.05


def test_embedding_does_not_modify_the_table():
    emb = Embedding(5, 4, rng=np.random.default_rng(7))
    W = emb.params["W"].copy()
    emb(np.array([0, 1, 1]))
    np.testing.assert_array_equal(emb.params["W"], W)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64])
def test_embedding_accepts_any_integer_dtype(dtype):
    emb = Embedding(5, 4, rng=np.random.default_rng(0), dtype=np.float32)
    out = emb(np.array([0, 4], dtype=dtype))
    assert out.dtype == np.float32 and out.shape == (2, 4)


def test_attend_is_the_product_with_the_transposed_table(rng):
    emb = Embedding(11, 8, rng=rng)
    h = rng.standard_normal((2, 3, 8))
    logits = emb.attend(h)
    assert logits.shape == (2, 3, 11)
    tol = tied_output_rounded(emb, np.zeros(11), exact(h))[0].tol(np.float64, sides=2)
    assert_within(logits, h @ emb.params["W"].T, tol, "Embedding.attend")
    out = TiedOutput(emb)  # b = 0: the tied layer adds nothing to attend
    np.testing.assert_array_equal(out(h), logits)


# ============================================================================================
# errors
# ============================================================================================


def test_embedding_id_errors():
    emb = Embedding(10, 4, rng=0)
    with pytest.raises(TypeError, match="ids must be an array of integer token ids.*float64"):
        emb(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"ids must be in \[0, vocab_size\) = \[0, 10\), got 10"):
        emb(np.array([3, 10]))
    with pytest.raises(ValueError, match="got -1"):
        emb(np.array([[-1, 2]]))
    with pytest.raises(TypeError, match="ids"):
        emb(np.array([True, False]))


def test_tied_output_errors():
    with pytest.raises(TypeError, match="embedding must be the Embedding .* got ndarray"):
        TiedOutput(np.zeros((10, 4)))
    out = TiedOutput(Embedding(10, 4, rng=0))
    with pytest.raises(ValueError, match=r"h must have shape \(\.\.\., d_model\) with d_model = 4"):
        out(np.zeros((2, 3, 5)))
    with pytest.raises(ValueError, match="h contains NaN"):
        out(np.array([[1.0, np.nan, 0.0, 0.0]]))


# ============================================================================================
# backward
# ============================================================================================


@pytest.mark.parametrize("scale", [True, False])
def test_embedding_backward_accumulates_repeated_ids(rng, scale):
    emb = Embedding(7, 4, scale=scale, rng=rng)
    ids = np.array([[1, 3, 1, 6], [3, 3, 0, 1]])  # repeated ids, id 2, 4, 5 absent
    gradcheck_layer(lambda i: emb(i), emb.backward, emb, [ids], rng)
    assert np.all(emb.grads["W"][[2, 4, 5]] == 0)


def test_tied_output_backward_matches_finite_differences(rng):
    emb = Embedding(6, 4, rng=rng)
    out = TiedOutput(emb)
    out.params["b"] = rng.standard_normal(6)
    h = rng.standard_normal((2, 3, 4))
    gradcheck_layer(out, out.backward, out, [h], rng)
    G = rng.standard_normal((2, 3, 6))
    out(h)
    out.backward(G)  # the embedding ran no backward: its gradient is the output's share alone

    def f():
        return float(np.sum(G * out(h)))

    assert relative_error(emb.grads["W"], numerical_gradient(f, emb.params["W"])) <= FD_TOL


@pytest.mark.parametrize("output_first", [True, False], ids=["output-first", "embedding-first"])
def test_tied_gradient_is_the_sum_of_both_shares_in_either_order(rng, output_first):
    emb = Embedding(7, 4, rng=rng)
    out = TiedOutput(emb)
    ids = np.array([[1, 3, 1], [0, 6, 3]])
    G = rng.standard_normal((2, 3, 7))

    def f():  # the loss through both uses of the table: the lookup, then the tied output
        return float(np.sum(G * out(emb(ids))))

    f()
    if output_first:  # as the models do
        emb.backward(out.backward(G))
    else:
        emb.backward(G @ emb.params["W"])  # dL/d(lookup output): what out.backward returns
        out.backward(G)
    expected = numerical_gradient(f, emb.params["W"])
    assert relative_error(emb.grads["W"], expected) <= FD_TOL
    f()  # a second backward pass replaces each share: nothing is counted twice
    emb.backward(out.backward(G))
    assert relative_error(emb.grads["W"], expected) <= FD_TOL


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def test_embedding_grad_matches_torch(torch, rng):
    emb = Embedding(9, 4, rng=rng)
    te = torch.nn.Embedding(9, 4, dtype=torch.float64)
    with torch.no_grad():
        te.weight.copy_(to_torch64(emb.params["W"]))
    ids = rng.integers(0, 9, (3, 5))
    G = rng.standard_normal((3, 5, 4))
    (te(torch.tensor(ids)) * math.sqrt(4) * to_torch64(G)).sum().backward()
    emb(ids)
    emb.backward(G)
    tol = embedding_rounded(emb, ids)[1](exact(G))["W"].tol(np.float64, sides=2)
    assert_within(emb.grads["W"], te.weight.grad, tol, "Embedding.W")


def torch_embedding_like(torch, emb, dtype):
    """torch.nn.Embedding with the size and table of our Embedding."""
    te = torch.nn.Embedding(emb.vocab_size, emb.d_model, dtype=torch_dtype(dtype))
    with torch.no_grad():
        te.weight.copy_(to_torch(emb.params["W"]))
    return te


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "unscaled"])
def test_embedding_forward_matches_torch_embedding(torch, dtype, scale):
    rng = np.random.default_rng(14)
    emb = Embedding(11, 12, scale=scale, rng=rng, dtype=dtype)  # sqrt(12): not exact
    te = torch_embedding_like(torch, emb, dtype)
    ids = rng.integers(0, 11, (3, 7))  # repeated ids, as in real text
    out = emb(ids)
    assert out.shape == (3, 7, 12) and out.dtype == dtype
    with torch.no_grad():
        ref = te(torch.tensor(ids))
        ref = (ref * math.sqrt(12) if scale else ref).numpy()
    tol = embedding_rounded(emb, ids)[0].tol(dtype, sides=2)
    assert_within(out, ref, tol, f"Embedding({scale=}, {np.dtype(dtype).name})")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tied_output_forward_matches_torch_linear_with_the_embedding_table(torch, dtype):
    rng = np.random.default_rng(15)
    emb = Embedding(11, 16, rng=rng, dtype=dtype)
    out = TiedOutput(emb)
    out.params["b"] = (0.1 * rng.standard_normal(11)).astype(dtype)
    te = torch_embedding_like(torch, emb, dtype)
    h = rng.standard_normal((3, 7, 16)).astype(dtype)
    logits = out(h)
    assert logits.shape == (3, 7, 11) and logits.dtype == dtype
    with torch.no_grad():
        ref = torch.nn.functional.linear(to_torch(h), te.weight, to_torch(out.params["b"]))
    tol = tied_output_rounded(emb, out.params["b"], exact(h))[0].tol(dtype, sides=2)
    assert_within(logits, ref.numpy(), tol, f"TiedOutput ({np.dtype(dtype).name})")
