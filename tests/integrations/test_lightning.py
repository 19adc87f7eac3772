"""PyTorch Lightning and Lightning Fabric on flagos (torch_fl/integrations/lightning.py).

A seeded linear regression trained a few steps on flagos must end with the weights of the same run on the CPU;
each training step checks where the parameters are. DDP runs in a child interpreter with two devices
(FLAGOS_HOST_DEVICES=2 on host memory), against a one-process CPU run of the same global batch.
"""

from __future__ import annotations

import pytest
import torch

import torch_fl
from tests.helpers import run_python
from torch_fl.integrations import lightning as flagos_lightning

L = pytest.importorskip("lightning.pytorch")

pytestmark = pytest.mark.anyplatform

STEPS = 4
TRAINER_FLAGS = dict(
    max_steps=STEPS,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)


@pytest.fixture(scope="module", autouse=True)
def registered():
    # `import torch_fl` registers flagos when Lightning's accelerators module is imported; registering here as
    # well keeps these tests independent of that wiring (register is idempotent).
    return flagos_lightning.register_all()


def _data(n: int = 32) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    return torch.utils.data.TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25)


class Regression(L.LightningModule):
    """nn.Linear(4, 1) from seed 0, SGD; training_step asserts the parameters' device type and keeps what it saw."""

    def __init__(self, device_type: str, batch_size: int = 8, record_to=None):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 1)
        self.device_type, self.batch_size, self.record_to = device_type, batch_size, record_to
        self.seen_devices: set[str] = set()
        self.seen_dtypes: set[torch.dtype] = set()
        self.backend = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        assert self.lin.weight.device.type == self.device_type, self.lin.weight.device
        self.seen_devices.add(str(self.lin.weight.device))
        out = self.lin(x)
        self.seen_dtypes.add(out.dtype)
        if torch.distributed.is_initialized():
            self.backend = torch.distributed.get_backend()
        # a metric synced across ranks per epoch: Lightning averages its int64 batch count (ReduceOp.AVG)
        self.log("samples", torch.tensor(x.shape[0], device=x.device), sync_dist=True, on_epoch=True)
        return torch.nn.functional.mse_loss(out.float(), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def train_dataloader(self):
        data = _data()
        # Under DDP the ranks take alternate samples in order (Lightning's own sampler would shuffle), so that a
        # step of two ranks of batch b sees the samples of one process's step of batch 2b.
        sampler = (
            torch.utils.data.DistributedSampler(data, shuffle=False) if torch.distributed.is_initialized() else None
        )
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size, sampler=sampler)

    def on_train_end(self):
        # A spawned DDP rank's module is its own copy: what it saw goes to a file.
        if self.record_to is not None:
            torch.save(
                {"devices": sorted(self.seen_devices), "backend": self.backend},
                f"{self.record_to}/rank{self.global_rank}.pt",
            )


def _fit(tmp_path, device_type: str, batch_size: int = 8, **flags) -> tuple[Regression, object]:
    model = Regression(device_type, batch_size)
    trainer = L.Trainer(default_root_dir=tmp_path, **TRAINER_FLAGS, **flags)
    trainer.fit(model)
    return model, trainer


def _weights(model: Regression) -> torch.Tensor:
    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])


def test_registries_list_flagos():
    from lightning.fabric.accelerators import ACCELERATOR_REGISTRY
    from lightning.fabric.strategies import STRATEGY_REGISTRY
    from lightning.pytorch.accelerators import AcceleratorRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    strategies = {"single_flagos", "ddp_flagos", "ddp_spawn_flagos"}
    assert AcceleratorRegistry["flagos"]["accelerator"] is flagos_lightning.FlagosAccelerator
    assert ACCELERATOR_REGISTRY["flagos"]["accelerator"] is flagos_lightning.FabricFlagosAccelerator
    assert strategies <= set(StrategyRegistry.available_strategies())
    assert strategies <= set(STRATEGY_REGISTRY.available_strategies())
    accelerator = AcceleratorRegistry.get("flagos")
    assert accelerator.auto_device_count() == torch.flagos.device_count() and accelerator.is_available()
    assert accelerator.get_parallel_devices(1) == [torch.device("flagos", 0)]
    assert isinstance(accelerator.get_device_stats("flagos:0"), dict)


