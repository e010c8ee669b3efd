"""The Date header's text: RFC 9110's IMF-fixdate, as Go and the standard library write it."""

from __future__ import annotations

import email.utils

from hypothesis import given
from hypothesis import strategies as st

from trionsq.http.connection import http_date


def test_the_rfc_example() -> None:
    assert http_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT"


@given(st.integers(min_value=0, max_value=253402300799))  # to the end of year 9999
def test_same_text_as_the_standard_library(seconds: int) -> None:
    assert http_date(seconds) == email.utils.formatdate(seconds, usegmt=True)
