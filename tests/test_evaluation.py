"""evaluation.py: perplexity and bits per byte of a decoder-only model on a text.

Sections: values (the cross-entropy by hand; the loop of transformers' perplexity guide written
out, for a text longer than the window; which tokens each window scores; a model that guesses
uniformly; evaluation mode), errors, reference (Hugging Face's LlamaForCausalLM in float64: its
loss on the same tokens, and the guide's loop run on it).
"""

import math

import numpy as np
import pytest

from transformer_np import (
    LanguageModel,
    LanguageModelConfig,
    LlamaConfig,
    LlamaModel,
    bits_per_byte,
    cross_entropy,
    log_softmax,
    perplexity,
)
from transformer_np.evaluation import windows

from helpers import (
    FUNCTION_ROUNDINGS,
    assert_within,
    hf_llama_config,
    hf_llama_in_input_dtype,
    hf_rope_float64,
    load_llama_model,
    rounding_tol,
    small_language_model,
    small_transformer,
)

F = FUNCTION_ROUNDINGS


def perplexity_rtol(n_scored, vocab_size, mean_nll, n_windows=1):
    """A relative tolerance between two float64 computations of exp(mean NLL) from the same
    logits.

    Each token's -log p = m - x_t + log(sum_j exp(x_j - m)) takes V + 3 roundings for the
    differences and the sum (whose terms are at most 1 and whose value is at least 1, so its
    relative error passes to the log as an absolute error of the same size), and F per exp and
    log: at most gamma(V + 2F + 3) (nll + 1). The sum of the n tokens' values adds gamma(n) times
    their magnitudes (at most n_windows more for a sum by window, one rounding more for its
    weights), the division one: the mean is within gamma(V + 2F + n + n_windows + 5) (L + 1).
    exp turns that absolute error into a relative one, plus its own F roundings. Two such
    computations add their bounds.
    """
    n = vocab_size + 3 * F + n_scored + 2 * n_windows + 5
    return 2 * float(rounding_tol(np.float64, n, mean_nll + 2))


def guide_loop(loss_of, ids, max_length, stride):
    """The loop of transformers' guide "Perplexity of fixed-length models", written out.

    ``loss_of(input_ids, target_ids)`` is what ``model(input_ids, labels=target_ids).loss``
    is in transformers: the mean cross-entropy of the labels shifted left by one, -100
    ignored. The guide weights each window's mean by ``num_valid_tokens - batch_size``: exact
    for the first window, one token short for each later one (whose -100 labels come first,
    so the shift drops an ignored label, not a counted one). The count of the labels that the
    loss averaged is kept beside it: with it the result is the mean over the scored tokens.

    Returns (perplexity with the exact count, perplexity with the guide's count, the number of
    windows).
    """
    seq_len = ids.shape[0]
    nll_sum, n_tokens, guide_sum, guide_tokens, n_windows = 0.0, 0, 0.0, 0, 0
    prev_end_loc = 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc  # may be different from stride on the last loop
        input_ids = ids[begin_loc:end_loc]
        target_ids = input_ids.copy()
        target_ids[:-trg_len] = -100
        neg_log_likelihood = loss_of(input_ids, target_ids)
        num_valid_tokens = int((target_ids != -100).sum())
        guide_sum += neg_log_likelihood * (num_valid_tokens - 1)  # the guide: batch_size = 1
        guide_tokens += num_valid_tokens - 1
        num_loss_tokens = int((target_ids[1:] != -100).sum())  # the labels the loss averaged
        nll_sum += neg_log_likelihood * num_loss_tokens
        n_tokens += num_loss_tokens
        n_windows += 1
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return math.exp(nll_sum / n_tokens), math.exp(guide_sum / guide_tokens), n_windows


def our_loss(model):
    """``loss_of`` for :func:`guide_loop` on our model: the package's cross_entropy."""

    def loss_of(input_ids, target_ids):
        logits = model(input_ids[None])[0]  # (L, V)
        return cross_entropy(logits[:-1], target_ids[1:], ignore_index=-100)[0]

    return loss_of


# ============================================================================================
# values
# ============================================================================================


@pytest.mark.parametrize("shape", ["(N,)", "(1, N)"])
def test_perplexity_is_the_exponential_of_the_cross_entropy(rng, shape):
    model = small_language_model(dtype="float64", max_len=12)
    ids = rng.integers(0, 10, 12)
    logits = model(ids[None])[0]  # (N, V): row t predicts token t + 1
    loss, _ = cross_entropy(logits[:-1], ids[1:])
    by_hand = -log_softmax(logits[:-1])[np.arange(11), ids[1:]].mean()
    assert abs(loss - by_hand) <= rounding_tol(np.float64, 30, loss + 1)
    ours = perplexity(model, ids if shape == "(N,)" else ids[None])
    rtol = perplexity_rtol(11, 10, loss)
    assert_within(ours, math.exp(loss), rtol * math.exp(loss), "perplexity - exp(cross-entropy)")


