"""benchmarks/route_instructions.py's reading of callgrind_annotate output (valgrind itself is not needed)."""

from __future__ import annotations

import pytest

from benchmarks import route_instructions

ANNOTATE = """\
--------------------------------------------------------------------------------
Events shown:     Ir I1mr D1mr
--------------------------------------------------------------------------------
Ir                 I1mr           D1mr           file:function
--------------------------------------------------------------------------------
1,000,000 (50.0%)  10 ( 1.0%)  20 ( 2.0%)  ???:mkl_blas_sgemm [/lib/libtorch_cpu.so]
    6,192 ( 0.3%) 300 ( 3.0%)  41 ( 0.4%)  r.cpp:torch_fl::RoutedArgs::borrow_held(at::Tensor const&, bool) [/x/_C.so]
       10 ( 0.0%)   .           .          r.cpp:torch_fl::RoutedArgs::borrow_held(Tensor const&, bool) [clone .cold]
    2,064 ( 0.1%) 103 ( 1.0%)   .          x:torch_fl::(anonymous namespace)::Typed<at::_ops::mul_Tensor, T(A)>::call(A)
"""


@pytest.mark.anyplatform
def test_own_functions_sums_torch_fl_rows_with_dots_as_zeros():
    own = route_instructions.own_functions(ANNOTATE)
    # rows with "." (a zero) count: leaving them out once understated the route's functions by a tenth
    assert own["total"] == {"Ir": 6192 + 10 + 2064, "I1mr": 403, "D1mr": 41}
    assert [f["function"] for f in own["top"]] == [
        "torch_fl::RoutedArgs::borrow_held",
        "torch_fl::Typed<mul_Tensor>::call",
    ]
    assert own["top"][0] == {"function": "torch_fl::RoutedArgs::borrow_held", "Ir": 6202, "I1mr": 300, "D1mr": 41}


@pytest.mark.anyplatform
def test_own_functions_rejects_other_text():
    with pytest.raises(ValueError, match="callgrind_annotate"):
        route_instructions.own_functions("no profile here")
