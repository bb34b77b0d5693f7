"""model.py: the encoder-decoder Transformer and the decoder-only LanguageModel.

Sections: values (shapes, dtypes, causality, padding, positions, dropout, tied embeddings, the
cached forward pass), errors (bad token ids, parameters, gradients and memory name the
argument; a failed load leaves the model unchanged), backward (whole models with the loss,
against finite differences), reference (loss and every gradient against the same models built
from torch.nn parts). The configurations are tested in test_config.py, generation in
test_decoding.py.
"""

import math

import numpy as np
import pytest

from transformer_np import (
    Dropout,
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)
from transformer_np.losses import cross_entropy

from helpers import (
    assert_parameters_unchanged,
    assert_within,
    gradcheck_model,
    load_decoder_layer,
    load_encoder_layer,
    load_layer_norm,
    parameter_snapshot,
    randomise_biases,
    small_language_model,
    small_transformer,
    to_torch64,
    torch_decoder_layer_grads,
    torch_encoder_layer_grads,
)
from rounding import (
    cross_entropy_rounded,
    exact,
    language_model_rounded,
    tied_output_rounded,
    transformer_rounded,
)

# ============================================================================================
# values
# ============================================================================================


def test_transformer_shapes_dtype_and_parameter_names():
    model = small_transformer()
    src = np.array([[3, 4, 5, 0], [6, 7, 8, 9]])
    tgt = np.array([[1, 5, 4], [1, 9, 8]])
    logits = model(src, tgt)
    assert logits.shape == (2, 3, 12) and logits.dtype == np.float32
    names = set(model.params)
    assert {"encoder.0.attn.W_q", "decoder.1.cross_attn.W_k", "out.W", "tgt_embed.W"} <= names
    assert model.attention_weights[0].shape == (2, 4, 3, 4)


def test_float64_model_computes_in_float64():
    model = small_language_model(dtype="float64")
    assert model(np.array([[1, 2, 3]])).dtype == np.float64


def test_language_model_is_causal():
    model = small_language_model()
    x = np.array([[1, 2, 3, 4, 5, 6]])
    y = x.copy()
    y[0, 4:] = [9, 9]
    a, b = model(x), model(y)
    np.testing.assert_array_equal(a[:, :4], b[:, :4])
    assert not np.allclose(a[:, 4:], b[:, 4:])


def test_decoder_cannot_see_future_target_tokens():
    model = small_transformer()
    src = np.array([[3, 4, 5, 6]])
    tgt_a, tgt_b = np.array([[1, 5, 6, 7]]), np.array([[1, 5, 9, 10]])
    a, b = model(src, tgt_a), model(src, tgt_b)
    tol = sum(transformer_rounded(model, src, t)[0].tol(np.float32) for t in (tgt_a, tgt_b))
    assert_within(a[:, :2], b[:, :2], tol[:, :2], "the first two positions")


def test_source_padding_changes_nothing():
    """Extra padding at the end of the source is masked out everywhere."""
    model = small_transformer()
    tgt = np.array([[1, 5, 6]])
    src_a, src_b = np.array([[3, 4, 5]]), np.array([[3, 4, 5, 0, 0, 0]])
    a, b = model(src_a, tgt), model(src_b, tgt)
    tol = sum(transformer_rounded(model, s, tgt)[0].tol(np.float32) for s in (src_a, src_b))
    assert_within(a, b, tol, "with and without padding")


def test_positional_encoding_makes_order_matter():
    model = small_language_model()
    a = model(np.array([[1, 2, 3]]))[0, -1]
    b = model(np.array([[2, 1, 3]]))[0, -1]
    assert not np.allclose(a, b, atol=1e-4)


def test_dropout_only_in_training_mode():
    model = small_language_model(dropout=0.3)
    x = np.array([[1, 2, 3, 4]])
    model.eval()
    a, b = model(x), model(x)
    np.testing.assert_array_equal(a, b)
    model.train()
    c = model(x)
    assert not np.allclose(a, c)
    reference = small_language_model(dropout=0.0)  # same seed, same weights
    tol = language_model_rounded(reference, x)[0].tol(np.float32, sides=2)
    assert_within(a, reference(x), tol, "evaluation mode vs no dropout")


