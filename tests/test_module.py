"""module.py: what every layer shares (the Module base and its NestedParams view).

Sections: values (NestedParams, the live view of sub-layers' parameters with dotted names),
errors (a backward pass before any forward pass names the layer, block or model). The
behaviour of particular layers is tested in the test file of their module.
"""

import numpy as np
import pytest

from transformer_np import DecoderBlock, EncoderBlock, LayerNorm, Linear, MultiHeadAttention
from transformer_np.module import Module, NestedParams

from helpers import small_language_model

# ============================================================================================
# values
# ============================================================================================


def test_nested_params_nest_and_reject_unknown_keys():
    class Inner(Module):
        def __init__(self):
            super().__init__()
            self.add_children(a=Linear(2, 2, rng=np.random.default_rng(0)))

    class Outer(Module):
        def __init__(self):
            super().__init__()
            self.add_children(x=Inner(), ln=LayerNorm(2))

    outer = Outer().params
    assert isinstance(outer, NestedParams)
    assert list(outer) == ["x.a.W", "x.a.b", "ln.gamma", "ln.beta"]
    assert len(outer) == 4
    w = np.ones((2, 2))
    outer["x.a.W"] = w  # a write lands in the leaf's own dict
    assert outer["x.a.W"] is w
    with pytest.raises(KeyError):
        outer["x.a.nope"] = np.zeros(2)
    with pytest.raises(KeyError):
        outer["nope.W"]
    with pytest.raises(TypeError):
        del outer["ln.gamma"]


# ============================================================================================
# errors
# ============================================================================================


def test_backward_before_forward_is_a_clear_error():
    with pytest.raises(RuntimeError, match="before a forward pass"):
        Linear(2, 3).backward(np.ones((1, 3)))
    with pytest.raises(RuntimeError, match="before a forward pass"):
        MultiHeadAttention(4, 2).backward(np.ones((1, 2, 4)))


def test_a_gradient_read_before_backward_is_a_clear_error():
    lm = small_language_model(d_model=8, max_len=6, dtype="float64")
    name = next(iter(lm.params))
    with pytest.raises(KeyError, match=f"no gradient for '{name}': call backward\\(\\) first"):
        lm.grads[name]
    ids = np.array([[1, 2, 3]])
    logits = lm(ids)  # (1, 3, V)
    lm.backward(np.ones_like(logits))
    assert set(lm.grads) == set(lm.params)  # after backward: one gradient per parameter
    assert all(lm.grads[k].shape == p.shape for k, p in lm.params.items())
    # items() and values() read in one pass give what the keys give, in their order
    for view in (lm.params, lm.grads):
        assert [k for k, _ in view.items()] == list(view) and len(view) == len(lm.params)
        assert all(a is view[k] for (k, a) in view.items())
        assert [id(a) for a in view.values()] == [id(view[k]) for k in view]


def test_backward_before_forward_names_the_model_or_block():
    lm = small_language_model(d_model=8, max_len=6, dtype="float64")
    with pytest.raises(RuntimeError, match="LanguageModel.backward was called before a forward"):
        lm.backward(np.zeros((1, 3, 10)))
    with pytest.raises(RuntimeError, match="EncoderBlock.backward was called before a forward"):
        EncoderBlock(8, 2, 16, rng=0).backward(np.ones((1, 3, 8)))
    with pytest.raises(RuntimeError, match="DecoderBlock.backward was called before a forward"):
        DecoderBlock(8, 2, 16, rng=0).backward(np.ones((1, 3, 8)))


def test_checked_gives_the_validator_every_argument_by_name_however_called():
    from transformer_np._checks.boundary import checked

    seen = []

    def check(a, b, c):
        seen.append((a, b, c))
        return {"a": a, "b": b, "c": c}

    @checked(check)
    def f(a, b=2, c=None):
        return a, b, c

    calls = [f(1), f(1, 2), f(1, 2, None), f(1, c=None), f(a=1), f(1, b=2, c=None)]
    assert calls == [(1, 2, None)] * 6 and seen == [(1, 2, None)] * 6
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        f()
    with pytest.raises(TypeError, match="too many positional arguments"):
        f(1, 2, 3, 4)
    with pytest.raises(TypeError, match="multiple values for argument 'a'"):
        f(1, a=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'd'"):
        f(1, d=4)

    @checked(lambda a, k: {"a": a, "k": k})
    def g(a, *, k=5):  # a keyword-only parameter
        return a, k

    assert [g(1), g(1, k=6), g(a=1, k=6)] == [(1, 5), (1, 6), (1, 6)]
    with pytest.raises(TypeError, match="too many positional arguments"):
        g(1, 6)
    with pytest.raises(TypeError, match="missing a required argument: 'a'"):
        g(k=6)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_check_finite_finds_one_bad_value_in_any_layout(dtype, bad):
    from transformer_np import NotFiniteError
    from transformer_np._checks.general import check_finite

    x = np.ones((7, 6), dtype)
    x[3, 2] = bad
    for view in (x, x.T, x[:, ::2], x[2:5]):  # contiguous (a BLAS dot), or not (a sum)
        with pytest.raises(NotFiniteError, match=r"g contains (NaN|inf) \(1 of"):
            check_finite(view, "g")
    huge = np.full((4, 4), np.finfo(dtype).max / 2, dtype)  # its sum of squares overflows
    check_finite(huge, "g")  # but every value is finite: no error
