"""CI slice of the OpInfo sweep: ~40 representative ops pass on flagos (native route)."""

import pytest

from torch_fl.conformance import SUBSET_CI, run_sweep


@pytest.mark.anyplatform
def test_ci_subset_passes():
    results = run_sweep(SUBSET_CI, limit=8, backward=True)
    assert len(results) >= len(SUBSET_CI)  # some names have several variants
    bad = {k: (r["status"], r["first_error"]) for k, r in results.items() if r["status"] != "pass"}
    assert not bad, bad