def test_tied_embeddings_share_the_matrix():
    model = small_language_model(tie_embeddings=True)
    assert "out.W" not in model.params
    x = np.array([[1, 2, 3]])
    logits = model(x)
    h = model.out.cache["h"].reshape(1, 3, 16)
    W, b = model.params["embed.W"], model.params["out.b"]
    tol = tied_output_rounded(model.embed, b, exact(h))[0].tol(np.float32, sides=2)
    assert_within(logits, h @ W.T + b, tol, "tied output")
    untied = small_language_model(tie_embeddings=False)
    assert "out.W" in untied.params
    assert untied.num_parameters() == model.num_parameters() + 16 * 10


def test_cached_step_logits_equal_full_forward_logits():
    model = small_language_model(
        vocab_size=17, n_heads=4, n_layers=2, max_len=32, norm_first=True, dtype="float64", rng=3
    )
    x = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])
    full = model(x)
    cache = model.new_cache(8)
    prefill = model(x[:, :3], kv_cache=cache)  # the prompt in one chunk, checked
    steps = [model.forward(x[:, t : t + 1], kv_cache=cache) for t in range(3, 8)]  # one by one
    tol = language_model_rounded(model, x)[0].tol(np.float64, sides=2)
    assert_within(np.concatenate([prefill] + steps, axis=1), full, tol, "cached vs full")
    with pytest.raises(
        ValueError, match=r"kv_cache holds at most max_len = 8 positions, got 8 cached \+ 1 new"
    ):
        model(x[:, :1], kv_cache=cache)  # the cache is full: a call says so, by name


# ============================================================================================
# errors
# ============================================================================================


def test_model_rejects_a_config_of_the_wrong_kind():
    with pytest.raises(TypeError, match="config must be a TransformerConfig"):
        Transformer(LanguageModelConfig(vocab_size=5, d_model=8, n_heads=2))


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        (np.array([[1, -1, 2]]), ValueError, r"token ids in \[0, 10\), got values from -1"),
        (np.array([[1, 10, 2]]), ValueError, r"token ids in \[0, 10\).*to 10"),
        (np.arange(13)[None] % 10, ValueError, "longer than the positional table"),
        (np.array([1, 2, 3]), ValueError, r"must have shape \(B, T\)"),
        (np.array([[1.0, 2.0]]), TypeError, "integer token ids"),
        (np.zeros((1, 0), dtype=int), ValueError, "at least one"),
    ],
)
def test_language_model_bad_ids_raise_clear_errors(ids, error, match):
    with pytest.raises(error, match=match):
        small_language_model()(ids)


def test_transformer_mismatched_batches_raise():
    model = small_transformer()
    with pytest.raises(ValueError, match="same batch size"):
        model(np.array([[3, 4], [5, 6]]), np.array([[1, 2, 3]]))


def test_transformer_ids_out_of_range_name_the_argument():
    model = small_transformer()
    with pytest.raises(ValueError, match=r"tgt must hold token ids in \[0, 12\)"):
        model(np.array([[3, 4]]), np.array([[1, 12]]))
    with pytest.raises(ValueError, match=r"src must hold token ids in \[0, 11\)"):
        model(np.array([[3, 11]]), np.array([[1, 2]]))


def test_transformer_decode_takes_a_list_memory_and_names_it():
    cfg = TransformerConfig(src_vocab_size=9, tgt_vocab_size=10, d_model=8, n_heads=2, d_ff=16)
    tm = Transformer(cfg, rng=0)
    memory = tm.encode(np.array([[1, 2, 3]]))
    assert tm.decode(np.array([[1, 2]]), memory.tolist()).shape == (1, 2, 10)
    with pytest.raises(ValueError, match="memory must have the batch size"):
        tm.decode(np.array([[1, 2], [1, 2]]), memory)


def test_load_parameters_checks_names_and_shapes():
    model = small_language_model()
    params = {k: v.copy() for k, v in model.params.items()}
    params["embed.W"] = np.zeros((10, 8))
    with pytest.raises(ValueError, match="'embed.W' must have shape"):
        model.load_parameters(params)
    del params["embed.W"]
    with pytest.raises(ValueError, match="missing"):
        model.load_parameters(params)


