"""Engine ``valiant``: the incremental Valiant prefix recognizer (CNF chart by tiers + ANCESTOR sets) with
scannerless token alignment. See chart.py (recognizer), align.py (tokens), search.py (tree search).

Batch mode: ``fork()`` shares the compiled grammar and alignment and owns a chart store, scratch and counters;
on the CPU ``fill_masks`` computes a step's masks in one parallel nogil call over ``threads`` numba threads
(batch.py), each sequence's mask on one thread. CUDA: one search launch per sequence (the default loop)."""
from __future__ import annotations

from dataclasses import dataclass
import threading
from typing import Sequence

import numpy as np

from gcdbench.parsers.base import Engine, GrammarSpec, allocate_mask, option
from gcdbench.parsers.targets import compile_for

from .align import alias_blocked, span_edges
from .align_nb import MAX_STATES
from .chart_store import ChartStore
from .compiled import VERSION, Compiled, build, load_or_build  # noqa: F401 - Compiled, build: re-exported
from .cpu_mask import (AC_FILLS, AC_HITS, FIRST_ROUND, chain_needed, mask_base, mask_base_par, mask_virtual,
                       needed_nodes, search_nodes, work_words)
from .device import N_STATS, ST_ALIASED, ST_CERTIFIED, ST_CHECKED, ST_STEPS, ST_VIABLE
from .search import chain_tables, dense_lists, pack_statics
from .store_kernels import H_NCFG, NC_DEPTH, NC_P, NC_TERM, walk_bytes
from .store_mask import fill_host

_FILL_HOST = fill_host     # the dispatcher (``_fill`` calls its compiled entry point unless the name is rebound)


@dataclass
class ValiantOptions:
    backend: str = option("cpu", "cpu (numba njit) | cuda (numba.cuda kernels; NUMBA_ENABLE_CUDASIM=1 runs them on "
                          "the CPU)", choices=("cpu", "cuda"))
    threads: int = option(1, "cpu: threads sharing one terminal tree search (numba prange over the root's subtrees); "
                          "in batch mode threads over the sequences")
    workers: int = option(32, "cuda: thread blocks that share the terminal tree search (one DFS per block)")
    bfs_depth: int = option(2, "cuda: BFS the terminal tree to this depth, then DFS per worker with its own tier stack")
    cache_dir: str | None = option(None, "compiled artifacts; null: $GCDBENCH_CACHE/valiant (default ~/.cache/gcdbench)")
    cache: bool = option(True, "read/write the on-disk cache of compiled artifacts")
    token_states: int = option(MAX_STATES, "a token walk holding more (trie node, DFA state) pairs is aligned on "
                               "merged boundaries")
    mask_cache: int = option(512, "cpu: slots of the cache of assembled token sets (a base's tokens, keyed by its "
                             "viable trie nodes and lexer states), per thread; 0: none")
    mask_memo: int = option(128, "cpu, one thread: whole masks kept per sequence, keyed by the prefix's lexer "
                            "configurations (chart node, and of a lexer state what a mask reads of it: states that "
                            "differ only beyond a token's length share a key): a prefix that ends inside a long "
                            "terminal (a string, a number, a counted run) meets the same keys again and copies its "
                            "mask; a key is kept at its second sighting, the oldest leaving a full memo; off for the "
                            "rest of a sequence where its keys cycle through more masks than it holds; 0: none")
    regularize: bool = option(False, "rewrite the grammar first: each maximal regular part (a string body, a number, "
                              "white space written with one-character terminals) becomes one terminal "
                              "(parsers/regularize.py; the same language)")


