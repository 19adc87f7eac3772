"""Fixtures of the routing unit tests (isolated routing state, a fake flag_gems)."""

from tests.unit.routing_fixtures import fake_gems, routing_state  # noqa: F401
