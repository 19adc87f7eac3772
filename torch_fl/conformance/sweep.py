"""The sweep: every selected OpInfo through `runner.run_op`, in worker processes.

Each worker is a `python -m torch_fl.conformance _worker` process that loads
op_db once and then runs the ops the parent sends it, one JSON line back per
op. The parent gives each op a deadline; a worker that passes it (a hung
kernel) or dies (a crash in a kernel) is killed and replaced, and the op is
recorded as an error with the cause, so one pathological op cannot stop the
sweep. `jobs=0` runs everything in this process instead (no guard; for short,
known-good lists such as the CI subset).
"""

from __future__ import annotations

import fnmatch
import json
import os
import queue
import select
import subprocess
import sys
import threading
import time

import torch

from torch_fl.conformance.runner import OpResult, full_precision_on_cuda, op_key

RESULT_TAG = "@@RESULT "
READY_TAG = "@@READY"

# FEP 0025's first-phase operators: the overloads `--backend` routes by default.
FIRST_PHASE_OVERLOADS = (
    "abs acos cos sin neg rsqrt silu silu_backward add.Tensor mul.Tensor mul.Scalar div.Scalar pow.Tensor_Scalar "
    "le.Tensor bitwise_and.Tensor where.self all mean.dim sum.dim_IntList _softmax mm bmm new_ones scalar_tensor "
    "ones_like zeros cat constant_pad_nd slice_backward embedding embedding_dense_backward nll_loss_forward "
    "nll_loss_backward index.Tensor"
).split()

# A fixed, representative slice of op_db for CI: elementwise, reductions,
# linear algebra, indexing, shape ops, factories, nn.functional, complex.
SUBSET_CI = (
    "abs acos cos sin neg rsqrt add mul div pow le bitwise_and where all mean sum softmax log_softmax mm bmm "
    "matmul new_ones ones_like zeros cat constant_pad_nd nn.functional.embedding nn.functional.nll_loss "
    "nn.functional.silu __getitem__ index_put index_select gather scatter_add transpose reshape view_as_real "
    "masked_fill cumsum argmax topk sort nn.functional.linear nn.functional.layer_norm conj_physical"
).split()


def select_ops(op_db, patterns: list[str] | None, limit_ops: int | None = None) -> list:
    """OpInfos whose sweep name (`name` or `name.variant`) matches any glob in `patterns`."""
    ops = []
    for op in op_db:
        key = op_key(op)
        if not patterns or any(fnmatch.fnmatchcase(key, p) or fnmatch.fnmatchcase(op.name, p) for p in patterns):
            ops.append(op)
    return ops[:limit_ops] if limit_ops else ops


OWN = "own"  # --route-ops own: per op, only the overloads of that op


def own_overloads(op, supported) -> list[str]:
    """The overloads in `supported` that are `op`'s own: its aten name, in-place and backward variants.

    Routing only these while `op` runs attributes a failure to the backend's
    kernels for that operator (sample generation and reference stay native).
    """
    # aten_name is "linalg_svd" for linalg.svd but "nn.functional.silu" for silu
    aten = (getattr(op, "aten_name", None) or op.name).split(".")[-1]
    bases = {aten, f"{aten}_", f"{aten}_backward"}
    if getattr(op, "aten_backward_name", None):
        bases.add(op.aten_backward_name)
    return sorted(ov for ov in supported if ov.split(".")[0] in bases)


def expand_route_ops(backend: str, overloads) -> list[str]:
    """`overloads` with `all` replaced by every overload `backend` implements (FlagGems: its own table)."""
    if OWN in overloads:
        return [OWN]
    if "all" not in overloads:
        return list(overloads)
    from torch_fl import backends

    b = backends.get(backend)
    if b.unavailable_reason():
        raise SystemExit(f"--route-ops all: backend {backend} is unavailable: {b.unavailable_reason()}")
    rest = [ov for ov in overloads if ov != "all"]
    return rest + sorted(set(b.supported_ops()) - set(rest))


