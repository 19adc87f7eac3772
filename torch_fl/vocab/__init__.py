"""The words routing and the backends share: operator names, dtype names, errors.

A leaf: nothing here imports anything else of torch_fl, so `torch_fl.backends`
can use it without importing `torch_fl.routing` (routing depends on backends,
never the other way; tests/unit/test_routing_layers.py checks it).
"""
