# The two entry points of the README. Each installs what it needs into .venv.
.PHONY: demo test docs docs-build lower-bounds bench redis-stop clean

demo:
	@sh scripts/bootstrap
	.venv/bin/python -m devkit.demo

# the suite on requirements.txt (the upper end of pyproject.toml's ranges; it
# builds the sdist and wheel and runs twine check: tests/test_packaging.py),
# after part of it on requirements-min.txt (the lower end: scripts/lower-bounds),
# after the docs site built with warnings as errors (an undocumented setting fails).
# Four workers on any machine: the tests mostly wait on their servers and
# subprocess crawls, so two workers leave two cores half idle
# (docs/development.md); the ten slowest tests are listed at the end, so a
# test that grows shows.
test:
	@sh scripts/bootstrap dev
	@$(MAKE) --no-print-directory docs-build
	@sh scripts/lower-bounds
	@.venv/bin/python -m pytest -n 4 --durations=10; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

# the docs site, docs/ -> build/docs/index.html (Sphinx, MyST Markdown; the
# reference pages are generated from the code as it builds)
docs:
	@sh scripts/bootstrap dev
	@$(MAKE) --no-print-directory docs-build
	@echo "docs: file://$(CURDIR)/build/docs/index.html"

docs-build:
	@start=$$(date +%s); \
	.venv/bin/python -m sphinx -E -a -W --keep-going -q -b html docs build/docs || exit 1; \
	echo "docs: built with warnings as errors in $$(( $$(date +%s) - start )) s"

lower-bounds:
	@sh scripts/bootstrap dev
	@sh scripts/lower-bounds

bench:
	@sh scripts/bootstrap dev
	@.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-bench.txt
	.venv/bin/python -m bench

redis-stop:
	.venv/bin/python -m crawler.embedded stop

clean:
	rm -rf .venv .scrapy output build *.egg-info