def test_parse_devices():
    n = torch.flagos.device_count()
    parse = flagos_lightning.parse_devices
    assert parse(1) == parse("1") == parse([0]) == parse("0,") == [0]
    assert parse(-1) == parse("-1") == parse("auto") == list(range(n))
    assert parse(f"[{n - 1}]") == parse(f" [ {n - 1} ] ") == parse([n - 1]) == [n - 1]  # a list, not a count
    if n > 1:
        assert parse("[0, 1]") == parse("0,1") == [0, 1]
    for bad in (0, n + 1, [n], [0, 0], "x", -2, True, None, "[]", "[auto]", f"[{n}]"):
        with pytest.raises((ValueError, TypeError)):
            parse(bad)


@pytest.mark.parametrize("strategy", ["single_flagos", "lightning_single_device"])
def test_single_device_trains_on_flagos_like_cpu(tmp_path, strategy):
    # Lightning's own SingleDeviceStrategy works as well once it is given the flagos device.
    if strategy == "lightning_single_device":
        strategy = L.strategies.SingleDeviceStrategy("flagos:0")
    model, trainer = _fit(tmp_path, "flagos", accelerator="flagos", devices=1, strategy=strategy)
    reference, _ = _fit(tmp_path, "cpu", accelerator="cpu", devices=1)
    assert model.seen_devices == {"flagos:0"} and trainer.global_step == STEPS
    torch.testing.assert_close(_weights(model), _weights(reference), rtol=1e-5, atol=1e-6)
    assert not torch.equal(_weights(model), _weights(Regression("cpu")))  # it did train


def test_accelerator_alone_refuses_lightnings_cpu_choice(tmp_path):
    # Lightning chooses SingleDeviceStrategy("cpu") for one device of a third-party accelerator; FlagosAccelerator
    # refuses that device (naming the strategy to pass) rather than let the model train on the CPU.
    trainer = L.Trainer(default_root_dir=tmp_path, accelerator="flagos", devices=1, **TRAINER_FLAGS)
    assert trainer.strategy.root_device == torch.device("cpu")
    with pytest.raises(ValueError, match="single_flagos"):
        trainer.fit(Regression("flagos"))


@pytest.mark.parametrize("package", ["lightning.pytorch", "lightning.fabric"])
@pytest.mark.parametrize("strategy", ["single_flagos", "ddp_spawn_flagos"])
def test_a_flagos_strategy_without_the_flagos_accelerator_is_refused(package, strategy):
    # accelerator="auto" picks the CPU here: the model would train there, silently, mixed precision off.
    make = L.Trainer if package == "lightning.pytorch" else __import__(package, fromlist=["Fabric"]).Fabric
    with pytest.raises(ValueError, match="runs on flagos devices, .* pass accelerator='flagos' as well"):
        make(strategy=strategy, devices=1, precision="bf16-mixed")


@pytest.mark.parametrize(
    "precision, strategy",
    [("bf16-mixed", "single_flagos"), ("bf16-mixed", "lightning_single_device"), ("16-mixed", "single_flagos")],
)
def test_mixed_precision_autocasts_on_flagos(tmp_path, precision, strategy):
    # With Lightning's own strategy it is FlagosAccelerator.setup that points the precision plugin at flagos.
    if strategy == "lightning_single_device":
        strategy = L.strategies.SingleDeviceStrategy("flagos:0")
    model, trainer = _fit(tmp_path, "flagos", accelerator="flagos", devices=1, strategy=strategy, precision=precision)
    # Lightning would autocast on "cuda" here, which leaves flagos tensors in fp32.
    assert trainer.precision_plugin.device == "flagos"
    dtype = torch.bfloat16 if precision == "bf16-mixed" else torch.float16
    assert model.seen_dtypes == {dtype} and model.lin.weight.dtype == torch.float32
    if precision == "bf16-mixed":
        reference, _ = _fit(tmp_path, "cpu", accelerator="cpu", devices=1, precision=precision)
        torch.testing.assert_close(_weights(model), _weights(reference), rtol=0, atol=2e-2)
    else:
        # A scaler for "cuda" disables itself where CUDA is absent; the flagos one scales the fp16 gradients.
        assert trainer.precision_plugin.scaler.is_enabled()
        assert torch.isfinite(_weights(model)).all()


