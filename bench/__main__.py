"""``python -m bench [--list] [NAME ...]``: run the benchmarks of this folder,
one after another (all of them, or those named: ``python -m bench robots
http_parse``). Each is also a script of its own with its own ``--help``;
options after a single name are that benchmark's (``python -m bench soak
--minutes 60 --chaos``)."""

import argparse
import runpy
import sys
from pathlib import Path

SCRIPTS = {p.stem.removeprefix("bench_"): p for p in sorted(Path(__file__).parent.glob("bench_*.py"))}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Run the benchmarks of this folder.")
    parser.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(SCRIPTS)}")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    # NAME [its options]: what follows a benchmark's name is the benchmark's own
    first = next((i for i, a in enumerate(argv) if a in SCRIPTS), None)
    own: list[str] = []
    if first is not None and any(a.startswith("-") for a in argv[first + 1:]):
        argv, own = argv[:first + 1], argv[first + 1:]
    opts = parser.parse_args(argv)
    if opts.list:
        print("\n".join(SCRIPTS))
        return 0
    unknown = [n for n in opts.names if n not in SCRIPTS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; there are: {', '.join(SCRIPTS)}")
    for name in opts.names or SCRIPTS:
        script = SCRIPTS[name]
        print(f"\n=== {script.name} ===", flush=True)
        sys.argv = [str(script), *own]
        runpy.run_path(str(script), run_name="__main__")
    return 0


sys.exit(main(sys.argv[1:]))
