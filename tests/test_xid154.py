"""The driver's verdict after a GPU fault (NVRM Xid 154, `GPU recovery action changed from 0x0 (None) to 0x1 (GPU
Reset Required)`): read as its own kind (context, not another Xid to blame), and told in the reading of the fault it
follows, with what the action means."""

from __future__ import annotations

from pathlib import Path

from helpers import cli_incidents, cli_ingest

FELL = """\
2025-05-25T20:17:01+00:00 gpu3 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.
2025-05-25T20:17:01+00:00 gpu3 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.
2025-05-25T20:17:02+00:00 gpu3 kernel: NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)
"""
ECC = """\
2025-05-26T09:00:01+00:00 gpu4 kernel: NVRM: Xid (PCI:0000:18:00): 48, pid='<unknown>', name=<unknown>, DBE (double bit error) ECC error
2025-05-26T09:00:02+00:00 gpu4 kernel: NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)
"""


def test_a_gpu_off_the_bus_and_the_reboot_the_driver_asks_for(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"kern.log": FELL}))
    root = inc["root_cause"]
    assert (root["rule"], inc["headline"]) == ("xid.fallen_off_bus", "GPU 0000:3b:00 fell off the bus")
    assert ("(the driver asked for Node Reboot Required, that is: reboot the node; the fault may have left the OS in "
            "an inconsistent state)") in root["statement"]
    assert ("gpu_recovery_action", "xid.fallen_off_bus") in {(s["kind"], s["explained_by"]) for s in inc["symptoms"]}


def test_the_verdict_is_not_another_xid_to_blame(tmp_path: Path) -> None:
    [inc] = cli_incidents(cli_ingest(tmp_path, {"kern.log": ECC}))
    root = inc["root_cause"]
    # one Xid (48), not "the same GPU logging Xid errors repeatedly" (48 and 154)
    assert (root["rule"], inc["headline"]) == ("xid.single", "GPU 0000:18:00: Xid 48")
    assert "(The driver then asked for GPU Reset Required, that is: reset the GPU;" in root["statement"]
    assert [e["kind"] for e in inc["events"]].count("gpu_xid") == 1
