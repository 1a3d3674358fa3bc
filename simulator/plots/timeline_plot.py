"""Draw batch timelines (see timeline.py): one panel per scheduler on a shared time axis, and
optionally an animated GIF in which the slots fill in step by step.

Readable at its size (issue 22):
- every lane is at least ``MIN_LANE_IN`` tall, ``MIN_LANE_IN * GIF_DPI`` = 16 px in the GIF, and
  text is 8-11 pt, 9-12 px there;
- above ``DENSE_LANES`` lanes in all the title says the picture is dense and how to thin it;
- steps are outlined only where a step is at least ``MIN_STEP_PX`` wide in the GIF; otherwise a
  request's consecutive steps of one kind are one bar (white outlines would wash the colours out);
- request ids are written only in bars wide enough for them, slot numbers thinned past 16 lanes;
- the GIF's size is bounded here: at most ``MAX_GIF_FRAMES`` frames at ``GIF_DPI``, each stored
  by Pillow as the region that changed since the previous frame.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Sequence

import numpy as np

from simulator.plots.axes import CHAR_WIDTH_EM
from simulator.plots.figures import FORMATS, new_figure, save_figure
from simulator.plots.timeline import COLORS, SlotTimeline

MAX_LABELLED_REQUESTS = 48   # request ids written inside the bars up to this many requests
GIF_FRAMES = 20
MAX_GIF_FRAMES = 40          # the bound on the GIF's size: frames x (at most) the frame's pixels
GIF_DPI = 80                 # a GIF frame is a bitmap: small, but 9 pt text still ~10 px
GIF_FRAME_MS, GIF_LAST_FRAME_MS = 250, 2000
WIDTH_IN, AXES_WIDTH_IN = 12.0, 11.0   # the figure, and the width its axes get
MIN_LANE_IN, MAX_LANE_IN, LANES_TARGET_IN = 0.2, 0.45, 8.0
DENSE_LANES = 96             # lanes in all above which the picture is called dense
MIN_STEP_PX = 3.0
MAX_TICKED_LANES = 16
FONTSIZE = 9
LABEL_FONTSIZE = 8
CHAR_WIDTH_IN = CHAR_WIDTH_EM * LABEL_FONTSIZE / 72


def plot_batch_timelines(timelines: Sequence[SlotTimeline], base: Path, title: str,
                         gif: bool = False, gif_frames: int = GIF_FRAMES,
                         formats: tuple[str, ...] = FORMATS) -> list[Path]:
    fig, axes, data = _draw(timelines, title)
    end_s = max(t.end_s for t in timelines)
    paths = _save_gif(fig, axes[0], data, end_s, base, gif_frames) if gif else []
    return paths + save_figure(fig, base, formats)


def timeline_figure(timelines: Sequence[SlotTimeline], title: str):
    return _draw(timelines, title)[0]


def lane_height_in(total_lanes: int) -> float:
    """Inches per lane: roomy for a few lanes, never under ``MIN_LANE_IN``."""
    return max(MIN_LANE_IN, min(MAX_LANE_IN, LANES_TARGET_IN / max(1, total_lanes)))


def is_dense(timelines: Sequence[SlotTimeline]) -> bool:
    return sum(t.num_lanes for t in timelines) > DENSE_LANES


def _draw(timelines: Sequence[SlotTimeline], title: str):
    lanes = [max(1, t.num_lanes) for t in timelines]
    lane_in = lane_height_in(sum(lanes))
    heading = f"{title}: batch slots over time" + (_dense_note(timelines) if is_dense(timelines)
                                                  else "")
    title_in = 0.1 + 0.24 * (heading.count("\n") + 1)   # the title's lines, then the legend
    top_in, panel_extra_in, bottom_in = title_in + 0.25, 0.45, 0.5
    height = top_in + sum(lane_in * n + panel_extra_in for n in lanes) + bottom_in
    fig = new_figure(figsize=(WIDTH_IN, height))
    axes = fig.subplots(len(timelines), 1, sharex=True, squeeze=False,
                        gridspec_kw={"height_ratios": lanes})[:, 0]
    end_s = max((t.end_s for t in timelines), default=0.0) or 1.0
    data = [a for ax, t in zip(axes, timelines) for a in _draw_one(ax, t, end_s)]
    axes[-1].set_xlabel("time (s)", fontsize=FONTSIZE)
    axes[-1].set_xlim(0, end_s * 1.01)
    fig.suptitle(heading, fontsize=FONTSIZE + 2, y=1 - 0.08 / height, va="top")
    fig.legend(handles=_legend_handles(), loc="upper center", fontsize=FONTSIZE, ncol=5,
               frameon=False, bbox_to_anchor=(0.5, 1 - title_in / height), borderaxespad=0)
    mean_axes_in = lane_in * sum(lanes) / len(lanes)   # fixed margins, in inches
    fig.subplots_adjust(left=0.75 / WIDTH_IN, right=1 - 0.25 / WIDTH_IN, bottom=bottom_in / height,
                        top=1 - (top_in + panel_extra_in) / height,
                        hspace=panel_extra_in / mean_axes_in)
    return fig, axes, data


def _dense_note(timelines: Sequence[SlotTimeline]) -> str:
    requests = len({r[3] for t in timelines for r in t.rows})
    return (f"\ndense: {sum(t.num_lanes for t in timelines)} slots in all, {requests} requests; "
            f"fewer requests (--set workload.num_requests=32) or one --scheduler read better")


def _draw_one(ax, timeline: SlotTimeline, end_s: float) -> list:
    """The panel of one scheduler; returns its data artists (the GIF hides them)."""
    num_steps = len({(r[1], r[2]) for r in timeline.rows})
    outlined = step_px(num_steps, timeline.end_s, end_s) >= MIN_STEP_PX
    bars, spans, preempted = _segments(timeline.rows, merge=not outlined)
    artists = [ax.broken_barh(segments, (lane - 0.4, 0.8), facecolors=COLORS[kind],
                              edgecolor="white" if outlined else "none", linewidth=0.3)
               for (lane, kind), segments in bars.items()]
    if preempted:
        artists.append(ax.scatter(*zip(*preempted), marker="x", color="red", s=40, zorder=3))
    if len({rid for _, rid in spans}) <= MAX_LABELLED_REQUESTS:
        for (lane, rid), (start_s, stop_s) in spans.items():
            if (stop_s - start_s) / end_s * AXES_WIDTH_IN >= CHAR_WIDTH_IN * (len(str(rid)) + 1):
                artists.append(ax.text((start_s + stop_s) / 2, lane, str(rid), ha="center",
                                       va="center", fontsize=LABEL_FONTSIZE))
    lanes = max(1, timeline.num_lanes)
    ax.set_ylim(lanes - 0.5, -0.5)
    ax.set_ylabel("slot", fontsize=FONTSIZE)
    ax.set_title(f"{timeline.label}: {num_steps} steps, last token at {timeline.end_s:.4g} s",
                 fontsize=FONTSIZE + 1)
    _lane_ticks(ax, lanes)
    ax.grid(alpha=0.3, axis="x")
    return artists


def step_px(num_steps: int, span_s: float, end_s: float) -> float:
    """The mean width of a step in the GIF: ``num_steps`` over ``span_s`` of an ``end_s`` axis."""
    return AXES_WIDTH_IN * GIF_DPI * (span_s / end_s) / max(1, num_steps)


def _segments(rows, merge: bool):
    """Bars per (lane, kind) as (start, duration); with ``merge``, a request's back-to-back
    steps of one kind are one bar. Also each request's span per lane, and the preemptions."""
    bars: dict[tuple[int, str], list[list[float]]] = {}
    spans: dict[tuple[int, int], list[float]] = {}
    last: dict[int, tuple[int, str, list[float]]] = {}   # lane -> (request, kind, its last bar)
    preempted = []
    for lane, start_s, end_s, rid, kind in rows:
        if kind == "preempted":
            preempted.append((start_s, lane))
            continue
        span = spans.setdefault((lane, rid), [start_s, end_s])
        span[0], span[1] = min(span[0], start_s), max(span[1], end_s)
        prev = last.get(lane)
        if merge and prev and prev[:2] == (rid, kind) and prev[2][0] + prev[2][1] == start_s:
            prev[2][1] = end_s - prev[2][0]
            continue
        bar = [start_s, end_s - start_s]
        bars.setdefault((lane, kind), []).append(bar)
        last[lane] = (rid, kind, bar)
    return ({k: [tuple(b) for b in v] for k, v in bars.items()}, spans, preempted)


