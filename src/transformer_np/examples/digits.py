"""The digit sequences of the reversal demo: the vocabulary, the held-out splits, the batches.

The source is a random string of digits (length ``min_len`` to ``max_len``, padded with 0); the
target is the same digits reversed (or sorted), then EOS, and the decoder reads it shifted right
(BOS first). Page: training.md.
"""

from __future__ import annotations

import numpy as np

PAD, BOS, EOS = 0, 1, 2
DIGIT0 = 3  # digit d has id d + 3
VOCAB_SIZE = 13


def _target_digits(digits, task):
    return digits[::-1] if task == "reverse" else sorted(digits)


def _sample_sequences(rng, n, min_len, max_len):
    lengths = rng.integers(min_len, max_len + 1, size=n)
    return [tuple(int(d) for d in rng.integers(0, 10, size=L)) for L in lengths]


def _distinct_sequences(rng, n, min_len, max_len, exclude):
    found = {}  # a dict keeps the order of the draws
    while len(found) < n:
        for s in _sample_sequences(rng, n - len(found), min_len, max_len):
            if s not in exclude:
                found[s] = None
    return list(found)


def heldout_splits(rng, n_val, n_test, min_len, max_len):
    """The validation and test sequences, drawn before training: distinct, and disjoint.

    The test set is drawn first, then the validation set among the sequences not in it. The
    training batches are then drawn avoiding both (``exclude`` of :func:`make_batch`).

    Parameters
    ----------
    rng : numpy.random.Generator
    n_val, n_test : int
        How many distinct sequences each set holds.
    min_len, max_len : int
        Range of the sequence lengths.

    Returns
    -------
    val, test : list of tuple of int
        ``n_val`` and ``n_test`` digit sequences; no sequence is in both.

    Raises
    ------
    ValueError
        If the two sets would take half or more of all the sequences of these lengths.
    """
    possible = sum(10**length for length in range(min_len, max_len + 1))
    if 2 * (n_val + n_test) > possible:
        raise ValueError(
            f"n_val + n_test = {n_val + n_test} held-out sequences would leave too few for "
            f"training: there are only {possible} sequences of {min_len} to {max_len} digits"
        )
    test = _distinct_sequences(rng, n_test, min_len, max_len, frozenset())
    val = _distinct_sequences(rng, n_val, min_len, max_len, frozenset(test))
    return val, test


def encode_pairs(seqs, max_len, task="reverse"):
    """Token arrays for a list of digit tuples.

    Parameters
    ----------
    seqs : list of tuple of int
        N sequences of digits 0-9, each at most ``max_len`` long.
    max_len : int
        Padded length of the source.
    task : {"reverse", "sort"}
        What the target is: the digits reversed, or sorted.

    Returns
    -------
    src : ndarray of shape (N, max_len)
        Digit ids, padded with PAD.
    tgt_in : ndarray of shape (N, max_len + 1)
        BOS, then the target digits, padded.
    tgt_out : ndarray of shape (N, max_len + 1)
        The target digits, EOS, padded: what the decoder must predict at each position.
    """
    n = len(seqs)
    src = np.full((n, max_len), PAD, dtype=np.int64)
    tgt_in = np.full((n, max_len + 1), PAD, dtype=np.int64)
    tgt_out = np.full((n, max_len + 1), PAD, dtype=np.int64)
    for i, seq in enumerate(seqs):
        L = len(seq)
        ids = np.array(seq, dtype=np.int64) + DIGIT0
        tgt = np.array(_target_digits(seq, task), dtype=np.int64) + DIGIT0
        src[i, :L] = ids
        tgt_in[i, 0] = BOS
        tgt_in[i, 1 : L + 1] = tgt
        tgt_out[i, :L] = tgt
        tgt_out[i, L] = EOS
    return src, tgt_in, tgt_out


def make_batch(rng, batch_size, min_len, max_len, task="reverse", exclude=frozenset()):
    """A random training batch avoiding the sequences in ``exclude``.

    Parameters
    ----------
    rng : numpy.random.Generator
    batch_size : int
        Number of sequences B.
    min_len, max_len : int
        Range of the sequence lengths.
    task : {"reverse", "sort"}
    exclude : set of tuple of int
        Sequences never drawn (the validation and test sets).

    Returns
    -------
    tuple of ndarray
        ``(src, tgt_in, tgt_out)``, as :func:`encode_pairs` returns them.
    """
    seqs = []
    while len(seqs) < batch_size:
        for s in _sample_sequences(rng, batch_size - len(seqs), min_len, max_len):
            if s not in exclude:
                seqs.append(s)
    return encode_pairs(seqs, max_len, task)


def decode_digits(ids):
    """Token ids -> string of digits, stopping at EOS or PAD (e.g. for printing).

    Parameters
    ----------
    ids : array_like of int, shape (T,)

    Returns
    -------
    str
        The digits; a special token other than EOS and PAD is shown as ``?``.

    Examples
    --------
    >>> decode_digits([4, 5, 6, EOS, 7])
    '123'
    """
    out = []
    for t in np.asarray(ids).tolist():
        if t == EOS or t == PAD:
            break
        out.append(str(t - DIGIT0) if t >= DIGIT0 else "?")
    return "".join(out)