def test_pytorch_lightning_package(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    # The standalone package is a separate class hierarchy, with a FlagosAccelerator of its own.
    assert pl.accelerators.AcceleratorRegistry["flagos"]["accelerator"] is flagos_lightning.PLFlagosAccelerator
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            seen.append(self.lin.weight.device)
            return torch.nn.functional.mse_loss(self.lin(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    trainer = pl.Trainer(
        default_root_dir=tmp_path, accelerator="flagos", devices=1, strategy="single_flagos", **TRAINER_FLAGS
    )
    trainer.fit(Model(), torch.utils.data.DataLoader(_data(), batch_size=8))
    assert set(seen) == {torch.device("flagos", 0)}


def test_fabric_single_device_bf16():
    from lightning.fabric import Fabric

    fabric = Fabric(accelerator="flagos", devices=1, strategy="single_flagos", precision="bf16-mixed")
    torch.manual_seed(0)
    lin, optimizer = _linear_and_sgd()
    dtypes = []
    # Fabric's module wrapper returns fp32; the layer's own output shows the autocast.
    lin.register_forward_hook(lambda module, args, out: dtypes.append(out.dtype))
    module, optimizer = fabric.setup(lin, optimizer)
    x, y = fabric.to_device(_data(8).tensors)
    out = module(x)
    assert module.weight.device == torch.device("flagos", 0) and dtypes == [torch.bfloat16]
    fabric.backward(torch.nn.functional.mse_loss(out.float(), y))
    optimizer.step()
    assert module.weight.grad.device.type == "flagos"


def _linear_and_sgd():
    lin = torch.nn.Linear(4, 1)
    return lin, torch.optim.SGD(lin.parameters(), lr=0.05)


def _ddp_child(out: str) -> None:
    """Runs in a child interpreter with two flagos devices (the test process has the one it was started with)."""
    import pathlib

    out = pathlib.Path(out)
    flagos_lightning.register_all()  # as the fixture does in the test process
    flags = dict(default_root_dir=out, **TRAINER_FLAGS)
    results = {}
    # One device, chosen by Lightning's `devices`: the second one.
    model = Regression("flagos")
    L.Trainer(accelerator="flagos", devices=[1], strategy="single_flagos", **flags).fit(model)
    results["devices=[1]"] = sorted(model.seen_devices)
    try:
        L.Trainer(accelerator="flagos", devices=2, strategy="single_flagos", **flags)
        results["single_flagos on 2"] = "accepted"
    except ValueError as e:
        results["single_flagos on 2"] = str(e)
    # Lightning's own DDP strategies need CUDA for a stream of theirs: without it the accelerator says what to use.
    trainer = L.Trainer(accelerator="flagos", devices=2, strategy="ddp_spawn", **flags)
    try:
        trainer.strategy.accelerator.setup(trainer)
        results["lightning ddp_spawn"] = "accepted"
    except ValueError as e:
        results["lightning ddp_spawn"] = str(e)
    # Two processes of batch 8 step together on the samples of one process's batch of 16.
    model = Regression("flagos", batch_size=8, record_to=out)
    trainer = L.Trainer(
        accelerator="flagos", devices=2, strategy="ddp_spawn_flagos", use_distributed_sampler=False, **flags
    )
    trainer.fit(model)
    # ddp_spawn loads rank 0's final weights back into this process's model.
    results["weights"] = _weights(model)
    results["strategy"] = type(trainer.strategy).__name__
    torch.save(results, out / "results.pt")


def test_ddp_spawn_two_devices(tmp_path):
    if torch_fl.backing() == "cuda" and torch.flagos.device_count() < 2:
        pytest.skip("DDP over two flagos devices needs two GPUs on a CUDA backing")
    code = f"from tests.integrations.test_lightning import _ddp_child; _ddp_child({str(tmp_path)!r})"
    proc = run_python(code, env={"FLAGOS_HOST_DEVICES": "2"}, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    results = torch.load(tmp_path / "results.pt", weights_only=False)
    assert results["devices=[1]"] == ["flagos:1"]
    assert "runs one device" in results["single_flagos on 2"]
    assert results["strategy"] == "DDPFlagosStrategy"
    if not torch.cuda.is_available():
        assert "ddp_spawn_flagos" in results["lightning ddp_spawn"]
    for rank in range(2):
        seen = torch.load(tmp_path / f"rank{rank}.pt")
        # Lightning picks the process-group backend from the device type: "flagos", with no backend named.
        assert seen == {"devices": [f"flagos:{rank}"], "backend": "flagos"}, (rank, seen)
    reference, _ = _fit(tmp_path, "cpu", batch_size=16, accelerator="cpu", devices=1)
    torch.testing.assert_close(results["weights"], _weights(reference), rtol=1e-5, atol=1e-6)
