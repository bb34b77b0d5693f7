"""lora.py: low-rank adapters on frozen Linear maps, and PEFT's files.

Sections: the layer (B = 0 starts at the base, A drawn as PEFT draws it, the backward by finite
differences and against PEFT's LoRA layer with PyTorch autograd), freezing (no gradient computed
or kept for a frozen layer, ``grads`` of the trainable parameters only), add_lora (targets by
our names and transformers', an optimiser step on the adapters alone), merge and unmerge, the
files (our adapter read by PEFT on transformers' LlamaForCausalLM gives our logits, PEFT's
adapter read by us gives PEFT's; the end-to-end gradients against PEFT + autograd), errors.
"""

import json

import numpy as np
import pytest
from test_llama import llama_roundings, logits_magnitude

from transformer_np import (
    Adam,
    LanguageModel,
    LanguageModelConfig,
    Linear,
    LlamaConfig,
    LlamaModel,
    MultiHeadAttention,
    cross_entropy,
    generate,
)
from transformer_np._peft import lora_layers, peft_path
from transformer_np.lora import LoRALinear, add_lora, lora_params, merge_lora, unmerge_lora
from transformer_np.lora_files import ADAPTER_CONFIG, ADAPTER_WEIGHTS, load_lora, save_lora

from helpers import (
    FD_TOL,
    abs_product,
    assert_within,
    hf_llama_config,
    hf_llama_in_input_dtype,
    hf_rope_float64,
    load_llama_model,
    numerical_gradient,
    relative_error,
    rounding_tol,
    to_torch,
)

SMALL = dict(vocab_size=61, d_model=48, n_layers=3, n_heads=6, n_kv_heads=2, d_ff=80, max_len=64)


def small_llama(rng, dtype="float64"):
    """A small LlamaModel with gains away from 1 (as test_llama.py builds it)."""
    model = LlamaModel(LlamaConfig(**SMALL, rope_base=500.0, dtype=dtype), rng=rng)
    for name, value in model.params.items():
        if name.endswith("gamma"):
            model.params[name] = (1 + 0.3 * rng.standard_normal(value.shape)).astype(dtype)
    return model


def randomise_adapters(model, rng, scale=0.2):
    """Nonzero B (and new A) in every adapter, so that the adapters change the output."""
    for p in lora_params(model).values():
        p[...] = scale * rng.standard_normal(p.shape)


def lora_roundings(d_in, r):
    """Roundings of x W + b + s (x A) B beyond x W: the sums of x A (d_in) and of h B (r), the
    scale, the two additions."""
    return d_in + r + 3


def lora_magnitude(layer, x):
    """The terms of every output: |x| |W| + |b| + s |x| |A| |B|."""
    p = layer.params
    m = abs_product(x, p["W"]) + (np.abs(p["b"]) if "b" in p else 0.0)
    return m + layer.scale * abs_product(abs_product(x, p["lora_A"]), p["lora_B"])


# ============================================================================================
# the layer
# ============================================================================================


def test_layer_with_b_zero_starts_equal_to_its_base(rng):
    base = Linear(12, 7, rng=rng)
    lora = LoRALinear(base, r=3, alpha=6, rng=rng)
    x = rng.standard_normal((2, 5, 12))
    assert np.all(lora.params["lora_B"] == 0)
    np.testing.assert_array_equal(lora(x), base(x))  # (x A) 0 = 0 exactly: the same bits


def test_layer_computes_base_plus_scaled_low_rank_change(rng):
    lora = LoRALinear(Linear(12, 7, rng=rng), r=3, alpha=6, rng=rng)
    lora.params["lora_B"][...] = rng.standard_normal((3, 7))
    x = rng.standard_normal((2, 5, 12))
    p = lora.params
    expected = x @ p["W"] + p["b"] + (6 / 3) * (x @ p["lora_A"]) @ p["lora_B"]
    # two computations of the same sums (one with the change as one matrix product more)
    tol = rounding_tol(np.float64, 2 * (12 + lora_roundings(12, 3)), lora_magnitude(lora, x))
    assert_within(lora(x), expected, tol, "LoRALinear - formula")
    assert lora(x.astype(np.float32)).dtype == np.float32  # computed in the input's dtype


def test_names_of_the_parameters_keep_the_base_names(rng):
    lora = LoRALinear(Linear(4, 3, rng=rng), r=2, rng=rng)
    assert list(lora.params) == ["W", "b", "lora_A", "lora_B"]
    assert lora.params["lora_A"].shape == (4, 2) and lora.params["lora_B"].shape == (2, 3)
    mha = add_lora(MultiHeadAttention(8, 2, rng=rng), r=2, targets=("q", "v"), rng=rng)
    assert [k for k in mha.params if "q" in k] == ["W_q", "b_q", "lora_A_q", "lora_B_q"]


