"""Where an engine disagrees with its declared profile: every audited step whose mask differs from the profile's,
and every refusal the profile does not explain, with examples (``disagreements.csv.gz`` and a README section)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from gcdbench.experiments.report.cells import audit_agreement, audit_text
from gcdbench.experiments.report.collect import (Unreadable, collect, has_profile_columns, is_beyond,
                                                 read_cell_file, run_info)
from gcdbench.experiments.report.section import Context, Section
from gcdbench.experiments.report.text import get, markdown, md_code
from gcdbench.parsers.base import Outcome

DISAGREEMENT_COLUMNS = ["dataset", "config", "tokenizer", "kind", "sample_id", "step", "prefix", "token",
                        "n_false_allow", "false_allow", "n_false_block", "false_block", "message", "profile", "path"]
REFUSALS = (Outcome.REJECTED.value, Outcome.NO_EOS.value)
MAX_LISTED = 10   # disagreements listed per cell in the report (all go to the CSV)
SHOWN_EXAMPLES = 3   # false allows / blocks shown per listed step


def disagreements(run_dirs, keep=None) -> pd.DataFrame:
    """Every audited step whose mask differs from the engine's declared profile, and every refused sample
    (``rejected`` / ``no_eos``) whose refused step is not shown to agree with that profile, of the cells in
    ``run_dirs`` (``keep(dataset)`` picks cells by dataset; damaged files are skipped, ``collect`` warns).

    One row each (``DISAGREEMENT_COLUMNS``): ``kind`` is ``audit`` or the refusal's outcome; ``n_false_allow``,
    ``n_false_block`` count the tokens against the profile and ``false_allow``, ``false_block`` list the audit's
    examples (token bytes as Python writes them; None and [] for a refusal without a profile audit row). The
    runner audits every refused step, so a refusal the profile explains (its audit row agrees with the profile)
    is left out, and an unexplained one carries its audit row's examples. Audits stored before declared profiles
    give no audit rows (their refusals are listed without examples)."""
    rows = []
    for d in run_dirs:
        try:
            run = run_info(d)
            ds = run["dataset"]
            if keep is not None and not keep(ds):
                continue
            audit = read_cell_file(d, "audit.parquet")
            samples = read_cell_file(d, "samples.parquet")
        except Unreadable:
            continue
        prefixes = {} if audit is None else {(a["sample_id"], int(a["step"])): str(a["prefix"])
                                             for a in audit[["sample_id", "step", "prefix"]].to_dict("records")}
        audit = audit if audit is not None and has_profile_columns(audit) else None
        key = {"dataset": ds, "config": run["config"], "tokenizer": run["tokenizer"]}
        pieces = run["pieces"]
        by_step = {} if audit is None else {(a["sample_id"], int(a["step"])): a for a in audit.to_dict("records")}
        profile = "" if audit is None or not len(audit) else "; ".join(sorted(set(audit["profile"].astype(str))))
        used = set()
        refused = samples[samples["outcome"].isin(REFUSALS)] if samples is not None else ()
        for s in (refused.to_dict("records") if len(refused) else ()):
            message = s.get("message") if isinstance(s.get("message"), str) else ""
            m = re.search(r"step (\d+)", message)
            n_steps = s.get("n_steps")
            step = int(m.group(1)) if m else (int(n_steps) - 1 if pd.notna(n_steps) and n_steps else None)
            a = by_step.get((s["sample_id"], step))
            if a is not None:
                used.add((s["sample_id"], step))
                if bool(a["agree_profile"]):
                    continue   # the declared profile explains the refusal
            prefix, token = _pieces_context(pieces, s["sample_id"], step)
            rows.append({**key, "kind": s["outcome"], "sample_id": s["sample_id"], "step": step,
                         "prefix": prefix or prefixes.get((s["sample_id"], step), ""), "token": token,
                         **_profile_diff(a), "message": message[:300], "profile": profile,
                         "path": str(d)})
        for (sid, step), a in by_step.items():
            if (sid, step) in used or bool(a["agree_profile"]):
                continue
            rows.append({**key, "kind": "audit", "sample_id": sid, "step": step, "prefix": str(a["prefix"]),
                         "token": "", **_profile_diff(a), "message": "", "profile": profile, "path": str(d)})
    return pd.DataFrame(rows, columns=DISAGREEMENT_COLUMNS)


def _pieces_context(pieces: dict, sample_id: str, step) -> tuple[str, str]:
    """(prefix, token at ``step``) of a sampled sequence from its stored pieces; ('', '') when unknown."""
    p = pieces.get(sample_id)
    if not p or step is None:
        return "", ""
    return "".join(p[:step])[-200:], (p[step] if step < len(p) else "<EOS>")


def _profile_diff(a) -> dict:
    """An audit row's false allows and false blocks against the declared profile: counts and examples."""
    if a is None:
        return {"n_false_allow": None, "false_allow": [], "n_false_block": None, "false_block": []}
    return {"n_false_allow": int(a["n_false_allow_profile"]), "false_allow": list(a["false_allow_examples_profile"]),
            "n_false_block": int(a["n_false_block_profile"]), "false_block": list(a["false_block_examples_profile"])}


