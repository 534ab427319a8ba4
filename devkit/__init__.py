"""For the demo, the tests and the benchmarks only (not installed): the local
test web, the demo, and ``devkit.settings``."""
