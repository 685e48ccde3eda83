"""Drawing off-gold token sequences from the reference checker's exact masks (the method is described in
``datasets/sampled.py``, which stores and loads them): the completion search, the per-step draw, the checks."""
from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from gcdbench.datasets.base import Dataset

#: bytes the completion search may use: printable ASCII, tab, line feed
COMPLETION_ALPHABET = bytes(range(0x20, 0x7F)) + b"\t\n"


@dataclass
class SamplerParams:
    """Knobs of :func:`sample_sequence` (stored in the dataset file)."""

    p_gold: float = 0.5          # probability of drawing among allowed tokens seen in the gold tokenizations
    p_stop: float = 0.05         # probability of ending early when the prefix is a sentence
    max_target: int = 64         # cap on the target length (tokens)
    lexing: str = "longest_match"   # reference mode the masks come from: longest_match | standard | scannerless
    max_search_states: int = 20_000  # cap of the byte-level completion search (the fallback of Completer)
    max_attempts: int = 5        # a sequence whose completion search fails is drawn again with a new attempt


class SamplingError(RuntimeError):
    """No sequence could be drawn (the completion search failed on every attempt); the message says where."""


# --------------------------------------------------------------------------------------------------
# drawing
# --------------------------------------------------------------------------------------------------
class Completer:
    """Shortest completions of a prefix, read off the reference checker's Earley charts.

    For a configuration ``(chart, terminal in progress, DFA state)`` of the checker, the cheapest way to a
    sentence is: finish the terminal (a shortest path in its DFA), then derive what the chart's items still
    expect, innermost first, each symbol by its shortest derivation (symbols cost the bytes of their shortest
    strings). ``F(o, A)``, the cost of finishing the parse once ``A`` is complete from column ``o``, is a
    shortest-path problem over the chart's columns (solved per column, earlier columns first, memoised). The
    text is built with and without the shortest ignored string (a space) between terminals and checked with the
    checker; a byte-level breadth-first search is the fallback. Reads the checker's internals (its interned
    configuration sets, charts and terminal automata).
    """

    def __init__(self, checker):
        self.rc = checker
        self.rules = checker.earley.rules
        self.start = checker.ir.start
        self.terms = checker.ir.terminals
        self._tmin: dict[str, bytes] = {}
        self._fcol: dict[int, tuple] = {}
        self._sym_cost, self._sym_rule = self._symbol_costs()
        ignored = [self.term_min(t) for t in sorted(checker._ignore)]
        self.separator = min(ignored, key=len) if ignored else None

    # -- shortest strings of terminals and symbols ------------------------------------------------------
    # bytes tried first among suffixes of equal length: printable ASCII, then space, then the rest
    _BYTE_ORDER = tuple(range(0x21, 0x7F)) + (0x20,) + tuple(b for b in range(256) if not 0x20 <= b < 0x7F)

    def _dfa_suffix(self, term: str, state: int) -> bytes | None:
        """Shortest bytes taking ``term``'s byte DFA from ``state`` to an accepting state (breadth first; the
        DFA reads UTF-8 only, so the result completes any character begun before ``state``)."""
        dfa = self.rc.dfas[term]
        if dfa.accepting(state):
            return b""
        parent = {state: None}
        queue = deque([state])
        while queue:
            q = queue.popleft()
            for byte in self._BYTE_ORDER:
                t = dfa.step(q, byte)
                if t is None or t in parent:
                    continue
                parent[t] = (q, byte)
                if dfa.accepting(t):
                    out = []
                    while parent[t] is not None:
                        t, byte_ = parent[t]
                        out.append(byte_)
                    return bytes(reversed(out))
                queue.append(t)
        return None

    def term_min(self, term: str) -> bytes:
        if term not in self._tmin:
            dfa = self.rc.dfas[term]
            got = self._dfa_suffix(term, dfa.start) if dfa.start is not None else None
            if got is None:
                raise SamplingError(f"terminal {term} matches no string")
            self._tmin[term] = got
        return self._tmin[term]

    def _symbol_costs(self):
        cost = {t: len(self.term_min(t)) for t in self.terms if t not in self.rc._ignore}
        best_rule: dict[str, int] = {}
        changed = True
        while changed:
            changed = False
            for i, r in enumerate(self.rules):
                if all(x in cost for x in r.expansion):
                    c = sum(cost[x] for x in r.expansion)
                    if c < cost.get(r.origin, float("inf")):
                        cost[r.origin], best_rule[r.origin] = c, i
                        changed = True
        return cost, best_rule

    def _expand(self, symbols, out: list[str]) -> None:
        for x in symbols:
            if x in self.terms:
                out.append(x)
            else:
                self._expand(self.rules[self._sym_rule[x]].expansion, out)

    def rest_cost(self, ri: int, dot: int) -> int:
        return sum(self._sym_cost[x] for x in self.rules[ri].expansion[dot:])

    # -- finishing the parse from a chart -----------------------------------------------------------------
    def _f_node(self, node) -> dict:
        """``{A: (cost, back)}``: the cost of finishing the parse once ``A`` is complete from Earley node ``node``
        (the reference's :class:`~gcdbench.parsers.reference.Node`; items in sorted order, so ties break alike in
        every process); ``back`` is the item ``(rule, dot, origin node)`` whose rest is derived next (None: ``A`` is the start symbol and ``node`` the root, the parse is
        done)."""
        key = id(node)
        hit = self._fcol.get(key)
        if hit is not None and hit[0] is node:
            return hit[1]
        f: dict[str, tuple] = {self.start: (0, None)} if node is self.rc.earley.root else {}
        same = []
        for ri, d, org in sorted(node.items):
            exp = self.rules[ri].expansion
            if d >= len(exp) or exp[d] in self.terms:
                continue
            rest = self.rest_cost(ri, d + 1)
            if org >= 0:
                on = self.rc.earley.node(org)
                up = self._f_node(on).get(self.rules[ri].origin)
                if up is not None and rest + up[0] < f.get(exp[d], (float("inf"),))[0]:
                    f[exp[d]] = (rest + up[0], (ri, d, on))
            else:
                same.append((ri, d, rest))
        changed = True
        while changed:   # items predicted at this node: relax until nothing improves (costs are >= 0)
            changed = False
            for ri, d, rest in same:
                up = f.get(self.rules[ri].origin)
                sym = self.rules[ri].expansion[d]
                if up is not None and rest + up[0] < f.get(sym, (float("inf"),))[0]:
                    f[sym] = (rest + up[0], (ri, d, node))
                    changed = True
        self._fcol[key] = (node, f)
        return f

    def finish(self, node) -> tuple[float, list[str]]:
        """Cost and terminal sequence of the cheapest way from Earley node ``node`` (at a terminal boundary) to a
        sentence."""
        if node.accepting:
            return 0, []
        best = (float("inf"), None)
        for ri, d, org in sorted(node.items):
            org = node if org < 0 else self.rc.earley.node(org)
            up = self._f_node(org).get(self.rules[ri].origin)
            if up is not None:
                c = self.rest_cost(ri, d) + up[0]
                if c < best[0]:
                    best = (c, (ri, d, org))
        if best[1] is None:
            return float("inf"), []
        out: list[str] = []
        ri, d, org = best[1]
        self._expand(self.rules[ri].expansion[d:], out)
        back = self._f_node(org)[self.rules[ri].origin][1]
        while back is not None:
            ri, d, org = back
            self._expand(self.rules[ri].expansion[d + 1:], out)
            back = self._f_node(org)[self.rules[ri].origin][1]
        return best[0], out

    def candidates(self, sid: int) -> list[tuple[float, bytes, list[str]]]:
        """``(cost, suffix of the terminal in progress, terminals after it)`` per configuration of ``sid``."""
        out = []
        for node, term, q, _rivals in self.rc._sets[sid]:
            if term is None:
                cost, seq = self.finish(node)
                out.append((cost, b"", seq))
                continue
            head = self._dfa_suffix(term, q)
            if head is None:
                continue
            after = self.rc._end(node, term)
            cost, seq = self.finish(after)
            out.append((cost + len(head), head, seq))
        return sorted(out, key=lambda c: (c[0], len(c[2])))

    def complete(self, sid: int, max_states: int = 20_000) -> bytes | None:
        """A short byte string that takes state ``sid`` to a sentence (checked), or None."""

        rc = self.rc
        if rc.accepts(sid):
            return b""
        for cost, head, seq in self.candidates(sid):
            if cost == float("inf"):
                break
            pieces = [self.term_min(t) for t in seq]
            texts = [head + b"".join(pieces)]
            if self.separator is not None and pieces:   # a space between terminals, or before the first too
                texts.insert(0, head + self.separator.join(pieces))
                texts.append(head + self.separator + self.separator.join(pieces))
            for text in texts:
                if text and rc.accepts(rc.advance(sid, text)):
                    return text
        return shortest_completion(rc, sid, max_states)