def write_disagreements(dis: pd.DataFrame, path: Path) -> None:
    """:func:`disagreements` as CSV, each list of examples as a JSON array; gzipped when ``path`` ends in ``.gz``
    (the committed report's lists run to hundreds of kB), with a fixed header time so the bytes depend only on
    the rows."""
    compression = {"method": "gzip", "mtime": 0} if str(path).endswith(".gz") else None
    dis.assign(**{c: dis[c].map(lambda v: json.dumps(list(v), ensure_ascii=False))
                  for c in ("false_allow", "false_block")}).to_csv(path, index=False, compression=compression)


def _examples(n, examples, k: int = SHOWN_EXAMPLES) -> str:
    """"count (`a`, `b`, `c` …)": the count and the first ``k`` examples, each in inline code."""
    ex = list(examples)[:k]
    more = " …" if n > len(ex) else ""
    return f"{n}" + (" (" + ", ".join(f"`{md_code(e)}`" for e in ex) + more + ")" if ex else "")


def disagreement_line(r: dict, width: int = 60) -> str:
    """One Markdown list item for a row of :func:`disagreements`."""
    head = f"`{md_code(r['sample_id'])}` step {r['step']}"
    prefix = r["prefix"] if isinstance(r["prefix"], str) else ""
    tail = f"after `…{md_code(prefix[-width:])}`" if prefix else ("at the start" if r["step"] == 0 else "")
    fa, fb = (_examples(int(r[f"n_{k}"]), r[k]) if pd.notna(r[f"n_{k}"]) else None
              for k in ("false_allow", "false_block"))
    if r["kind"] == "audit":
        return f"- {head}: {tail + ', ' if tail else ''}false allows {fa}; false blocks {fb}"
    what = f"refused `{md_code(r['token'])}`" if r["token"] else f"refused: {md_code(r['message'])}"
    diff = (f"; its mask there: false allows {fa}, false blocks {fb}" if fa is not None else
            "; not audited against the declared profile")
    return f"- {head} ({r['kind']}): {tail + ' ' if tail else ''}the engine {what}{diff}"


