"""Where a cell's mask time goes, by the kind of work each mask did: a table built from bench files of
``bench masks --by-work`` (:func:`gcdbench.experiments.bench_setup.by_work`), one row per cell.

    python -m gcdbench.experiments.report.by_work results/bench/X/*.json --out results/bench/X/by_work.md \
        [--pack results/bench/X/by_work.json.gz]

``--pack`` writes the records as one bench file without their per-prefix, per-sample and per-mask lists (what the
table reads); the files packed must share one commit and one machine. :func:`kinds_frame` gives the kinds as a
tidy frame (one row per cell and kind) for a notebook.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pandas as pd

from gcdbench.experiments.schema import new_bench, read_bench

#: what a packed record leaves out: per-prefix, per-sample and per-mask lists and the engine's info
DROPPED = ("per_prefix", "per_sample", "mask_us_by_sample", "info")


def read(paths) -> tuple[list[dict], list[dict]]:
    """(records with ``by_work``, their files' provenance) of the bench files ``paths``, in order."""
    records, docs = [], []
    for p in paths:
        doc = read_bench(p)
        got = [r for r in doc["records"] if "by_work" in r]
        if not got:
            raise ValueError(f"{p}: no record with by_work (run bench masks --by-work)")
        records += got
        docs.append({k: doc.get(k) for k in ("git_commit", "git_dirty", "machine", "versions", "command", "when")})
    return records, docs


def pack(records: list[dict], docs: list[dict], out: Path) -> Path:
    """One bench file of ``records`` (from :func:`read`, with its files' provenance ``docs``: one commit and one
    machine, else a ValueError naming them), without the lists of :data:`DROPPED`."""
    commits = {d["git_commit"] for d in docs}
    hosts = {json.dumps(d["machine"], sort_keys=True) for d in docs}
    if len(commits) > 1 or len(hosts) > 1:
        raise ValueError(f"pack: the files are of {len(commits)} commits {sorted(commits)} and {len(hosts)} machines; "
                         "pack each commit and machine apart")
    first = docs[0]
    doc = new_bench(command=f"packed from {len(docs)} bench files by report.by_work; the first: {first['command']}",
                    when=first["when"], machine=first["machine"], git_commit=first["git_commit"],
                    git_dirty=any(d["git_dirty"] for d in docs), versions=first["versions"],
                    records=[{k: v for k, v in r.items() if k not in DROPPED} for r in records])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))
    return out


def kinds_frame(records: list[dict]) -> pd.DataFrame:
    """One row per cell and kind of work: the cell's set, engine and options, then the kind's masks, shares of the
    masks and the time, p50, p99 and masks in the cell's slowest 1%."""
    rows = []
    for r in records:
        for k in r["by_work"]["kinds"]:
            rows.append({"set": r.get("dataset_name", r["dataset"]), "engine": r["engine"],
                         "options": json.dumps(r["options"], sort_keys=True), **k})
    return pd.DataFrame(rows)


def _headline(records: list[dict]) -> dict[str, tuple[str, ...]]:
    """The counter columns of the table: the union, in order, of each record's engine's ``headline_counters``
    (an engine that is not registered here adds none)."""
    from gcdbench.parsers.registry import engine_class

    cols: dict[str, tuple[str, ...]] = {}
    for name in dict.fromkeys(r["engine"] for r in records):
        try:
            cols.update(getattr(engine_class(name, runnable=False), "headline_counters", {}))
        except Exception:   # noqa: BLE001 - an engine whose module does not import here names no columns
            continue
    return cols


def table(records: list[dict]) -> list[str]:
    """The markdown table: per cell its masks, p50 and p99, the kind taking most of the time, the kinds of its
    slowest 1% (masks of each), and per headline counter of the engines (Valiant: chart steps, searches) its
    amount a mask over all masks and over that tail."""
    cols = _headline(records)
    lines = ["| set | masks | p50 µs | p99 µs | most of the time (share of time, of masks) | the slowest 1% by kind "
             "(masks) |" + "".join(f" {c} a mask: all / slowest 1% |" for c in cols),
             "|---|---|---|---|---|---|" + "---|" * len(cols)]
    for r in records:
        bw = r["by_work"]
        top = bw["kinds"][0]
        tail = sorted((k for k in bw["kinds"] if k["in_tail"]), key=lambda k: -k["in_tail"])
        tail_text = "; ".join(f"{k['kind']} ({k['in_tail']})" for k in tail)
        a, t = bw["work_per_mask"], bw["work_per_tail_mask"]
        counts = "".join(f" {sum(a.get(k, 0) for k in keys):.2f} / {sum(t.get(k, 0) for k in keys):.2f} |"
                         for keys in cols.values())
        lines.append(f"| {r.get('dataset_name', r['dataset'])} | {r['steps']} | {r['mask_median_us']} | "
                     f"{r['mask_p99_us']} | {top['kind']} ({top['time_share']:.0%}, {top['mask_share']:.0%}) | "
                     f"{tail_text} |{counts}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="bench files of bench masks --by-work (or one packed file)")
    ap.add_argument("--out", required=True, type=Path, help="the markdown table's file")
    ap.add_argument("--pack", type=Path, default=None, help="also pack the records into this .json.gz bench file")
    args = ap.parse_args(argv)
    records, docs = read(args.files)
    if args.pack:
        print(pack(records, docs, args.pack))
    commits = sorted({d["git_commit"][:7] for d in docs})
    cpus = sorted({str((d["machine"] or {}).get("cpu", "?")) for d in docs})
    head = [f"Masks by the kind of work each did (`bench masks --by-work`): {len(records)} cells, commit "
            f"{', '.join(commits)}, machine {', '.join(cpus)}. Kinds are the engine's `work_kind` of the counters "
            "that moved in the mask; the slowest 1% are the masks at or over the cell's p99.", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(head + table(records)) + "\n")
    print(args.out)


if __name__ == "__main__":
    main()