def test_a_is_drawn_as_peft_draws_it(torch):
    """PEFT's kaiming_uniform_(a=sqrt(5)) is U(-1/sqrt(d_in), 1/sqrt(d_in)); our A too."""
    from peft import LoraConfig
    from peft.tuners.lora import Linear as PeftLinear

    d_in, r = 400, 64
    torch.manual_seed(0)
    peft_layer = PeftLinear(torch.nn.Linear(d_in, 5), "default", config=LoraConfig(r=r),
                            r=r, lora_alpha=16)  # fmt: skip
    theirs = peft_layer.lora_A["default"].weight.detach().numpy()  # (r, d_in)
    ours = LoRALinear(Linear(d_in, 5, rng=0), r=r, rng=0).params["lora_A"]  # (d_in, r)
    bound = np.abs(theirs).max()  # the largest of 25600 uniform draws: within 1e-3 of the end
    assert np.abs(ours).max() <= bound * 1.001 and np.abs(ours).max() >= bound * 0.999
    assert abs(ours.std() - theirs.std()) < 0.02 * theirs.std()  # uniform: bound / sqrt(3)
    assert np.all(peft_layer.lora_B["default"].weight.detach().numpy() == 0)


def test_layer_backward_matches_finite_differences(rng):
    lora = LoRALinear(Linear(6, 5, rng=rng), r=3, alpha=4.5, rng=rng)
    lora.params["lora_B"][...] = rng.standard_normal((3, 5))
    x = rng.standard_normal((2, 4, 6))
    G = rng.standard_normal((2, 4, 5))

    def f():
        return float(np.sum(G * lora(x)))

    lora(x)
    dx = lora.backward(G)
    assert set(lora.grads) == {"lora_A", "lora_B"}  # none for the frozen W and b
    assert lora.base.grads == {}
    assert relative_error(dx, numerical_gradient(f, x)) <= FD_TOL
    for name in ("lora_A", "lora_B"):
        num = numerical_gradient(f, lora.params[name])
        assert relative_error(lora.grads[name], num) <= FD_TOL, name


def test_layer_backward_with_dropout_matches_finite_differences(rng):
    lora = LoRALinear(Linear(6, 5, rng=rng), r=3, alpha=4.5, dropout=0.4, rng=rng).train()
    lora.params["lora_B"][...] = rng.standard_normal((3, 5))
    x = rng.standard_normal((2, 4, 6))
    G = rng.standard_normal((2, 4, 5))

    def forward():
        lora.dropout.rng = np.random.default_rng(7)  # the same mask at every call
        return lora(x)

    def f():
        return float(np.sum(G * forward()))

    forward()
    dx = lora.backward(G)
    assert relative_error(dx, numerical_gradient(f, x)) <= FD_TOL
    num = numerical_gradient(f, lora.params["lora_A"])
    assert relative_error(lora.grads["lora_A"], num) <= FD_TOL