def disagreement_section(cells: pd.DataFrame, dis: pd.DataFrame, csv_name: str = "disagreements.csv.gz",
                         limit: int = MAX_LISTED) -> list[str]:
    """README lines of the "Disagreements" section: per cell, agreement with the language and with the declared
    profile, the differences the profile explains, and every disagreement with it (``limit`` listed per cell,
    all in ``csv_name``)."""
    lines = ["## Disagreements", "",
             "Per cell: audited steps whose whole-vocabulary mask equals the reference's under the harness's "
             "language and under the engine's declared profile (`Engine.profile()`, executed exactly by the "
             "reference); *explained* = steps that differ from the language but agree with the profile; "
             "*disagree* = audited steps that differ from the profile; *refusals* = samples whose oracle token (or "
             "final EOS) the engine refused where its audit row does not agree with the profile. Each disagreement "
             f"is listed below with examples (at most {limit} per cell; all in `{csv_name}`). Examples are token "
             "bytes as Python writes them; `<EOS>` is the end-of-sequence token.", ""]
    refusal = dis[dis["kind"] != "audit"].groupby("path").size() if len(dis) else pd.Series(dtype=int)
    roots = "root" in cells and cells["root"].nunique() > 1   # cells of several folders: say which
    summary = []
    for _, c in cells.sort_values(["dataset", "tokenizer", "config"]).iterrows():
        c = c.to_dict()
        audited = get(c, "audit_steps")
        profiled = audited and get(c, "audit_agree_language") is not None
        if profiled:
            note = ""
        elif audited:
            note = "audit stored before declared profiles (re-run the cell)"
        elif get(c, "compile_error") and not get(c, "mask_n"):
            note = "not run (compile error)"
        else:
            note = audit_text(c)
        summary.append({
            "config": c["config"], "dataset": c["dataset"], "tokenizer": c["tokenizer"],
            **({"results": c["root"]} if roots else {}),
            "declared profile": c.get("audit_profile") if profiled else "",
            "audited": int(audited or 0),
            "agree (language)": int(c["audit_agree_language"]) if profiled else None,
            "agree (profile)": int(c["audit_agree_profile"]) if profiled else None,
            "explained": int(c["audit_explained_by_profile"]) if profiled else None,
            "disagree": int(audited) - int(c["audit_agree_profile"]) if profiled else None,
            "refusals": int(refusal.get(c["path"], 0)),
            "note": note,
        })
    table = pd.DataFrame(summary)
    for col in ("agree (language)", "agree (profile)", "explained", "disagree"):
        table[col] = table[col].astype("Int64")
    lines += [markdown(table), ""]
    for path, rows in (dis.groupby("path", sort=False) if len(dis) else ()):
        c = cells[cells["path"] == path]
        c = c.iloc[0].to_dict() if len(c) else {}
        r0 = rows.iloc[0]
        agreement = audit_agreement(c)
        explained = get(c, "audit_explained_by_profile")
        lines.append(f"**{r0['config']} × {r0['dataset']} ({r0['tokenizer']})**"
                     + (f" in `{c['root']}`" if roots and c else "")
                     + (f": {agreement}" if agreement else "")
                     + (f"; {int(explained)} of the differences from the language are the declared profile's"
                        if explained is not None else "")
                     + f". Listed: {len(rows)}.")
        lines.append("")
        lines += [disagreement_line(r) for r in rows.head(limit).to_dict("records")]
        if len(rows) > limit:
            lines.append(f"- … and {len(rows) - limit} more (`{csv_name}`)")
        lines.append("")
    if not len(dis):
        lines += ["No audited step differs from its engine's declared profile, and no refusal is unexplained.", ""]
    return lines


def lines(ctx: Context) -> list[str]:
    """The "Disagreements" section over the --results and --also cells (suite and sampled cells have their own, in
    "Beyond Table 1"); writes ``disagreements.csv.gz``."""
    main_cells = pd.concat([ctx.cells.assign(root=str(ctx.results)),
                            *(collect(Path(a)).assign(root=str(a)) for a in ctx.also)], ignore_index=True)
    main_cells = main_cells[~main_cells["dataset"].map(is_beyond)]
    dis = disagreements([Path(p) for p in main_cells["path"]])
    write_disagreements(dis, ctx.out / "disagreements.csv.gz")
    return disagreement_section(main_cells, dis)


SECTION = Section("disagreements", lines, "disagreements with the declared profiles (disagreements.csv.gz)")