def shortest_completion(checker, sid: int, max_states: int = 200_000) -> bytes | None:
    """The shortest byte string over :data:`COMPLETION_ALPHABET` that takes state ``sid`` to a sentence
    (breadth-first over the checker's states), or None when none is found within ``max_states`` states."""
    from gcdbench.parsers.reference import DEAD

    if checker.accepts(sid):
        return b""
    parent: dict[int, tuple[int, int] | None] = {sid: None}
    queue = deque([sid])
    while queue:
        s = queue.popleft()
        for b in COMPLETION_ALPHABET:
            t = checker.step(s, b)
            if t == DEAD or t in parent:
                continue
            parent[t] = (s, b)
            if checker.accepts(t):
                out = []
                while parent[t] is not None:
                    t, byte = parent[t]
                    out.append(byte)
                return bytes(reversed(out))
            if len(parent) > max_states:
                return None
            queue.append(t)
    return None


class _Vocab:
    """The vocabulary sorted by bytes (for a mask walk that also returns each allowed token's next state) and
    token ids by their bytes (for the tokens that spell a prefix of a completion)."""

    def __init__(self, tokenizer):
        tb = tokenizer.token_bytes
        self.by_bytes: dict[bytes, list[int]] = {}
        for i, b in enumerate(tb):
            if b:
                self.by_bytes.setdefault(b, []).append(i)
        self.max_len = max(len(b) for b in self.by_bytes)
        self.order = sorted((i for i, b in enumerate(tb) if b), key=lambda i: tb[i])
        self.lcp = [0] * len(self.order)
        for k in range(1, len(self.order)):
            a, b = tb[self.order[k - 1]], tb[self.order[k]]
            m = min(len(a), len(b))
            j = 0
            while j < m and a[j] == b[j]:
                j += 1
            self.lcp[k] = j
        self.token_bytes = tb

    def prefixes_of(self, data: bytes) -> list[int]:
        out = []
        for k in range(1, min(len(data), self.max_len) + 1):
            out.extend(self.by_bytes.get(data[:k], ()))
        return out

    def next_states(self, checker, sid: int) -> dict[int, list[int]]:
        """Allowed tokens (EOS aside) grouped by the checker state they lead to: ``{state: [token ids]}``. The
        same walk as the reference's full mask (shared prefixes of neighbouring tokens are stepped once)."""
        from gcdbench.parsers.reference import DEAD

        groups: dict[int, list[int]] = {}
        stack = [sid]
        step = checker.step
        for idx, keep in zip(self.order, self.lcp):
            del stack[keep + 1:]
            s = stack[-1]
            if s == DEAD:
                continue
            for b in self.token_bytes[idx][keep:]:
                s = step(s, b)
                stack.append(s)
                if s == DEAD:
                    break
            if s != DEAD:
                groups.setdefault(s, []).append(idx)
        return groups