@pytest.mark.parametrize("bias", [True, False])
def test_layer_matches_peft_lora_layer_with_autograd(torch, rng, bias):
    from peft import LoraConfig
    from peft.tuners.lora import Linear as PeftLinear

    d_in, d_out, r, alpha = 10, 7, 4, 12
    lora = LoRALinear(Linear(d_in, d_out, bias=bias, rng=rng), r=r, alpha=alpha, rng=rng)
    lora.params["lora_B"][...] = rng.standard_normal((r, d_out))
    base = torch.nn.Linear(d_in, d_out, bias=bias).double()
    ref = PeftLinear(base, "default", config=LoraConfig(r=r), r=r, lora_alpha=alpha)
    p = lora.params
    with torch.no_grad():
        base.weight.copy_(to_torch(p["W"].T))  # PyTorch's weight is our W transposed
        if bias:
            base.bias.copy_(to_torch(p["b"]))
        ref.lora_A["default"].weight.copy_(to_torch(p["lora_A"].T))  # (r, d_in)
        ref.lora_B["default"].weight.copy_(to_torch(p["lora_B"].T))  # (d_out, r)
    base.requires_grad_(False)  # frozen, as get_peft_model leaves it
    x = rng.standard_normal((3, 5, d_in))
    g = rng.standard_normal((3, 5, d_out))
    xt = to_torch(x).requires_grad_(True)
    out = ref(xt)
    out.backward(to_torch(g))
    y, dx = lora(x), lora.backward(g)
    tol = rounding_tol(np.float64, 2 * (d_in + lora_roundings(d_in, r)), lora_magnitude(lora, x))
    assert_within(y, out.detach().numpy(), tol, "output, ours - PEFT")
    s = alpha / r
    gB = abs_product(g, p["lora_B"].T)  # |g| |B^T|: the terms of g B^T, (3, 5, r)
    n = 2 * (d_out + r + 15 + 3)  # g B^T, then a sum of r, or of the N = 15 rows; the scale
    dx_terms = abs_product(g, p["W"].T) + s * abs_product(gB, p["lora_A"].T)  # (3, 5, d_in)
    tol_dx = rounding_tol(np.float64, n, dx_terms)
    assert_within(dx, xt.grad.numpy(), tol_dx, "dL/dx, ours - PEFT")
    x2, g2 = x.reshape(-1, d_in), g.reshape(-1, d_out)
    tol_A = rounding_tol(np.float64, n, s * abs_product(x2.T, gB.reshape(-1, r)))  # (d_in, r)
    theirs_A = ref.lora_A["default"].weight.grad.numpy().T
    assert_within(lora.grads["lora_A"], theirs_A, tol_A, "dL/dA, ours - PEFT")
    xa = abs_product(x2, p["lora_A"])  # (N, r)
    tol_B = rounding_tol(np.float64, n + 2 * d_in, s * abs_product(xa.T, g2))  # (r, d_out)
    theirs_B = ref.lora_B["default"].weight.grad.numpy().T
    assert_within(lora.grads["lora_B"], theirs_B, tol_B, "dL/dB, ours - PEFT")
    assert base.weight.grad is None  # frozen on both sides: no gradient computed


def test_merged_layer_computes_the_adapted_map_with_the_base_alone(rng):
    lora = LoRALinear(Linear(12, 7, rng=rng), r=3, alpha=6, rng=rng)
    lora.params["lora_B"][...] = rng.standard_normal((3, 7))
    x = rng.standard_normal((4, 12))
    W0, y = lora.params["W"].copy(), lora(x)
    lora.merge()
    delta = np.abs(lora.delta())
    # the merged W has one more rounding per entry (W + delta); x W sums 12 of them
    tol = rounding_tol(np.float64, 2 * (12 + lora_roundings(12, 3)) + 2, lora_magnitude(lora, x))
    assert_within(lora(x), y, tol, "merged - adapted")
    lora.unmerge()
    assert_within(lora.params["W"], W0, rounding_tol(np.float64, 2, np.abs(W0) + 2 * delta), "W")
    lora.merge()
    lora(x)
    with pytest.raises(RuntimeError, match="unmerge_lora"):
        lora.backward(np.ones((4, 7)))  # the adapter was merged in that forward pass


# ============================================================================================
# freezing
# ============================================================================================


def test_frozen_linear_passes_the_gradient_on_and_keeps_none(rng):
    lin = Linear(5, 4, rng=rng)
    x, g = rng.standard_normal((3, 5)), rng.standard_normal((3, 4))
    lin(x)
    expected_dx = lin.backward(g)
    assert set(lin.grads) == {"W", "b"}
    assert lin.freeze() is lin and lin.grads == {}  # freezing drops the old ones
    lin(x)
    np.testing.assert_array_equal(lin.backward(g), expected_dx)
    assert lin.grads == {}
    lin.zero_grad()
    assert lin.grads == {}
    lin.unfreeze()(x)
    lin.backward(g)
    assert set(lin.grads) == {"W", "b"}


def test_grads_of_a_partly_frozen_model_list_the_trainable_parameters_only(rng):
    cfg = LanguageModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16,
                              max_len=8)  # fmt: skip
    model = LanguageModel(cfg, rng=rng)
    model.freeze()
    model.blocks.layers[1].ff.unfreeze()
    ids = rng.integers(0, 11, (2, 6))
    logits = model(ids)
    model.backward(rng.standard_normal(logits.shape))
    assert list(model.grads) == ["blocks.1.ff.linear1.W", "blocks.1.ff.linear1.b",
                                 "blocks.1.ff.linear2.W", "blocks.1.ff.linear2.b"]  # fmt: skip
    with pytest.raises(KeyError, match="unfreeze"):
        model.grads["blocks.0.attn.W_q"]
    assert model.blocks.layers[0].attn.q.grads == {}  # not computed


# ============================================================================================
# add_lora
# ============================================================================================