@pytest.mark.parametrize(
    "bad, error, match",
    [
        (lambda v: np.full(v.shape, "x"), TypeError, "an array of real numbers, got dtype <U1"),
        (lambda v: np.full(v.shape, np.nan), ValueError, "contains NaN or inf"),
        (lambda v: np.zeros(v.shape + (1,)), ValueError, "must have shape"),
    ],
)
def test_load_parameters_checks_everything_before_copying(bad, error, match):
    lm = small_language_model(d_model=8, max_len=6, dtype="float64")
    before = parameter_snapshot(lm)
    params = {k: np.zeros_like(v) for k, v in before.items()}
    last = list(params)[-1]  # the others would be copied first by a key-by-key loop
    params[last] = bad(params[last])
    with pytest.raises(error, match=f"parameter '{last}' .*{match}"):
        lm.load_parameters(params)
    assert_parameters_unchanged(lm, before)


def test_load_parameters_wants_a_mapping():
    lm = small_language_model(d_model=8, max_len=6, dtype="float64")
    with pytest.raises(TypeError, match="params must be a mapping of names to arrays, got list"):
        lm.load_parameters([1, 2])


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize(
    "grad, error, match",
    [
        (np.zeros((1, 10, 3)), ValueError, r"grad_logits must have the shape .*\(1, 3, 10\)"),
        (np.zeros(30), ValueError, r"grad_logits must have the shape .*got \(30,\)"),
        (np.full((1, 3, 10), np.nan), ValueError, "grad_logits contains NaN"),
        (np.zeros((1, 3, 10), int), TypeError, "grad_logits must be a floating-point array"),
    ],
)
def test_language_model_backward_checks_grad_logits(tie, grad, error, match):
    lm = small_language_model(d_model=8, max_len=6, dtype="float64", tie_embeddings=tie)
    lm(np.array([[1, 2, 3]]))
    with pytest.raises(error, match=match):
        lm.backward(grad)


# ============================================================================================
# backward
# ============================================================================================


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
    for name in model.params:  # non-zero biases everywhere
        if name.endswith(("b_q", "b_v", "b_o", ".b")):
            model.params[name][...] = 0.2 * rng.standard_normal(model.params[name].shape)
    src = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 3, 2]])  # 0 = padding
    tgt_in = np.array([[1, 5, 4, 3], [1, 9, 8, 0]])
    tgt_out = np.array([[5, 4, 3, 2], [9, 8, 2, 0]])
    dropouts = [m for m in model.modules() if isinstance(m, Dropout)]

    def loss_fn(backward):
        for d in dropouts:  # identical dropout masks at every evaluation
            d.rng = np.random.default_rng(3)
        logits = model(src, tgt_in)
        loss, g = cross_entropy(logits, tgt_out, ignore_index=0, label_smoothing=0.1)
        if backward:
            model.backward(g)
        return loss

    gradcheck_model(model, loss_fn, rng)


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

    gradcheck_model(model, loss_fn, rng)


def test_gradients_are_overwritten_not_accumulated(rng):
    cfg = LanguageModelConfig(vocab_size=7, d_model=8, n_heads=2, dtype="float64")
    model = LanguageModel(cfg, rng=rng)
    x = rng.integers(0, 7, (2, 5))
    g = rng.standard_normal((2, 5, 7))
    model(x)
    model.backward(g)
    first = {k: v.copy() for k, v in model.grads.items()}
    model(x)
    model.backward(g)
    for k, v in model.grads.items():
        np.testing.assert_array_equal(v, first[k])


# ============================================================================================
# reference (PyTorch)
# ============================================================================================


