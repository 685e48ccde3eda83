"""Issue 27's fault cases replayed from the command line against any checkout, to show what each did before the
fixes (33f9155) and does now. Not a test module (pytest does not collect it): the tests of ``tests/test_faults.py``,
``test_runner.py``, ``test_sweeps.py``, ``test_audit_profiles.py`` and ``test_known_engine_behaviours.py`` use
today's APIs, so they cannot run on the old code; this script uses only what both have, the command line:

    python tests/fault_replay.py --tree <checkout> --python <its interpreter> --out <file.json>

Each case runs in its own temporary folder and is judged by the same rule at every commit (``ok``): no traceback
reaches the user, the run or report ends with the exit code and the one-line message or outcome the issue asks
for, and nothing is written outside ``out_dir``. Correctness evidence, not timing.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

WORDS = 'start: WORD (" " WORD)*\nWORD: /[a-z]+/\n'
RUN = ["-m", "experiments.run", "progress=false", "tokenizer=bytes"]
#: runs the runner and prints the parent's peak RSS (MB) last on stderr: the audit ran in the parent before
PEAK = ("import resource, runpy, sys\nsys.argv = ['run'] + sys.argv[1:]\ntry:\n"
        "    runpy.run_module('experiments.run', run_name='__main__')\nfinally:\n"
        "    print('PARENT_PEAK_MB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, file=sys.stderr)\n")


class Replay:
    def __init__(self, tree: Path, python: str):
        self.tree, self.python = tree, python

    def run(self, box: Path, *args: str, module=RUN, timeout: float = 600, env=None, cwd=None):
        t0 = time.monotonic()
        r = subprocess.run([self.python, *module, *args], cwd=cwd or self.tree, capture_output=True, text=True,
                           timeout=timeout, env={**os.environ, **(env or {})})
        return {"rc": r.returncode, "traceback": "Traceback" in r.stderr, "s": round(time.monotonic() - t0, 1),
                "last_line": (r.stderr.strip().splitlines() or [""])[-1][:300], "stderr": r.stderr}

    def report(self, results: Path, out: Path):
        return self.run(out, "--results", str(results), "--out", str(out), "--tokenizer", "bytes",
                        module=["-m", "experiments.report"])


def custom(box: Path, grammar: str, samples: str, name: str = "g") -> list[str]:
    (box / f"{name}.lark").write_text(grammar, encoding="utf-8")
    (box / f"{name}.txt").write_text(samples, encoding="utf-8")
    return ["dataset=custom", f"dataset.grammar={box / f'{name}.lark'}", f"dataset.samples={box / f'{name}.txt'}"]


def rows(out: Path, name: str = "samples.parquet"):
    import pandas as pd

    files = list(out.rglob(name))
    return pd.concat([pd.read_parquet(f) for f in files]) if files else None


def brief(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "stderr"}


# ----------------------------------------------------------------------------------------------------------------
# the cases: each returns (ok, what was seen)
# ----------------------------------------------------------------------------------------------------------------
def item1_audit_limits(rp: Replay, box: Path):
    """A 12,000-word sample audited under limits.memory_mb=700: the audit must not grow the parent past it."""
    args = custom(box, WORDS, " ".join(["ab"] * 12000) + "\n")
    r = rp.run(box, *args, "engine=psc", f"out_dir={box / 'out'}", "limits.memory_mb=700", "audit.per_sample=4",
               "limits.sample_timeout_s=120", module=["-c", PEAK])
    peak = float(r["stderr"].rsplit("PARENT_PEAK_MB", 1)[1].split()[0]) if "PARENT_PEAK_MB" in r["stderr"] else None
    meta = [json.loads(p.read_text()) for p in (box / "out").rglob("run.json")]
    audit_note = json.dumps([s.get("audit_error") or s.get("audit_skipped") for m in meta
                             for s in m.get("sessions", [])])[:300]
    return (r["rc"] == 0 and not r["traceback"] and peak is not None and peak < 700,
            {**brief(r), "parent_peak_mb": peak, "audit_note": audit_note})


def item1_resume_audit_off(rp: Replay, box: Path):
    """Masks saved for the audit, then a resume with audit.per_sample=0: dropped (and said), not audited."""
    args = custom(box, WORDS, "abc de\nxy\n")
    first = rp.run(box, *args, "engine=psc", f"out_dir={box / 'out'}", "audit.per_sample=2")
    cell = next((box / "out").rglob("run.json")).parent
    # the state a run stopped between its samples and their audit leaves: the parts and their saved masks
    parts = cell / "parts"
    parts.mkdir(exist_ok=True)
    for name in ("samples.parquet", "steps.parquet", "audit.parquet"):
        (cell / name).unlink(missing_ok=True)
    import numpy as np
    for sid in ("s-0000", "s-0001"):
        np.savez(parts / f"{sid}.audit.npz", **{"0": np.zeros(8, dtype=np.int32)})
    again = rp.run(box, *args, "engine=psc", f"out_dir={box / 'out'}", "audit.per_sample=0")
    said = "audit.per_sample=0 on resume" in again["stderr"]
    return (not again["traceback"] and again["rc"] == 0 and said and not list(parts.glob("*.audit.npz")),
            {"first": brief(first), "resume": brief(again), "said_dropped": said})


def item2_grammar_reference_cannot_read(rp: Replay, box: Path):
    """A scoped flag inside an alternation: one typed outcome, a finished cell, for LLGuidance and Valiant."""
    args = custom(box, "start: W\nW: /(?i)\u017ftra\u00dfe/ | /\\w+/\n", "hello\nstrasse\n")
    seen, ok = {}, True
    for engine in ("llguidance", "valiant"):
        out = box / f"out-{engine}"
        r = rp.run(box, *args, f"engine={engine}", f"out_dir={out}", "audit.per_sample=2")
        df = rows(out)
        outcomes = sorted(set(df["outcome"])) if df is not None else None
        seen[engine] = {**brief(r), "outcomes": outcomes}
        ok &= not r["traceback"] and df is not None and len(df) == 2 and "crash" not in outcomes
    return ok, seen


BURST = ("from gcdbench.parsers.reference import ReferenceEngine\n\n\nclass Burst(ReferenceEngine):\n"
         "    def compile(self, grammar, tokenizer):\n        burst = bytearray(400 << 20)\n"
         "        burst[::4096] = b'x' * len(burst[::4096])\n        del burst\n"
         "        super().compile(grammar, tokenizer)\n")


def item3_memory_burst(rp: Replay, box: Path):
    """An engine that touches 400 MB for a moment while compiling, under limits.memory_mb=300, five times: oom
    each time (a burst between two 0.1 s polls ended ok; the issue saw it with GLRMask's 81 MB peak under 50 MB)."""
    (box / "burst.py").write_text(BURST)
    args = custom(box, WORDS, "abc de\n")
    seen = []
    for i in range(5):
        out = box / f"out{i}"
        r = rp.run(box, *args, "engine=reference", "engine.name=burst:Burst", f"out_dir={out}",
                   "limits.memory_mb=300", "audit.per_sample=0", env={"PYTHONPATH": str(box)})
        df = rows(out)
        meta = [json.loads(p.read_text()) for p in out.rglob("run.json")]
        kinds = [m.get("compile_error_kind") for m in meta]
        outcome = sorted(set(df["outcome"])) if df is not None else None
        seen.append({"outcomes": outcome, "compile_error_kind": kinds, "traceback": r["traceback"],
                     "compile_peak_mb": [m.get("peak_rss_compile_mb") for m in meta]})
    return all(x["compile_error_kind"] == ["oom"] and not x["traceback"] for x in seen), {"runs": seen}


def item4_foreign_and_copied_cells(rp: Replay, box: Path):
    """A foreign run.json and a copied cell beside a real cell: the report is built, the cell reported once."""
    args = custom(box, WORDS, "abc de\n")
    rp.run(box, *args, "engine=psc", f"out_dir={box / 'runs' / 'a'}", "audit.per_sample=0")
    shutil.copytree(box / "runs" / "a", box / "runs" / "b")
    (box / "runs" / "stray").mkdir()
    (box / "runs" / "stray" / "run.json").write_text('{"foo": 1}')
    r = rp.report(box / "runs", box / "report")
    cells = (box / "report" / "cells.csv")
    n = len(cells.read_text().strip().splitlines()) - 1 if cells.exists() else None
    return (r["rc"] == 0 and not r["traceback"] and n == 1, {**brief(r), "cells_rows": n})


def item5_two_sweeps_at_once(rp: Replay, box: Path):
    """Two sweeps launched together into one out_dir: two sweep folders, each with its own jobs."""
    args = custom(box, WORDS, "abc de\n")
    cmd = [rp.python, "-m", "experiments.run", "-m", *RUN[2:], *args, "engine=psc,reference", f"out_dir={box / 'out'}", "audit.per_sample=0"]
    procs = [subprocess.Popen(cmd, cwd=rp.tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    folders = sorted({p.parent.name for p in (box / "out").rglob("multirun.yaml")})
    return (len(folders) == 2 and not any("Traceback" in e for e in errs),
            {"sweep_folders": folders, "rcs": [p.returncode for p in procs]})


def item6_path_in_a_name(rp: Replay, box: Path):
    """dataset.name=../../.. : nothing may be written outside out_dir."""
    deep = box / "a" / "b" / "c"
    deep.mkdir(parents=True)
    args = custom(box, WORDS, "abc de\n")
    before = {p for p in box.rglob("*")}
    r = rp.run(box, *args, "dataset.name=../../../../escape_g", "engine=psc", f"out_dir={deep / 'out'}")
    outside = sorted(str(p.relative_to(box)) for p in box.rglob("*") if p not in before and deep / "out" not in
                     [p, *p.parents])
    return (not outside and not r["traceback"] and r["rc"] != 0, {**brief(r), "written_outside": outside[:8]})


def item7_engine_name_not_an_engine(rp: Replay, box: Path):
    """engine.name=<module>:<function> must be refused before the function is called."""
    marker = box / "called.txt"
    (box / "sneaky.py").write_text(f"def touch(**kw):\n    open({str(marker)!r}, 'w').write('called')\n")
    args = custom(box, WORDS, "abc de\n")
    r = rp.run(box, *args, "engine=psc", "engine.name=sneaky:touch", f"out_dir={box / 'out'}",
               env={"PYTHONPATH": str(box)})
    return (not marker.exists() and not r["traceback"], {**brief(r), "function_called": marker.exists()})


def item8_odd_paths(rp: Replay, box: Path):
    """out_dir a file, report --out a file, grammar a directory, grammar /dev/zero: one line each."""
    args = custom(box, WORDS, "abc de\n")
    (box / "afile").write_text("x")
    seen, ok = {}, True
    cases = {"out_dir_is_a_file": [*args, "engine=psc", f"out_dir={box / 'afile'}"],
             "grammar_is_a_directory": ["dataset=custom", f"dataset.grammar={box}", f"dataset.samples={box / 'g.txt'}",
                                        "engine=psc", f"out_dir={box / 'o2'}"],
             "grammar_is_dev_zero": ["dataset=custom", "dataset.grammar=/dev/zero", f"dataset.samples={box / 'g.txt'}",
                                     "engine=psc", f"out_dir={box / 'o3'}"]}
    for name, a in cases.items():
        # /dev/zero was an unbounded read: a 3 GB address-space cap keeps the replay from taking the machine
        r = rp.run(box, *a, module=["-c", "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, "
                                    "(3 << 30, 3 << 30)); sys.argv = ['run'] + sys.argv[1:]; "
                                    "runpy.run_module('experiments.run', run_name='__main__')", *RUN[2:]], timeout=300)
        seen[name] = brief(r)
        ok &= r["rc"] == 2 and not r["traceback"]
    rp.run(box, *args, "engine=psc", f"out_dir={box / 'runs'}", "audit.per_sample=0")
    r = rp.report(box / "runs", box / "afile")
    seen["report_out_is_a_file"] = brief(r)
    ok &= r["rc"] != 0 and not r["traceback"]
    return ok, seen


def item9_bom(rp: Replay, box: Path):
    """A samples file starting with a UTF-8 BOM: the first sample is not counted against the engine."""
    args = custom(box, WORDS, "\ufeffabc de\nxy\n")
    r = rp.run(box, *args, "engine=psc", f"out_dir={box / 'out'}", "audit.per_sample=0")
    df = rows(box / "out")
    outcomes = list(df.sort_values("sample_id")["outcome"]) if df is not None else None
    return (outcomes == ["ok", "ok"] and not r["traceback"], {**brief(r), "outcomes": outcomes})


def item10_more_samples_than_exist(rp: Replay, box: Path):
    """samples=1000000 on a 2-line file: say how many exist."""
    args = custom(box, WORDS, "abc de\nxy\n")
    r = rp.run(box, *args, "samples=1000000", "engine=psc", f"out_dir={box / 'out'}", "audit.per_sample=0")
    said = "has 2 samples" in r["stderr"]
    return (said and r["rc"] == 0, {**brief(r), "said_how_many": said})


def item11_infinite_limit(rp: Replay, box: Path):
    """limits.run_timeout_s=inf: refused, or run.json stays strict JSON."""
    args = custom(box, WORDS, "abc de\n")
    r = rp.run(box, *args, "limits.run_timeout_s=inf", "engine=psc", f"out_dir={box / 'out'}", "audit.per_sample=0")
    strict = True
    for p in (box / "out").rglob("run.json"):
        try:
            json.loads(p.read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError:
            strict = False
    return (strict and not r["traceback"], {**brief(r), "run_json_strict": strict})


def item12_outside_the_repository(rp: Replay, box: Path):
    """From another folder: the installed package's runner runs a cell."""
    args = custom(box, WORDS, "abc de\n")
    r = rp.run(box, *args, "engine=psc", f"out_dir={box / 'out'}", "audit.per_sample=0",
               module=["-m", "gcdbench.experiments.run", *RUN[2:]], cwd=box)
    bare = rp.run(box, module=["-m", "experiments.run"], cwd=box)
    return (r["rc"] == 0, {"package_runner": brief(r), "bare_module_outside_root": brief(bare)})


def item13_killed_write(rp: Replay, box: Path):
    """The state a kill -9 inside the first merge leaves: the report names the cell; a resume cleans up."""
    args = custom(box, WORDS, "abc de\nxy\n")
    rp.run(box, *args, "engine=psc", f"out_dir={box / 'runs'}", "audit.per_sample=0")
    cell = next((box / "runs").rglob("run.json")).parent
    for name in ("samples.parquet", "steps.parquet", "audit.parquet"):
        (cell / name).unlink(missing_ok=True)
    (cell / ".steps.parquet.tmp99999").write_bytes(b"PAR1 half")
    rep = rp.report(box / "runs", box / "report")
    named = "holds no rows yet" in rep["stderr"] or "holds no rows yet" in (
        (box / "report" / "README.md").read_text() if (box / "report" / "README.md").exists() else "")
    again = rp.run(box, *args, "engine=psc", f"out_dir={box / 'runs'}", "audit.per_sample=0")
    left = [p.name for p in cell.glob(".*.tmp*")]
    return (named and not left and not rep["traceback"],
            {"report": brief(rep), "report_names_the_cell": named, "resume": brief(again), "temporaries_left": left})


def profile_gap_llguidance(rp: Replay, box: Path):
    """%ignore /\\s+/ with \\w+ words and Unicode spaces, audited at every step: LLGuidance vs its profile."""
    g = 'start: WORD ("," WORD)*\nWORD: /\\w+/\n%ignore /\\s+/\n'
    args = custom(box, g, "cafe\u0301 ,\u3000na\u00efve,\x85x1 \u2028, \u0663\u0664\nab,\x1c cd\n")
    r = rp.run(box, *args, "engine=llguidance_unforced", f"out_dir={box / 'out'}", "audit.per_sample=100")
    df = rows(box / "out", "audit.parquet")
    if df is None or "agree_profile" not in df:
        return False, {**brief(r), "audit": None}
    agree = int(df["agree_profile"].astype(bool).sum())
    return (agree == len(df), {**brief(r), "audit_steps": len(df), "agree_profile": agree})


CASES = [item1_audit_limits, item1_resume_audit_off, item2_grammar_reference_cannot_read, item3_memory_burst,
         item4_foreign_and_copied_cells, item5_two_sweeps_at_once, item6_path_in_a_name,
         item7_engine_name_not_an_engine, item8_odd_paths, item9_bom, item10_more_samples_than_exist,
         item11_infinite_limit, item12_outside_the_repository, item13_killed_write, profile_gap_llguidance]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", required=True, type=Path, help="the checkout to replay against")
    ap.add_argument("--python", required=True, help="its interpreter")
    ap.add_argument("--out", required=True, type=Path, help="JSON file of the outcomes")
    ap.add_argument("--only", nargs="*", help="case names to run (default: all)")
    a = ap.parse_args()
    rp = Replay(a.tree.resolve(), a.python)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=rp.tree, capture_output=True,
                            text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=rp.tree,
                                capture_output=True, text=True).stdout.strip())
    out = {"commit": commit, "dirty": dirty, "machine": os.uname().nodename, "cases": {}}
    for case in CASES:
        if a.only and case.__name__ not in a.only:
            continue
        box = Path(tempfile.mkdtemp(prefix=f"replay-{case.__name__}-"))
        try:
            ok, seen = case(rp, box)
        except Exception as err:   # noqa: BLE001 - a case the old code cannot even reach is a recorded failure
            ok, seen = False, {"replay_error": f"{type(err).__name__}: {str(err)[:300]}"}
        finally:
            shutil.rmtree(box, ignore_errors=True)
        out["cases"][case.__name__] = {"ok": bool(ok), "doc": case.__doc__.strip(), "seen": seen}
        print(f"{case.__name__}: {'ok' if ok else 'FAILS'}", flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
