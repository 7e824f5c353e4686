"""The figure layout check and its remedies (hubnorm_companion.figures), on figures built to have each defect
the notebooks' figures had: tick labels that run together, a suptitle over a y label, a legend over bars, bars of
height zero. Each check must fire on its defect and stay quiet on the clean figure; each remedy must remove it.
Every saved figure of the notebooks goes through the same check (Run.save_figure; the test suite runs the
notebooks with HUBNORM_FIGURE_CHECK=error, tests/conftest.py)."""

from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from hubnorm_companion import figures  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _clean():
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar([0, 1, 2], [3, 5, 4], label="a")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title("clean")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def test_a_clean_figure_has_no_problems_and_tidy_leaves_it_alone():
    fig = _clean()
    assert figures.layout_problems(fig) == []
    assert figures.tidy(fig) == []


def test_tick_labels_that_run_together_are_found_and_thinned():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([-0.0175, 0.0], [0, 1])
    ax.set_xticks(np.linspace(-0.0175, 0, 8))   # eight long labels on a narrow axis (cf. 09_explain_hub)
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    fig.tight_layout()
    problems = figures.layout_problems(fig)
    assert problems and all("x tick" in p for p in problems), problems
    done = figures.tidy(fig)
    assert any("thinned the x ticks" in d for d in done), done
    assert figures.layout_problems(fig) == []


def test_category_names_that_run_together_are_slanted():
    fig, ax = plt.subplots(figsize=(3, 2.5))
    ax.bar(["MP (empirical)", "MP (Gaussian)", "DSL (k = 10)", "LS (k = 10)"], [1, 2, 3, 4])
    fig.tight_layout()   # cf. 01_classic_methods
    assert figures.layout_problems(fig)
    done = figures.tidy(fig)
    assert any(d.startswith("slanted the x ticks of axes 1") for d in done), done
    assert figures.layout_problems(fig) == []


def test_a_title_on_its_own_tick_labels_is_raised(monkeypatch):
    # cf. 00_real_k_occurrence on a real release: a title wider than its axes, low over the top y tick label
    fig, ax = plt.subplots(figsize=(2, 3))
    ax.plot([1, 10], [1, 10])
    ax.set_yscale("log")
    ax.set_ylim(1, 10)
    ax.set_title("real data (flickr8k-100x5-clip-vitb32) · 100 images", fontsize=8, pad=-2)
    fig.subplots_adjust(left=0.35)
    fig.set_layout_engine("none")
    assert any(" title and axes 1" in p and "y tick" in p for p in figures.layout_problems(fig))
    monkeypatch.setattr(figures, "_text_overlaps", lambda f: [])   # the raise alone, without a new layout
    assert figures.tidy(fig) == ["raised the title of axes 1 above its tick labels"]
    assert figures.layout_problems(fig) == []
    assert ax.get_title() == "real data (flickr8k-100x5-clip-vitb32) · 100 images" and ax.title.get_fontsize() == 8


def test_long_titles_are_wrapped_and_a_figure_legend_on_them_goes_below(monkeypatch):
    # cf. 05_dbsn_tau_sweep and 02_k_occurrence_by_data on a real folder: long data labels as titles side by side,
    # and a figure legend placed at the top over them
    fig, axes = plt.subplots(1, 2, figsize=(7, 3))
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="IS")
        ax.set_title("real data (flickr8k-100x5-clip-vitb32, 500 test images x 5 captions)\nbank: test queries")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="upper right")
    fig.set_layout_engine("none")
    problems = figures.layout_problems(fig)
    assert any("axes 1" in p and "title and axes 2" in p for p in problems), problems
    assert any("figure legend" in p for p in problems), problems
    done = figures.tidy(fig)
    assert "moved the figure legend below the figure" in done and "wrapped the title of axes 1 to its width" in done
    assert figures.layout_problems(fig) == []
    assert axes[0].get_title().count("\n") >= 2 and axes[0].get_title().endswith("bank: test queries")
    assert fig.legends[0].get_window_extent(fig.canvas.get_renderer()).y1 <= \
        min(ax.get_window_extent(fig.canvas.get_renderer()).y0 for ax in axes)


