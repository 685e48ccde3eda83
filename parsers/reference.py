r"""The reference checker: exact, simple, slow by design. Every engine's masks are audited against it.

Semantics (the definition the harness uses for "the grammar's language"):

* A byte string ``w`` is a *sentence* iff it can be cut into pieces ``w = t1 i1 t2 i2 ... tn in`` where each
  ``tk`` is matched (whole) by the regex of a terminal ``Tk``, each ``ik`` is a possibly empty run of matches
  of ``%ignore``d terminals, and ``T1 ... Tn`` is derivable from the start symbol. Ignored text may not come
  first (XGrammar and LLGuidance both refuse leading whitespace; the empty sentence, if derivable, is ``""``).
  This is *scannerless*: no longest match, no terminal priorities, no keyword reservation (a NAME regex may
  match ``select``). In Lark's terms: the sentences of ``Lark(grammar, parser="earley",
  lexer="dynamic_complete")`` that do not begin with ignored text (``tests/test_lark_oracle.py``).
* A prefix ``p`` is *viable* iff some continuation ``s`` makes ``p s`` a sentence. Token ``v`` is allowed
  after ``p`` iff ``p + bytes(v)`` is viable; EOS is allowed iff ``p`` is a sentence. Special tokens have no
  bytes and are never allowed.
* Regexes mean exactly what Python's ``re`` (hence Lark) makes of them on ``str``: ``\s \w \d`` are
  Unicode classes, ``.`` is any character but ``\n``, and case-insensitive terminals fold case as ``re`` does
  (``"select"i`` also matches ``ſelect`` with the long s, ``"in"i`` matches ``ın`` and ``İN``); see
  :mod:`gcdbench.parsers.regex_fsm`. Bytes are decoded as UTF-8, so a token may end inside a multi-byte
  character (the prefix is viable iff some completion of that character is).
* :class:`ReferenceChecker` also executes every other :class:`~gcdbench.parsers.base.Profile` (the languages
  engines declare), exactly; see its docstring.

How: an Earley recognizer over *terminals* on a lattice of boundaries, and on top of it a set of lexing
configurations ``(node, piece in progress, DFA state)`` advanced byte by byte with one minimal UTF-8 byte DFA per
terminal; ``node`` is the Earley column of the boundary where the piece began. Every piece that ends at a byte
position ends at *one* boundary node (the scans of all of them merged, hash-consed by their seed items), so the
state after ``n`` bytes holds at most one node per position and one configuration per (position, terminal, DFA
state), however many ways the bytes can be cut into terminals (a terminal that may follow itself gives
exponentially many cuts). Sets of configurations are interned and their byte transitions memoised; a
whole-vocabulary mask is a walk over the vocabulary in sorted order (reusing the common prefix of neighbours) with
its own memo, dropped after the mask, and nodes no state refers to any more are freed. Grammars are reduced
first (unproductive/unreachable rules dropped), which makes "some configuration is alive" equivalent to
viability.

**Bound.** With ``n`` the prefix length in bytes and ``|G|`` the grammar size: a state has O(|T| |Q| n)
configurations (terminals, DFA states), a node O(|G| n) items, and building one node costs O(|G|^2 n^2) at worst
(completion over the items of earlier nodes), so advancing one byte is O(|G|^2 n^2) and a whole prefix
O(|G|^2 n^3): Earley over bytes. On an unambiguous grammar a node's items are O(|G|) per origin that is still open,
which is O(1) on LR-like grammars (no right-recursive chains), so a byte costs O(|G|) there. A full mask is the
byte step times the trie nodes of the vocabulary that stay alive, memoised on equal configuration sets.
Under ``lexing="dynamic"`` the pieces ending at a position share a boundary only when they leave the same
shadows (below): a terminal whose DFA lives on long after accepting multiplies the configurations.
Memory: the interned states of the committed path (one per prefix byte and profile) plus one mask's walk.

Every profile (longest match, ``trailing_ignore=False`` included) keeps that one node per position: which pieces
may start or end at a boundary is decided by the terminals *that node* expects, the union over every parse of the
prefix, which is what LLGuidance's single Earley set does too (``tests/test_cliffs.py`` has the grammar where
"the terminals that cut path expects" would differ, and LLGuidance's masks there). Before, those two profiles kept
one node per cut path: exponential where a terminal may follow itself (an audit of LLGuidance on a fuzzed grammar
grew to 24 GB), and a different language from the engine they describe on such grammars.
"""
from __future__ import annotations

