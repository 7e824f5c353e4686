"""Figures that read at a glance: a layout check of a drawn matplotlib figure, and the two remedies that need no
judgement (a legend that covers data goes beside the axes; a bar of height zero gets a visible mark).

:func:`layout_problems` lists, in words, what makes a figure hard to read:

* **text over text** -- any two visible texts of the figure (tick labels, axis labels, titles, legend entries,
  annotations, the suptitle) whose boxes overlap: tick labels that run together, a title over a y label;
* **a legend over data** -- a legend box inside an axes that covers a bar, a plotted point or a line of that axes;
* **an invisible bar** -- a bar of height zero (width zero for horizontal bars) without a mark or a label at its
  place: a reader cannot tell "zero" from "not computed" (not a histogram's empty bin: bins tile an interval, and
  an empty one reads as a gap);
* **text too small at laptop width** -- a text smaller than :data:`MIN_TEXT_PX` pixels when the figure is shown as
  the book shows it on a laptop: at its inline size (``figure.dpi``, the tight bounding box), shrunk to
  :data:`READING_WIDTH_PX` when it is wider. A wide row of panels shrinks every text with it.

:func:`tidy` applies the remedies in place; :meth:`hubnorm_companion.notebook.Run.save_figure` calls both before
saving, so every saved figure of the notebooks is checked. With ``HUBNORM_FIGURE_CHECK=error`` (the test suite sets
it) a problem that remains is an error; by default it is printed as a NOTE under the figure.

Also the figure more than one notebook draws: :func:`plot_shift` (a graded shift study, notebooks 04 and 08).
"""

from __future__ import annotations

import os
from typing import Iterable, List, Tuple

import numpy as np

#: How far two boxes must overlap (pixels, each side) before they count as overlapping (anti-aliasing slack).
SLACK_PX = 1.0
#: The environment variable that turns remaining problems into errors, and its values.
CHECK_ENV = "HUBNORM_FIGURE_CHECK"
CHECK_MODES = ("note", "error", "off")
#: The width (CSS pixels) at which the book shows a notebook's figure on a laptop: measured in Chromium, a notebook
#: page of the site in a window 1366 pixels wide (the commonest laptop screen) shows a wide figure 745 pixels wide
#: (tests/test_site.py measures it again on every browser run and fails when the site's column changes).
READING_WIDTH_PX = 745
#: The smallest legible text (CSS pixels) of a figure at that width (chosen by the usual rule for chart labels,
#: before any figure of the notebooks was measured: 9 px is the size below which a laptop reader leans in).
MIN_TEXT_PX = 9.0


def check_mode() -> str:
    """``$HUBNORM_FIGURE_CHECK`` (default ``note``), checked where it is read."""
    mode = os.environ.get(CHECK_ENV, "note").strip().lower() or "note"
    if mode not in CHECK_MODES:
        raise ValueError(f"{CHECK_ENV} must be one of {list(CHECK_MODES)}; got {os.environ.get(CHECK_ENV)!r}: "
                         f"unset it or set e.g. {CHECK_ENV}=note")
    return mode


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _visible_text(t) -> bool:
    return t.get_visible() and bool(str(t.get_text()).strip()) and t.get_alpha() != 0


def _drawn_ticks(axis):
    """The major ticks of ``axis`` that are drawn: visible and within the view limits (matplotlib keeps one just
    outside each end, not drawn)."""
    lo, hi = sorted(axis.get_view_interval())
    span = (hi - lo) * 1e-9
    return [t for t in axis.get_major_ticks() if t.get_visible() and lo - span <= t.get_loc() <= hi + span]


