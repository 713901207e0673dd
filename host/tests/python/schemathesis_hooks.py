"""Schemathesis hooks for host/tests/openapi.rs.

A cursor is valid only when this server issued it for the same
organization, collection, filters and sort. A generated token matches the
parameter's schema (an opaque string) and is rightly refused with 400,
which the positive-data check would report as a schema-valid request
rejected. Exactly that failure is dropped: a 400 whose only invalid
parameter is `cursor`, refused as not issued here. Every other failure
stands, and the Rust list tests cover cursors (walks, tampering, reuse).
"""

import json

import schemathesis

CURSOR_NOT_ISSUED = "not a cursor issued for this collection, these filters and this sort"


def only_the_cursor_was_refused(response):
    if response.status_code != 400:
        return False
    try:
        problem = json.loads(response.content)
    except ValueError:
        return False
    return problem.get("invalid_params") == [{"name": "cursor", "reason": CURSOR_NOT_ISSUED}]


@schemathesis.hook
def filter_failure(context, failure, case, response):
    rejected_valid_data = getattr(failure, "code", None) == "ST202"
    return not (rejected_valid_data and only_the_cursor_was_refused(response))