import functools
import itertools
import weakref

import numpy as np

from gcdbench.parsers.base import Engine, GrammarSpec, Profile, ids_to_mask
from gcdbench.parsers.grammar import GrammarIR, load_ir
from gcdbench.parsers.regex_fsm import byte_dfa

DEAD = -1

#: how pieces ending at one position share boundary nodes: ``position`` (one node: every profile), ``path`` (one per
#: cut path, exponential; for tests: where a profile's lexing does not depend on the parse, the two agree)
MERGE = ("position", "path")


# --------------------------------------------------------------------------------------------------
# Terminal DFAs over UTF-8 bytes
# --------------------------------------------------------------------------------------------------
class TerminalDFA:
    """One terminal's minimal byte automaton (shared with Valiant and PSC through ``regex_fsm``): states are
    ints, ``step`` gives the next one or None."""

    def __init__(self, name: str, regex: str, ignore_case: bool = False, case_fold: str = "python_re",
                 regex_classes: str = "unicode"):
        self.bytes = byte_dfa(name, regex, ignore_case, case_fold, regex_classes)
        self.char = self.bytes.char
        self.name = name
        self.rows = self.bytes.rows
        self.start = self.bytes.start if self.bytes.start >= 0 else None

    def step(self, state: int, byte: int):
        t = self.rows[state][byte]
        return None if t < 0 else t

    def accepting(self, state: int) -> bool:
        return self.bytes.accept[state]


# --------------------------------------------------------------------------------------------------
# Earley over terminals, one column per byte position (every cut that ends there merged)
# --------------------------------------------------------------------------------------------------
class Node:
    """An Earley column at one terminal boundary: the items of every terminal sequence (every cut of the bytes
    so far) that ends there. An item is ``(rule, dot, origin)``; ``origin`` is the ``serial`` of the node where
    the rule began, or -1 for this node itself. Items are tuples of ints, which Python's cycle collector does not
    track (a node's tens of thousands of items would otherwise make its full collections take 0.1 s pauses on
    long prefixes); a node keeps the nodes its pieces began at (``parents``) alive, and through them every
    origin its items name, and is freed by reference counting once no state uses it."""

    __slots__ = ("serial", "items", "waiting", "expected", "accepting", "parents", "__weakref__")

    def __init__(self, serial, items, waiting, expected, accepting, parents):
        self.serial = serial          # this node's number (items name their origin by it)
        self.items = items            # frozenset of (rule_idx, dot, origin serial or -1)
        self.waiting = waiting        # symbol -> tuple of the items whose dot is before it
        self.expected = expected      # frozenset of terminal names
        self.accepting = accepting
        self.parents = parents        # the nodes the pieces that end here began at