def test_add_lora_by_default_adapts_the_queries_and_values_and_starts_at_the_base(rng):
    model = small_llama(rng)
    ids = rng.integers(0, 61, (2, 9))
    before = model(ids)
    n_before = model.num_parameters()
    assert add_lora(model, r=4, alpha=8, rng=rng) is model
    np.testing.assert_array_equal(model(ids), before)  # B = 0
    params = lora_params(model)
    assert list(params)[:4] == ["blocks.0.attn.lora_A_q", "blocks.0.attn.lora_B_q",
                                "blocks.0.attn.lora_A_v", "blocks.0.attn.lora_B_v"]  # fmt: skip
    D, Dkv, L = 48, 16, 3
    n_lora = L * (4 * (D + D) + 4 * (D + Dkv))  # r (d_in + d_out) per map, q and v
    assert sum(p.size for p in params.values()) == n_lora
    assert model.num_parameters() == n_before + n_lora
    assert all(params[k] is model.params[k] for k in params)  # the arrays themselves


@pytest.mark.parametrize(
    ("targets", "adapted"),
    [
        (("q", "v"), {"attn.q", "attn.v"}),
        (("q_proj", "v_proj"), {"attn.q", "attn.v"}),  # transformers' names, as in PEFT
        ("mlp.down_proj", {"ff.down"}),
        (["attn.o", "ff.gate", "up_proj"], {"attn.o", "ff.gate", "ff.up"}),
    ],
)
def test_targets_by_our_names_and_by_transformers_names(rng, targets, adapted):
    model = add_lora(small_llama(rng), targets=targets, rng=rng)
    names = {n.split(".", 2)[2] for n, m in model.named_modules() if isinstance(m, LoRALinear)}
    assert names == adapted
    assert sum(isinstance(m, LoRALinear) for m in model.modules()) == 3 * len(adapted)


def test_targets_by_regular_expression(rng):
    model = add_lora(small_llama(rng), targets=r"blocks\.[02]\.attn\.(q|k)", rng=rng)
    adapted = [n for n, m in model.named_modules() if isinstance(m, LoRALinear)]
    assert adapted == ["blocks.0.attn.q", "blocks.0.attn.k", "blocks.2.attn.q", "blocks.2.attn.k"]


def test_generation_with_the_cache_is_that_of_the_merged_model(rng):
    model = add_lora(small_llama(rng), r=4, alpha=8, targets=("q", "v", "up"), rng=rng)
    prompt = rng.integers(0, 61, (1, 5))
    base = generate(model, prompt, 12)  # B = 0: the base model's tokens
    randomise_adapters(model, rng, scale=0.5)
    adapted = generate(model, prompt, 12)
    assert not np.array_equal(adapted, base)
    np.testing.assert_array_equal(generate(merge_lora(model), prompt, 12), adapted)


def test_training_mode_reaches_the_adapters_dropout(rng):
    model = small_llama(rng).train()
    add_lora(model, dropout=0.1, rng=rng)
    dropouts = [m.dropout for m in lora_layers(model).values()]
    assert len(dropouts) == 6 and all(d.training and d.p == 0.1 for d in dropouts)
    model.eval()
    assert not any(d.training for d in dropouts)


def test_an_optimiser_step_changes_the_adapters_only(rng):
    cfg = LanguageModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16,
                              max_len=8)  # fmt: skip
    model = add_lora(LanguageModel(cfg, rng=rng), r=2, targets=("q", "v", "linear2"), rng=rng)
    before = {k: p.copy() for k, p in model.params.items()}
    opt = Adam(lora_params(model), lr=1e-2)
    ids = rng.integers(0, 11, (2, 7))

    def step():
        _, dlogits = cross_entropy(model(ids[:, :-1]), ids[:, 1:])
        model.backward(dlogits)
        assert set(model.grads) == set(lora_params(model))
        opt.step(model.grads)
        return {k for k, p in model.params.items() if not np.array_equal(p, before[k])}

    # the first step moves B only: with B = 0 the gradient of A, s x^T (g B^T), is 0
    assert step() == {k for k in lora_params(model) if "lora_B" in k}
    assert step() == set(lora_params(model))  # then A too; the base never


# ============================================================================================
# merge and unmerge
# ============================================================================================


