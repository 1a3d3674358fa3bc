"""Draw batch timelines (see timeline.py): one panel per scheduler on a shared time axis, and
optionally an animated GIF in which a curtain uncovers the slots step by step."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from simulator.plots.figures import FORMATS, pyplot, save_figure
from simulator.plots.timeline import COLORS, SlotTimeline

MAX_LABELLED_REQUESTS = 48   # request ids written inside the bars up to this many requests
GIF_FRAMES = 20
GIF_DPI = 60           # a GIF redraws the whole figure per frame: keep it small


def plot_batch_timelines(timelines: Sequence[SlotTimeline], base: Path, title: str,
                         gif: bool = False, gif_frames: int = GIF_FRAMES,
                         formats: tuple[str, ...] = FORMATS) -> list[Path]:
    fig, axes = _draw(timelines, title)
    paths = _save_gif(fig, axes, max(t.end_s for t in timelines), base, gif_frames) if gif else []
    return paths + save_figure(fig, base, formats)


def timeline_figure(timelines: Sequence[SlotTimeline], title: str):
    return _draw(timelines, title)[0]


def _draw(timelines: Sequence[SlotTimeline], title: str):
    plt = pyplot()
    lanes = [max(1, t.num_lanes) for t in timelines]
    fig, axes = plt.subplots(len(timelines), 1, sharex=True, squeeze=False,
                             figsize=(12, 1.2 + sum(0.45 * n + 0.6 for n in lanes)),
                             gridspec_kw={"height_ratios": lanes})
    axes = axes[:, 0]
    for ax, timeline in zip(axes, timelines):
        _draw_one(ax, timeline)
    axes[-1].set_xlabel("time (s)")
    axes[0].legend(handles=_legend_handles(), loc="upper right", fontsize=8, ncol=5,
                   bbox_to_anchor=(1.0, 1.45 if len(timelines) > 1 else 1.25))
    fig.suptitle(f"{title}: batch slots over time")
    fig.tight_layout()
    return fig, axes


def _draw_one(ax, timeline: SlotTimeline) -> None:
    bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
    spans: dict[tuple[int, int], list[float]] = {}
    preempted = []
    for lane, start_s, end_s, rid, kind in timeline.rows:
        if kind == "preempted":
            preempted.append((start_s, lane))
            continue
        bars.setdefault((lane, kind), []).append((start_s, end_s - start_s))
        span = spans.setdefault((lane, rid), [start_s, end_s])
        span[0], span[1] = min(span[0], start_s), max(span[1], end_s)
    for (lane, kind), segments in bars.items():
        ax.broken_barh(segments, (lane - 0.4, 0.8), facecolors=COLORS[kind], edgecolor="white",
                       linewidth=0.3)
    if preempted:
        ax.scatter(*zip(*preempted), marker="x", color="red", s=40, zorder=3)
    if len({rid for _, rid in spans}) <= MAX_LABELLED_REQUESTS:
        for (lane, rid), (start_s, end_s) in spans.items():
            ax.text((start_s + end_s) / 2, lane, str(rid), ha="center", va="center", fontsize=7)
    num_steps = len({(r[1], r[2]) for r in timeline.rows})
    ax.set(ylabel="slot", yticks=range(timeline.num_lanes), ylim=(timeline.num_lanes - 0.5, -0.5),
           title=f"{timeline.label}: {num_steps} steps, last token at {timeline.end_s:.4g} s")
    ax.grid(alpha=0.3, axis="x")


def _legend_handles():
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    return [Patch(color=COLORS["prefill"], label="prefill (prompt or recompute)"),
            Patch(color=COLORS["decode"], label="decode (one token)"),
            Patch(color=COLORS["stalled"], label="stalled (holds slot, not computed)"),
            Patch(facecolor="white", edgecolor="grey", label="idle (free slot)"),
            Line2D([], [], marker="x", color="red", linestyle="none", label="preempted")]


def _save_gif(fig, axes, end_s: float, base: Path, frames: int) -> list[Path]:
    """A white curtain over [now, end] slides right: the schedule appears as it happens."""
    from matplotlib.animation import FuncAnimation, PillowWriter
    from matplotlib.patches import Rectangle
    curtains = []
    for ax in axes:
        y0, y1 = ax.get_ylim()
        curtain = Rectangle((0, min(y0, y1)), end_s * 1.05, abs(y1 - y0), facecolor="white",
                            zorder=5)
        ax.add_patch(curtain)
        curtains.append(curtain)

    def frame(i: int):
        now = end_s * i / max(1, frames - 1)
        for curtain in curtains:
            curtain.set_x(now)
        return curtains

    path = base.with_name(f"{base.name}.gif")
    tmp = path.with_name(f".{path.name}.tmp.gif")
    FuncAnimation(fig, frame, frames=frames, blit=False).save(
        tmp, writer=PillowWriter(fps=4), dpi=GIF_DPI)
    for curtain in curtains:
        curtain.remove()
    tmp.replace(path)
    return [path]