def _texts(fig) -> List[Tuple[str, object]]:
    """(description, Text) of every visible text of ``fig``."""
    out = []
    sup = getattr(fig, "_suptitle", None)
    if sup is not None:
        out.append(("suptitle", sup))
    out += [("figure text", t) for t in fig.texts]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        name = f"axes {i + 1}" + (f" ({ax.get_title()[:30]!r})" if ax.get_title() else "")
        for which, title in (("left", ax._left_title), ("", ax.title), ("right", ax._right_title)):
            out.append((f"{name} {which + ' ' if which else ''}title", title))
        out.append((f"{name} x label", ax.xaxis.label))
        out.append((f"{name} y label", ax.yaxis.label))
        for axis, letter in ((ax.xaxis, "x"), (ax.yaxis, "y")):
            for tick in _drawn_ticks(axis):
                for lab in (tick.label1, tick.label2):
                    out.append((f"{name} {letter} tick {lab.get_text()!r}", lab))
        out += [(f"{name} text {t.get_text()[:20]!r}", t) for t in ax.texts]
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            out += [(f"{name} legend {t.get_text()[:20]!r}", t) for t in leg.get_texts()]
            out.append((f"{name} legend title", leg.get_title()))
    for leg in fig.legends:
        out += [(f"figure legend {t.get_text()[:20]!r}", t) for t in leg.get_texts()]
    seen, unique = set(), []
    for d, t in out:   # the suptitle is also among the figure's texts
        if t is not None and id(t) not in seen and _visible_text(t):
            seen.add(id(t))
            unique.append((d, t))
    return unique


def shown_words(fig) -> str:
    """Every visible text of ``fig`` (titles, labels, tick labels, legends, annotations), joined by newlines: what
    a reader of the figure can read on it."""
    titles = [leg.get_title() for leg in fig.legends]   # (not among _texts: the layout check leaves them out)
    return "\n".join(str(t.get_text()) for t in [t for _, t in _texts(fig)] + [t for t in titles if _visible_text(t)])


def plotted_values(fig) -> np.ndarray:
    """The numbers ``fig`` draws, as a flat float array: every line's x and y data, every bar's height and width
    (and its y and x, for horizontal bars and stacked ones), every scatter point's and error bar's coordinates.
    What a saved figure shows, for :func:`hubnorm.provenance.only_query_aware` to read."""
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Rectangle

    parts = []
    for ax in fig.axes:
        if getattr(ax, "_colorbar", None) is not None:   # a colour bar's levels are not data
            continue
        for line in ax.get_lines():
            parts += [np.ravel(line.get_xdata()), np.ravel(line.get_ydata())]
        for patch in ax.patches:
            if isinstance(patch, Rectangle):
                parts.append(np.array([patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()]))
        for coll in ax.collections:
            if isinstance(coll, PathCollection):   # a scatter: its points are the offsets (its path is the marker)
                parts.append(np.ravel(coll.get_offsets()))
            else:                                  # error bars, bands: the paths' vertices
                parts += [np.ravel(path.vertices) for path in coll.get_paths()]
            colours = coll.get_array()             # a heat map's cells (seaborn's heatmap, pcolormesh)
            if colours is not None:
                parts.append(np.ma.filled(np.ma.asarray(colours, dtype=float), np.nan).ravel())
        for image in ax.images:                    # imshow
            parts.append(np.ma.filled(np.ma.asarray(image.get_array(), dtype=float), np.nan).ravel())
    values = []
    for p in parts:
        try:
            a = np.asarray(p, dtype=float).ravel()
        except (TypeError, ValueError):   # categorical axes hold strings
            continue
        values.append(a[np.isfinite(a)])
    return np.concatenate(values) if values else np.zeros(0)


def _overlap(a, b, slack: float = SLACK_PX) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > slack) and (min(a.y1, b.y1) - max(a.y0, b.y0) > slack)


def _is_histogram(patches, vertical: bool) -> bool:
    """Bars that tile an interval edge to edge (a histogram's bins: an empty bin reads as a gap, not a value)."""
    if len(patches) < 2:
        return False
    start = [p.get_x() if vertical else p.get_y() for p in patches]
    size = [p.get_width() if vertical else p.get_height() for p in patches]
    return all(np.isclose(start[i] + size[i], start[i + 1]) for i in range(len(patches) - 1))


def _bars(ax, *, histograms: bool = True) -> Iterable[Tuple[object, bool]]:
    """(Rectangle, vertical) of every bar of ``ax`` (its bar containers; ``histograms=False``: not the bins of
    a histogram)."""
    from matplotlib.container import BarContainer

    for c in ax.containers:
        if isinstance(c, BarContainer):
            vertical = getattr(c, "orientation", "vertical") != "horizontal"
            if histograms or not _is_histogram(c.patches, vertical):
                for p in c.patches:
                    yield p, vertical


