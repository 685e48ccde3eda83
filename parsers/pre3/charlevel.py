"""The character-level front end: the grammar expanded down to bytes, so the DPDA reads token bytes directly.

Seed 004 builds its DPDA over characters (JSON's terminals are single characters or short literals). Our
grammars have regex terminals and ``%ignore``; expanding them keeps the harness's scannerless language
exactly (``Profile()``):

* every terminal (ignored ones too) becomes its byte automaton (the reference checker's ``TerminalDFA``, so
  UTF-8 and case folding are the reference's), written as a right-linear grammar: nonterminal ``T@s`` per
  automaton state ``s``, ``T@s -> <byte class> T@s'`` per transition and ``T@s -> ε`` when ``s`` accepts;
* bytes are grouped into classes that every automaton treats alike; the classes are the DPDA's terminals;
* a use of terminal ``X`` in a rule becomes ``X^ -> X@start IGN``, with ``IGN -> ε | IGN I@start`` over the
  ignored terminals ``I`` (ignored text after each terminal, never before the first one, as the reference).

The expansion is LALR(1) only when no lexeme boundary needs more than one byte of lookahead and no text has
two readings. Keywords next to a NAME regex break both (``count`` is a keyword and a NAME; ``SELECTx`` may
be ``SELECT`` + ``x``), so the SQL grammars get conflicts here and fall back to the lexer front end (see
README). ``char_grammar`` returns the expanded grammar; ``build_tables`` lists its conflicts.
"""
from __future__ import annotations

import numpy as np

from gcdbench.parsers.base import CompileError
from gcdbench.parsers.pre3.lalr import CFG, END
from gcdbench.parsers.reference import TerminalDFA


def _byte_dfa(name: str, regex: str, icase: bool, max_states: int):
    """(transition rows [n, 256] with -1 for none, accepting flags); state 0 is the start. The reference's own
    minimal byte automaton (regex_fsm), renumbered breadth first from its start."""
    dfa = TerminalDFA(name, regex, icase)
    if dfa.start is None:
        return np.full((0, 256), -1, dtype=np.int32), []
    index = {dfa.start: 0}
    states = [dfa.start]
    rows = []
    k = 0
    while k < len(states):
        row = np.full(256, -1, dtype=np.int32)
        for b, t in enumerate(dfa.rows[states[k]]):
            if t < 0:
                continue
            j = index.get(t)
            if j is None:
                j = index[t] = len(states)
                states.append(t)
                if len(states) > max_states:
                    raise CompileError(f"pre3: the byte automaton of terminal {name} exceeds {max_states} states")
            row[b] = j
        rows.append(row)
        k += 1
    return np.stack(rows), [dfa.accepting(s) for s in states]


