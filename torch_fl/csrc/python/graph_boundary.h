// The boundary of a compiled flagos graph that runs on the backing device
// (torch_fl/compile/native_graph.py): its inputs become native aliases at
// entry, its buffers are native, its outputs become flagos tensors at return,
// so the calls inside (matmuls, attention, fallbacks, custom operators) are
// the backing device's own, with no route between.
#pragma once

#include <torch/csrc/python_headers.h>

namespace torch_fl {
namespace python {

// _graph_inputs(args, native_ok[, aliases]): the graph's inputs as a tuple
// (clearing the list `args`, as inductor's wrappers do). Native aliases of the
// flagos ones when `native_ok` (the graph qualified when it compiled) and every
// operator still takes its native route (_set_graphs_native); the inputs
// unchanged otherwise. Either way it sets this thread's mode for
// _graph_empty_strided and _graph_outputs until the next graph's entry.
// `aliases` (the graph's _graph_entry_aliases()) keeps its parameters' aliases
// from one call to the next, by input position: a parameter's alias is reused
// while it is the same tensor over the same bytes and geometry, and holds no
// reference to the parameter's memory (a model freed frees its memory).
PyObject* graph_inputs(PyObject* module, PyObject* const* args, Py_ssize_t nargs);
// _graph_entry_aliases(): a graph's store of entry aliases for _graph_inputs.
PyObject* graph_entry_aliases(PyObject* module, PyObject* unused);
// _graph_empty_strided(size, stride, dtype, index): a buffer of the graph
// running on this thread: native in native mode, flagos otherwise.
PyObject* graph_empty_strided(PyObject* module, PyObject* const* args, Py_ssize_t nargs);
// _graph_outputs(outputs, index, positions): the outputs (a list the wrapper
// built) as a tuple; in native mode, those at `positions` as flagos tensors on
// flagos:index: fresh buffers retagged in place where nothing else holds them
// (the list's reference is taken), views of an input mapped back to its
// flagos storage.
PyObject* graph_outputs(PyObject* module, PyObject* const* args, Py_ssize_t nargs);
// Whether every operator takes its native route with nothing logged (routing
// sets it whenever its table or flags change).
void set_graphs_native(bool native);

}  // namespace python
}  // namespace torch_fl