def sample_sequence(checker, tokenizer, rng: random.Random, target: int, gold_vocab: np.ndarray,
                    params: SamplerParams, vocab: _Vocab | None = None, completer: Completer | None = None) -> dict:
    """Draw one sequence (see the module docstring). Returns ``{"ids", "target_len", "closing_steps"}``;
    raises :class:`SamplingError` when the completion search fails."""
    from gcdbench.parsers.reference import DEAD

    vocab = vocab or _Vocab(tokenizer)
    completer = completer or Completer(checker)
    tb = tokenizer.token_bytes
    sid = checker.initial()
    ids: list[int] = []
    closing = 0
    while True:
        groups = vocab.next_states(checker, sid)
        can_end = checker.accepts(sid)
        if len(ids) >= target or not groups:
            if can_end:
                break
            completion = completer.complete(sid, params.max_search_states)
            if not completion:
                raise SamplingError(f"no completion found (byte search capped at {params.max_search_states} states) after "
                                    f"{tokenizer.decode(ids)[-80:]!r}")
            tok = vocab.prefixes_of(completion)[-1]   # the longest token that spells a prefix of it
            closing += 1
            if closing > 4 * params.max_target + 64:
                raise SamplingError(f"closing did not end within {closing - 1} tokens after "
                                    f"{tokenizer.decode(ids)[-80:]!r}")
        else:
            if can_end and rng.random() < params.p_stop:
                break
            seen = []
            if rng.random() < params.p_gold:
                allowed = np.fromiter((t for ts in groups.values() for t in ts), dtype=np.int64)
                seen = np.intersect1d(allowed, gold_vocab)
            if len(seen):
                tok = int(seen[rng.randrange(len(seen))])
            else:   # a next state uniformly, then a token that leads there (groups ordered by their least token
                # id, which does not depend on the order in which the checker numbered its states)
                ordered = sorted(groups.values(), key=min)
                members = ordered[rng.randrange(len(ordered))]
                tok = members[rng.randrange(len(members))]
        sid = checker.advance(sid, tb[tok])
        if sid == DEAD:   # cannot happen for a token of the mask; a checker fault if it does
            raise SamplingError(f"token {tok} ({tb[tok]!r}) of the mask killed the prefix {tokenizer.decode(ids)!r}")
        ids.append(int(tok))
    return {"ids": ids, "target_len": target, "closing_steps": closing}


