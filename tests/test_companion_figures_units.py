"""hubnorm_companion.figures: unit tests of the layout check's parts (the mode, the visible texts and their
descriptions, the drawn ticks, the plotted numbers, box overlap, histogram bins, line sampling, a legend over data, zero
bars, the size of text at laptop width) and of each remedy on its own (zero marks, enlarged text, moved legends, wrapped
and raised titles, a new layout), and of the shift-study figure, on small figures built by hand.

Expected values are written here by hand (descriptions, messages, mark coordinates) or measured independently with
matplotlib's own API (a text's box, a figure's tight box); tests/test_figures.py checks the remedies end to end on
the figures the notebooks had.

A bug found on the way (fixed in figures.py): a line whose data are category names (``ax.plot(["a", "b"], ...)``)
made layout_problems and tidy raise ValueError (could not convert string to float) when the axes also had a zero bar
(_zero_marked) or a legend on the axes (_legend_covers): both read ``line.get_data()``, the names, instead of the
positions ``line.get_xydata()``. test_lines_over_category_names_are_read_as_their_positions.

Mutants judged equivalent on reading the sampled ones (``--sample 3``; no mutation run of this file could finish in
the time given, see the helper's report):
- _bars ``getattr(c, "orientation", "XXverticalXX" / "VERTICAL")``: every BarContainer has an orientation.
- _legend_covers linestyle ``"XXnoneXX"`` (and "" or " " changed): matplotlib stores a line without segments as "None".
- _legend_covers ``np.empty((0, 3))`` for a collection without offsets: every matplotlib collection has get_offsets.
- _legend_covers ``samples=2`` for ``samples=1`` (points and marker-only lines): both sample only the points.
- _move_legends ``bbox_transform=None`` (or left out): an axes legend anchors to its axes' box, i.e. ax.transAxes.
- _move_figure_legends ``frame=None``: as falsy as False.
- _enlarge_small_text ``done = got`` for ``done += got``: done is still empty at the only wrap.
- ``renderer`` -> None in a window extent or tight box taken after a draw (_legend_covers, _legend_on_texts,
  _wrap_titles, shown_px_per_point, _outside_anchor): matplotlib then uses the figure's own renderer.
- _outside_anchor ``leg.set_visible(None)``: a legend whose visibility is None is left out of the tight box too.
- plot_shift's default star frame with columns "SHARE" / "XXgainXX": the frame is empty, its columns never read.
- plot_shift ``axes[+1]`` for ``axes[-1]`` when there are two rows of panels (checked with one row).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Circle  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from hubnorm_companion import figures  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _box(x0, y0, x1, y1):
    return Bbox([[x0, y0], [x1, y1]])


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


# ------------------------------------------------------------------------------------------------------- the mode
def test_check_mode_reads_the_environment_and_names_the_bad_value(monkeypatch):
    monkeypatch.delenv("HUBNORM_FIGURE_CHECK", raising=False)
    assert figures.check_mode() == "note"
    for raw, want in (("", "note"), ("   ", "note"), (" ERROR ", "error"), ("Off", "off"), ("note", "note")):
        monkeypatch.setenv("HUBNORM_FIGURE_CHECK", raw)
        assert figures.check_mode() == want, raw
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "Loud")
    with pytest.raises(ValueError, match=r"^HUBNORM_FIGURE_CHECK must be one of \['note', 'error', 'off'\]; "
                                         r"got 'Loud': unset it or set e\.g\. HUBNORM_FIGURE_CHECK=note$"):
        figures.check_mode()
    assert figures.CHECK_ENV == "HUBNORM_FIGURE_CHECK" and figures.CHECK_MODES == ("note", "error", "off")


# ------------------------------------------------------------------------------------------------ visible texts
def test_visible_text_needs_visibility_words_and_some_opacity():
    fig = plt.figure()
    t = fig.text(0, 0, "words")
    assert figures._visible_text(t)
    t.set_alpha(0.5)
    assert figures._visible_text(t)
    t.set_alpha(0)
    assert not figures._visible_text(t)
    t.set_alpha(None)
    t.set_visible(False)
    assert not figures._visible_text(t)
    t.set_visible(True)
    for blank in ("", "  \n ", None):
        t.set_text(blank)
        assert not figures._visible_text(t), blank
    t.set_text(0)   # a number is a text too
    assert figures._visible_text(t)


def test_drawn_ticks_keep_those_within_the_view_up_to_a_billionth_of_it():
    fig, ax = plt.subplots()
    ax.set_xticks([9.0, 10.0, 10.5, 11 + 5e-10, 11 + 5e-9])
    ax.set_xlim(10, 11)
    fig.canvas.draw()
    locs = [t.get_loc() for t in figures._drawn_ticks(ax.xaxis)]
    assert locs == [10.0, 10.5, 11 + 5e-10]
    ax.set_xlim(11, 10)   # an inverted axis: the same ticks
    assert [t.get_loc() for t in figures._drawn_ticks(ax.xaxis)] == [10.0, 10.5, 11 + 5e-10]
    ax.xaxis.get_major_ticks()[2].set_visible(False)
    assert [t.get_loc() for t in figures._drawn_ticks(ax.xaxis)] == [10.0, 11 + 5e-10]
    # the bound itself: lo - span is in, a little less is not
    fig, ax = plt.subplots()
    lo = 10 - (11 - 10) * 1e-9
    ax.set_yticks([lo, np.nextafter(lo, 0), 10.5])
    ax.set_ylim(10, 11)
    fig.canvas.draw()
    assert [t.get_loc() for t in figures._drawn_ticks(ax.yaxis)] == [lo, 10.5]


def test_texts_lists_every_visible_text_once_with_its_description():
    fig, axes = plt.subplots(1, 3, figsize=(12, 3))
    fig.suptitle("the suptitle")                 # also among fig.texts: listed once, as the suptitle
    fig.text(0.01, 0.01, "a figure note")
    fig.text(0.5, 0.01, "  ")                     # blank: left out
    ax = axes[0]
    ax.plot([0, 1], [0, 1], label="a legend entry longer than twenty")
    ax.set_title("a centre title that is longer than thirty characters")
    ax.set_title("left", loc="left")
    ax.set_title("right", loc="right")
    ax.set_xlabel("xl")
    ax.set_ylabel("yl")
    ax.set_xticks([0, 1])
    ax.set_yticks([0.5])
    ax.text(0.5, 0.5, "an annotation longer than twenty")
    ax.legend(title="legend title")
    axes[1].set_title("hidden panel")
    axes[1].set_visible(False)                    # an invisible axes: none of its texts
    axes[2].set_xticks([])
    axes[2].set_yticks([2])
    axes[2].set_ylim(1, 3)
    axes[2].yaxis.tick_right()                    # its second tick label, on the right
    axes[2].plot([0], [2], label="hidden legend")
    axes[2].legend().set_visible(False)           # an invisible legend: not its entries
    fig.legend([ax.lines[0]], ["a figure legend entry, long"], title="fig legend title")
    fig.canvas.draw()
    a1 = "axes 1 ('a centre title that is longer ')"
    got = [(d, t.get_text()) for d, t in figures._texts(fig)]
    assert got == [("suptitle", "the suptitle"), ("figure text", "a figure note"),
                   (f"{a1} left title", "left"),
                   (f"{a1} title", "a centre title that is longer than thirty characters"),
                   (f"{a1} right title", "right"), (f"{a1} x label", "xl"), (f"{a1} y label", "yl"),
                   (f"{a1} x tick '0'", "0"), (f"{a1} x tick '1'", "1"), (f"{a1} y tick '0.5'", "0.5"),
                   (f"{a1} text 'an annotation longer'", "an annotation longer than twenty"),
                   (f"{a1} legend 'a legend entry longe'", "a legend entry longer than twenty"),
                   (f"{a1} legend title", "legend title"),
                   ("axes 3 y tick '2'", "2"), ("figure legend 'a figure legend entr'", "a figure legend entry, long")]
    # what a reader can read: the same texts and the figure legend's title
    assert figures.shown_words(fig) == "\n".join([t for _, t in got] + ["fig legend title"])
    fig.legends[0].get_title().set_visible(False)
    assert figures.shown_words(fig) == "\n".join(t for _, t in got)


def test_texts_of_an_untitled_axes_and_a_figure_without_a_suptitle():
    fig, ax = plt.subplots()
    ax.set_xlabel("only a label")
    ax.set_xticks([])
    ax.set_yticks([])
    assert [(d, t.get_text()) for d, t in figures._texts(fig)] == [("axes 1 x label", "only a label")]


# ---------------------------------------------------------------------------------------------- plotted values
def test_plotted_values_in_order_without_strings_circles_gaps_or_colour_bars():
    fig, (a, b) = plt.subplots(1, 2)
    a.plot([1, 2], [3, 4])
    a.plot(["p", "q"], [5.5, 6.5])               # category names are not numbers
    a.bar([0], [5])                              # a bar: x, y, width, height
    a.add_patch(Circle((0, 0), 9))               # not a bar
    a.scatter([6], [7])
    im = b.imshow(np.ma.masked_invalid([[8.0, np.nan]]))
    fig.colorbar(im, ax=b)                       # its levels are not data
    got = figures.plotted_values(fig)
    assert got.dtype == float
    np.testing.assert_array_equal(got, [1, 2, 3, 4, 5.5, 6.5, -0.4, 0, 0.8, 5, 6, 7, 8])


def test_plotted_values_reads_bands_and_coloured_cells():
    fig, (a, b) = plt.subplots(1, 2)
    a.fill_between([0.0, 1.0], [1.5, 2.5], [3.5, 4.5])
    mesh = b.pcolormesh(np.array([[11.5, np.nan]]))
    got = set(figures.plotted_values(fig).tolist())
    assert {1.5, 2.5, 3.5, 4.5, 11.5} <= got and not np.isnan(figures.plotted_values(fig)).any()
    assert mesh.get_array() is not None


# ----------------------------------------------------------------------------------------------- box geometry
def test_overlap_needs_more_than_the_slack_on_both_sides():
    a = _box(0, 0, 10, 10)
    assert figures.SLACK_PX == 1.0
    assert figures._overlap(a, _box(8.5, 8.5, 20, 20))          # 1.5 px each way
    assert not figures._overlap(a, _box(9, 0, 20, 10))          # exactly the slack in x
    assert not figures._overlap(a, _box(0, 9, 10, 20))          # exactly the slack in y
    assert not figures._overlap(a, _box(8.5, 20, 20, 30))       # overlap in x only
    assert not figures._overlap(a, _box(20, 8.5, 30, 20))       # overlap in y only
    assert figures._overlap(_box(8.5, 8.5, 20, 20), a)          # symmetric
    assert figures._overlap(a, _box(2, 2, 4, 4))                # one inside the other
    assert figures._overlap(a, _box(9, 0, 20, 10), slack=0.5)
    assert not figures._overlap(a, _box(8.5, 8.5, 20, 20), slack=1.5)


def _bars(ax, starts, sizes, vertical=True):
    c = ax.bar(starts, sizes, width=1.0, align="edge") if vertical else ax.barh(starts, sizes, height=1.0, align="edge")
    return c


def test_is_histogram_for_bars_that_tile_an_interval():
    fig, ax = plt.subplots()
    assert not figures._is_histogram([], True)
    assert not figures._is_histogram(_bars(ax, [0], [1]).patches, True)              # one bar
    assert figures._is_histogram(_bars(ax, [0, 1, 2], [1, 2, 0]).patches, True)      # edge to edge
    assert not figures._is_histogram(_bars(ax, [0, 1, 2.5], [1, 2, 0]).patches, True)  # a gap before the last
    assert not figures._is_histogram(_bars(ax, [0, 1.5, 2.5], [1, 2, 0]).patches, True)   # a gap after the first
    h = _bars(ax, [0, 1, 2], [1, 2, 0], vertical=False).patches
    assert figures._is_histogram(h, False)
    assert not figures._is_histogram(h, True)      # their x are all 0: read along the wrong axis, no tiling
    assert not figures._is_histogram(_bars(ax, [0, 2, 4], [1, 2, 0], vertical=False).patches, False)


def test_bars_lists_each_bar_with_its_orientation_and_skips_histograms_on_request():
    fig, ax = plt.subplots()
    ax.bar([0, 3], [1, 2], width=0.5)
    ax.barh([10, 11], [1, 2], height=1.0, align="edge")        # tiles: a histogram-like horizontal container
    ax.hist([0.5, 1.5], bins=[0, 1, 2])
    ax.errorbar([0], [1], yerr=[0.1])                         # a container that is not a bar container
    got = [(round(p.get_x(), 3), round(p.get_y(), 3), v) for p, v in figures._bars(ax)]
    assert got == [(-0.25, 0, True), (2.75, 0, True), (0, 10, False), (0, 11, False), (0, 0, True), (1, 0, True)]
    got = [(round(p.get_x(), 3), round(p.get_y(), 3), v) for p, v in figures._bars(ax, histograms=False)]
    assert got == [(-0.25, 0, True), (2.75, 0, True)]


def test_segments_hit_samples_segments_and_keeps_off_the_box_edge():
    box = _box(40, 40, 60, 60)
    assert not figures._segments_hit(box, np.zeros((0, 2)))
    assert figures._segments_hit(box, np.array([[50.0, 50.0]]))                  # one point inside
    assert not figures._segments_hit(box, np.array([[41.0, 50.0]]))             # within the slack of the edge
    assert figures._segments_hit(box, np.array([[41.5, 50.0]]))
    assert not figures._segments_hit(box, np.array([[59.0, 50.0]]))
    assert figures._segments_hit(box, np.array([[58.5, 50.0]]))
    assert not figures._segments_hit(box, np.array([[50.0, 41.0]]))
    assert figures._segments_hit(box, np.array([[50.0, 41.5]]))
    assert not figures._segments_hit(box, np.array([[50.0, 59.0]]))
    assert figures._segments_hit(box, np.array([[50.0, 58.5]]))
    assert not figures._segments_hit(box, np.array([[np.nan, 50.0]]))
    # a segment through the box, both ends outside: found by its samples, not by its ends
    across = np.array([[0.0, 50.0], [105.0, 50.0]])   # samples at 0, 15, ..., 45, 60, ...: 45 lies inside
    assert figures._segments_hit(box, across)
    assert not figures._segments_hit(box, across, samples=1)
    assert not figures._segments_hit(box, np.array([[0.0, 50.0], [70.0, 50.0]]), samples=2)   # 0 and 70 only
    assert figures._segments_hit(box, np.array([[0.0, 50.0], [100.0, 50.0]]), samples=3)      # 50 is sampled
    # a gap (NaN) cuts the line: the segments beside it are not sampled, the points on either side still count
    assert not figures._segments_hit(box, np.array([[0.0, 50.0], [np.nan, 50.0], [100.0, 50.0]]))
    assert figures._segments_hit(box, np.array([[0.0, 50.0], [100.0, 50.0], [np.nan, 0.0], [200.0, 50.0]]))
    assert figures._segments_hit(box, np.array([[0.0, 0.0], [np.nan, 0.0], [50.0, 50.0]]))


# ------------------------------------------------------------------------------------------- a legend over data
def _legend_fig(size=(5, 3.5)):
    fig, ax = plt.subplots(figsize=size)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    return fig, ax


def test_legend_covers_names_the_first_of_each_kind_it_covers():
    fig, ax = _legend_fig()
    ax.bar([0.5], [1.0], width=0.9, label="bar")
    ax.plot([0, 1], [0.5, 0.5], label="first")
    ax.plot([0, 1], [0.52, 0.52], label="second")
    ax.scatter([0.5], [0.5], label="pts")
    ax.scatter([0.51], [0.5], label="pts2")
    ax.legend(loc="center")
    assert figures._legend_covers(ax, _renderer(fig)) == [
        "the legend covers a bar", "the legend covers the line 'first'", "the legend covers plotted points"]
    assert figures.layout_problems(fig) == [
        "the legend covers a bar (axes 1)", "the legend covers the line 'first' (axes 1)",
        "the legend covers plotted points (axes 1)"]


def test_legend_covers_nothing_that_is_hidden_or_a_zero_mark():
    fig, ax = _legend_fig()
    bars = ax.bar([0.5], [1.0], width=0.9, label="bar")
    line, = ax.plot([0, 1], [0.5, 0.5], label="line")
    pts = ax.scatter([0.5], [0.5], label="pts")
    ax.plot([0, 1], [0.48, 0.48], label="_hubnorm_zero_mark")
    ax.legend(loc="center")
    for artist in (bars.patches[0], line, pts):
        artist.set_visible(False)
    assert figures._legend_covers(ax, _renderer(fig)) == []
    ax.get_legend().set_visible(False)
    line.set_visible(True)
    assert figures._legend_covers(ax, _renderer(fig)) == []
    fig, ax = _legend_fig()
    ax.plot([0, 1], [0.5, 0.5], label="line")
    assert ax.get_legend() is None and figures._legend_covers(ax, _renderer(fig)) == []


def test_a_marker_only_line_is_hit_by_its_points_not_its_segments():
    fig, ax = _legend_fig()
    ax.plot([0.02, 0.98], [0.5, 0.5], ls="none", marker="o", label="dots")   # no point under a centred legend
    ax.legend(loc="center")
    assert figures._legend_covers(ax, _renderer(fig)) == []
    ax.lines[0].set_linestyle("-")
    assert figures._legend_covers(ax, _renderer(fig)) == ["the legend covers the line 'dots'"]
    ax.lines[0].set_linestyle("None")
    ax.lines[0].set_data([0.02, 0.5, 0.98], [0.5, 0.5, 0.5])
    assert figures._legend_covers(ax, _renderer(fig)) == ["the legend covers the line 'dots'"]
    ax.lines[0].set_data([], [])
    assert figures._legend_covers(ax, _renderer(fig)) == []


def test_points_outside_the_legend_are_not_covered():
    fig, ax = _legend_fig()
    ax.scatter([0.02, 0.98], [0.5, 0.5], label="pts")    # on either side of a centred legend
    ax.plot([0.02], [0.02], label="far")                 # one point, far from it
    ax.legend(loc="center")
    assert figures._legend_covers(ax, _renderer(fig)) == []


def test_a_legend_on_another_axes_is_named_and_a_legend_beside_its_axes_covers_nothing():
    fig, axes = plt.subplots(1, 3, figsize=(9, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="line")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.05, 0.6))    # on axes 2
    r = _renderer(fig)
    assert figures._legend_covers(axes[0], r) == ["the legend lies on axes 2, another axes"]
    axes[1].set_frame_on(False)        # an axes without a frame (an inset that draws no box) is not a place
    assert figures._legend_covers(axes[0], _renderer(fig)) == []
    axes[1].set_frame_on(True)
    axes[1].set_visible(False)         # nor a hidden one
    assert figures._legend_covers(axes[0], _renderer(fig)) == []
    fig, ax = _legend_fig()
    ax.plot([0, 1], [0, 1], label="line")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    assert figures._legend_covers(ax, _renderer(fig)) == []


# ----------------------------------------------------------------------------------------------------- zero bars
def test_zero_marked_by_a_line_along_the_baseline_or_a_text_within_the_span():
    fig, ax = plt.subplots()
    bar = ax.bar([1.0], [0.0], width=0.5)[0]                 # spans 0.75 .. 1.25 at y = 0
    assert not figures._zero_marked(ax, bar, True)
    ax.plot([0.75, 1.25], [0.1, 0.1])                        # off the baseline
    ax.plot([0.8, 1.25], [0, 0])                             # too short on the left
    ax.plot([0.75, 1.2], [0, 0])                             # too short on the right
    ax.plot([0.75, 1.25], [0, 0.1])                          # not along it
    ax.text(0.7, 0, "beside")
    ax.text(1.3, 0, "beside")
    assert not figures._zero_marked(ax, bar, True)
    ax.plot([0.75 + 5e-10, 1.25 - 5e-10], [0, 0])            # within a billionth
    assert figures._zero_marked(ax, bar, True)
    fig, ax = plt.subplots()
    bar = ax.bar([1.0], [0.0], width=0.5)[0]
    ax.text(0.75 - 5e-10, 3, "0")                             # a text at the bar's place (its height is free)
    assert figures._zero_marked(ax, bar, True)
    fig, ax = plt.subplots()
    bar = ax.bar([1.0], [0.0], width=0.5)[0]
    ax.text(1.25 + 5e-10, 3, "0")
    assert figures._zero_marked(ax, bar, True)
    fig, ax = plt.subplots()
    bar = ax.bar([1.0], [0.0], width=0.5)[0]
    ax.plot([0.75 + 1e-9, 1.25 - 1e-9], [0, 0])              # exactly a billionth short at each end: still a mark
    assert figures._zero_marked(ax, bar, True)
    fig, ax = plt.subplots()
    bar = ax.bar([1.0], [0.0], width=-0.5)[0]                 # a negative width: the span is still 0.75 .. 1.25
    ax.plot([0.75, 1.25], [0, 0])
    assert figures._zero_marked(ax, bar, True)


def test_zero_marked_for_horizontal_bars_reads_the_other_axis():
    fig, ax = plt.subplots()
    bar = ax.barh([2.0], [0.0], height=0.5, left=1.0)[0]     # spans y 1.75 .. 2.25 at x = 1
    ax.plot([1, 1.5], [1.75, 2.25])                           # along y, but not at x = 1 everywhere
    ax.plot([1.75, 2.25], [1, 1])                             # a vertical bar's mark, swapped
    ax.text(1, 1.7, "below")
    assert not figures._zero_marked(ax, bar, False)
    ax.plot([1, 1], [1.75, 2.25])
    assert figures._zero_marked(ax, bar, False)
    fig, ax = plt.subplots()
    bar = ax.barh([2.0], [0.0], height=0.5)[0]
    ax.text(9, 2.0, "0")
    assert figures._zero_marked(ax, bar, False)


def test_layout_problems_report_invisible_zero_bars_only():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    axes[0].bar([0, 1, 2, 3], [1.0, 0.0, np.nan, 0.0])
    axes[0].patches[3].set_visible(False)                     # hidden: nothing to mark
    axes[1].barh([5, 7], [2.0, 0.0])
    fig.tight_layout()
    assert figures.layout_problems(fig) == [
        "a bar of height zero is invisible (axes 1, at 0.6): mark it or label it",
        "a bar of height zero is invisible (axes 2, at 6.6): mark it or label it"]


def test_mark_zero_bars_draws_a_thick_butt_line_in_the_bar_colour():
    fig, ax = plt.subplots()
    ax.bar([0, 1, 2, 3], [2.0, 0.0, np.nan, 0.0], width=0.5, bottom=1.0, color=["C0", "C1", "C2", "C3"])
    ax.patches[3].set_visible(False)
    assert figures.mark_zero_bars(ax) == 1
    (mark,) = ax.lines
    assert list(mark.get_xdata()) == [0.75, 1.25] and list(mark.get_ydata()) == [1.0, 1.0]
    assert mark.get_label() == "_hubnorm_zero_mark" and mark.get_linewidth() == 3 and mark.get_zorder() == 3
    assert mark.get_solid_capstyle() == "butt"
    assert matplotlib.colors.same_color(mark.get_color(), "C1")
    assert figures.mark_zero_bars(ax) == 0                   # marked once
    fig, ax = plt.subplots()
    ax.barh([0, 2], [0.0, 0.0], height=0.5, left=[1.0, 3.0])
    assert figures.mark_zero_bars(ax) == 2
    assert [(list(m.get_xdata()), list(m.get_ydata())) for m in ax.lines] == [([1.0, 1.0], [-0.25, 0.25]),
                                                                               ([3.0, 3.0], [1.75, 2.25])]
    fig, ax = plt.subplots()
    ax.hist([0.5, 2.5], bins=[0, 1, 2, 3])                   # an empty bin: a gap
    assert figures.mark_zero_bars(ax) == 0


# ---------------------------------------------------------------------------------------- text at laptop width
def test_shown_px_per_point_is_the_inline_size_capped_at_the_reading_width():
    assert figures.READING_WIDTH_PX == 745 and figures.MIN_TEXT_PX == 9.0
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    assert figures.shown_px_per_point(fig) == 100 / 72
    assert figures.shown_px_per_point(fig, _renderer(fig)) == 100 / 72
    fig, ax = plt.subplots(figsize=(16, 3), dpi=100)
    width = fig.get_tightbbox(_renderer(fig)).width
    assert width > 7.45
    assert figures.shown_px_per_point(fig) == pytest.approx(745 / width / 72, rel=1e-12)


def test_too_small_names_the_count_and_the_smallest_text():
    fig, ax = plt.subplots(figsize=(4, 3), dpi=72)           # one pixel per point
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.1, 0.1, "seven", fontsize=7)
    ax.text(0.1, 0.5, "eight", fontsize=8.5)
    ax.text(0.1, 0.8, "nine", fontsize=9)                      # exactly the minimum: legible
    r = _renderer(fig)
    texts = figures._texts(fig)
    width = fig.get_tightbbox(r).width
    assert figures._too_small(fig, r, texts) == [
        f"text too small at laptop width: 2 texts under 9 px, the smallest axes 1 text 'seven' at 7.0 px (the figure "
        f"is {width:.1f} in wide, shown at most 745 px wide): fewer panels per row, a narrower figure or a larger "
        "font"]
    assert figures._too_small(fig, r, texts[1:]) == [
        f"text too small at laptop width: 1 text under 9 px, the smallest axes 1 text 'eight' at 8.5 px (the figure "
        f"is {width:.1f} in wide, shown at most 745 px wide): fewer panels per row, a narrower figure or a larger "
        "font"]
    assert figures._too_small(fig, r, texts[2:]) == []


def test_enlarge_small_text_sets_the_half_point_size_that_reaches_the_minimum():
    fig, ax = plt.subplots(figsize=(4, 3), dpi=50)          # 50/72 px per point: 9 px is 12.96 pt
    ax.set_xticks([])
    ax.set_yticks([])
    small = ax.text(0.1, 0.1, "small", fontsize=7)
    also = ax.text(0.1, 0.5, "also small", fontsize=12.9)
    legible = ax.text(0.1, 0.8, "legible", fontsize=14)
    assert figures._enlarge_small_text(fig) == ["enlarged 2 small texts to at least 9 px at laptop width"]
    assert small.get_fontsize() == 13.0 and also.get_fontsize() == 13.0 and legible.get_fontsize() == 14
    assert figures._enlarge_small_text(fig) == []
    fig, ax = plt.subplots(figsize=(4, 3), dpi=72)          # one pixel per point
    ax.set_xticks([])
    ax.set_yticks([])
    exact = ax.text(0.1, 0.1, "exactly nine", fontsize=9)
    assert figures._enlarge_small_text(fig) == [] and exact.get_fontsize() == 9
    ax.text(0.1, 0.5, "under", fontsize=8.9)
    assert figures._enlarge_small_text(fig) == ["enlarged 1 small texts to at least 9 px at laptop width"]
    assert figures._enlarge_small_text(fig, rounds=0) == []


def test_enlarge_small_text_wraps_a_long_title_first():
    fig, ax = plt.subplots(figsize=(4, 3), dpi=72)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title("a title much wider than its axes, " * 3, fontsize=12)
    note = ax.text(0.1, 0.1, "small", fontsize=5)
    done = figures._enlarge_small_text(fig)
    assert done[0] == "wrapped the title of axes 1 to its width" and "\n" in ax.get_title()
    assert done[1:] == ["enlarged 1 small texts to at least 9 px at laptop width"] and note.get_fontsize() == 9


# -------------------------------------------------------------------------------------------------- the remedies
def test_legend_entries_keep_handles_labels_and_style():
    fig, ax = plt.subplots()
    a, = ax.plot([0, 1], [0, 1], label="a")
    b, = ax.plot([0, 1], [1, 0], label="b")
    leg = ax.legend(title="tt", fontsize=7, title_fontsize=11, ncols=2)
    handles, labels, style = figures._legend_entries(leg)
    assert labels == ["a", "b"] and len(handles) == 2 and isinstance(handles, list)
    assert style == {"title": "tt", "title_fontsize": 11.0, "fontsize": 7.0, "ncols": 2}
    _, _, style = figures._legend_entries(ax.legend())
    assert style["title"] is None and style["ncols"] == 1


def test_outside_anchor_is_just_above_the_title_or_below_the_x_label():
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="a")
    ax.set_title("T")
    ax.set_xlabel("X")
    leg = ax.legend(loc="upper left", bbox_to_anchor=(0.0, 3.0))   # far above: left out of the box
    r = _renderer(fig)
    leg.set_visible(False)
    box = ax.get_tightbbox(r).transformed(ax.transAxes.inverted())
    leg.set_visible(True)
    assert box.y1 > 1.0 and box.y0 < 0.0
    above = figures._outside_anchor(ax, r, "above")
    below = figures._outside_anchor(ax, r, "below")
    assert above == (0.0, pytest.approx(box.y1 + 0.02, abs=1e-12))
    assert below == (0.0, pytest.approx(box.y0 - 0.02, abs=1e-12))
    assert leg.get_visible()


def test_wrap_titles_wraps_only_what_is_wider_than_its_room():
    import textwrap

    fig, axes = plt.subplots(1, 2, figsize=(8, 3), dpi=100)
    text = "a title of several words that is wide\nsecond line"
    for ax in axes:
        ax.set_title(text)
    r = _renderer(fig)
    width = axes[0].title.get_window_extent(r).width
    fw = fig.bbox.width
    axes[0].set_position([0.05, 0.1, width / 1.01 / fw, 0.7])    # within 2% of its room: left as it is
    axes[1].set_position([0.55, 0.1, width / 1.03 / fw, 0.7])    # 3% too wide: wrapped
    assert figures._wrap_titles(fig) == ["wrapped the title of axes 2 to its width"]
    assert axes[0].get_title() == text
    room = axes[1].get_window_extent(r).width
    chars = int(len("a title of several words that is wide") * room / width * 0.95)
    assert axes[1].get_title() == textwrap.fill("a title of several words that is wide", chars) + "\nsecond line"
    assert axes[1].get_title().count("\n") == 2
    # a very narrow axes: eight characters a line at least
    fig, ax = plt.subplots(figsize=(8, 3), dpi=100)
    ax.set_title("aaaa bbbb cccc dddd")
    ax.set_position([0.1, 0.1, 0.01, 0.7])
    assert figures._wrap_titles(fig) == ["wrapped the title of axes 1 to its width"]
    assert ax.get_title() == "aaaa\nbbbb\ncccc\ndddd"
    # a hidden title is left alone
    fig, ax = plt.subplots(figsize=(8, 3), dpi=100)
    ax.set_title("aaaa bbbb cccc dddd")
    ax.set_position([0.1, 0.1, 0.01, 0.7])
    ax.title.set_visible(False)
    assert figures._wrap_titles(fig) == [] and ax.get_title() == "aaaa bbbb cccc dddd"


def test_wrap_titles_wraps_a_suptitle_to_the_figure():
    fig = plt.figure(figsize=(3, 2), dpi=100)
    sup = fig.suptitle("aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk")
    r = _renderer(fig)
    width = sup.get_window_extent(r).width
    assert width > fig.bbox.width * 1.02
    assert figures._wrap_titles(fig) == ["wrapped the suptitle to the figure's width"]
    chars = int(len(sup.get_text().replace("\n", " ")) * fig.bbox.width / width * 0.95)
    import textwrap
    assert sup.get_text() == textwrap.fill("aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk", chars)
    assert figures._wrap_titles(fig) == []                # now it fits
    fig = plt.figure(figsize=(3, 2), dpi=100)
    fig.suptitle("aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk").set_visible(False)
    assert figures._wrap_titles(fig) == []


def test_a_figure_legend_on_a_text_goes_below_in_one_row_without_a_frame():
    fig, ax = plt.subplots(figsize=(5, 3))
    a, = ax.plot([0, 1], [0, 1], label="a")
    b, = ax.plot([0, 1], [1, 0], label="b")
    c, = ax.plot([0, 1], [0.5, 0.5], label="c")
    ax.set_title("a title under the legend")
    fig.legend([a, b, c], ["a", "b", "c"], loc="upper center", bbox_to_anchor=(0.5, 0.93), fontsize=7,
               frameon=True)
    assert figures._legend_on_texts(fig, fig.legends[0], frame=False)
    assert figures._move_figure_legends(fig) == ["moved the figure legend below the figure"]
    (leg,) = fig.legends
    assert leg._loc == 9 and leg._ncols == 3 and not leg.get_frame_on()          # 9: upper center
    assert [t.get_text() for t in leg.get_texts()] == ["a", "b", "c"] and leg.get_texts()[0].get_fontsize() == 7
    anchor = leg.get_bbox_to_anchor().transformed(fig.transFigure.inverted())
    assert (anchor.x0, anchor.y0) == pytest.approx((0.5, 0.0))
    assert list(leg.legend_handles) and figures._move_figure_legends(fig) == []   # below: on no text


def test_legend_on_texts_by_frame_or_by_its_own_texts():
    fig = plt.figure(figsize=(5, 3), dpi=100)
    ax = fig.add_axes([0.1, 0.1, 0.8, 0.5])
    ax.set_xticks([])
    ax.set_yticks([])
    a, = ax.plot([0, 1], [0, 1])
    leg = fig.legend([a], ["entry"], loc="upper left", bbox_to_anchor=(0.1, 0.95), handlelength=10, borderpad=2)
    assert not figures._legend_on_texts(fig, leg, frame=True)     # its own texts do not count
    r = _renderer(fig)
    frame = leg.get_window_extent(r).transformed(fig.transFigure.inverted())
    own = leg.get_texts()[0].get_window_extent(r).transformed(fig.transFigure.inverted())
    fig.text(frame.x0 + 0.02, (frame.y0 + frame.y1) / 2, "x", va="center")   # in the frame, by the handle
    assert own.x0 > frame.x0 + 0.1
    assert figures._legend_on_texts(fig, leg, frame=True)
    assert not figures._legend_on_texts(fig, leg, frame=False)
    fig.text(own.x0, own.y0, "on the entry")
    assert figures._legend_on_texts(fig, leg, frame=False)


def _title_offset_pt(ax):
    return ax.titleOffsetTrans.get_matrix()[1, 2] * 72 / ax.figure.dpi


def test_raise_title_moves_it_just_above_the_tick_labels_it_lies_on():
    fig, ax = plt.subplots(figsize=(2, 3), dpi=109)
    ax.plot([1, 10], [1, 10])
    ax.set_yscale("log")
    ax.set_ylim(1, 10)
    ax.set_title("a title over the top tick label", fontsize=8, pad=-2, color="red")
    fig.subplots_adjust(left=0.35)
    fig.set_layout_engine("none")
    r = _renderer(fig)
    box = ax.title.get_window_extent(r)
    tops = [lab.get_window_extent(r).y1 for lab in ax.get_yticklabels() + ax.get_xticklabels()
            if lab.get_visible() and lab.get_text() and figures._overlap(box, lab.get_window_extent(r))]
    assert tops
    need = (max(tops) - box.y0 + 2.0) * 72.0 / 109      # points: the overlap and one pixel of slack each side
    assert 0.9 < need % 1 < 0.99                        # (so that a pixel more, or 73 points an inch, round up)
    want = np.ceil(need) + matplotlib.rcParams["axes.titlepad"]
    assert figures._raise_title(fig, ax)
    assert _title_offset_pt(ax) == pytest.approx(want)
    assert ax.get_title() == "a title over the top tick label" and ax.title.get_fontsize() == 8
    assert matplotlib.colors.same_color(ax.title.get_color(), "red")
    assert not figures._raise_title(fig, ax)                     # above them now
    ax.title.set_visible(False)
    assert not figures._raise_title(fig, ax)


def test_raise_title_reads_the_top_tick_labels_too():
    fig, ax = plt.subplots(figsize=(3, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.xaxis.tick_top()                                   # its tick labels where the title is
    ax.set_title("title", pad=10, y=1.0)   # y: no automatic place above the ticks
    fig.set_layout_engine("none")
    r = _renderer(fig)
    assert any(figures._overlap(ax.title.get_window_extent(r), lab.get_window_extent(r))
               for lab in [t.label2 for t in ax.xaxis.get_major_ticks()] if lab.get_text())
    assert figures._raise_title(fig, ax)
    assert _title_offset_pt(ax) > matplotlib.rcParams["axes.titlepad"]


def test_move_legends_tries_the_best_spot_inside_first_and_keeps_the_style():
    fig, ax = _legend_fig()
    ax.plot([0, 1], [0.5, 0.5], label="mid")
    ax.plot([0, 1], [0.45, 0.45], label="mid2")
    ax.legend(loc="center", title="tt", fontsize=8, ncols=2)
    assert figures._move_legends(fig) == ["moved the legend of axes 1 at the best spot inside its axes"]
    leg = ax.get_legend()
    assert leg._loc == 0 and leg._ncols == 2 and leg.get_title().get_text() == "tt"     # 0: best
    assert leg.get_texts()[0].get_fontsize() == 8
    assert figures._legend_covers(ax, _renderer(fig)) == [] and figures._move_legends(fig) == []


def test_move_legends_goes_beside_then_above_then_below():
    fig, ax = _legend_fig()
    ax.fill_between([0, 1], [0, 0], [1, 1])
    ax.scatter(np.repeat(np.linspace(0.02, 0.98, 25), 25), np.tile(np.linspace(0.02, 0.98, 25), 25), label="p")
    ax.legend(loc="center")
    assert figures._move_legends(fig) == ["moved the legend of axes 1 beside its axes"]
    anchor = ax.get_legend().get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    assert (anchor.x0, anchor.y0) == pytest.approx((1.01, 1.0)) and ax.get_legend()._loc == 2   # upper left
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    ax = axes[0]
    ax.scatter(np.repeat(np.linspace(0, 1, 15), 15), np.tile(np.linspace(0, 1, 15), 15), label="p")
    ax.scatter([0.5], [0.5], label="q")
    ax.legend(loc="center")
    done = figures._move_legends(fig)
    assert done == ["moved the legend of axes 1 above its axes"], done
    leg = ax.get_legend()
    assert leg._loc == 3 and leg._ncols == 2                  # lower left, one row
    r = _renderer(fig)
    assert leg.get_window_extent(r).y0 >= ax.title.get_window_extent(r).y0 - 1


def test_move_legends_below_when_beside_and_above_lie_on_other_axes():
    fig, axes = plt.subplots(2, 2, figsize=(6, 6))
    for ax in axes.flat:
        ax.scatter(np.repeat(np.linspace(0, 1, 15), 15), np.tile(np.linspace(0, 1, 15), 15), label="p")
    ax = axes[1, 0]
    ax.scatter([0.5], [0.5], label="q")
    ax.legend(loc="center")
    fig.subplots_adjust(wspace=0.05, hspace=0.05)
    done = figures._move_legends(fig)
    assert done == ["moved the legend of axes 3 below its axes"], done
    assert ax.get_legend()._loc == 2 and ax.get_legend()._ncols == 2      # upper left, one row
    r = _renderer(fig)
    assert ax.get_legend().get_window_extent(r).y1 <= ax.get_window_extent(r).y0


# ------------------------------------------------------------------------------------------------------ a layout
def _overlaps_in_turn(monkeypatch, *counts):
    seq = iter(counts)
    monkeypatch.setattr(figures, "_text_overlaps", lambda f: [("a", "b")] * next(seq))


def test_relayout_keeps_constrained_layout_when_it_leaves_fewer_overlaps(monkeypatch):
    fig, ax = plt.subplots()
    _overlaps_in_turn(monkeypatch, 2, 1)
    assert figures._relayout(fig) == ["laid the figure out again (constrained layout)"]
    assert type(fig.get_layout_engine()).__name__ == "ConstrainedLayoutEngine"
    _overlaps_in_turn(monkeypatch, 0)
    fig, ax = plt.subplots()
    assert figures._relayout(fig) == [] and fig.get_layout_engine() is None


def test_relayout_restores_the_layout_when_constrained_does_not_help(monkeypatch):
    fig, ax = plt.subplots()
    ax.set_position([0.3, 0.3, 0.2, 0.2])
    _overlaps_in_turn(monkeypatch, 1, 1)
    assert figures._relayout(fig) == []
    assert np.allclose(ax.get_position(original=True).bounds, (0.3, 0.3, 0.2, 0.2))
    assert type(fig.get_layout_engine()).__name__ == "PlaceHolderLayoutEngine"   # "none" after constrained
    # the figure's own engine: run once more, kept when it helps
    fig, ax = plt.subplots(layout="tight")
    engine = fig.get_layout_engine()
    ax.set_position([0.3, 0.3, 0.2, 0.2])
    _overlaps_in_turn(monkeypatch, 2, 2, 1)
    assert figures._relayout(fig) == ["laid the figure out again (its own layout engine)"]
    assert fig.get_layout_engine() is engine
    assert ax.get_position(original=True).x0 < 0.3                           # the tight layout ran
    # and its positions back when it does not
    ax.set_position([0.3, 0.3, 0.2, 0.2])
    _overlaps_in_turn(monkeypatch, 2, 2, 2)
    assert figures._relayout(fig) == [] and fig.get_layout_engine() is engine
    assert np.allclose(ax.get_position(original=True).bounds, (0.3, 0.3, 0.2, 0.2))


def test_relayout_keeps_an_engine_that_refuses_constrained(monkeypatch):
    fig, axes = plt.subplots(1, 2)
    im = axes[0].imshow(np.arange(4.0).reshape(2, 2))
    fig.colorbar(im, ax=axes[0])
    fig.tight_layout()
    engine = fig.get_layout_engine()
    _overlaps_in_turn(monkeypatch, 2, 1)
    assert figures._relayout(fig) == ["laid the figure out again (its own layout engine)"]
    assert fig.get_layout_engine() is engine


def test_text_overlaps_pairs_every_two_overlapping_texts():
    fig = plt.figure(figsize=(4, 3))
    fig.text(0.1, 0.5, "first text")
    fig.text(0.12, 0.5, "second text")
    fig.text(0.1, 0.1, "far away")
    assert figures._text_overlaps(fig) == [("figure text", "figure text")]
    fig.text(0.14, 0.5, "third text")
    assert len(figures._text_overlaps(fig)) == 3


def test_layout_problems_names_both_overlapping_texts():
    fig = plt.figure(figsize=(4, 3))
    fig.suptitle("the suptitle", y=0.5)
    fig.text(0.45, 0.49, "a note")
    fig.text(0.1, 0.1, "far away")
    assert figures.layout_problems(fig) == ["text over text: suptitle and figure text"]


# --------------------------------------------------------------------------------------------------- tick labels
def _names(width):
    fig, ax = plt.subplots(figsize=(width, 3), dpi=100)
    ax.bar(["aaaaaa", "bbbbbb", "cccccc", "dddddd"], [1, 2, 3, 4])
    fig.subplots_adjust(bottom=0.4, left=0.1, right=0.95)
    fig.set_layout_engine("none")
    return fig, ax


@pytest.mark.parametrize("width, angle, ha, mode", [(2.6, 30, "right", "anchor"), (2.5, 60, "right", "anchor"),
                                                    (1.5, 90, "center", "default")])
def test_crowded_names_are_slanted_as_little_as_reads(monkeypatch, width, angle, ha, mode):
    monkeypatch.setattr(figures, "_text_overlaps", lambda f: [])
    fig, ax = _names(width)
    assert figures._crowded_axes(fig) == [(ax, ax.xaxis)]
    assert figures.tidy(fig) == [f"slanted the x ticks of axes 1 by {angle} degrees"]
    for label in ax.get_xticklabels():
        assert (label.get_rotation(), label.get_horizontalalignment(), label.get_rotation_mode()) == (angle, ha, mode)
    assert figures._crowded_axes(fig) == []


@pytest.mark.parametrize("height, nbins", [(0.5, 3), (0.65, 4), (0.9, 6)])
def test_crowded_numbers_are_thinned_as_little_as_reads(monkeypatch, height, nbins):
    monkeypatch.setattr(figures, "_text_overlaps", lambda f: [])
    fig, ax = plt.subplots(figsize=(3, height), dpi=100)
    ax.plot([0, 1], [0, 1000.5])
    ax.set_yticks(np.linspace(0, 1000.5, 12))
    fig.subplots_adjust(bottom=0.05, top=0.95, left=0.3)
    fig.set_layout_engine("none")
    assert figures._crowded_axes(fig) == [(ax, ax.yaxis)]
    assert figures.tidy(fig) == [f"thinned the y ticks of axes 1 to {nbins}"]
    assert isinstance(ax.yaxis.get_major_locator(), matplotlib.ticker.MaxNLocator)
    assert ax.yaxis.get_major_locator()._nbins == nbins


def test_crowded_names_on_the_y_axis_and_hidden_labels_are_left_alone(monkeypatch):
    monkeypatch.setattr(figures, "_text_overlaps", lambda f: [])
    fig, ax = plt.subplots(figsize=(3, 1.2), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.set_yticks(np.linspace(0, 1, 15), [f"n{i}" for i in range(15)])
    fig.set_layout_engine("none")
    assert figures._crowded_axes(fig) == [(ax, ax.yaxis)]
    assert figures.tidy(fig) == []                          # names on the y axis: no remedy without judgement
    for label in ax.get_yticklabels():
        label.set_visible(False)
    assert figures._crowded_axes(fig) == []
    fig, ax = plt.subplots(figsize=(3, 1.2), dpi=100)
    ax.set_yticks(np.linspace(0, 1, 15), [" "] * 15)         # blank labels: nothing runs together
    assert figures._crowded_axes(fig) == []
    fig, ax = plt.subplots(figsize=(3, 1.2), dpi=100)
    ax.set_yscale("log")                                    # numbers on a log axis are not thinned
    ax.set_yticks(np.geomspace(1, 100, 15))
    ax.set_yticklabels([f"{v:.3g}" for v in np.geomspace(1, 100, 15)])
    ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_ylim(1, 100)
    fig.set_layout_engine("none")
    assert figures._crowded_axes(fig) == [(ax, ax.yaxis)]
    assert figures.tidy(fig) == []


# ---------------------------------------------------------------------------------------------- the shift figure
def _study(methods, labels, unsorted=True):
    rows = []
    for i, m in enumerate(methods):
        for j, lab in enumerate(labels):
            for s in ((1.0, 0.0, 0.5) if unsorted else (0.0, 0.5, 1.0)):
                g = 10 * i + j + s
                rows.append({"method": m, "label": lab, "share": s, "gain": g, "gain lo": g - 1, "gain hi": g + 2})
    return pd.DataFrame(rows)


def test_plot_shift_lays_out_one_panel_per_method_four_to_a_row():
    fig = figures.plot_shift(_study(["m1", "m2", "m3", "m4", "m5"], ["a", "b"]), title="the title")
    assert tuple(fig.get_size_inches()) == pytest.approx((2.9 * 4, 2.3 * 2 + 0.9))
    assert [ax.get_title() for ax in fig.axes] == ["m1", "m2", "m3", "m4", "m5"]   # three empty panels removed
    pos = [ax.get_subplotspec().get_geometry() for ax in fig.axes]
    assert [p[:2] for p in pos] == [(2, 4)] * 5 and [p[2] for p in pos] == [0, 1, 2, 3, 4]
    assert [ax.get_xlabel() for ax in fig.axes] == ["", "share moved to the other distribution"] * 0 + \
        ["", "", "", "", "share moved to the other distribution"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["R@1 gain (points)", "", "", "", "R@1 gain (points)"]
    assert fig.axes[4].xaxis.label.get_fontsize() == 8 and fig.axes[0].yaxis.label.get_fontsize() == 8
    assert fig._suptitle.get_text() == "the title" and fig._suptitle.get_fontsize() == 10
    fig = figures.plot_shift(_study(["m1", "m2"], ["a"]), xlabel="share", legend="data")
    assert tuple(fig.get_size_inches()) == pytest.approx((2.9 * 2, 2.3 + 0.9))
    assert [ax.get_xlabel() for ax in fig.axes] == ["share", "share"]
    assert [ax.get_ylabel() for ax in fig.axes] == ["R@1 gain (points)", ""]
    assert fig.legends[0].get_title().get_text() == "data" and fig._suptitle.get_text() == ""


def test_plot_shift_draws_each_label_as_a_sorted_line_over_its_band_and_the_zero_line():
    import matplotlib.pyplot as plt2
    from cycler import cycler

    with matplotlib.rc_context({"axes.prop_cycle": cycler(color=["#111111", "#222222"])}):
        fig = figures.plot_shift(_study(["m1", "m2"], ["a", "b", "c"]))
    assert plt2 is plt
    for i, ax in enumerate(fig.axes):
        assert ax.title.get_fontsize() == 9
        assert ax.xaxis.get_major_ticks()[0].label1.get_fontsize() == 7
        assert ax.yaxis.get_major_ticks()[0].label1.get_fontsize() == 7
        lines = [ln for ln in ax.get_lines() if ln.get_label() in ("a", "b", "c")]
        assert [ln.get_label() for ln in lines] == ["a", "b", "c"]
        for j, (ln, colour) in enumerate(zip(lines, ["#111111", "#222222", "#111111"])):   # the cycle wraps
            assert list(ln.get_xdata()) == [0.0, 0.5, 1.0]
            assert list(ln.get_ydata()) == [10 * i + j + 0.0, 10 * i + j + 0.5, 10 * i + j + 1.0]
            assert ln.get_marker() == "o" and ln.get_markersize() == 3
            assert matplotlib.colors.same_color(ln.get_color(), colour)
        bands = ax.collections
        assert len(bands) == 3
        for j, (band, colour) in enumerate(zip(bands, ["#111111", "#222222", "#111111"])):
            ys = band.get_paths()[0].vertices[:, 1]
            assert ys.min() == 10 * i + j - 1 and ys.max() == 10 * i + j + 3
            xs = band.get_paths()[0].vertices[:, 0]
            assert xs.min() == 0.0 and xs.max() == 1.0
            assert band.get_alpha() == 0.2 and list(band.get_linewidths()) == [0]
            assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], colour)
        zero = [ln for ln in ax.get_lines() if ln.get_label() not in ("a", "b", "c")]
        assert len(zero) == 1 and list(zero[0].get_ydata()) == [0, 0] and zero[0].get_linewidth() == 0.8
        assert matplotlib.colors.same_color(zero[0].get_color(), "k")
        assert tuple(zero[0].get_xdata()) == (0, 1)          # along the whole axes (axes coordinates)


def test_plot_shift_draws_stars_only_on_their_method():
    stars = {"m2": pd.DataFrame({"share": [0.0, 1.0], "gain": [5.78, 4.88]})}
    fig = figures.plot_shift(_study(["m1", "m2"], ["a"]), stars=stars)
    assert len(fig.axes[0].collections) == 1
    pts = [c for c in fig.axes[1].collections if type(c).__name__ == "PathCollection"]
    assert [tuple(map(float, c.get_offsets()[0])) for c in pts] == [(0.0, 5.78), (1.0, 4.88)]
    for c in pts:
        assert list(c.get_sizes()) == [110] and c.get_zorder() == 5
        assert matplotlib.colors.same_color(c.get_facecolor()[0], "k")
        star = matplotlib.markers.MarkerStyle("*").get_path().transformed(matplotlib.markers.MarkerStyle("*")
                                                                          .get_transform())
        assert np.allclose(c.get_paths()[0].vertices, star.vertices)


@pytest.mark.parametrize("n, ncol, bottom", [(4, 4, 0.1), (5, 4, 0.16), (1, 1, 0.1)])
def test_plot_shift_puts_the_legend_below_and_leaves_it_room(n, ncol, bottom):
    fig = figures.plot_shift(_study(["m1", "m2", "m3", "m4", "m5"], [f"l{k}" for k in range(n)]))
    (leg,) = fig.legends
    assert [t.get_text() for t in leg.get_texts()] == [f"l{k}" for k in range(n)]
    assert leg._loc == 8 and leg._ncols == ncol and not leg.get_frame_on()       # 8: lower center
    assert leg.get_title().get_text() == "shift" and leg.get_title().get_fontsize() == 8
    assert leg.get_texts()[0].get_fontsize() == 8
    r = _renderer(fig)
    height = fig.bbox.height
    low = min(ax.get_tightbbox(r).y0 for ax in fig.axes) / height
    high = max(ax.get_tightbbox(r).y1 for ax in fig.axes) / height
    left = min(ax.get_tightbbox(r).x0 for ax in fig.axes) / fig.bbox.width
    right = max(ax.get_tightbbox(r).x1 for ax in fig.axes) / fig.bbox.width
    assert bottom < low < bottom + 0.05 and 0.95 - 0.1 < high < 0.95, (low, high)
    assert 0 < left < 0.05 and 0.98 < right < 1.0, (left, right)


# ------------------------------------------------------------------------------------------------- boundary cases
def test_two_bins_edge_to_edge_are_a_histogram():
    fig, ax = plt.subplots()
    assert figures._is_histogram(_bars(ax, [0, 1], [1, 0]).patches, True)
    assert not figures._is_histogram(_bars(ax, [0, 2], [1, 0]).patches, True)
    fig, ax = plt.subplots()
    ax.hist([0.5], bins=[0, 1, 2])                          # two bins, the second empty: a gap
    assert figures.layout_problems(fig) == [] and figures.mark_zero_bars(ax) == 0


def test_plotted_values_of_masked_whole_numbers_and_an_empty_figure():
    fig, (a, b) = plt.subplots(1, 2)
    a.pcolormesh(np.ma.masked_equal(np.array([[1, 7], [3, 4]]), 7))   # whole numbers, one cell masked (fill: 7)
    b.imshow(np.ma.masked_equal(np.array([[5, 6]]), 6))
    got = figures.plotted_values(fig)
    assert {1.0, 3.0, 4.0} <= set(got.tolist()) and got[-1] == 5.0
    assert 7.0 not in got and 6.0 not in got                       # masked cells are left out, not filled
    assert figures.plotted_values(plt.figure()).size == 0
    assert figures.plotted_values(plt.figure()).dtype == float


def test_segments_are_sampled_eight_times_by_default():
    box = _box(40, 40, 48, 60)                         # inside: 41 < x < 47
    line = np.array([[0.0, 50.0], [70.0, 50.0]])       # eight samples: 0, 10, ..., 40, 50, ...: none inside
    assert not figures._segments_hit(box, line)
    assert figures._segments_hit(box, line, samples=9)   # 43.75 is
    assert not figures._segments_hit(_box(40, 40, 60, 60), np.array([[0.0, 50.0], [10.0, 50.0]]))   # not beyond


def test_enlarge_small_text_at_the_bound_and_over_several_rounds():
    fig, ax = plt.subplots(figsize=(4, 3), dpi=72)           # one pixel per point
    ax.set_xticks([])
    ax.set_yticks([])
    assert figures.shown_px_per_point(fig) == 1.0
    ax.text(0.1, 0.1, "a hair under nine", fontsize=9 - 1e-9)   # within the tolerance: legible
    assert figures._enlarge_small_text(fig) == []
    # texts outside a wide figure widen it as they grow: measured again, enlarged again (each time counted)
    fig, ax = plt.subplots(figsize=(11, 2), dpi=100)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_position([0.0, 0.1, 1.0, 0.8])
    left = ax.text(-0.3, 0.5, "left", fontsize=6, ha="right")
    ax.text(1.3, 0.5, "right", fontsize=6)
    assert figures._enlarge_small_text(fig, rounds=1) == ["enlarged 2 small texts to at least 9 px at laptop width"]
    scale = figures.shown_px_per_point(fig)
    assert left.get_fontsize() * scale < 9                   # the wider figure shrank it again
    assert figures._enlarge_small_text(fig) == ["enlarged 2 small texts to at least 9 px at laptop width"]
    assert left.get_fontsize() == np.ceil(18 / figures.shown_px_per_point(fig)) / 2 or \
        left.get_fontsize() * figures.shown_px_per_point(fig) >= 9
    fig, ax = plt.subplots(figsize=(11, 2), dpi=100)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_position([0.0, 0.1, 1.0, 0.8])
    ax.text(-0.3, 0.5, "left", fontsize=6, ha="right")
    ax.text(1.3, 0.5, "right", fontsize=6)
    assert figures._enlarge_small_text(fig) == ["enlarged 4 small texts to at least 9 px at laptop width"]


def test_only_the_figure_legends_on_a_text_are_moved():
    fig, ax = plt.subplots(figsize=(5, 3))
    a, = ax.plot([0, 1], [0, 1], label="a")
    ax.set_title("a title under the second legend")
    fig.subplots_adjust(right=0.6, top=0.8)
    fig.legend([a], ["clear"], loc="center left", bbox_to_anchor=(0.65, 0.5))         # on no text
    t = ax.title.get_window_extent(_renderer(fig)).transformed(fig.transFigure.inverted())
    fig.legend([a], ["on the title"], loc="center", bbox_to_anchor=((t.x0 + t.x1) / 2, (t.y0 + t.y1) / 2))
    assert figures._move_figure_legends(fig) == ["moved the figure legend below the figure"]
    assert [leg.get_texts()[0].get_text() for leg in fig.legends] == ["clear", "on the title"]
    assert fig.legends[1]._loc == 9


def test_relayout_restores_the_positions_as_set_not_as_drawn(monkeypatch):
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.imshow(np.zeros((2, 2)))                       # a square image: the axes is drawn narrower than set
    ax.set_position([0.1, 0.1, 0.8, 0.8])
    fig.canvas.draw()
    assert not np.allclose(ax.get_position(original=False).bounds, ax.get_position(original=True).bounds)
    _overlaps_in_turn(monkeypatch, 1, 1)
    assert figures._relayout(fig) == []
    assert np.allclose(ax.get_position(original=True).bounds, (0.1, 0.1, 0.8, 0.8))


def test_lines_over_category_names_are_read_as_their_positions():
    """A line drawn over category names (its data are the names) beside a zero bar or under a legend: the check
    and the remedy read the line's positions (they raised ValueError: could not convert string to float)."""
    fig, ax = plt.subplots()
    ax.bar(["a", "b", "c"], [0.0, 1.0, 2.0])
    ax.plot(["a", "b", "c"], [0.5, 0.7, 0.9])
    assert figures.layout_problems(fig) == ["a bar of height zero is invisible (axes 1, at -0.4): mark it or label it"]
    assert figures.mark_zero_bars(ax) == 1 and figures.layout_problems(fig) == []
    fig, ax = plt.subplots()
    ax.bar(["a", "b"], [0.0, 1.0], width=1.0, align="edge")   # the zero bar spans 0 .. 1
    ax.plot(["a", "a"], [0.0, 0.0])                 # along its baseline, but only a point wide
    assert not figures._zero_marked(ax, ax.patches[0], True)
    ax.plot(["a", "b"], [0.0, 0.0])                 # from "a" (0) to "b" (1): spans it
    assert figures._zero_marked(ax, ax.patches[0], True)
    fig, ax = _legend_fig()
    ax.set_xlim(-0.5, 1.5)
    ax.plot(["a", "b"], [0.5, 0.5], label="line")
    ax.legend(loc="center")
    assert figures._legend_covers(ax, _renderer(fig)) == ["the legend covers the line 'line'"]