def test_a_tick_label_outside_the_view_raises_no_title():
    # cf. 00_real_k_occurrence in a fresh clone: the undrawn tick just above the view raised the title onto a
    # figure legend; only drawn tick labels count
    fig, ax = plt.subplots(figsize=(2, 3))
    ax.plot([1, 9], [1, 9])
    ax.set_yscale("log")
    ax.set_ylim(1, 9.5)   # the major tick at 10 lies just outside the view, its label where the title is
    ax.set_title("real data (flickr8k-100x5-clip-vitb32) · 100 images", fontsize=8, pad=2)
    fig.subplots_adjust(left=0.35)
    fig.set_layout_engine("none")
    fig.canvas.draw()
    hidden = [t for t in ax.yaxis.get_major_ticks() if t.get_loc() > 9.5]
    assert hidden, "the premise: matplotlib keeps a tick beyond the view"
    assert figures.layout_problems(fig) == [] and figures.tidy(fig) == []


def test_ticks_outside_the_view_are_not_texts():
    # matplotlib keeps major ticks just outside the view limits (not drawn): they must not count as overlapping
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    axes[1].set_xscale("log")
    axes[1].plot([1, 100], [1, 100])
    axes[0].plot([0, 1], [0, 1])
    fig.tight_layout()
    assert figures.layout_problems(fig) == []


def test_a_suptitle_over_a_long_y_label_is_found():
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.5))
    axes[1].set_ylabel("a very long y label that is taller than its axes, clean minus attacked")
    fig.suptitle("a title", y=0.99)
    problems = figures.layout_problems(fig)
    assert any("suptitle" in p and "y label" in p for p in problems), problems


def test_a_legend_over_bars_is_found_and_moved_beside_the_axes():
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.bar([0, 1, 2], [5, 5, 5], label="bars")
    ax.legend(loc="center")   # squarely over the middle bar (cf. 08_r1_by_method_video)
    problems = figures.layout_problems(fig)
    assert problems == ["the legend covers a bar (axes 1)"], problems
    assert figures.tidy(fig) == ["moved the legend of axes 1 beside its axes"]
    assert figures.layout_problems(fig) == []
    leg = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert leg.x0 >= ax.get_window_extent(fig.canvas.get_renderer()).x1 - 1


def test_a_legend_is_not_moved_onto_the_next_axes():
    # cf. 01_classic_methods: three panels side by side; "beside" would put the middle legend on the third panel
    fig, axes = plt.subplots(1, 3, figsize=(9, 3))
    for ax in axes:
        ax.bar([0, 1, 2, 3], [5, 5, 5, 5], label="a")
        ax.bar([0.4, 1.4, 2.4, 3.4], [5, 5, 5, 5], label="b")
    axes[1].legend(loc="center")
    fig.tight_layout()
    assert figures.layout_problems(fig) == ["the legend covers a bar (axes 2)"]
    assert figures.tidy(fig) == ["moved the legend of axes 2 above its axes"]
    assert figures.layout_problems(fig) == []
    assert axes[1].get_legend()._ncols == 2
    # a legend lying on another axes is a problem of its own
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    axes[0].plot([0, 1], [0, 1], label="line")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.05, 0.6))
    assert figures.layout_problems(fig) == ["the legend lies on axes 2, another axes (axes 1)"]