def test_merge_and_unmerge_a_model(rng):
    model = add_lora(small_llama(rng), r=4, alpha=8, targets=("q", "v", "down"), rng=rng)
    randomise_adapters(model, rng)
    ids = rng.integers(0, 61, (2, 9))
    W0 = {k: p.copy() for k, p in model.params.items() if "lora" not in k}
    adapted = model(ids)
    assert merge_lora(model) is model
    merged = model(ids)
    unmerge_lora(model)
    # the merged model sums x (W + delta) where the adapted one sums x W + s (x A) B: the same
    # terms in other roundings; per block 3 adapted maps, each d_in + r + 3 roundings more
    n = 2 * (llama_roundings(model.config, 9) + 3 * SMALL["n_layers"] * lora_roundings(80, 4))
    assert_within(merged, adapted, rounding_tol(np.float64, n, logits_magnitude(model, ids)),
                  "logits, merged - adapted")  # fmt: skip
    for path, layer in lora_layers(model).items():
        W = layer.params["W"]
        name = [k for k in W0 if model.params[k] is W][0]
        tol = rounding_tol(np.float64, 2, np.abs(W0[name]) + 2 * np.abs(layer.delta()))
        assert_within(W, W0[name], tol, f"{path}: W after merge and unmerge")
    assert all(np.array_equal(model.params[k], W0[k]) for k in W0
               if not k.endswith(("W_q", "W_v", "W_down")))  # fmt: skip


def test_merged_weights_match_peft_merge_and_unload(torch, rng):
    from peft import LoraConfig, get_peft_model

    model = add_lora(small_llama(rng), r=4, alpha=8, targets=("q_proj", "o_proj"), rng=rng)
    randomise_adapters(model, rng)
    ref = hf_llama(torch, model)
    peft_model = get_peft_model(ref, LoraConfig(r=4, lora_alpha=8,
                                                target_modules=["q_proj", "o_proj"]))  # fmt: skip
    load_adapters_into_peft(peft_model, model)
    theirs = peft_model.merge_and_unload()
    merge_lora(model)
    for i, block in enumerate(model.blocks.layers):
        for ours, name in ((block.attn.q, "q_proj"), (block.attn.o, "o_proj")):
            hf = getattr(theirs.model.layers[i].self_attn, name).weight.detach().numpy().T
            W, d = ours.params["W"], np.abs(ours.delta())
            tol = rounding_tol(np.float64, 2 * (4 + 3), np.abs(W) + d)  # B A, the scale, W +
            assert_within(W, hf, tol, f"layer {i} {name}: merged W, ours - PEFT")


# ============================================================================================
# the files of PEFT (reference: PEFT on transformers' LlamaForCausalLM, float64)
# ============================================================================================


def hf_llama(torch, model, monkeypatch=None):
    """transformers' LlamaForCausalLM with the base weights of ``model`` (float64; with
    ``monkeypatch``, its RMSNorm, attention and angles computed in float64)."""
    from transformers import LlamaForCausalLM

    if monkeypatch is not None:
        hf_llama_in_input_dtype(monkeypatch)
    ref = LlamaForCausalLM(hf_llama_config(model.config)).eval().to(torch.float64)
    if monkeypatch is not None:
        hf_rope_float64(ref.model.rotary_emb)
    load_llama_model(ref, model)
    return ref


def load_adapters_into_peft(peft_model, model):
    """Copy our adapters into a PeftModel of the same targets (PyTorch's weights: W^T)."""
    import torch

    with torch.no_grad():
        for path, layer in lora_layers(model).items():
            target = peft_model.base_model.model.get_submodule(peft_path(path))
            target.lora_A["default"].weight.copy_(to_torch(layer.params["lora_A"].T))
            target.lora_B["default"].weight.copy_(to_torch(layer.params["lora_B"].T))


def adapted_logits_tol(model, ids, n_adapted_per_block):
    """Two computations (ours, PEFT's) of the logits of an adapted model: each adapted map adds
    its lora_roundings (d_in <= F = 80, r <= 8) to the path through its block."""
    extra = SMALL["n_layers"] * n_adapted_per_block * lora_roundings(80, 8)
    n = 2 * (llama_roundings(model.config, ids.shape[1]) + extra)
    return rounding_tol(np.float64, n, logits_magnitude(model, ids))


