"""Checks of Valiant's CUDA backend against its CPU backend, run as a child process by tests/test_valiant_cuda.py
(``NUMBA_ENABLE_CUDASIM`` must be set before numba.cuda starts, so the simulator needs a process of its own):

    python tests/valiant_cuda_cases.py CASE [options]      # prints "<CASE> ok ..." on success

``--fast`` installs the faster simulator scheduler (tests/cudasim_fast.py); ``--threads`` sets the threads per
block. Every case compares bit for bit: chart words, viable trie nodes, masks.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _engines(sp, tok, workers, bfs_depth, threads, token_states=256):
    """The CPU engine and the CUDA one (the second loads the first one's artifacts from a fresh disk cache)."""
    import tempfile

    from gcdbench.parsers.valiant.cuda_kernels import CudaSearch
    from gcdbench.parsers.valiant.engine import ValiantEngine

    cache = tempfile.mkdtemp(prefix="valiant-cuda-cases-")
    cpu = ValiantEngine(cache_dir=cache, token_states=token_states)
    cpu.compile(sp, tok)
    gpu = ValiantEngine(cache_dir=cache, backend="cuda", workers=workers, bfs_depth=bfs_depth,
                        token_states=token_states)
    gpu.compile(sp, tok)
    gpu.backend = CudaSearch(gpu.comp, workers=workers, bfs_depth=bfs_depth, threads=threads)
    return cpu, gpu


def _mask(e, vocab_size):
    from gcdbench.parsers.base import allocate_mask

    m = allocate_mask(vocab_size)
    e.fill_mask(m)
    return m


def case_step(args) -> str:
    """step_kernel (device.chart_step on the device, one block) == the CPU step, word for word, along
    random walks long enough for multi-word rows (more than 64 terminals); ``--only T``: walk terminal ``T`` alone;
    ``--device-from K``: the first K steps on the CPU only (long prefixes at the simulator's cost of a few)."""
    from numba import cuda
    from test_valiant import spec

    from gcdbench.parsers.grammar import load_ir
    from gcdbench.parsers.valiant.chart import PackedGrammar
    from gcdbench.parsers.valiant.cnf import to_cnf
    from gcdbench.parsers.valiant.cuda_kernels import Step, step_kernel
    from gcdbench.parsers.valiant.engine import ChartStore

    cnf = to_cnf(load_ir(spec(args.grammar)))
    g, g_terms = PackedGrammar.from_cnf(cnf), cnf.terminals
    gt = tuple(cuda.to_device(x) if isinstance(x, np.ndarray) else x for x in g.dev)
    rng = random.Random(4)
    steps = idem = 0
    for trial in range(args.trials):
        st = ChartStore(g)
        node = 0
        for _ in range(args.steps):
            exp = st.expected(node)
            if not exp:
                break
            t = rng.choice(exp) if args.only is None else g_terms.index(args.only)
            n = st.depth[node]
            if n < args.device_from:
                node = st.child(node, t)
                continue
            tiers, ps = st.path(node)
            nw = g.node_words(n)
            dmem = cuda.to_device(np.concatenate([st.mem[:st.used], np.zeros(nw, np.uint64)]))
            off = st.used
            info = cuda.to_device(np.zeros(1, np.int64))
            step = Step(cuda.to_device(tiers), cuda.to_device(ps), n, t, st.term[node], off, off + g.tier_words(n),
                        off + g.tier_words(n) + g.WN, cuda.to_device(np.zeros(g.scratch_words(n), np.uint64)),
                        cuda.to_device(np.zeros(g.WN, np.uint64)), info)
            step_kernel[1, args.threads](dmem, tuple(step), gt)
            dev = dmem.copy_to_host()[off:off + nw]
            node = st.child(node, t)
            host = st.mem[st.tier_off[node]:st.tier_off[node] + nw]   # tier, ANC, EXPECT and INFO words
            assert st.tier_off[node] == off and np.array_equal(dev, host), (trial, n, dev, host)
            assert bool(info.copy_to_host()[0] & 1) == st.accept[node], (trial, n)
            idem += int(host[-1]) >> 2 != 0
            steps += 1
    return f"{steps} steps, {idem} certified idem"


def case_search(args) -> str:
    """Tree searches (all nodes, and the needed ones) and masks along the samples of a test grammar (with
    ``--token-states 1``, most multi-terminal tokens aligned on merged boundaries)."""
    from test_valiant import SAMPLES, multi_tokenizer, spec

    tok = multi_tokenizer(SAMPLES[args.grammar][:2], extra=[b"');", b"))", b"((a", b"a+b)", b"(a b"])
    cpu, gpu = _engines(spec(args.grammar), tok, args.workers, args.bfs_depth, args.threads, args.token_states)
    if args.token_states < 256:
        assert cpu.comp.meta["merged_nodes"] > 0, "no merged boundary to compare"
    masks = 0
    for text in SAMPLES[args.grammar][:2]:
        cpu.reset()
        gpu.reset()
        for t in tok.encode(text) + [None]:
            bases = cpu._bases()
            assert bases == gpu._bases()
            for b, (b0, b1, xs) in bases.items():
                assert set(cpu.search(b).tolist()) == set(gpu.backend.search(gpu.store, b).tolist()), (text, b)
                nd = cpu.needed(b0, b1, xs)
                assert set(cpu.search(b, nd).tolist()) == set(gpu.backend.search(gpu.store, b, nd).tolist()), (text, b)
            assert np.array_equal(_mask(cpu, tok.vocab_size), _mask(gpu, tok.vocab_size)), (text, t)
            masks += 1
            if t is not None:
                assert cpu.commit(t) and gpu.commit(t)
    return f"{masks} masks, {cpu.comp.meta['merged_nodes']} merged nodes"


def case_grow(args) -> str:
    """Issue 13's defect: ten one-digit terminals and tokens of 1-3 digits, so the trie has 10 nodes at depth 1
    and 100 at depth 2, all with children: at bfs_depth 2 the BFS builds more than 64 charts. The device must
    keep every tier it computed (the old host loop reallocated a zeroed arena mid-search and lost them)."""
    from gcdbench.parsers.base import GrammarSpec
    from gcdbench.parsers.tokenizers import Tokenizer

    # (the second alternative gives each digit a parent of its own, so the ten are not one terminal class:
    # compiled.terminal_classes would make them one root child)
    sp = GrammarSpec(name="digits", lark="start: d+ | " + " ".join(f'"{i}"' for i in range(10)) + "\nd: "
                     + " | ".join(f'"{i}"' for i in range(10)) + "\n")
    toks = ([bytes([i]) for i in range(256)] + [f"{i:02d}".encode() for i in range(100)]
            + [f"{i:03d}".encode() for i in range(1000)])
    tok = Tokenizer(name="digits3", token_bytes=toks + [b""], eos_id=len(toks), special_ids={"<eos>": len(toks)})
    cpu, gpu = _engines(sp, tok, args.workers, 2, args.threads)
    for step, t in enumerate([ord("1"), ord("2"), None]):
        a, b = _mask(cpu, tok.vocab_size), _mask(gpu, tok.vocab_size)
        assert np.array_equal(a, b), f"step {step}: the cuda mask differs from the cpu mask"
        if t is not None:
            assert cpu.commit(t) and gpu.commit(t)
    assert gpu.backend.stats["bfs_nodes_max"] > 64, gpu.backend.stats
    return json.dumps(gpu.backend.stats)


def case_counts(args) -> str:
    """Launches and copies per mask and per commit, counted by CudaSearch's wrappers: per search at most
    bfs_depth + 1 launches, one job copy in, at most one arena copy in (the words committed since the last
    search), one flags copy out; nothing on commit; every committed word copied once (unless the arena grew)."""
    from test_valiant import SAMPLES, multi_tokenizer, spec

    tok = multi_tokenizer(SAMPLES["tiny_sql"], extra=[b"');"])
    cpu, gpu = _engines(spec("tiny_sql"), tok, args.workers, args.bfs_depth, args.threads)
    st = gpu.backend.stats
    per_mask = []
    for text in SAMPLES["tiny_sql"]:
        gpu.reset()
        cpu.reset()
        words0, recopied0 = st["arena_words"], st["arena_recopied"]
        for t in tok.encode(text) + [None]:
            before = dict(st)
            assert np.array_equal(_mask(cpu, tok.vocab_size), _mask(gpu, tok.vocab_size))
            d = {k: st[k] - before[k] for k in ("searches", "launches", "h2d", "d2h")}
            s = d["searches"]
            assert d["launches"] <= s * (args.bfs_depth + 1) and d["d2h"] == s and s <= d["h2d"] <= 2 * s, d
            per_mask.append(d)
            if t is None:
                break
            before = dict(st)
            assert cpu.commit(t) and gpu.commit(t)
            assert st == before, "a commit launched a kernel or copied"
        # the sample's committed words went to the device once each (again only after the arena had to grow)
        assert st["arena_words"] - words0 == gpu.backend.synced + st["arena_recopied"] - recopied0, st
    masks = len(per_mask)
    tot = {k: sum(d[k] for d in per_mask) for k in per_mask[0]}
    return json.dumps({"masks": masks, **tot, "max_launches_per_mask": max(d["launches"] for d in per_mask)})


def case_qwen3(args) -> str:
    """A Qwen3-size check: the real grammar of ``--dataset`` with the Qwen3 vocabulary, the first ``--steps``
    tokens of ``--text`` (or of the dataset's first sample): every CUDA mask equals the CPU mask."""
    from gcdbench.parsers.tokenizers import load_tokenizer

    tok = load_tokenizer("qwen3")
    if args.dataset == "treebank":
        from gcdbench.datasets.treebank import load_treebank

        ds = load_treebank(args.data_root, n=1, seed=args.seed)
        sp, text = ds.grammar, ds.samples[0].text
    else:
        from gcdbench.datasets.base import load_grammar

        sp = load_grammar(args.dataset)
        text = args.text
        if args.dataset == "spider_spop":
            from gcdbench.datasets.spider import to_spop

            text = to_spop(text)
    cpu, gpu = _engines(sp, tok, args.workers, args.bfs_depth, args.threads)
    ids = tok.encode(text)
    for t in ids[:args.skip]:        # a prefix committed without comparing masks (the commit path is the CPU's)
        assert cpu.commit(t) and gpu.commit(t)
    masks = 0
    for t in ids[args.skip:args.skip + args.steps] + ([None] if args.skip + args.steps >= len(ids) else []):
        assert np.array_equal(_mask(cpu, tok.vocab_size), _mask(gpu, tok.vocab_size)), (args.dataset, args.skip + masks)
        masks += 1
        if t is not None:
            assert cpu.commit(t) and gpu.commit(t)
    return json.dumps({"masks": masks, **gpu.backend.stats})


CASES = {"step": case_step, "search": case_search, "grow": case_grow, "counts": case_counts, "qwen3": case_qwen3}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--fast", action="store_true", help="the faster simulator scheduler (tests/cudasim_fast.py)")
    ap.add_argument("--threads", type=int, default=4, help="threads per block")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--bfs-depth", type=int, default=1)
    ap.add_argument("--grammar", default="tiny_sql")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--only", default=None, help="step: walk this terminal alone (its name)")
    ap.add_argument("--device-from", type=int, default=0, help="step: compare from this prefix length on")
    ap.add_argument("--skip", type=int, default=0, help="qwen3: tokens committed before the first compared mask")
    ap.add_argument("--dataset", default="spider")
    ap.add_argument("--text", default="SELECT count(*) FROM singer WHERE age > 20 AND name != 'Joe'")
    ap.add_argument("--data-root", default=str(HERE.parents[1] / "shared" / "data"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--token-states", type=int, default=256, help="the engine option (align.py: merged walks)")
    args = ap.parse_args(argv)
    if args.fast:
        import cudasim_fast

        cudasim_fast.install()
    print(f"{args.case} ok {CASES[args.case](args)}", flush=True)


if __name__ == "__main__":
    main()
