"""A parallel worker's reports reach the controller whatever the test quoted."""

from __future__ import annotations

from tests import parallel


def test_a_report_quoting_a_lone_surrogate_is_sent_as_utf8_escapes() -> None:
    """The hostile-header tests decode odd bytes with ``surrogateescape``: a failure
    quoting one must still reach the controller, readable, not crash the run."""
    report = {
        "nodeid": "tests/x.py::test_y",
        "longrepr": {"reprcrash": {"message": "assert 'X-Odd: \udcff' == 'ok'"}},
        "sections": [("Captured log call", "header \udcfe\udcff dropped")],
        "duration": 0.5,
    }

    sent = parallel._sendable(report)

    assert sent["longrepr"]["reprcrash"]["message"] == "assert 'X-Odd: \\udcff' == 'ok'"
    assert sent["sections"] == [("Captured log call", "header \\udcfe\\udcff dropped")]
    assert sent["nodeid"] == report["nodeid"] and sent["duration"] == 0.5
    str(sent).encode("utf-8")  # nothing left that UTF-8 cannot carry