@pytest.mark.parametrize(
    "targets", [("q", "v"), ("q", "k", "v", "o", "gate", "up", "down"), r"blocks\.1\.attn\.v"]
)
def test_our_adapter_read_by_peft_gives_our_logits(torch, rng, monkeypatch, tmp_path, targets):
    from peft import PeftModel

    model = add_lora(small_llama(rng), r=8, alpha=16, targets=targets, rng=rng)
    randomise_adapters(model, rng)
    ref = hf_llama(torch, model, monkeypatch)  # the base weights (W, not W + delta)
    save_lora(tmp_path / "adapter", model, base_model="tiny-random-llama")
    written = sorted(p.name for p in (tmp_path / "adapter").iterdir())
    assert written == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]
    peft_model = PeftModel.from_pretrained(ref, tmp_path / "adapter").eval()
    n_adapted = sum(isinstance(m, LoRALinear) for m in model.modules())
    n_peft = sum(hasattr(m, "lora_A") and "default" in m.lora_A for m in peft_model.modules())
    assert n_peft == n_adapted  # PEFT adapted the same maps, no more
    ids = rng.integers(0, 61, (2, 24))
    with torch.no_grad():
        expected = peft_model(torch.from_numpy(ids)).logits.numpy()
    per_block = -(-n_adapted // SMALL["n_layers"])
    diff = np.abs(model(ids) - expected).max()
    print(f"logits, ours - PEFT reading our adapter ({targets}): max |difference| {diff:.2e}")
    assert_within(model(ids), expected, adapted_logits_tol(model, ids, per_block),
                  "logits, ours - PEFT")  # fmt: skip
    assert diff > 0 or n_adapted == 0  # (a real computation on both sides)
    base = hf_llama(torch, model)
    with torch.no_grad():
        unchanged = base(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(expected - unchanged).max() > 1e3 * diff  # the adapter changed the logits


def test_the_files_are_laid_out_as_peft_writes_them(rng, tmp_path):
    from safetensors.numpy import load_file

    model = add_lora(small_llama(rng), r=4, alpha=8, rng=rng)
    save_lora(tmp_path, model)
    tensors = load_file(tmp_path / ADAPTER_WEIGHTS)
    prefix = "base_model.model.model.layers"
    assert tensors[f"{prefix}.0.self_attn.q_proj.lora_A.weight"].shape == (4, 48)  # (r, d_in)
    assert tensors[f"{prefix}.2.self_attn.v_proj.lora_B.weight"].shape == (16, 4)  # (d_out, r)
    assert len(tensors) == 3 * 2 * 2
    config = json.loads((tmp_path / ADAPTER_CONFIG).read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert (config["r"], config["lora_alpha"]) == (4, 8)
    assert config["target_modules"] == ["q_proj", "v_proj"]
    assert config["base_model_name_or_path"] is None


def test_peft_adapter_read_by_us_gives_peft_logits(torch, rng, monkeypatch, tmp_path):
    from peft import LoraConfig, get_peft_model

    model = small_llama(rng)
    ref = hf_llama(torch, model, monkeypatch)
    targets = ["q_proj", "k_proj", "v_proj", "down_proj"]
    peft_model = get_peft_model(ref, LoraConfig(r=6, lora_alpha=9, target_modules=targets,
                                                task_type="CAUSAL_LM"))  # fmt: skip
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.2)  # nonzero B: the adapter changes the model
    peft_model.save_pretrained(tmp_path)
    ids = rng.integers(0, 61, (2, 24))
    with torch.no_grad():
        expected = peft_model.eval()(torch.from_numpy(ids)).logits.numpy()
    assert load_lora(tmp_path, model) is model
    assert {n.split(".", 2)[2] for n in lora_layers(model)} == {"attn.q", "attn.k", "attn.v",
                                                                 "ff.down"}  # fmt: skip
    assert model.blocks.layers[0].attn.q.scale == 9 / 6
    diff = np.abs(model(ids) - expected).max()
    print(f"logits, ours reading PEFT's adapter - PEFT: max |difference| {diff:.2e}")
    assert_within(model(ids), expected, adapted_logits_tol(model, ids, 4), "logits, ours - PEFT")


def test_save_and_load_round_trip_in_float32(rng, tmp_path):
    model = add_lora(small_llama(rng, "float32"), r=4, alpha=8, targets=("q", "up"), rng=rng)
    randomise_adapters(model, rng)
    save_lora(tmp_path / "a", model)
    other = load_lora(tmp_path / "a", small_llama(np.random.default_rng(5), "float32"))
    for (k, p), (k2, p2) in zip(lora_params(model).items(), lora_params(other).items(),
                                strict=True):  # fmt: skip
        assert k == k2 and p2.dtype == np.float32
        np.testing.assert_array_equal(p, p2)  # stored in float32: the same bits


def test_save_refuses_to_overwrite_and_writes_nothing_else(rng, tmp_path):
    model = add_lora(small_llama(rng), r=2, rng=rng)
    (tmp_path / "notes.txt").write_text("mine")
    save_lora(tmp_path, model)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_lora(tmp_path, model)
    (tmp_path / ADAPTER_WEIGHTS).unlink()
    with pytest.raises(FileExistsError, match=ADAPTER_CONFIG):  # checked before any write
        save_lora(tmp_path, model)
    assert not (tmp_path / ADAPTER_WEIGHTS).exists()
    save_lora(tmp_path, model, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS,
                                                          "notes.txt"]  # fmt: skip
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_the_end_to_end_adapter_gradients_match_peft_with_autograd(torch, rng, monkeypatch):
    """LlamaModel.backward with adapters on q, v and down; the loss the cross-entropy of the
    next tokens, on both sides; the gradients of every A and B against PyTorch's autograd."""
    from peft import LoraConfig, get_peft_model

    model = add_lora(small_llama(rng), r=4, alpha=8, targets=("q", "v", "down"), rng=rng)
    randomise_adapters(model, rng)
    ref = hf_llama(torch, model, monkeypatch)
    peft_model = get_peft_model(ref, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj",
                                                "v_proj", "down_proj"]))  # fmt: skip
    load_adapters_into_peft(peft_model, model)
    ids = rng.integers(0, 61, (2, 16))
    loss, dlogits = cross_entropy(model(ids[:, :-1]), ids[:, 1:])
    model.backward(dlogits)
    assert set(model.grads) == set(lora_params(model))
    adapters = {id(m) for a in lora_layers(model).values() for m in (a.lora_A, a.lora_B)}
    frozen = [m for m in model.modules() if isinstance(m, Linear) and id(m) not in adapters]
    assert len(frozen) == 7 * 3 and all(m.grads == {} for m in frozen)  # none computed
    assert model.embed.grads == {}
    out = peft_model(torch.from_numpy(ids[:, :-1]))
    targets = torch.from_numpy(ids[:, 1:]).reshape(-1)
    theirs = torch.nn.functional.cross_entropy(out.logits.reshape(-1, 61), targets)
    theirs.backward()
    assert abs(loss - theirs.item()) <= 1e-12 * abs(loss)
    worst = 0.0
    for path, layer in lora_layers(model).items():
        mod = peft_model.base_model.model.get_submodule(peft_path(path))
        for name in ("lora_A", "lora_B"):
            g_theirs = getattr(mod, name)["default"].weight.grad.numpy().T
            g_ours = layer.grads[name]
            err = np.abs(g_ours - g_theirs).max() / np.abs(g_theirs).max()
            worst = max(worst, err)
            assert err <= 1e-10, f"{path} {name}: relative difference {err:.2e}"
    print(f"adapter gradients, ours - PEFT + autograd: largest relative difference {worst:.2e}")
    frozen = [p for n, p in peft_model.named_parameters() if "lora" not in n]
    assert all(p.grad is None for p in frozen)  # PEFT froze the base too


