"""Bad input to decoding and losses: a clear ValueError or TypeError that names the argument,
never a silent wrong token, a NaN gradient or an obscure NumPy traceback."""

import numpy as np
import pytest

from transformer_np import (
    CrossEntropyLoss,
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
    cross_entropy,
    generate,
    sample_next,
    translate,
)
from transformer_np.losses import log_softmax

PROMPT = np.array([[1, 2], [3, 4]])
SRC = np.array([[3, 4, 5]])


def lm(max_len=6, dropout=0.1):
    cfg = LanguageModelConfig(
        vocab_size=10, d_model=8, n_heads=2, max_len=max_len, dropout=dropout, dtype="float64"
    )
    return LanguageModel(cfg, rng=0)


def seq2seq(dropout=0.1):
    cfg = TransformerConfig(
        src_vocab_size=8, tgt_vocab_size=8, d_model=8, n_heads=2, dropout=dropout, dtype="float64"
    )
    return Transformer(cfg, rng=0)


def loss_after_forward(dtype=np.float64):
    fn = CrossEntropyLoss()
    fn(np.zeros((2, 3), dtype=dtype), np.array([0, 1]))
    return fn


# --------------------------------------------------------------------------------------------
# sample_next: non-finite logits and tiny temperatures


@pytest.mark.parametrize("tau", [1e-310, 1e-320, 5e-324, 1e-200])
def test_tiny_temperature_is_greedy(tau):
    logits = np.random.default_rng(0).standard_normal((50, 7))
    greedy = sample_next(logits, temperature=0)
    np.testing.assert_array_equal(sample_next(logits, temperature=tau, rng=0), greedy)
    np.testing.assert_array_equal(sample_next(logits, temperature=tau, top_k=3, rng=0), greedy)
    np.testing.assert_array_equal(
        sample_next(np.array([[1.0, 3.0, 2.0]]), temperature=tau, rng=0), [1]
    )


@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_at_tiny_temperature_is_greedy(use_cache):
    model = lm()
    greedy = generate(model, PROMPT, 8, use_cache=use_cache)
    tiny = generate(model, PROMPT, 8, temperature=1e-320, rng=0, use_cache=use_cache)
    np.testing.assert_array_equal(tiny, greedy)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize(
    ("bad", "match"),
    [(np.nan, r"logits contains NaN \(1 of 3 values, first at index \(0, 1\)\)"), (np.inf, "inf")],
)
def test_nan_or_plus_inf_logits_are_rejected(temperature, bad, match):
    logits = np.array([[0.0, bad, 1.0]])
    with pytest.raises(ValueError, match=match):
        sample_next(logits, temperature=temperature, rng=0)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_row_of_only_minus_inf_is_rejected(temperature):
    logits = np.array([[0.0, 1.0, 2.0], [-np.inf, -np.inf, -np.inf]])
    with pytest.raises(ValueError, match=r"every token is -inf.*1 of 2 rows, first at row 1"):
        sample_next(logits, temperature=temperature, rng=0)


@pytest.mark.parametrize("temperature", [1e-310, 0.5, 1.0, 1e300])
def test_minus_inf_masks_a_token_without_error(temperature):
    logits = np.tile([-np.inf, 0.0, -np.inf, 0.5, -np.inf], (4000, 1))
    out = sample_next(logits, temperature=temperature, rng=1)
    assert set(np.unique(out)) <= {1, 3}
    out = sample_next(logits, temperature=temperature, top_k=1, rng=1)
    np.testing.assert_array_equal(out, 3)


@pytest.mark.parametrize("temperature", [0, 1.0])
def test_empty_vocabulary_axis(temperature):
    with pytest.raises(ValueError, match=r"logits has an empty vocabulary axis: shape \(2, 0\)"):
        sample_next(np.zeros((2, 0)), temperature=temperature)


def test_integer_logits_name_the_dtype():
    with pytest.raises(TypeError, match="logits must be a floating-point array.*got dtype int"):
        sample_next(np.array([[1, 2]]))


def test_logits_of_the_wrong_rank():
    with pytest.raises(ValueError, match=r"logits must be a 2-D array of shape \(B, V\)"):
        sample_next(np.zeros(3))


@pytest.mark.parametrize("temperature", ["1", True, None, np.array([1.0])])
def test_temperature_of_the_wrong_type(temperature):
    with pytest.raises(TypeError, match="temperature must be a number >= 0"):
        sample_next(np.zeros((1, 3)), temperature=temperature)


