"""What the benchmark scripts share, and the only code they share.

A script imports from this package and from no other script; nothing here imports a script
(a script's own parts, such as bench_cold.py's, sit beside it and only it imports them).

  data         the prepared real data: the --data default, the four workloads of the store
               benchmarks (`Workload`, a Ragged `Source`), PyTorch's per-sample Dataset over
               a memory map
  store        the store under test: ours (zrecord) or, in the published loaderx's own
               virtualenv, loaderx 2.5.9's; how its writes are timed and made durable, and one
               workload's store written, checked and opened
  timing       timed gathers, writes and loader batches, the row of a backend, medians over
               rounds
  peers        the rounds of a store benchmark: ours, other builds (--builds), another zstd
               (--zstd-build) and the published loaderx (--peer), each in a fresh subprocess of
               the script, beside its baselines; the store benchmarks' command line
  device       the storage device's own ceilings, and the --tmp argument
  probes       the page cache, the bytes a process read, the memory of a process (tree),
               memory cgroups
  reports      a run's header, ratios of paired rounds, the store tables, the printed run and
               its JSON
  tables       the tables of bench_matrix.py, bench_loaders.py, bench_convert.py and
               bench_decode.py, which report.py renders from their JSON too
  cold_report  bench_cold.py's tables and report, likewise
  convert      one conversion in a fresh interpreter, timed and checked (bench_convert.py,
               bench_convert_workers.py)

At import time `store` imports zrecord (or the published loaderx), the others only the standard
library and NumPy, so that a peer's virtualenv (loaderx 2.5.9 and NumPy) runs the scripts too.
A script in a subject folder (benchmarks/stores/, ...) puts benchmarks/ first on sys.path, in one
line before it imports from here, so that `python benchmarks/<folder>/<script>.py` runs from
anywhere, and so do the children it starts as `python <its own file>`.
"""