# ============================================================================================
# errors
# ============================================================================================


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"r": 0}, ValueError, "r must be a positive integer, got 0"),
        ({"r": 2.5}, TypeError, "r must be a positive integer"),
        ({"alpha": -1}, ValueError, "alpha must be a positive finite number"),
        ({"dropout": 1.0}, ValueError, "dropout must be < 1.0"),
        ({"targets": "nope"}, ValueError, "'nope' names no Linear layer of the LlamaModel"),
        ({"targets": []}, TypeError, "targets must be a name or a non-empty list"),
        ({"targets": ("q", 3)}, TypeError, "targets must hold names"),
    ],
)
def test_add_lora_rejects_bad_arguments(rng, kwargs, error, match):
    model = small_llama(rng)
    with pytest.raises(error, match=match):
        add_lora(model, **kwargs)
    assert not lora_layers(model) and all(m.trainable for m in model.modules())  # unchanged


def test_layer_and_model_functions_reject_bad_input(rng):
    with pytest.raises(TypeError, match="base must be a Linear"):
        LoRALinear(np.ones((3, 3)))
    with pytest.raises(ValueError, match="r must be a positive integer"):
        LoRALinear(Linear(3, 3), r=-1)
    lora = LoRALinear(Linear(3, 2), r=1)
    with pytest.raises(ValueError, match=r"x must have shape \(..., d_in\) with d_in = 3"):
        lora(np.ones((2, 4)))
    model = small_llama(rng)
    for function in (lora_params, merge_lora, unmerge_lora):
        with pytest.raises(ValueError, match="has no LoRA adapters: add them with add_lora"):
            function(model)
    with pytest.raises(TypeError, match="model must be a model or a layer with sub-layers"):
        add_lora(Linear(3, 3))
    add_lora(model, rng=rng)
    with pytest.raises(ValueError, match="already has LoRA adapters"):
        add_lora(model)
    with pytest.raises(ValueError, match="not merged"):
        unmerge_lora(model)
    merge_lora(model)
    with pytest.raises(ValueError, match="merged already"):
        merge_lora(model)