def _lane_ticks(ax, lanes: int) -> None:
    """Every slot numbered up to ``MAX_TICKED_LANES``, then about that many (no overlap)."""
    from matplotlib.ticker import MaxNLocator
    if lanes <= MAX_TICKED_LANES:
        ax.set_yticks(range(lanes))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=MAX_TICKED_LANES, integer=True))
    ax.tick_params(labelsize=FONTSIZE - 1)


def _legend_handles():
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    return [Patch(color=COLORS["prefill"], label="prefill (prompt or recompute)"),
            Patch(color=COLORS["decode"], label="decode (one token)"),
            Patch(color=COLORS["stalled"], label="stalled (holds slot, not computed)"),
            Patch(facecolor="white", edgecolor="grey", label="idle (free slot)"),
            Line2D([], [], marker="x", color="red", linestyle="none", label="preempted")]


def gif_frame_count(requested: int) -> int:
    return max(2, min(MAX_GIF_FRAMES, int(requested)))


def _save_gif(fig, ax, data, end_s: float, base: Path, frames: int) -> list[Path]:
    """The figure drawn twice, with and without its data; frame i shows the data left of
    ``end_s * i / (frames - 1)`` (the axes share time, so a column of pixels is one time)."""
    full = _render(fig)
    for artist in data:
        artist.set_visible(False)
    empty = _render(fig)
    for artist in data:
        artist.set_visible(True)
    scale = GIF_DPI / fig.dpi   # display pixels are at the figure's dpi; the GIF's at GIF_DPI
    x0, x1 = (ax.transData.transform((t, 0.0))[0] * scale for t in (0.0, end_s))
    images = _frames(full, empty, x0, x1, gif_frame_count(frames))
    path = base.with_name(f"{base.name}.gif")
    tmp = path.with_name(f".{path.name}.tmp.gif")
    durations = [GIF_FRAME_MS] * (len(images) - 1) + [GIF_LAST_FRAME_MS]
    try:
        images[0].save(tmp, format="GIF", save_all=True, append_images=images[1:],
                       duration=durations, loop=0)
        tmp.replace(path)
    except BaseException:   # Ctrl-C while writing: no temp file left behind
        tmp.unlink(missing_ok=True)
        raise
    return [path]


def _frames(full: np.ndarray, empty: np.ndarray, x0: float, x1: float, frames: int) -> list:
    """Frame i: ``full`` left of the column at fraction i / (frames - 1) of [x0, x1], ``empty``
    right of it; the last frame is ``full``. One palette for all (the same colours each frame)."""
    from PIL import Image
    palette = Image.fromarray(full).quantize(colors=64, method=Image.Quantize.MEDIANCUT,
                                             dither=Image.Dither.NONE)
    images = []
    for i in range(frames):
        cut = int(round(x0 + (x1 - x0) * i / (frames - 1))) if i < frames - 1 else full.shape[1]
        frame = empty.copy()
        frame[:, :cut] = full[:, :cut]
        images.append(Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE))
    return images


def _render(fig) -> np.ndarray:
    """The figure as RGB pixels at ``GIF_DPI``."""
    from PIL import Image
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=GIF_DPI)
    buffer.seek(0)
    return np.asarray(Image.open(buffer).convert("RGB"))
