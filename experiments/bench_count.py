"""``bench instructions``: instructions per mask and per commit under callgrind, for any engine (load-independent,
so before/after comparisons can be made on a busy machine).

Each (dataset, engine options) runs in a child under ``valgrind --tool=callgrind`` with collection switched on
only inside ``fill_mask`` (then only inside ``commit``). ``--phases`` adds one pass per part of a mask that the
engine names in its ``instruction_phases`` class attribute (part -> names of functions in the engine's module,
or ``sub.name`` in a module of its package; collection on only inside calls to them), so the record also says
where a mask's instructions go (the rest is the Python around them). Needs valgrind and its headers
(``valgrind/callgrind.h``) and a C compiler.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gcdbench.experiments.bench_setup import engine_phases

_TOGGLE_C = """
#include <valgrind/callgrind.h>
void gcd_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void gcd_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void gcd_dump(const char *what) { CALLGRIND_DUMP_STATS_AT(what); }
int gcd_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""


def _toggle_lib(tmp: str):
    """ctypes handle on callgrind's client requests (compiled from valgrind's header into ``tmp``)."""
    import ctypes

    src, lib = Path(tmp) / "toggle.c", Path(tmp) / "toggle.so"
    src.write_text(_TOGGLE_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    h = ctypes.CDLL(str(lib))
    h.gcd_dump.argtypes = [ctypes.c_char_p]
    return h


def count_all(args) -> list[dict]:
    from gcdbench.experiments.bench_setup import option_sets, parse_overrides

    if shutil.which("valgrind") is None:
        raise SystemExit("bench instructions needs valgrind (apt-get install valgrind)")
    per_engine, _ = parse_overrides(args.overrides, args.engine)
    if args.phases:
        for engine in args.engine:
            if not engine_phases(engine):
                raise SystemExit(f"bench instructions --phases: engine {engine!r} names no instruction_phases")
    return [count_one(name, engine, opts, args) for name in args.dataset for engine in args.engine
            for opts in option_sets(engine, per_engine[engine], args.threads, args.sweep)]


def count_one(name: str, engine: str, opts: dict, args) -> dict:
    """Run one dataset's samples in a child under callgrind; instructions per mask and per commit (and per part
    of a mask with ``--phases``)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = {**os.environ, "PYTHONHASHSEED": "0",
               # the JIT's machine code differs under valgrind's CPU model: keep its numba cache apart
               "NUMBA_CACHE_DIR": os.path.expanduser("~/.cache/gcdbench/numba-callgrind")}
        n = "all" if args.n is None else str(args.n)
        over = [f"{k}={json.dumps(v)}" for k, v in opts.items()]
        over += [o for o in args.overrides if o.startswith("dataset.")]
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
               f"--callgrind-out-file={out}", sys.executable, "-m", "gcdbench.experiments.bench", "instructions",
               "--count-child", tmp, "--engine", engine, "--dataset", name, "--n", n, "--seed", str(args.seed),
               "--data-root", args.data_root, "--tokenizer", args.tokenizer, "--max-steps", str(args.max_steps),
               *(["--phases"] if args.phases else []), *over]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"callgrind child failed ({r.returncode}):\n{r.stderr[-3000:]}")
        counts = json.loads(r.stdout.strip().splitlines()[-1])
        phases = engine_phases(engine) if args.phases else {}
        totals = {}
        for f in sorted(Path(tmp).glob("cg.out*")):
            text = f.read_text(errors="replace")
            what = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("desc: Trigger:")), "")
            tot = next((int(ln.split()[1]) for ln in text.splitlines() if ln.startswith(("totals:", "summary:"))), 0)
            for key in ("masks", "commits", *phases):
                if what.endswith(f": {key}"):
                    totals[key] = tot
    masks = max(1, counts["masks"])
    rec = {"dataset": name, "tokenizer": args.tokenizer, "engine": engine, "options": opts,
           "samples": counts["samples"], "masks": counts["masks"], "commits": counts["commits"],
           "instructions_per_mask": round(totals["masks"] / masks),
           "instructions_per_commit": round(totals["commits"] / max(1, counts["commits"])),
           "instructions_masks_total": totals["masks"], "instructions_commits_total": totals["commits"],
           "work_per_mask": {k: round(v / masks, 2) for k, v in sorted(counts.get("work", {}).items())}}
    if phases:
        parts = {k: round(totals.get(k, 0) / masks) for k in phases}
        parts["python_rest"] = rec["instructions_per_mask"] - sum(parts.values())
        rec["instructions_per_mask_by_part"] = parts
    print(json.dumps(rec, default=str), flush=True)
    return rec


def count_child(args) -> None:
    """Inside callgrind: warm up on the first sample, then collect only inside fill_mask (pass "masks"), only
    inside commit (pass "commits") and, with ``--phases``, only inside each part of a mask; one dump per pass.
    The engine's work counters are summed over the masks of the first pass."""
    from gcdbench.experiments.bench_setup import (_compile, _counters, load, parse_overrides, patch_phases,
                                                  unpatch_phases)
    from gcdbench.experiments.steplog import step_along
    from gcdbench.parsers.base import allocate_mask
    from gcdbench.parsers.tokenizers import load_tokenizer

    engine = args.engine[0]
    per_engine, dopts = parse_overrides(args.overrides, args.engine)
    phases = engine_phases(engine) if args.phases else {}
    cg = _toggle_lib(args.count_child)
    tok = load_tokenizer(args.tokenizer)
    ds = load(args.dataset[0], dopts, args.data_root, args.n, args.seed)
    e, _ = _compile(engine, per_engine[engine], ds.grammar, tok, os.path.join(args.count_child, "cache"))
    mask = allocate_mask(tok.vocab_size)
    counts = {"samples": len(ds.samples), "masks": 0, "commits": 0, "work": {}}
    in_mask = [False]

    def collecting(fn):
        def wrapped(*a, **k):
            if not in_mask[0]:
                return fn(*a, **k)
            cg.gcd_toggle()
            try:
                return fn(*a, **k)
            finally:
                cg.gcd_toggle()
        return wrapped

    class Collected:
        """``e`` with callgrind collecting only inside its masks (pass "masks"), only inside its commits (pass
        "commits"), or only inside the wrapped functions of a part while it fills a mask (a phase's pass)."""

        def __init__(self, where):
            self.where = where

        def reset(self):
            e.reset()

        def fill_mask(self, out):
            before = _counters(e)
            in_mask[0] = self.where in phases
            if self.where == "masks":
                cg.gcd_toggle()
            e.fill_mask(out)
            if self.where == "masks":
                cg.gcd_toggle()
                counts["masks"] += 1
                for key, v in _counters(e).items():
                    counts["work"][key] = counts["work"].get(key, 0) + v - before.get(key, 0)
            in_mask[0] = False

        def commit(self, t):
            if self.where == "commits":
                cg.gcd_toggle()
            ok = e.commit(t)
            if self.where == "commits":
                cg.gcd_toggle()
                counts["commits"] += 1
            return ok

    def run(sample, where):
        ids = sample.ids(tok)
        if args.max_steps:
            ids = ids[: args.max_steps]
        step_along(Collected(where), ids + [tok.eos_id], mask, raise_errors=True)

    for s in ds.samples[:1]:
        run(s, None)                 # loads every jitted function outside the counts
    cg.gcd_start()
    for where in ["masks", "commits", *phases]:
        saved = patch_phases(engine, {where: phases[where]} if where in phases else {}, lambda _p, fn: collecting(fn))
        for s in ds.samples:
            run(s, where)
        unpatch_phases(saved)
        cg.gcd_dump(where.encode())
    print(json.dumps(counts), flush=True)