@pytest.mark.parametrize(("n", "window", "stride"), [(40, 12, 5), (40, 12, 1), (33, 8, 8),
                                                     (40, 12, 11), (13, 12, 6)])  # fmt: skip
def test_sliding_window_is_the_loop_of_the_transformers_guide(rng, n, window, stride):
    model = small_language_model(dtype="float64", max_len=12)
    ids = rng.integers(0, 10, n)
    expected, _, n_windows = guide_loop(our_loss(model), ids, window, stride)
    ours = perplexity(model, ids, window=window, stride=stride)
    rtol = perplexity_rtol(n, 10, math.log(expected), n_windows)
    assert_within(ours, expected, rtol * expected, f"perplexity - guide, {n_windows} windows")


def test_the_guides_own_count_is_one_token_short_in_each_later_window(rng):
    model = small_language_model(dtype="float64", max_len=12)
    ids = rng.integers(0, 10, 40)
    exact, guide, n_windows = guide_loop(our_loss(model), ids, 12, 5)
    assert n_windows > 1
    assert exact != guide  # the guide's weights are not the tokens' counts
    assert abs(exact - guide) < 0.05 * exact  # but the same windows and the same losses


def test_the_default_window_is_the_context_and_the_default_stride_half_of_it(rng):
    model = small_language_model(dtype="float64", max_len=12)
    ids = rng.integers(0, 10, 30)
    assert perplexity(model, ids) == perplexity(model, ids, window=12, stride=6)
    assert perplexity(model, ids[:12]) == perplexity(model, ids[:12], window=12, stride=1)


CASES = [(40, 12, 5), (40, 12, 1), (40, 12, 11), (12, 12, 3), (7, 2, 1), (50, 16, 16)]


@pytest.mark.parametrize(("n", "window", "stride"), CASES)
def test_each_token_is_scored_once_with_the_context_the_window_allows(n, window, stride):
    scored = []
    for begin, end, first in windows(n, window, stride):
        assert end - begin <= window and first > begin
        assert begin == 0 or first - begin >= window - stride  # the context of the first one
        scored += range(first, end)
    disjoint_chunks_skip = {k * window for k in range(1, n)} if stride == window else set()
    assert scored == [t for t in range(1, n) if t not in disjoint_chunks_skip]


def test_a_model_that_guesses_uniformly_has_perplexity_v(rng):
    V = 256
    model = small_language_model(dtype="float64", vocab_size=V, max_len=12)
    for value in model.params.values():
        value[...] = 0.0  # the final LayerNorm's gain 0: every logit is exactly 0
    ids = rng.integers(0, V, 30)
    assert np.all(model(ids[None, :12]) == 0)
    rtol = float(rounding_tol(np.float64, 29 + 2 * F + 2, math.log(V)))
    assert_within(perplexity(model, ids, window=8, stride=3), V, rtol * V, "perplexity - V")
    # 8 bits for each of the 29 bytes that are predicted
    assert_within(bits_per_byte(model, ids, 29), 8.0, rtol * 8, "bits per byte - 8")


def test_bits_per_byte_is_the_summed_loss_in_bits_over_the_bytes(rng):
    model = small_language_model(dtype="float64", vocab_size=256, max_len=12)
    ids = rng.integers(0, 256, 12)
    ppl = perplexity(model, ids)
    expected = 11 * math.log2(ppl) / 40  # 11 tokens scored, a text of 40 bytes
    assert_within(bits_per_byte(model, ids, 40), expected, 1e-13 * expected, "bits per byte")


def test_dropout_is_off_during_the_computation_and_the_mode_comes_back(rng):
    model = small_language_model(dtype="float64", max_len=12, dropout=0.5)
    ids = rng.integers(0, 10, 20)
    model.eval()
    expected = perplexity(model, ids)
    model.train()
    assert perplexity(model, ids) == expected
    assert model.training


def test_llama_model_is_measured_too(rng):
    cfg = LlamaConfig(vocab_size=20, d_model=16, n_layers=1, n_heads=2, n_kv_heads=1, d_ff=32,
                      max_len=8, dtype="float64")  # fmt: skip
    model = LlamaModel(cfg, rng=rng)
    ids = rng.integers(0, 20, 8)
    logits = model(ids[None])[0]
    loss, _ = cross_entropy(logits[:-1], ids[1:])
    rtol = perplexity_rtol(7, 20, loss)
    assert_within(perplexity(model, ids), math.exp(loss), rtol * math.exp(loss), "perplexity")


# ============================================================================================
# errors
# ============================================================================================

