"""The training step on parts of the batch (``_kernels/data_parallel.py``) equals the plain step.

With two threads :func:`transformer_np.train.train_step` runs its forward and backward passes on
one part of the batch per thread, on replicas of the model that share its parameters, and
weights each part's loss and gradients by its share of the counted target rows. These tests run
the same step on two identical models, one with one thread (the plain steps) and one with two
(the parts), and compare the loss, the gradient norm, the gradients and the updated parameters.

Sections: values (language model, seq2seq with padding and label smoothing, float32, replaced
parameters, several steps), when it applies, errors (a bad token in one part gives the error of
the whole batch).
"""

from __future__ import annotations

import numpy as np
import pytest

import transformer_np.train as train
from transformer_np._kernels import data_parallel as dp
from transformer_np.losses import CrossEntropyLoss
from transformer_np.model import (
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)
from transformer_np.optim import Adam
from transformer_np.train import train_step


def lm(dtype="float64", **kw):
    cfg = {"vocab_size": 11, "d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 2}
    cfg.update({"max_len": 12, "dtype": dtype, **kw})
    return LanguageModel(LanguageModelConfig(**cfg), rng=3)


def seq2seq(dtype="float64"):
    cfg = TransformerConfig(
        src_vocab_size=13,
        tgt_vocab_size=11,
        d_model=16,
        n_heads=2,
        d_ff=32,
        n_encoder_layers=2,
        n_decoder_layers=2,
        max_len=12,
        dtype=dtype,
    )
    return Transformer(cfg, rng=4)


def lm_batch(rows=7, length=10, seed=0):
    x = np.random.default_rng(seed).integers(0, 11, (rows, length + 1))
    return x[:, :-1], x[:, 1:]


def seq2seq_batch(rows=9, length=10, seed=1):
    rng = np.random.default_rng(seed)
    src = rng.integers(3, 13, (rows, length))
    tgt = rng.integers(3, 11, (rows, length + 1))
    for b, n in enumerate(rng.integers(2, length + 1, rows)):  # right padding with id 0
        src[b, n:] = 0
        tgt[b, n + 1 :] = 0
    tgt[:, 0] = 1
    tgt[-1, 1:] = 0  # one row whose targets are all ignored
    return src, tgt[:, :-1], tgt[:, 1:]


@pytest.fixture
def parts_for_small_models(monkeypatch):
    """Small test models pass the size threshold; count the steps that ran in parts."""
    monkeypatch.setattr(dp, "MIN_WORK", 1)
    calls = []
    real = dp.forward_backward_in_parts

    def spy(*args, **kwargs):
        calls.append(len(args[4]))
        return real(*args, **kwargs)

    monkeypatch.setattr(train, "forward_backward_in_parts", spy)
    return calls


def step_with_threads(monkeypatch, threads, make_model, batch, loss_fn, steps=1):
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", str(threads))
    model = make_model()
    model.train()
    opt = Adam(model.parameters(), lr=1e-2)
    out = [train_step(model, batch, opt, loss_fn, clip_norm=0.5) for _ in range(steps)]
    return model, out


def assert_same_step(plain, parts, rtol, atol):
    (m1, out1), (m2, out2) = plain, parts
    for (loss1, norm1), (loss2, norm2) in zip(out1, out2, strict=True):
        np.testing.assert_allclose(loss2, loss1, rtol=rtol)
        np.testing.assert_allclose(norm2, norm1, rtol=rtol)
    g1, g2 = m1.gradients(), m2.gradients()
    assert list(g1) == list(g2)
    scale = max(float(np.abs(g).max()) for g in g1.values())
    for name in g1:  # atol: rounding, relative to the largest gradient
        np.testing.assert_allclose(g2[name], g1[name], rtol=rtol, atol=atol * scale, err_msg=name)
    for name, p in m1.parameters().items():
        if name.endswith("b_k"):
            # The key bias adds q . b_k to a whole row of scores, which the softmax ignores: its
            # gradient is 0 up to rounding, and Adam turns that rounding into a full-size step.
            continue
        np.testing.assert_allclose(m2.parameters()[name], p, rtol=rtol, atol=atol, err_msg=name)


# ============================================================================================
# values
# ============================================================================================


@pytest.mark.parametrize(
    "make_model, batch, loss_fn",
    [
        (lm, lm_batch(), CrossEntropyLoss()),
        (lm, lm_batch(rows=4, seed=5), CrossEntropyLoss(label_smoothing=0.1)),
        (seq2seq, seq2seq_batch(), CrossEntropyLoss(ignore_index=0)),
        (seq2seq, seq2seq_batch(seed=2), CrossEntropyLoss(ignore_index=0, label_smoothing=0.2)),
    ],
    ids=["lm", "lm-smoothing", "seq2seq-padding", "seq2seq-padding-smoothing"],
)
def test_step_in_parts_equals_the_plain_step(
    monkeypatch, parts_for_small_models, make_model, batch, loss_fn
):
    plain = step_with_threads(monkeypatch, 1, make_model, batch, loss_fn, steps=3)
    assert parts_for_small_models == []
    parts = step_with_threads(monkeypatch, 2, make_model, batch, loss_fn, steps=3)
    assert parts_for_small_models == [2, 2, 2]  # every step ran in two parts
    assert_same_step(plain, parts, rtol=1e-9, atol=1e-10)


def test_step_in_parts_equals_the_plain_step_in_float32(monkeypatch, parts_for_small_models):
    batch, loss_fn = lm_batch(rows=16), CrossEntropyLoss()
    plain = step_with_threads(monkeypatch, 1, lambda: lm("float32"), batch, loss_fn)
    parts = step_with_threads(monkeypatch, 2, lambda: lm("float32"), batch, loss_fn)
    assert parts_for_small_models == [2]
    assert_same_step(plain, parts, rtol=1e-4, atol=1e-5)


def test_replicas_follow_a_replaced_parameter(monkeypatch, parts_for_small_models):
    batch, loss_fn = lm_batch(), CrossEntropyLoss()
    model, reference = lm(), lm()
    model.train()
    reference.train()

    def step(m, threads):
        monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", str(threads))
        return train_step(m, batch, Adam(m.parameters()), loss_fn)[0]

    np.testing.assert_allclose(step(model, 2), step(reference, 1), rtol=1e-9)  # makes replicas
    name = next(iter(model.params))
    new = np.random.default_rng(9).standard_normal(model.params[name].shape)
    model.params[name] = new  # a new array, not an update in place
    reference.params[name] = new.copy()
    np.testing.assert_allclose(step(model, 2), step(reference, 1), rtol=1e-9)
    assert parts_for_small_models == [2, 2]
    assert all(r.params[name] is model.params[name] for r in dp.replicas(model, 2))


def test_replicas_share_the_parameters_and_follow_train_and_eval():
    model = lm()
    model.train()
    copies = dp.replicas(model, 2)
    assert dp.replicas(model, 2) == copies  # made once, then reused
    for r in copies:
        for (_, mine, key), (_, theirs, key2) in zip(model.leaves(), r.leaves(), strict=True):
            assert key == key2 and theirs.params[key] is mine.params[key]
    model.eval()
    assert not any(m.training for r in dp.replicas(model, 2) for m in r.modules())
    model.train()
    model.drop.p = 0.5  # a rate changed after the replicas were made
    assert all(r.drop.p == 0.5 and r.training for r in dp.replicas(model, 2))


# ============================================================================================
# when it applies
# ============================================================================================


def test_parts_only_where_the_result_is_the_same_and_it_pays(monkeypatch):
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "2")
    model = lm(d_model=64, n_heads=4, max_len=32)
    model.train()
    ids, nxt = lm_batch(rows=32, length=32)
    ids, nxt = ids % 11, nxt % 11
    ce = CrossEntropyLoss()
    assert dp.batch_parts(model, [ids], nxt, ce) == [slice(0, 16), slice(16, 32)]
    # below the size at which one pass is faster
    assert dp.batch_parts(model, [ids[:, :8]], nxt[:, :8], ce) is None
    assert dp.batch_parts(model, [ids[:3]], nxt[:3], ce) is None
    # another loss: its mean over the parts is not known
    assert dp.batch_parts(model, [ids], nxt, type("MyLoss", (CrossEntropyLoss,), {})()) is None
    # dropout on: the parts would draw their masks from copies of one generator
    with_dropout = lm(d_model=64, n_heads=4, max_len=32, dropout=0.1)
    with_dropout.train()
    assert dp.batch_parts(with_dropout, [ids], nxt, ce) is None
    with_dropout.eval()
    assert dp.batch_parts(with_dropout, [ids], nxt, ce) is not None
    # one thread
    monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", "1")
    assert dp.batch_parts(model, [ids], nxt, ce) is None


# ============================================================================================
# errors
# ============================================================================================


def test_a_bad_token_in_one_part_gives_the_error_of_the_whole_batch(
    monkeypatch, parts_for_small_models
):
    ids, nxt = lm_batch()
    ids = ids.copy()
    ids[5, 3] = 99  # out of the vocabulary, in the second part
    messages = []
    for threads in (1, 2):
        monkeypatch.setenv("TRANSFORMER_NP_NUM_THREADS", str(threads))
        model = lm()
        model.train()
        with pytest.raises(ValueError) as info:
            train_step(model, (ids, nxt), Adam(model.parameters()), CrossEntropyLoss())
        messages.append(str(info.value))
    assert parts_for_small_models == [2]  # tried in parts, then reported by the whole batch
    assert messages[0] == messages[1] and "99" in messages[0]