def _segments_hit(box, xy: np.ndarray, samples: int = 8) -> bool:
    """Whether the polyline ``xy`` (display coordinates) passes through ``box`` (sampled along each segment)."""
    if len(xy) == 0:
        return False
    finite = np.isfinite(xy).all(axis=1)
    if len(xy) > 1:   # a segment with a gap (NaN) or an infinite end is not drawn: sample only whole ones
        whole = finite[:-1] & finite[1:]
        t = np.linspace(0, 1, samples)[None, :, None]
        xy = np.concatenate([(xy[:-1][whole, None, :] * (1 - t) + xy[1:][whole, None, :] * t).reshape(-1, 2),
                             xy[finite]])
    else:
        xy = xy[finite]
    inside = ((xy[:, 0] > box.x0 + SLACK_PX) & (xy[:, 0] < box.x1 - SLACK_PX)
              & (xy[:, 1] > box.y0 + SLACK_PX) & (xy[:, 1] < box.y1 - SLACK_PX))
    return bool(inside.any())


def _line_points(line) -> np.ndarray:
    """A line's points in data coordinates as an (n, 2) float array: category names read as their positions
    (``get_data`` would return the names themselves)."""
    return np.asarray(line.get_xydata(), dtype=float).reshape(-1, 2)


def _legend_covers(ax, renderer) -> List[str]:
    leg = ax.get_legend()
    if leg is None or not leg.get_visible():
        return []
    box = leg.get_window_extent(renderer)
    others = [f"axes {ax.figure.axes.index(o) + 1}" for o in ax.figure.axes
              if o is not ax and o.get_visible() and o.get_frame_on() and _overlap(box, o.get_window_extent(renderer))]
    if others:
        return [f"the legend lies on {others[0]}, another axes"]
    if not _overlap(box, ax.get_window_extent(renderer)):
        return []   # beside the axes
    hits = []
    for p, _ in _bars(ax):
        if p.get_visible() and _overlap(box, p.get_window_extent(renderer)):
            hits.append("a bar")
            break
    for line in ax.lines:
        if line.get_visible() and line.get_label() != "_hubnorm_zero_mark":
            xy = line.get_transform().transform(_line_points(line))
            if line.get_linestyle() in ("None", "none", "", " "):
                hit = _segments_hit(box, xy, samples=1) if len(xy) else False
            else:
                hit = _segments_hit(box, xy)
            if hit:
                hits.append(f"the line {line.get_label()!r}")
                break
    for coll in ax.collections:
        offsets = getattr(coll, "get_offsets", lambda: np.empty((0, 2)))()
        if coll.get_visible() and len(offsets) and type(coll).__name__ == "PathCollection":
            xy = coll.get_offset_transform().transform(np.asarray(offsets, dtype=float))
            if _segments_hit(box, xy, samples=1):
                hits.append("plotted points")
                break
    return [f"the legend covers {h}" for h in hits]


def _zero_marked(ax, rect, vertical: bool) -> bool:
    """Whether a zero bar has a mark at its place: a line along its baseline or a text within its span."""
    x0, x1 = (rect.get_x(), rect.get_x() + rect.get_width()) if vertical else (rect.get_y(), rect.get_y() + rect.get_height())
    base = rect.get_y() if vertical else rect.get_x()
    lo, hi = min(x0, x1), max(x0, x1)
    for line in ax.lines:
        xs, ys = _line_points(line).T
        along, across = (xs, ys) if vertical else (ys, xs)
        if len(along) and np.allclose(across, base) and along.min() <= lo + 1e-9 and along.max() >= hi - 1e-9:
            return True
    for t in ax.texts:
        x, y = t.get_position()
        pos = x if vertical else y
        if lo - 1e-9 <= pos <= hi + 1e-9:
            return True
    return False


