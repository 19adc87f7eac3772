"""docs/operator-support.md is generated from sweep JSON: the three columns and the summary rows."""

import pytest

from torch_fl.conformance.report import NOT_RUN, render

pytestmark = pytest.mark.anyplatform


def sweep(backing, ops, route_ops=()):
    counts = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for r in ops.values():
        counts[r["status"]] += 1
    judged = counts["pass"] + counts["fail"] + counts["error"]
    return {
        "meta": {
            "backend": "flaggems" if route_ops else "native",
            "route_ops": list(route_ops),
            "backing": backing,
            "torch": "t",
            "dtypes": "default",
            "backward": True,
            "seconds": 1.0,
        },
        "summary": {"ops": len(ops), **counts, "pass_rate_judged": counts["pass"] / judged if judged else None},
        "ops": ops,
    }


def op(status, passed=1, judged=1, error=None):
    c = {
        "pass": passed,
        "fail": judged - passed if status == "fail" else 0,
        "error": judged - passed if status == "error" else 0,
        "skip": 0,
    }
    return {"status": status, "counts": c, "first_error": error, "skip_reason": None}


def test_host_only_says_what_was_not_run():
    text = render(sweep("cpu", {"abs": op("pass")}), None)
    assert f"| native | cuda | {NOT_RUN}" in text and f"| flaggems | cuda | {NOT_RUN}" in text
    assert f"| `abs` | pass (1/1) | {NOT_RUN} | {NOT_RUN} |  |" in text


def test_all_three_columns_and_the_cuda_failures():
    host = sweep("cpu", {"abs": op("pass"), "mul": op("pass")})
    cuda = sweep("cuda", {"abs": op("pass"), "mul": op("fail", 1, 2, "[float32 sample 1] forward: boom")})
    gems = sweep("cuda", {"abs": op("error", 0, 1, "x")}, route_ops=["own"])
    text = render(host, gems, cuda)
    assert "| flaggems (each op's own overloads) | cuda | 1 | 0 | 0 | 1 |" in text
    assert "## Native failures (cuda)" in text and "| `mul` | fail | [float32 sample 1] forward: boom |" in text
    assert "## Native failures (host)" not in text
    assert "| `abs` | pass (1/1) | pass (1/1) | error (0/1) |" in text
    assert "| `mul` | pass (1/1) | fail (1/2) | — |" in text


def test_flaggems_runs_merge_later_wins_and_unreached_ops_are_listed():
    from torch_fl.conformance.report import merge

    first = sweep("cuda", {"abs": op("pass"), "hstack": op("fail", 0, 1, "grads None")}, route_ops=["own"])
    first["meta"].update(date="d1", not_run=["mean", "sum"])
    second = sweep("cuda", {"hstack": op("pass"), "mean": op("pass")}, route_ops=["own"])
    second["meta"].update(date="d2", not_run=[])
    doc = merge([first, second])
    assert doc["ops"]["hstack"]["status"] == "pass" and doc["ops"]["abs"]["status"] == "pass"
    assert doc["meta"]["not_run"] == ["sum"] and doc["meta"]["seconds"] == 2.0
    assert doc["summary"]["ops"] == 3 and doc["summary"]["pass"] == 3
    assert "1 ops not run (deadline)" in render(sweep("cpu", {"abs": op("pass")}), doc)
    doc["ops"]["abs"].update(routed={}, fell_back={"abs": 3})  # every sample needed a gradient, say
    row = f"| `abs` | — | {NOT_RUN} | pass (1/1), no call ran on FlagGems (all fell back) |"
    assert row in render(sweep("cpu", {}), doc)
    native = sweep("cuda", {"abs": op("pass")})
    with pytest.raises(ValueError, match="different backend"):
        merge([first, native])
