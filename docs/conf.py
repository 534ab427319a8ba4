"""Sphinx configuration of the docs site: `make docs` (or `make test`, with
warnings as errors). The pages are MyST Markdown; the reference pages are
generated from the code by _ext/reference.py."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

import crawler  # noqa: E402

project = "polite-crawler"
copyright = "the polite-crawler authors"  # noqa: A001 (Sphinx's name)
version = release = crawler.__version__

extensions = ["myst_parser", "reference"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext"]
root_doc = "index"

myst_heading_anchors = 4
myst_enable_extensions = ["deflist"]
suppress_warnings: list[str] = []

html_theme = "alabaster"
html_title = f"polite-crawler {release}"
html_theme_options = {"description": "Polite, distributed, Redis-coordinated crawling for Scrapy",
                      "page_width": "1100px", "sidebar_width": "240px"}
