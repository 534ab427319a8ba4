# Metadata lives in pyproject.toml; this file lets `setup.py bdist_egg` build
# the egg that Scrapyd (and scrapyd-deploy) expect.
from setuptools import setup

setup()