def check_sequence(grammar, tokenizer, ids: list[int], lexings=("scannerless", "longest_match")) -> str | None:
    """None when every prefix of ``ids`` is viable and the whole text is a sentence under each reading in
    ``lexings``; else what fails."""
    from gcdbench.parsers.reference import DEAD

    for lexing in lexings:
        rc = _checker(grammar, lexing)
        sid = rc.initial()
        for k, t in enumerate(ids):
            sid = rc.advance(sid, tokenizer.token_bytes[t])
            if sid == DEAD:
                return f"{lexing}: prefix of {k + 1} tokens is not viable"
        if not rc.accepts(sid):
            return f"{lexing}: the text is not a sentence"
    return None


_CHECKERS: dict = {}


def _checker(grammar, lexing: str):
    from gcdbench.parsers.base import Profile
    from gcdbench.parsers.reference import ReferenceChecker

    key = (grammar.key(), lexing)
    if key not in _CHECKERS:
        _CHECKERS[key] = ReferenceChecker(grammar, Profile(lexing=lexing))
    return _CHECKERS[key]


def generate(source: Dataset, tokenizer, n: int = 30, seed: int = 0, params: SamplerParams | None = None,
             progress=None) -> list[dict]:
    """``n`` sequences for the grammar of ``source`` (its gold samples give the target lengths and the gold
    vocabulary), each checked with :func:`check_sequence`. Deterministic for a given seed."""
    params = params or SamplerParams()
    from gcdbench.parsers.reference import ReferenceChecker

    if params.lexing not in ReferenceChecker.LEXING:
        raise ValueError(f"lexing must be one of {ReferenceChecker.LEXING}, not {params.lexing!r}")
    if not source.samples:
        raise ValueError(f"dataset {source.name!r} has no samples to take target lengths from")
    checker = _checker(source.grammar, params.lexing)
    gold = [s.ids(tokenizer) for s in source.samples]
    gold_vocab = np.unique(np.array([t for ids in gold for t in ids], dtype=np.int64))
    lengths = [len(ids) for ids in gold]
    vocab = _Vocab(tokenizer)
    completer = Completer(checker)
    out = []
    for i in range(n):
        for attempt in range(params.max_attempts):
            rng = random.Random(f"{seed}:{i}:{attempt}")
            target = max(1, min(params.max_target, lengths[rng.randrange(len(lengths))]))
            t0 = time.perf_counter()
            try:
                seq = sample_sequence(checker, tokenizer, rng, target, gold_vocab, params, vocab, completer)
            except SamplingError as err:
                last_error = err
                continue
            problem = check_sequence(source.grammar, tokenizer, seq["ids"],
                                     tuple(dict.fromkeys(("scannerless", params.lexing))))
            if problem:
                raise SamplingError(f"sequence {i} (attempt {attempt}) failed its check: {problem}")
            text = tokenizer.decode(seq["ids"]).decode("utf-8")
            out.append({"id": f"s{i:03d}", "rng": f"{seed}:{i}:{attempt}", **seq, "text": text,
                        "seconds": round(time.perf_counter() - t0, 3)})
            break
        else:
            raise SamplingError(f"sequence {i}: every one of {params.max_attempts} attempts failed ({last_error})")
        if progress:
            progress(i + 1, n, out[-1])
    return out
