"""Coverage of the JSON Schema converter on MaskBench: which schemas convert, and whether each test instance's
membership in the grammar's language agrees with its label.

``python -m gcdbench.datasets.maskbench_coverage --data-root ../shared/data --out results/maskbench/coverage.json``

Per schema: ``converted`` / ``refused`` (keyword, pointer) / ``timeout`` (conversion plus the instance checks
past ``--timeout`` seconds) / ``load_error`` (the grammar does not load: a converter bug). Per instance (keys in
the grammar's order, written compact): membership by the reference checker (:mod:`gcdbench.parsers.reference`,
the harness's language; it loads the grammar through the project's Lark front end), or ``--checker lark``: Lark's
Earley parser with ``lexer="dynamic"``, a rejection re-checked with ``lexer="dynamic_complete"`` (it reads each regex's leftmost-first match, so it can reject a
sentence whose terminal needs a longer match: a check of the grammar text, not of the language); counts
``valid_in``, ``valid_out`` (each listed with the length of its longest viable prefix), ``invalid_out`` and
``invalid_in`` (attributed to the keyword ``jsonschema`` names for the instance's best error: the keyword the
converter over-approximates). A crash on one instance counts as ``error`` and the run goes on. Correctness, not timing.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import signal
import sys
import time
from pathlib import Path

from gcdbench.datasets.maskbench import category, data_path, read_records, select
from gcdbench.parsers.common.gitstate import git_state
from gcdbench.parsers.jsonschema import UnsupportedSchema, schema_to_lark, serialize


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _validator(schema):
    """A ``jsonschema`` validator for the schema (its draft, formats checked), or None."""
    try:
        import jsonschema

        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
        return cls(schema, format_checker=cls.FORMAT_CHECKER)
    except Exception:
        return None


def _why_invalid(validator, instance) -> str:
    """The keyword of ``jsonschema``'s best error for an invalid instance (what the grammar let through)."""
    if validator is None:
        return "(no validator)"
    try:
        import jsonschema

        err = jsonschema.exceptions.best_match(validator.iter_errors(instance))
    except Exception as exc:
        return f"(validator: {type(exc).__name__})"
    if err is None:
        return "(jsonschema: valid)"
    return f"format:{err.schema.get('format')}" if err.validator == "format" else str(err.validator)


def _checker(text: str, checker: str):
    """``sample -> (in language, where a rejection was found)`` for a grammar text."""
    from gcdbench.parsers.base import GrammarSpec

    if checker == "reference":
        from gcdbench.parsers.reference import ReferenceChecker

        ref = ReferenceChecker(GrammarSpec("maskbench", text))

        def accepts(sample):
            if ref.is_sentence(sample.encode("utf-8")):
                return True, None
            lo, hi = 0, len(sample)   # the longest viable prefix, for the report
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if ref.is_viable(sample[:mid].encode("utf-8")):
                    lo = mid
                else:
                    hi = mid - 1
            return False, lo
        return accepts
    import lark
    from lark.exceptions import UnexpectedInput

    fast = lark.Lark(text, parser="earley", lexer="dynamic")
    complete = []

    def accepts(sample):
        try:
            fast.parse(sample)   # a parse found this way is a parse: an acceptance is sound
            return True, None
        except UnexpectedInput:
            pass
        if not complete:
            complete.append(lark.Lark(text, parser="earley", lexer="dynamic_complete"))
        try:
            complete[0].parse(sample)
            return True, None
        except UnexpectedInput as err:
            return False, getattr(err, "pos_in_stream", None)
    return accepts


