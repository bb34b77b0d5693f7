"""Backward passes against PyTorch autograd on the same weights (float64).

Each NumPy layer or model is copied into its PyTorch counterpart (``torch.nn.Linear``,
``LayerNorm``, ``MultiheadAttention``, ``TransformerEncoderLayer``, ``TransformerDecoderLayer``
and whole models assembled from them), both run the same input, and the gradients of the
same scalar loss are compared: inputs and every parameter, max abs difference <= 1e-10.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

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
    LanguageModel,
    LanguageModelConfig,
    Transformer,
    TransformerConfig,
)

ATOL = 1e-10
torch.set_default_dtype(torch.float64)


def T(a, grad=False):
    return torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=grad)


def close(mine, ref, what):
    ref = ref.detach().numpy() if isinstance(ref, torch.Tensor) else ref
    diff = np.abs(np.asarray(mine) - ref).max()
    print(f"{what}: max abs diff {diff:.2e}")
    assert diff <= ATOL, f"{what}: mine vs torch differ by {diff:.2e}"


# --------------------------------------------------------------------------------------------
# copying weights into torch modules


def load_linear(tl: torch.nn.Linear, lin: Linear):
    with torch.no_grad():
        tl.weight.copy_(T(lin.params["W"].T))
        tl.bias.copy_(T(lin.params["b"]))


def load_ln(tln: torch.nn.LayerNorm, ln: LayerNorm):
    with torch.no_grad():
        tln.weight.copy_(T(ln.params["gamma"]))
        tln.bias.copy_(T(ln.params["beta"]))


def load_mha(tm: torch.nn.MultiheadAttention, m: MultiHeadAttention):
    p = m.params
    with torch.no_grad():
        tm.in_proj_weight.copy_(T(np.concatenate([p["W_q"].T, p["W_k"].T, p["W_v"].T])))
        tm.in_proj_bias.copy_(T(np.concatenate([p["b_q"], p["b_k"], p["b_v"]])))
        tm.out_proj.weight.copy_(T(p["W_o"].T))
        tm.out_proj.bias.copy_(T(p["b_o"]))


def mha_grads(tm):
    """Torch MHA gradients under our names."""
    D = tm.embed_dim
    gw, gb = tm.in_proj_weight.grad.numpy(), tm.in_proj_bias.grad.numpy()
    return {
        "W_q": gw[:D].T,
        "W_k": gw[D : 2 * D].T,
        "W_v": gw[2 * D :].T,
        "W_o": tm.out_proj.weight.grad.numpy().T,
        "b_q": gb[:D],
        "b_k": gb[D : 2 * D],
        "b_v": gb[2 * D :],
        "b_o": tm.out_proj.bias.grad.numpy(),
    }


def load_encoder_layer(tl, block):
    load_mha(tl.self_attn, block.attn)
    load_ln(tl.norm1, block.norm1)
    load_ln(tl.norm2, block.norm2)
    load_linear(tl.linear1, block.ff.linear1)
    load_linear(tl.linear2, block.ff.linear2)


def _norm_ff_grads(g, tl, norms):
    """Add the gradients of torch layer ``tl``'s LayerNorms ``norms`` and feed-forward to ``g``."""
    for ours in norms:
        g[f"{ours}.gamma"] = getattr(tl, ours).weight.grad.numpy()
        g[f"{ours}.beta"] = getattr(tl, ours).bias.grad.numpy()
    for ours, theirs in (("ff.linear1", tl.linear1), ("ff.linear2", tl.linear2)):
        g[f"{ours}.W"] = theirs.weight.grad.numpy().T
        g[f"{ours}.b"] = theirs.bias.grad.numpy()
    return g


def encoder_layer_grads(tl):
    g = {f"attn.{k}": v for k, v in mha_grads(tl.self_attn).items()}
    return _norm_ff_grads(g, tl, ("norm1", "norm2"))


def load_decoder_layer(tl, block: DecoderBlock):
    load_mha(tl.self_attn, block.self_attn)
    load_mha(tl.multihead_attn, block.cross_attn)
    for t, o in ((tl.norm1, block.norm1), (tl.norm2, block.norm2), (tl.norm3, block.norm3)):
        load_ln(t, o)
    load_linear(tl.linear1, block.ff.linear1)
    load_linear(tl.linear2, block.ff.linear2)


def decoder_layer_grads(tl):
    g = {f"self_attn.{k}": v for k, v in mha_grads(tl.self_attn).items()}
    g.update({f"cross_attn.{k}": v for k, v in mha_grads(tl.multihead_attn).items()})
    return _norm_ff_grads(g, tl, ("norm1", "norm2", "norm3"))