class Earley:
    """Earley over terminals on a lattice of boundaries. A boundary's node is built from the pieces that end
    there, ``ends = {(node where the piece began, terminal or None for an ignored piece)}``: the scanned items of
    each ``(node, terminal)``, plus every item of ``node`` for an ignored piece (ignored text is transparent),
    then the predict/complete closure. Nodes are hash-consed by that seed, so equal boundaries reached along
    different cuts are one node. With one node per byte position, a column has O(|G| n) items (n bytes so far)
    and its closure costs O(|G|^2 n^2) at worst: O(n^3) for a prefix of n bytes, as for Earley over bytes."""

    def __init__(self, ir: GrammarIR):
        self.ir = ir
        self.rules = list(ir.rules)
        self.by_origin: dict[str, list[int]] = {}
        for i, r in enumerate(self.rules):
            self.by_origin.setdefault(r.origin, []).append(i)
        self.nullable = ir.nullable
        self._nodes: weakref.WeakValueDictionary = weakref.WeakValueDictionary()   # serial -> live node
        self._serials = itertools.count()
        self._by_seed: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._by_ends: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self.root = self._close({(i, 0, -1) for i in self.by_origin.get(ir.start, [])}, ())

    def node(self, serial: int) -> Node:
        return self._nodes[serial]

    def _close(self, seed: set, parents: tuple) -> Node:
        """Predict/complete closure of a new node from its seed items (Aycock–Horspool for nullables)."""
        items, todo = set(seed), list(seed)
        waiting: dict[str, list] = {}
        rules, term, nullable, by_origin = self.rules, self.ir.terminals, self.nullable, self.by_origin
        nodes = self._nodes
        while todo:
            it = todo.pop()
            ri, dot, org = it
            exp = rules[ri].expansion
            if dot < len(exp):
                sym = exp[dot]
                waiting.setdefault(sym, []).append(it)
                if sym in term:
                    continue
                new = [(j, 0, -1) for j in by_origin.get(sym, ())]
                if sym in nullable:
                    new.append((ri, dot + 1, org))
            else:
                lhs = rules[ri].origin
                if org < 0:              # an empty derivation here: advance this node's own items
                    new = [(rj, d + 1, o) for (rj, d, o) in list(waiting.get(lhs, ()))]
                else:
                    new = [(rj, d + 1, org if o < 0 else o) for (rj, d, o) in nodes[org].waiting.get(lhs, ())]
            for x in new:
                if x not in items:
                    items.add(x)
                    todo.append(x)
        expected = frozenset(s for s in waiting if s in term)
        start = self.ir.start
        root = -1 if not parents else 0    # the root is serial 0, and the only node without parents
        accepting = any(d == len(rules[ri].expansion) and rules[ri].origin == start and o == root
                        for (ri, d, o) in items)
        node = Node(next(self._serials), frozenset(items), {k: tuple(v) for k, v in waiting.items()}, expected,
                    accepting, parents)
        nodes[node.serial] = node
        return node

    def boundary(self, ends: frozenset) -> Node:
        """The node after the pieces ``ends`` (a frozenset of ``(node, terminal or None)``) end here."""
        got = self._by_ends.get(ends)
        if got is not None:
            return got
        if len(ends) == 1:
            (node, t), = ends
            if t is None:              # only ignored text ended here: the same boundary as where it began
                return node
        seed = set()
        for node, t in ends:
            sn = node.serial
            if t is None:
                seed.update((ri, d, sn if o < 0 else o) for (ri, d, o) in node.items)
            else:
                seed.update((ri, d + 1, sn if o < 0 else o) for (ri, d, o) in node.waiting.get(t, ()))
        key = frozenset(seed)
        got = self._by_seed.get(key)
        if got is None:
            got = self._close(seed, tuple({n for n, _ in ends}))
            self._by_seed[key] = got
        self._by_ends[ends] = got
        return got


