"""Tests of the softmax cross-entropy loss (cross_entropy, CrossEntropyLoss).

Sections: values, errors, backward (the gradient against finite differences and the layer's
backward), reference (value and gradient against PyTorch).
"""

import numpy as np
import pytest

from transformer_np import NotFiniteError
from transformer_np.functional import log_softmax
from transformer_np.losses import CrossEntropyLoss, cross_entropy

from helpers import FUNCTION_ROUNDINGS as FR
from helpers import assert_within, rounding_tol
from rounding import log_softmax_tol

LOGITS = np.zeros((2, 3))
TARGETS = np.array([0, 1])


def cross_entropy_tol(logits, targets, *, ignore_index=None, label_smoothing=0.0):
    """The rounding bounds (loss, gradient per entry) of one computation of cross_entropy in
    the logits' dtype, ours or PyTorch's (helpers.py, "tolerances: from the arithmetic").

    log p is off by log_softmax_tol; the smoothed term -mean(log p) by their mean and V + 1
    roundings; each row's (1 - eps) nll + eps smooth by both and 5 (2 constants rounded to the
    dtype, 2 products, the sum); the mean over the n rows by theirs and n + 1. The gradient
    (p - q) / n: p = exp(log p) by log p's error and FR (and V + 2 more for PyTorch, which
    multiplies p by the sum of the V gradients of log p), q's 2 roundings (eps / V and 1 - eps),
    the subtraction (2 of |p - q|), the division by n (1).
    """
    dtype = np.asarray(logits).dtype
    eps = label_smoothing
    v = logits.shape[-1]
    z = np.asarray(logits, np.float64).reshape(-1, v)
    y = np.asarray(targets).reshape(-1)
    kept = np.ones(y.shape, bool) if ignore_index is None else y != ignore_index
    n = int(kept.sum())
    zk, yk = z[kept], y[kept]
    finite = np.isfinite(zk)
    logp = np.where(finite, zk - zk.max(-1, keepdims=True), 0.0)
    logp = logp - np.log(np.sum(np.exp(logp) * finite, axis=-1, keepdims=True))
    lsm = log_softmax_tol(zk, -1, dtype)
    rows = np.arange(n)
    nll, nll_tol = -logp[rows, yk], lsm[rows, yk]
    smooth = -np.where(finite, logp, 0.0).mean(-1)
    smooth_tol = lsm.mean(-1) + rounding_tol(dtype, v + 1, np.abs(logp * finite).mean(-1))
    per_row = (1 - eps) * nll + eps * smooth
    row_tol = (1 - eps) * nll_tol + eps * smooth_tol
    if eps:
        row_tol = row_tol + rounding_tol(dtype, 5, (1 - eps) * nll + eps * smooth)
    loss_tol = row_tol.mean() + rounding_tol(dtype, n + 1, np.abs(per_row).mean())
    p = np.exp(logp) * finite
    q = np.full(zk.shape, eps / v)
    q[rows, yk] += 1 - eps
    grad_tol = np.zeros(z.shape)
    grad_tol[kept] = (
        p * (lsm + rounding_tol(dtype, FR + v + 2))
        + rounding_tol(dtype, 2, q)
        + rounding_tol(dtype, 2, np.abs(p - q))
    ) / n + rounding_tol(dtype, 1, np.abs(p - q) / n)
    return loss_tol, grad_tol.reshape(logits.shape)


def loss_layer_after_a_forward_pass(dtype=np.float64):
    """A CrossEntropyLoss that has run a forward pass (so that backward may be called)."""
    fn = CrossEntropyLoss()
    fn(np.zeros((2, 3), dtype=dtype), np.array([0, 1]))
    return fn


# ============================================================================================
# values
# ============================================================================================


def test_padding_rows_get_zero_gradient_and_do_not_change_the_loss():
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 5, 4))
    targets = np.array([[1, 2, 3, 0, 0], [3, 0, 0, 0, 0]])
    loss, grad = cross_entropy(logits, targets, ignore_index=0)
    kept = targets != 0
    loss_kept, _ = cross_entropy(logits[kept], targets[kept])
    tol = 2 * cross_entropy_tol(logits, targets, ignore_index=0)[0]
    assert loss == pytest.approx(loss_kept, abs=tol)
    assert np.all(grad[~kept] == 0)


def test_all_ignored_gives_zero_loss_not_nan():
    loss, grad = cross_entropy(np.ones((2, 3)), np.array([-100, -100]), ignore_index=-100)
    assert loss == 0.0 and np.all(grad == 0)