def layout_problems(fig) -> List[str]:
    """What makes ``fig`` hard to read (see the module docstring), one sentence each; [] for a clean figure.
    The figure is drawn first (its text boxes are measured as rendered)."""
    renderer = _renderer(fig)
    problems = []
    texts = [(d, t, t.get_window_extent(renderer)) for d, t in _texts(fig)]
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            (da, ta, ba), (db, tb, bb) = texts[i], texts[j]
            if ta is not tb and _overlap(ba, bb):
                problems.append(f"text over text: {da} and {db}")
    for ax in fig.axes:
        problems += [f"{p} (axes {fig.axes.index(ax) + 1})" for p in _legend_covers(ax, renderer)]
        for rect, vertical in _bars(ax, histograms=False):
            size = rect.get_height() if vertical else rect.get_width()
            if rect.get_visible() and np.isfinite(size) and size == 0 and not _zero_marked(ax, rect, vertical):
                problems.append(f"a bar of height zero is invisible (axes {fig.axes.index(ax) + 1}, at "
                                f"{rect.get_x() if vertical else rect.get_y():.3g}): mark it or label it")
    problems += _too_small(fig, renderer, [(d, t) for d, t, _ in texts])
    return problems


def shown_px_per_point(fig, renderer=None) -> float:
    """CSS pixels per typographic point of ``fig`` as the book shows it on a laptop: its inline size
    (``fig.dpi`` pixels per inch of its tight bounding box), shrunk to :data:`READING_WIDTH_PX` when wider."""
    width_in = fig.get_tightbbox(renderer or _renderer(fig)).width
    return min(fig.dpi, READING_WIDTH_PX / max(width_in, 1e-9)) / 72.0


def _too_small(fig, renderer, texts) -> List[str]:
    scale = shown_px_per_point(fig, renderer)
    small = sorted((t.get_fontsize() * scale, d) for d, t in texts if t.get_fontsize() * scale < MIN_TEXT_PX)
    if not small:
        return []
    px, d = small[0]
    width = fig.get_tightbbox(renderer).width
    return [f"text too small at laptop width: {len(small)} text{'s' if len(small) > 1 else ''} under {MIN_TEXT_PX:g} px, "
            f"the smallest {d} at {px:.1f} px (the figure is {width:.1f} in wide, shown at most "
            f"{READING_WIDTH_PX} px wide): fewer panels per row, a narrower figure or a larger font"]


def mark_zero_bars(ax) -> int:
    """Draw a short thick line in the bar's colour along the baseline of every zero bar of ``ax``; returns how
    many were marked."""
    n = 0
    for rect, vertical in _bars(ax, histograms=False):
        size = rect.get_height() if vertical else rect.get_width()
        if rect.get_visible() and np.isfinite(size) and size == 0 and not _zero_marked(ax, rect, vertical):
            colour = rect.get_facecolor()
            if vertical:
                xs, ys = [rect.get_x(), rect.get_x() + rect.get_width()], [rect.get_y()] * 2
            else:
                xs, ys = [rect.get_x()] * 2, [rect.get_y(), rect.get_y() + rect.get_height()]
            ax.plot(xs, ys, color=colour, lw=3, solid_capstyle="butt", label="_hubnorm_zero_mark", zorder=3)
            n += 1
    return n


def _text_overlaps(fig) -> List[Tuple[str, str]]:
    renderer = _renderer(fig)
    texts = [(d, t.get_window_extent(renderer)) for d, t in _texts(fig)]
    return [(texts[i][0], texts[j][0]) for i in range(len(texts)) for j in range(i + 1, len(texts))
            if _overlap(texts[i][1], texts[j][1])]


def _crowded_axes(fig):
    """(axes, axis) whose own tick labels overlap each other (they run together)."""
    renderer = _renderer(fig)
    out = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            boxes = [t.label1.get_window_extent(renderer) for t in _drawn_ticks(axis)
                     if t.label1.get_visible() and str(t.label1.get_text()).strip()]
            if any(_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]):
                out.append((ax, axis))
    return out