# --------------------------------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------------------------------
class ReferenceChecker:
    r"""Exact prefix viability for one grammar under one :class:`Profile`. States are small ints (interned
    configuration sets).

    ``Profile()`` (the default) is the harness's definition of the language. Every other profile is the
    language some engine implements, executed exactly (the audit compares an engine with both):

    * ``lexing="longest_match"``: *contextual* maximal munch: a piece may only end where no terminal allowed
      at its start (expected there by some parse of the prefix) could go on matching the next byte (no
      backtracking, no priorities: two terminals matching the same longest text are both kept). ``lexing="standard"``: maximal munch over *all*
      terminals, whether the parser allows them there or not, and of the terminals that match the same longest
      text only the first in lexer order makes the piece: higher priority, then a string literal (keywords are
      reserved), then the longer literal, then the name: the LR engines' lexer (``parsers/lr/lexer.py``), Lark's
      standard lexer on ordinary grammars. ``lexing="dynamic"``: each terminal takes only
      its *own* longest match, with backtracking: a piece of ``T`` ends at an accepting DFA state only if ``T``'s
      DFA, run on over the bytes that follow, accepts at no later position (other terminals may end elsewhere).
      A piece that ends while its DFA could still go on leaves that DFA state behind as an obligation (a
      "shadow") that travels with the configurations after it: the cut dies when the shadow accepts and is
      settled when it dies. GLRMask's lexing; Lark's ``lexer="dynamic"`` is the same except where Python's
      ``re`` prefers a shorter match (``/a|ab/``, lazy quantifiers). A prefix is viable when some cut of it keeps
      every shadow unaccepted over the bytes so far (a continuation that settles them is not searched for).
    * ``trailing_ignore=False``: ignored text may not start at a terminal boundary where no parse expects a
      further terminal, i.e. after a sentence that no terminal can extend (``SELECT a FROM t;`` + ``\n``);
      ignored text after a sentence that could still go on (``SELECT a FROM t`` + `` ``) stays allowed.
    * ``leading_ignore=True``: ignored text may also come before the first terminal.
    * ``case_fold`` and ``regex_classes``: how the terminals' regexes read case-insensitive parts and
      ``\s \w \d`` (see :mod:`gcdbench.parsers.regex_fsm`).
    * ``token_bytes="latin1"``: a candidate token of a mask (:meth:`full_mask_ids`, :meth:`allowed_tokens`) is
      checked as the UTF-8 text of its bytes each read as one code point (byte e9 as U+00E9, i.e. c3 a9); the
      prefix is advanced over its own bytes.
    """

    LEXING = ("scannerless", "longest_match", "standard", "dynamic")
    TOKEN_BYTES = ("utf8", "latin1")

    def __init__(self, grammar: GrammarSpec, profile: Profile = Profile()):
        if not isinstance(profile, Profile):
            raise TypeError(f"profile must be a gcdbench.parsers.base.Profile, not {type(profile).__name__}")
        if profile.lexing not in self.LEXING:
            raise ValueError(f"profile.lexing must be one of {self.LEXING}, not {profile.lexing!r}")
        if profile.token_bytes not in self.TOKEN_BYTES:
            raise ValueError(f"profile.token_bytes must be one of {self.TOKEN_BYTES}, not {profile.token_bytes!r}")
        self.grammar = grammar
        self.profile = profile
        self.longest = profile.lexing != "scannerless"
        self.standard = profile.lexing == "standard"
        self.dynamic = profile.lexing == "dynamic"   # each terminal's own longest match, with backtracking
        self.rivals = not self.dynamic
        self.ir = load_ir(grammar)
        self.dfas = {
            name: TerminalDFA(name, t.regex, t.ignore_case, profile.case_fold, profile.regex_classes)
            for name, t in self.ir.terminals.items()
        }
        # the standard lexer's order among terminals matching the same longest text (``parsers/lr/lexer.py``):
        # higher priority, then string literals (keywords are reserved), then the longer literal, then the name
        self._order = {name: (-t.priority, 0 if t.literal is not None else 1, -len(t.literal or ""), name)
                       for name, t in self.ir.terminals.items()}
        self._win_memo: dict = {}
        self.earley = Earley(self.ir)
        # How the pieces that end at one byte position share boundary nodes (:data:`MERGE`): one node, whose
        # expected terminals (the union over every parse) decide the longest match's rivals and trailing ignores.
        self.merge = "position"
        self._sets: list[frozenset] = []
        self._ids: dict[frozenset, int] = {}
        self._trans: dict[tuple[int, int], int] = {}
        self._accept: dict[int, bool] = {}
        self._ignore = frozenset(self.ir.ignore)
        first = None if profile.leading_ignore else "start"
        self._initial = self._intern(frozenset({(self.earley.root, None, first, None)}))

    # A configuration is (node, terminal_in_progress_or_None, dfa_state, rivals): ``node`` is the Earley node of
    # the boundary where the piece began. terminal None = at a boundary, where dfa_state is None, or "start" at
    # the very beginning (no ignored piece may come first). rivals (longest_match, standard): frozenset of
    # (terminal, dfa_state) of the other terminals allowed where the piece began that still match it; under
    # dynamic lexing the same slot holds the shadows (terminal, dfa_state) of earlier pieces whose terminal could
    # still match on (it must not accept again); None in scannerless mode.
    def _intern(self, configs: frozenset) -> int:
        if not configs:
            return DEAD
        sid = self._ids.get(configs)
        if sid is None:
            sid = self._ids[configs] = len(self._sets)
            self._sets.append(configs)
        return sid

    def _end(self, node, term):
        return self.earley.boundary(frozenset(((node, None if term in self._ignore else term),)))

    def _extendable(self, term, q, rivals, byte) -> bool:
        if self.dfas[term].step(q, byte) is not None:
            return True
        return any(self.dfas[t].step(r, byte) is not None for t, r in rivals)

    def _start_pieces(self, node, at_start: bool, byte: int, out: set, shadows: frozenset = frozenset()):
        ignore_here = not at_start and (self.profile.trailing_ignore or node.expected)
        allowed = node.expected | self._ignore if ignore_here else node.expected
        started = []
        for t in (self.dfas if self.standard else allowed):
            dfa = self.dfas[t]
            if dfa.start is not None:
                q2 = dfa.step(dfa.start, byte)
                if q2 is not None:
                    started.append((t, q2))
        for t, q2 in started:
            if t in allowed:
                rivals = None if not self.longest else (
                    frozenset(x for x in started if x[0] != t) if self.rivals else shadows)
                if not self.standard or self._can_win(t, q2, rivals):
                    out.add((node, t, q2, rivals))

    def _may_end(self, term, q, rivals, byte) -> bool:
        """May the piece of ``term`` end before ``byte`` (None: at the end of the input)?"""
        if not self.dfas[term].accepting(q):
            return False
        if not self.longest:
            return True
        if self.dynamic:   # not when the terminal accepts one byte on (a later acceptance is its shadow's)
            q2 = None if byte is None else self.dfas[term].step(q, byte)
            return q2 is None or not self.dfas[term].accepting(q2)
        if byte is not None and self._extendable(term, q, rivals, byte):
            return False
        if self.standard:   # the lexeme is the first terminal in lexer order that matches all of it
            key = self._order[term]
            return not any(self._order[t] < key and self.dfas[t].accepting(r) for t, r in rivals)
        return True

    def _can_win(self, term, q, rivals) -> bool:
        """Standard lexing: can the piece of ``term`` (DFA state ``q``, ``rivals`` matching the same text) still
        end as ``term``, i.e. does some continuation reach a text ``term`` matches and no terminal earlier in lexer
        order matches too? Without it a terminal that always loses (``/[a-z_]+/`` beside ``/[a-z0-9_]+/``) would
        keep prefixes viable that no sentence of the standard lexer's language extends. Searched over the product
        of ``term``'s DFA and the earlier rivals' (memoised)."""
        key = self._order[term]
        start = (q, frozenset((t, r) for t, r in rivals if self._order[t] < key))
        hit = self._win_memo.get((term, start))
        if hit is not None:
            return hit
        dfas, seen, todo, found = self.dfas, {start}, [start], False
        while todo and not found:
            qq, rs = todo.pop()
            if dfas[term].accepting(qq) and not any(dfas[t].accepting(r) for t, r in rs):
                found = True
                break
            for b in range(256):
                q2 = dfas[term].step(qq, b)
                if q2 is None:
                    continue
                nxt = (q2, frozenset((t, r2) for t, r in rs if (r2 := dfas[t].step(r, b)) is not None))
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        self._win_memo[(term, start)] = found
        return found

    def _next(self, configs: frozenset, byte: int) -> frozenset:
        """The configurations after one more byte (empty: dead)."""
        new: set = set()
        ends: dict = {}   # the shadows after this byte (dynamic lexing; else empty) -> the pieces that end here
        dfas = self.dfas
        for node, term, q, rivals in configs:
            if self.dynamic:
                rivals = self._shadows_on(rivals, byte)
                if rivals is None:   # an earlier piece's terminal accepts again: that cut was not its longest
                    continue
            if term is None:
                self._start_pieces(node, q == "start", byte, new, rivals or frozenset())
                continue
            q2 = dfas[term].step(q, byte)
            if q2 is not None:   # the piece goes on
                if self.dynamic:   # its shadows (stepped above) go on with it
                    new.add((node, term, q2, rivals))
                elif self.longest:
                    rivals2 = frozenset((t, r2) for t, r in rivals if (r2 := dfas[t].step(r, byte)) is not None)
                    if not self.standard or self._can_win(term, q2, rivals2):
                        new.add((node, term, q2, rivals2))
                else:
                    new.add((node, term, q2, None))
            if self._may_end(term, q, rivals, byte):   # the piece ends here
                shadows = (rivals | {(term, q2)} if q2 is not None else rivals) if self.dynamic else frozenset()
                ends.setdefault(shadows, []).append((node, None if term in self._ignore else term))
        for shadows, cut in ends.items():
            if self.merge == "position":     # one boundary for every piece that ends here (with these shadows)
                self._start_pieces(self.earley.boundary(frozenset(cut)), False, byte, new, shadows)
            else:                            # one per cut path (tests only)
                for e in set(cut):
                    self._start_pieces(self.earley.boundary(frozenset((e,))), False, byte, new, shadows)
        return frozenset(new)

    def _shadows_on(self, shadows, byte: int):
        """Dynamic lexing: ``shadows`` after one more byte (those whose terminal cannot go on are settled), or None
        when one of them accepts (the piece it was left by ended before its terminal's longest match)."""
        out = []
        for t, r in shadows or ():
            r2 = self.dfas[t].step(r, byte)
            if r2 is not None:
                if self.dfas[t].accepting(r2):
                    return None
                out.append((t, r2))
        return frozenset(out)

    def initial(self) -> int:
        return self._initial

    def step(self, sid: int, byte: int) -> int:
        if sid == DEAD:
            return DEAD
        key = (sid, byte)
        nxt = self._trans.get(key)
        if nxt is None:
            nxt = self._trans[key] = self._intern(self._next(self._sets[sid], byte))
        return nxt

    def _accepts(self, configs: frozenset) -> bool:
        for node, term, q, rivals in configs:
            if term is None:
                if node.accepting:
                    return True
            elif self._may_end(term, q, rivals, None) and self._end(node, term).accepting:
                return True
        return False

    def accepts(self, sid: int) -> bool:
        if sid == DEAD:
            return False
        acc = self._accept.get(sid)
        if acc is None:
            acc = self._accept[sid] = self._accepts(self._sets[sid])
        return acc

    def advance(self, sid: int, data: bytes) -> int:
        for b in data:
            sid = self.step(sid, b)
            if sid == DEAD:
                break
        return sid

    # -- convenience over bytes ----------------------------------------------------------------
    def is_viable(self, prefix: bytes) -> bool:
        return self.advance(self._initial, prefix) != DEAD

    def is_sentence(self, text: bytes) -> bool:
        return self.accepts(self.advance(self._initial, text))

    def allowed_tokens(self, prefix: bytes, token_ids, tokenizer) -> set[int]:
        """The subset of ``token_ids`` allowed after ``prefix`` (EOS included iff the prefix is a sentence)."""
        sid = self.advance(self._initial, prefix)
        out = set()
        if sid == DEAD:
            return out
        tb = read_vocab(tokenizer, self.profile.token_bytes)
        for t in token_ids:
            t = int(t)
            if t == tokenizer.eos_id:
                if self.accepts(sid):
                    out.add(t)
            elif tb[t] and self.advance(sid, tb[t]) != DEAD:
                out.add(t)
        return out

    def full_mask_ids(self, sid: int, tokenizer) -> np.ndarray:
        """All allowed token ids from state ``sid``: a walk over the vocabulary in sorted-bytes order. The walk's
        states are memoised for this walk only (equal configuration sets reached by different tokens share their
        transitions) and dropped after it, so memory stays that of one mask."""
        order, lcp = _sorted_vocab(tokenizer, self.profile.token_bytes)
        tb = read_vocab(tokenizer, self.profile.token_bytes)
        allowed = []
        root = self._sets[sid] if sid != DEAD else frozenset()
        memo: dict = {}
        nxt_of = self._next
        stack = [root]   # stack[d] = configurations after the first d bytes of the current token
        for idx, tok in zip(order.tolist(), lcp.tolist()):
            data = tb[idx]
            del stack[tok + 1:]
            s = stack[-1]
            if not s:
                continue
            for b in data[tok:]:
                key = (s, b)
                t = memo.get(key)
                if t is None:
                    t = memo[key] = nxt_of(s, b)
                s = t
                stack.append(s)
                if not s:
                    break
            if s:
                allowed.append(idx)
        if self.accepts(sid):
            allowed.append(tokenizer.eos_id)
        return np.array(sorted(allowed), dtype=np.int64)

    def full_mask(self, prefix: bytes, tokenizer) -> np.ndarray:
        """Packed mask (the engines' layout) of every token allowed after ``prefix``."""
        sid = self.advance(self._initial, prefix)
        ids = self.full_mask_ids(sid, tokenizer) if sid != DEAD else []
        return ids_to_mask(ids, tokenizer.vocab_size)


