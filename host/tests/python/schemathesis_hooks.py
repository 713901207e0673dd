"""Schemathesis hooks for host/tests/it/openapi.rs.

A cursor is valid only when this server issued it for the same
organization, collection, filters and sort (the change feed's: the
organization and the collections followed). A generated token matches the
parameter's schema (an opaque string) and is rightly refused with 400,
which the positive-data check would report as a schema-valid request
rejected. Exactly that failure is dropped: a 400 whose only invalid
parameter is `cursor`, refused as not issued here. Every other failure
stands, and the Rust list tests cover cursors (walks, tampering, reuse).
The same holds for a summary given two range filters, for an export
resumed after an id that names no record of the organization (a generated
UUID: the export tests cover resuming), and for a link inferred from a
nullable reference followed where it is null (see below).
"""

import json

import schemathesis

CURSOR_NOT_ISSUED = "not a cursor issued for this collection, these filters and this sort"
FEED_CURSOR_NOT_ISSUED = "not a cursor issued for this feed and these collections"


def only_the_cursor_was_refused(response):
    return refused_only(
        response,
        lambda param: param in ({"name": "cursor", "reason": CURSOR_NOT_ISSUED}, {"name": "cursor", "reason": FEED_CURSOR_NOT_ISSUED}),
    )


def only_an_unknown_resume_point_was_refused(response):
    return refused_only(
        response,
        lambda param: param.get("name") == "after" and "of this organization" in param.get("reason", ""),
    )


def refused_only(response, expected):
    if response.status_code != 400:
        return False
    try:
        problem = json.loads(response.content)
    except ValueError:
        return False
    params = problem.get("invalid_params") or []
    return len(params) == 1 and expected(params[0])


def a_null_link_was_followed(case, response):
    """A link inferred from a nullable reference (a finding's
    `remediation_target_id` when it has no target) followed from a record
    where it is null: the path holds Python's `None`, which is no id, and
    400 invalid-id is the right answer."""
    if response.status_code != 400:
        return False
    parameters = getattr(case, "path_parameters", None) or {}
    if not any(value is None or value == "None" for value in parameters.values()):
        return False
    try:
        return json.loads(response.content).get("type") == "/v1/problems/invalid-id"
    except ValueError:
        return False


@schemathesis.hook
def filter_failure(context, failure, case, response):
    rejected_valid_data = getattr(failure, "code", None) == "ST202"
    return not (
        rejected_valid_data
        and (
            only_the_cursor_was_refused(response)
            or only_an_unknown_resume_point_was_refused(response)
            or a_null_link_was_followed(case, response)
        )
    )