def apply_backend(backend: str, overloads) -> dict:
    """Route `overloads` to `backend` through torch_fl.routing; {overload: error} for those it refused."""
    if backend == "native":
        return {}
    from torch_fl import routing  # the routing layer (set_route contract)

    refused = {}
    overloads = expand_route_ops(backend, overloads)
    if overloads == [OWN]:
        return {}  # routed per op by run_routed
    for ov in overloads:
        try:
            routing.set_route(ov, backend)
        except Exception as e:  # a backend may not implement every overload
            refused[ov] = f"{type(e).__name__}: {e}"
    return refused


# -------------------------------------------------------------- the worker
def worker_main(args) -> int:
    """Child side: read op names on stdin, write one result line per op."""
    from torch_fl.conformance.runner import load_op_db, parse_dtypes

    result_out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything an op prints goes to stderr, not into the protocol
    sys.stdout = sys.stderr
    if args.threads:
        torch.set_num_threads(args.threads)
    full_precision_on_cuda()
    refused = apply_backend(args.backend, args.route_ops)
    by_key = {op_key(op): op for op in load_op_db()}
    dtypes = parse_dtypes(args.dtypes)
    result_out.write(f"{READY_TAG} {json.dumps(refused)}\n")
    for line in sys.stdin:
        key = line.strip()
        if not key:
            continue
        res = run_routed(by_key[key], dtypes, args)
        result_out.write(RESULT_TAG + json.dumps({"op": key, **res}) + "\n")
    return 0