@functools.lru_cache(maxsize=4)
def _sorted_vocab_cached(key: str, token_bytes: tuple):
    ids = [i for i, b in enumerate(token_bytes) if b]
    ids.sort(key=lambda i: token_bytes[i])
    lcp = [0] * len(ids)
    prev = b""
    for n, i in enumerate(ids):
        cur = token_bytes[i]
        m = min(len(prev), len(cur))
        k = 0
        while k < m and prev[k] == cur[k]:
            k += 1
        lcp[n] = k
        prev = cur
    return np.array(ids, dtype=np.int64), np.array(lcp, dtype=np.int64)


def read_vocab(tokenizer, reading: str = "utf8"):
    """The vocabulary's token bytes as a profile's ``token_bytes`` reads them: ``utf8`` as they are, ``latin1``
    each byte as the UTF-8 of the code point of its value (an ASCII token is unchanged)."""
    if reading == "utf8":
        return tokenizer.token_bytes
    cache = tokenizer.__dict__.setdefault("_read_vocab", {})
    if reading not in cache:
        cache[reading] = tuple(b.decode("latin-1").encode("utf-8") for b in tokenizer.token_bytes)
    return cache[reading]


def _sorted_vocab(tokenizer, reading: str = "utf8"):
    """Non-empty token ids sorted by bytes (as ``read_vocab`` reads them), with each one's common-prefix length
    with the one before."""
    cache = tokenizer.__dict__.setdefault("_sorted_vocab", {})
    if reading not in cache:
        cache[reading] = _sorted_vocab_cached(tokenizer.key(), tuple(read_vocab(tokenizer, reading)))
    return cache[reading]


class ReferenceEngine(Engine):
    """The reference checker behind the engine interface (slow: for tests and small vocabularies)."""

    name = "reference"
    plot_style = ("#3b2f80", "d")   # navy, in every figure

    def version(self) -> str:
        return "gcdbench-reference-1"

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        self.checker = ReferenceChecker(grammar, self.profile())
        self.tokenizer = tokenizer
        self.reset()

    def reset(self) -> None:
        self.state = self.checker.initial()

    def fill_mask(self, out: np.ndarray) -> None:
        out[:] = ids_to_mask(self.checker.full_mask_ids(self.state, self.tokenizer), self.tokenizer.vocab_size)

    def commit(self, token_id: int) -> bool:
        data = self.tokenizer.token_bytes[token_id]
        if not data:
            return False
        self.state = self.checker.advance(self.state, data)
        return self.state != DEAD

    def fork(self) -> "ReferenceEngine":
        """A new sequence over the same checker (its memoised DFA is shared), at the empty prefix; batch mode
        uses the default ``fill_masks`` loop."""
        other = type(self)(**self.opts)
        other.checker, other.tokenizer = self.checker, self.tokenizer
        other.reset()
        return other
