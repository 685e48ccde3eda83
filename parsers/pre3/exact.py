"""When the lexer front end reads the grammar's own language: a check of the terminals against the grammar.

The lexer front end (``front_end=lexer``) tokenises with the standard byte lexer of :mod:`gcdbench.parsers.lr.lexer`:
maximal munch over all terminals with one byte of lookahead, a tie going to the first terminal in Lark's order.
Its language is the harness's scannerless one (``Profile()``) on a grammar where that munch never takes a
decision the grammar could take otherwise. :func:`lexer_is_exact` proves it from two conditions on every lexeme
the terminals can begin (every state of the product automaton of all terminals' byte DFAs, ignored ones
included):

* **no tie**: a lexeme is a whole match of at most one terminal that is not ignored (two would let the grammar
  want the one the lexer did not pick);
* **no split the lexer refuses**: where the lexeme is a whole match of terminal ``T1``, no byte ``c`` that some
  terminal can continue it with (the lexer then goes on) is a first byte of a terminal that may follow ``T1`` in
  the grammar (FOLLOW over terminals; ignored text may follow every terminal, and every terminal may follow
  ignored text). Otherwise scannerless text could end ``T1`` there and start the next terminal with ``c``.

Where neither happens, at every point where scannerless text can end a lexeme the lexer ends it too (it goes on
only with a byte no following terminal begins with) and emits the one terminal it is; so both read a text as the
same terminals, and a prefix is viable for one exactly when for the other. The conditions are sufficient, not
necessary (they ignore which terminals the parser state allows), so a grammar can be refused that is in fact
exact: it then keeps the character level or the standard profile. JSON passes them (every terminal is followed by
punctuation or whitespace that no terminal continues with); SQL fails them (``SELECTx`` continues a keyword with
a letter that a following NAME begins with). ``tests/test_pre3.py`` audits the result against the scannerless
reference.
"""
from __future__ import annotations

from collections import deque

from gcdbench.parsers.regex_fsm import byte_dfa

#: product states explored before giving up (no proof: the caller keeps the other front end)
MAX_STATES = 20_000


def terminal_follow(cfg) -> dict[int, set[int]]:
    """FOLLOW over terminals of a :class:`~gcdbench.parsers.pre3.lalr.CFG`: terminal id -> ids of the terminals
    that can come right after it in a sentence (``$END``, the last id, where it can end one)."""
    n_t = cfg.n_t
    nullable: set[int] = set()
    first: dict[int, set[int]] = {n_t + i: set() for i in range(len(cfg.nonterminals))}
    changed = True
    while changed:   # nullable nonterminals and FIRST of every nonterminal (symbols: terminals < n_t)
        changed = False
        for lhs, rhs in cfg.rules:
            a = n_t + lhs
            f = first[a]
            before = len(f)
            all_null = True
            for s in rhs:
                if s < n_t:
                    f.add(s)
                    all_null = False
                    break
                f |= first[s]
                if s not in nullable:
                    all_null = False
                    break
            if all_null and a not in nullable:
                nullable.add(a)
                changed = True
            changed |= len(f) != before
    follow: dict[int, set[int]] = {s: set() for s in range(n_t + len(cfg.nonterminals))}
    changed = True
    while changed:
        changed = False
        for lhs, rhs in cfg.rules:
            trailer = set(follow[n_t + lhs])
            for s in reversed(rhs):
                before = len(follow[s])
                follow[s] |= trailer
                changed |= len(follow[s]) != before
                if s < n_t:
                    trailer = {s}
                elif s in nullable:
                    trailer = trailer | first[s]
                else:
                    trailer = set(first[s])
    return {t: follow[t] for t in range(n_t)}


def lexer_is_exact(cfg, terms, ignore) -> tuple[bool, str]:
    """(exact, why): whether the standard byte lexer over ``terms`` (``lalr.lark_grammar``'s terminal definitions,
    ``ignore`` the ignored names) reads grammar ``cfg`` exactly as scannerless text (module docstring); ``why``
    names the first condition that fails, or says what was checked."""
    names = [t[0] for t in terms]
    ignored = set(ignore)
    dfas = [byte_dfa(name, regex, icase) for name, regex, _lit, _ll, _prio, icase in terms]
    firsts = [frozenset(c for c in range(256) if d.start >= 0 and d.rows[d.start][c] >= 0) for d in dfas]
    tid = {n: i for i, n in enumerate(cfg.terminals)}
    follow = terminal_follow(cfg)
    ign_first = frozenset().union(*(firsts[i] for i, n in enumerate(names) if n in ignored))
    all_first = frozenset().union(*(firsts[i] for i, n in enumerate(names) if n not in ignored))
    after: dict[int, frozenset] = {}   # terminal index -> first bytes of what may follow its lexeme
    for i, n in enumerate(names):
        if n in ignored:
            after[i] = all_first
        elif n in tid:
            nxt = follow[tid[n]]
            after[i] = ign_first.union(*(firsts[j] for j, m in enumerate(names) if m in tid and tid[m] in nxt))
        else:   # in the lexer but in no rule: the parser refuses it wherever the lexer emits it
            after[i] = frozenset()
    succ = [[[(c, t) for c, t in enumerate(row) if t >= 0] for row in d.rows] for d in dfas]   # (byte, next) a state
    init = tuple((i, d.start) for i, d in enumerate(dfas) if d.start >= 0)
    seen = {init}
    todo = deque([init])   # breadth first: a tie or a split shows on a short lexeme, found before long ones
    while todo:
        if len(seen) > MAX_STATES:
            return False, f"not proven: over {MAX_STATES} lexer states explored"
        cur = todo.popleft()
        fin = [i for i, st in cur if dfas[i].accept[st]]
        kept = [i for i in fin if names[i] not in ignored]
        if len(kept) > 1:
            return False, f"terminals {names[kept[0]]} and {names[kept[1]]} match the same text"
        live: dict[int, list] = {}
        for i, st in cur:
            for c, t in succ[i][st]:
                live.setdefault(c, []).append((i, t))
        for i in fin:
            clash = after[i].intersection(live)
            if clash:
                c = min(clash)
                return False, (f"after a whole {names[i]}, byte {bytes([c])!r} both continues a lexeme and begins a "
                               "terminal that may follow it")
        for nxt in live.values():
            key = tuple(nxt)
            if key not in seen:
                seen.add(key)
                todo.append(key)
    return True, f"{len(seen)} lexer states: no tie, no split the lexer refuses"
