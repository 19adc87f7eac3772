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


HEADER = """\
--------------------------------------------------------------------------------
Events shown:     Ir I1mr
--------------------------------------------------------------------------------
Ir                 I1mr           file:function
--------------------------------------------------------------------------------
"""
NATIVE = (
    HEADER
    + """\
1,000,000 (50.0%)  10 ( 1.0%)  ???:mkl_blas_sgemm [/lib/libtorch_cpu.so]
    4,000 ( 0.2%) 400 ( 4.0%)  ???:torch::autograd::VariableType::mul_Tensor(A) [/lib/libtorch_cpu.so]
      800 ( 0.0%)  20 ( 0.2%)  ./malloc/./malloc/malloc.c:_int_malloc [/lib/libc.so.6]
"""
)
FLAGOS = (
    HEADER
    + """\
1,000,000 (50.0%)  10 ( 1.0%)  ???:mkl_blas_sgemm [/lib/libtorch_cpu.so]
    6,192 ( 0.3%) 300 ( 3.0%)  r.cpp:torch_fl::RoutedArgs::borrow_held(at::Tensor const&, bool) [/x/_C.so]
       10 ( 0.0%)  10 ( 0.1%)  r.cpp:torch_fl::RoutedArgs::borrow_held(Tensor const&, bool) [clone .cold] [/x/_C.so]
    1,800 ( 0.1%) 120 ( 1.2%)  ./malloc/./malloc/malloc.c:_int_malloc [/lib/libc.so.6]
      100 ( 0.0%)   5 ( 0.0%)  ???:c10::impl::wrap_kernel_functor_unboxed_<F<torch_fl::route::kernel>>::call(A)
"""
)


@pytest.mark.anyplatform
def test_added_by_function_ranks_what_flagos_adds_per_routed_call():
    added = route_instructions.added_by_function(NATIVE, FLAGOS, per=10)
    # a function's clones are one function; libc's and libtorch's rows count beside torch_fl's; what flagos runs
    # less of than native (VariableType, skipped by its autograd shortcut) and what it runs as often are left out
    assert added == [
        {"function": "torch_fl::RoutedArgs::borrow_held", "I1mr": 31.0, "Ir": 620.2},
        {"function": "_int_malloc", "I1mr": 10.0, "Ir": 100.0},
        {"function": "c10::impl::wrap_kernel_functor_unboxed_::call", "I1mr": 0.5, "Ir": 10.0},
    ]
    # a libtorch function with torch_fl in its template arguments is not one of torch_fl's own
    assert [f["function"] for f in route_instructions.own_functions(FLAGOS)["top"]] == [
        "torch_fl::RoutedArgs::borrow_held"
    ]