def tidy(fig) -> List[str]:
    """The remedies that need no judgement, in place, in this order: zero bars get a mark
    (:func:`mark_zero_bars`); texts too small at laptop width get the smallest legible size; a legend that covers data moves beside its axes (upper left, outside on the right);
    texts that overlap each other are laid out again by matplotlib's constrained layout (kept only when it leaves
    fewer overlaps); a title on its own tick labels is raised; tick labels that still run together get fewer ticks (numbers: 6, then 4, then 3 at most) or
    are slanted (names on the x axis: 30, 60, 90 degrees). A new layout can put an axes' legend on its data or a text
    under a figure legend, and a legend moved beside its axes widens the figure (its texts shrink): legends are
    placed and small texts enlarged once more, and laid out again when the larger texts overlap (two rounds at most).
    Returns what was done."""
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    done = []
    for i, ax in enumerate(fig.axes):
        if mark_zero_bars(ax):
            done.append(f"marked the zero bars of axes {i + 1}")
    done += _enlarge_small_text(fig)
    done += _move_legends(fig)
    done += _move_figure_legends(fig)
    if _text_overlaps(fig):
        done += _wrap_titles(fig)
    done += _relayout(fig)
    for i, ax in enumerate(fig.axes):   # a title on its own tick labels (a log axis' top label): raise the title
        if _raise_title(fig, ax):
            done.append(f"raised the title of axes {i + 1} above its tick labels")
    for ax, axis in _crowded_axes(fig):
        where = f"the {axis.axis_name} ticks of axes {fig.axes.index(ax) + 1}"
        if axis.get_scale() == "linear" and isinstance(axis.get_major_formatter(), ScalarFormatter):
            for nbins in (6, 4, 3):   # numbers: fewer of them
                axis.set_major_locator(MaxNLocator(nbins=nbins))
                if (ax, axis) not in _crowded_axes(fig):
                    done.append(f"thinned {where} to {nbins}")
                    break
        elif axis.axis_name == "x":   # names (categories): slanted, then upright
            for angle in (30, 60, 90):
                for label in axis.get_ticklabels():
                    label.set_rotation(angle)
                    label.set_horizontalalignment("right" if angle < 90 else "center")
                    label.set_rotation_mode("anchor" if angle < 90 else "default")
                if (ax, axis) not in _crowded_axes(fig):
                    done.append(f"slanted {where} by {angle} degrees")
                    break
    for _ in range(2):   # a new layout can shrink an axes under its legend or put a text under a figure legend;
        late = _move_legends(fig) + _move_figure_legends(fig)   # a legend moved beside the axes widens the figure,
        late += _enlarge_small_text(fig)   # and its texts shrink; larger texts can overlap: laid out once more
        if late and _text_overlaps(fig):
            late += _relayout(fig)
        done += late
        if not late:
            break
    return done


def _relayout(fig) -> List[str]:
    """Texts that overlap each other: matplotlib's constrained layout, kept only when it leaves fewer overlaps; else
    the figure's own layout engine once more on the new texts (when it has one), kept on the same condition."""
    done = []
    before = _text_overlaps(fig)
    if before:
        engine, positions = fig.get_layout_engine(), [ax.get_position(original=True) for ax in fig.axes]
        try:
            fig.set_layout_engine("constrained")
        except RuntimeError:   # matplotlib refuses once a colorbar was made under another engine: keep that one
            relaid = False
        else:
            relaid = True
        if relaid and len(_text_overlaps(fig)) < len(before):
            done.append("laid the figure out again (constrained layout)")
        else:
            if relaid:
                fig.set_layout_engine(engine if engine is not None else "none")
                for ax, pos in zip(fig.axes, positions):
                    ax.set_position(pos)
            if engine is not None and hasattr(engine, "execute"):   # its own layout once more, on the new texts
                engine.execute(fig)
                if len(_text_overlaps(fig)) < len(before):
                    done.append("laid the figure out again (its own layout engine)")
                else:
                    for ax, pos in zip(fig.axes, positions):
                        ax.set_position(pos)
    return done