def check_schema(record: dict, timeout: float, checker: str = "reference") -> dict:
    """The outcome and instance counts of one record."""
    from lark.exceptions import LarkError

    from gcdbench.parsers.base import CompileError

    out = {"id": record["id"], "outcome": "converted", "valid_in": 0, "valid_out": 0, "invalid_out": 0,
           "invalid_in": 0, "error": 0, "valid_out_list": [], "invalid_in_by": {}}
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    t0 = time.perf_counter()
    try:
        try:
            text = schema_to_lark(record["schema"])
        except UnsupportedSchema as err:
            out.update(outcome="refused", keyword=err.keyword, path=err.path, why=err.why[:200])
            return out
        out["grammar_bytes"] = len(text)
        try:
            accepts = _checker(text, checker)
        except (CompileError, LarkError, Exception) as err:
            if isinstance(err, _Timeout):
                raise
            out.update(outcome="load_error", why=f"{type(err).__name__}: {str(err)[:200]}")
            return out
        validator = None
        for k, test in enumerate(record.get("tests") or []):
            valid = bool(test.get("valid"))
            try:
                sample = serialize(test.get("data"), record["schema"], "compact")
                ok, pos = accepts(sample)
            except _Timeout:
                raise
            except Exception as err:
                out["error"] += 1
                out.setdefault("errors", []).append(f"{k}: {type(err).__name__}: {str(err)[:120]}")
                continue
            if valid and ok:
                out["valid_in"] += 1
            elif valid:
                out["valid_out"] += 1
                out["valid_out_list"].append({"test": k, "pos": pos, "at": sample[max(0, pos - 30): pos + 30]})
            elif not ok:
                out["invalid_out"] += 1
            else:
                out["invalid_in"] += 1
                if validator is None:
                    validator = _validator(record["schema"])
                why = _why_invalid(validator, test.get("data"))
                out["invalid_in_by"][why] = out["invalid_in_by"].get(why, 0) + 1
    except _Timeout:
        out["outcome"] = "timeout"
    except RecursionError:
        out["outcome"] = "recursion"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def summarize(rows: list[dict]) -> dict:
    keys = ("valid_in", "valid_out", "invalid_out", "invalid_in", "error")
    cats: dict[str, collections.Counter] = {}
    for r in rows:
        c = cats.setdefault(category(r["id"]), collections.Counter())
        c["schemas"] += 1
        c[r["outcome"]] += 1
        for k in keys:
            c[k] += r[k]
    total = sum(cats.values(), collections.Counter())
    refusals = collections.Counter(r["keyword"] for r in rows if r["outcome"] == "refused")
    inv_in = collections.Counter()
    for r in rows:
        inv_in.update(r["invalid_in_by"])
    conv = total["converted"]
    v_all = total["valid_in"] + total["valid_out"]
    i_all = total["invalid_in"] + total["invalid_out"]
    return {
        "totals": dict(total),
        "converted_pct": round(100 * conv / max(1, total["schemas"]), 2),
        "valid_in_pct": round(100 * total["valid_in"] / max(1, v_all), 2),
        "invalid_out_pct": round(100 * total["invalid_out"] / max(1, i_all), 2),
        "schemas_all_valid_in": sum(1 for r in rows if r["outcome"] == "converted" and not r["valid_out"]
                                    and not r["error"]),
        "refusals_by_keyword": dict(refusals.most_common()),
        "invalid_in_by_keyword": dict(inv_in.most_common()),
        "by_category": {c: dict(v) for c, v in sorted(cats.items())},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-root", default="../shared/data")
    ap.add_argument("--out", default="results/maskbench/coverage.json")
    ap.add_argument("--limit", type=int, default=0, help="a stratified sample of this many schemas (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--categories", default="", help="comma-separated categories")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per schema")
    ap.add_argument("--checker", choices=("reference", "lark"), default="reference",
                    help="membership by the reference checker (exact: the harness's language) or Lark's Earley "
                         "(dynamic_complete; it takes a regex's leftmost-first match, so it may reject sentences)")
    args = ap.parse_args(argv)
    sys.setrecursionlimit(20000)
    records = select(read_records(args.data_root), args.categories, args.limit or None, args.seed)
    state = git_state(ignore=("results",))
    rows = []
    t0 = time.time()
    for n, rec in enumerate(records, 1):
        rows.append(check_schema(rec, args.timeout, args.checker))
        if n % 250 == 0:
            print(f"{n}/{len(records)} schemas, {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    path = data_path(args.data_root)
    report = {
        "what": "JSON Schema converter coverage on MaskBench (gcdbench.datasets.maskbench_coverage)",
        "commit": state["commit"], "dirty": state["dirty"],
        "data": {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        "options": {"limit": args.limit, "seed": args.seed, "categories": args.categories,
                    "timeout_s": args.timeout, "membership": args.checker, "serialize": "compact"},
        "seconds": round(time.time() - t0),
        **summarize(rows),
        "refused": [{k: r[k] for k in ("id", "keyword", "path", "why")} for r in rows if r["outcome"] == "refused"],
        "not_converted_other": [{k: r.get(k) for k in ("id", "outcome", "why", "seconds")} for r in rows
                                if r["outcome"] not in ("converted", "refused")],
        "valid_out": [{"id": r["id"], **v} for r in rows for v in r["valid_out_list"]],
        "errors": [{"id": r["id"], "errors": r["errors"]} for r in rows if r.get("errors")],
        "schemas_columns": ["id", "outcome", "valid_in", "valid_out", "invalid_out", "invalid_in"],
        "schemas": [[r["id"], r["outcome"], r["valid_in"], r["valid_out"], r["invalid_out"], r["invalid_in"]]
                    for r in rows],
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}" for k, v in report.items())
                   + "\n}\n", encoding="utf-8")   # one line per top-level key: small, still diffable
    print(json.dumps({k: report[k] for k in ("converted_pct", "valid_in_pct", "invalid_out_pct", "totals")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