def test_float32_in_float32_gradient_out_and_stable_for_huge_logits():
    logits = np.array([[1e4, 0.0, -1e4]], dtype=np.float32)
    loss, grad = cross_entropy(logits, np.array([2]))
    tol = cross_entropy_tol(logits, np.array([2]))[0]
    assert np.isfinite(loss) and loss == pytest.approx(2e4, abs=tol)
    assert grad.dtype == np.float32


def test_cross_entropy_is_the_mean_negative_log_softmax_at_the_targets():
    rng = np.random.default_rng(4)
    logits = rng.normal(size=(3, 4, 6)) * 2
    targets = rng.integers(0, 6, size=(3, 4))
    loss, _ = cross_entropy(logits, targets)
    picked = np.take_along_axis(log_softmax(logits), targets[..., None], axis=-1)
    tol = 2 * cross_entropy_tol(logits, targets)[0]  # the same steps
    assert loss == pytest.approx(-picked.mean(), abs=tol)


def test_layer_forward_returns_the_loss_of_cross_entropy():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 5))
    targets = rng.integers(0, 5, size=(2, 3))
    fn = CrossEntropyLoss(label_smoothing=0.1)
    assert fn(logits, targets) == cross_entropy(logits, targets, label_smoothing=0.1)[0]


def test_numpy_int_ignore_index_works():
    loss, grad = cross_entropy(LOGITS, TARGETS, ignore_index=np.int64(1))
    tol = cross_entropy_tol(LOGITS, TARGETS, ignore_index=1)[0]
    tol += rounding_tol(LOGITS.dtype, FR, np.log(3))  # np.log(3)'s own
    assert loss == pytest.approx(np.log(3), abs=tol)
    np.testing.assert_array_equal(grad[1], 0)


def test_minus_inf_masks_a_class():
    z = np.array([[2.0, -np.inf, 0.5], [0.0, 1.0, -np.inf]])
    y = np.array([0, 1])
    loss, grad = cross_entropy(z, y)
    # the same loss as if the masked classes did not exist
    z2 = np.array([[2.0, 0.5], [0.0, 1.0]])
    ref, ref_grad = cross_entropy(z2, y)
    loss_tol, grad_tol = cross_entropy_tol(z, y)
    ref_loss_tol, ref_grad_tol = cross_entropy_tol(z2, y)
    assert loss == pytest.approx(ref, abs=loss_tol + ref_loss_tol)
    assert_within(grad[0, [0, 2]], ref_grad[0], grad_tol[0, [0, 2]] + ref_grad_tol[0], "row 0")
    assert_within(grad[1, :2], ref_grad[1], grad_tol[1, :2] + ref_grad_tol[1], "row 1")
    assert grad[0, 1] == 0.0 and grad[1, 2] == 0.0
    assert np.isfinite(grad).all()


# ============================================================================================
# errors
# ============================================================================================


@pytest.mark.parametrize(
    ("targets", "match"),
    [
        (np.array([0, 5]), r"targets must be class ids in \[0, 5\)"),
        (np.array([-1, 1]), r"targets must be class ids"),
        (
            np.array([0, 1, 2]),
            r"targets must be an integer array of shape \(\*B,\) that fits logits \(2, 5\) .*"
            r"got int64 of shape \(3,\)$",
        ),
    ],
)
def test_bad_targets_raise_clear_errors(targets, match):
    with pytest.raises(ValueError, match=match):
        cross_entropy(np.zeros((2, 5)), targets)


def test_the_layer_call_checks_the_arrays_as_cross_entropy():
    # the class's call runs cross_entropy, whose signature declares the two arrays
    with pytest.raises(
        ValueError,
        match=r"^cross_entropy: targets must be an integer array of shape \(\*B,\) that fits "
        r"logits \(2, 5\) .*got int64 of shape \(3,\)$",
    ):
        CrossEntropyLoss()(np.zeros((2, 5)), np.array([0, 1, 2]))
    loss = CrossEntropyLoss()
    assert loss([[0.0, 1.0]], [1]) == cross_entropy(np.array([[0.0, 1.0]]), np.array([1]))[0]


def test_an_empty_list_of_targets_is_an_empty_array_of_ids():
    loss, grad = cross_entropy(np.zeros((0, 5)), [])  # as np.zeros(0, int): nothing to average
    assert loss == 0.0 and grad.shape == (0, 5)


