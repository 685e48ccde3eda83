"""Offline construction of PSC (paper sec 3): realizable terminal sequences and the stack classifier.

Pieces, in order:

1. ``lalr_tables``: Lark's LALR(1) analysis (``lark.Lark(..., parser="lalr")``); conflicts -> CompileError (or,
   with ``conflicts="shift"``, shift/reduce ones resolved as shift, as Lark's parser does).
2. ``realizable`` (in :mod:`gcdbench.parsers.lr.tokens`, shared with Pre³): for every lexer state q and
   token v the realizable terminal sequence R_q(v) (sec 3.1),
   computed over a byte trie of the vocabulary, one numpy pass per trie depth for all tokens at once.
   Our lexer is deterministic, so R_q(v) is one pair ``(w, N)``: the complete terminals ``w`` the token
   emits, and ``N`` the terminals the unfinished lexeme may still become (``None``: anything may follow,
   i.e. the lexeme is empty or may be ignored). The ``w`` are interned in one global trie of terminal
   sequences, shared by all lexer states (common prefixes are simulated once).
3. ``classifier``: the deterministic automaton A of sec 3.5. It reads the lexer state class and then the
   parser stack from the top down; each of its states carries the set of tokens already known to be
   accepted (the "weights" view of seed 001: token *sets* ride on the transitions of one deterministic
   automaton instead of one path per token). See ``_Classifier`` for how the transducers of sec 3.3-3.4
   (epsilon closure = the reductions, one step per terminal, their composition along w) are folded into
   a lazily-read symbolic simulation of the LALR driver.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from gcdbench.parsers.base import CompileError, CompileTimeout, GrammarSpec
from gcdbench.parsers.lr.lexer import lark_terminals
from gcdbench.parsers.lr.tokens import SeqTrie

END = "$END"
log = logging.getLogger("gcdbench.psc")
PROGRESS_EVERY_S = 2.0   # at most one progress record per this many seconds


class Progress:
    """Construction progress as ``gcdbench.psc`` log records (INFO), at most one every ``every_s`` seconds (the
    runner's worker forwards them to the console), and the time budget: past ``deadline`` (monotonic seconds)
    :meth:`tick` raises :class:`CompileTimeout` naming the phase."""

    def __init__(self, deadline: float | None = None, budget_s: float | None = None, every_s: float | None = None):
        self.deadline, self.budget_s = deadline, budget_s
        self.every_s = PROGRESS_EVERY_S if every_s is None else every_s
        self.last = time.monotonic()

    def tick(self, phase: str, what=None) -> None:
        """``what``: a callable giving the progress text (only built when it is logged)."""
        now = time.monotonic()
        if self.deadline is not None and now > self.deadline:
            raise CompileTimeout(f"psc: construction exceeded its time budget of {self.budget_s:g} s (max_build_s) "
                                 f"in the {phase} phase" + (f" ({what()})" if what else ""))
        if what is not None and now - self.last >= self.every_s:
            self.last = now
            log.info(f"psc: {phase}: {what()}")


# --------------------------------------------------------------------------------------------------
# 1. Lark's LALR(1) tables
# --------------------------------------------------------------------------------------------------
def lalr_tables(grammar: GrammarSpec, *, timeout_s: float, conflicts: str, max_rules: int = 20_000):
    """(IntParseTable, terminals, ignored names, number of shift/reduce conflicts resolved as shift: 0 unless
    ``conflicts="shift"``). Lark's analysis runs in a child process (a fresh interpreter
    under :class:`~gcdbench.parsers.common.limited.LimitedProcess`: the harness's worker may hold threads, so no fork),
    so a grammar whose LALR construction does not finish in ``timeout_s`` is refused instead of hanging.
    ``timeout_s`` and ``conflicts``: PSC's options ``lalr_timeout_s`` and ``conflicts`` (PSCOptions)."""
    import subprocess
    import sys

    from gcdbench.parsers.common.limited import LimitedProcess, exit_description

    log.info("psc: Lark's LALR(1) analysis")
    proc = LimitedProcess([sys.executable, "-c", "from gcdbench.parsers.psc.build import _lalr_main; _lalr_main()"],
                          channel=True, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    slr = None
    try:
        proc.send((grammar.lark, grammar.start, max_rules, conflicts == "shift"))
        while True:
            ev = proc.wait(max(0.0, deadline - time.monotonic()))
            if ev.kind == "timeout":
                raise CompileTimeout(f"psc: Lark's LALR(1) analysis did not finish in {timeout_s:g} s "
                                     f"(lalr_timeout_s); " + (slr or "the grammar is too large for PSC"))
            if ev.kind != "message":
                raise CompileError(f"psc: Lark's LALR(1) analysis died ({exit_description(ev.value)})")
            if ev.value[0] == "slr":
                slr = ev.value[1]
                continue
            res = ev.value
            break
    finally:
        proc.close()
    if res[0] == "error":
        raise CompileError(res[1])
    _tag, plain, terms, ignore, n_shift = res
    return table_from_plain(plain), terms, ignore, n_shift


def _lalr_main():
    """Child side of :func:`lalr_tables`: read (text, start, max_rules, shift) from the channel, answer on it."""
    from gcdbench.parsers.common.limited import Channel, die_with_parent

    die_with_parent()
    chan = Channel.from_env()
    text, start, max_rules, shift = chan.recv()
    try:
        res = _lalr_child_work(text, start, max_rules, chan.send, shift)
    except BaseException as err:   # report, never raise in the child
        res = ("error", f"psc: Lark LALR construction failed: {type(err).__name__}: {err}")
    chan.send(res)


def _slr_conflicts(rules, start: str) -> str:
    """A quick diagnosis with Lark's own LR(0) automaton and FOLLOW sets: SLR(1) conflicts are the places
    where an LALR(1) conflict can be (LALR lookaheads are subsets of FOLLOW)."""
    from lark.common import ParserConf
    from lark.parsers.lalr_analysis import LALR_Analyzer

    an = LALR_Analyzer(ParserConf(rules, None, [start]))
    an.compute_lr0_states()
    found = []
    for st in an.lr0_itemsets:
        shifts = {sym.name for sym in st.transitions if sym.is_term}
        seen: dict[str, str] = {}
        for rp in st.closure:
            if not rp.is_satisfied:
                continue
            for la in an.FOLLOW.get(rp.rule.origin, ()):
                if la.name in shifts:
                    found.append(f"shift/reduce on {la.name}: {rp.rule}")
                elif la.name in seen and seen[la.name] != str(rp.rule):
                    found.append(f"reduce/reduce on {la.name}: {seen[la.name]} | {rp.rule}")
                seen.setdefault(la.name, str(rp.rule))
    if not found:
        return f"its LR(0) automaton ({len(an.lr0_itemsets)} states) has no SLR(1) conflict"
    uniq = sorted(set(found))
    return (f"its LR(0) automaton ({len(an.lr0_itemsets)} states) has {len(uniq)} SLR(1) conflict(s), where "
            f"LALR(1) conflicts can be, e.g.: " + "; ".join(uniq[:10]))


def _lalr_child_work(text: str, start: str, max_rules: int, send=None, shift: bool = False):
    import lark
    from lark.exceptions import GrammarError, LarkError

    try:
        # cheap size check first (the Earley front end does no LR analysis)
        probe = lark.Lark(text, parser="earley", lexer="dynamic", start=start)
    except (GrammarError, LarkError) as err:
        return ("error", f"psc: malformed grammar: {err}")
    if len(probe.rules) > max_rules:
        return ("error", f"psc: grammar has {len(probe.rules)} rules > max_rules={max_rules}")
    if send is not None:   # a diagnosis the parent reports if the full analysis runs out of time
        try:
            send(("slr", _slr_conflicts(probe.rules, start)))
        except Exception:
            pass
    # Lark resolves shift/reduce conflicts as shift and only logs them (at DEBUG); collect them all
    from lark.utils import logger as lark_logger

    conflicts: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record):
            msg = record.getMessage()
            if conflicts and msg.startswith(" * "):
                conflicts[-1] += " " + msg.strip()
            elif "conflict" in msg.lower():
                conflicts.append(msg)

    handler = _Collect(level=logging.DEBUG)
    old_level, old_prop, old_handlers = lark_logger.level, lark_logger.propagate, lark_logger.handlers[:]
    lark_logger.handlers = [handler]
    lark_logger.setLevel(logging.DEBUG)
    lark_logger.propagate = False
    try:
        lk = lark.Lark(text, parser="lalr", lexer="basic", start=start)
    except GrammarError as err:
        msg = str(err)
        if "collision" in msg.lower() or "conflict" in msg.lower():
            return ("error", f"not LALR(1): {msg[:2000]}")
        return ("error", f"psc: Lark LALR construction failed: {msg[:2000]}")
    except LarkError as err:
        return ("error", f"psc: Lark LALR construction failed: {err}")
    finally:
        lark_logger.handlers = old_handlers
        lark_logger.setLevel(old_level)
        lark_logger.propagate = old_prop
    if conflicts and not shift:
        shown = "; ".join(conflicts[:20])
        more = f" (and {len(conflicts) - 20} more)" if len(conflicts) > 20 else ""
        return ("error", f"not LALR(1): {len(conflicts)} shift/reduce conflict(s): {shown}{more}; conflicts=shift "
                         "resolves them as Lark's LALR parser does")
    table = lk.parser.parser._parse_table
    return ("ok", table_to_plain(table), lark_terminals(lk), list(lk.ignore_tokens), len(conflicts))


def table_to_plain(table) -> dict:
    """Lark's parse table without its Shift/Reduce singletons (they do not survive pickling)."""
    from lark.parsers.lalr_analysis import Shift

    states = {s: {sym: (kind is Shift, arg) for sym, (kind, arg) in row.items()} for s, row in table.states.items()}
    return {"states": states, "start_states": dict(table.start_states), "end_states": dict(table.end_states)}


def table_from_plain(plain: dict):
    from lark.parsers.lalr_analysis import IntParseTable, Reduce, Shift

    states = {s: {sym: ((Shift if sh else Reduce), arg) for sym, (sh, arg) in row.items()}
              for s, row in plain["states"].items()}
    return IntParseTable(states, plain["start_states"], plain["end_states"])


# --------------------------------------------------------------------------------------------------
# 3. the stack classifier (2., the realizable sequences, is gcdbench.parsers.lr.tokens)
# --------------------------------------------------------------------------------------------------
class _Classifier:
    """Builds the deterministic automaton over (lexer class, stack top ... bottom).

    A *job* is a realizable pair (w, N) with a token set. Checking a job against a stack is running the
    LALR driver on the terminals of w (then on some a in N) while reading the stack lazily from the top:
    the simulation keeps a known top ``S`` (states it pushed or read); when a reduction pops below ``S`` it
    waits for the next real stack symbol. Running the epsilon moves (reductions) between terminals is the
    transducer P_eps of sec 3.3; shifting one terminal is P_a of sec 3.4; chaining them along w is the
    composition P_w; dropping the output stack is A_w. Every job that waits, waits for the *same* next
    stack symbol (it has consumed exactly as many real symbols as the automaton has read), so the union
    over jobs is determinized on the fly: an automaton state is the set of waiting configurations plus the
    set of accept events seen so far (an event is the id of its token set, its weight). Waiting configurations
    are ``(seq, a, final, k, A)``: at sequence node ``seq``, feeding terminal ``a`` (``final``: a is the
    pending-lexeme check of N), after popping ``k`` more real symbols, goto on nonterminal ``A`` from the
    exposed one. Simulations of common prefixes of w are shared through the sequence trie.
    """

    def __init__(self, table, seqs: SeqTrie, term_names: list[str], progress: Progress, max_states: int):
        from lark.parsers.lalr_analysis import Shift

        self.seqs = seqs
        self.progress = progress
        self.max_states = max_states
        tix = {n: i for i, n in enumerate(term_names)}
        self.end_t = len(term_names)   # index used for $END
        tix[END] = self.end_t
        self.n_parser = len(table.states)
        self.end_state = None
        # action[s][a] = (1, target) shift | (0, (nonterminal, length)) reduce; goto[s][A] = target
        self.action: list[dict[int, tuple]] = []
        self.goto: list[dict[str, int]] = []
        nts: dict[str, int] = {}
        for s in range(self.n_parser):
            act, gt = {}, {}
            for sym, (kind, arg) in table.states[s].items():
                if sym in tix:
                    if kind is Shift:
                        act[tix[sym]] = (1, arg)
                    else:
                        act[tix[sym]] = (0, (nts.setdefault(arg.origin.name, len(nts)), len(arg.expansion)))
                else:
                    gt[nts.setdefault(sym, len(nts))] = arg
            self.action.append(act)
            self.goto.append(gt)
        self.goto_sources: dict[int, list[int]] = {}
        for s, gt in enumerate(self.goto):
            for A in gt:
                self.goto_sources.setdefault(A, []).append(s)

    # -- the LALR driver on a known top ------------------------------------------------------------
    def feed(self, S: tuple, a: int, end_state: int):
        """Feed terminal a with known top S: ('shift', S') | ('ok',) for $END accepted | ('need', k, A) | None."""
        action, goto = self.action, self.goto
        while True:
            act = action[S[-1]].get(a)
            if act is None:
                return None
            if act[0] == 1:
                return ("shift", S + (act[1],))
            A, n = act[1]
            if n < len(S):
                S = S[: len(S) - n]
                g = goto[S[-1]].get(A)
                if g is None:
                    return None
                if a == self.end_t and g == end_state:
                    return ("ok",)
                S = S + (g,)
            else:
                return ("need", n - len(S), A)

    def build(self, classes: list[dict], end_state: int):
        """classes[c] = {"any": {seq: wid}, "fin": {seq: {a: wid}}, "live": set(seq)}.

        Returns ``(states, first, first_out, trans, outputs)``: automaton states ``(c, waiting configs)``
        (state 0 = finished, nothing waits), ``first[c, X]`` the state after the lexer class and the stack
        top X, ``trans[j] = ({X: (j', o)}, (j', o) for any other X)``, and ``outputs[o]`` the frozenset of
        weights (accept events) emitted on a transition. Accepted token sets ride on transitions (a
        subsequential transducer into the union semilattice of token sets), so the states themselves only
        hold what still waits: the mask of a stack is the union of the outputs along its path.
        """
        self.end_state = end_state
        states: list[tuple] = [(-1, frozenset())]
        index: dict[tuple, int] = {(-1, frozenset()): 0}
        outputs: list[frozenset] = [frozenset()]
        out_index: dict[frozenset, int] = {frozenset(): 0}
        first = np.zeros((len(classes), self.n_parser), dtype=np.int32)
        first_out = np.zeros((len(classes), self.n_parser), dtype=np.int32)
        todo: list[int] = []

        def intern(c, wait):
            if not wait:
                return 0
            key = (c, wait)
            j = index.get(key)
            if j is None:
                j = index[key] = len(states)
                states.append(key)
                todo.append(j)
                if len(states) > self.max_states:
                    raise CompileError(f"psc: the stack classifier exceeds max_states={self.max_states} states "
                                       "(raise engine.max_states to try anyway)")
            return j

        def output(acc):
            acc = frozenset(acc)
            o = out_index.get(acc)
            if o is None:
                o = out_index[acc] = len(outputs)
                outputs.append(acc)
            return o

        for c, cls in enumerate(classes):
            memo: dict = {}
            for X in range(self.n_parser):
                acc: set = set()
                wait: set = set()
                self._explore(cls, 0, (X,), acc, wait, memo)
                first[c, X] = intern(c, frozenset(wait))
                first_out[c, X] = output(acc)
            cls["memo"] = memo
            self.progress.tick("stack classifier", lambda: f"lexer class {c + 1}/{len(classes)}, {len(states):,} states")
        trans: dict[int, tuple] = {}
        while todo:
            j = todo.pop()
            c, wait = states[j]
            cls = classes[c]
            memo = cls["memo"]
            # symbols that matter: exposed states for k == 0 configurations
            relevant = set()
            for cfg in wait:
                if cfg[3] == 0:
                    relevant.update(self.goto_sources.get(cfg[4], ()))
            out = {}
            default = None
            for X in list(relevant) + [None]:
                nacc: set = set()
                nwait: set = set()
                for seq, a, fin, k, A in wait:
                    if k > 0:
                        nwait.add((seq, a, fin, k - 1, A))
                        continue
                    if X is None:
                        continue
                    g = self.goto[X].get(A)
                    if g is None:
                        continue
                    if a == self.end_t and g == end_state:
                        nacc.add(cls["fin"][seq][a])
                        continue
                    self._after_feed(cls, seq, a, fin, (X, g), nacc, nwait, memo)
                edge = (intern(c, frozenset(nwait)), output(nacc))
                if X is None:
                    default = edge
                else:
                    out[X] = edge
            trans[j] = (out, default)
            self.progress.tick("stack classifier", lambda: f"{len(states):,} states, {len(todo):,} to expand")
        return states, first, first_out, trans, outputs

    def _after_feed(self, cls, seq, a, fin, S, acc, wait, memo):
        r = self.feed(S, a, self.end_state)
        if r is None:
            return
        if r[0] == "ok":
            acc.add(cls["fin"][seq][a])
        elif r[0] == "need":
            wait.add((seq, a, fin, r[1], r[2]))
        elif fin:
            acc.add(cls["fin"][seq][a])
        else:
            self._explore(cls, self.seqs.children[seq][a], r[1], acc, wait, memo)

    def _explore(self, cls, seq, S, acc, wait, memo):
        """All jobs below sequence node ``seq`` given known top S (S just shifted the last terminal of seq)."""
        key = (seq, S)
        hit = memo.get(key)
        if hit is not None:
            acc |= hit[0]
            wait |= hit[1]
            return
        a2: set = set()
        w2: set = set()
        if seq in cls["any"]:
            a2.add(cls["any"][seq])
        for a in cls["fin"].get(seq, ()):
            self._after_feed(cls, seq, a, True, S, a2, w2, memo)
        live = cls["live"]
        for a, child in self.seqs.children[seq].items():
            if child in live:
                self._after_feed(cls, seq, a, False, S, a2, w2, memo)
        memo[key] = (a2, w2)
        acc |= a2
        wait |= w2


# --------------------------------------------------------------------------------------------------
# 4. Minimisation of the classifier
# --------------------------------------------------------------------------------------------------
def minimize_classifier(trans: list, first: np.ndarray) -> tuple[list, np.ndarray, int]:
    """Merge classifier states that emit the same masks on every stack (Moore partition refinement).

    The classifier is a deterministic Mealy machine: it reads stack symbols (LALR states) from the top down
    and emits a mask id on every edge; state 0 is the finished state. ``trans[j] = ({X: (j', m)}, (j', m))``
    lists the explicit symbols and the edge for any other symbol (``trans[0]`` may be None). Two states are
    equivalent when, for every stack below, they emit the same sequence of mask ids; since the mask of a
    stack is the union of the ids emitted, equal sequences give equal masks, so merging them keeps every
    mask. State 0 behaves as a state that loops on every symbol and emits the empty mask (id 0), so states
    that can only emit nothing more merge into it (the walk may then stop earlier; the union is the same).

    Invariant of each round: ``block[j] == block[k]`` iff j and k emit the same ids on every stack of at most
    ``round`` symbols. Blocks only split, so the loop ends after at most ``len(trans)`` rounds (in practice
    the depth of the automaton). Returns ``(trans', first', rounds)`` with the finished state still 0, and
    explicit edges that equal the default edge dropped.
    """
    n = len(trans)
    block = [0] * n
    n_blocks = 1
    rounds = 0

    def signature(j, blk):
        if j == 0:
            return (blk[0], 0), ()
        out, (dj, dm) = trans[j]
        d = (blk[dj], dm)
        items = tuple(sorted((X, blk[k], m) for X, (k, m) in out.items() if (blk[k], m) != d))
        return d, items

    while True:
        rounds += 1
        sigs: dict = {}
        new = [0] * n
        for j in range(n):
            d, items = signature(j, block)
            new[j] = sigs.setdefault((block[j], d, items), len(sigs))
        block = new
        if len(sigs) == n_blocks:
            break
        n_blocks = len(sigs)
    # renumber: the block of state 0 becomes 0, the others in order of first appearance
    renum = {block[0]: 0}
    for j in range(n):
        renum.setdefault(block[j], len(renum))
    final = [renum[b] for b in block]
    new_trans: list = [None] * len(renum)
    for j in range(1, n):
        b = final[j]
        if b == 0 or new_trans[b] is not None:
            continue
        out, (dj, dm) = trans[j]
        d = (final[dj], dm)
        new_trans[b] = ({X: (final[k], m) for X, (k, m) in out.items() if (final[k], m) != d}, d)
    remap = np.asarray(final, dtype=np.int32)
    return new_trans, remap[np.asarray(first)], rounds
