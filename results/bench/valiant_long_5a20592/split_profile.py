"""Where a Valiant mask's time goes: each jitted entry point the mask calls from Python wrapped in a timer
(the wrapper adds ~0.1 us a call, counted in the entry's share). Usage: split.py DATASET [N] [lengths]"""
import sys, time, collections
import numpy as np
from gcdbench.experiments.bench_setup import load
from gcdbench.parsers.tokenizers import load_tokenizer
from gcdbench.parsers.base import allocate_mask
import gcdbench.parsers.valiant.engine as eng
import gcdbench.parsers.valiant.chart_store as cs
from gcdbench.parsers.valiant.engine import ValiantEngine

T = collections.Counter(); C = collections.Counter(); IN = [False]
perf = time.perf_counter_ns
def wrap(mod, name):
    f = getattr(mod, name)
    def w(*a):
        t0 = perf(); r = f(*a)
        if IN[0] is not None:
            k = name if IN[0] else name + " (commit)"
            T[k] += perf() - t0; C[k] += 1
        return r
    setattr(mod, name, w)
for n in ("mask_base", "mask_virtual", "chain_needed", "needed_nodes"):
    wrap(eng, n)
for n in ("extend", "extend_edges"):
    wrap(cs, n)
name = sys.argv[1]; n = None if len(sys.argv) < 3 or sys.argv[2] == "all" else int(sys.argv[2])
opts = {}
if len(sys.argv) > 3:
    opts["lengths"] = [int(x) for x in sys.argv[3].split(",")]
ds = load(name, opts, "../shared/data", n, 0)
tok = load_tokenizer("qwen3")
e = ValiantEngine(); e.compile(ds.grammar, tok)
m = allocate_mask(tok.vocab_size)
streams = [s.ids(tok) for s in ds.samples]
for rep in range(2):          # first pass: warm-up (jit loads); second timed
    T.clear(); C.clear(); fill = 0; masks = 0; asm = nasm = nvs = 0
    c0 = dict(e.counters)
    for ids in streams:
        e.reset()
        for t in list(ids) + [None]:
            IN[0] = True; t0 = perf(); e.fill_mask(m); fill += perf() - t0; masks += 1; IN[0] = False
            # the same mask's token assembly alone: each base's memoised viable nodes through mask_base's
            # memo path (dispatch + fill_tokens, no search)
            IN[0] = None
            u = np.zeros_like(m).view(np.uint32)
            bases, acc = e._bases_acc(lazy=True)
            for base, (b0, b1, xs) in bases.items():
                memo = e._memo.get((base, b0, b1, tuple(xs)))
                if memo is None:
                    continue
                xa = np.array(xs, dtype=np.int32)
                t0 = perf(); e._base_mask(u, base, b0, b1, xa, memo, False, -1, acc); asm += perf() - t0; nasm += 1
                nvs += memo.size
            IN[0] = False
            if t is not None:
                assert e.commit(t)
print(f"{name}: {masks} masks, fill mean {fill / masks / 1e3:.1f} us")
kern = 0
for k in sorted(T, key=T.get, reverse=True):
    kern += T[k] if "commit" not in k else 0
    print(f"  {k:14s} {T[k] / masks / 1e3:7.2f} us/mask  {C[k] / masks:6.2f} calls/mask  {T[k] / C[k] / 1e3:7.2f} us/call")
print(f"  python rest    {(fill - kern) / masks / 1e3:7.2f} us/mask (_bases_acc, _fill, the calls' dispatch)")
print(f"  assembly alone (memo path of mask_base: dispatch + fill_tokens): {asm / max(nasm, 1) / 1e3:.2f} us a base, "
      f"{nasm / masks:.2f} bases a mask, {nvs / max(nasm, 1):.1f} viable nodes a base")
print("  counters/mask", {k: round((v - c0[k]) / masks, 2) for k, v in e.counters.items()})