def _enlarge_small_text(fig, rounds: int = 4) -> List[str]:
    """Texts smaller than :data:`MIN_TEXT_PX` at laptop width (see :func:`shown_px_per_point`): titles wider than
    their axes are wrapped first (a long title widens the figure, and the book then shrinks every text with it);
    what is still small gets the font size that reaches the minimum (in half points, upwards). Larger texts can
    widen the figure's tight box, so it is measured again, a few rounds at most. The layout remedies that follow
    see the new sizes."""
    done, n, wrapped = [], 0, False
    for _ in range(rounds):
        renderer = _renderer(fig)
        scale = shown_px_per_point(fig, renderer)
        small = [t for _, t in _texts(fig) if t.get_fontsize() * scale < MIN_TEXT_PX - 1e-9]
        if not small:
            break
        if not wrapped:
            wrapped = True
            got = _wrap_titles(fig)
            if got:
                done += got
                continue
        for t in small:
            t.set_fontsize(np.ceil(2 * MIN_TEXT_PX / scale) / 2)
        n += len(small)
    return done + ([f"enlarged {n} small texts to at least {MIN_TEXT_PX:g} px at laptop width"] if n else [])


def _outside_anchor(ax, renderer, side: str) -> Tuple[float, float]:
    """An anchor (axes coordinates) just above the axes' title (``side="above"``) or just below its x tick labels
    and x label (``"below"``): the box of everything the axes draws, its legend left out."""
    leg = ax.get_legend()
    leg.set_visible(False)
    try:
        box = ax.get_tightbbox(renderer).transformed(ax.transAxes.inverted())
    finally:
        leg.set_visible(True)
    return (0.0, box.y1 + 0.02) if side == "above" else (0.0, box.y0 - 0.02)


def _wrap_titles(fig) -> List[str]:
    """Rewrap every axes title wider than its axes to the axes' width, and a suptitle wider than the figure to the
    figure's width (at the title's own line breaks first)."""
    import textwrap

    def wrap(title, room) -> bool:
        width = title.get_window_extent(renderer).width
        if width <= room * 1.02:
            return False
        lines = title.get_text().split("\n")
        chars = max(8, int(max(len(line) for line in lines) * room / width * 0.95))
        title.set_text("\n".join(textwrap.fill(line, chars) for line in lines))
        return True

    done = []
    renderer = _renderer(fig)
    for i, ax in enumerate(fig.axes):
        if _visible_text(ax.title) and wrap(ax.title, ax.get_window_extent(renderer).width):
            done.append(f"wrapped the title of axes {i + 1} to its width")
    sup = getattr(fig, "_suptitle", None)
    if sup is not None and _visible_text(sup) and wrap(sup, fig.bbox.width):
        done.append("wrapped the suptitle to the figure's width")
    return done


def _move_figure_legends(fig) -> List[str]:
    """A figure legend that lies on a text (a title, a tick label) goes below the figure, in one row."""
    done = []
    for leg in list(fig.legends):
        if not _legend_on_texts(fig, leg, frame=False):
            continue
        handles, labels, style = _legend_entries(leg)
        leg.remove()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=len(labels),
                   fontsize=style["fontsize"], frameon=False)
        done.append("moved the figure legend below the figure")
    return done


def _legend_entries(leg):
    """(handles, labels, style) of a legend, to make it again elsewhere (its columns are laid out when it is made)."""
    labels = [t.get_text() for t in leg.get_texts()]
    style = dict(title=leg.get_title().get_text() or None, title_fontsize=leg.get_title().get_fontsize(),
                 fontsize=leg.get_texts()[0].get_fontsize() if labels else None, ncols=leg._ncols)
    return list(leg.legend_handles), labels, style


def _legend_on_texts(fig, leg, *, frame: bool) -> bool:
    """Whether ``leg`` lies on a text of the figure that is not its own: its frame (``frame=True``) or its own
    texts."""
    renderer = _renderer(fig)
    own = leg.get_texts() + [leg.get_title()]
    boxes = ([leg.get_window_extent(renderer)] if frame else
             [t.get_window_extent(renderer) for t in own if _visible_text(t)])
    return any(_overlap(b, t.get_window_extent(renderer)) for _, t in _texts(fig) if all(t is not o for o in own)
               for b in boxes)