def test_bad_types_and_smoothing_raise():
    with pytest.raises(TypeError, match="targets must be an integer array"):
        cross_entropy(np.zeros((2, 5)), np.array([0.0, 1.0]))
    with pytest.raises(
        TypeError, match=r"logits must be a float array of shape \(\*B, V\) .*got int64 of shape"
    ):
        cross_entropy(np.zeros((2, 5), dtype=int), np.array([0, 1]))
    with pytest.raises(ValueError, match="label_smoothing"):
        cross_entropy(np.zeros((2, 5)), np.array([0, 1]), label_smoothing=1.0)
    with pytest.raises(ValueError, match="NaN or inf"):
        cross_entropy(np.array([[np.nan, 0.0]]), np.array([0]))


@pytest.mark.parametrize("ignore_index", ["pad", True, False, 1.0, np.array([1])])
def test_ignore_index_must_be_an_int_or_none(ignore_index):
    match = r"ignore_index must be an int \(the target id of the rows to skip\) or None, got"
    with pytest.raises(TypeError, match=match):
        cross_entropy(LOGITS, TARGETS, ignore_index=ignore_index)
    with pytest.raises(TypeError, match=match):
        CrossEntropyLoss(ignore_index=ignore_index)


@pytest.mark.parametrize("eps", ["0.1", None, np.array([0.1]), True])
def test_label_smoothing_of_the_wrong_type(eps):
    match = r"label_smoothing must be a real number in \[0, 1\), got"
    with pytest.raises(TypeError, match=match):
        cross_entropy(LOGITS, TARGETS, label_smoothing=eps)
    with pytest.raises(TypeError, match=match):
        CrossEntropyLoss(label_smoothing=eps)


@pytest.mark.parametrize("eps", [np.nan, -0.1, 1.0])
def test_label_smoothing_out_of_range(eps):
    match = rf"label_smoothing must be a real number in \[0, 1\), got {eps} \(float\)"
    with pytest.raises(ValueError, match=match):
        cross_entropy(LOGITS, TARGETS, label_smoothing=eps)
    with pytest.raises(ValueError, match=match):
        CrossEntropyLoss(label_smoothing=eps)


def test_empty_class_axis():
    with pytest.raises(ValueError, match=r"logits has an empty class axis: shape \(2, 0\)"):
        cross_entropy(np.zeros((2, 0)), TARGETS)


def test_nan_logits_say_how_many_and_where():
    logits = np.zeros((2, 3))
    logits[1, 2] = np.nan
    match = r"NaN or inf \(1 NaN and 0 \+inf of 6 values, first at index \(1, 2\)\)"
    with pytest.raises(NotFiniteError, match=match):  # a ValueError
        cross_entropy(logits, TARGETS)


def test_a_loss_that_overflows_is_not_finite_error():
    # finite float32 logits so far apart that their difference overflows: log p = -inf
    logits = np.array([[3e38, -3e38]], dtype=np.float32)
    match = r"the loss is inf: the logits range from -3e\+38 to 3e\+38, too far apart for float32"
    with np.errstate(over="ignore"), pytest.raises(NotFiniteError, match=match):
        cross_entropy(logits, np.array([1]))


def test_minus_inf_at_the_target_is_rejected():
    z = np.array([[0.0, 1.0, 2.0], [0.0, -np.inf, 2.0]])
    with pytest.raises(NotFiniteError, match=r"-inf at the target class on 1 row\(s\) .*\(1,\)"):
        cross_entropy(z, TARGETS)
    # the same row, ignored, is fine
    loss, _ = cross_entropy(z, np.array([0, -1]), ignore_index=-1)
    assert np.isfinite(loss)


def test_row_of_only_minus_inf_is_rejected_unless_ignored():
    z = np.array([[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf]])
    with pytest.raises(ValueError, match="-inf at the target class"):
        cross_entropy(z, TARGETS)
    loss, grad = cross_entropy(z, np.array([0, -1]), ignore_index=-1)
    assert np.isfinite(loss) and np.isfinite(grad).all()


def test_minus_inf_with_label_smoothing_is_rejected():
    z = np.array([[0.0, -np.inf, 2.0], [0.0, 1.0, 2.0]])
    with pytest.raises(ValueError, match=r"label_smoothing = 0.1 .*-inf .*first at index \(0, 1\)"):
        cross_entropy(z, np.array([0, 1]), label_smoothing=0.1)


@pytest.mark.parametrize("g", [np.nan, np.inf, -np.inf])
def test_backward_rejects_non_finite_grad_output(g):
    with pytest.raises(ValueError, match="grad_output must be a finite real number"):
        loss_layer_after_a_forward_pass().backward(g)