def randomise_biases(params, rng):
    for name in params:
        if name.rsplit(".", 1)[-1] in ("b", "b_q", "b_k", "b_v", "b_o", "beta"):
            params[name][...] = 0.2 * rng.standard_normal(params[name].shape)
        if name.endswith("gamma"):
            params[name][...] = 1 + 0.2 * rng.standard_normal(params[name].shape)


def torch_bool_mask(mask):
    """Our mask (True = may attend) as torch's (True = blocked)."""
    return torch.tensor(~np.asarray(mask))


@pytest.fixture
def rng():
    return np.random.default_rng(7)


# --------------------------------------------------------------------------------------------
# layers


def test_linear_layernorm_feedforward_grads_match_torch(rng):
    x = rng.standard_normal((3, 4, 6))
    G = rng.standard_normal((3, 4, 6))
    lin = Linear(6, 6, rng=rng)
    tl = torch.nn.Linear(6, 6)
    load_linear(tl, lin)
    ln = LayerNorm(6)
    randomise_biases(ln.params, rng)
    tln = torch.nn.LayerNorm(6)
    load_ln(tln, ln)
    for act in ("relu", "gelu"):
        ff = FeedForward(6, 10, activation=act, rng=rng)
        t1, t2 = torch.nn.Linear(6, 10), torch.nn.Linear(10, 6)
        load_linear(t1, ff.linear1)
        load_linear(t2, ff.linear2)
        xt = T(x, True)
        ((t2(getattr(F, act)(t1(xt)))) * T(G)).sum().backward()
        ff(x)
        close(ff.backward(G), xt.grad, f"FeedForward({act}) dx")
        close(ff.grads["linear1.W"], t1.weight.grad.T, f"FeedForward({act}) linear1.W")
        close(ff.grads["linear2.b"], t2.bias.grad, f"FeedForward({act}) linear2.b")
    for mine, theirs, names in ((lin, tl, ("W", "b")), (ln, tln, ("gamma", "beta"))):
        xt = T(x, True)
        (theirs(xt) * T(G)).sum().backward()
        mine(x)
        close(mine.backward(G), xt.grad, f"{type(mine).__name__} dx")
        close(
            mine.grads[names[0]],
            theirs.weight.grad.numpy().T if names[0] == "W" else theirs.weight.grad,
            f"{type(mine).__name__}.{names[0]}",
        )
        close(mine.grads[names[1]], theirs.bias.grad, f"{type(mine).__name__}.{names[1]}")


def test_embedding_grad_matches_torch(rng):
    emb = Embedding(9, 4, rng=rng)
    te = torch.nn.Embedding(9, 4)
    with torch.no_grad():
        te.weight.copy_(T(emb.params["W"]))
    ids = rng.integers(0, 9, (3, 5))
    G = rng.standard_normal((3, 5, 4))
    (te(torch.tensor(ids)) * math.sqrt(4) * T(G)).sum().backward()
    emb(ids)
    emb.backward(G)
    close(emb.grads["W"], te.weight.grad, "Embedding.W")


