"""Load test of any OpenAI-compatible server: the same generator as `strata bench` (strata/loadgen/).

    python bench/serve_load.py --url http://127.0.0.1:8080 --clients 64 --max-tokens 128
    python bench/serve_load.py --url http://127.0.0.1:8081 --clients 64 --max-tokens 128 --json   # llama-server

Prints aggregate tokens/s, TTFT and ITL p50/p99, and how many streams equal
a solo rerun of the same request; against Strata also its engine steps over
the run (decode-only and with prompt tokens: count, mean time, rows), read
from its /metrics. `--help` lists every flag.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout without installing

from strata.loadgen.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(prog="bench/serve_load.py"))
