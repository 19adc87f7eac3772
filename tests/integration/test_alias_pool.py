"""The native route's recycled aliases (csrc/tensor/alias_pool.h): whatever geometry, dtype or view bits a
pooled alias last had, a routed call sees exactly its arguments' own.

The pool keeps aliases by a key of their geometry and compares the whole
geometry before reusing one without reshaping it. These calls walk it
through the cases where a stale alias would give a wrong answer: the same
key with another geometry, the same geometry with another dtype, strides and
offsets of views, conjugate and negative bits, more dimensions than a
TensorImpl keeps inline, one shape twice in a call, and an out= argument the
kernel reshapes (its alias goes back to the pool shaped as it was not
borrowed). Each result is compared with the same call on the native device.
"""

from __future__ import annotations

import pytest
import torch

from tests.conftest import NATIVE

pytestmark = pytest.mark.anyplatform


def both(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`t` on the native device and on flagos (the same values)."""
    return t.to(NATIVE), t.to("flagos")


def check(fn, *tensors: torch.Tensor) -> None:
    native = fn(*(t.to(NATIVE) for t in tensors))
    flagos = fn(*(t.to("flagos") for t in tensors))
    assert flagos.device.type == "flagos"
    assert flagos.shape == native.shape and flagos.stride() == native.stride() and flagos.dtype == native.dtype
    torch.testing.assert_close(flagos.cpu(), native.cpu(), rtol=0, atol=0)


def test_many_geometries_in_turn_each_see_their_own():
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, 8, generator=g)
    # views of one storage: same element count and rank, other strides and offsets
    views = [
        lambda t: t,
        lambda t: t.transpose(0, 2),
        lambda t: t.permute(1, 0, 2),
        lambda t: t[1:3],
        lambda t: t[:, 2:5, ::2],
        lambda t: t.reshape(8, 6, 4),
        lambda t: t.reshape(6, 4, 8).transpose(1, 2),
        lambda t: t[0],
        lambda t: t.flatten(),
        lambda t: t[2, 3, 4],  # zero-dim
    ]
    for _ in range(3):  # again, so every view meets aliases another view left in the pool
        for view in views:
            check(lambda t, v=view: v(t) * 3 + 1, base)
            check(lambda t, v=view: torch.neg(v(t)), base)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bfloat16])
def test_one_geometry_in_several_dtypes(dtype):
    g = torch.Generator().manual_seed(1)
    for d in (torch.float32, dtype, torch.float32, dtype):
        x = (torch.randn(5, 7, generator=g) * 10).to(d)
        check(lambda t: t * t, x)
        check(lambda t: torch.abs(t), x)


def test_one_shape_twice_in_one_call_and_the_same_tensor_twice():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(3, 9, generator=g), torch.randn(3, 9, generator=g)
    for _ in range(3):
        check(torch.mul, a, b)
        check(lambda t: t * t, a)
        check(lambda x, y: torch.cat([x, y, x]), a, b)


def test_more_dimensions_than_kept_inline():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 2, 3, 2, 3, 2, generator=g)
    for _ in range(2):
        check(lambda t: t + 1, x)
        check(lambda t: t.transpose(1, 5) * 2, x)
        check(lambda t: t + 1, x[..., 0])  # six dimensions, then seven again


def test_conjugate_and_negative_views():
    g = torch.Generator().manual_seed(4)
    z = torch.randn(4, 4, dtype=torch.complex64, generator=g)
    for _ in range(2):
        check(lambda t: t * 2, z)
        check(lambda t: t.conj() * 2, z)  # a conjugate view: the alias must carry the bit
        check(lambda t: t * 2, z)  # and drop it again
        check(lambda t: t.conj().imag * 1, z)  # a negative view


def test_an_out_argument_the_kernel_reshapes():
    g = torch.Generator().manual_seed(5)
    a, b = torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)
    na, fa = both(a)
    nb, fb = both(b)
    for _ in range(3):
        # out= larger than the result: the kernel reshapes it in place (no new memory), so its alias
        # goes back to the pool shaped (2, 3) under the key of (12,)
        n_out, f_out = torch.empty(12, device=NATIVE), torch.empty(12, device="flagos")
        with pytest.warns(UserWarning, match="resized"):
            torch.add(na, nb, out=n_out)
        with pytest.warns(UserWarning, match="resized"):
            torch.add(fa, fb, out=f_out)
        assert f_out.shape == n_out.shape == (2, 3)
        torch.testing.assert_close(f_out.cpu(), n_out.cpu(), rtol=0, atol=0)
        # tensors of the out= argument's first shape, borrowed next
        check(lambda t: t * 5, torch.arange(12.0))
        check(lambda t: t * 5, torch.arange(6.0).reshape(2, 3))


def pool_stats() -> tuple[int, int, int]:
    """(borrows, aliases made, aliases reshaped) of this thread's native-route pool so far."""
    import torch_fl

    return torch_fl._C._alias_pool_stats()


def test_a_repeated_forward_makes_and_reshapes_no_alias():
    # Every geometry of a warm model's forward finds its own alias at home, also in a pool that other
    # shapes filled before: geometries that differ only in their middle dimensions (the attention heads'
    # two layouts) once took one alias from each other on every use, a reshape each time.
    pytest.importorskip("transformers")
    from torch_fl.models import qwen3

    model = qwen3.build("tiny", seed=0).to("flagos")
    other, ids = (qwen3.tokens(model.config.vocab_size, b, n).to("flagos") for b, n in ((2, 50), (3, 37)))
    with torch.no_grad():
        model(input_ids=other, use_cache=False)
        before = pool_stats()
        for _ in range(2):
            model(input_ids=ids, use_cache=False)
        warm = pool_stats()
        model(input_ids=ids, use_cache=False)
    after = pool_stats()
    assert sum(warm[1:]) > sum(before[1:])  # new geometries: their first borrows missed
    assert after[0] > warm[0] + 100  # the forward borrowed through the pool
    assert after[1:] == warm[1:]


def test_an_optimizer_step_makes_no_alias_once_warm():
    # AdamW's fused and _foreach kernels take every parameter in lists: the borrows past a call's first few
    # are pooled by their position in the call, so a warm step makes no alias (it once made one per tensor),
    # and a position that meets another geometry (the next list op) is reshaped, with the right values.
    shapes = [(3, 5), (5,), (2, 3, 4), (5, 3), (7,), (3, 5)] * 6  # 36 tensors, repeated geometries
    params = {d: [torch.nn.Parameter(torch.randn(s, generator=torch.Generator().manual_seed(i)).to(d))
                  for i, s in enumerate(shapes)] for d in (NATIVE, "flagos")}  # fmt: skip
    opts = {d: torch.optim.AdamW(p, lr=0.1, foreach=True) for d, p in params.items()}

    def step(d):
        for p in params[d]:
            p.grad = p.detach() * 0.5 + 1
        torch.nn.utils.clip_grad_norm_(params[d], 1.0)
        opts[d].step()

    for _ in range(2):
        step(NATIVE)
        step("flagos")
    before = pool_stats()
    step("flagos")
    after = pool_stats()
    step(NATIVE)
    assert after[0] > before[0] + 5 * len(shapes)  # the step's lists went through the pool
    assert after[1] == before[1]  # no alias made
    for n, f in zip(params[NATIVE], params["flagos"], strict=True):
        torch.testing.assert_close(f.detach().cpu(), n.detach().cpu())
    # Another call of other lengths and geometries at the same positions gets its own values.
    xs = [torch.arange(6.0 + k).reshape(-1)[: 2 + k % 5] for k in range(40)]
    for n, f in zip(torch._foreach_mul([x.to(NATIVE) for x in xs], 3.0),
                    torch._foreach_mul([x.to("flagos") for x in xs], 3.0), strict=True):  # fmt: skip
        assert f.shape == n.shape
        torch.testing.assert_close(f.cpu(), n.cpu(), rtol=0, atol=0)


def test_a_kernel_that_raises_leaves_the_pool_usable():
    # The aliases of a call whose kernel raises are dropped and their slots freed: left marked as out on a
    # borrow, a few such calls would leave a geometry no slot, and every later borrow of it a new alias.
    a = torch.randn(3, 4, device="flagos")
    bad = torch.randn(5, 6, device="flagos")
    for _ in range(10):
        with pytest.raises(RuntimeError):
            torch.mm(a, bad)
    _ = a * a
    warm = pool_stats()
    for _ in range(10):
        _ = a * a
    after = pool_stats()
    # one borrow a call: one tensor twice is one alias twice, as the native call gets one tensor twice
    assert after[0] == warm[0] + 10 and after[1:] == warm[1:]


def test_each_thread_borrows_from_a_pool_of_its_own():
    # Every thread that routes calls has a pool of its own: two threads on one pool would lend one
    # alias to both at once (training's backward runs on the autograd engine's device thread).
    import threading

    a = torch.randn(3, 4, device="flagos")
    _ = a * a  # this thread's pool exists before the other thread borrows
    main_before = pool_stats()
    seen = {}

    def work():
        before = pool_stats()
        seen["results"] = [a * a for _ in range(10)]
        seen["borrows"] = pool_stats()[0] - before[0]

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen["borrows"] == 10  # counted in the other thread's own pool (one alias for a twice)
    assert pool_stats()[0] == main_before[0]  # and none in this thread's
    for r in seen["results"]:
        torch.testing.assert_close(r.cpu(), a.cpu() * a.cpu(), rtol=0, atol=0)
