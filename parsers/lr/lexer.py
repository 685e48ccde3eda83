"""The LR engines' lexer (PSC, Pre³): one deterministic byte automaton built from Lark's terminal definitions,
and its run time (a token's bytes through the automaton; the lexeme EOS ends).

The lexer is a deterministic finite-state transducer over bytes (the GreatGramma-style lexer that PSC
reuses, paper sec 3.1):

* its states are the states of the product DFA of all terminals (including ``%ignore`` ones), each the
  minimal UTF-8 byte DFA of :mod:`gcdbench.parsers.regex_fsm` that the reference checker and Valiant use
  (so regex semantics, Python ``re``'s, are the same);
* on byte ``c`` in state ``s``: if some terminal can extend the current lexeme with ``c`` the lexer moves
  on without output; otherwise, if the lexeme so far is a whole terminal, it *emits* that terminal (the
  "winner", see below) and restarts the next lexeme from ``c``; otherwise it dies. This is maximal munch
  with one byte of lookahead (no backtracking), the behaviour of Lark's lexers on ordinary grammars;
* winner of a lexeme matched by several terminals: Lark's order — higher ``priority`` first, then string
  literals before regexes (what Lark's ``unless`` callback does for keywords matched by a NAME regex),
  then the longer literal, then the name. Ignored terminals are dropped from the output.

Every terminal is in every lexer state (a *standard* lexer, not Lark's contextual one; see
``parsers/psc/README.md`` for where that differs).
"""
from __future__ import annotations

import numpy as np

from gcdbench.parsers.base import CompileError
from gcdbench.parsers.regex_fsm import byte_dfa

IGNORED = -2   # "emits" an ignored terminal (nothing reaches the parser)


def lark_terminals(lk) -> list[tuple]:
    """The terminal definitions of a built ``lark.Lark`` in the form :class:`ByteLexer` takes:
    ``(name, regex, is_literal, literal_len, priority, ignore_case)``."""
    terms = []
    for t in lk.terminals:
        pat = t.pattern
        is_lit = pat.type == "str"
        terms.append((t.name, pat.to_regexp(), is_lit, len(pat.value) if is_lit else 0, t.priority,
                      "i" in pat.flags))
    return terms


def lex_bytes(step_state, step_emit, q: int, data: bytes, emit) -> int:
    """Run a token's bytes from lexer state ``q`` (``step_state``/``step_emit`` as nested lists, the fast form
    for Python indexing), calling ``emit(terminal)`` for each terminal the lexer emits (ignored text emits
    nothing); returns the new lexer state, or -1 when a byte is dead or ``emit`` returns False."""
    for c in data:
        e = step_emit[q][c]
        q = step_state[q][c]
        if q < 0:
            return -1
        if e >= 0 and not emit(e):
            return -1
    return q


def final_terminal(winner, q: int) -> int | None:
    """What EOS in lexer state ``q`` emits before ``$END``: the terminal the lexeme in progress is, None when
    there is none to emit (empty or ignored lexeme), -1 when the lexeme is not a whole terminal (EOS refused)."""
    w = winner[q]
    if q == 0 or w == IGNORED:
        return None
    return w if w >= 0 else -1