def test_a_legend_over_a_line_or_points_is_found():
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([0, 1], [0.5, 0.5], label="line")
    ax.legend(loc="center")
    assert figures.layout_problems(fig) == ["the legend covers the line 'line' (axes 1)"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.scatter([0, 0.5, 1], [0, 0.5, 1], label="points")
    ax.legend(loc="center")
    assert figures.layout_problems(fig) == ["the legend covers plotted points (axes 1)"]
    # a legend in an empty corner is fine
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot([0, 1], [0, 0.2], label="low line")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper right")
    assert figures.layout_problems(fig) == []


def test_bars_of_height_zero_are_found_and_marked():
    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    axes[0].bar([0, 1, 2], [4.0, 0.0, 2.0], color="C1")       # cf. 09_planted_hubs: IS / SN capture nothing
    axes[1].barh([0, 1], [0.0, 3.0])
    fig.tight_layout()
    problems = figures.layout_problems(fig)
    assert len(problems) == 2 and all("height zero" in p for p in problems), problems
    assert "axes 1, at 0.6" in problems[0] and "axes 2, at -0.4" in problems[1], problems
    assert figures.tidy(fig) == ["marked the zero bars of axes 1", "marked the zero bars of axes 2"]
    assert figures.layout_problems(fig) == []
    mark = [line for line in axes[0].lines if line.get_label() == "_hubnorm_zero_mark"]
    assert len(mark) == 1 and list(mark[0].get_xdata()) == [0.6, 1.4] and list(mark[0].get_ydata()) == [0, 0]
    assert matplotlib.colors.same_color(mark[0].get_color(), axes[0].patches[1].get_facecolor())
    # a text label at the bar's place counts as its mark; a nan bar (not computed) is not a zero bar
    fig, ax = plt.subplots()
    ax.bar([0, 1, 2], [1.0, 0.0, np.nan])
    ax.text(1, 0, "0", ha="center", va="bottom")
    assert figures.layout_problems(fig) == []
    # a histogram's empty bins are gaps, not values: left alone
    fig, ax = plt.subplots()
    ax.hist([0.1, 0.2, 2.9], bins=[0, 1, 2, 3])
    assert figures.layout_problems(fig) == [] and figures.tidy(fig) == []


def test_save_figure_tidies_checks_and_raises_in_error_mode(tmp_path, monkeypatch, capsys):
    from hubnorm_companion.notebook import Run

    monkeypatch.setenv("HUBNORM_RESULTS", str(tmp_path))
    run = Run(prefix="99")
    fig, ax = plt.subplots()
    ax.bar([0, 1], [0.0, 2.0], label="b")
    ax.legend(loc="center")
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "error")
    run.save_figure(fig, "tidied", data="d", bank="none")   # both defects have a remedy: saved without an error
    assert (tmp_path / "figures" / "99_tidied.png").is_file()
    fig, axes = plt.subplots(1, 2, figsize=(8, 2.5))
    axes[1].set_ylabel("a very long y label that is taller than its axes, clean minus attacked")
    fig.suptitle("a title", y=0.99)
    fig.set_layout_engine("none")
    with pytest.raises(ValueError, match="suptitle and axes 2 y label.*HUBNORM_FIGURE_CHECK=error"):
        figures_check_without_relayout(run, fig, monkeypatch)
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "note")
    figures_check_without_relayout(run, fig, monkeypatch)
    assert "NOTE: figure 99_collide: 2 layout problem(s) remain: text over text: suptitle and axes 2 y label" \
        in capsys.readouterr().out
    monkeypatch.setenv("HUBNORM_FIGURE_CHECK", "loud")
    with pytest.raises(ValueError, match="HUBNORM_FIGURE_CHECK must be one of"):
        run.save_figure(fig, "collide", data="d", bank="none")


def figures_check_without_relayout(run, fig, monkeypatch):
    """save_figure with the constrained-layout remedy disabled (it would fix the collision)."""
    monkeypatch.setattr(figures, "_text_overlaps", lambda f: [])
    run.save_figure(fig, "collide", data="d", bank="none")


