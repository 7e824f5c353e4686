"""Sphinx configuration of the companion's website. Build it with ``bash scripts/build_site.sh`` (site/hubsite.py
stages the source tree, then runs sphinx-build with this file); docs/site.md explains the choices.

Offline by construction: the theme (sphinx-book-theme on pydata-sphinx-theme) ships its CSS, JavaScript and icon
fonts; MathJax 3 comes from the pinned sphinx-mathjax-offline wheel and is served from _static/mathjax; no
widget, font or analytics script is loaded from elsewhere. Notebooks are rendered from their saved outputs
(``nb_execution_mode = "off"``).
"""

import os
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import hubsite  # noqa: E402

if "HUBSITE_SRC" not in os.environ:
    raise RuntimeError("build the site with `bash scripts/build_site.sh` (site/hubsite.py stages the sources)")

_pyproject = tomllib.loads((hubsite.REPO / "pyproject.toml").read_text())
_repo = hubsite.repository()

project = "hubnorm"
author = "the hubnorm contributors"
copyright = "the hubnorm contributors, MIT License"
release = version = _pyproject["project"]["version"]
html_title = "hubnorm: the companion"

extensions = ["myst_nb", "sphinx.ext.mathjax", "sphinx.ext.githubpages", "sphinx_copybutton"]  # githubpages: .nojekyll
exclude_patterns = ["_hubsite.json", "**/.ipynb_checkpoints"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}  # myst_nb reads both
root_doc = "index"

# MyST: $...$ and $$...$$ math, ::: admonitions, GitHub-style heading anchors (README/docs link to #real-data etc.)
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "attrs_inline"]
myst_heading_anchors = 4
myst_dmath_double_inline = True

# MyST-NB: show the saved outputs, never execute; no widget JavaScript from a CDN
nb_execution_mode = "off"
nb_merge_streams = True
# Markdown outputs of code cells (the notebooks' computed "In this run" statements, hubnorm_companion.notebook.notice) are
# parsed as MyST like the narrative cells, so their $...$ math is typeset (CommonMark, the default, leaves it raw).
nb_render_markdown_format = "myst"
nb_ipywidgets_js = {}
nb_output_stderr = "show"

# MathJax 3.2.2, served from _static/mathjax (copied from the sphinx-mathjax-offline wheel by hubsite.py)
mathjax_path = "mathjax/tex-chtml.js"
html_static_path = [str(HERE / "_static"), os.environ["HUBSITE_MATHJAX"]]
html_css_files = ["hubsite.css"]
html_search_scorer = str(HERE / "_static" / "search_scorer.js")   # list pages rank below the pages that explain a query
html_js_files = ["hubsite.js"]   # one button per notebook page that shows or folds all of its code
html_favicon = str(HERE / "_static" / "favicon.svg")

html_theme = "sphinx_book_theme"
html_theme_options = {
    "repository_url": _repo.url,
    "repository_branch": _repo.branch,
    "use_repository_button": True,
    "use_download_button": True,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "article_footer_items": [],
    "navbar_persistent": [],  # the search field lives in the sidebar (no second one in a header bar)
    "extra_footer": ("Built offline from the executed notebooks by <code>bash scripts/build_site.sh</code>; "
                     "nothing on these pages is loaded from another site."),
}
html_last_updated_fmt = None
html_copy_source = True
html_show_sourcelink = False
html_sidebars = {}

# Cosmetic notices (heading levels in the notebooks' Markdown, a code block that Pygments cannot lex strictly)
# are not errors of the site.
suppress_warnings = ["myst.header", "mystnb.unknown_mime_type", "misc.highlighting_failure"]
