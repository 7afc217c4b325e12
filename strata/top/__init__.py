"""`strata top`: a live terminal view of a running server, from its /slots and /metrics.

snapshot.py reads the two endpoints into a Snapshot (and rates between two
of them); view.py draws one with rich; cli.py refreshes it in place, or
prints one (`--once`).
"""
