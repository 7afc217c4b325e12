"""The load generator behind `strata bench` and `bench/serve_load.py`.

N concurrent streaming clients against any OpenAI-compatible URL: a workload
of prompts from a few tokens to several prefill chunks, greedy and seeded
sampling, staggered arrivals (workload.py); one streamed request timed chunk
by chunk (client.py); the concurrent phase and the solo reruns (runner.py);
throughput, latency percentiles and the streams-equal-solo count as a table
or JSON (report.py); the command line both entry points share (cli.py).
"""
