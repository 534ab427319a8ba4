# The two entry points of the README. Each installs what it needs into .venv.
.PHONY: demo test lower-bounds bench redis-stop clean

demo:
	@sh scripts/bootstrap
	.venv/bin/python -m devkit.demo

# the suite on requirements.txt (the upper end of pyproject.toml's ranges; it
# builds the sdist and wheel and runs twine check: tests/test_packaging.py),
# after part of it on requirements-min.txt (the lower end: scripts/lower-bounds)
test:
	@sh scripts/bootstrap dev
	@sh scripts/lower-bounds
	@.venv/bin/python -m pytest -n 2; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

lower-bounds:
	@sh scripts/bootstrap dev
	@sh scripts/lower-bounds

bench:
	@sh scripts/bootstrap dev
	.venv/bin/python -m bench

redis-stop:
	.venv/bin/python -m crawler.embedded stop

clean:
	rm -rf .venv .scrapy output build *.egg-info
