"""ConsumerKeywords (what the ``client`` fixture's ``consumer`` passes on) names every
keyword option of ``open_consumer`` after its addresses, typed as it takes them."""

from __future__ import annotations

import inspect

from trionsq.client import open_consumer
from trionsq.client.consumer_settings import ConsumerKeywords

ADDRESSES = {"nsqd", "lookupd"}
"""Where to connect: the fixture gives its broker's address itself."""


def test_consumer_keywords_are_open_consumer_s_options_after_its_addresses() -> None:
    taken = {
        name: parameter.annotation
        for name, parameter in inspect.signature(open_consumer).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in ADDRESSES
    }
    typed = {
        name: getattr(hint, "__forward_arg__", hint)
        for name, hint in ConsumerKeywords.__annotations__.items()
    }
    assert typed == taken
    assert list(typed) == list(taken)  # in the same order, for a reader comparing them
