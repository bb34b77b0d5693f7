"""The data of the page "Guarda dentro" / "Look inside", computed by the package at build time.

Three views (``docs/javascripts/look-inside.js`` draws them with the vendored d3):

- ``attention.json``: the attention weights of every block and head of MiniLM
  (``MiniLM.attentions``) and of SmolLM2 (``LlamaModel`` forward, each block's
  ``attention_weights``) for the sentences of ``SENTENCES``, quantised to 8 bits
  (``round(255 * w)``, base64; one step is 1/255), SmolLM2's as the lower triangle only (the
  causal mask makes the rest 0): about 0.5 MB in all;
- ``next.json``: the logits of the next token, SmolLM2's (its ``TOP_N`` highest, of 49152) and
  the character model's (the whole vocabulary), for the prompts of ``PROMPTS``;
- ``residual.json``: the norm of every token's vector in SmolLM2's residual stream, after the
  embedding and after each block.

The forward passes take about half a minute; their result is kept in ``.cache/look-inside/``
under the hash of everything they depend on (the texts below, ``FORMAT``, the package's version,
code and data, the model files), so a build with nothing changed reads one file. A quick build
(``SITE_QUICK=1``, ``site_cache.py``) does not compute them: its data say ``"pending"``, and the
views say that their data are being computed. A model whose package is not installed is left out
(``"missing"`` in the data); the page then says which package its view needs, and the build goes
on.

``tests/test_look_inside.py`` recomputes one sentence with the package and compares.
"""

from __future__ import annotations

import base64
import json

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

import site_cache

CACHE = site_cache.CACHE / "look-inside"
DEST = "assets/look-inside"
LANGUAGES = ("it", "en")
# Bump when the shape of the data changes (the cache key includes it).
FORMAT = 2
TOP_N = 300  # SmolLM2's next-token view: the TOP_N highest logits

# The sentences of the attention view (id -> text); the page describes them.
SENTENCES = {
    "trophy-big": "The trophy did not fit in the suitcase because it was too big.",
    "trophy-small": "The trophy did not fit in the suitcase because it was too small.",
    "zaino-grande": "Il libro non entrava nello zaino perché era troppo grande.",
    "zaino-piccolo": "Il libro non entrava nello zaino perché era troppo piccolo.",
    "maria": "Maria ha chiamato Luca, ma lui non ha risposto.",
    "numbers": "one two three four five, one two three four five",
}
# The prompts of the next-token view: SmolLM2's and the character model's.
PROMPTS = {
    "smollm2": {
        "capital": "The capital of Italy is",
        "once": "Once upon a time, there was a",
        "contare": "Uno, due, tre,",
        "caldo": "Il contrario di caldo è",
    },
    "charlm": {
        "legno": "C'era una volta un pezzo di le",
        "pinocchio": "Pinocchi",
        "re": "C'era una volta un re",
        "space": "e ",
    },
}


# --------------------------------------------------------------------------------------------
# The computation (the package, real forward passes)


def quantise(w, *, causal: bool = False) -> str:
    """Weights (L, H, T, T) in [0, 1] -> base64 of their uint8 codes ``round(255 w)``, C order;
    ``causal``: only the lower triangle of each head (row i, columns j <= i: the rest is 0)."""
    import numpy as np

    w = np.asarray(w, dtype=np.float64)
    if causal:
        rows, cols = np.tril_indices(w.shape[-1])
        w = w[..., rows, cols]  # (L, H, T (T + 1) / 2), row by row
    codes = np.clip(np.rint(w * 255), 0, 255).astype(np.uint8)
    return base64.b64encode(codes.tobytes()).decode("ascii")


def dequantise(entry: dict):
    """The weights (L, H, T, T) of one entry of ``attention.json``, to within 1/510."""
    import numpy as np

    L, H, T, _ = entry["shape"]
    codes = np.frombuffer(base64.b64decode(entry["w"]), dtype=np.uint8) / 255
    if not entry.get("causal"):
        return codes.reshape(L, H, T, T)
    w = np.zeros((L, H, T, T))
    rows, cols = np.tril_indices(T)
    w[..., rows, cols] = codes.reshape(L, H, -1)
    return w


def minilm_attention(model, text: str) -> dict:
    """MiniLM's weights (L, H, T, T) and word pieces for ``text``."""
    weights, tokens = model.attentions(text)
    L, H, T, _ = weights.shape
    return {"tokens": tokens, "shape": [L, H, T, T], "w": quantise(weights)}


def smollm2_ids(tokenizer, text: str) -> list[int]:
    """The token ids of ``text`` as SmolLM2 reads plain text (no special token added)."""
    return list(tokenizer.encode(text))


def smollm2_forward(model, ids):
    """One forward pass of SmolLM2 on ``ids``, block by block as ``LlamaModel.forward`` runs
    them: (logits (T, V), attention weights (L, H, T, T), residual norms (L + 1, T))."""
    import numpy as np

    from transformer_np.masks import causal_mask

    ids = np.asarray([ids], dtype=np.int64)  # (1, T)
    x = model.embed.forward(ids)  # (1, T, D)
    mask = causal_mask(ids.shape[1])
    norms, weights = [np.linalg.norm(x[0], axis=-1)], []
    for block in model.blocks.layers:
        x = block.forward(x, mask)  # (1, T, D): the residual stream after this block
        norms.append(np.linalg.norm(x[0], axis=-1))
        weights.append(block.attention_weights[0])  # (H, T, T)
    h = model.blocks.norm.forward(x)
    logits = model.embed.attend(h)[0]  # (T, V)
    return logits, np.stack(weights), np.stack(norms)