@pytest.mark.parametrize("g", [np.ones(3), None, "2", True])
def test_backward_rejects_non_numbers(g):
    with pytest.raises(TypeError, match=r"grad_output must be a finite real number .*got"):
        loss_layer_after_a_forward_pass().backward(g)


# ============================================================================================
# backward
# ============================================================================================


def test_cross_entropy_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(4, 6))
    targets = np.array([2, 0, -1, 5])
    _, grad = cross_entropy(logits, targets, ignore_index=-1, label_smoothing=0.2)
    h = 1e-6
    num = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        lp, lm = logits.copy(), logits.copy()
        lp[idx] += h
        lm[idx] -= h
        fp = cross_entropy(lp, targets, ignore_index=-1, label_smoothing=0.2)[0]
        fm = cross_entropy(lm, targets, ignore_index=-1, label_smoothing=0.2)[0]
        num[idx] = (fp - fm) / (2 * h)
    rel = np.abs(grad - num).max() / np.abs(num).max()
    assert rel <= 1e-6


def test_layer_backward_is_the_gradient_times_grad_output():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, 3, 5))
    targets = rng.integers(0, 5, size=(2, 3))
    fn = CrossEntropyLoss(label_smoothing=0.1)
    fn(logits, targets)
    _, grad = cross_entropy(logits, targets, label_smoothing=0.1)
    np.testing.assert_array_equal(fn.backward(), grad)
    np.testing.assert_array_equal(fn.backward(2.0), 2 * grad)  # doubling is exact


def test_backward_keeps_the_dtype_of_the_logits():
    fn = loss_layer_after_a_forward_pass(np.float32)
    assert fn.backward(np.float64(2.0)).dtype == np.float32
    np.testing.assert_array_equal(fn.backward(np.float64(2.0)), 2 * fn.backward())  # exact


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def _torch_ce(torch, logits, targets, ignore_index, eps):
    z = torch.tensor(logits, requires_grad=True)
    kw = {"label_smoothing": eps}
    if ignore_index is not None:
        kw["ignore_index"] = ignore_index
    loss = torch.nn.functional.cross_entropy(
        z.reshape(-1, logits.shape[-1]), torch.tensor(targets).reshape(-1), **kw
    )
    loss.backward()
    return loss.item(), z.grad.numpy()


@pytest.mark.parametrize("eps", [0.0, 0.1])
@pytest.mark.parametrize("ignore_index", [None, 0, -100])
def test_cross_entropy_matches_torch_value_and_gradient(eps, ignore_index):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 7, 11)) * 3
    targets = rng.integers(1, 11, size=(3, 7))
    if ignore_index is not None:
        targets[:, 5:] = ignore_index  # padded tail
    loss, grad = cross_entropy(logits, targets, ignore_index=ignore_index, label_smoothing=eps)
    ref_loss, ref_grad = _torch_ce(torch, logits, targets, ignore_index, eps)
    print("mine", loss, "torch", ref_loss)
    loss_tol, grad_tol = cross_entropy_tol(
        logits, targets, ignore_index=ignore_index, label_smoothing=eps
    )
    assert abs(loss - ref_loss) <= 2 * loss_tol  # the same steps on both sides
    assert_within(grad, ref_grad, 2 * grad_tol, "gradient - torch")


def test_float32_cross_entropy_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    logits = (rng.normal(size=(6, 9)) * 3).astype(np.float32)
    targets = rng.integers(0, 9, size=6)
    loss, grad = cross_entropy(logits, targets, label_smoothing=0.1)
    ref_loss, ref_grad = _torch_ce(torch, logits, targets, None, 0.1)
    print("mine", loss, "torch", ref_loss)
    assert grad.dtype == np.float32
    loss_tol, grad_tol = cross_entropy_tol(logits, targets, label_smoothing=0.1)
    assert abs(loss - ref_loss) <= 2 * loss_tol
    assert_within(grad, ref_grad, 2 * grad_tol, "gradient - torch")


def test_minus_inf_matches_torch(torch):
    z = np.array([[2.0, -np.inf, 0.5, 1.0], [0.0, 1.0, -np.inf, -np.inf], [5.0, 1.0, 2.0, 3.0]])
    y = np.array([0, 1, -100])
    loss, grad = cross_entropy(z, y, ignore_index=-100)
    tz = torch.tensor(z, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tz, torch.tensor(y), ignore_index=-100)
    tloss.backward()
    loss_tol, grad_tol = cross_entropy_tol(z, y, ignore_index=-100)
    assert loss == pytest.approx(tloss.item(), abs=2 * loss_tol)
    assert_within(grad, tz.grad.numpy(), 2 * grad_tol, "gradient - torch")