@pytest.mark.parametrize("kind", ["self", "self+causal+padding", "cross+padding"])
def test_multi_head_attention_grads_match_torch(rng, kind):
    D, H = 8, 2
    mha = MultiHeadAttention(D, H, rng=rng)
    randomise_biases(mha.params, rng)
    tm = torch.nn.MultiheadAttention(D, H, batch_first=True)
    load_mha(tm, mha)
    x = rng.standard_normal((2, 5, D))
    mem = rng.standard_normal((2, 6, D))
    G = rng.standard_normal((2, 5, D))
    xt, mt = T(x, True), T(mem, True)
    if kind == "self":
        out, _ = tm(xt, xt, xt)
        mha(x)
    elif kind == "self+causal+padding":
        pad = padding_mask([5, 3])
        out, _ = tm(
            xt,
            xt,
            xt,
            attn_mask=torch_bool_mask(causal_mask(5)),
            key_padding_mask=torch_bool_mask(pad[:, 0, 0]),
        )
        mha(x, mask=causal_mask(5) & pad)
    else:
        pad = padding_mask([6, 4])
        out, _ = tm(xt, mt, mt, key_padding_mask=torch_bool_mask(pad[:, 0, 0]))
        mha(x, mem, mask=pad)
    (out * T(G)).sum().backward()
    d = mha.backward(G)
    if kind.startswith("cross"):
        close(d[0], xt.grad, "dx_q")
        close(d[1], mt.grad, "dx_kv")
    else:
        close(d, xt.grad, "dx")
    for k, v in mha_grads(tm).items():
        close(mha.grads[k], v, k)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_grads_match_torch_encoder_layer(rng, norm_first, activation):
    D, H, Dff = 8, 2, 16
    block = EncoderBlock(D, H, Dff, norm_first=norm_first, activation=activation, rng=rng)
    randomise_biases(block.params, rng)
    tl = torch.nn.TransformerEncoderLayer(
        D, H, Dff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    load_encoder_layer(tl, block)
    x = rng.standard_normal((2, 5, D))
    G = rng.standard_normal((2, 5, D))
    pad = padding_mask([5, 3])
    xt = T(x, True)
    (tl(xt, src_key_padding_mask=torch_bool_mask(pad[:, 0, 0])) * T(G)).sum().backward()
    block(x, mask=pad)
    close(block.backward(G), xt.grad, "dx")
    for k, v in encoder_layer_grads(tl).items():
        close(block.grads[k], v, k)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_grads_match_torch_decoder_layer(rng, norm_first):
    D, H, Dff = 8, 2, 16
    block = DecoderBlock(D, H, Dff, norm_first=norm_first, rng=rng)
    randomise_biases(block.params, rng)
    tl = torch.nn.TransformerDecoderLayer(
        D, H, Dff, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    load_decoder_layer(tl, block)
    x = rng.standard_normal((2, 4, D))
    mem = rng.standard_normal((2, 6, D))
    G = rng.standard_normal((2, 4, D))
    tgt_pad, src_pad = padding_mask([4, 3]), padding_mask([6, 2])
    xt, mt = T(x, True), T(mem, True)
    out = tl(
        xt,
        mt,
        tgt_mask=torch_bool_mask(causal_mask(4)),
        tgt_key_padding_mask=torch_bool_mask(tgt_pad[:, 0, 0]),
        memory_key_padding_mask=torch_bool_mask(src_pad[:, 0, 0]),
    )
    (out * T(G)).sum().backward()
    block(x, mem, causal_mask(4) & tgt_pad, src_pad)
    dx, dmem = block.backward(G)
    close(dx, xt.grad, "dx")
    close(dmem, mt.grad, "dmemory")
    for k, v in decoder_layer_grads(tl).items():
        close(block.grads[k], v, k)


# --------------------------------------------------------------------------------------------
# whole models with the loss


class TorchSeq2Seq(torch.nn.Module):
    """The same architecture as transformer_np.model.Transformer, from torch.nn parts."""

    def __init__(self, cfg: TransformerConfig, pe):
        super().__init__()
        D, kw = cfg.d_model, {"dropout": 0.0, "batch_first": True, "norm_first": cfg.norm_first}
        kw["activation"] = cfg.activation
        self.cfg = cfg
        self.src_embed = torch.nn.Embedding(cfg.src_vocab_size, D)
        self.tgt_embed = torch.nn.Embedding(cfg.tgt_vocab_size, D)
        self.enc = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(D, cfg.n_heads, cfg.d_ff, **kw)
            for _ in range(cfg.n_encoder_layers)
        )
        self.dec = torch.nn.ModuleList(
            torch.nn.TransformerDecoderLayer(D, cfg.n_heads, cfg.d_ff, **kw)
            for _ in range(cfg.n_decoder_layers)
        )
        self.enc_norm = torch.nn.LayerNorm(D) if cfg.norm_first else None
        self.dec_norm = torch.nn.LayerNorm(D) if cfg.norm_first else None
        self.out = torch.nn.Linear(D, cfg.tgt_vocab_size)
        self.pe = T(pe)

    def forward(self, src, tgt):
        D, pad = self.cfg.d_model, self.cfg.pad_id
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
        if self.cfg.tie_embeddings:
            return y @ self.tgt_embed.weight.T + self.out.bias
        return self.out(y)


@pytest.mark.parametrize(("norm_first", "tie"), [(False, False), (True, True)])
def test_transformer_loss_and_gradients_match_torch(rng, norm_first, tie):
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
    randomise_biases(model.parameters(), rng)
    tm = TorchSeq2Seq(cfg, model.pe)
    P = model.parameters()
    with torch.no_grad():
        tm.src_embed.weight.copy_(T(P["src_embed.W"]))
        tm.tgt_embed.weight.copy_(T(P["tgt_embed.W"]))
        for i, tl in enumerate(tm.enc):
            load_encoder_layer(tl, model.encoder.layers[i])
        for i, tl in enumerate(tm.dec):
            load_decoder_layer(tl, model.decoder.layers[i])
        if norm_first:
            load_ln(tm.enc_norm, model.encoder.norm)
            load_ln(tm.dec_norm, model.decoder.norm)
        tm.out.bias.copy_(T(P["out.b"]))
        if not tie:
            tm.out.weight.copy_(T(P["out.W"].T))
    src = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 3, 2]])
    tgt_in = np.array([[1, 5, 4, 3], [1, 9, 8, 0]])
    tgt_out = np.array([[5, 4, 3, 2], [9, 8, 2, 0]])

    logits = model(src, tgt_in)
    loss, g = cross_entropy(logits, tgt_out, ignore_index=0, label_smoothing=0.1)
    model.backward(g)
    tlogits = tm(torch.tensor(src), torch.tensor(tgt_in))
    tloss = F.cross_entropy(
        tlogits.reshape(-1, 10),
        torch.tensor(tgt_out).reshape(-1),
        ignore_index=0,
        label_smoothing=0.1,
    )
    tloss.backward()
    close(logits, tlogits, "logits")
    assert abs(loss - tloss.item()) <= ATOL
    grads = model.gradients()
    close(grads["src_embed.W"], tm.src_embed.weight.grad, "src_embed.W")
    close(grads["tgt_embed.W"], tm.tgt_embed.weight.grad, "tgt_embed.W (tied: both uses)")
    close(grads["out.b"], tm.out.bias.grad, "out.b")
    for i, tl in enumerate(tm.enc):
        for k, v in encoder_layer_grads(tl).items():
            close(grads[f"encoder.{i}.{k}"], v, f"encoder.{i}.{k}")
    for i, tl in enumerate(tm.dec):
        for k, v in decoder_layer_grads(tl).items():
            close(grads[f"decoder.{i}.{k}"], v, f"decoder.{i}.{k}")