def char_grammar(cfg: CFG, terms: list[tuple], ignore: list[str], max_states: int = 20_000):
    """(CFG over byte classes, class of each byte (-1: no terminal uses it), number of automaton states).

    ``cfg`` is the token-level grammar (``lalr.lark_grammar``), ``terms`` Lark's terminal definitions."""
    defs = {t[0]: t for t in terms}
    wanted = [n for n in cfg.terminals if n != END] + [n for n in ignore if n not in cfg.terminals]
    dfas = {}
    for n in wanted:
        _name, regex, _lit, _ll, _prio, icase = defs[n]
        dfas[n] = _byte_dfa(n, regex, icase, max_states)
    # byte classes: bytes every automaton state treats alike
    cols = np.concatenate([rows for rows, _acc in dfas.values() if len(rows)], axis=0) if dfas else \
        np.full((0, 256), -1, dtype=np.int32)
    used = (cols >= 0).any(axis=0)
    sig = np.ascontiguousarray(cols.T)
    keys = sig.view(np.dtype((np.void, sig.shape[1] * 4))).reshape(-1)
    byte_class = np.full(256, -1, dtype=np.int32)
    cls_of_key: dict = {}
    for b in range(256):
        if used[b]:
            byte_class[b] = cls_of_key.setdefault(keys[b].tobytes(), len(cls_of_key))
    n_cls = len(cls_of_key)
    rep = {}
    for b in range(256):
        if byte_class[b] >= 0:
            rep.setdefault(int(byte_class[b]), b)
    cls_names = [f"B{c}_{_show(rep[c])}" for c in range(n_cls)]

    rules: list[tuple[str, list[tuple[str, bool]]]] = []
    for n, (rows, acc) in dfas.items():
        for s in range(len(rows)):
            done = set()
            for b in range(256):
                t = rows[s, b]
                if t < 0 or byte_class[b] in done:
                    continue
                done.add(int(byte_class[b]))
                rules.append((f"{n}@{s}", [(cls_names[byte_class[b]], True), (f"{n}@{t}", False)]))
            if acc[s]:
                rules.append((f"{n}@{s}", []))
    ign = [n for n in ignore if len(dfas[n][0])]
    if ign:
        rules += _ignore_run_rules([dfas[n] for n in ign], byte_class, cls_names)
    for n in cfg.terminals:
        if n == END:
            continue
        if len(dfas[n][0]) == 0:
            continue   # a terminal that matches nothing: its uses are unproductive
        rules.append((f"{n}^", [(f"{n}@0", False)] + ([("IGN@0", False)] if ign else [])))
    n_t = cfg.n_t
    for lhs, rhs in cfg.rules[1:]:
        rules.append((cfg.nonterminals[lhs], [(f"{cfg.sym_name(s)}^", False) if s < n_t else
                                               (cfg.nonterminals[s - n_t], False) for s in rhs]))
    start = cfg.nonterminals[cfg.rules[0][1][0] - n_t]
    while True:   # drop rules that use a nonterminal without rules (a terminal matching nothing), to a fixpoint
        have = {lhs for lhs, _ in rules}
        kept = [(lhs, rhs) for lhs, rhs in rules if all(t or s in have for s, t in rhs)]
        if len(kept) == len(rules):
            break
        rules = kept
    n_states = sum(len(r) for r, _a in dfas.values())
    return CFG.build(start, rules, cls_names), byte_class, n_states


def _ignore_run_rules(dfas: list, byte_class: np.ndarray, cls_names: list[str]) -> list:
    """Right-linear rules ``IGN@k`` of one deterministic automaton for runs of ignored text, (I1 | I2 | ...)*.

    A list ``IGN -> ε | IGN I`` would be ambiguous (two spaces are one ``/[ ]+/`` or two), hence conflicts
    in every grammar with such an ``%ignore``; the subset construction reads each run one way. A state is a
    set of (ignored terminal, automaton state); where a piece may end, every ignored terminal may start."""
    starts = frozenset((i, 0) for i in range(len(dfas)))

    def close(st):
        return st | starts if any(dfas[i][1][s] for i, s in st) else st

    init = starts
    index = {init: 0}
    states = [init]
    rules = []
    k = 0
    while k < len(states):
        cur = states[k]
        done = set()
        for b in range(256):
            c = int(byte_class[b])
            if c < 0 or c in done:
                continue
            done.add(c)
            nxt = frozenset((i, int(dfas[i][0][s, b])) for i, s in cur if dfas[i][0][s, b] >= 0)
            if not nxt:
                continue
            nxt = close(nxt)
            j = index.get(nxt)
            if j is None:
                j = index[nxt] = len(states)
                states.append(nxt)
            rules.append((f"IGN@{k}", [(cls_names[c], True), (f"IGN@{j}", False)]))
        if k == 0 or any(dfas[i][1][s] for i, s in cur):
            rules.append((f"IGN@{k}", []))
        k += 1
    return rules


def _show(b: int) -> str:
    ch = chr(b)
    return ch if ch.isalnum() else f"x{b:02x}"