@pytest.mark.parametrize("temperature", [-1.0, np.nan, np.inf])
def test_temperature_out_of_range(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        sample_next(np.zeros((1, 3)), temperature=temperature)


@pytest.mark.parametrize(
    ("top_k", "error", "match"),
    [
        (0, ValueError, r"top_k must be in \[1, vocab_size = 3\], got 0"),
        (4, ValueError, r"top_k must be in \[1, vocab_size = 3\], got 4"),
        (1.5, TypeError, r"top_k must be a positive integer or None, got 1.5 \(float\)"),
        (True, TypeError, r"top_k must be a positive integer or None, got True \(bool\)"),
        ("2", TypeError, "top_k must be a positive integer or None"),
    ],
)
def test_bad_top_k(top_k, error, match):
    with pytest.raises(error, match=match):
        sample_next(np.zeros((1, 3)), top_k=top_k)


def test_numpy_scalars_are_accepted():
    logits = np.array([[1.0, 3.0, 2.0]], dtype=np.float32)
    out = sample_next(logits, temperature=np.float32(0.5), top_k=np.int64(1), rng=0)
    assert out.tolist() == [1]


def test_caller_logits_are_not_modified():
    logits = np.array([[1.0, 3.0, -np.inf, 2.0]])
    before = logits.copy()
    sample_next(logits, temperature=0.3, top_k=2, rng=0)
    np.testing.assert_array_equal(logits, before)


# --------------------------------------------------------------------------------------------
# generate and translate


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize("use_cache", [True, False])
def test_generate_restores_the_callers_mode(mode, use_cache):
    model = lm()
    model.train(mode)
    generate(model, PROMPT, 3, use_cache=use_cache)
    assert model.training is mode
    assert all(d.training is mode for d in model._dropouts)


@pytest.mark.parametrize("mode", [True, False])
@pytest.mark.parametrize("use_cache", [True, False])
def test_translate_restores_the_callers_mode(mode, use_cache):
    model = seq2seq()
    model.train(mode)
    translate(model, SRC, 3, bos_id=1, eos_id=2, use_cache=use_cache)
    assert model.training is mode
    assert all(d.training is mode for d in model._dropouts)


def test_mode_is_restored_when_translate_fails_on_the_source():
    model = seq2seq().train()
    with pytest.raises(ValueError, match="src"):
        translate(model, np.array([[3, 99]]), 3, bos_id=1)
    assert model.training is True


def test_generate_with_max_len_1_names_max_len():
    model = lm(max_len=1)
    with pytest.raises(ValueError, match=r"max_len = 1 leaves no room .*max_len >= 2"):
        generate(model, np.array([[1]]), 3)


def test_generate_with_max_len_1_works_while_the_window_need_not_slide():
    model = lm(max_len=1)
    for use_cache in (True, False):
        out = generate(model, np.array([[1], [2]]), 1, use_cache=use_cache)
        assert out.shape == (2, 2)


@pytest.mark.parametrize("use_cache", ["no", 1, None])
def test_use_cache_must_be_a_bool(use_cache):
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        generate(lm(), PROMPT, 2, use_cache=use_cache)
    with pytest.raises(TypeError, match="use_cache must be True or False"):
        translate(seq2seq(), SRC, 2, bos_id=1, use_cache=use_cache)


@pytest.mark.parametrize(
    ("name", "value"),
    [("bos_id", v) for v in (None, True, 1.0, "1")] + [("eos_id", v) for v in (True, 1.0, "1")],
)
def test_token_ids_must_be_ints(name, value):
    kw = {"bos_id": 1, name: value}
    with pytest.raises(TypeError, match=rf"{name} must be a token id \(an integer in \[0, 8\)\)"):
        translate(seq2seq(), SRC, 3, **kw)


def test_token_ids_out_of_range_and_numpy_ints():
    with pytest.raises(ValueError, match=r"eos_id must be a token id in \[0, 8\), got -1"):
        translate(seq2seq(), SRC, 3, bos_id=1, eos_id=-1)
    out = translate(seq2seq(), SRC, 3, bos_id=np.int64(1), eos_id=np.int32(2))
    assert out.shape[0] == 1


@pytest.mark.parametrize(("value", "error"), [("3", TypeError), (2.0, TypeError), (0, ValueError)])
def test_max_new_tokens(value, error):
    with pytest.raises(error, match="max_new_tokens must be a positive integer"):
        generate(lm(), PROMPT, value)


@pytest.mark.parametrize(("value", "error"), [(1.5, TypeError), (True, TypeError), (6, ValueError)])
def test_keep(value, error):
    with pytest.raises(error, match=r"keep must be an integer in \[1, max_len = 6\)"):
        generate(lm(), PROMPT, 8, keep=value)


def test_generate_rejects_temperature_and_top_k_like_sample_next():
    with pytest.raises(TypeError, match="temperature must be a number"):
        generate(lm(), PROMPT, 2, temperature="0.5")
    with pytest.raises(TypeError, match="top_k must be a positive integer"):
        translate(seq2seq(), SRC, 2, bos_id=1, temperature=1.0, top_k=2.0)


# --------------------------------------------------------------------------------------------
# log_softmax


def test_log_softmax_of_an_empty_axis():
    with pytest.raises(ValueError, match=r"x has no values along axis -1 \(shape \(0,\)\)"):
        log_softmax(np.zeros(0))
    with pytest.raises(ValueError, match=r"x has no values along axis 0 \(shape \(0, 3\)\)"):
        log_softmax(np.zeros((0, 3)), axis=0)


def test_log_softmax_bad_values_and_types():
    with pytest.raises(ValueError, match=r"x contains NaN \(1 of 3 values"):
        log_softmax(np.array([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match=r"x contains \+inf"):
        log_softmax(np.array([0.0, np.inf, 1.0]))
    with pytest.raises(TypeError, match="x must be a floating-point array.*got dtype int"):
        log_softmax(np.array([1, 2]))
    with pytest.raises(ValueError, match="axis 2 is out of range for an array of rank 1"):
        log_softmax(np.zeros(3), axis=2)
    with pytest.raises(TypeError, match="axis must be an int"):
        log_softmax(np.zeros(3), axis=None)


def test_log_softmax_with_minus_inf():
    out = log_softmax(np.array([[0.0, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf]]))
    np.testing.assert_allclose(out[0], [np.log(0.5), -np.inf, np.log(0.5)])
    np.testing.assert_array_equal(out[1], -np.inf)  # not NaN


# --------------------------------------------------------------------------------------------
# cross_entropy and CrossEntropyLoss


LOGITS = np.zeros((2, 3))
TARGETS = np.array([0, 1])


@pytest.mark.parametrize("ignore_index", ["pad", True, False, 1.0, np.array([1])])
def test_ignore_index_must_be_an_int_or_none(ignore_index):
    match = r"ignore_index must be an int \(the target id of the rows to skip\) or None, got"
    with pytest.raises(TypeError, match=match):
        cross_entropy(LOGITS, TARGETS, ignore_index=ignore_index)
    with pytest.raises(TypeError, match=match):
        CrossEntropyLoss(ignore_index=ignore_index)


def test_numpy_int_ignore_index_works():
    loss, grad = cross_entropy(LOGITS, TARGETS, ignore_index=np.int64(1))
    assert loss == pytest.approx(np.log(3))
    np.testing.assert_array_equal(grad[1], 0)


@pytest.mark.parametrize("eps", ["0.1", None, np.array([0.1]), True])
def test_label_smoothing_of_the_wrong_type(eps):
    match = r"label_smoothing must be a real number in \[0, 1\), got"
    with pytest.raises(TypeError, match=match):
        cross_entropy(LOGITS, TARGETS, label_smoothing=eps)
    with pytest.raises(TypeError, match=match):
        CrossEntropyLoss(label_smoothing=eps)


@pytest.mark.parametrize("eps", [np.nan, -0.1, 1.0])
def test_label_smoothing_out_of_range(eps):
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        cross_entropy(LOGITS, TARGETS, label_smoothing=eps)
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        CrossEntropyLoss(label_smoothing=eps)


def test_empty_class_axis():
    with pytest.raises(ValueError, match=r"logits has an empty class axis: shape \(2, 0\)"):
        cross_entropy(np.zeros((2, 0)), TARGETS)


def test_nan_logits_say_how_many_and_where():
    logits = np.zeros((2, 3))
    logits[1, 2] = np.nan
    match = r"NaN or inf \(1 NaN and 0 \+inf of 6 values, first at index \(1, 2\)\)"
    with pytest.raises(ValueError, match=match):
        cross_entropy(logits, TARGETS)


def test_minus_inf_masks_a_class():
    z = np.array([[2.0, -np.inf, 0.5], [0.0, 1.0, -np.inf]])
    y = np.array([0, 1])
    loss, grad = cross_entropy(z, y)
    # the same loss as if the masked classes did not exist
    ref, ref_grad = cross_entropy(np.array([[2.0, 0.5], [0.0, 1.0]]), y)
    assert loss == pytest.approx(ref)
    np.testing.assert_allclose(grad[0, [0, 2]], ref_grad[0])
    np.testing.assert_allclose(grad[1, :2], ref_grad[1])
    assert grad[0, 1] == 0.0 and grad[1, 2] == 0.0
    assert np.isfinite(grad).all()


def test_minus_inf_matches_torch():
    torch = pytest.importorskip("torch")
    z = np.array([[2.0, -np.inf, 0.5, 1.0], [0.0, 1.0, -np.inf, -np.inf], [5.0, 1.0, 2.0, 3.0]])
    y = np.array([0, 1, -100])
    loss, grad = cross_entropy(z, y, ignore_index=-100)
    tz = torch.tensor(z, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tz, torch.tensor(y), ignore_index=-100)
    tloss.backward()
    assert loss == pytest.approx(tloss.item())
    np.testing.assert_allclose(grad, tz.grad.numpy(), atol=1e-12)


def test_minus_inf_at_the_target_is_rejected():
    z = np.array([[0.0, 1.0, 2.0], [0.0, -np.inf, 2.0]])
    with pytest.raises(ValueError, match=r"-inf at the target class on 1 row\(s\) .*\(1,\)"):
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
        loss_after_forward().backward(g)


@pytest.mark.parametrize("g", [np.ones(3), None, "2", True])
def test_backward_rejects_non_numbers(g):
    with pytest.raises(TypeError, match=r"grad_output must be a finite real number .*got"):
        loss_after_forward().backward(g)


def test_backward_keeps_the_dtype_of_the_logits():
    fn = loss_after_forward(np.float32)
    assert fn.backward(np.float64(2.0)).dtype == np.float32
    np.testing.assert_allclose(fn.backward(np.float64(2.0)), 2 * fn.backward())
