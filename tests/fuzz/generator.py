"""The program generator: the families of steps put together, how often each is drawn, and the routes added
once the steps are chosen (routes change nothing on the CPU)."""

from __future__ import annotations

import functools

from tests.fuzz.gen_conversions import ConversionSteps
from tests.fuzz.gen_functional import FunctionalSteps
from tests.fuzz.gen_views import ViewSteps
from tests.fuzz.gen_writes import WriteSteps
from tests.fuzz.runner import run
from tests.fuzz.steps import InferenceMode, Observe, Route, SetDevice, Step

#: aten overloads the generated steps call, routable to native or cpu_fallback (views run natively only)
ROUTABLE = (
    "add.Tensor",
    "add_.Tensor",
    "add.out",
    "sub.Tensor",
    "sub_.Tensor",
    "mul.Tensor",
    "mul_.Tensor",
    "mul.out",
    "clamp_",
    "clamp_.Tensor",
    "clamp",
    "clamp.out",
    "fill_.Scalar",
    "fill_.Tensor",
    "zero_",
    "neg",
    "neg_",
    "abs",
    "abs_",
    "index_add_",
    "index_copy_",
    "index_fill_.int_Scalar",
    "index_put_",
    "_index_put_impl_",
    "index.Tensor",
    "index_select",
    "index_select.out",
    "masked_fill_.Scalar",
    "cat",
    "cat.out",
    "stack",
    "clone",
    "sum.dim_IntList",
    "sum",
    "where.self",
    "gt.Tensor",
    "gt.Scalar",
    "eq.Tensor",
)


class Generator(ViewSteps, WriteSteps, FunctionalSteps, ConversionSteps):
    """Builds one program from `seed`, choosing arguments against the reference run as it goes."""

    # -- steps that change what the next steps run under (a route, the current device, inference mode), or
    # read a variable's layout

    def gen_route(self):
        self.add(Route(self.rng.choice(ROUTABLE), self.rng.choice(self.backends)))

    def gen_set_device(self):
        if len(self.flagos_devices) > 1:
            self.add(SetDevice(self.rng.randrange(len(self.flagos_devices))))

    def gen_inference(self):
        self.add(InferenceMode(self.env.inference is None))

    def gen_observe(self):
        i = self.pick()
        if i is not None:
            self.add(Observe(i))

    #: each kind of step (a method of this class or of a family) and its weight in the draw
    KINDS = (
        ("gen_new", 8),
        ("gen_view", 26),
        ("gen_inplace", 24),
        ("gen_out", 8),
        ("gen_func", 10),
        ("gen_foreach", 3),
        ("gen_cast", 6),
        ("gen_move", 8),
        ("gen_route", 4),
        ("gen_set_device", 3),
        ("gen_observe", 5),
        ("gen_inference", 2),
    )

    def generate(self) -> list[Step]:
        self.gen_new()
        names, weights = zip(*self.KINDS, strict=True)
        attempts = 0
        try:
            while len(self.program) < self.length and attempts < 10 * self.length:
                attempts += 1
                getattr(self, self.rng.choices(names, weights)[0])()
        finally:
            self.env.close()
        return self.routed()

    def routed(self) -> list[Step]:
        """The program with routes for the operators its steps call: all of them to one backend up front
        (a fifth of the programs), or one before some steps that call it, now and then for the dtype of
        that call only (`add_.Tensor[float32]`). Routes change nothing on the CPU, so they are added
        afterwards."""
        rng, out = self.rng, []
        # the operators each step calls, from a run of its own: a dispatch mode is not transparent (under
        # inference_mode a view of a normal tensor it sees is no view), so the steps were chosen without one
        records = run(self.program, flagos=False, snapshot_every_step=False, calls=True)
        calls = [set(r.calls) & routable() for r in records]
        if rng.random() < 0.2:
            backend = rng.choice(self.backends[1:] or self.backends)
            out = [Route(op, backend) for op in sorted(set().union(*calls))]
            return out + self.program
        for step, called, r in zip(self.program, calls, records, strict=True):
            dtypes = r.call_dtypes
            if called and rng.random() < 0.3:
                backend = rng.choices(self.backends, [1] + [3] * (len(self.backends) - 1))[0]
                op = rng.choice(sorted(called))
                if op in dtypes and rng.random() < 0.3:
                    op = f"{op}[{dtypes[op]}]"
                out.append(Route(op, backend))
            out.append(step)
        return out


@functools.cache
def routable() -> frozenset[str]:
    """Overloads a runtime route may name for any backend: all but those only the native route runs (the core's,
    the transfers', the views: routing/native_only.py)."""
    from torch_fl.routing import native_only
    from torch_fl.vocab import ops

    return frozenset(op for op in map(ops.normalize, ops.aten_ops()) if not native_only.is_native_only(op))


def generate(seed: int, devices=("d0", "d1", "cpu"), backends=("native", "cpu_fallback"), length=None) -> list[Step]:
    """The program of `seed` (the same for the same seed, devices and backends)."""
    return Generator(seed, devices, backends, length).generate()
