r"""Regular sub-languages as terminals: an exact, language-preserving grammar rewrite (issue 65's first lead).

A grammar written with one-character terminals (GBNF style: every string character, digit and space its own
terminal) makes a chart parser work per character: one LLM token spans many terminals. Much of such a grammar is
regular (a string body, a number, white space) and a lexer could read it as one piece. :func:`regularize` finds
those parts and turns each into ONE terminal whose regex is the part's language, before any engine sees the grammar:
``GrammarSpec -> GrammarSpec``, so any engine adapter can call it on the grammar it is given (Valiant does under its
option ``regularize``).

What is rewritten
-----------------
* A nonterminal is *regular* when every strongly connected component (SCC) of the rule graph below it is linear on
  one side: each rule of an SCC member holds at most one member of its SCC, and always last (right-linear, e.g.
  ``chars: char chars |``) or always first (left-linear, Lark's ``x*`` helpers), never in the middle (that would be
  self-embedding, ``e: "(" e ")"``); and every other symbol of those rules is a terminal that may be merged (below)
  or a regular nonterminal. Its language is solved by Arden's lemma (Gaussian elimination over the SCC).
* In every rule of a nonterminal that is not regular (and in ``start -> start`` when the start symbol is regular,
  i.e. the whole grammar is regular), each *maximal run* of consecutive regular symbols (mergeable terminals and
  regular nonterminals) other than a lone terminal becomes one symbol: a new terminal whose regex is the run's
  language (``pair: string ws ":" ws value`` gives ``pair: R value``). A run whose language holds the empty string
  becomes a nonterminal ``opt: R |``; a run that derives only the empty string is dropped. Runs with the same
  regex share a terminal, and a run whose regex is an existing terminal's reuses it.
* Regular nonterminals used only inside other regular parts disappear (the grammar is reduced on reload).
  A nonterminal used both inside a regular part and in a non-regular rule is inlined in the first and replaced
  by a terminal in the second: both occurrences stand for its language, so both are exact.
* A grammar with nothing to rewrite is returned unchanged (the same ``GrammarSpec`` object).
* Only while it is a win: the new terminals together may have at most ``max_open`` (:data:`MAX_OPEN`, 256)
  *open* states, byte DFA states that read at least half of the bytes (a comment or string body). Each is a lexer
  state from which nearly every LLM token is read whole, which Valiant's token alignment stores per state, and a
  new terminal copies the open states of the ``%ignore``'d glue at every place it stands (about 10 a place on
  Java, whose block comment ``/\*[\s\S]*?\*\//`` is, as a regular language, one that runs on past ``*/``).
  Over the budget, the runs with the most open states are refused first, the way a run with too long a regex is
  (below); refusing a run is exact, its symbols stay as they were. The grammars the rewrite is for stay below
  it (the shape suite's families: at most 4, nested_regular's comment glue 127); Java's 38 runs had 1,093
  (Valiant ran out of memory aligning qwen3's tokens) and keep 27 with 240, Go's 43 had 705 and keep 23 with 241.

Why it is exact (the harness's language, ``parsers/reference.py``)
------------------------------------------------------------------
The reference checker defines the language *scannerlessly*: ``w`` is a sentence iff ``w = t1 i1 t2 ... tn in``,
each ``tk`` a whole match of a terminal ``Tk`` (a non-empty string: Lark's dynamic Earley refuses zero-width
terminals, and a piece always consumes a byte), each ``ik`` a possibly empty run of ``%ignore``d matches, never
ignored text first, ``T1 ... Tn`` derivable; no longest match, no priorities, no keyword reservation. So the byte
language is the image of the terminal language under ``h(T1 ... Tn) = L(T1) I L(T2) I ... I L(Tn)`` (then a
trailing ``I``), with ``I = (ign1 | ign2 | ...)*``. ``h`` turns concatenation into concatenation *glued by I*:
``h(uv) = h(u) I h(v)`` for non-empty ``u, v``. Each new terminal's regex is built with exactly that glue: the
languages are kept as (regex of the non-empty strings, empty-string flag) and ``concat`` writes ``A I B``,
``A (I B)?``, ``(A I)? B`` or ``A (I B)? | B`` as the emptiness of each side requires, so ``I`` stands only
*between* two pieces, never first or last (the glue around the new terminal is the outer grammar's, as before).
Therefore ``L(R) = h(L(run)) minus {""}`` and every derivation of the new grammar maps to one of the old and back:
the two grammars have the same sentences, hence the same viable prefixes and the same masks at every prefix.
The points the rewrite has to respect, and how:

* ``%ignore``: included optionally between the pieces of a merged run (above). An ignored terminal used in a rule is
  never merged (the reference makes every match of an ignored terminal transparent), and a nonterminal whose rules
  use one is not regular; such rules stay as written.
* Lexer semantics: exact under the scannerless semantics, which both the reference (``Profile()``) and Valiant
  (its ``lexer.py``: every cut of the bytes into terminals, all splits, no maximal munch) implement. Under a
  longest-match, standard or dynamic lexer (other engines' declared profiles) merging terminals *does* change the
  tokenization, so the rewrite is not exact for those profiles: an engine whose profile is not ``Profile()``
  should not be given the rewritten grammar unless its audit is against the harness's language only. Of the other
  profile knobs, ``leading_ignore``, ``case_fold``, ``regex_classes`` and ``token_bytes`` keep it exact (the glue
  at a sentence's start is the outer grammar's; readings below), but ``trailing_ignore=False`` does not: with
  ``digits: DIGIT+`` last in a sentence, ``12 `` is a sentence of the original (a further DIGIT is expected after
  ``12``, so the space may come) and not of the rewrite (nothing is expected after the one terminal ``12``).
* Terminal priorities: they do not enter the scannerless language; original terminals keep theirs, new terminals
  get Lark's default (0).
* Regex readings: each piece keeps its own constructs (``(?i:...)`` folded in by Lark, ``\w`` etc.), so the new
  regex reads each piece the way the piece was read, under every ``case_fold`` / ``regex_classes`` profile.
  A terminal whose regex cannot be concatenated (a named group, a global inline flag, a construct the byte DFAs of
  ``regex_fsm`` refuse) is not merged. A run whose regex is over ``max_regex`` characters or whose byte DFA
  ``regex_fsm`` refuses, or that the open-state budget (above) refuses, is not merged either: its largest regular
  nonterminal is demoted to non-regular (a run of terminals only is left as it is) and the plan is made again
  (the demoted nonterminal's own rules' runs are then merged one level down).

The output is Lark text (every symbol renamed to a name Lark accepts, every terminal written as a ``/regex/`` that
Lark decodes back to exactly the same Python regex string), so each engine loads it the way it loads any grammar.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass, field

from gcdbench.parsers.base import CompileError, GrammarSpec
from gcdbench.parsers.grammar import GrammarIR, Rule, load_ir

#: a new terminal's regex longer than this is not made (its run is left as it is)
MAX_REGEX = 8_000
#: steps of the subset construction a new terminal's DFA may take (:func:`_determinizes`); over it, not made
DFA_BUDGET = 200_000
#: open states (:func:`_open_states`) all the new terminals together may have; over it, the costliest runs are
#: refused until the rest fit (:meth:`_Planner._bad_runs`)
MAX_OPEN = 256
#: a byte DFA state that reads at least this many of the 256 bytes is *open*
OPEN_WIDTH = 128


class _TooBig(Exception):
    pass


@dataclass(frozen=True)
class Lang:
    """A regular language over bytes: ``alts``, regexes whose union is its non-empty strings (none: it has none;
    each concatenates as it is, no top-level ``|``), and whether it holds the empty string."""
    alts: tuple[str, ...]
    nullable: bool

    @property
    def pos(self) -> str | None:
        """One regex of the non-empty strings (None when there are none), safe to concatenate."""
        if not self.alts:
            return None
        return self.alts[0] if len(self.alts) == 1 else "(?:" + "|".join(self.alts) + ")"


EPS = Lang((), True)
NONE = Lang((), False)


class _Algebra:
    """Union, concatenation glued by the ignore pattern, and star, on :class:`Lang` (see the module docstring)."""

    def __init__(self, ignore_regex: str, max_regex: int):
        self.ig = ignore_regex          # "" when the grammar ignores nothing
        self.max = max_regex

    def _lang(self, alts: tuple, nullable: bool) -> Lang:
        if sum(len(a) + 1 for a in alts) > self.max:
            raise _TooBig
        return Lang(alts, nullable)

    def union(self, a: Lang, b: Lang) -> Lang:
        return self._lang(a.alts + tuple(x for x in b.alts if x not in a.alts), a.nullable or b.nullable)

    def concat(self, a: Lang, b: Lang) -> Lang:
        if (not a.alts and not a.nullable) or (not b.alts and not b.nullable):
            return NONE
        if not a.alts:
            return b
        if not b.alts:
            return a
        A, B, ig = a.pos, b.pos, self.ig
        if not a.nullable and not b.nullable:
            alts = (f"{A}{ig}{B}",)
        elif not a.nullable:
            alts = (f"{A}(?:{ig}{B})?",)
        elif not b.nullable:
            alts = (f"(?:{A}{ig})?{B}",)
        else:
            alts = (f"{A}(?:{ig}{B})?", B)
        return self._lang(alts, a.nullable and b.nullable)

    def star(self, a: Lang) -> Lang:
        if not a.alts:
            return EPS
        A = a.pos
        return self._lang((f"(?:{A})+" if not self.ig else f"{A}(?:{self.ig}{A})*",), True)


def _sccs(nodes: list[str], succ: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, callees first (reverse topological order); iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(succ.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            pushed = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                    pushed = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def _determinizes(name: str, regex: str, budget: int) -> bool:
    """Whether the subset construction of ``regex`` (``regex_fsm``'s NFA, Python ``re``'s reading) ends within
    ``budget`` steps (a DFA state times the symbol classes times its NFA states). A concatenation of pieces that
    overlap (Go's names and comment tails glued by ignored comments) can make an exponential DFA, which
    ``regex_fsm`` would build without a bound: such a run is left as it is."""
    from gcdbench.parsers.regex_fsm import _NFA, AtomSets, _partition, sre_parse

    try:
        parsed = sre_parse.parse(regex)
        nfa = _NFA(name, AtomSets("python_re", "unicode"))
        n_start = nfa.state()
        nfa.seq(list(parsed), parsed.state.flags, n_start)
    except (CompileError, re.error, ValueError, RecursionError):
        return False
    _starts, members = _partition(nfa.atoms)
    sigs = list({m for m in members if m})
    init = nfa.closure([n_start])
    dstates, seen, work = [init], {init}, 0
    k = 0
    while k < len(dstates):
        cur = dstates[k]
        work += len(cur) * len(sigs)
        if work > budget:
            return False
        for sig in sigs:
            tgt = {t for q in cur for a, t in nfa.edges[q] if a in sig}
            if tgt:
                c = nfa.closure(tgt)
                if c not in seen:
                    seen.add(c)
                    dstates.append(c)
        k += 1
    return True


@functools.lru_cache(maxsize=4096)
def _dfa_ok(name: str, regex: str, ignore_case: bool, budget: int | None = None) -> bool:
    """Whether the harness's byte DFAs (``regex_fsm``, what the reference and Valiant build) accept the regex
    (within ``budget``, see :func:`_determinizes`, when given)."""
    from gcdbench.parsers.regex_fsm import byte_dfa

    if budget is not None and not _determinizes(name, regex, budget):
        return False
    try:
        byte_dfa(name, regex, ignore_case)
    except (CompileError, re.error, ValueError, RecursionError):
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _open_states(regex: str) -> int:
    r"""The *open* states of the regex's byte DFA (``regex_fsm``, minimal): those with a next state on at least
    :data:`OPEN_WIDTH` bytes (inside a comment, a string body, ``[^x]*``). An engine that precomputes, per lexer
    state, the tokens the state reads whole (Valiant's ``cont_all``) keeps nearly the whole vocabulary for each
    open state of each terminal. A new terminal copies the open states of its pieces and of the ignored glue
    between them, once per place (and, where a piece's body can also read what follows it, e.g. Java's
    ``/\*[\s\S]*?\*\//`` whose regular language runs on past ``*/``, once per place times the positions
    after it): see :meth:`_Planner._bad_runs`."""
    from gcdbench.parsers.regex_fsm import byte_dfa

    d = byte_dfa("RUN", regex, False)
    return sum(1 for row in d.rows if sum(1 for x in row if x >= 0) >= OPEN_WIDTH)


def _mergeable(t, ignored: frozenset) -> str | None:
    """The terminal's regex as a piece of a concatenation (``(?:...)``, its case flag folded in), or None when it
    may not be merged: ignored, or a regex that does not survive concatenation (a named group, a global flag)."""
    if t.name in ignored:
        return None
    rx = f"(?i:{t.regex})" if t.ignore_case else t.regex   # Lark folds the flag in already: harmless twice
    piece = f"(?:{rx})"
    try:
        re.compile(piece + piece)
    except re.error:
        return None
    return piece if _dfa_ok(t.name, t.regex, t.ignore_case) else None


@dataclass
class Rewrite:
    """What :func:`regularize_report` did: the new grammar and an account of it."""
    spec: GrammarSpec
    changed: bool
    regular: tuple[str, ...] = ()            # nonterminals found regular (their rules no longer in the grammar)
    runs: int = 0                            # occurrences of runs replaced in the rules kept
    new_terminals: dict[str, str] = field(default_factory=dict)   # name -> regex
    demoted: tuple[str, ...] = ()            # regular nonterminals left as rules (regex too large or refused)
    open_states: int = 0                     # open states of the new terminals, in all (``_open_states``)
    refused_open: int = 0                    # runs refused for open states over ``max_open`` (all rounds)
    counts: dict = field(default_factory=dict)   # rules / terminals / nonterminals before and after


class _Planner:
    def __init__(self, ir: GrammarIR, max_regex: int, budget: int, max_open: int = MAX_OPEN):
        self.ir = ir
        self.budget = budget
        self.max_open = max_open
        self.refused_open = 0
        self.keep_runs: set[tuple] = set()
        ignored = frozenset(ir.ignore)
        self.pieces = {n: _mergeable(t, ignored) for n, t in ir.terminals.items()}
        ig_alts = []
        for n in ir.ignore:
            t = ir.terminals[n]
            rx = f"(?i:{t.regex})" if t.ignore_case else t.regex
            ig_alts.append(f"(?:{rx})")
        # an ignored terminal the byte DFAs refuse: every engine refuses the grammar; leave it as it is
        self.ignore_ok = all(_dfa_ok(n, ir.terminals[n].regex, ir.terminals[n].ignore_case) for n in ir.ignore)
        ig = ("(?:" + "|".join(ig_alts) + ")*") if ig_alts else ""
        if ig:
            try:
                re.compile(ig + ig)
            except re.error:
                self.ignore_ok = False
        self.alg = _Algebra(ig, max_regex)

    @staticmethod
    def _side(rules: list[Rule], S: set[str]) -> str | None:
        right = left = True
        for r in rules:
            at = [i for i, s in enumerate(r.expansion) if s in S]
            if len(at) > 1:
                return None
            if at:
                right &= at[0] == len(r.expansion) - 1
                left &= at[0] == 0
        return "right" if right else "left" if left else None

    def lang_of(self, sym: str, langs: dict[str, Lang]) -> Lang:
        if sym in self.ir.terminals:
            return Lang((self.pieces[sym],), False)
        return langs[sym]

    def seq(self, syms, langs: dict[str, Lang]) -> Lang:
        out = EPS
        for s in syms:
            out = self.alg.concat(out, self.lang_of(s, langs))
        return out

    def _arden(self, comp: list[str], rules: list[Rule], S: set[str], side: str) -> dict[str, Lang]:
        alg = self.alg
        left = side == "left"

        def mul(c: Lang, e: Lang) -> Lang:   # the coefficient on the outer side of the variable's expression
            return alg.concat(e, c) if left else alg.concat(c, e)

        eq: dict[str, tuple[dict[str, Lang], Lang]] = {a: ({}, NONE) for a in comp}
        for r in rules:
            coef, const = eq[r.origin]
            at = [i for i, s in enumerate(r.expansion) if s in S]
            if at:
                var = r.expansion[at[0]]
                rest = r.expansion[1:] if left else r.expansion[:-1]
                c = self.seq(rest, self._langs)
                coef[var] = alg.union(coef.get(var, NONE), c)
            else:
                eq[r.origin] = (coef, alg.union(const, self.seq(r.expansion, self._langs)))
        for x in comp:
            coef, const = eq[x]
            if x in coef:
                s = alg.star(coef.pop(x))
                coef = {y: mul(s, c) for y, c in coef.items()}
                const = mul(s, const)
                eq[x] = (coef, const)
            for z in comp:
                if z == x or x not in eq[z][0]:
                    continue
                zc, zk = eq[z]
                c = zc.pop(x)
                for y, d in coef.items():
                    zc[y] = alg.union(zc.get(y, NONE), mul(c, d))
                eq[z] = (zc, alg.union(zk, mul(c, const)))
        return {a: eq[a][1] for a in comp}

    def plan(self):
        """Regular nonterminals, demoting one per refused run (its largest regular nonterminal) until every run is
        accepted (a refused run of terminals only is left as it is). Demoting every regular nonterminal of a
        refused run gave up pieces that fit: ``kw word* ";"`` with 300 keywords is too large as one terminal, and
        demoting ``kw`` alone leaves ``word* ";"`` one terminal, where demoting both left a chart step per word.
        Each round demotes at least one nonterminal or keeps one run, so the rounds are bounded."""
        blocked: set[str] = set()
        self.keep_runs = set()
        max_rounds = len(self.ir.nonterminals) + len(self.ir.rules) + 2
        for _ in range(max_rounds):
            langs = self._solve(blocked)
            bad, keep = self._bad_runs(langs)
            if not bad and not keep:
                return langs, blocked
            blocked |= bad
            self.keep_runs |= keep
        raise CompileError("regularize: the plan did not settle; run without regularize")

    def _solve(self, blocked: set[str]) -> dict[str, Lang]:
        """The regular nonterminals (none of ``blocked``) and their languages, SCC by SCC, lower ones first."""
        ir = self.ir
        nts = list(ir.nonterminals)
        succ = {a: {s for r in ir.by_origin[a] for s in r.expansion if s not in ir.terminals} for a in nts}
        self._langs = langs = {}
        if not self.ignore_ok:
            return langs
        for comp in _sccs(nts, succ):
            S = set(comp)
            if S & blocked:
                continue
            rules = [r for a in comp for r in ir.by_origin[a]]
            side = self._side(rules, S)
            if side is None:
                continue
            if not all(s in S or (s in ir.terminals and self.pieces[s] is not None) or s in langs
                       for r in rules for s in r.expansion):
                continue
            try:
                langs.update(self._arden(comp, rules, S, side))
            except _TooBig:
                continue
        return langs

    # -- runs ------------------------------------------------------------------------------------
    def kept_rules(self, langs: dict[str, Lang]) -> list[Rule]:
        """The rules that stay (those of non-regular nonterminals; ``start -> start`` when the start is regular)."""
        ir = self.ir
        if ir.start in langs:
            return [Rule(ir.start, (ir.start,))]
        return [r for r in ir.rules if r.origin not in langs]

    def is_regular_sym(self, s: str, langs) -> bool:
        return s in langs or (s in self.ir.terminals and self.pieces[s] is not None)

    def runs_of(self, rule: Rule, langs):
        """The expansion cut into (run?, symbols): maximal runs of regular symbols and single other symbols."""
        out, cur = [], []
        for s in rule.expansion:
            if self.is_regular_sym(s, langs):
                cur.append(s)
            else:
                if cur:
                    out.append((True, tuple(cur)))
                    cur = []
                out.append((False, (s,)))
        if cur:
            out.append((True, tuple(cur)))
        return out

    def run_lang(self, run: tuple, langs) -> Lang | None:
        """The run's language, or None when it is left as it is (a lone terminal)."""
        if (len(run) == 1 and run[0] in self.ir.terminals) or run in self.keep_runs:
            return None
        return self.seq(run, langs)

    def _bad_runs(self, langs) -> tuple[set[str], set[tuple]]:
        r"""Runs whose regex is refused (too long, too costly a DFA, or refused by the byte DFAs), and, while the
        new terminals' open states (:func:`_open_states`) add up to more than ``max_open``, the runs with the
        most of them (each regex counted once, however many runs share it): their regular nonterminals (to
        demote), and the runs of terminals only (to leave as they are).

        The open-state budget is what keeps the rewrite a win. Each open state of a new terminal is a lexer
        state from which nearly every LLM token is read whole, and a new terminal copies the open states of the
        ignored glue once per place it stands: on Java (``%ignore`` of both comment kinds, the block comment
        ``/\*[\s\S]*?\*\//`` that as a regular language runs on past ``*/``) some 38 runs such as
        ``"continue" CNAME? ";"`` made over a thousand open states, and Valiant's token alignment ran out of
        memory. Refusing a run is always exact (its symbols stay as they were); the one-character grammars the
        rewrite is for have few open states (a string body per string), so their runs all fit."""
        bad: set[str] = set()
        keep: set[tuple] = set()
        seen: set[tuple] = set()
        cost: dict[str, int] = {}               # regex -> open states
        runs_of_rx: dict[str, list[tuple]] = {}

        def refuse(run):
            nts = [s for s in run if s in langs]
            if nts:   # demote the largest only: the rest of the run may still be one terminal
                bad.add(max(nts, key=lambda s: (sum(len(a) for a in langs[s].alts), s)))
            else:
                keep.add(run)

        for r in self.kept_rules(langs):
            for is_run, run in self.runs_of(r, langs):
                if not is_run or run in seen:
                    continue
                seen.add(run)
                try:
                    lg = self.run_lang(run, langs)
                    ok = lg is None or lg.pos is None or (
                        len(lg.pos) <= self.alg.max and _dfa_ok("RUN", lg.pos, False, self.budget))
                except _TooBig:
                    ok = False
                if not ok:
                    refuse(run)
                elif lg is not None and lg.pos is not None and lg.pos not in self.pieces.values():
                    if lg.pos not in cost:
                        cost[lg.pos] = _open_states(lg.pos)
                    runs_of_rx.setdefault(lg.pos, []).append(run)
        total = sum(cost.values())
        for rx in sorted(cost, key=lambda x: (-cost[x], x)):   # the costliest first
            if total <= self.max_open or cost[rx] == 0:
                break
            total -= cost[rx]
            for run in runs_of_rx[rx]:
                self.refused_open += 1
                refuse(run)
        return bad, keep


# --------------------------------------------------------------------------------------------------
# Lark text
# --------------------------------------------------------------------------------------------------
_TERM_OK = re.compile(r"_?[A-Z][_A-Z0-9]*")
_RULE_OK = re.compile(r"_?[a-z][_a-z0-9]*")


def lark_regex(s: str) -> str:
    """``/.../`` text that Lark's grammar loader (``eval_escaping``) decodes to exactly the Python regex ``s``:
    printable ASCII other than ``\\ / " '`` as is, every other character as a ``\\xHH`` / ``\\uHHHH`` /
    ``\\UHHHHHHHH`` escape, which Lark evaluates to that one character (a backslash included: ``\\x5c``)."""
    out = []
    for ch in s:
        cp = ord(ch)
        if 0x20 <= cp < 0x7F and ch not in "\\/\"'":
            out.append(ch)
        elif cp < 0x100:
            out.append(f"\\x{cp:02x}")
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    return "/" + "".join(out) + "/"


class _Names:
    def __init__(self):
        self.used: set[str] = set()

    def take(self, name: str) -> str:
        self.used.add(name)
        return name

    def fresh(self, base: str) -> str:
        i = 0
        while f"{base}{i}" in self.used:
            i += 1
        return self.take(f"{base}{i}")


def _emit(start: str, terminals: dict, rules: list[tuple[str, tuple]], ignore: tuple) -> str:
    """Lark text: ``terminals`` name -> (regex, priority), ``rules`` (origin, expansion) over those names."""
    lines, by = [], {}
    for o, e in rules:
        alts = by.setdefault(o, [])
        if e not in alts:
            alts.append(e)
    order = [start] + [o for o in by if o != start]
    for o in order:
        alts = by.get(o, [])
        lines.append(f"{o}: " + "\n    | ".join(" ".join(e) for e in alts))
    for n, (rx, prio) in terminals.items():
        lines.append(f"{n}{'.' + str(prio) if prio else ''}: {lark_regex(rx)}")
    for n in ignore:
        lines.append(f"%ignore {n}")
    return "\n".join(lines) + "\n"


def regularize_report(spec: GrammarSpec, max_regex: int = MAX_REGEX, dfa_budget: int = DFA_BUDGET,
                      max_open: int = MAX_OPEN) -> Rewrite:
    """:func:`regularize` with an account of what it did."""
    if spec.refusal is not None:
        return Rewrite(spec, False)
    ir = load_ir(spec)
    pl = _Planner(ir, max_regex, dfa_budget, max_open)
    langs, blocked = pl.plan()
    before = {"rules": len(ir.rules), "terminals": len(ir.terminals), "nonterminals": len(ir.nonterminals)}
    # the rules kept, their runs replaced
    names = _Names()
    for n in list(ir.nonterminals) + list(ir.terminals):   # keep every name Lark accepts, so none is taken twice
        if _RULE_OK.fullmatch(n) or _TERM_OK.fullmatch(n):
            names.take(n)
    sym = {}
    for n in ir.nonterminals:
        sym[n] = n if _RULE_OK.fullmatch(n) else names.fresh("r_" + re.sub(r"[^a-z0-9]", "", n.lower()) + "_")
    for n in ir.terminals:
        sym[n] = n if _TERM_OK.fullmatch(n) else names.fresh("T_" + re.sub(r"[^A-Z0-9]", "", n.upper()) + "_")
    terms = {sym[n]: (t.regex, t.priority) for n, t in ir.terminals.items()}
    by_regex = {pl.pieces[n]: sym[n] for n in ir.terminals if pl.pieces[n] is not None}
    new_terms: dict[str, str] = {}
    opt_of: dict[str, str] = {}
    out_rules: list[tuple[str, tuple]] = []
    changed, runs = False, 0
    for r in pl.kept_rules(langs):
        exp: list[str] = []
        for is_run, run in pl.runs_of(r, langs):
            lg = pl.run_lang(run, langs) if is_run else None
            if lg is None:
                exp.extend(sym[s] for s in run)
                continue
            changed, runs = True, runs + 1
            if lg.pos is None:       # the run derives only the empty string (or nothing: then so does the rule)
                if not lg.nullable:
                    exp = None
                    break
                continue
            t = by_regex.get(lg.pos)
            if t is None:
                t = by_regex[lg.pos] = names.fresh("RG")
                terms[t] = (lg.pos, 0)
                new_terms[t] = lg.pos
            if lg.nullable and ir.start in langs:   # the whole grammar is regular: start: R |
                out_rules.append((sym[ir.start], ()))
            elif lg.nullable:
                o = opt_of.get(t)
                if o is None:
                    o = opt_of[t] = names.fresh("opt_")
                    out_rules += [(o, (t,)), (o, ())]
                t = o
            exp.append(t)
        if exp is not None:
            out_rules.append((sym[r.origin], tuple(exp)))
    same = {(sym[r.origin], tuple(sym[x] for x in r.expansion)) for r in ir.rules}
    if not changed or set(out_rules) == same:   # e.g. ``start: A``: rewritten into itself
        return Rewrite(spec, False, counts={"before": before, "after": before}, refused_open=pl.refused_open)
    used = {s for _, e in out_rules for s in e} | {sym[n] for n in ir.ignore}
    terms = {n: v for n, v in terms.items() if n in used}
    text = _emit(sym[ir.start], terms, out_rules, tuple(sym[n] for n in ir.ignore))
    if sym[ir.start] != ir.start:   # cannot happen: the start symbol was a name Lark accepted
        raise CompileError(f"regularize: start symbol {ir.start!r} was renamed")
    new = dataclasses.replace(spec, lark=text)
    ir2 = load_ir(new)
    after = {"rules": len(ir2.rules), "terminals": len(ir2.terminals), "nonterminals": len(ir2.nonterminals)}
    used = {s for r in ir2.rules for s in r.expansion}
    regular = tuple(n for n in ir.nonterminals if n in langs)
    kept_new = {n: rx for n, rx in new_terms.items() if n in used}
    return Rewrite(new, True, regular=regular, runs=runs, new_terminals=kept_new,
                   demoted=tuple(sorted(blocked)), counts={"before": before, "after": after},
                   open_states=sum(_open_states(rx) for rx in kept_new.values()), refused_open=pl.refused_open)


def exact_under(profile) -> bool:
    """Whether the rewrite keeps the language an engine declares (its ``Profile``): scannerless lexing with trailing
    ignored text allowed (module docstring). An adapter calls :func:`regularize` only where this holds."""
    return profile.lexing == "scannerless" and profile.trailing_ignore


def regularize(spec: GrammarSpec, max_regex: int = MAX_REGEX, dfa_budget: int = DFA_BUDGET,
               max_open: int = MAX_OPEN) -> GrammarSpec:
    """The grammar with every maximal regular part in a non-regular context made one terminal (module docstring):
    the same language under the harness's scannerless semantics; ``spec`` itself when nothing is regular."""
    return regularize_report(spec, max_regex, dfa_budget, max_open).spec