class ValiantEngine(Engine):
    name = "valiant"
    plot_style = ("#d62728", "o")   # red, in every figure
    plot_emphasis = True   # built in this project: drawn thicker and on top
    threads_option = "threads"
    speed_baseline = "glrmask"   # within GLRMask's p50 (1.5x) and p99 (2x) on every grammar shape
    artifact_keys = {"CNF binary rules": ("cnf", "binary_rules"), "CNF nonterminals": ("cnf", "nonterminals"),
                     "left-child nonterminals (stored per tier)": ("cnf", "left_nonterminals"),
                     "terminals": ("cnf", "terminals"), "lexer states": ("lexer_states",),
                     "terminal-tree nodes": ("trie_nodes",), "token tuples": ("tuples",)}
    cuda_agenda = {"cuda": {"backend": "cuda"}, "cpu": {"backend": "cpu"},
                   "sweep": ("workers", (1, 2, 4, 8, 16, 32, 64, 132)), "dry_run": {"sweep": (1, 4)}}
    #: ``bench instructions --phases`` and ``bench masks --phases``: part of a mask -> functions whose calls it covers
    #: (a name in this module, ``sub.name`` in module ``sub`` of this package; names a module lacks, or that the code
    #: no longer calls from Python, count 0, so one bench reads the code before and after issues 14 and 29). Since
    #: issue 29 a mask on one CPU thread is one call (``fill_host``) and a commit one (``walk_bytes``); the Python
    #: around them is the rest. The other parts are what threads > 1 and the CUDA backend call from Python.
    instruction_phases = {
        "mask": ("fill_host",),                                  # a whole mask, one thread (issue 29)
        "commit": ("walk_bytes",),                               # a commit's bytes through the lexer (issue 29)
        "search": ("tree_search", "tree_search_par"),            # before issue 14: the tree search alone
        "assembly": ("fill_tokens",),                            # before issue 14: mask assembly alone
        "needed": ("needed_nodes",),                             # the needed-node pruning (CUDA backend's search)
        "base_masks": ("mask_base", "mask_base_par"),            # search, pruning and assembly in one call per base
        "virtual": ("mask_virtual",),                            # bases a mask does without their chart
        "chains": ("chain_needed",),                             # second phase over merged boundaries' chains
        "base_steps": ("chart_store.extend", "chart_store.extend_edges",    # chart steps called from Python: before
                       "chart_store.store_child", "chart_store.store_merged"),   # issue 29, and the CUDA path since
    }

    def profile(self):
        """The harness's language (``Profile()``): scannerless token alignment over the grammar's terminals."""
        from gcdbench.parsers.base import Profile

        return Profile()

    @classmethod
    def complexity(cls, ambiguous: bool = False) -> str:
        return "O(n^3)"

    Options = ValiantOptions

    #: the kernels of backend=cuda with the argument types of their real launches (dry runs, no GPU)
    cuda_signatures = "gcdbench.parsers.valiant.cuda_signatures:launch_signatures"

    def version(self) -> str:
        return VERSION

    def compile(self, grammar: GrammarSpec, tokenizer) -> None:
        import numba

        self.threads = int(self.opts["threads"])
        if not 1 <= self.threads <= numba.config.NUMBA_NUM_THREADS:
            raise ValueError(f"engine valiant: threads must be between 1 and {numba.config.NUMBA_NUM_THREADS} "
                             f"(NUMBA_NUM_THREADS, the cores numba sees), not {self.threads}")
        if self.threads > 1:
            numba.set_num_threads(self.threads)
        self.tokenizer = tokenizer
        if int(self.opts["token_states"]) < 1:
            raise ValueError(f"engine valiant: token_states must be at least 1, not {self.opts['token_states']}")
        if self.opts["regularize"]:
            from gcdbench.parsers.regularize import regularize

            grammar = regularize(grammar)
        self.comp, self.cache_hit = load_or_build(grammar, tokenizer, self.opts["cache_dir"], self.opts["cache"],
                                                  int(self.opts["token_states"]))
        self.vocab_size = tokenizer.vocab_size
        al = self.comp.align
        dense, *dense_idx = dense_lists(al, self.vocab_size)
        self._chain = chain_tables(al)      # the second phase of a search (search.chain_tables)
        ch = self._chain
        ch["b0"], ch["b1"] = bool((ch["ct_kind"] == 0).any()), bool((ch["ct_kind"] == 1).any())
        ch["any"] = bool(ch["ct_tok"].size)
        # root children (the trie's depth-1 nodes: one per terminal at most, and merged boundaries) and terminal ->
        # child index (or K), for the store to adopt a kept chart
        self._k_root = int(al.child_start[1] - al.child_start[0])
        c_ = self.comp
        rc = np.full(c_.grammar.n_term + 1, self._k_root, dtype=np.int32)
        kids = al.child_ids[al.child_start[0]:al.child_start[1]]
        single = al.node_term[kids] >= 0
        rc[al.node_term[kids][single]] = np.flatnonzero(single)
        self._depth = al.max_depth
        host = {"trans": c_.trans, "accept": c_.accept, "term_of": c_.term_of, "start_of": c_.start_of,
                "root_child": rc[:-1], "n_grammar": c_.n_grammar, "n_lex": c_.start_of.size,
                "start_nullable": c_.start_nullable, "chain_b0": ch["b0"], "chain_b1": ch["b1"],
                "chain_any": ch["any"], "k_root": self._k_root, "depth": self._depth}
        statics = pack_statics(c_.grammar.packed, al, dense_idx, ch, alias_blocked(al), span_edges(al), host)
        self._statics = (*statics, dense)
        N = al.n_nodes
        # needed nodes, then fill_tokens' zeroed scratch, then a second phase's zeroed flags over lexer states
        self._flags = np.zeros(2 * N + c_.trans.shape[0], dtype=np.uint8)
        self._vbuf = np.zeros(N, dtype=np.int32)
        self._ws: dict[int, tuple] = {}     # threads -> (tiers it is sized for, (work, step scratch))
        self._sizes: dict[int, tuple] = {}
        if self.threads > 1:
            self._vb2 = (np.zeros((self.threads, N), np.int32), np.zeros(self.threads, np.int64))
        # search work counters, then searches, base charts skipped (mask_virtual), second-phase searches, assembled
        # token sets from the cache and put into it (numba)
        self._tot = np.zeros(N_STATS + 5, dtype=np.int64)
        self._host_fns: dict = {}      # fill_host's compiled function per kind of output array (_host_args)
        if int(self.opts["mask_cache"]) < 0:
            raise ValueError(f"engine valiant: mask_cache must be 0 (none) or a number of slots, "
                             f"not {self.opts['mask_cache']}")
        # thread -> (rows, keys) of the assembled-token cache (cpu_mask.fill_cached): one per thread, so threads
        # never share a slot; forks share the dict (one compiled grammar)
        self._ac: dict[int, tuple] = {}
        # a key holds a base's viable nodes: up to all N of them (1,000 keyword literals are 1,000 root children; at
        # a cap of 1,024 their sets were assembled again at every such mask, about 60 us); at most 16 KB a slot
        self._ac_width = min(4096, 4 + int(c_.trans.shape[0]) + N)
        self._ws1 = np.zeros(c_.grammar.WN + c_.grammar.WT + 1, dtype=np.uint64)   # mask_virtual's scratch
        self._memo_hits = self._steps_done = self._adopted_done = 0
        if int(self.opts["mask_memo"]) < 0:
            raise ValueError(f"engine valiant: mask_memo must be 0 (none) or a number of masks, "
                             f"not {self.opts['mask_memo']}")
        self._mm_size, self._mm_hits = int(self.opts["mask_memo"]), 0
        self._mkeys = self.comp.mask_keys if self._mm_size else []
        self.backend = None
        if self.opts["backend"] == "cuda":
            from .cuda_kernels import CudaSearch

            self.backend = CudaSearch(self.comp, workers=int(self.opts["workers"]), bfs_depth=int(self.opts["bfs_depth"]))
        self.reset()
        self._compile_entry_points()

    def _compile_entry_points(self) -> None:
        """numba's loads and compiles here, in init, and not in a mask: the jitted functions this engine calls from
        Python, for the argument types of their real calls (:func:`~gcdbench.parsers.targets.compile_for`), without
        computing a mask. One CPU thread (the default) calls two: ``fill_host`` (a whole mask) and ``walk_bytes``
        (a commit). With ``threads`` > 1 a mask at the empty prefix is computed once and forgotten, which reaches
        the functions that path calls from Python; the CUDA backend's kernels compile at their first launch. A
        function a later mask still meets first is compiled inside that mask, which the worker marks
        (:mod:`gcdbench.experiments.jitwatch`)."""
        s = self.store
        compile_for(walk_bytes, *s.args(), s.cfg, np.frombuffer(b" ", dtype=np.uint8), *self._statics[:3])
        if self.backend is not None:
            return
        mask = allocate_mask(self.vocab_size)
        if self.threads == 1:
            compile_for(fill_host, *self._host_args(mask, s))
        else:
            self._fill(mask, self.threads)
            self.reset()
            self._tot[:] = 0
            self._memo_hits = self._steps_done = self._adopted_done = 0

    def reset(self) -> None:
        old = getattr(self, "store", None)
        if old is not None:
            self._steps_done += old.steps
            self._adopted_done += old.adopted
            self._memo_hits += old.memo_hits
        if old is not None and self.backend is None:
            old.clear()         # the arrays and the room they grew to stay (a CUDA arena mirrors one store: new one)
        else:
            self.store = ChartStore(self.comp.grammar, self._statics, self._depth, self._k_root,
                                    self.comp.align.n_nodes)
        self._hkey = self._hargs = None     # fill_host's arguments (_host_args), built at the next mask
        # configurations -> whole mask (mask_memo; _remember), and the keys seen once; they name this store's nodes
        self._mm: dict = {}
        self._mm_on, self._mm_puts, self._mm_seq_hits = self._mm_size > 0, 0, 0
        self._mm_seen: set = set()
        # (base chart node, lists in use) -> viable trie nodes, for the masks computed from Python (threads > 1, CUDA);
        # a chart node never changes, so neither does its search: steps inside one piece (long names) reuse it
        self._memo: dict[tuple, np.ndarray] = {}

    @property
    def configs(self) -> list[tuple[int, int]]:
        """The lexer configurations of the prefix: ``(chart node of the boundary where the piece in progress began,
        lexer state or START)``, sorted; every piece before it is in the chart."""
        return self.store.configs

    def commit(self, token_id: int) -> bool:
        """One jitted call over the token's bytes (``store_kernels.walk_bytes``: the lexer over configurations,
        one boundary chart node per byte where pieces end)."""
        if not self._walkable(token_id):
            return False
        return self._walk(np.frombuffer(self.tokenizer.token_bytes[token_id], dtype=np.uint8)) > 0

    def _walkable(self, token_id: int) -> bool:
        """Whether a commit of ``token_id`` walks its bytes: False (refused without a walk) for an id outside the
        vocabulary, an empty (special) token or a dead sequence."""
        return 0 <= token_id < self.vocab_size and bool(self.tokenizer.token_bytes[token_id]) \
            and bool(self.store.hdr[H_NCFG])

    def _walk(self, arr: np.ndarray) -> int:
        """``walk_bytes`` over ``arr``, the store grown until it fits: the configurations left (0: refused, and the
        sequence is dead from then on)."""
        s = self.store
        while True:
            r = walk_bytes(*s.args(), s.cfg, arr, *self._statics[:3])
            if r >= 0:
                break
            s.grow()
        if r == 0:
            s.hdr[H_NCFG] = 0
        return r

    def accepting(self) -> bool:
        return self.store.plan()[2]

    # -- masks -------------------------------------------------------------------------------------
    def _bases_acc(self, lazy: bool = False):
        """({base: (boundary without leading ignore, boundary with leading ignore, lexer states)}, whether the prefix
        is a sentence) from ``ChartStore.plan`` (``store_mask._plan``); with ``lazy`` a base ``c + t`` not made
        yet that only non-final lexer states need is keyed ``(c, t)``."""
        rows, xs, acc = self.store.plan(lazy)
        bases = {}
        for node, c, t, fl, x0, x1 in rows.tolist():
            bases[node if node >= 0 else (c, t)] = (bool(fl & 1), bool(fl & 2), tuple(xs[x0:x1].tolist()))
        return bases, acc

    def _bases(self):
        """base chart -> (boundary without leading ignore, boundary with leading ignore, lexer states)"""
        return self._bases_acc()[0]

    def needed(self, b0: bool, b1: bool, xs) -> np.ndarray:
        """The nodes the first phase of a search from a base with these lists in use visits."""
        al, ch = self.comp.align, self._chain
        out = np.zeros(al.n_nodes, dtype=np.uint8)
        needed_nodes(out, ch["need_b0"], ch["need_b1"], b0, b1, np.asarray(xs, dtype=np.int32), al.cont_xstart,
                     al.cont_nodes, al.node_parent, ch["chain"])
        return out

    def _remember(self, key, out: np.ndarray) -> None:
        """Keep ``out`` as the mask of configurations ``key``, a key seen before (a key seen once costs a set entry,
        not a copy, so grammars whose prefixes never repeat a configuration pay little); a full memo gives up its
        oldest mask and its array. A prefix's configurations name chart nodes, which never change while the store
        lives, so the same key means the same mask; the memo is dropped with the store's nodes at :meth:`reset`."""
        self._mm_puts += 1
        if self._mm_puts > self._mm_size and 4 * self._mm_seq_hits < self._mm_puts:
            # the repeating keys cycle through more than the memo holds (a {256} count): copies that no mask
            # reads again; off until reset, so such a sequence pays only what it paid before the memo filled
            self._mm_on = False
            self._mm.clear()
            self._mm_seen.clear()
            return
        if len(self._mm) < self._mm_size:
            self._mm[key] = out.copy()
            return
        arr = self._mm.pop(next(iter(self._mm)))
        np.copyto(arr, out)
        self._mm[key] = arr

    def _host_args(self, out: np.ndarray, s: ChartStore) -> tuple:
        """``fill_host``'s 19 arguments for ``out`` and store ``s``, built once and kept while they hold: the same
        output array and store, none of the store's arrays replaced since (``ChartStore.gen``) and the same thread
        (its assembled-token cache). Building them anew was about a microsecond a mask, a fifth of a cached one."""
        k, tid = self._hkey, threading.get_ident()
        if k is not None and k[0] is out and k[1] is s and k[2] == s.gen and k[3] == tid:
            return self._hargs
        self._hkey = (out, s, s.gen, tid)
        self._hargs = (out.view(np.uint32), s.mem, s.nodes, s.hdr, s.kept, s.medge, s.memo, s.work, s.scr, s.cfg,
                       self._flags, self._tot, self.tokenizer.eos_id, *self._acache(), *self._statics)
        # the compiled function for these argument types, called without numba's dispatch (which types each of the
        # 19 arguments at every call, about a quarter of a microsecond). Only ``out`` comes from the caller; the
        # other arrays are this engine's, of fixed types.
        tk = (out.dtype.str, out.ndim, out.flags.c_contiguous, out.flags.writeable, out.flags.aligned)
        fn = self._host_fns.get(tk)
        if fn is None:
            fn = self._host_fns[tk] = compile_for(fill_host, *self._hargs)
        self._host_fn = fn
        return self._hargs

    def _acache(self) -> tuple:
        """This thread's assembled-token cache (rows of a packed mask's uint32 words, keys), made at its first use."""
        k = threading.get_ident()
        c = self._ac.get(k)
        if c is None:
            c = self._ac[k] = self._new_cache()
        return c

    def _new_cache(self) -> tuple:
        """An empty assembled-token cache: (rows of a packed mask's uint32 words, keys)."""
        S, words = int(self.opts["mask_cache"]), allocate_mask(self.vocab_size).view(np.uint32).size
        return np.zeros((S, words), np.uint32), np.zeros((S, self._ac_width), np.int32)

    def _scratch(self, n: int, T: int):
        """Arena room for the kept root-child charts and the search's tiers from a base of ``n`` tiers, and (work,
        step scratch) for ``T`` threads sized for it (grown as needed). Returns (stride, kept-chart words per
        worker, (work, scratch))."""
        sz = self._sizes.get(n)
        if sz is None:
            g, D = self.comp.grammar, self._depth
            sz = self._sizes[n] = (g.node_words(n + D), self._k_root * g.node_words(n),
                                   self.threads * (self._k_root * g.node_words(n) + g.node_words(n + D) * (D + 2)))
        self.store._ensure(self.store.used + sz[2])
        m, ws = self._ws.get(T, (-1, None))
        if n > m:
            g, D = self.comp.grammar, self._depth
            m = 2 * n + 64
            shape = (T,) if T > 1 else ()
            ws = (np.zeros(shape + (work_words(D, m, self._k_root),), np.int64),
                  np.zeros(shape + (g.WN + g.scratch_words(m + D),), np.uint64))
            self._ws[T] = (m, ws)
        return sz[0], sz[1], ws

    def _node(self, base: int) -> tuple:
        """(tiers, EXPECT offset, last terminal) of chart node ``base``."""
        row = self.store.nodes[base]
        return int(row[NC_DEPTH]), int(row[NC_P]) + self.comp.grammar.WN, int(row[NC_TERM])

    def _base_mask(self, u, base: int, b0: bool, b1: bool, xs: np.ndarray, memo, clear: bool, eos: int, acc: bool,
                   need=None, T: int = 1, phase: int = 1) -> int:
        """OR base ``base``'s tokens into ``u`` (searching unless ``memo`` holds its viable nodes; zeroing ``u`` first
        if ``clear``; setting the EOS bit to ``acc`` if ``eos >= 0``); returns the number of viable nodes
        (``self._vbuf`` holds them after a search). A first-phase search keeps the charts of the root's viable
        children in the arena: the store adopts them when the next mask's base charts are among them. ``T``: threads;
        ``phase``: see ``cpu_mask.mask_base``. (The masks of ``T`` > 1 threads and of the CUDA backend; one
        thread's are ``store_mask.fill_host``.)"""
        store = self.store
        n, e_off, term = self._node(base)
        stride, keep, (work, scr) = self._scratch(n, T)
        search = memo is None and need is None
        viable = self._vbuf if search else memo
        nv = 0 if search else viable.size
        L = self._depth + 2
        K = self._k_root
        keep_off = store.used if search and phase == 1 and K and store.kept_row(base) is None else -1
        ac = self._acache()
        N = self.comp.align.n_nodes
        flags, xflag = self._flags[:2 * N], self._flags[2 * N:]
        if T > 1:
            nv = mask_base_par(u, store.mem, store.nodes, base, e_off, term, b0, b1, xs, search, viable, nv, work, L,
                               flags, scr, store.used + T * keep, stride, keep_off, clear, eos, acc, self._tot, keep,
                               self._vb2[0], self._vb2[1], phase, xflag, *ac, *self._statics)
            if keep_off >= 0:
                maps = work[:, work.shape[1] - K - 1:]
                if maps[:, K].any():
                    store.keep(base, maps[:, :K].max(axis=0))
                    store.used = max(keep_off + w * keep + int(maps[w, K]) * (keep // K) for w in range(T))
        else:
            nv = mask_base(u, store.mem, store.nodes, base, e_off, term, b0, b1, xs, search, viable, nv, work, L,
                           flags, scr, store.used + keep, stride, keep_off, clear, eos, acc, self._tot, phase, xflag,
                           *ac, *self._statics)
            if keep_off >= 0:
                used = int(work[-1])
                if used:
                    store.keep(base, work[-K - 1:-1])
                    store.used = keep_off + used * (keep // K)
        return nv

    def search(self, base: int, needed: np.ndarray | None = None):
        """Viable trie nodes from chart node ``base`` among ``needed`` (default: all) (CPU, one thread)."""
        store, al = self.store, self.comp.align
        if needed is None:
            needed = np.ones(al.n_nodes, dtype=np.uint8)
        n, e_off, term = self._node(base)
        stride, _, (work, scr) = self._scratch(n, 1)
        viable = np.zeros(al.n_nodes, dtype=np.int32)
        L = self._depth + 2
        cnt = search_nodes(store.mem, store.nodes, base, e_off, term, needed, viable, work, L, scr, store.used, stride,
                           *self._statics[:3])
        return viable[:cnt]

    @property
    def counters(self) -> dict:
        """Work done so far (load-independent; experiments/bench.py reports them per mask): tree searches, their memo
        hits, chart steps in searches and of base charts, trie nodes checked, viable nodes, chain nodes taken
        without a step (certify), leaf children proven viable without their parent's chart, base charts adopted
        from an earlier search's kept charts, base charts a mask did without (mask_virtual), searches of merged
        boundaries' chains (a mask's second phase: cpu_mask.mask_base), bases' token sets taken from the
        assembled-token cache and assembled (cpu_mask.fill_cached), whole masks copied from the mask memo
        (mask_memo)."""
        t = self._tot.tolist()
        return {"searches": t[N_STATS], "search_memo_hits": self._memo_hits + self.store.memo_hits,
                "chart_steps": t[ST_STEPS], "base_steps": self._steps_done + self.store.steps,
                "nodes_checked": t[ST_CHECKED], "viable_nodes": t[ST_VIABLE], "chain_aliases": t[ST_ALIASED],
                "leaves_certified": t[ST_CERTIFIED], "adopted_charts": self._adopted_done + self.store.adopted,
                "base_charts_skipped": t[N_STATS + 1], "chain_searches": t[N_STATS + 2],
                "token_sets_cached": t[AC_HITS], "token_sets_assembled": t[AC_FILLS], "masks_reused": self._mm_hits}

    headline_counters = {"chart steps": ("chart_steps", "base_steps"), "searches": ("searches",)}
    #: chart steps of one mask (in searches and of base charts), grouped for work_kind
    _STEP_BINS = ((0, "0"), (1, "1"), (4, "2-4"), (16, "5-16"))

    def work_kind(self, work: dict) -> str:
        """A mask's kind of work from its counters: a whole mask copied from the mask memo; else whether it ran a
        tree search, how many chart steps it took (0, 1, 2-4, 5-16, 17+) and whether it assembled a base's token
        set afresh (the assembled-token cache missed)."""
        if work.get("masks_reused"):
            return "whole mask from the memo"
        steps = work.get("chart_steps", 0) + work.get("base_steps", 0)
        label = next((name for top, name in self._STEP_BINS if steps <= top), "17+")
        kind = f"{'searched' if work.get('searches') else 'no search'}, {label} chart steps"
        return kind + (", token set assembled" if work.get("token_sets_assembled") else "")

    def fill_mask(self, out: np.ndarray) -> None:
        self._fill(out, self.threads)

    def _fill(self, out: np.ndarray, T: int) -> None:
        """The mask into ``out``, each search on ``T`` threads: one jitted call on the CPU with one thread
        (``store_mask.fill_host``), else the bases' loop here."""
        if self.backend is None and T == 1:
            s = self.store
            if self._mm_on:
                n, cfg = s.hdr.item(H_NCFG), s.cfg
                # one configuration (most prefixes): its node and what a mask reads of its lexer state
                # (Compiled.mask_keys); else the rows' bytes
                key = (cfg.item(0, 0), self._mkeys[cfg.item(0, 1) + 1]) if n == 1 else cfg[:n].tobytes()
                kept = self._mm.get(key)
                if kept is not None:
                    np.copyto(out, kept)
                    self._mm_hits += 1
                    self._mm_seq_hits += 1
                    return
            while True:
                args = self._host_args(out, s)
                # the compiled entry point, unless this module's fill_host is wrapped (bench masks --phases times it)
                if not (self._host_fn if fill_host is _FILL_HOST else fill_host)(*args):
                    break
                s.grow()
            if self._mm_on:
                if key in self._mm_seen:
                    self._remember(key, out)
                elif len(self._mm_seen) < 64 * self._mm_size:
                    self._mm_seen.add(key)
                else:
                    self._mm_seen = {key}
            return
        u = out.view(np.uint32)
        bases, acc = self._bases_acc(lazy=self.backend is None)
        eos = self.tokenizer.eos_id
        if not bases:
            u[:] = 0
            return
        last = len(bases) - 1
        later = []       # the bases a second phase may search (cpu_mask.mask_base)
        ch = self._chain
        N = self.comp.align.n_nodes
        for i, (base, (b0, b1, xt)) in enumerate(bases.items()):
            xa = np.array(xt, dtype=np.int32)
            e = eos if i == last else -1
            if ch["any"] and ((b0 and ch["b0"]) or (b1 and ch["b1"]) or ch["x_chain"][xa].any()):
                later.append((base, b0, b1, xa))
            if type(base) is tuple:    # c + t, needed only by lexer states inside t: maybe no chart at all
                c, t = base
                if mask_virtual(u, self.store.mem, self.store.nodes, c, t, xa, self._vbuf, self._flags[:2 * N],
                                self._ws1, i == 0, e, acc, self._tot, *self._acache(), *self._statics) >= 0:
                    continue
                base = self.store.child(c, t)
                if later and later[-1][0] == (c, t):
                    later[-1] = (base, b0, b1, xa)
            key = (base, b0, b1, xt)
            memo = self._memo.get(key)
            if memo is not None:
                self._memo_hits += 1
                self._base_mask(u, base, b0, b1, xa, memo, i == 0, e, acc, T=T)
                continue
            if self.backend is not None:
                memo = self.backend.search(self.store, base, self.needed(b0, b1, xa))
                self._base_mask(u, base, b0, b1, xa, memo, i == 0, e, acc, need=True, T=T)
            else:
                nv = self._base_mask(u, base, b0, b1, xa, None, i == 0, e, acc, T=T)
                memo = self._vbuf[:nv].copy()
            if len(self._memo) > 64:
                self._memo.clear()
            self._memo[key] = memo
        for base, b0, b1, xa in later:     # the chains, for the tokens no base has allowed yet
            if type(base) is tuple:
                base = self.store.child(*base)
            if self.backend is None:
                self._base_mask(u, base, b0, b1, xa, None, False, -1, acc, T=T, phase=2)
                continue
            needed = np.zeros(N, dtype=np.uint8)
            _, si, sl, _ = self._statics
            lo, hi = 0, FIRST_ROUND       # the rounds of cpu_mask._second_phase
            e_off = self._node(base)[1]
            while True:
                cnt, deeper = chain_needed(u, needed, b0, b1, xa, self._flags[2 * N:], lo, hi, self.store.mem, e_off,
                                           si, sl)
                if cnt:
                    viable = self.backend.search(self.store, base, needed)
                    self._base_mask(u, base, b0, b1, xa, viable, False, -1, acc, need=True, T=T)
                if not deeper:
                    break
                lo, hi = hi, 2 * hi

    # -- batch ---------------------------------------------------------------------------------------------
    def fork(self) -> "ValiantEngine":
        """A new sequence over the same compiled grammar and alignment (and CUDA backend), at the empty prefix,
        with its own chart store, scratch and work counters."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.opts = dict(self.opts)
        other._flags = np.zeros_like(self._flags)
        other._vbuf = np.zeros_like(self._vbuf)
        other._ws1 = np.zeros_like(self._ws1)
        other._tot = np.zeros_like(self._tot)
        other._ws, other._sizes = {}, {}
        if self.threads > 1:
            other._vb2 = tuple(np.zeros_like(a) for a in self._vb2)
        other._memo_hits = other._steps_done = other._adopted_done = other._mm_hits = 0
        other._lanes = None
        other.store = None
        if self.backend is not None:
            # the device tables are shared; the device arena mirrors one chart store, so each sequence gets its own
            # (sharing one would re-copy a whole chart whenever the searched sequence changes)
            import copy

            b = other.backend = copy.copy(self.backend)
            b.dmem, b.synced, b._store = None, 0, None
            b.stats = dict.fromkeys(self.backend.stats, 0)
            b.launched = []
        other.reset()
        return other

    def fill_masks(self, seqs: Sequence["ValiantEngine"], out: np.ndarray) -> None:
        """CPU, ``threads`` = T > 1 and several sequences: one parallel nogil call a step (:mod:`.batch`): T of
        numba's threads claim the sequences one at a time from a shared counter, each mask on one thread.
        Otherwise one ``fill_mask`` per sequence (one sequence with ``threads`` > 1: its search runs on the
        threads, as in single mode; CUDA: one search launch per sequence)."""
        for s in seqs:
            if getattr(s, "comp", None) is not self.comp:
                raise ValueError("valiant: fill_masks takes this engine and its forks only (one compiled grammar)")
        if out.ndim != 2 or out.shape[0] < len(seqs):
            raise ValueError(f"valiant: out must be a [>= {len(seqs)}, words] int32 array")
        if self.backend is not None or self.threads <= 1 or len(seqs) <= 1:
            for i, s in enumerate(seqs):
                s.fill_mask(out[i])
            return
        lanes = getattr(self, "_lanes", None)
        if lanes is None or lanes.key != tuple(map(id, seqs)):
            from .batch import Lanes

            lanes = self._lanes = Lanes(seqs, min(self.threads, len(seqs)), self._new_cache)
        lanes.fill(out.view(np.uint32), self.tokenizer.eos_id, self._statics)

    def commit_many(self, seqs: Sequence["ValiantEngine"], tokens: Sequence[int]) -> list:
        """CPU, ``threads`` > 1, several sequences of the lanes ``fill_masks`` made: one parallel nogil call walks
        every token (:meth:`.batch.Lanes.commit`), each on the thread that claims it, as the masks are; the
        results are ``commit``'s. Otherwise one ``commit`` per sequence."""
        lanes = getattr(self, "_lanes", None)
        if self.backend is not None or self.threads <= 1 or len(seqs) <= 1 or lanes is None:
            return super().commit_many(seqs, tokens)
        results: list = [False] * len(seqs)
        which, ids, pos = [], [], []
        for j, (s, t) in enumerate(zip(seqs, tokens)):
            k = lanes.index.get(id(s))
            if k is None:
                results[j] = super().commit_many([s], [t])[0]
            elif s._walkable(t):
                which.append(k)
                ids.append(t)
                pos.append(j)
        if which:
            try:
                left = lanes.commit(np.array(which, np.int64), np.array(ids, np.int64), *self._token_bytes_flat(),
                                    self._statics)
            except Exception as err:   # noqa: BLE001 - the call's sequences may be half committed: each fails
                for j in pos:
                    results[j] = err
            else:
                for j, r in zip(pos, left.tolist()):
                    results[j] = r > 0
        return results

    def _token_bytes_flat(self) -> tuple[np.ndarray, np.ndarray]:
        """(every token's bytes one after another, uint8; where token t's begin, int64, one more than the
        vocabulary): token t is ``data[start[t]:start[t + 1]]``."""
        flat = getattr(self, "_tok_flat", None)
        if flat is None or flat[0] is not self.tokenizer:
            tb = self.tokenizer.token_bytes
            start = np.zeros(len(tb) + 1, dtype=np.int64)
            np.cumsum([len(b) for b in tb], out=start[1:])
            flat = self._tok_flat = (self.tokenizer, np.frombuffer(b"".join(tb), dtype=np.uint8), start)
        return flat[1:]

    def close(self) -> None:
        self._lanes = None

    def info(self) -> dict:
        m = self.comp.meta
        return {"cnf": m["cnf"], "lexer_states": m["lexer_states"], "lexer_classes": m["lexer_classes"],
                "trie_nodes": m["trie_nodes"], "trie_depth": m["trie_depth"], "tuples": m["tuples"],
                "cache_hit": self.cache_hit, "backend": self.opts["backend"], "build_s": m.get("build_s")}
