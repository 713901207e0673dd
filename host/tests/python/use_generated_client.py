"""Uses the client openapi-python-client generated from the served document,
unmodified: pages through every collection with cursors and reads one
record of each, counts by summary, exports every collection (streamed
through the client's own HTTP client, and with the generated export
operation), follows the change feed and reads a finding's history. Prints what it saw as JSON for host/tests/it/openapi.rs.

Usage: use_generated_client.py BASE_URL API_KEY
"""

import json
import sys
import uuid

from esr_client import AuthenticatedClient
from esr_client.api.changes import list_changes
from esr_client.api.endpoints import export_endpoints, get_endpoint, list_endpoints, summarize_endpoints
from esr_client.api.remediation_scopes import export_scopes, get_scope, list_scopes
from esr_client.api.remediation_targets import (
    export_remediation_targets,
    get_remediation_target,
    list_remediation_targets,
    summarize_remediation_targets,
)
from esr_client.api.vulnerability_findings import (
    export_vulnerability_findings,
    get_vulnerability_finding,
    get_vulnerability_finding_history,
    list_vulnerability_findings,
    summarize_vulnerability_findings,
)
from esr_client.types import UNSET

COLLECTIONS = {
    "endpoints": (list_endpoints, get_endpoint, "endpoint_id"),
    "remediation-targets": (list_remediation_targets, get_remediation_target, "target_id"),
    "scopes": (list_scopes, get_scope, "scope_id"),
    "vulnerability-findings": (list_vulnerability_findings, get_vulnerability_finding, "finding_id"),
}


# Summaries grouped by fields every record holds: the groups add up to the total.
SUMMARIES = {
    "endpoints": (summarize_endpoints, "osFamily,hasAgent"),
    "remediation-targets": (summarize_remediation_targets, "status,targetType"),
    "vulnerability-findings": (summarize_vulnerability_findings, "severity,status"),
}


EXPORTS = {
    "endpoints": export_endpoints,
    "remediation-targets": export_remediation_targets,
    "scopes": export_scopes,
    "vulnerability-findings": export_vulnerability_findings,
}


def streamed_export(client, collection):
    """An export read line by line as it arrives: the records' ids and the last line."""
    ids, last = [], None
    with client.get_httpx_client().stream("GET", f"/v1/{collection}/export") as response:
        if response.status_code != 200:
            raise SystemExit(f"{collection} export: {response.status_code}")
        sequence = int(response.headers["esr-sequence"])
        for line in response.iter_lines():
            if not line:
                continue
            if last is not None:
                raise SystemExit(f"{collection} export: a line after the last one")
            record = json.loads(line)
            if "id" in record:
                ids.append(record["id"])
            else:
                last = record
    if last is None or last["sequence"] != sequence or last["count"] != len(ids):
        raise SystemExit(f"{collection} export did not end whole: {last!r}")
    return ids


def walk(client, list_operation):
    """Every record's id, following next_cursor; and the total the pages gave."""
    ids, cursor, total = [], UNSET, None
    while True:
        response = list_operation.sync_detailed(client=client, limit=100, cursor=cursor)
        if response.status_code != 200:
            raise SystemExit(f"{list_operation.__name__}: {response.status_code} {response.content!r}")
        page = response.parsed
        ids.extend(str(record.id) for record in page.data)
        total = page.total
        if page.next_cursor is None:
            return ids, total
        cursor = page.next_cursor


def main():
    base_url, key = sys.argv[1], sys.argv[2]
    client = AuthenticatedClient(base_url=base_url, token=key, raise_on_unexpected_status=True)
    seen = {}
    for collection, (list_operation, get_operation, id_argument) in COLLECTIONS.items():
        ids, total = walk(client, list_operation)
        if len(set(ids)) != len(ids):
            raise SystemExit(f"{collection}: a record came twice in the walk")
        first = get_operation.sync_detailed(client=client, **{id_argument: uuid.UUID(ids[0])})
        if first.status_code != 200 or str(first.parsed.id) != ids[0]:
            raise SystemExit(f"{collection}: reading {ids[0]} gave {first.status_code} {first.content!r}")
        seen[collection] = {"ids": len(ids), "total": total, "first": ids[0]}
    for collection, export_operation in EXPORTS.items():
        streamed = streamed_export(client, collection)
        whole = export_operation.sync_detailed(client=client)
        lines = [json.loads(line) for line in whole.content.splitlines() if line]
        if whole.status_code != 200 or [record.get("id") for record in lines[:-1]] != streamed:
            raise SystemExit(f"{collection}: the generated export operation answered another stream")
        seen[collection]["exported"] = len(set(streamed))
    for collection, (summarize, group_by) in SUMMARIES.items():
        response = summarize.sync_detailed(client=client, group_by=group_by)
        if response.status_code != 200:
            raise SystemExit(f"{collection} summary: {response.status_code} {response.content!r}")
        seen[collection]["summary_total"] = response.parsed.total
        seen[collection]["summary_counted"] = sum(group.count for group in response.parsed.groups)
    # The change feed, from the start, page by page.
    events, cursor, after = [], UNSET, 0
    while True:
        response = list_changes.sync_detailed(client=client, limit=2, cursor=cursor, after=after if cursor is UNSET else UNSET)
        if response.status_code != 200:
            raise SystemExit(f"changes: {response.status_code} {response.content!r}")
        page = response.parsed
        events.extend({"sequence": event.sequence, "id": str(event.id), "operation": str(event.operation)} for event in page.data)
        if page.next_cursor is None:
            seen["changes"] = {"events": events, "sequence": page.sequence}
            break
        cursor = page.next_cursor
    finding = uuid.UUID(seen["vulnerability-findings"]["first"])
    history = get_vulnerability_finding_history.sync_detailed(client=client, finding_id=finding)
    if history.status_code != 200:
        raise SystemExit(f"history: {history.status_code} {history.content!r}")
    seen["history"] = [str(entry.status) for entry in history.parsed.data]
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
