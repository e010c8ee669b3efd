"""One error out of a nursery comes out as itself; several stay a group."""

from __future__ import annotations

import pytest
import trio

from trionsq.client.groups import single_errors


async def fail(error: Exception) -> None:
    raise error


async def nested_failure() -> None:
    with single_errors():
        async with trio.open_nursery() as outer, trio.open_nursery() as inner:
            inner.start_soon(fail, KeyError("alone"))
            outer.start_soon(trio.sleep_forever)


async def two_failures() -> None:
    with single_errors():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(fail, KeyError("a"))
            nursery.start_soon(fail, ValueError("b"))


async def test_a_single_error_through_nested_nurseries_is_raised_as_itself() -> None:
    with pytest.raises(KeyError, match="alone"):
        await nested_failure()


async def test_several_errors_stay_a_group() -> None:
    with pytest.raises(ExceptionGroup) as raised:
        await two_failures()
    assert len(raised.value.exceptions) == 2