def test_a_line_with_gaps_is_sampled_only_where_drawn():
    """A NaN gap or an infinite end is not a drawn segment: no warning, and no hit through the gap."""
    from matplotlib.transforms import Bbox

    box = Bbox([[40, 40], [60, 60]])
    through = np.array([[0.0, 50.0], [100.0, 50.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert figures._segments_hit(box, through)
        assert not figures._segments_hit(box, np.array([[0.0, 50.0], [np.nan, np.nan], [100.0, 50.0]]))
        assert not figures._segments_hit(box, np.array([[0.0, 50.0], [np.inf, 50.0]]))
        assert figures._segments_hit(box, np.array([[np.nan, 0.0], [50.0, 50.0]]))   # a drawn point inside


def test_text_too_small_at_laptop_width_is_reported():
    """A row of four panels 18 inches wide (notebook 04's Fig. 7 analog) is shown 745 px wide on a laptop: its
    11-pt tick labels become 6 px. Four panels in two rows at 9 inches read; so does an 8-pt note in a narrow
    figure, not in a wide one (13 inches: 11.4 in tight, 65 px per inch)."""
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    for ax in axes:
        ax.plot([0, 1], [0, 1])
        ax.tick_params(labelsize=11)
    problems = figures.layout_problems(fig)
    assert any(p.startswith("text too small at laptop width") for p in problems), problems
    px = 11 * figures.shown_px_per_point(fig)
    assert px < figures.MIN_TEXT_PX and figures.shown_px_per_point(fig) < fig.dpi / 72
    fig, axes = plt.subplots(2, 2, figsize=(9, 6), layout="constrained")
    for ax in axes.flat:
        ax.plot([0, 1], [0, 1])
        ax.tick_params(labelsize=11)
    assert not [p for p in figures.layout_problems(fig) if "too small" in p]
    for width, small in ((5.5, False), (13, True)):
        fig, ax = plt.subplots(figsize=(width, 3.5))
        ax.plot([0, 1], [0, 1])
        ax.text(0.5, 0.5, "an 8-pt note", fontsize=8)
        got = [p for p in figures.layout_problems(fig) if "too small" in p]
        assert bool(got) == small, (width, got)
        if small:
            assert "the smallest axes 1 text 'an 8-pt note'" in got[0] and "1 text under 9 px" in got[0]


def test_tidy_enlarges_text_too_small_at_laptop_width():
    """The remedy: every text under MIN_TEXT_PX gets the size that reaches it (the rest keep theirs); the check is
    then quiet. A text that is already legible keeps its size."""
    fig, ax = plt.subplots(figsize=(13, 3.5))
    ax.plot([0, 1], [0, 1], label="line")
    note = ax.text(0.5, 0.5, "an 8-pt note", fontsize=8)
    title = ax.set_title("a title", fontsize=16)
    ax.legend(fontsize=7)
    assert any("too small" in p for p in figures.layout_problems(fig))
    done = figures.tidy(fig)
    assert any(d.startswith("enlarged ") for d in done), done
    assert not [p for p in figures.layout_problems(fig) if "too small" in p]
    scale = figures.shown_px_per_point(fig)
    assert figures.MIN_TEXT_PX <= note.get_fontsize() * scale < figures.MIN_TEXT_PX + 0.5 * scale + 1e-9
    assert title.get_fontsize() == 16


def test_a_long_title_is_wrapped_before_small_text_is_enlarged():
    """A title far wider than its axes widens the figure's tight box, and the book shrinks every text with it:
    the remedy wraps it to its axes first (notebook 08's bar chart: a 6.5-inch figure shown as 9.5 inches wide)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8), dpi=90)   # the notebooks' inline resolution
    bars = ax.bar(["a", "b", "c"], [41.3, 50.2, 60.1])
    ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_title("Query-aware normalisation (cf. DBSN Table 1) - synthetic analog (synthetic-msrvtt, seed 0, "
                 "1,000 test videos x 20 captions, bank of 9,000 training captions)", fontsize=9)
    assert any("too small" in p for p in figures.layout_problems(fig))
    done = figures.tidy(fig)
    assert done[0] == "wrapped the title of axes 1 to its width", done
    assert "\n" in ax.get_title() and not figures.layout_problems(fig), figures.layout_problems(fig)


def test_tidy_keeps_the_layout_of_a_figure_with_a_colorbar_it_cannot_relay():
    """matplotlib refuses a constrained layout once a colorbar was made under the tight layout (notebook 03's
    heatmaps): the remedy is then skipped, never an error, and the other remedies still run."""
    fig, axes = plt.subplots(1, 2, figsize=(6, 3))
    im = axes[0].imshow(np.arange(12.0).reshape(3, 4))
    fig.colorbar(im, ax=axes[0])
    axes[0].set_title("a title of the heatmap", fontsize=12)
    fig.tight_layout()
    title = axes[0].title.get_window_extent(figures._renderer(fig)).transformed(fig.transFigure.inverted())
    fig.text(title.x0, title.y0, "a note on it", fontsize=12)   # a figure text: no layout moves it
    assert figures._text_overlaps(fig)
    done = figures.tidy(fig)   # no RuntimeError
    assert not any("constrained" in d for d in done), done


def test_a_suptitle_wider_than_the_figure_is_wrapped_to_it():
    """A run label in a suptitle can be wider than the figure (notebook 05's transport plans): it widened the tight
    box past 20 inches, and every text shrank with it. The remedy wraps it to the figure's width."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), dpi=90)
    for ax in axes:
        ax.plot([0, 1], [0, 1])
    fig.suptitle("Sinkhorn transport plans - synthetic analog (synthetic-flickr30k, seed 0, 1,000 test images x 5 "
                 "captions; banks from 29,000 training images x 5 captions), each panel one iteration", fontsize=12)
    fig.tight_layout()
    assert fig.get_tightbbox(figures._renderer(fig)).width > 11
    done = figures.tidy(fig)
    assert "wrapped the suptitle to the figure's width" in done, done
    assert fig.get_tightbbox(figures._renderer(fig)).width < 10.5 and not figures.layout_problems(fig)


LONG = ("real data (flickr8k-100x5-clip-vitb32, openai/clip-vit-base-patch32, 50 test images x 5 captions; banks "
        "from 34 training images x 5 captions)")


@pytest.fixture
def notebook_style():
    """The notebooks' look (hubnorm_companion.notebook.setup: seaborn's whitegrid in the notebook context, 11-pt
    ticks; 90 dpi on screen)."""
    import seaborn as sns

    with sns.axes_style("whitegrid"), sns.plotting_context("notebook"), matplotlib.rc_context({"figure.dpi": 90}):
        yield


def test_a_figure_legend_that_a_new_layout_puts_on_a_title_goes_below(notebook_style):
    """Notebook 05 on a real set (CI failed on it): wrapped titles and constrained layout raise the right panel's
    title into the figure legend in the upper right corner; the legend is checked again after the layout."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.9), squeeze=False)
    for ax, bank in zip(axes[0], ["test queries (query-aware)", "validation captions (query-agnostic)"]):
        for name, ys in (("IS", [89, 90, 91, 92, 91]), ("SN", [93, 94, 94, 93, 92])):
            ax.plot([0.005, 0.01, 0.015, 0.02, 0.025], ys, marker="o", label=name)
        ax.set_xticks([0.005, 0.01, 0.015, 0.02, 0.025], ["0.005", "0.01", "0.015", "0.02", "0.025"], rotation=30)
        ax.set(xlabel="temperature", ylabel="R@1 (%)")
        ax.set_title(f"{LONG}\nbank: {bank}", fontsize=9)
    fig.suptitle("IS vs SN over tau, t2i", fontsize=10)
    fig.tight_layout()
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="upper right", fontsize=9, frameon=False)
    assert figures.layout_problems(fig)
    done = figures.tidy(fig)
    assert "moved the figure legend below the figure" in done
    assert figures.layout_problems(fig) == []


def test_texts_enlarged_after_a_legend_moved_are_laid_out_again(notebook_style):
    """Notebook 07 on a real set (CI failed on it): a legend moved beside its axes widens the figure, its texts are
    enlarged once more, and the larger wrapped suptitle then lies on the panel titles until laid out again."""
    fig, grid = plt.subplots(2, 2, figsize=(11, 7.8))
    fig.delaxes(grid[1, 1])
    axes = grid.flat[:3]
    steps = np.arange(0, 151, 10)
    axes[0].plot(steps, 0.99 - 0.03 * np.exp(-steps / 30), label="true NDCG (batch)")
    axes[0].plot(steps, 0.985 - 0.03 * np.exp(-steps / 30), "--", label="smooth NDCG (tau=0.01)")
    axes[0].set(title="Fig. 6 analog: NDCG of each batch", xlabel="step", ylabel="NDCG")
    axes[0].legend(fontsize=8)
    for tau, level in ((0.1, 0.2), (0.01, 0.02), (0.001, 0.001)):
        axes[1].plot(steps, level * np.exp(-steps / 300), label=f"{tau:g}")
    axes[1].axhline(0.01, color="grey", ls=":", lw=1)
    axes[1].set(yscale="log", title="Fig. 7 analog: |smooth - true| NDCG", xlabel="step",
                ylabel="approximation error (log scale)")
    axes[1].legend(title="tau")
    axes[2].plot(steps, 0.3 * np.exp(-steps / 50), marker="o", label="triplet")
    axes[2].set(title="Fig. 5a analog: triplet loss", xlabel="step", ylabel="triplet loss (batch)")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"Adapter analog, not Li et al.'s models; {LONG}", fontsize=10)
    fig.tight_layout()
    done = figures.tidy(fig)
    assert any(d.startswith("moved the legend of axes 2") for d in done), done
    assert figures.layout_problems(fig) == []