def _raise_title(fig, ax) -> bool:
    """Raise the title of ``ax`` above any of its own tick labels it overlaps; True when it moved."""
    import matplotlib

    title = ax.title
    if not _visible_text(title):
        return False
    renderer = _renderer(fig)
    box = title.get_window_extent(renderer)
    labels = [lab for axis in (ax.xaxis, ax.yaxis) for t in _drawn_ticks(axis)
              for lab in (t.label1, t.label2) if _visible_text(lab)]
    tops = [lab.get_window_extent(renderer).y1 for lab in labels if _overlap(box, lab.get_window_extent(renderer))]
    if not tops:
        return False
    pad_pt = float(np.ceil((max(tops) - box.y0 + 2 * SLACK_PX) * 72.0 / fig.dpi)) + \
        float(matplotlib.rcParams["axes.titlepad"])
    ax.set_title(title.get_text(), pad=pad_pt, fontsize=title.get_fontsize(), color=title.get_color())
    return True


def _move_legends(fig) -> List[str]:
    """Place every legend that covers data where it covers none, trying in turn: matplotlib's "best" spot inside
    the axes, beside the axes on the right, above its title in one row, below its x label in one row; the first
    place that covers no data of its axes and no other axes is kept (else the last one tried)."""
    done = []
    for i, ax in enumerate(fig.axes):
        if not _legend_covers(ax, _renderer(fig)):
            continue
        handles, labels, style = _legend_entries(ax.get_legend())
        places = [("at the best spot inside its axes", "best", None, style["ncols"]),
                  ("beside its axes", "upper left", (1.01, 1.0), style["ncols"]),
                  ("above its axes", "lower left", "above", len(labels)),
                  ("below its axes", "upper left", "below", len(labels))]
        for what, loc, anchor, ncols in places:
            if isinstance(anchor, str):
                anchor = _outside_anchor(ax, _renderer(fig), anchor)
            ax.legend(handles, labels, loc=loc, bbox_to_anchor=anchor, bbox_transform=None if anchor is None else ax.transAxes,
                      **{**style, "ncols": ncols})   # a new legend: its columns are laid out when it is made
            if not _legend_covers(ax, _renderer(fig)) and not _legend_on_texts(fig, ax.get_legend(), frame=True):
                break
        done.append(f"moved the legend of axes {i + 1} {what}")
    return done


def plot_shift(study, *, stars=None, title: str = "",
               legend: str = "shift", xlabel: str = "share moved to the other distribution"):
    """The figure of a :func:`hubnorm_companion.studies.shift_study` table (notebooks 04 and 08): one panel per method, the R@1 gain over raw against the share,
    one line per ``label`` with its 95% CI band, the zero line; ``stars``: ``{method: frame with share, gain}``
    (published gains) drawn as black stars on that method's panel. Returns the matplotlib figure."""
    import matplotlib.pyplot as plt
    import pandas as pd

    methods = list(dict.fromkeys(study["method"]))
    labels = list(dict.fromkeys(study["label"]))
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]   # the notebooks' seaborn theme sets it
    colors = {lab: cycle[i % len(cycle)] for i, lab in enumerate(labels)}
    cols = min(4, len(methods))
    rows = -(-len(methods) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.9 * cols, 2.3 * rows + 0.9), squeeze=False)
    for ax in axes.flat[len(methods):]:
        ax.remove()
    for ax, m in zip(axes.flat, methods):
        for lab in labels:
            part = study[(study["method"] == m) & (study["label"] == lab)].sort_values("share")
            ax.fill_between(part["share"], part["gain lo"], part["gain hi"], color=colors[lab], alpha=0.2, lw=0)
            ax.plot(part["share"], part["gain"], marker="o", ms=3, color=colors[lab], label=lab)
        for _, r in (stars or {}).get(m, pd.DataFrame(columns=["share", "gain"])).iterrows():
            ax.scatter([r["share"]], [r["gain"]], marker="*", s=110, color="k", zorder=5)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_title(m, fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("R@1 gain (points)", fontsize=8)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, title=legend, loc="lower center", ncol=min(len(labels), 4), fontsize=8,
               title_fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1 if len(labels) <= 4 else 0.16, 1, 0.95))
    return fig
