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


def _engine_styles() -> tuple[dict[str, tuple[str, str]], set[str]]:
    """Each registered engine's colour and marker (``Engine.plot_style``, declared on its adapter: the same in every
    figure, no two alike), and the engines drawn thicker and on top (``Engine.plot_emphasis``: ours)."""
    from gcdbench.parsers.registry import engine_class, engines

    out, ours = {}, set()
    for name in engines():
        try:
            cls = engine_class(name, runnable=False)
        except Exception:   # noqa: BLE001 - an engine whose module does not import here keeps no style
            continue
        if getattr(cls, "plot_style", None):
            out[name] = tuple(cls.plot_style)
        if getattr(cls, "plot_emphasis", False):
            ours.add(name)
    return out, ours


#: one colour and marker per engine, from the adapters; ours in the strongest colours, thicker and on top
ENGINE_STYLES, OURS = _engine_styles()


def engine_of(name: str) -> str | None:
    """The engine a series name belongs to: the longest engine name it starts with (``llguidance_raised`` ->
    ``llguidance``, ``psc_shift`` -> ``psc``, ``valiant@7620790`` -> ``valiant``); None for another name."""
    name = str(name)
    hits = [e for e in ENGINE_STYLES if name == e or name.startswith(e) and not name[len(e)].isalnum()]
    return max(hits, key=len) if hits else None


def emphasis(name) -> dict:
    """Line width and z-order of a series: ours thicker and on top, so they are easy to find."""
    return {"lw": 2.2, "zorder": 4} if engine_of(name) in OURS else {"lw": 1.1, "zorder": 2}


def _lighter(color: str, k: int) -> tuple:
    """``color`` mixed with white, more for larger ``k`` (a second or third config of one engine)."""
    from matplotlib.colors import to_rgb

    f = min(0.55, 0.3 * k)
    return tuple(c + (1 - c) * f for c in to_rgb(color))


def styles(names) -> dict:
    """A colour and marker per series name (engine config, label), fixed by its engine (:data:`ENGINE_STYLES`), so
    an engine looks the same in every figure. Further configs of one engine in the same figure (``llguidance``,
    ``llguidance_raised``) keep its marker in lighter shades of its colour; a name of no known engine gets a colour
    of matplotlib's ``tab20`` that no engine uses."""
    from matplotlib import colormaps

    out, seen = {}, {}
    other = [c for c in colormaps["tab20"].colors]
    n_other = 0
    for c in sorted(names):
        engine = engine_of(c)
        if engine is None:
            out[c] = (other[n_other % len(other)], MARKERS[n_other % len(MARKERS)])
            n_other += 1
            continue
        color, marker = ENGINE_STYLES[engine]
        k = seen.get(engine, 0)
        seen[engine] = k + 1
        # the plain engine config keeps the full colour; its variants (sorted after it) get lighter shades
        out[c] = (color if k == 0 else _lighter(color, k), marker)
    return out


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


def legend_below(ax, handles=None, labels=None, fontsize=7, ncols=2, **kw):
    """The axes' legend under its x axis label, outside the data (the figure must use the constrained layout,
    which makes room for it)."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    return ax.legend(handles, labels, fontsize=fontsize, ncols=ncols, loc="upper center", frameon=False,
                     bbox_to_anchor=(0.5, -0.16), **kw)


def legend_right(ax, fontsize=7, **kw):
    """The axes' legend to the right of the axes, outside the data (constrained layout makes room)."""
    if not ax.get_legend_handles_labels()[0]:
        return None
    return ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, **kw)


def failed_handles(failed: list[tuple[str, str]], st: dict) -> list:
    """Legend entries for cells drawn as failed: an × in the engine's colour and ``config: reason``."""
    from matplotlib.lines import Line2D

    return [Line2D([], [], ls="none", marker="x", color=st[c][0] if c in st else "firebrick", ms=6,
                   label=f"× {c}: {why}") for c, why in failed]
