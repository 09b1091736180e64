"""Scale-out: per-report conversion and range merges on Dask distributed (``--dask SPEC``).

Nothing here imports ``distributed`` until a cluster is asked for.
"""
