"""flagos against native PyTorch: each module is a benchmark run from the repository root as
`python -m benchmarks.<name>` (overhead, e2e, compile_bench, trainer_bench, ddp_step, alias_pool,
route_breakdown, route_instructions); `python -m benchmarks.report` renders
benchmarks/results/*.json into docs/benchmarks.md and README.md's table. Importing the package imports
neither torch nor torch_fl: a native child process must never import torch_fl."""