class _Worker:
    def __init__(self, argv: list[str], env: dict):
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0
        )
        self.buf = b""

    def readline(self, deadline: float) -> str | None:
        """The next protocol line, or None on timeout / worker death."""
        fd = self.proc.stdout.fileno()
        while True:
            if b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                return line.decode()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.buf += chunk

    def send(self, key: str) -> bool:
        try:
            self.proc.stdin.write((key + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


def _worker_argv(cfg) -> list[str]:
    argv = [sys.executable, "-m", "torch_fl.conformance", "_worker", "--backend", cfg.backend]
    argv += ["--threads", str(cfg.threads)]
    if cfg.dtypes:
        argv += ["--dtypes", cfg.dtypes]
    if cfg.limit:
        argv += ["--limit", str(cfg.limit)]
    argv += ["--backward"] if cfg.backward else ["--no-backward"]
    if cfg.route_ops:
        argv += ["--route-ops", ",".join(cfg.route_ops)]
    return argv


def _worker_env() -> dict:
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _crash_result(key: str, why: str) -> dict:
    res = OpResult(key, status="error", first_error=why)
    res.counts["error"] = 1
    return {"op": key, **res.as_dict()}


def run_in_workers(keys: list[str], cfg, progress, refused: dict) -> dict:
    """{op: result dict} for `keys`, run by cfg.jobs guarded worker processes.

    Routes the backend refused are added to `refused`."""
    todo: queue.Queue = queue.Queue()
    for k in keys:
        todo.put(k)
    results: dict = {}
    lock = threading.Lock()
    argv, env = _worker_argv(cfg), _worker_env()

    def start() -> _Worker | None:
        w = _Worker(argv, env)
        line = w.readline(time.monotonic() + cfg.startup_timeout)
        if line is None or not line.startswith(READY_TAG):
            w.kill()
            return None
        with lock:
            refused.update(json.loads(line[len(READY_TAG) :] or "{}"))
        return w

    def slot() -> None:
        w = None
        while time.monotonic() < cfg.stop_at:
            try:
                key = todo.get_nowait()
            except queue.Empty:
                break
            if w is None:
                w = start()
            if w is None:
                out = _crash_result(key, "worker process failed to start")
            elif not w.send(key):
                out = _crash_result(key, "worker process died")
                w.kill()
                w = None
            else:
                line = w.readline(time.monotonic() + cfg.timeout)
                while line is not None and not line.startswith(RESULT_TAG):
                    line = w.readline(time.monotonic() + cfg.timeout)
                if line is None:
                    try:  # EOF means the worker died; give it a moment to be reaped
                        code = w.proc.wait(timeout=2)
                    except subprocess.TimeoutExpired:
                        code = None
                    if code is None:
                        why = f"timeout: no result after {cfg.timeout:.0f}s (worker killed)"
                    else:
                        why = f"crash: the worker process died (exit code {code})"
                    w.kill()
                    w = None
                    out = _crash_result(key, why)
                else:
                    out = json.loads(line[len(RESULT_TAG) :])
            with lock:
                results[key] = out
                progress(key, out)
        if w is not None:
            w.close()

    threads = [threading.Thread(target=slot, daemon=True) for _ in range(max(1, cfg.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def run_in_process(ops: list, cfg, progress) -> tuple[dict, dict]:
    from torch_fl.conformance.runner import parse_dtypes

    full_precision_on_cuda()
    refused = apply_backend(cfg.backend, cfg.route_ops)
    dtypes = parse_dtypes(cfg.dtypes)
    results = {}
    for op in ops:
        if time.monotonic() >= cfg.stop_at:
            break
        out = {"op": op_key(op), **run_routed(op, dtypes, cfg)}
        results[out["op"]] = out
        progress(out["op"], out)
    return results, refused


def run_routed(op, dtypes, cfg) -> dict:
    """run_op's result; on a non-native sweep also `routed`: {overload: calls} that reached the backend,
    and `fell_back`: {overload: fallbacks}, so a failure can be traced to the kernels it went through."""
    from torch_fl.conformance.runner import run_op

    if cfg.backend == "native":
        return run_op(op, dtypes, limit=cfg.limit, backward=cfg.backward).as_dict()
    from torch_fl import backends, routing

    name = backends.stats_name(cfg.backend)
    routes: dict[str, str] = {}
    if list(cfg.route_ops) == [OWN]:
        from torch_fl.vocab.errors import RoutingError
        from torch_fl.vocab.ops import parse_op_key

        for ov in own_overloads(op, backends.get(cfg.backend).supported_ops() or ()):
            try:
                parse_op_key(ov)  # FlagGems' table may name overloads this torch does not have
            except RoutingError:
                continue
            routes[ov] = cfg.backend
        if not routes:  # nothing of the backend's would run: a pass here would be the native route's
            why = f"{cfg.backend} implements none of this op's overloads (for this torch)"
            return {**OpResult(op_key(op), skip_reason=why).as_dict(), "routed": {}, "fell_back": {}}
    routing.reset_stats()
    with routing.route(routes):
        out = run_op(op, dtypes, limit=cfg.limit, backward=cfg.backward).as_dict()
    rows = [r for r in routing.stats() if r.backend == name]
    out["routed"] = {r.op: r.calls for r in rows if r.calls}
    out["fell_back"] = {r.op: r.fallbacks + r.failures for r in rows if r.fallbacks or r.failures}
    return out


def summarize(results: dict) -> dict:
    counts = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for r in results.values():
        counts[r["status"]] += 1
    judged = counts["pass"] + counts["fail"] + counts["error"]
    total = sum(counts.values())
    return {
        "ops": total,
        **counts,
        "pass_rate_judged": round(counts["pass"] / judged, 4) if judged else None,
        "pass_rate_all": round(counts["pass"] / total, 4) if total else None,
    }


def metadata(cfg, seconds: float, refused: dict | None = None) -> dict:
    import torch_fl

    return {
        "backend": cfg.backend,
        "route_ops": expand_route_ops(cfg.backend, cfg.route_ops) if cfg.backend != "native" else [],
        "refused_routes": refused or {},
        "backing": torch_fl.backing(),
        "torch": torch.__version__,
        "torch_fl": torch_fl.__version__,
        "dtypes": cfg.dtypes or "default",
        "limit": cfg.limit,
        "backward": cfg.backward,
        "jobs": cfg.jobs,
        "seconds": round(seconds, 1),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