IDS = np.array([1, 2, 3, 4, 5, 6])


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"ids": IDS.astype(float)}, TypeError, r"ids must be an array of integer token ids"),
        ({"ids": np.ones((2, 5), int)}, ValueError, r"one sequence .* got shape \(2, 5\)"),
        ({"ids": np.array([3])}, ValueError, r"ids must hold at least 2 tokens.* got 1"),
        ({"ids": np.array([0, 10])}, ValueError, r"in \[0, 10\), got values from 0 to 10"),
        ({"ids": np.array([-1, 2])}, ValueError, r"token ids in \[0, 10\)"),
        ({"window": 1}, ValueError, r"window must be an integer in \[2, max_len = 12\].* got 1"),
        ({"window": 13}, ValueError, r"window must be an integer in \[2, max_len = 12\].* got 13"),
        ({"window": 4.0}, TypeError, r"window must be an integer"),
        ({"stride": 0}, ValueError, r"stride must be a positive integer, got 0"),
        ({"stride": True}, TypeError, r"stride must be a positive integer"),
        ({"window": 4, "stride": 5}, ValueError, r"stride must be at most window = 4.*= 5"),
    ],
)  # fmt: skip
def test_bad_arguments_are_named(changes, error, message):
    model = small_language_model(max_len=12)
    arguments = {"ids": IDS, **changes}
    with pytest.raises(error, match=message):
        perplexity(model, **arguments)


@pytest.mark.parametrize("model", [small_transformer(), "a model", None])
def test_only_decoder_only_models_are_measured(model):
    with pytest.raises(TypeError, match=r"model must be a LanguageModel or a LlamaModel"):
        perplexity(model, IDS)


@pytest.mark.parametrize(("n_bytes", "error"), [(0, ValueError), (-3, ValueError),
                                                (2.5, TypeError), (None, TypeError)])  # fmt: skip
def test_bits_per_byte_needs_a_positive_byte_count(n_bytes, error):
    with pytest.raises(error, match=r"n_bytes must be a positive integer"):
        bits_per_byte(small_language_model(), IDS, n_bytes)


def test_a_context_of_one_token_leaves_no_window():
    model = LanguageModel(LanguageModelConfig(vocab_size=10, d_model=16, n_heads=2, max_len=1))
    with pytest.raises(ValueError, match=r"max_len = 1\) holds a single token"):
        perplexity(model, IDS)


# ============================================================================================
# reference (Hugging Face transformers)
# ============================================================================================

SMALL = dict(vocab_size=61, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=80, max_len=64,
             rope_base=500.0, dtype="float64")  # fmt: skip


def causal_lm_loss_in_input_dtype(logits, labels, vocab_size, ignore_index=-100, **kwargs):
    """transformers' ``ForCausalLMLoss`` without its ``logits.float()``: that upcast, meant for
    float16, turns float64 logits into float32 (a loss within about 1e-7). The same formula:
    labels shifted left by one, -100 ignored, the mean cross-entropy of the others."""
    import torch

    labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, vocab_size), labels.reshape(-1), ignore_index=ignore_index
    )


@pytest.fixture
def llama_pair(torch, rng, monkeypatch):
    """A random LlamaModel in float64 and transformers' LlamaForCausalLM with its weights,
    computing in float64 throughout (attention, RMSNorm, rotary angles and loss)."""
    pytest.importorskip("transformers")
    from transformers import LlamaForCausalLM

    model = LlamaModel(LlamaConfig(**SMALL), rng=rng)
    for name, value in model.params.items():  # gains away from 1, to test that they are used
        if name.endswith("gamma"):
            model.params[name] = 1 + 0.3 * rng.standard_normal(value.shape)
    hf_llama_in_input_dtype(monkeypatch)
    ref = LlamaForCausalLM(hf_llama_config(model.config)).eval().to(torch.float64)
    hf_rope_float64(ref.model.rotary_emb)
    load_llama_model(ref, model)
    ref.loss_function = causal_lm_loss_in_input_dtype
    return model, ref


def test_perplexity_is_the_exponential_of_the_transformers_loss(torch, rng, llama_pair):
    model, ref = llama_pair
    ids = rng.integers(0, 61, 40)
    with torch.no_grad():
        loss = ref(torch.from_numpy(ids[None]), labels=torch.from_numpy(ids[None])).loss.item()
    expected = math.exp(loss)
    assert_within(perplexity(model, ids), expected, 1e-10 * expected, "ours - exp(HF loss)")


@pytest.mark.parametrize(("n", "window", "stride"), [(50, 16, 5), (150, None, None), (50, 9, 9)])
def test_sliding_window_is_the_guides_loop_on_transformers(torch, rng, llama_pair, n, window,
                                                             stride):  # fmt: skip
    model, ref = llama_pair
    ids = rng.integers(0, 61, n)

    def hf_loss(input_ids, target_ids):
        with torch.no_grad():
            out = ref(torch.from_numpy(input_ids[None]), labels=torch.from_numpy(target_ids[None]))
        return out.loss.item()

    window_, stride_ = window or 64, stride or 32  # the defaults: the context, half of it
    expected, _, n_windows = guide_loop(hf_loss, ids, window_, stride_)
    assert n_windows > 1
    ours = perplexity(model, ids, window=window, stride=stride)
    assert_within(ours, expected, 1e-10 * expected, f"ours - guide on HF, {n_windows} windows")
