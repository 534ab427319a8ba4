# The two entry points of the README. Each installs what it needs into .venv.
.PHONY: demo test bench redis-stop clean

demo:
	@sh scripts/bootstrap
	.venv/bin/python -m devkit.demo

test:
	@sh scripts/bootstrap dev
	@.venv/bin/python -m pytest -n 2; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$rc

bench:
	@sh scripts/bootstrap dev
	.venv/bin/python -m bench

redis-stop:
	.venv/bin/python -m crawler.embedded stop

clean:
	rm -rf .venv .scrapy output build *.egg-info
