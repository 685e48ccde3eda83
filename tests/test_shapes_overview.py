"""The shape section's ratios cover every config of the subject engine (Valiant with options) against its
baseline, and the overview gives each family's worst ratio, bold where over a target (cells made by hand)."""
from __future__ import annotations

import pandas as pd

from gcdbench.experiments.report import shapes


def _cell(family, size, spelling, config, engine, p50, p99):
    return {"tokenizer": "qwen3", "family": family, "size": size, "spelling": spelling,
            "spelling_index": 0 if spelling == "a" else 1, "config": config, "engine": engine, "status": "",
            "mask_p50_us": p50, "mask_p99_us": p99, "passed": 3, "samples": 3}


def test_every_subject_config_is_compared_and_the_worst_is_shown():
    sub, base = shapes.SUBJECT, shapes.BASELINE
    opt = f"{sub}__opt-True"
    rows = []
    for size, (p50, opt50) in {1: (30.0, 10.0), 2: (20.0, 14.0)}.items():
        for sp in ("a", "b"):
            rows += [_cell("fam", size, sp, base, base, 10.0, 10.0),
                     _cell("fam", size, sp, sub, sub, p50, 15.0),
                     _cell("fam", size, sp, opt, sub, opt50, 25.0 if (size, sp) == (2, "b") else 12.0)]
    rat = shapes.ratios(pd.DataFrame(rows))
    sr = rat[rat["kind"] == f"{sub}/{base}"]
    assert set(sr["engine"]) == {sub, opt} and len(sr) == 8
    ov = shapes.overview_table(rat, "qwen3").set_index("engine")["fam"]
    assert ov[sub] == "**3.00** / 1.50"          # worst p50 30/10 over the target, p99 1.5 within it
    assert ov[opt] == "1.40 / **2.50**"          # p50 within 1.5x, one p99 over 2x
    table = shapes.subject_table(rat, "fam", "qwen3")
    assert set(table["engine"]) == {sub, opt} and len(table) == 4


def test_packed_cells_take_back_their_intervals_only_where_the_points_are_the_same(tmp_path):
    """A section rebuilt from packed cells (no per-mask rows, so no intervals of its own) takes each interval back
    from the earlier build's shapes_ratios.csv, but only for the same key with the same p50 and p99 ratios: a cell
    run again (another point) or a ratio the earlier build lacked keeps no interval."""
    sub, base = shapes.SUBJECT, shapes.BASELINE
    rows = []
    for size in (1, 2, 3):
        rows += [_cell("fam", size, "a", base, base, 10.0, 20.0), _cell("fam", size, "a", sub, sub, 15.0, 30.0)]
    rat = shapes.ratios(pd.DataFrame(rows))
    sr = rat["kind"] == f"{sub}/{base}"
    assert sr.sum() == 3 and rat.loc[sr, shapes.INTERVAL_COLUMNS].isna().all().all()   # packed: no intervals
    earlier = rat[sr & (rat["size"] != 3)].copy()                   # size 3: not in the earlier build
    earlier[shapes.INTERVAL_COLUMNS] = [1.2, 1.8, 1.1, 1.9]
    earlier.loc[earlier["size"] == 2, "p99_ratio"] = 1.6             # size 2 since run again: another point
    earlier.to_csv(tmp_path / "shapes_ratios.csv", index=False)
    got, kept = shapes.keep_intervals(rat, pd.read_csv(tmp_path / "shapes_ratios.csv"))
    assert kept == 1
    g = got[got["kind"] == f"{sub}/{base}"].set_index("size")
    assert list(g.loc[1, shapes.INTERVAL_COLUMNS]) == [1.2, 1.8, 1.1, 1.9]
    assert g.loc[[2, 3], shapes.INTERVAL_COLUMNS].isna().all().all()
    assert rat.loc[sr, shapes.INTERVAL_COLUMNS].isna().all().all()   # the input is left as it was
