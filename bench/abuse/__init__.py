"""Hostile clients and damaged disks: `python -m bench.abuse` (see __main__)."""