def torch_seq2seq(torch, cfg: TransformerConfig, pe):
    """The same architecture as transformer_np.model.Transformer, from torch.nn parts
    (float64, no dropout)."""

    class TorchSeq2Seq(torch.nn.Module):
        def __init__(self):
            super().__init__()
            D = cfg.d_model
            kw = {"dropout": 0.0, "batch_first": True, "norm_first": cfg.norm_first}
            kw.update(activation=cfg.activation, dtype=torch.float64)
            f64 = {"dtype": torch.float64}
            self.src_embed = torch.nn.Embedding(cfg.src_vocab_size, D, **f64)
            self.tgt_embed = torch.nn.Embedding(cfg.tgt_vocab_size, D, **f64)
            self.enc = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(D, cfg.n_heads, cfg.d_ff, **kw)
                for _ in range(cfg.n_encoder_layers)
            )
            self.dec = torch.nn.ModuleList(
                torch.nn.TransformerDecoderLayer(D, cfg.n_heads, cfg.d_ff, **kw)
                for _ in range(cfg.n_decoder_layers)
            )
            self.enc_norm = torch.nn.LayerNorm(D, **f64) if cfg.norm_first else None
            self.dec_norm = torch.nn.LayerNorm(D, **f64) if cfg.norm_first else None
            self.out = torch.nn.Linear(D, cfg.tgt_vocab_size, **f64)
            self.pe = to_torch64(pe)

        def forward(self, src, tgt):
            D, pad = cfg.d_model, cfg.pad_id
            S, Tt = src.shape[1], tgt.shape[1]
            src_kpm, tgt_kpm = src == pad, tgt == pad
            x = self.src_embed(src) * math.sqrt(D) + self.pe[:S]
            for layer in self.enc:
                x = layer(x, src_key_padding_mask=src_kpm)
            if self.enc_norm is not None:
                x = self.enc_norm(x)
            y = self.tgt_embed(tgt) * math.sqrt(D) + self.pe[:Tt]
            causal = torch.triu(torch.ones(Tt, Tt, dtype=torch.bool), 1)
            for layer in self.dec:
                y = layer(
                    y,
                    x,
                    tgt_mask=causal,
                    tgt_key_padding_mask=tgt_kpm,
                    memory_key_padding_mask=src_kpm,
                )
            if self.dec_norm is not None:
                y = self.dec_norm(y)
            if cfg.tie_embeddings:
                return y @ self.tgt_embed.weight.T + self.out.bias
            return self.out(y)

    return TorchSeq2Seq()


@pytest.mark.parametrize(("norm_first", "tie"), [(False, False), (True, True)])
def test_transformer_loss_and_gradients_match_torch(torch, rng, norm_first, tie):
    cfg = TransformerConfig(
        src_vocab_size=9,
        tgt_vocab_size=10,
        d_model=8,
        n_heads=2,
        d_ff=16,
        norm_first=norm_first,
        tie_embeddings=tie,
        activation="gelu",
        dtype="float64",
    )
    model = Transformer(cfg, rng=rng)
    randomise_biases(model.params, rng)
    tm = torch_seq2seq(torch, cfg, model.pe)
    P = model.params
    with torch.no_grad():
        tm.src_embed.weight.copy_(to_torch64(P["src_embed.W"]))
        tm.tgt_embed.weight.copy_(to_torch64(P["tgt_embed.W"]))
        for i, tl in enumerate(tm.enc):
            load_encoder_layer(tl, model.encoder.layers[i])
        for i, tl in enumerate(tm.dec):
            load_decoder_layer(tl, model.decoder.layers[i])
        if norm_first:
            load_layer_norm(tm.enc_norm, model.encoder.norm)
            load_layer_norm(tm.dec_norm, model.decoder.norm)
        tm.out.bias.copy_(to_torch64(P["out.b"]))
        if not tie:
            tm.out.weight.copy_(to_torch64(P["out.W"].T))
    src = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 3, 2]])
    tgt_in = np.array([[1, 5, 4, 3], [1, 9, 8, 0]])
    tgt_out = np.array([[5, 4, 3, 2], [9, 8, 2, 0]])

    logits = model(src, tgt_in)
    loss, g = cross_entropy(logits, tgt_out, ignore_index=0, label_smoothing=0.1)
    model.backward(g)
    tlogits = tm(torch.tensor(src), torch.tensor(tgt_in))
    tloss = torch.nn.functional.cross_entropy(
        tlogits.reshape(-1, 10),
        torch.tensor(tgt_out).reshape(-1),
        ignore_index=0,
        label_smoothing=0.1,
    )
    tloss.backward()
    logits_r, back = transformer_rounded(model, src, tgt_in)
    loss_r, g_r = cross_entropy_rounded(logits_r, tgt_out, ignore_index=0, label_smoothing=0.1)
    tols = {name: t.tol(np.float64, sides=2) for name, t in back(g_r).items()}
    assert_within(logits, tlogits.detach(), logits_r.tol(np.float64, sides=2), "logits")
    assert abs(loss - tloss.item()) <= loss_r.tol(np.float64, sides=2)
    grads = model.grads

    def assert_gradient_matches_torch(name, torch_grad, what=None):
        assert_within(grads[name], torch_grad, tols[name], what or name)

    assert_gradient_matches_torch("src_embed.W", tm.src_embed.weight.grad)
    assert_gradient_matches_torch(
        "tgt_embed.W", tm.tgt_embed.weight.grad, "tgt_embed.W (tied: both uses)"
    )
    assert_gradient_matches_torch("out.b", tm.out.bias.grad)
    for i, tl in enumerate(tm.enc):
        for k, v in torch_encoder_layer_grads(tl).items():
            assert_gradient_matches_torch(f"encoder.{i}.{k}", v)
    for i, tl in enumerate(tm.dec):
        for k, v in torch_decoder_layer_grads(tl).items():
            assert_gradient_matches_torch(f"decoder.{i}.{k}", v)


