"""`lane.status()` is a record (LaneStatus of RankStatus); `status --json` still prints the keys,
in the order, that it printed when status was a dict (scripts read them)."""

from __future__ import annotations

import json

from sparkfleet.base.jsonable import to_jsonable
from sparkfleet.launch.report import LaneStatus, RankStatus

LANE_KEYS = ["weights", "lane", "ok", "ranks", "running", "expected", "head", "port", "endpoints", "errors",
             "ended"]  # fmt: skip
RANK_KEYS = ["host", "rank", "name", "running", "returncode", "detail", "orphan_pid", "pid", "container_id",
             "started_at"]  # fmt: skip


def _status() -> LaneStatus:
    ranks = [
        RankStatus("dgx1", 0, "sf-demo-r0", True, None, "running", None, 4242, None, 1.5),
        RankStatus("dgx2", 1, "sf-demo-r1", False, 137, "exited", None, None, "c0ffee", 2.5),
    ]
    errors = [{"host": "dgx2", "error": "memory watchdog: floor"}]
    endpoints = {"health": 200, "models_status": 200, "models": ["m"]}
    return LaneStatus("", "demo", False, ranks, 1, 2, "dgx1", 30000, endpoints, errors)


def test_status_json_keeps_the_dict_it_replaced():
    doc = json.loads(json.dumps(_status().to_dict()))
    assert list(doc) == LANE_KEYS
    assert [list(r) for r in doc["ranks"]] == [RANK_KEYS, RANK_KEYS]
    assert doc["ranks"][1] == {"host": "dgx2", "rank": 1, "name": "sf-demo-r1", "running": False,
                               "returncode": 137, "detail": "exited", "orphan_pid": None, "pid": None,
                               "container_id": "c0ffee", "started_at": 2.5}  # fmt: skip
    assert doc["endpoints"]["health"] == 200 and doc["errors"][0]["host"] == "dgx2"
    assert to_jsonable(_status()) == doc  # the generic JSON writer agrees with to_dict


def test_status_fields_read_as_attributes():
    st = _status()
    assert st.running < st.expected and [r.host for r in st.ranks if not r.running] == ["dgx2"]