def test_language_model_loss_and_gradients_match_torch(rng):
    cfg = LanguageModelConfig(vocab_size=12, d_model=8, n_heads=2, n_layers=2, dtype="float64")
    model = LanguageModel(cfg, rng=rng)
    randomise_biases(model.parameters(), rng)
    layers = torch.nn.ModuleList(
        torch.nn.TransformerEncoderLayer(
            8, 2, cfg.d_ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        for _ in range(2)
    )
    norm, emb = torch.nn.LayerNorm(8), torch.nn.Embedding(12, 8)
    bias = T(model.parameters()["out.b"], True)
    with torch.no_grad():
        emb.weight.copy_(T(model.parameters()["embed.W"]))
        for i, tl in enumerate(layers):
            load_encoder_layer(tl, model.blocks.layers[i])
        load_ln(norm, model.blocks.norm)
    x = rng.integers(0, 12, (3, 7))
    y = rng.integers(0, 12, (3, 7))
    h = emb(torch.tensor(x)) * math.sqrt(8) + T(model.pe[:7])
    causal = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1)
    for tl in layers:
        h = tl(h, src_mask=causal)
    tlogits = norm(h) @ emb.weight.T + bias
    tloss = F.cross_entropy(tlogits.reshape(-1, 12), torch.tensor(y).reshape(-1))
    tloss.backward()
    loss, g = cross_entropy(model(x), y)
    model.backward(g)
    assert abs(loss - tloss.item()) <= ATOL
    grads = model.gradients()
    close(grads["embed.W"], emb.weight.grad, "embed.W (tied)")
    close(grads["out.b"], bias.grad, "out.b")
    close(grads["blocks.norm.gamma"], norm.weight.grad, "blocks.norm.gamma")
    for i, tl in enumerate(layers):
        for k, v in encoder_layer_grads(tl).items():
            close(grads[f"blocks.{i}.{k}"], v, f"blocks.{i}.{k}")


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_float32_feed_forward_backward_matches_torch_float64(rng, activation):
    """The float32 path (GELU' read off the forward pass) is as accurate as float32 allows."""
    ff = FeedForward(16, 64, activation=activation, rng=rng, dtype=np.float32)
    x = (3 * rng.standard_normal((4, 9, 16))).astype(np.float32)
    G = rng.standard_normal((4, 9, 16)).astype(np.float32)
    t1, t2 = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)
    load_linear(t1, ff.linear1)
    load_linear(t2, ff.linear2)
    xt = T(x, True)
    (t2(getattr(F, activation)(t1(xt))) * T(G)).sum().backward()
    ff(x)
    dx = ff.backward(G)
    assert dx.dtype == np.float32 and ff.grads["linear1.W"].dtype == np.float32
    for mine, ref in ((dx, xt.grad), (ff.grads["linear1.W"], t1.weight.grad.T)):
        ref = ref.numpy()
        err = np.abs(mine - ref).max() / np.abs(ref).max()
        print(f"float32 {activation}: relative max error {err:.1e}")
        assert err <= 1e-5
