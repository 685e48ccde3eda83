"""How tokens meet the DPDA: a byte lexer front end, precomputed per lexer state into *jobs*.

The DPDA reads terminals; tokens are bytes. The front end is a deterministic byte transducer: the
maximal-munch lexer PSC uses too (``gcdbench.parsers.lr.lexer.ByteLexer``: Lark's standard lexer, all
terminals compete, keywords reserved), or, for the character-level DPDA, the trivial one that emits each byte's
class. Because it is deterministic, a token read from lexer state ``q`` yields one terminal sequence ``w`` and
one unfinished lexeme whose possible terminals are ``N`` (PSC's realizable sequences, from the LR engines'
shared :class:`gcdbench.parsers.lr.tokens.TokenJobs`). Tokens with equal ``(w, N)`` from ``q`` form a *job*: one
DPDA run decides them all. Lexer states with identical jobs share a *class*. EOS is one more job per class (the
finished lexeme's terminal, then ``$END``).

Arrays (all int32): ``cls_ptr`` (jobs of class c: ``cls_ptr[c] .. cls_ptr[c+1]``), ``job_seq``/``job_pend``
(terminal sequence id; pending set id, 0 = anything may follow, -1 = EOS), ``seq_ptr``/``seq_term`` and
``pend_ptr``/``pend_term`` (CSR lists of DPDA terminals), ``job_lcp`` (a class's jobs are in lexicographic order of
their DPDA terminal sequences; the length of the prefix a job shares with the one before it, 0 for a class's first
job), and the tokens of job j in vocabulary chunk k,
``jt_tok[jt_ptr[j*n_ch+k] : jt_ptr[j*n_ch+k+1]]`` (chunks of ``chunk`` ids = whole mask words, so
threads filling different chunks never write the same word). A *dense* job (more than ``dense_min`` tokens;
on Spider/Qwen3 under 1 % of the jobs hold 95 % of the (job, token) pairs) has no list but a precomputed mask
row ``dense_mask[dense_id[j]]``, OR-ed word by word.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from gcdbench.parsers.base import CompileError, CompileTimeout
from gcdbench.parsers.lr.lexer import IGNORED
from gcdbench.parsers.lr.tokens import TokenJobs


@dataclass
class ByteTransducer:
    """What the job builder needs of a lexer (PSC's ``ByteLexer`` has these attributes)."""

    step_state: np.ndarray    # [n_states, 256] next state (-1: dead)
    step_emit: np.ndarray     # [n_states, 256] emitted terminal index (-1: none, IGNORED: ignored)
    winner: np.ndarray        # [n_states] terminal the lexeme so far is (-1 none, IGNORED)
    pending: list             # per state: frozenset of terminal indices the lexeme may become, None: anything
    names: list[str]          # terminal index -> name

    @property
    def n_states(self) -> int:
        return int(self.winner.size)


def byte_class_transducer(byte_class: np.ndarray, cls_names: list[str]) -> ByteTransducer:
    """The character-level front end: one state, every byte emits its class (bytes of no class are dead)."""
    ok = byte_class >= 0
    step_state = np.where(ok, 0, -1).astype(np.int32)[None, :]
    step_emit = np.where(ok, byte_class, -1).astype(np.int32)[None, :]
    return ByteTransducer(step_state, step_emit, np.array([IGNORED], dtype=np.int32), [None], list(cls_names))


def _setup(lexer, term_id: dict[str, int], tokenizer, chunk: int) -> tuple:
    """(lexer terminal -> DPDA terminal, vocabulary size, mask chunks, the vocabulary read as ``TokenJobs``)."""
    if chunk % 32:
        raise ValueError("chunk must be a multiple of 32 (whole mask words)")
    vocab = tokenizer.vocab_size
    return (np.array([term_id.get(n, -1) for n in lexer.names], dtype=np.int64), vocab,
            (vocab + chunk - 1) // chunk, TokenJobs(tokenizer.token_bytes))


def build_jobs(lexer, term_id: dict[str, int], tokenizer, *, chunk: int, dense_min: int,
               deadline: float | None = None) -> dict:
    """Jobs of every lexer class over the vocabulary (see module doc). ``term_id`` maps terminal names to
    DPDA terminal ids; a job with more than ``dense_min`` tokens gets a precomputed mask row instead of a
    token list (``chunk``, ``dense_min``: the engine's options of those names, Pre3Options)."""
    to_dpda, vocab, n_ch, tj = _setup(lexer, term_id, tokenizer, chunk)
    tok_ids, seqs = tj.tok_ids, tj.seqs
    eos = tokenizer.eos_id

    # pending sets -> ids (0 = anything may follow)
    pend_index: dict = {None: 0}
    pend_lists: list[list[int]] = [[]]
    pend_of_state = np.zeros(lexer.n_states, dtype=np.int64)
    for q, p in enumerate(lexer.pending):
        if p is None:
            continue
        key = frozenset(int(to_dpda[a]) for a in p if to_dpda[a] >= 0)
        if key not in pend_index:
            pend_index[key] = len(pend_lists)
            pend_lists.append(sorted(key))
        pend_of_state[q] = pend_index[key]
    n_pend = len(pend_lists)

    class_key: dict[bytes, int] = {}
    qclass = np.zeros(lexer.n_states, dtype=np.int32)
    cls_jobs: list[np.ndarray] = []    # per class: job keys (seq * n_pend + pend, or -(seq+1) for EOS)
    cls_tok_parts: list[tuple] = []
    for q in range(lexer.n_states):
        job, eos_seq, key = tj.state_jobs(lexer, q, pend_of_state, n_pend)
        c = class_key.get(key)
        if c is None:
            c = class_key[key] = len(cls_jobs)
            valid = job >= 0
            keys, inv = np.unique(job[valid], return_inverse=True)
            toks = tok_ids[valid]
            if eos_seq >= 0:
                keys = np.append(keys, -(eos_seq + 1))
                inv = np.append(inv, keys.size - 1)
                toks = np.append(toks, eos)
            cls_jobs.append(keys)
            cls_tok_parts.append((inv, toks))
        qclass[q] = c
        if deadline is not None and time.monotonic() > deadline:
            raise CompileTimeout("pre3: construction exceeded its time budget (max_build_s)")

    return _pack(cls_jobs, cls_tok_parts, qclass, seqs, to_dpda, pend_lists, n_pend, lexer, vocab, n_ch, chunk,
                 dense_min)


def build_jobs_by_state(lexer, term_id: dict[str, int], tokenizer, packed, guard: int, max_push: int,
                        *, chunk: int, dense_min: int, sort_share_mb: int, deadline: float | None = None,
                        max_pairs: int = 60_000_000) -> dict:
    """The character-level jobs split by the LR state on top of the stack (``context.py``): per class of states,
    one always-allowed job holding the tokens accepted without context, then the context jobs and EOS. The
    result has ``state_class`` (LR state -> class) besides the arrays of ``build_jobs``; None when the split
    would hold more than ``max_pairs`` (job, token) entries (the caller keeps the plain jobs)."""
    from gcdbench.parsers.pre3.context import ACCEPTED, CONTEXT, sort_states

    if lexer.n_states != 1:
        raise ValueError("build_jobs_by_state takes the character-level front end (one lexer state)")
    to_dpda, vocab, n_ch, tj = _setup(lexer, term_id, tokenizer, chunk)
    tok_ids, seqs = tj.tok_ids, tj.seqs
    pend_of_state = np.zeros(1, dtype=np.int64)
    job, eos_seq, _key = tj.state_jobs(lexer, 0, pend_of_state, 1)
    valid = job >= 0
    keys, inv = np.unique(job[valid], return_inverse=True)   # n_pend = 1: a key is a sequence id
    toks = tok_ids[valid]
    klass, sorts, stats = sort_states(packed, guard, max_push, seqs.parent, seqs.last, keys, to_dpda, deadline,
                                      shared_bytes=sort_share_mb << 20)
    by_job = np.argsort(inv, kind="stable")
    starts = np.searchsorted(inv[by_job], np.arange(keys.size + 1))
    cls_jobs: list[np.ndarray] = []
    cls_tok_parts: list[tuple] = []
    pairs = 0
    for srt in sorts:
        acc = srt[inv] == ACCEPTED
        ctx = np.flatnonzero(srt == CONTEXT)
        kk = [np.zeros(1 if acc.any() else 0, dtype=np.int64), keys[ctx]]
        parts_inv = [np.zeros(int(acc.sum()), dtype=np.int64)]
        parts_tok = [toks[acc]]
        base = 1 if acc.any() else 0
        for i, j in enumerate(ctx.tolist()):
            t = toks[by_job[starts[j]:starts[j + 1]]]
            parts_inv.append(np.full(t.size, base + i, dtype=np.int64))
            parts_tok.append(t)
        k_all = np.concatenate(kk)
        i_all = np.concatenate(parts_inv)
        t_all = np.concatenate(parts_tok)
        if eos_seq >= 0:
            k_all = np.append(k_all, -(eos_seq + 1))
            i_all = np.append(i_all, k_all.size - 1)
            t_all = np.append(t_all, tokenizer.eos_id)
        pairs += t_all.size
        if pairs > max_pairs:
            return None
        cls_jobs.append(k_all)
        cls_tok_parts.append((i_all, t_all))
        if deadline is not None and time.monotonic() > deadline:
            raise CompileTimeout("pre3: construction exceeded its time budget (max_build_s)")
    out = _pack(cls_jobs, cls_tok_parts, np.zeros(1, dtype=np.int32), seqs, to_dpda, [[]], 1, lexer, vocab, n_ch,
                chunk, dense_min)
    out["state_class"] = klass
    out["stats"]["context_split"] = stats
    return out


def _pack(cls_jobs, cls_tok_parts, qclass, seqs, to_dpda, pend_lists, n_pend, lexer, vocab, n_ch, chunk,
          dense_min) -> dict:
    """The arrays of the module doc from each class's job keys and (job index, token) pairs."""
    # terminal sequences actually used, as DPDA terminal lists
    used: dict[int, int] = {}
    for keys in cls_jobs:
        for k in keys.tolist():
            s = -k - 1 if k < 0 else k // n_pend
            used.setdefault(s, len(used))
    seq_lists = [None] * len(used)
    parent, last = seqs.parent, seqs.last
    max_len = 0
    for s, i in used.items():
        out = []
        x = s
        while x > 0:
            out.append(int(to_dpda[last[x]]))
            x = parent[x]
        out.reverse()
        seq_lists[i] = out
        max_len = max(max_len, len(out))

    if any(t < 0 for x in seq_lists for t in x):
        missing = sorted({lexer.names[i] for i in range(len(lexer.names)) if to_dpda[i] < 0})
        raise CompileError(f"pre3: the lexer emits terminal(s) {missing} that the grammar's rules do not know")
    cls_ptr = np.zeros(len(cls_jobs) + 1, dtype=np.int64)
    cls_ptr[1:] = np.cumsum([k.size for k in cls_jobs])
    J = int(cls_ptr[-1])
    job_seq = np.empty(J, dtype=np.int32)
    job_pend = np.empty(J, dtype=np.int32)
    job_lcp = np.zeros(J, dtype=np.int32)
    tok_parts = []
    order_keys = []
    for c, keys in enumerate(cls_jobs):
        j0 = int(cls_ptr[c])
        # a class's jobs in lexicographic order of their terminal sequences, with the length of the prefix each
        # shares with the job before it: a mask runs a shared prefix once and skips the jobs behind a failed one
        jobs = [(used[-k - 1], -1) if k < 0 else (used[k // n_pend], k % n_pend) for k in keys.tolist()]
        order = sorted(range(len(jobs)), key=lambda jj: (seq_lists[jobs[jj][0]], jobs[jj][1]))
        rank = np.empty(len(jobs), dtype=np.int64)
        rank[order] = np.arange(len(jobs))
        prev: list[int] = []
        for pos, jj in enumerate(order):
            sq, pend = jobs[jj]
            job_seq[j0 + pos] = sq
            job_pend[j0 + pos] = pend
            cur = seq_lists[sq]
            n = 0
            if pos:
                m = min(len(cur), len(prev))
                while n < m and cur[n] == prev[n]:
                    n += 1
            job_lcp[j0 + pos] = n
            prev = cur
        inv, toks = cls_tok_parts[c]
        inv = rank[inv]
        slot = (j0 + inv) * n_ch + toks // chunk
        order_keys.append(slot)
        tok_parts.append(toks)
    slots = np.concatenate(order_keys) if order_keys else np.zeros(0, dtype=np.int64)
    toks_all = np.concatenate(tok_parts) if tok_parts else np.zeros(0, dtype=np.int64)
    # dense jobs (more than dense_min tokens: a few hundred jobs hold most (job, token) entries) get a mask row
    size = np.bincount(slots // n_ch, minlength=J)
    dense = np.flatnonzero(size > dense_min)
    dense_id = np.full(J, -1, dtype=np.int32)
    dense_id[dense] = np.arange(dense.size, dtype=np.int32)
    W = (vocab + 31) // 32
    dense_mask = np.zeros((dense.size, W), dtype=np.uint32)
    is_dense = dense_id[slots // n_ch] >= 0
    if is_dense.any():
        rows = dense_id[slots[is_dense] // n_ch].astype(np.int64)
        t = toks_all[is_dense]
        step = 64   # rows per pass: bits as bytes, then packed (a bounded temporary; ufunc.at is far slower)
        for r0 in range(0, dense.size, step):
            sel = (rows >= r0) & (rows < r0 + step)
            bits = np.zeros((min(step, dense.size - r0), W * 32), dtype=np.uint8)
            bits[rows[sel] - r0, t[sel]] = 1
            dense_mask[r0: r0 + bits.shape[0]] = np.packbits(bits, axis=1, bitorder="little").view(np.uint32)
    slots, toks_all = slots[~is_dense], toks_all[~is_dense]
    order = np.argsort(slots, kind="stable")
    counts = np.bincount(slots, minlength=J * n_ch)
    jt_ptr = np.zeros(J * n_ch + 1, dtype=np.int64)
    jt_ptr[1:] = np.cumsum(counts)
    if jt_ptr[-1] >= 2**31:
        raise CompileError("pre3: more than 2^31 (job, token) entries")

    def csr(lists):
        ptr = np.zeros(len(lists) + 1, dtype=np.int32)
        ptr[1:] = np.cumsum([len(x) for x in lists])
        flat = np.array([v for x in lists for v in x], dtype=np.int32)
        return ptr, flat

    seq_ptr, seq_term = csr(seq_lists)
    pend_ptr, pend_term = csr(pend_lists)
    return {
        "qclass": qclass,
        "cls_ptr": cls_ptr.astype(np.int32),
        "job_seq": job_seq,
        "job_pend": job_pend,
        "job_lcp": job_lcp,
        "seq_ptr": seq_ptr,
        "seq_term": seq_term,
        "pend_ptr": pend_ptr,
        "pend_term": pend_term,
        "jt_ptr": jt_ptr.astype(np.int32),
        "jt_tok": toks_all[order].astype(np.int32),
        "dense_id": dense_id,
        "dense_mask": dense_mask,
        "n_ch": n_ch,
        "chunk": chunk,
        "max_seq_len": max_len,
        "stats": {"lexer_states": lexer.n_states, "lexer_classes": len(cls_jobs), "jobs": J,
                  "jobs_per_class_max": int(max((k.size for k in cls_jobs), default=0)),
                  "terminal_sequences": len(used), "job_tokens": int(size.sum()),
                  "dense_jobs": int(dense.size), "listed_tokens": int(jt_ptr[-1])},
    }