class ByteLexer:
    """Arrays: ``trans[s, c]`` (next state inside the lexeme, -1 none), ``winner[s]`` (terminal index whose
    whole match the lexeme is, -1 none, ``IGNORED`` for an ignored terminal), and the one-step transducer
    ``step_state[s, c]`` / ``step_emit[s, c]`` (emitted terminal index, -1 none, ``IGNORED``)."""

    def __init__(self, terminals, ignore, leading_ignore: bool = True, max_states: int = 200_000, progress=None):
        # terminals: list of (name, regex, is_literal, literal_len, priority, ignore_case); progress: a
        # build.Progress (log records, time budget) or None
        self.names = [t[0] for t in terminals]
        self.ignore = set(ignore)
        dfas = [byte_dfa(name, regex, icase) for name, regex, _lit, _ll, _prio, icase in terminals]
        order = {}
        for i, (name, _r, lit, llen, prio, _ic) in enumerate(terminals):
            order[i] = (-prio, 0 if lit else 1, -llen, name)
        # each byte DFA is minimal (partial UTF-8 characters with the same future are one state), so the
        # product's states stay few without any canonicalisation here
        init = tuple((i, d.start) for i, d in enumerate(dfas) if d.start >= 0)
        # state 0 starts the text; without leading_ignore an ignored terminal may not come first
        init0 = init if leading_ignore else tuple(p for p in init if self.names[p[0]] not in self.ignore)
        index = {init0: 0}
        states = [init0]
        if init not in index:
            index[init] = 1
            states.append(init)
        rows = []
        k = 0
        while k < len(states):
            if progress is not None and k % 32 == 0:
                progress.tick("lexer automaton", lambda: f"{k:,} of {len(states):,} states expanded "
                                                         f"({len(terminals)} terminals)")
            cur = states[k]
            row = np.full(256, -1, dtype=np.int32)
            for c in range(256):
                nxt = []
                for i, st in cur:
                    t = dfas[i].rows[st][c]
                    if t >= 0:
                        nxt.append((i, t))
                if nxt:
                    key = tuple(nxt)
                    j = index.get(key)
                    if j is None:
                        j = index[key] = len(states)
                        states.append(key)
                        if len(states) > max_states:
                            raise CompileError(
                                f"psc: the lexer automaton exceeds max_lexer_states={max_states} states "
                                f"({len(terminals)} terminals); PSC walks the whole vocabulary once per lexer "
                                "state, so the construction would take very long (raise "
                                "engine.max_lexer_states to try anyway)")
                    row[c] = j
            rows.append(row)
            k += 1
        trans = np.stack(rows)
        winner = np.full(len(states), -1, dtype=np.int32)
        for s, cur in enumerate(states):
            fin = [i for i, st in cur if dfas[i].accept[st]]
            if fin:
                best = min(fin, key=lambda i: order[i])
                winner[s] = IGNORED if self.names[best] in self.ignore else best
        self.raw_states = len(states)
        restart_raw = index[init]
        trans, winner, cls = _minimize(trans, winner)
        self.restart = int(cls[restart_raw])
        n = len(winner)
        self.n_states = n
        self.trans = trans
        self.winner = winner
        # one-step transducer
        step_state = self.trans.copy()
        step_emit = np.full((n, 256), -1, dtype=np.int32)
        restart = self.trans[self.restart]
        for s in range(n):
            if winner[s] != -1:
                hole = (self.trans[s] < 0) & (restart >= 0)
                step_state[s, hole] = restart[hole]
                step_emit[s, hole] = winner[s]
        self.step_state = step_state
        self.step_emit = step_emit
        # terminals a pending lexeme can still become (winners of reachable states), None = may be ignored
        reach_w = [set() for _ in range(n)]
        for s in range(n):
            if winner[s] != -1:
                reach_w[s].add(int(winner[s]))
        changed = True
        succ = [np.unique(self.trans[s][self.trans[s] >= 0]) for s in range(n)]
        while changed:
            changed = False
            for s in range(n - 1, -1, -1):
                acc = reach_w[s]
                before = len(acc)
                for t in succ[s]:
                    acc |= reach_w[t]
                if len(acc) != before:
                    changed = True
        self.pending: list[frozenset | None] = [
            None if IGNORED in w else frozenset(w) for w in reach_w
        ]
        self.pending[0] = None   # the empty lexeme: a lexeme boundary, anything may come

    def lex(self, state: int, data: bytes):
        """Run ``data`` from ``state``: (end state or -1, list of emitted terminal indices)."""
        out = []
        ss, se = self.step_state, self.step_emit
        for c in data:
            e = se[state, c]
            state = int(ss[state, c])
            if state < 0:
                return -1, out
            if e >= 0:
                out.append(int(e))
        return state, out


def _minimize(trans: np.ndarray, winner: np.ndarray):
    """Moore partition refinement (vectorized); state 0 stays state 0."""
    _, cls = np.unique(winner, return_inverse=True)
    count = cls.max() + 1
    while True:
        succ = np.where(trans >= 0, cls[np.maximum(trans, 0)], -1)
        sig = np.concatenate([cls[:, None], succ], axis=1)
        sig = np.ascontiguousarray(sig.astype(np.int32))
        rows = sig.view(np.dtype((np.void, sig.shape[1] * 4))).reshape(-1)
        _, new = np.unique(rows, return_inverse=True)
        new = new.reshape(-1)
        c2 = new.max() + 1
        cls = new
        if c2 == count:
            break
        count = c2
    # renumber so that the initial state is 0, others by first occurrence
    order = {}
    order[int(cls[0])] = 0
    for c in cls.tolist():
        if c not in order:
            order[c] = len(order)
    remap = np.array([order[c] for c in range(count)], dtype=np.int32)
    cls = remap[cls]
    rep = np.zeros(count, dtype=np.int64)
    rep[cls[::-1]] = np.arange(len(cls))[::-1]
    t = trans[rep]
    t = np.where(t >= 0, cls[np.maximum(t, 0)], -1).astype(np.int32)
    return t, winner[rep].astype(np.int32), cls