def test_language_model_loss_and_gradients_match_torch(torch, rng):
    cfg = LanguageModelConfig(
        vocab_size=12, d_model=8, n_heads=2, n_layers=2, tie_embeddings=True, dtype="float64"
    )  # tied: the gradient of the shared table sums the embedding's and the output's
    model = LanguageModel(cfg, rng=rng)
    randomise_biases(model.params, rng)
    layers = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(
            8,
            2,
            cfg.d_ff,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
            dtype=torch.float64,
        )
        for _ in range(2)
    )
    norm = torch.nn.LayerNorm(8, dtype=torch.float64)
    emb = torch.nn.Embedding(12, 8, dtype=torch.float64)
    bias = to_torch64(model.params["out.b"], True)
    with torch.no_grad():
        emb.weight.copy_(to_torch64(model.params["embed.W"]))
        for i, tl in enumerate(layers):
            load_encoder_layer(tl, model.blocks.layers[i])
        load_layer_norm(norm, model.blocks.norm)
    x = rng.integers(0, 12, (3, 7))
    y = rng.integers(0, 12, (3, 7))
    h = emb(torch.tensor(x)) * math.sqrt(8) + to_torch64(model.pe[:7])
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)
    for tl in layers:
        h = tl(h, src_mask=causal)
    tlogits = norm(h) @ emb.weight.T + bias
    tloss = torch.nn.functional.cross_entropy(tlogits.reshape(-1, 12), torch.tensor(y).reshape(-1))
    tloss.backward()
    loss, g = cross_entropy(model(x), y)
    model.backward(g)
    logits_r, back = language_model_rounded(model, x)
    loss_r, g_r = cross_entropy_rounded(logits_r, y)
    tol = {name: t.tol(np.float64, sides=2) for name, t in back(g_r).items()}
    assert abs(loss - tloss.item()) <= loss_r.tol(np.float64, sides=2)
    grads = model.grads
    assert_within(grads["embed.W"], emb.weight.grad, tol["embed.W"], "embed.W (tied)")
    assert_within(grads["out.b"], bias.grad, tol["out.b"], "out.b")
    assert_within(
        grads["blocks.norm.gamma"], norm.weight.grad, tol["blocks.norm.gamma"], "blocks.norm.gamma"
    )
    for i, tl in enumerate(layers):
        for k, v in torch_encoder_layer_grads(tl).items():
            name = f"blocks.{i}.{k}"
            assert_within(grads[name], v, tol[name], name)


@pytest.mark.parametrize(
    "make",
    [
        lambda: LanguageModel(LanguageModelConfig(vocab_size=10**12, d_model=8, n_heads=2)),
        lambda: Transformer(TransformerConfig(src_vocab_size=10, tgt_vocab_size=10, d_ff=10**12)),
    ],
)
def test_a_model_larger_than_the_memory_is_refused_before_any_allocation(make):
    with pytest.raises(ValueError, match=r"config describes a model of about .* GiB .* memory"):
        make()