def test_save_lora_rejects_what_peft_could_not_read(rng, tmp_path):
    cfg = LanguageModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=16)
    with pytest.raises(TypeError, match="model must be a LlamaModel"):
        save_lora(tmp_path, add_lora(LanguageModel(cfg, rng=rng), rng=rng))
    model = add_lora(small_llama(rng), rng=rng)
    model.blocks.layers[0].attn.q.params["lora_B"][0, 0] = np.nan
    with pytest.raises(ValueError, match="lora_B of blocks.0.attn.q contains NaN"):
        save_lora(tmp_path, model)
    model = add_lora(small_llama(rng), rng=rng)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_lora(tmp_path / "missing" / "adapter", model)
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="it is a file"):
        save_lora(tmp_path / "file", model)
    assert not list(tmp_path.glob("**/adapter*"))


def saved_adapter(rng, folder):
    model = add_lora(small_llama(rng), r=4, alpha=8, rng=rng)
    randomise_adapters(model, rng)
    save_lora(folder, model)
    return folder


def edit_config(folder, **changes):
    path = folder / ADAPTER_CONFIG
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize(
    ("damage", "error", "match"),
    [
        (lambda f: (f / ADAPTER_CONFIG).unlink(), FileNotFoundError, "has no adapter_config"),
        (lambda f: (f / ADAPTER_WEIGHTS).write_bytes(b"not safetensors"), ValueError,
         "is not a safetensors file"),
        (lambda f: (f / ADAPTER_CONFIG).write_text("{r: 4"), ValueError, "not JSON"),
        (lambda f: (f / ADAPTER_CONFIG).write_text("[4]"), ValueError, "must hold a JSON object"),
        (lambda f: edit_config(f, peft_type="PREFIX_TUNING"), ValueError, "only LoRA adapters"),
        (lambda f: edit_config(f, use_dora=True), ValueError, "use_dora = True: only plain"),
        (lambda f: edit_config(f, r=8), ValueError, r"this model with r = 8 needs \(8, 48\)"),
        (lambda f: edit_config(f, r="4"), ValueError, "r must be an integer >= 1"),
        (lambda f: edit_config(f, lora_alpha=0), ValueError, "lora_alpha must be a positive"),
    ],
)  # fmt: skip
def test_load_lora_rejects_a_wrong_file_and_leaves_the_model_unchanged(rng, tmp_path, damage,
                                                                        error, match):  # fmt: skip
    folder = saved_adapter(rng, tmp_path)
    damage(folder)
    model = small_llama(rng)
    with pytest.raises(error, match=match):
        load_lora(folder, model)
    assert not lora_layers(model) and all(m.trainable for m in model.modules())


def test_load_lora_rejects_an_adapter_of_another_model(rng, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = saved_adapter(rng, tmp_path)
    tensors = load_file(folder / ADAPTER_WEIGHTS)
    tensors["base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight"] = np.ones((4, 48))
    save_file(tensors, folder / ADAPTER_WEIGHTS)
    with pytest.raises(ValueError, match=r"layers\.7.*is not a LoRA matrix of a map of this"):
        load_lora(folder, small_llama(rng))
    with pytest.raises(FileNotFoundError, match="no adapter folder"):
        load_lora(tmp_path / "nowhere", small_llama(rng))
    with pytest.raises(TypeError, match="model must be a LlamaModel"):
        load_lora(folder, LanguageModel(LanguageModelConfig(vocab_size=11, d_model=8,
                                                            n_heads=2)))  # fmt: skip


# ============================================================================================
# memory (the benchmark script, on tiny sizes)
# ============================================================================================


@pytest.mark.slow
def test_memory_benchmark_measures_less_for_the_frozen_base(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_lora_memory.py"
    out = tmp_path / "memory.json"
    subprocess.run([sys.executable, str(script), "--size", "tiny", "--length", "32", "--json",
                    str(out)], check=True, capture_output=True, timeout=300)  # fmt: skip
    sides = json.loads(out.read_text())["sides"]
    full, lora = sides["full"], sides["lora"]
    assert lora["trainable"] == 2 * 8 * ((64 + 64) + (64 + 32))  # q and v of 2 blocks, r = 8
    assert lora["gradients"] == 2 * 2 * 2 and full["gradients"] == 1 + 2 * 9 + 1
    # no gradient, no moment for the frozen base: at least the three copies of its size
    weights = full["weights_mib"]
    assert full["step_peak_traced_mib"] - lora["step_peak_traced_mib"] > 3 * weights
