"""Sphinx configuration of the course website (`make site`, scripts/build_site.py): the README as the landing
page, one page per executed notebook (myst-nb renders the outputs it holds; nothing is executed here), TEACHING.md,
offline search (Sphinx's own index). Read by sphinx-build from the staged sources scripts/build_site.py writes."""

project = "GPU inference optimization with PyTorch"
author = "the course's authors"
root_doc = "README"
extensions = ["myst_nb"]
nb_execution_mode = "off"  # the pages show the copies the course's executor ran (their machine and date on top)
nb_merge_streams = True
myst_heading_anchors = 3  # [text](#a-heading) links are checked against the page's headings
myst_enable_extensions = ["dollarmath", "colon_fence"]
suppress_warnings = ["mystnb.unknown_mime_type"]  # widget state (tqdm bars) has no static rendering
exclude_patterns = ["_build", "sources/**"]  # sources/: the notebooks without outputs, downloads of the pages
html_theme = "sphinx_book_theme"
html_title = "GPU inference optimization with PyTorch"
html_theme_options = {
    "show_navbar_depth": 1,
    "home_page_in_toc": True,
    "use_download_button": False,  # each notebook page links its source notebook itself (scripts/build_site.py)
    "show_toc_level": 2,
}
html_last_updated_fmt = None
html_copy_source = False
