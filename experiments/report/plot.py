"""What every figure of the report shares: saving (PNG and PDF), a fixed style per series, µs axes, panels, and how
a failed cell is marked. Figures are :class:`matplotlib.figure.Figure` objects built without pyplot (no global
backend state); a notebook can display them directly."""
from __future__ import annotations

import math
from pathlib import Path

from matplotlib.figure import Figure

from gcdbench.experiments.report.collect import DATASET_ORDER

MARKERS = "osD^v<>ph*"


def save_figure(fig: Figure, out_dir: Path | str, stem: str) -> list[Path]:
    """Write ``fig`` as ``<out_dir>/<stem>.png`` (150 dpi, 256 colours: :func:`compact_png`) and ``.pdf`` through
    the Agg canvas; returns both paths."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"
    buf = io.BytesIO()
    fig.savefig(buf, dpi=150, format="png")
    compact_png(buf, png)
    fig.savefig(pdf, dpi=150)
    return [png, pdf]


def compact_png(src, dst: Path) -> None:
    """A PNG in 256 colours (an adaptive palette; plots have a few dozen colours plus their anti-aliasing), about a
    quarter of the size of matplotlib's RGBA, so the committed figures stay within the results budget."""
    from PIL import Image

    with Image.open(src) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)


def order_datasets(values) -> list[str]:
    """Datasets in Table 1's order, others after them alphabetically."""
    vals = set(values)
    return [d for d in DATASET_ORDER if d in vals] + sorted(vals - set(DATASET_ORDER))


def styles(names) -> dict:
    """A fixed colour and marker per series name (engine config, label), stable across figures."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"] if len(names) <= 10 else colormaps["tab20"]
    return {c: (cmap(i % cmap.N), MARKERS[i % len(MARKERS)]) for i, c in enumerate(sorted(names))}


def is_failed(status) -> bool:
    """True for cells that produced no masks at all (``cell_status`` starting with ``compile``)."""
    return isinstance(status, str) and status.startswith("compile")


def line_style(status) -> str:
    """Dotted for a cell in which no sample passed, solid otherwise."""
    return ":" if isinstance(status, str) and status.startswith("failed") else "-"


def series_label(config: str, status) -> str:
    """A legend entry: the config, with the cell's status in brackets when it is not complete."""
    return f"{config} ({status})" if isinstance(status, str) and status else config


def tick_us(v) -> str:
    """A tick label for a time in µs: ``5 µs``, ``2 ms``, ``1.5 s``."""
    if v <= 0:
        return ""
    if v >= 1e6:
        return f"{v / 1e6:g} s"
    if v >= 1e3:
        return f"{v / 1e3:g} ms"
    return f"{v:g} µs"


def us_axis(ax, axis="y"):
    """A log axis in µs with µs/ms/s tick labels; minor ticks are labelled (selectively) on short ranges."""
    from matplotlib.ticker import LogFormatter

    class UsFormatter(LogFormatter):
        def _num_to_string(self, x, vmin, vmax):
            return tick_us(x)

    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_formatter(UsFormatter(labelOnlyBase=False))
    # labels with units are wide: on x, minor ticks get labels only within one decade (matplotlib's default)
    a.set_minor_formatter(UsFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5) if axis == "y" else (1, 0.4)))


def no_minor_labels(ax_axis) -> None:
    """No labels on the minor ticks of one axis (``ax.xaxis``)."""
    from matplotlib.ticker import NullFormatter

    ax_axis.set_minor_formatter(NullFormatter())


def panels(n: int, width=5.0, height=3.6):
    """A figure with ``n`` panels, at most three a row; the unused ones hidden."""
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def failed_note(ax, failed: list[str]):
    """A red box in the panel's corner naming the cells drawn as failed (``× config: reason``)."""
    if failed:
        ax.text(0.99, 0.02, "\n".join(f"× {f}" for f in failed), transform=ax.transAxes, ha="right", va="bottom",
                fontsize=7, color="firebrick", bbox=dict(boxstyle="round", fc="white", ec="firebrick", alpha=0.85))


def failed_marks(ax, xs, color, size=60):
    """× marks on the x axis at ``xs``: the points of a sweep where a cell produced nothing."""
    ax.scatter(xs, [0.02] * len(xs), marker="x", color=color, s=size, zorder=5,
               transform=ax.get_xaxis_transform(), clip_on=False)