def top_logits(logits, n: int, decode) -> dict:
    """The ``n`` highest logits of a row (highest first), their tokens and the probability
    they hold at temperature 1 among the whole vocabulary."""
    import numpy as np

    z = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-z, kind="stable")[:n]
    p = np.exp(z - z.max())
    return {
        "ids": [int(i) for i in order],
        "tokens": [decode(int(i)) for i in order],
        "logits": [round(float(z[i]), 4) for i in order],
        "vocab": int(z.size),
        "mass": round(float(p[order].sum() / p.sum()), 4),
    }


def compute() -> dict:
    """Every view's data, from the models that are installed."""

    data = {
        "format": FORMAT,
        "sentences": SENTENCES,
        "missing": {},
        "attention": {},
        "next": {},
        "residual": {},
    }
    passes = 2 * len(SENTENCES) + len(PROMPTS["smollm2"]) + len(PROMPTS["charlm"])
    with site_cache.progress("look inside, forward passes", passes, "pass") as bar:
        _compute(data, bar)
    return data


def _compute(data: dict, bar) -> None:
    """The views' data into ``data``, moving ``bar`` on after each forward pass."""
    import numpy as np

    from transformer_np.examples.charlm import CharVocab, load_text, load_trained

    try:
        from transformer_np.pretrained import load_minilm

        minilm = load_minilm()
    except (ImportError, OSError) as exc:  # ModelFileError is a FileNotFoundError
        data["missing"]["minilm"] = str(exc)
    else:
        data["attention"]["minilm"] = {}
        for key, text in SENTENCES.items():
            data["attention"]["minilm"][key] = minilm_attention(minilm, text)
            bar.update()
        del minilm
    try:
        from transformer_np.pretrained import load_smollm2

        smollm2, tokenizer = load_smollm2()
    except (ImportError, OSError) as exc:
        data["missing"]["smollm2"] = str(exc)
    else:
        attention, residual = {}, {}
        for key, text in SENTENCES.items():
            ids = smollm2_ids(tokenizer, text)
            _, weights, norms = smollm2_forward(smollm2, ids)
            tokens = [tokenizer.decode([i]) for i in ids]
            L, H, T, _ = weights.shape
            attention[key] = {
                "tokens": tokens,
                "shape": [L, H, T, T],
                "causal": True,
                "w": quantise(weights, causal=True),
            }
            residual[key] = {"tokens": tokens, "norms": np.round(norms, 2).tolist()}
            bar.update()
        data["attention"]["smollm2"] = attention
        data["residual"]["smollm2"] = residual
        data["next"]["smollm2"] = {}
        for key, text in PROMPTS["smollm2"].items():
            logits, _, _ = smollm2_forward(smollm2, smollm2_ids(tokenizer, text))
            row = top_logits(logits[-1], TOP_N, lambda i: tokenizer.decode([i]))
            data["next"]["smollm2"][key] = {"prompt": text, **row}
            bar.update()
        del smollm2
    model, _ = load_trained()
    vocab = CharVocab(load_text())
    data["next"]["charlm"] = {}
    for key, text in PROMPTS["charlm"].items():
        logits = model(vocab.encode(text)[None, :])[0, -1]  # (V,)
        row = top_logits(logits, len(vocab.chars), lambda i: vocab.chars[i])
        data["next"]["charlm"][key] = {"prompt": text, **row}
        bar.update()


# --------------------------------------------------------------------------------------------
# The cache


def cache_key() -> str:
    """The hash of everything the data depends on."""
    import transformer_np

    inputs = {"format": FORMAT, "top_n": TOP_N, "sentences": SENTENCES, "prompts": PROMPTS}
    inputs["version"] = transformer_np.__version__
    inputs["models"] = site_cache.model_files()
    # The package's code and its shipped data (the character model's checkpoint among them).
    return site_cache.digest(inputs, site_cache.package_files())


_DATA: dict[str, bytes] | None = None


def views() -> dict[str, bytes]:
    """The JSON files of the views (name -> bytes), from the cache or computed (once per
    process: every language's build reuses them)."""
    global _DATA
    if _DATA is None:
        key = cache_key()
        cached = CACHE / f"{key}.json"
        if cached.is_file():
            data = json.loads(cached.read_text(encoding="utf-8"))
        elif site_cache.quick():  # computed by the whole build, behind this one
            data = {"format": FORMAT, "pending": True, "sentences": SENTENCES, "missing": {},
                    "attention": {}, "next": {}, "residual": {}}  # fmt: skip
        else:
            data = compute()
            for old in CACHE.glob("*.json"):  # one entry: the data of the current inputs
                old.unlink()
            site_cache.write_atomic(cached, json.dumps(data, ensure_ascii=False).encode())
        common = {key: data[key] for key in ("format", "missing", "sentences")}
        common["pending"] = data.get("pending", False)
        _DATA = {
            name: json.dumps(
                {**common, name: data[name]}, ensure_ascii=False, separators=(",", ":")
            ).encode("utf-8")
            for name in ("attention", "next", "residual")
        }
    return _DATA


def _current_language(config) -> str:
    i18n = config.plugins.get("i18n")
    lang = getattr(i18n, "current_language", None)
    return lang if lang in LANGUAGES else LANGUAGES[0]


# After mkdocs-static-i18n (-100) has laid out this language's files. The data is the same for
# both languages: one copy at the site's root (the script finds it next to itself).
@event_priority(-110)
def on_files(files, config):
    lang = _current_language(config)
    for name, content in views().items():
        generated = File.generated(config, f"{lang}/look-inside-data/{name}.json", content=content)
        generated.dest_uri = f"{DEST}/{name}.json"
        files.append(generated)
    return files
