"""The boundary: a user's call is checked once, and what the package's maths calls is not.

Every public function, layer call, construction and ``backward`` has one name; which of its
callers checks is decided by who calls (``transformer_np._checks.calls``): the first call a user
makes checks its arguments, and everything it calls in turn runs as it is.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from transformer_np import LanguageModel, LanguageModelConfig, Linear, MultiHeadAttention
from transformer_np._checks import boundary, general
from transformer_np._checks.boundary import checked
from transformer_np._kernels.threads import parallel_for


def counted():
    """A validator that counts its calls and checks that ``x`` is an ndarray."""
    calls = []

    def validator(x):
        calls.append(1)
        if not isinstance(x, np.ndarray):
            raise TypeError(f"x must be an ndarray, got {type(x).__name__}")
        return {"x": x}

    return validator, calls


def test_a_users_call_runs_the_validator_once_and_the_packages_own_call_never():
    validator, calls = counted()

    @checked(validator)
    def double(x):
        return 2 * x

    class Doubler(Linear):  # a layer whose maths calls the public function
        def forward(self, x):
            return double(double(x))

    assert np.array_equal(double(np.ones(2)), 2 * np.ones(2)) and calls == [1]
    with pytest.raises(TypeError, match="x must be an ndarray, got list"):
        double([1.0])  # the user's call: checked
    assert Doubler(2, 2)(np.ones((1, 2))).tolist() == [[4.0, 4.0]]
    assert calls == [1, 1]  # inside the layer's call: no check at all


def test_a_generator_function_runs_its_steps_as_the_packages_own_calls():
    validator, calls = counted()

    @checked(validator)
    def inner(x):
        return x + 1

    @checked(validator)
    def steps(x):
        for _ in range(3):
            x = inner(x)  # runs when the caller iterates, after the user's call returned
            yield x

    assert [float(v[0]) for v in steps(np.zeros(1))] == [1.0, 2.0, 3.0]
    assert calls == [1]  # the user's call only, not the three steps


def test_an_error_inside_leaves_the_next_user_call_checked():
    validator, calls = counted()

    @checked(validator)
    def fails(x):
        raise RuntimeError("the maths failed")

    with pytest.raises(RuntimeError):
        fails(np.ones(1))
    with pytest.raises(TypeError, match="x must be an ndarray"):
        fails("not an array")  # still the user's call: checked
    assert calls == [1, 1]


def test_building_a_layer_checks_its_arguments_once_not_its_sub_layers(monkeypatch):
    seen = []
    check = boundary.check_construction
    monkeypatch.setattr(
        boundary,
        "check_construction",
        lambda cls, a, k: seen.append(cls.__name__) or check(cls, a, k),
    )
    MultiHeadAttention(16, 4, rng=0)  # builds four Linear layers inside
    assert seen == ["MultiHeadAttention"]
    with pytest.raises(ValueError, match="n_heads"):
        MultiHeadAttention(16, 3)  # the user's construction is checked


def test_a_users_backward_checks_the_gradient_it_passes_once(monkeypatch):
    model = LanguageModel(LanguageModelConfig(vocab_size=11, d_model=8, n_heads=2), rng=0)
    logits = model(np.array([[1, 2, 3]]))
    scans = []
    finite = general.check_finite
    monkeypatch.setattr(
        general, "check_finite", lambda x, n, **k: scans.append(n) or finite(x, n, **k)
    )
    model.backward(np.ones_like(logits))
    assert scans == ["grad_logits"]  # one scan, of the user's gradient; none between the layers
    bad = np.ones_like(logits)
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="grad_logits contains NaN"):
        model.backward(bad)
    with pytest.raises(ValueError, match=r"shape of the last output \(1, 3, 8\), got \(3, 9\)"):
        model.blocks.layers[0].ff.backward(np.ones((3, 9)))  # a layer's own backward: checked


def test_the_kernels_threads_run_the_packages_own_calls():
    validator, calls = counted()

    @checked(validator)
    def square(x):
        return x * x

    inside = []

    def piece(i):
        square(np.ones(1))
        inside.append(threading.current_thread().name)

    @checked(validator)
    def spread(x):
        parallel_for(piece, range(4), threads=2)
        return x

    spread(np.ones(1))
    assert calls == [1] and len(inside) == 4  # only the user's call was checked
